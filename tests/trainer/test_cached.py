"""Gradient-cache mode (hf_cse.cached, Gao et al. 2021): same gradients as the plain full-batch step.

* dropout 0: cached == plain exactly (up to float summation order);
* dropout on: the replayed forward reproduces the first pass bit-exactly (same RNG state => same masks), and
  the cached gradient equals the plain gradient computed with the same masks (plain training on the same
  mini-batches from the same RNG state, the loss on the concatenated embeddings);
* integrated in ContrastiveTrainer (``cached_minibatch_size``) with gradient accumulation: one optimizer step
  gives the parameters of the plain step.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from cached_helpers import BATCH, CHUNK, _assert_same_grads, _batch, _cached, _loss_fn, _model, _plain_step
from transformers import AutoTokenizer, TrainingArguments

from hf_cse.cached import (
    IncompatibleOptionsError,
    cached_mode_note,
    cached_step,
    check_cached_compatible,
    check_cached_run,
    check_cached_without_cuda_graphs,
    embed_minibatches,
    replay_minibatches,
    split_batch,
)
from hf_cse.data import TwoViewCollator
from hf_cse.losses import available_losses
from hf_cse.models.outputs import CSEOutput
from hf_cse.trainer import ContrastiveTrainer


def test_split_batch_rows(tiny_bert_dir, sentences):
    batch = _batch(tiny_bert_dir, sentences, 10)
    chunks = split_batch(batch, 4)
    assert [c["input_ids"].shape[0] for c in chunks] == [4, 4, 2]
    assert torch.equal(torch.cat([c["input_ids"] for c in chunks]), batch["input_ids"])


def test_cached_equals_plain_without_dropout(tiny_bert_dir, sentences):
    """Batch 16 split into 4 mini-batches, dropout 0: the gradient of the full-batch step."""
    model = _model(tiny_bert_dir, 0.0)
    batch = _batch(tiny_bert_dir, sentences)
    plain_loss, plain = _plain_step(model, [batch])
    loss, cached, _ = _cached(model, batch)
    assert torch.allclose(loss, plain_loss, atol=1e-6)
    _assert_same_grads(cached, plain)


@pytest.mark.skipif("gs_infonce" not in available_losses(), reason="gs_infonce not registered")
def test_rng_continues_after_the_step(tiny_bert_dir, sentences):
    """After the replay the RNG continues from the first pass + the loss's draws (GS noise), as after a plain
    step: the next step draws fresh numbers, not the noise again as dropout masks."""
    model = _model(tiny_bert_dir, 0.1, loss="gs_infonce")
    batch = _batch(tiny_bert_dir, sentences)
    loss_fn = _loss_fn(model)
    torch.manual_seed(11)
    embeddings, _, _ = embed_minibatches(model, split_batch(batch, CHUNK))
    loss_fn(embeddings)  # draws the noise
    expected = torch.rand(3)
    torch.manual_seed(11)
    model.zero_grad()
    cached_step(model, batch, CHUNK, loss_fn, backward=lambda s: s.backward())
    assert torch.equal(torch.rand(3), expected)


def test_replay_reproduces_embeddings_bit_exactly(tiny_bert_dir, sentences):
    model = _model(tiny_bert_dir, 0.1)
    chunks = split_batch(_batch(tiny_bert_dir, sentences), CHUNK)
    first, states, _ = embed_minibatches(model, chunks)
    grads = {k: torch.zeros_like(v) for k, v in first.items()}
    replayed = list(replay_minibatches(model, chunks, states, grads, backward=lambda s: s.backward()))
    for name in first:
        assert torch.equal(torch.cat([r[name] for r in replayed]), first[name])
    # dropout really is on: a fresh forward of the same rows draws other masks
    other = model(**chunks[0]).embeddings["z1"]
    assert not torch.equal(other, first["z1"][:CHUNK])


def test_cached_equals_plain_with_same_dropout_masks(tiny_bert_dir, sentences):
    model = _model(tiny_bert_dir, 0.1)
    batch = _batch(tiny_bert_dir, sentences)
    torch.manual_seed(123)  # the plain reference draws its masks chunk by chunk from this state...
    plain_loss, plain = _plain_step(model, split_batch(batch, CHUNK))
    torch.manual_seed(123)  # ... as the cached first pass does (and its replay, from the recorded states)
    loss, cached, _ = _cached(model, batch)
    assert torch.allclose(loss, plain_loss, atol=1e-6)
    _assert_same_grads(cached, plain)


@pytest.mark.skipif("off_dropout_infonce" not in available_losses(), reason="off_dropout_infonce not registered")
def test_cached_off_dropout_third_pass(tiny_bert_dir, sentences):
    """ImSimCSE's no-dropout pass (and DCL) per mini-batch: still the plain gradient with the same masks."""
    config = {"loss": "off_dropout_infonce", "off_dropout": True}
    if "dcl" in available_losses():
        config["dcl_weight"] = 0.1
    model = _model(tiny_bert_dir, 0.1, **config)
    batch = _batch(tiny_bert_dir, sentences)
    torch.manual_seed(7)
    _, plain = _plain_step(model, split_batch(batch, CHUNK))
    torch.manual_seed(7)
    _, cached, metrics = _cached(model, batch)
    _assert_same_grads(cached, plain)
    assert metrics["off_dropout_seconds"] > 0


def _train_one_step(model_dir, sentences, tmp_path, cached):
    # float64: the two paths sum the same terms in a different order (mini-batches vs one batch, and a
    # thread-count-dependent reduction order), which in float32 moves single entries by ~3e-7 after lr 0.5
    model = _model(model_dir, 0.0).double()
    tok = AutoTokenizer.from_pretrained(model_dir)
    data = [dict(tok(s, truncation=True, max_length=32)) for s in (sentences * 2)[:BATCH]]
    args = TrainingArguments(output_dir=str(tmp_path), use_cpu=True, per_device_train_batch_size=8,
                             gradient_accumulation_steps=2, max_steps=1, optim="sgd", learning_rate=0.5,
                             lr_scheduler_type="constant", max_grad_norm=0.0, report_to="none", save_strategy="no",
                             disable_tqdm=True, seed=0, data_seed=0, logging_steps=1)
    trainer = ContrastiveTrainer(model=model, args=args, train_dataset=data, data_collator=TwoViewCollator(tok),
                                 cached_minibatch_size=cached)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    trainer.train()
    logged = [e for e in trainer.state.log_history if "loss" in e][0]
    return {n: p.detach() - before[n] for n, p in model.named_parameters()}, logged


@pytest.mark.slow
def test_trainer_cached_mode_with_gradient_accumulation(tiny_bert_dir, sentences, tmp_path):
    """2 accumulation steps of 8 sentences, encoder mini-batches of 3: the plain trainer's SGD update."""
    plain, plain_log = _train_one_step(tiny_bert_dir, sentences, tmp_path / "plain", None)
    cached, cached_log = _train_one_step(tiny_bert_dir, sentences, tmp_path / "cached", 3)
    assert any(d.abs().max() > 0 for d in plain.values())
    _assert_same_grads(cached, plain, atol=1e-7, rtol=1e-4)
    assert cached_log["loss"] == pytest.approx(plain_log["loss"], rel=1e-5)
    assert cached_log["contrastive_loss"] == pytest.approx(plain_log["contrastive_loss"], rel=1e-5)


def test_incompatible_options_are_refused(tiny_bert_dir):
    model = _model(tiny_bert_dir, 0.0, projector="batchnorm")
    with pytest.raises(IncompatibleOptionsError, match="batchnorm"):
        check_cached_compatible(model.config, 4)
    for bad in (0, -2, 1.5, True):
        with pytest.raises(IncompatibleOptionsError, match="positive integer"):
            check_cached_compatible(model.config, bad)


def test_diffcse_is_refused(tiny_bert_dir):
    from hf_cse.models import METHODS

    if "diffcse" not in METHODS:
        pytest.skip("DiffCSE not present")
    config = METHODS["diffcse"].config_class(encoder_config={"model_type": "bert"}, projector="mlp")
    with pytest.raises(IncompatibleOptionsError, match="diffcse"):
        check_cached_compatible(config, 4)


def test_aux_losses_are_refused(tiny_bert_dir, sentences):
    """A model that computes per-process auxiliary losses in its forward (DiffCSE's RTD) cannot be cached."""
    model = _model(tiny_bert_dir, 0.0)
    plain_forward = model.forward

    def forward_with_aux(**inputs):
        out = plain_forward(**inputs)
        return CSEOutput(embeddings=out.embeddings, aux_losses={"rtd_loss": out.embeddings["z1"].sum() * 0})

    model.forward = forward_with_aux
    with pytest.raises(IncompatibleOptionsError, match="auxiliary losses"):
        _cached(model, _batch(tiny_bert_dir, sentences))


@pytest.mark.parametrize("mode, backend, device, refused", [
    ("reduce-overhead", None, "cuda", "torch_compile_mode reduce-overhead"),
    ("max-autotune", None, "cuda", "torch_compile_mode max-autotune"),
    (None, "cudagraphs", "cuda", "torch_compile_backend cudagraphs"),
    ("max-autotune-no-cudagraphs", None, "cuda", None), ("default", "inductor", "cuda", None),
    ("reduce-overhead", None, "cpu", None)])
def test_cached_mode_is_refused_under_cuda_graphs(mode, backend, device, refused):
    """CUDA graphs overwrite a graph's outputs at its next replay, and the cached mode keeps every mini-batch's (it
    failed so on an H200; tests/trainer/test_cuda.py runs it there); a CPU compiles without graphs."""
    args = SimpleNamespace(torch_compile=True, torch_compile_mode=mode, torch_compile_backend=backend,
                           device=torch.device(device))
    if refused:
        with pytest.raises(IncompatibleOptionsError, match=f"{refused} on a GPU"):
            check_cached_without_cuda_graphs(args, 4)
    else:
        check_cached_without_cuda_graphs(args, 4)
    check_cached_without_cuda_graphs(args, None)  # no cached mode: nothing to refuse


def test_a_cached_run_under_deepspeed_is_refused_after_the_models_checks():
    """DeepSpeed's engine takes one backward pass per step; the model's own refusal is said first."""
    from hf_cse.models import get_method

    args = SimpleNamespace(torch_compile=False, device=torch.device("cpu"))
    config = get_method("simcse").config_class(encoder_config={"model_type": "bert"})
    check_cached_run(config, args, 4, deepspeed=False)
    with pytest.raises(IncompatibleOptionsError, match="DeepSpeed's engine does not allow"):
        check_cached_run(config, args, 4, deepspeed=True)
    with pytest.raises(IncompatibleOptionsError, match="positive integer"):
        check_cached_run(config, args, 0, deepspeed=True)


def test_a_projector_that_declares_no_minibatch_split_is_refused(tiny_bert_dir):
    """The cached mode reads the projector's declaration, not its name: a head registered now, with the declaration,
    is refused with its own reason, and the same head declaring nothing is accepted."""
    from hf_cse.models import SimCSEConfig
    from hf_cse.models.heads import PROJECTORS, Projector, build_projector, register_projector

    class RowMixingHead(Projector):
        splits_into_minibatches = False
        why_no_minibatch_split = "it centres each row on the batch's mean row"

        def __init__(self, hidden_size: int):
            super().__init__()

        def forward(self, x):
            return x - x.mean(0, keepdim=True)

    class RowWiseHead(Projector):
        def __init__(self, hidden_size: int):
            super().__init__()

        def forward(self, x):
            return x

    try:
        register_projector("test_row_mixing")(RowMixingHead)
        register_projector("test_row_wise")(RowWiseHead)
        assert list(PROJECTORS)[-1] == "none"
        assert isinstance(build_projector("test_row_mixing", 8), RowMixingHead)
        mixing = SimCSEConfig(encoder_config={"model_type": "bert"}, projector="test_row_mixing")
        with pytest.raises(IncompatibleOptionsError, match="test_row_mixing projector: it centres each row"):
            check_cached_compatible(mixing, 4)
        check_cached_compatible(SimCSEConfig(encoder_config={"model_type": "bert"}, projector="test_row_wise"), 4)
    finally:
        PROJECTORS.pop("test_row_mixing", None)
        PROJECTORS.pop("test_row_wise", None)


def test_a_projector_saying_no_needs_its_reason():
    from hf_cse.models.heads import PROJECTORS, MLPProjector, Projector, register_projector

    class Unexplained(Projector):
        splits_into_minibatches = False

    with pytest.raises(ValueError, match="why_no_minibatch_split"):
        register_projector("test_unexplained")(Unexplained)
    with pytest.raises(ValueError, match="already registered"):
        register_projector("mlp")(Unexplained)
    register_projector("mlp")(MLPProjector)  # the same class again is fine
    assert "test_unexplained" not in PROJECTORS


def test_the_batch_log_line_says_whether_the_cache_is_used():
    """A cached_minibatch_size at least the batch trains plainly (docs/distributed.md), and the log said
    "encoder mini-batches of 9 (cached mode)" for a batch of 8."""
    assert cached_mode_note(None, 8) == cached_mode_note(0, 8) == ""
    assert cached_mode_note(3, 8) == "; encoder mini-batches of 3 (cached mode)"
    for size in (8, 9):
        assert cached_mode_note(size, 8) == (f"; cached mode off: a batch of 8 fits in one encoder mini-batch of "
                                             f"{size}, so each step trains plainly")
