"""CUDA checks (``pytest -m cuda`` on a machine with an NVIDIA GPU; skipped without one).

Mixed precision with the loss in fp32, the fast-dropout attention deferring to torch's fused SDPA dropout, the
cached mode replaying the CUDA RNG, no host synchronisation inside ``compute_loss`` (``torch.cuda`` raises on any
sync, including those hidden in ops such as boolean indexing), a single-GPU run_unsup.py run, and LLM2Vec's
setting (bf16 weights, flash attention 2, LoRA, last-token pooling, bidirectional) on a tiny Llama.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import shutil
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer, TrainingArguments

from hf_cse.cached import embed_minibatches, replay_minibatches, split_batch
from hf_cse.data import TwoViewCollator
from hf_cse.models import SimCSEModel
from hf_cse.models import fast_dropout as fd
from hf_cse.precision import describe
from hf_cse.trainer import ContrastiveTrainer

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU (CUDA)")]


def _trainer(model_dir, sentences, tmp_path, steps=2, logging_steps=1, cached_minibatch_size=None,
             cuda_graphs="off", model_cls=SimCSEModel, loss="infonce", **training_args):
    """A tiny trainer on the GPU; eager unless ``cuda_graphs`` says otherwise (its own tests turn it on)."""
    torch.manual_seed(0)
    model = model_cls.from_encoder(str(model_dir), **({} if loss is None else {"loss": loss}))
    tok = AutoTokenizer.from_pretrained(model_dir)
    data = [dict(tok(s, truncation=True, max_length=32)) for s in sentences]
    args = TrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=8, max_steps=steps,
                             report_to="none", save_strategy="no", logging_steps=logging_steps, disable_tqdm=True,
                             **training_args)
    return ContrastiveTrainer(model=model, args=args, train_dataset=data, data_collator=TwoViewCollator(tok),
                              processing_class=tok, cached_minibatch_size=cached_minibatch_size,
                              cuda_graphs=cuda_graphs)


@pytest.mark.parametrize("flag", ["bf16", "fp16"])
def test_mixed_precision_training_loss_in_fp32(tiny_bert_dir, sentences, tmp_path, flag):
    if flag == "bf16" and not torch.cuda.is_bf16_supported(including_emulation=False):
        pytest.skip("this GPU has no bf16")
    trainer = _trainer(tiny_bert_dir, sentences, tmp_path, **{flag: True})
    assert trainer.args.device.type == "cuda"
    seen = {}
    loss_fn = trainer.objectives[0].loss
    original = loss_fn.compute

    def spy(z1, z2, **extra):
        loss, metrics = original(z1, z2, **extra)
        seen.update(embedding=z1.dtype, loss=loss.dtype)
        return loss, metrics

    loss_fn.compute = spy
    trainer.train()
    losses = [e["loss"] for e in trainer.state.log_history if "loss" in e]
    assert len(losses) == 2 and all(torch.isfinite(torch.tensor(losses)))
    assert seen["embedding"] == {"bf16": torch.bfloat16, "fp16": torch.float16}[flag]
    assert seen["loss"] == torch.float32


def test_fast_dropout_defers_to_torch_on_cuda(tiny_bert_dir, sentences, monkeypatch):
    """On CUDA the fast dropout's attention goes to transformers' SDPA (fused dropout) and FastDropout to
    torch's dropout: the 16-bit mask trick is for CPUs only."""
    from transformers.integrations import sdpa_attention

    calls = {"sdpa": 0, "dropout": 0, "keep_mask": 0}
    real_sdpa, real_dropout, real_mask = sdpa_attention.sdpa_attention_forward, fd.nn.functional.dropout, fd.keep_mask
    monkeypatch.setattr(sdpa_attention, "sdpa_attention_forward",
                        lambda *a, **k: calls.__setitem__("sdpa", calls["sdpa"] + 1) or real_sdpa(*a, **k))
    monkeypatch.setattr(fd.nn.functional, "dropout",
                        lambda *a, **k: calls.__setitem__("dropout", calls["dropout"] + 1) or real_dropout(*a, **k))
    monkeypatch.setattr(fd, "keep_mask",
                        lambda *a, **k: calls.__setitem__("keep_mask", calls["keep_mask"] + 1) or real_mask(*a, **k))
    model = SimCSEModel.from_encoder(str(tiny_bert_dir), loss="infonce").cuda().train()
    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    batch = {k: v.cuda() for k, v in TwoViewCollator(tok)([tok(s) for s in sentences[:8]]).items()}
    model(**batch)
    assert calls["sdpa"] > 0 and calls["dropout"] > 0 and calls["keep_mask"] == 0


def test_cached_mode_replays_cuda_rng(tiny_bert_dir, sentences):
    torch.manual_seed(0)
    model = SimCSEModel.from_encoder(str(tiny_bert_dir), dropout=0.1).cuda().train()
    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    batch = {k: v.cuda() for k, v in TwoViewCollator(tok)([tok(s) for s in (sentences * 2)[:16]]).items()}
    chunks = split_batch(batch, 4)
    first, states, _ = embed_minibatches(model, chunks)
    assert states[0].devices  # the CUDA generator's state was captured
    grads = {k: torch.zeros_like(v) for k, v in first.items()}
    replayed = list(replay_minibatches(model, chunks, states, grads, backward=lambda s: s.backward()))
    for name in first:
        assert torch.equal(torch.cat([r[name] for r in replayed]), first[name])
    assert not torch.equal(model(**chunks[0]).embeddings["z1"], first["z1"][:4])  # dropout is on


def _with_syncs_allowed(fn):
    def allowed(*args, **kwargs):
        mode = torch.cuda.get_sync_debug_mode()
        torch.cuda.set_sync_debug_mode("default")
        try:
            return fn(*args, **kwargs)
        finally:
            torch.cuda.set_sync_debug_mode(mode)

    return allowed


def test_no_host_sync_in_compute_loss(tiny_bert_dir, sentences, tmp_path, monkeypatch):
    """Every host read of a CUDA value raises inside compute_loss (forward, gather, losses, metrics), except
    transformers' own SDPA mask check, which reads ``padding_mask.all()`` once per encoder forward (transformers >=
    5.2x, ``masking_utils._ignore_*_mask_sdpa``): that one is the encoder's, not hf_cse's, and is exempted by name."""
    from transformers import masking_utils

    for name in dir(masking_utils):
        if name.startswith("_ignore_") and name.endswith("_mask_sdpa"):
            monkeypatch.setattr(masking_utils, name, _with_syncs_allowed(getattr(masking_utils, name)))
    trainer = _trainer(tiny_bert_dir, sentences, tmp_path, steps=3, logging_steps=100, bf16=True)
    original = trainer.compute_loss

    def strict(*args, **kwargs):
        torch.cuda.set_sync_debug_mode("error")
        try:
            return original(*args, **kwargs)
        finally:
            torch.cuda.set_sync_debug_mode("default")

    trainer.compute_loss = strict
    trainer.train()
    assert trainer.state.global_step == 3


def test_padding_free_stays_off_on_cuda_and_its_packed_forward_matches(tiny_bert_dir, sentences, monkeypatch):
    """On CUDA the model runs padded (hf_cse.models.padding_free: the packed index would be a host sync); the packed
    forward itself, forced on the GPU (as benchmarks/gpu_check.py's padding part does), gives the padded forward's
    embeddings and gradients there too (fp32)."""
    from hf_cse.models import padding_free

    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    batch = {k: v.cuda() for k, v in tok(sentences[:8], padding=True, return_tensors="pt").items()}
    assert not batch["attention_mask"].all(), "the batch must hold padding"
    results = {}
    for forced in (False, True):
        torch.manual_seed(0)
        model = SimCSEModel.from_encoder(str(tiny_bert_dir), loss="infonce").cuda().eval()
        if forced:
            monkeypatch.setattr(padding_free, "DEVICE_TYPES", ("cpu", "cuda"))
        assert model.runs_padding_free("cuda") is forced
        emb = model.sentence_embedding(batch["input_ids"], batch["attention_mask"], pooler="avg")
        emb.pow(2).sum().backward()
        results[forced] = (emb.detach(), {n: p.grad for n, p in model.named_parameters() if p.grad is not None})
    torch.testing.assert_close(results[True][0], results[False][0], rtol=1e-5, atol=1e-5)
    assert results[True][1].keys() == results[False][1].keys()
    for name, grad in results[False][1].items():
        torch.testing.assert_close(results[True][1][name], grad, rtol=1e-4, atol=1e-5, msg=name)


def _no_dropout_copy(encoder_dir, folder):
    shutil.copytree(encoder_dir, folder)
    config = json.loads((folder / "config.json").read_text())
    config.update(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_cuda_graphs_train_as_eager_mode(tiny_bert_dir, sentences, tmp_path):
    """torch.compile's reduce-overhead mode (CUDA graphs: x1.44-1.75 at batch 64 on an H200, benchmarks/README.md
    section 12) trains as eager mode does: with dropout off (so no RNG is involved) both runs log the same losses."""
    encoder = _no_dropout_copy(tiny_bert_dir, tmp_path / "encoder")
    losses = {}
    for mode in (None, "reduce-overhead"):
        trainer = _trainer(encoder, sentences, tmp_path / str(mode), steps=4, torch_compile=mode is not None,
                           torch_compile_mode=mode)
        trainer.train()
        losses[mode] = [e["loss"] for e in trainer.state.log_history if "loss" in e]
    assert len(losses[None]) == 4 and len(set(losses[None])) > 1
    assert losses["reduce-overhead"] == pytest.approx(losses[None], rel=1e-4)


def test_compiled_step_takes_the_matmul_attention_and_trains_as_eager_mode(tiny_bert_dir, sentences, tmp_path,
                                                                           monkeypatch, caplog):
    """Under torch.compile on CUDA, sentences of at most 32 tokens take the matmul + softmax attention (x1.05 / x1.10
    the step at batch 64 / 1024 on an H100, benchmarks/README.md section 21), and train as the eager run does."""
    encoder = _no_dropout_copy(tiny_bert_dir, tmp_path / "encoder")
    taken, original = [], fd._matmul_attention
    monkeypatch.setattr(fd, "_matmul_attention", lambda *a: taken.append(1) or original(*a))
    losses = {}
    for compiled in (False, True):
        torch._dynamo.reset()
        with caplog.at_level(logging.INFO, logger="hf_cse"):
            trainer = _trainer(encoder, sentences, tmp_path / str(compiled), steps=4, cuda_graphs="on",
                               torch_compile=compiled)
        trainer.train()
        losses[compiled] = [e["loss"] for e in trainer.state.log_history if "loss" in e]
        assert bool(taken) == compiled  # eager mode keeps SDPA
    assert "matmul + softmax fused by the compiler" in caplog.text
    assert len(losses[False]) == 4 and len(set(losses[False])) > 1
    assert losses[True] == pytest.approx(losses[False], rel=1e-4)


@pytest.mark.parametrize("precision, rel", [("fp32", 1e-4), ("bf16", 2e-2)])
def test_cuda_graph_step_trains_as_eager_mode(tiny_bert_dir, sentences, tmp_path, precision, rel):
    """hf_cse's captured step (hf_cse/cuda_graphs.py: forward, loss and backward replayed as one CUDA graph, batches
    padded to a length bucket) trains as the eager step does: with dropout off both runs log the same losses, and the
    graph was captured and replayed (not silently skipped)."""
    encoder = _no_dropout_copy(tiny_bert_dir, tmp_path / "encoder")
    losses, trainers = {}, {}
    for mode in ("off", "on"):
        trainer = _trainer(encoder, sentences, tmp_path / mode, steps=8, cuda_graphs=mode, bf16=precision == "bf16")
        trainer.train()
        losses[mode], trainers[mode] = [e["loss"] for e in trainer.state.log_history if "loss" in e], trainer
    assert trainers["on"].graph_decision.on and not trainers["off"].graph_decision.on
    step = trainers["on"].graph_step
    assert step.failed is None and step.captures >= 1 and step.replays >= 8 - 2 * step.captures
    assert len(losses["off"]) == 8 and len(set(losses["off"])) > 1
    assert losses["on"] == pytest.approx(losses["off"], rel=rel)


@pytest.mark.parametrize("cached", [None, 4])
def test_captured_optimizer_step_trains_as_eager_mode(tiny_bert_dir, sentences, tmp_path, cached):
    """Clipping and the fused AdamW step replayed as a graph of their own (hf_cse/optimizer_graph.py) update the
    weights as the eager step does: with dropout off, a warm-up and decaying learning rate, weight decay and a clip
    that binds (max_grad_norm 0.001), both runs log the same losses and gradient norms, and the optimizer's graph did
    replay. At this learning rate the tiny model's gradient norm grows 1000-fold in 8 steps, which amplifies the last
    bits (CUDA's embedding backward adds with atomics, so two eager runs differ too): on an H100 the losses agreed to
    1e-4 (2026-11-27, first run) and 2.2e-4 (second run), relative, and the logged norms (4 digits) to 0.05 % and 2 %.
    The tolerances sit above those and well below what a graph that did not refill its learning rate would log (its
    rate frozen at the capture's, half the warm-up's peak or less: the later steps' losses then move by half as much,
    about 1 % off the eager run's)."""
    from hf_cse.optimizer_graph import GraphedOptimizer

    encoder = _no_dropout_copy(tiny_bert_dir, tmp_path / "encoder")
    logs, trainers = {}, {}
    for mode in ("off", "on"):
        trainer = _trainer(encoder, sentences, tmp_path / mode, steps=8, cuda_graphs=mode, learning_rate=1e-3,
                           warmup_steps=2, weight_decay=0.01, max_grad_norm=0.001, cached_minibatch_size=cached)
        trainer.train()
        logs[mode] = [(e["loss"], e["grad_norm"]) for e in trainer.state.log_history if "loss" in e]
        trainers[mode] = trainer
    graphed = trainers["on"].graphed_optimizer
    assert isinstance(graphed, GraphedOptimizer) and trainers["off"].graphed_optimizer is None
    assert graphed.failed is None and len(graphed.updates) >= 1 and graphed.replays >= 4
    assert len(logs["off"]) == 8 and min(norm for _, norm in logs["off"]) > 0.001  # the clip binds every step
    assert logs["off"][-1][0] < 0.99 * logs["off"][0][0]  # it trains (the comparison below means something)
    assert [loss for loss, _ in logs["on"]] == pytest.approx([loss for loss, _ in logs["off"]], rel=1e-3)
    assert [norm for _, norm in logs["on"]] == pytest.approx([norm for _, norm in logs["off"]], rel=5e-2)


def test_cuda_graph_step_with_dropout_follows_the_eager_curve(tiny_bert_dir, sentences, tmp_path):
    """With dropout on, each replay draws new masks (PyTorch's graph-safe generator): the loss curve of a tiny model
    follows the eager one (the same trend and level; step by step they differ, as the padded batch draws other
    masks), and no two replayed steps repeat a loss (a replay that reused its masks would)."""
    curves = {}
    for mode in ("off", "on"):
        trainer = _trainer(tiny_bert_dir, sentences, tmp_path / mode, steps=40, cuda_graphs=mode, learning_rate=1e-3)
        trainer.train()
        curves[mode] = [e["loss"] for e in trainer.state.log_history if "loss" in e]
    for curve in curves.values():
        assert sum(curve[-10:]) < sum(curve[:10])
    assert len(set(curves["on"])) == len(curves["on"])
    assert sum(curves["on"][-10:]) / 10 == pytest.approx(sum(curves["off"][-10:]) / 10, rel=0.15)


@pytest.mark.parametrize("cached", [None, 4])
def test_cuda_graph_step_draws_eager_modes_dropout_masks(tiny_bert_dir, sentences, tmp_path, monkeypatch, cached):
    """With dropout ON and batches kept at their own lengths (no bucket padding), a replay draws the masks the eager
    step draws (PyTorch's graph-safe generator: a replay starts at the generator's current offset), so both runs log
    the same losses (fp32). Cached mode (hf_cse/cached_graphs.py): each mini-batch's embed and backward graphs draw
    the same masks (the random state restored between them), so its gradient is the eager cached step's."""
    import hf_cse.cuda_graphs as cg

    monkeypatch.setattr(cg, "length_bucket", lambda length, cap: length)
    losses = {}
    for mode in ("off", "on"):
        trainer = _trainer(tiny_bert_dir, sentences, tmp_path / mode, steps=8, cuda_graphs=mode,
                           cached_minibatch_size=cached)
        trainer.train()
        losses[mode] = [e["loss"] for e in trainer.state.log_history if "loss" in e]
        if mode == "on":
            assert trainer.graph_step.failed is None and trainer.graph_step.replays >= 2
    assert losses["on"] == pytest.approx(losses["off"], rel=1e-4)


@pytest.mark.parametrize("method, loss", [("simcse", "gs_infonce"), ("imsimcse", None), ("simcse", "dcl")])
def test_methods_and_losses_capture(tiny_bert_dir, sentences, tmp_path, method, loss):
    """Random noise in the loss (GS-InfoNCE), ImSimCSE's third pass with dropout off and other losses capture and
    replay without a host read (a failed capture would set ``failed`` and fall back to eager)."""
    from hf_cse.models import get_method

    trainer = _trainer(tiny_bert_dir, sentences, tmp_path, steps=6, cuda_graphs="on", model_cls=get_method(method),
                       loss=loss, bf16=True)
    trainer.train()
    assert trainer.graph_step.failed is None and trainer.graph_step.replays >= 4
    assert all(torch.isfinite(torch.tensor([e["loss"] for e in trainer.state.log_history if "loss" in e])))


def test_cached_mode_under_cuda_graphs_is_refused(tiny_bert_dir, sentences, tmp_path):
    """The cached mode keeps each mini-batch's embeddings, which a CUDA graph's next replay overwrites (it failed so
    on an H200): refused in one line before training."""
    from hf_cse.cached import IncompatibleOptionsError

    with pytest.raises(IncompatibleOptionsError, match="torch_compile_mode reduce-overhead on a GPU"):
        _trainer(tiny_bert_dir, sentences, tmp_path, torch_compile=True, torch_compile_mode="reduce-overhead",
                 cached_minibatch_size=4)


def test_run_unsup_single_gpu_bf16(tiny_bert_dir, tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT))
    from hf_cse.cli import train as train_cli

    out = tmp_path / "out"
    train_cli.train_from_args(["--model_name_or_path", str(tiny_bert_dir), "--output_dir", str(out), "--max_steps",
                               "24", "--per_device_train_batch_size", "8", "--disable_tqdm", "true", "--precision",
                               "auto", "--save_strategy", "no"])
    info = json.loads((out / "training_info.json").read_text())
    expected = "bf16" if torch.cuda.is_bf16_supported(including_emulation=False) else "fp32"
    assert info["precision"] == describe(expected) and info["world_size"] == 1


@pytest.mark.skipif(importlib.util.find_spec("flash_attn") is None or importlib.util.find_spec("peft") is None,
                    reason="needs flash-attn and peft")
def test_llama_lora_bf16_flash_attention_trains_and_exports(tiny_llama_dir, tmp_path, monkeypatch):
    """LLM2Vec's setting on one GPU: bf16 weights, flash attention 2, LoRA, last-token pooling, bidirectional,
    activation checkpointing; the export is checked against the model when it is written."""
    monkeypatch.syspath_prepend(str(ROOT))
    from hf_cse.cli import train as train_cli

    out = tmp_path / "out"
    train_cli.train_from_args(["--model_name_or_path", str(tiny_llama_dir), "--output_dir", str(out), "--max_steps",
                    "2",
                    "--per_device_train_batch_size", "8", "--disable_tqdm", "true", "--torch_dtype", "bf16",
                    "--attn_implementation", "flash_attention_2", "--lora_r", "4", "--pooler_type", "last",
                    "--bidirectional", "--activation_checkpointing", "--precision", "bf16"])
    model = SimCSEModel.from_pretrained(out)
    assert model.config.encoder_attention == "flash_attention_2"
    assert (out / "sentence-transformers" / "model.safetensors").is_file()
