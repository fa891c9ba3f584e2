"""hf_cse.optimizer_graph on a CPU: the wrapper is the optimizer it wraps wherever it is not replaying a graph (the
replay itself is checked on a GPU, tests/trainer/test_cuda.py)."""

from __future__ import annotations

import pytest
import torch
from transformers import get_linear_schedule_with_warmup

from hf_cse.optimizer_graph import GraphedOptimizer, why_not_captured


def _model_and_optimizer(fused=True):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3))
    groups = [{"params": [model[0].weight, model[2].weight], "weight_decay": 0.01},
              {"params": [model[0].bias, model[2].bias], "weight_decay": 0.0}]
    return model, torch.optim.AdamW(groups, lr=1e-2, fused=fused, foreach=None if fused else True)


def _train(model, optimizer, steps=6, clip=1.0):
    scheduler = get_linear_schedule_with_warmup(optimizer, 2, steps)
    torch.manual_seed(1)
    for _ in range(steps):
        x = torch.randn(4, 6)
        model(x).pow(2).sum().backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
    return [p.detach().clone() for p in model.parameters()], scheduler


def test_unarmed_it_trains_as_the_optimizer_it_wraps_and_shares_its_state():
    model, optimizer = _model_and_optimizer()
    expected, _ = _train(model, optimizer)
    model2, optimizer2 = _model_and_optimizer()
    graphed = GraphedOptimizer(optimizer2, max_grad_norm=1.0)
    got, scheduler = _train(model2, graphed)
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    # the scheduler wrote its learning rates into the wrapped optimizer's groups, which are the wrapper's
    assert graphed.param_groups is optimizer2.param_groups
    assert optimizer2.param_groups[0]["lr"] == scheduler.get_last_lr()[0]
    assert graphed.state is optimizer2.state and len(graphed.state) == 4
    # checkpoints keep the optimizer's own format: a plain optimizer loads them
    state = graphed.state_dict()
    assert state.keys() == optimizer.state_dict().keys()
    fresh_model, fresh = _model_and_optimizer()
    fresh.load_state_dict(state)
    assert float(fresh.state[fresh_model[0].weight]["step"]) == 6
    assert graphed.replays == 0 and not graphed.armed and not graphed.updates


def test_the_norm_is_left_to_the_trainer_unless_armed():
    _, optimizer = _model_and_optimizer()
    graphed = GraphedOptimizer(optimizer, max_grad_norm=1.0)
    assert graphed.captured_norm() is None


@pytest.mark.parametrize("make, reason", [
    (lambda ps: torch.optim.SGD(ps, lr=0.1), "SGD is not torch's fused AdamW"),
    (lambda ps: torch.optim.AdamW(ps, lr=0.1, foreach=True), "not the fused one"),
    (lambda ps: torch.optim.AdamW(ps, lr=0.1, fused=True), None),
    (lambda ps: torch.optim.Adam(ps, lr=0.1, fused=True), None),
])
def test_which_optimizers_are_captured(make, reason):
    got = why_not_captured(make([torch.nn.Parameter(torch.zeros(2))]))
    assert got is None if reason is None else reason in got


@pytest.mark.slow
def test_a_trainer_without_cuda_graphs_keeps_its_optimizer(tiny_bert_dir, sentences, tmp_path):
    from transformers import AutoTokenizer, TrainingArguments

    from hf_cse.data import TwoViewCollator
    from hf_cse.models import SimCSEModel
    from hf_cse.trainer import ContrastiveTrainer

    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    args = TrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=4, max_steps=1, use_cpu=True,
                             report_to="none", save_strategy="no", disable_tqdm=True)
    trainer = ContrastiveTrainer(model=SimCSEModel.from_encoder(str(tiny_bert_dir)), args=args,
                                 train_dataset=[dict(tok(s)) for s in sentences], data_collator=TwoViewCollator(tok),
                                 processing_class=tok)
    trainer.create_optimizer()
    assert not trainer.graph_decision.on
    assert trainer.graphed_optimizer is None and not isinstance(trainer.optimizer, GraphedOptimizer)
    assert trainer.clipped_in_graph() is None
