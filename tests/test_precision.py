"""Precision and memory switches: bf16 / fp16 autocast (the loss in fp32), gradient checkpointing.

``torch.compile`` (``--torch_compile``) is tested with the ``aot_eager`` backend: graph capture and autograd
are checked, inductor's CPU code generation (minutes, see docs/distributed.md) is not.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer, TrainingArguments, modeling_utils

from hf_cse.data import TwoViewCollator
from hf_cse.losses import available_losses, build_loss
from hf_cse.models import SimCSEModel
from hf_cse.objectives import build_objectives, compute_objectives
from hf_cse.trainer import ContrastiveTrainer

ROOT = Path(__file__).resolve().parents[1]


def _data(model_dir, sentences):
    tok = AutoTokenizer.from_pretrained(model_dir)
    return tok, [dict(tok(s, truncation=True, max_length=32)) for s in sentences]


def _train(model_dir, sentences, tmp_path, steps=2, **precision):
    """Two optimizer steps of ContrastiveTrainer; returns the logged losses and the dtype the loss saw."""
    torch.manual_seed(0)
    model = SimCSEModel.from_encoder(model_dir, loss="infonce")
    tok, data = _data(model_dir, sentences)
    args = TrainingArguments(output_dir=str(tmp_path), use_cpu=True, per_device_train_batch_size=8, max_steps=steps,
                             report_to="none", save_strategy="no", logging_steps=1, disable_tqdm=True, **precision)
    trainer = ContrastiveTrainer(model=model, args=args, train_dataset=data, data_collator=TwoViewCollator(tok))
    seen = {}
    loss_fn = trainer.objectives[0].loss
    original = loss_fn.compute

    def spy(z1, z2, **extra):
        loss, metrics = original(z1, z2, **extra)
        seen.update(embedding=z1.dtype, loss=loss.dtype, autocast=torch.is_autocast_enabled("cpu"))
        return loss, metrics

    loss_fn.compute = spy
    trainer.train()
    losses = [e["loss"] for e in trainer.state.log_history if "loss" in e]
    return losses, seen


def test_bf16_autocast_finite_and_loss_in_fp32(tiny_bert_dir, sentences, tmp_path):
    losses, seen = _train(tiny_bert_dir, sentences, tmp_path, bf16=True)
    assert len(losses) == 2 and all(torch.isfinite(torch.tensor(losses)))
    # autocast wraps the model's forward only (accelerate); the loss runs outside it, in fp32
    assert seen["loss"] == torch.float32 and not seen["autocast"]


def test_fp16_on_cpu_finite(tiny_bert_dir, sentences, tmp_path):
    """torch >= 2.3 has CPU fp16 autocast and a CPU GradScaler, so --fp16 trains on CPU (slowly: no fp16
    kernels); on GPUs it is the papers' setting."""
    losses, seen = _train(tiny_bert_dir, sentences, tmp_path, fp16=True)
    assert len(losses) == 2 and all(torch.isfinite(torch.tensor(losses)))
    assert seen["loss"] == torch.float32


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_every_loss_computes_in_fp32_on_half_inputs(dtype):
    """Low-precision embeddings (a model run under autocast) give an fp32 loss equal to the fp32 computation."""
    torch.manual_seed(0)
    z1, z2 = torch.randn(16, 24).to(dtype), torch.randn(16, 24).to(dtype)
    for name in available_losses():
        loss_fn = build_loss(name)
        extra = {k: z2 for k in loss_fn.extra_inputs}
        torch.manual_seed(1)
        half = loss_fn(z1, z2, **extra).loss
        torch.manual_seed(1)
        full = loss_fn(z1.float(), z2.float(), **{k: v.float() for k, v in extra.items()}).loss
        assert half.dtype == torch.float32, name
        torch.testing.assert_close(half, full, msg=lambda m: f"{name}: {m}")


def _grads_after_step(model_dir, batch, checkpointing, dropout, seed=3):
    torch.manual_seed(0)
    model = SimCSEModel.from_encoder(model_dir, loss="off_dropout_infonce", off_dropout=True, dropout=dropout)
    if checkpointing:
        model.enable_activation_checkpointing()  # what run_unsup.py --activation_checkpointing does
    model.train()
    objectives = build_objectives(model.config)
    torch.manual_seed(seed)
    loss, _ = compute_objectives(objectives, model(**batch).embeddings)
    loss.backward()
    return loss.detach(), {n: p.grad for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.skipif("off_dropout_infonce" not in available_losses(), reason="off_dropout_infonce not registered")
@pytest.mark.parametrize("dropout", [0.0, 0.1])
def test_gradient_checkpointing_same_gradients_with_off_dropout_pass(tiny_bert_dir, sentences, dropout, monkeypatch):
    """Checkpointing on the wrapped encoder changes nothing (checkpoint replays the dropout RNG), including the
    third no-dropout pass (eval mode: not checkpointed) whose gradient still reaches the encoder."""
    tok, data = _data(tiny_bert_dir, sentences)
    batch = TwoViewCollator(tok)(data)
    loss_plain, plain = _grads_after_step(tiny_bert_dir, batch, False, dropout)
    calls = []
    real = modeling_utils.checkpoint  # what gradient_checkpointing_enable binds
    monkeypatch.setattr(modeling_utils, "checkpoint", lambda *a, **k: calls.append(1) or real(*a, **k))
    loss_ckpt, ckpt = _grads_after_step(tiny_bert_dir, batch, True, dropout)
    assert len(calls) == 2  # both layers of the two-view pass were checkpointed (the eval-mode pass is not)
    assert torch.isfinite(loss_ckpt)
    torch.testing.assert_close(loss_ckpt, loss_plain)
    assert plain.keys() == ckpt.keys()
    for name in plain:
        torch.testing.assert_close(ckpt[name], plain[name], atol=1e-7, rtol=1e-5, msg=lambda m: f"{name}: {m}")


@pytest.mark.parametrize("flag", ["--activation_checkpointing", "--gradient_checkpointing"])
def test_run_unsup_bf16_gradient_checkpointing_cached(tiny_bert_dir, tmp_path, monkeypatch, flag):
    """The script's switches together: --bf16, checkpointing (transformers 5's --activation_checkpointing or the
    deprecated --gradient_checkpointing), --cached_minibatch_size (+ off-dropout)."""
    monkeypatch.syspath_prepend(str(ROOT))
    import run_unsup

    enabled = []
    real = SimCSEModel.enable_activation_checkpointing

    def spy(model):
        real(model)
        enabled.extend(encoder.is_gradient_checkpointing for encoder in model.transformer_encoders())

    monkeypatch.setattr(SimCSEModel, "enable_activation_checkpointing", spy)

    extra = ["--loss", "off_dropout_infonce", "--off_dropout", "true"] if "off_dropout_infonce" in \
        available_losses() else []
    run_unsup.main(["--model_name_or_path", str(tiny_bert_dir), "--output_dir", str(tmp_path / "out"),
                    "--max_steps", "2", "--per_device_train_batch_size", "8", "--logging_steps", "1",
                    "--use_cpu", "true", "--bf16", "true", flag, "true",
                    "--cached_minibatch_size", "3", "--disable_tqdm", "true", *extra])
    state = json.loads((tmp_path / "out" / "trainer_state.json").read_text())
    losses = [e["loss"] for e in state["log_history"] if "loss" in e]
    assert len(losses) == 2 and all(torch.isfinite(torch.tensor(losses)))
    assert enabled == [True]  # the encoder checkpoints its layers
    assert sys.modules["run_unsup"] is run_unsup


def test_torch_compile_trains_finite(tiny_bert_dir, sentences, tmp_path):
    """``--torch_compile``: the Trainer compiles the method model (dynamo graph capture and autograd; the
    ``aot_eager`` backend skips inductor's C++ code generation, which takes minutes on CPU) and the loss stays
    finite while the weights move. ImSimCSE: the off-dropout pass and fast dropout (which defers to torch's
    dropout under compile) are captured in one graph, without graph breaks."""
    from hf_cse.models import ImSimCSEModel

    torch.manual_seed(0)
    model = ImSimCSEModel.from_encoder(str(tiny_bert_dir))
    tok, data = _data(tiny_bert_dir, sentences)
    args = TrainingArguments(output_dir=str(tmp_path), use_cpu=True, per_device_train_batch_size=8, max_steps=3,
                             report_to="none", save_strategy="no", logging_steps=1, disable_tqdm=True,
                             learning_rate=1e-3, torch_compile=True, torch_compile_backend="aot_eager")
    trainer = ContrastiveTrainer(model=model, args=args, train_dataset=data * 3, data_collator=TwoViewCollator(tok))
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    torch._dynamo.reset()
    counters = torch._dynamo.utils.counters
    counters.clear()
    trainer.train()
    assert counters["stats"]["unique_graphs"] > 0  # dynamo really captured the forward
    assert not counters["graph_break"], dict(counters["graph_break"])
    losses = [e["loss"] for e in trainer.state.log_history if "loss" in e]
    assert len(losses) == 3 and all(torch.isfinite(torch.tensor(losses)))
    assert any(not torch.equal(before[n], p) for n, p in model.named_parameters())
