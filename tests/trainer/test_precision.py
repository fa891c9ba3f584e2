"""Precision and memory switches: bf16 / fp16 autocast (the loss in fp32), gradient checkpointing.

``torch.compile`` (``--torch_compile``) is tested with the ``aot_eager`` backend: graph capture and autograd
are checked, inductor's CPU code generation (minutes, see docs/distributed.md) is not.
"""

from __future__ import annotations

import json
import logging
import math
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer, TrainingArguments, modeling_utils

from hf_cse import precision
from hf_cse.data import TwoViewCollator
from hf_cse.losses import available_losses, build_loss
from hf_cse.models import SimCSEModel
from hf_cse.models.fast_dropout import fast_dropout, keep_mask
from hf_cse.objectives import build_objectives, compute_objectives
from hf_cse.precision import PrecisionError
from hf_cse.trainer import ContrastiveTrainer

ROOT = Path(__file__).resolve().parents[2]


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


@pytest.mark.slow
def test_bf16_autocast_finite_and_loss_in_fp32(tiny_bert_dir, sentences, tmp_path):
    losses, seen = _train(tiny_bert_dir, sentences, tmp_path, bf16=True)
    assert len(losses) == 2 and all(torch.isfinite(torch.tensor(losses)))
    # autocast wraps the model's forward only (accelerate); the loss runs outside it, in fp32
    assert seen["loss"] == torch.float32 and not seen["autocast"]


def test_fp16_on_cpu_refused(tiny_bert_dir, sentences, tmp_path):
    """The Trainer runs fp16 on a CPU silently in fp32 (accelerate has no CPU fp16 autocast): refused instead."""
    with pytest.raises(PrecisionError, match="fp16 .* needs a GPU"):
        _train(tiny_bert_dir, sentences, tmp_path, fp16=True)


@pytest.mark.parametrize("name", ["fp16_full_eval", "bf16_full_eval"])
def test_a_full_eval_cast_that_no_dev_score_uses_is_refused(name, tiny_bert_dir, sentences, tmp_path):
    """Accepted and recorded in training_info.json, while the dev data was scored in fp32 all the same."""
    with pytest.raises(PrecisionError, match=f"^{name}=True does nothing here: the dev data is scored in the "
                                             "training precision") as refused:
        _train(tiny_bert_dir, sentences, tmp_path, **{name: True})
    assert refused.value.fields == (name,)


@pytest.mark.slow
def test_bf16_first_step_loss_equals_fp32(tiny_bert_dir, sentences, tmp_path):
    """Same weights, batch and dropout masks: the first step's loss under bf16 autocast is the fp32 one up to bf16
    rounding. bf16 keeps 8 significant bits (relative error up to 2**-9 per rounding) and the InfoNCE logits are
    cosines / 0.05, 20x the cosine error: 2 % leaves room for that (the difference measured here is 0.2 %)."""
    fp32, _ = _train(tiny_bert_dir, sentences, tmp_path / "fp32", steps=1)
    bf16, seen = _train(tiny_bert_dir, sentences, tmp_path / "bf16", steps=1, bf16=True)
    assert seen["embedding"] == torch.bfloat16  # the encoder really ran under autocast
    assert math.isfinite(bf16[0]) and bf16[0] != fp32[0]
    assert bf16[0] == pytest.approx(fp32[0], rel=0.02)


def test_resolve_auto_follows_native_bf16(monkeypatch):
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: True)
    assert precision.resolve("auto", "cpu")[0] == "bf16"
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: False)
    assert precision.resolve("auto", "cpu")[0] == "fp32"
    assert precision.resolve("bf16", "cpu")[0] == "bf16"  # asked for: runs (emulated), with a warning reason
    assert "hundreds of times slower than fp32" in precision.resolve("bf16", "cpu")[1]
    assert precision.emulated("bf16", "cpu") and not precision.emulated("fp32", "cpu")
    assert precision.resolve("fp32", "cuda")[0] == "fp32"
    with pytest.raises(PrecisionError):
        precision.resolve("fp16", "cpu")


def test_an_evaluation_speaks_of_scoring_and_warns_of_emulated_bf16(monkeypatch, caplog):
    """run_eval's refusal named fp16=True in training, its log and results.json losses in fp32, and bf16 emulated on
    this CPU went without the warning a training run gets."""
    with pytest.raises(PrecisionError, match=r"^precision fp16 needs a GPU: on a CPU fp16 matrix products are "
                                             r"emulated\. Use precision fp32, bf16 or auto on a CPU\.$"):
        precision.resolve("fp16", "cpu", scoring=True)
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: False)
    with caplog.at_level(logging.INFO, logger="hf_cse.precision"):
        precision.say_scoring_precision("bf16", "cpu")
        precision.say_scoring_precision("fp32", "cpu")
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("WARNING", f"precision: bf16 autocast on cpu ({precision.EMULATED_BF16}); precision fp32 scores faster here"),
        ("INFO", "precision: fp32 on cpu")]


def test_training_flags_combine_precision_and_trainer_flags(monkeypatch):
    monkeypatch.setattr(precision, "default_device_type", lambda use_cpu=False: "cpu")
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: True)
    # --bf16 alone on a CPU-only machine: use_cpu is set for the Trainer, which refuses bf16 on CPU without it
    assert precision.training_flags(None, True, False, False) == (
        {"bf16": True, "fp16": False, "use_cpu": True}, "bf16", "requested")
    assert precision.training_flags("auto", False, False, False)[1] == "bf16"
    assert precision.training_flags("fp32", False, False, False)[0] == {"bf16": False, "fp16": False}
    assert precision.training_flags(None, False, False, False)[1] == precision.resolve(
        precision.DEFAULT_PRECISION, "cpu")[0]
    with pytest.raises(PrecisionError, match="contradicts"):
        precision.training_flags("fp32", True, False, False)
    with pytest.raises(PrecisionError, match="exclude"):
        precision.training_flags(None, True, True, False)


def test_accelerate_launchs_mixed_precision_is_followed_or_the_conflict_refused(monkeypatch):
    """accelerate computes in its config's mixed_precision whatever the arguments say: auto follows it, an explicit
    other precision is refused in one line naming both ways out, and 'no' leaves the choice to precision."""
    monkeypatch.setattr(precision, "default_device_type", lambda use_cpu=False: "cpu")
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: False)
    assert precision.training_flags(None, False, False, False, "bf16")[1:] == (
        "bf16", "accelerate launch's mixed_precision bf16")
    assert precision.training_flags("auto", False, False, False, "bf16")[0]["bf16"]
    assert precision.training_flags("bf16", False, False, False, "bf16")[1] == "bf16"
    assert precision.training_flags(None, False, False, False, "no")[1] == "fp32"  # auto on an AVX2-only CPU
    with pytest.raises(PrecisionError, match="mixed_precision bf16 .* precision='fp32' was asked for: set "
                                             "precision='bf16', or launch with mixed_precision no"):
        precision.training_flags("fp32", False, False, False, "bf16")
    with pytest.raises(PrecisionError, match="hf_cse trains in fp32, bf16 or fp16"):
        precision.training_flags(None, False, False, False, "fp8")


@pytest.mark.slow
def test_run_unsup_bf16_on_cpu_without_use_cpu_records_precision(tiny_bert_dir, tmp_path, monkeypatch, caplog):
    """--bf16 alone works on a CPU, says so in one log line, and training_info.json and the model card record
    the precision that ran."""
    monkeypatch.syspath_prepend(str(ROOT))
    from hf_cse.cli import train as train_cli

    out = tmp_path / "out"
    with caplog.at_level(logging.INFO, logger="run_unsup"):
        train_cli.train_from_args(["--model_name_or_path", str(tiny_bert_dir), "--output_dir", str(out),
                        "--max_steps", "1",
                        "--per_device_train_batch_size", "8", "--disable_tqdm", "true", "--bf16", "true"])
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("precision:")]
    assert len(lines) == 1 and "bf16 autocast" in lines[0], lines
    info = json.loads((out / "training_info.json").read_text())
    assert info["precision"] == precision.describe("bf16") and info["training_args"]["bf16"] is True
    card = (out / "sentence-transformers" / "README.md").read_text()
    assert precision.describe("bf16") in card


@pytest.mark.slow
def test_run_unsup_fp32_records_fp32(tiny_bert_dir, tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT))
    from hf_cse.cli import train as train_cli

    out = tmp_path / "out"
    train_cli.train_from_args(["--model_name_or_path", str(tiny_bert_dir), "--output_dir", str(out), "--max_steps", "1",
                    "--per_device_train_batch_size", "8", "--disable_tqdm", "true", "--precision", "fp32"])
    info = json.loads((out / "training_info.json").read_text())
    assert info["precision"] == "fp32" and not info["training_args"]["bf16"] and not info["training_args"]["fp16"]


def test_fast_dropout_keep_rate_exact_under_bf16_autocast():
    """Under bf16 autocast (bf16 activations) the fast CPU dropout draws the same masks as in fp32, with the exact
    keep probability, and scales kept values by its inverse (rounded once to bf16)."""
    p, shape = 0.1, (64, 32, 384)
    torch.manual_seed(7)
    keep, keep_prob = keep_mask(torch.Size(shape), p)
    x = torch.randn(shape).to(torch.bfloat16)
    torch.manual_seed(7)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        layer = torch.nn.Linear(384, 384)  # an autocast op in front, as in the encoder
        out = fast_dropout(layer(x.float()), p, True)
    assert out.dtype == torch.bfloat16
    torch.manual_seed(7)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out_x = fast_dropout(x, p, True)
    assert torch.equal(out_x != 0, keep & (x != 0))  # the very mask of keep_mask(shape, p) at this seed
    assert torch.equal(out_x[keep], (x[keep].float() / keep_prob).to(torch.bfloat16))
    n = keep.numel()
    sigma = math.sqrt(keep_prob * (1 - keep_prob) / n)
    assert abs(keep.float().mean().item() - keep_prob) < 5 * sigma
    assert keep_prob == 1 - round(p * 65536) / 65536
    # the autocast path: backward keeps the mask and the scale
    x.requires_grad_(True)
    torch.manual_seed(7)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        fast_dropout(x, p, True).float().sum().backward()
    assert torch.equal(x.grad != 0, keep)


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


@pytest.mark.slow
@pytest.mark.parametrize("flag", ["--activation_checkpointing", "--gradient_checkpointing"])
def test_run_unsup_bf16_gradient_checkpointing_cached(tiny_bert_dir, tmp_path, monkeypatch, flag):
    """The script's switches together: --bf16, checkpointing (transformers 5's --activation_checkpointing or the
    deprecated --gradient_checkpointing), --cached_minibatch_size (+ off-dropout)."""
    monkeypatch.syspath_prepend(str(ROOT))
    from hf_cse.cli import train as train_cli

    enabled = []
    real = SimCSEModel.enable_activation_checkpointing

    def spy(model):
        real(model)
        enabled.extend(encoder.is_gradient_checkpointing for encoder in model.transformer_encoders())

    monkeypatch.setattr(SimCSEModel, "enable_activation_checkpointing", spy)

    extra = ["--loss", "off_dropout_infonce", "--off_dropout", "true"] if "off_dropout_infonce" in \
        available_losses() else []
    train_cli.train_from_args(["--model_name_or_path", str(tiny_bert_dir), "--output_dir", str(tmp_path / "out"),
                    "--max_steps", "2", "--per_device_train_batch_size", "8", "--logging_steps", "1",
                    "--use_cpu", "true", "--bf16", "true", flag, "true",
                    "--cached_minibatch_size", "3", "--disable_tqdm", "true", *extra])
    state = json.loads((tmp_path / "out" / "trainer_state.json").read_text())
    losses = [e["loss"] for e in state["log_history"] if "loss" in e]
    assert len(losses) == 2 and all(torch.isfinite(torch.tensor(losses)))
    assert enabled == [True]  # the encoder checkpoints its layers
    assert sys.modules["hf_cse.cli.train"] is train_cli


@pytest.mark.slow
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


@pytest.mark.slow
def test_run_eval_precision_recorded_and_close_to_fp32(tmp_path):
    """run_eval --precision bf16 encodes under autocast and records it in results.json; on a tiny random BERT and a
    toy STS-B the scores stay near fp32's (Spearman of cosines, which bf16 rounding moves only slightly)."""
    from eval_helpers import REPO, make_tiny_bert, write_toy_senteval

    sys.path.insert(0, str(REPO))
    from hf_cse.cli import evaluate as eval_cli

    tiny, se = make_tiny_bert(tmp_path / "tiny"), write_toy_senteval(tmp_path / "se")
    scores = {}
    for prec in ("fp32", "bf16"):
        out = tmp_path / prec
        assert eval_cli.main(["--model_name_or_path", str(tiny), "--senteval_data_dir", str(se), "--tasks",
                              "STS-B", "--output_dir", str(out), "--disable_tqdm", "--precision", prec]) == 0
        res = json.loads((out / "results.json").read_text())
        assert res["settings"]["precision"] == precision.describe_scoring(prec)  # no loss here
        scores[prec] = res["STSBenchmark"]
    assert scores["bf16"] == pytest.approx(scores["fp32"], abs=5.0)


def _precision_lines(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.getMessage().startswith("precision:")]


@pytest.mark.parametrize(("args_class", "asked", "fp32_instead"), [
    ("contrastive", {"precision": "bf16"}, "precision='auto' (without bf16=True) trains in fp32 here"),
    ("contrastive", {"bf16": True}, "precision='auto' (without bf16=True) trains in fp32 here"),
    ("plain", {"bf16": True}, "bf16=False trains in fp32"),
], ids=["precision_bf16", "bf16", "plain_bf16"])
@pytest.mark.parametrize("native", [True, False], ids=["native", "emulated"])
def test_a_trainer_built_from_python_says_its_precision_and_warns_where_bf16_is_emulated(
        args_class, asked, fp32_instead, native, tiny_bert_dir, sentences, tmp_path, monkeypatch, caplog):
    """Only the command line said the precision: a trainer built from Python in bf16 on a CPU without native bf16
    (emulated: hundreds of times slower) trained without a word. The CPU's kind is set here, so the test does not
    depend on the machine's."""
    from transformers import TrainingArguments

    from hf_cse.training_args import ContrastiveTrainingArguments

    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: native)
    monkeypatch.delenv("ACCELERATE_MIXED_PRECISION", raising=False)  # not under accelerate launch
    tok, data = _data(tiny_bert_dir, sentences[:16])
    args = (ContrastiveTrainingArguments if args_class == "contrastive" else TrainingArguments)(
        str(tmp_path / "out"), use_cpu=True, per_device_train_batch_size=8, report_to="none", **asked)
    with caplog.at_level(logging.INFO, logger="hf_cse"):
        ContrastiveTrainer(model=SimCSEModel.from_encoder(tiny_bert_dir), args=args, train_dataset=data,
                           data_collator=TwoViewCollator(tok))
    [line] = _precision_lines(caplog)  # once
    message = line.getMessage()
    assert message.startswith(f"precision: {precision.describe('bf16')} on cpu (")
    assert "--" not in message  # the library names arguments, not flags
    if native:
        assert line.levelno == logging.INFO and "emulated" not in message
    else:
        assert line.levelno == logging.WARNING
        assert precision.EMULATED_BF16 in message and message.endswith(f"); {fp32_instead}")


def test_a_trainer_in_fp32_says_so_at_info(tiny_bert_dir, sentences, tmp_path, monkeypatch, caplog):
    from hf_cse.training_args import ContrastiveTrainingArguments

    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: False)
    monkeypatch.delenv("ACCELERATE_MIXED_PRECISION", raising=False)
    tok, data = _data(tiny_bert_dir, sentences[:16])
    for asked, why in (("fp32", "requested"), ("auto", "auto: this CPU has no native bf16")):
        caplog.clear()
        args = ContrastiveTrainingArguments(str(tmp_path / asked), use_cpu=True, per_device_train_batch_size=8,
                                            report_to="none", precision=asked)
        with caplog.at_level(logging.INFO, logger="hf_cse"):
            ContrastiveTrainer(model=SimCSEModel.from_encoder(tiny_bert_dir), args=args, train_dataset=data,
                               data_collator=TwoViewCollator(tok))
        [line] = _precision_lines(caplog)
        assert (line.levelno, line.getMessage()) == (logging.INFO, f"precision: fp32 on cpu ({why})")


@pytest.mark.slow
def test_the_command_line_says_the_precision_once_with_its_flags(tiny_bert_dir, tmp_path, monkeypatch, caplog):
    """The trainer says the precision; the command line no longer says it a second time, and prints the way to
    fp32 with its flags."""
    monkeypatch.syspath_prepend(str(ROOT))
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: False)
    monkeypatch.delenv("ACCELERATE_MIXED_PRECISION", raising=False)
    from hf_cse.cli import train as train_cli

    with caplog.at_level(logging.INFO):
        assert train_cli.main(["--model_name_or_path", str(tiny_bert_dir), "--output_dir", str(tmp_path / "out"),
                               "--max_steps", "1", "--per_device_train_batch_size", "8", "--disable_tqdm", "true",
                               "--bf16", "true"]) == 0
    [line] = _precision_lines(caplog)
    assert line.levelno == logging.WARNING and precision.EMULATED_BF16 in line.getMessage()
    assert line.getMessage().endswith("); --precision 'auto' (without --bf16) trains in fp32 here")


@pytest.mark.parametrize(("bf16", "fp16", "launched", "runs"), [
    (False, False, None, "fp32"), (False, False, "no", "fp32"), (False, False, "bf16", "bf16"),
    (True, False, None, "bf16"), (True, False, "fp16", "bf16"),  # transformers hands the flag on, not the launch's
])
def test_the_run_precision_of_plain_arguments_follows_an_accelerate_launch_where_they_set_no_flag(
        bf16, fp16, launched, runs, monkeypatch):
    """Plain TrainingArguments under accelerate launch's mixed_precision bf16 train in bf16 (transformers hands the
    launch's mixed_precision to the Trainer's accelerator where bf16 / fp16 are unset), but the trainer read only
    ``bf16``: it scored the dev data and recorded the run as fp32."""
    from types import SimpleNamespace

    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: False)  # auto would be fp32: no machine dependence
    if launched is None:
        monkeypatch.delenv("ACCELERATE_MIXED_PRECISION", raising=False)
    else:
        monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", launched)
    args = SimpleNamespace(bf16=bf16, fp16=fp16, use_cpu=True)
    assert precision.run_precision(args) == runs


def test_a_launch_in_fp16_on_a_cpu_is_refused_for_plain_arguments_too(monkeypatch):
    """It trained in fp32 (accelerate runs no fp16 autocast on a CPU), recorded as fp32 with the launch as reason."""
    from types import SimpleNamespace

    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "fp16")
    with pytest.raises(PrecisionError, match=r"^accelerate launch asks for mixed_precision fp16 .*needs a GPU.* Launch "
                                             r"with mixed_precision bf16 or no in accelerate's config\.$"):
        precision.run_precision(SimpleNamespace(bf16=False, fp16=False, use_cpu=True))


@pytest.mark.parametrize("args_class", ["plain", "contrastive"])
def test_a_trainer_under_a_bf16_launch_says_and_runs_bf16(args_class, tiny_bert_dir, sentences, tmp_path, monkeypatch,
                                                          caplog):
    """Plain arguments' log line said ``precision: fp32 on cpu (accelerate launch's mixed_precision bf16)``;
    ContrastiveTrainingArguments' precision='auto' follows the launch (it sets ``bf16``)."""
    from hf_cse.training_args import ContrastiveTrainingArguments

    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: True)
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "bf16")  # as accelerate launch sets it, before the arguments
    tok, data = _data(tiny_bert_dir, sentences[:16])
    args = (ContrastiveTrainingArguments if args_class == "contrastive" else TrainingArguments)(
        str(tmp_path / "out"), use_cpu=True, per_device_train_batch_size=8, report_to="none")
    assert args.bf16 == (args_class == "contrastive")
    with caplog.at_level(logging.INFO, logger="hf_cse"):
        trainer = ContrastiveTrainer(model=SimCSEModel.from_encoder(tiny_bert_dir), args=args, train_dataset=data,
                                     data_collator=TwoViewCollator(tok))
    assert trainer.precision == "bf16" and trainer.accelerator.mixed_precision == "bf16"
    [line] = _precision_lines(caplog)
    assert line.getMessage() == (f"precision: {precision.describe('bf16')} on cpu "
                                 "(accelerate launch's mixed_precision bf16)")


@pytest.mark.slow  # a step and two dev scores
def test_plain_arguments_under_a_bf16_launch_score_and_record_the_bf16_that_trained(tiny_bert_dir, sentences, tmp_path,
                                                                                    monkeypatch):
    """The dev scores are encoded under the autocast the training ran under, and training_info.json and the dev
    record name that precision, not the fp32 that ``bf16=False`` said."""
    from hf_cse.evaluation import encoder as encoder_module

    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "bf16")
    tok, data = _data(tiny_bert_dir, sentences)
    args = TrainingArguments(str(tmp_path / "out"), use_cpu=True, per_device_train_batch_size=8, max_steps=1,
                             report_to="none", save_strategy="no", disable_tqdm=True)
    model = SimCSEModel.from_encoder(tiny_bert_dir)
    trained, scored = [], []
    forward = model.forward
    model.forward = lambda *a, **k: trained.append(torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled(
        "cpu") else torch.float32) or forward(*a, **k)
    real_autocast = encoder_module.autocast
    monkeypatch.setattr(encoder_module, "autocast", lambda prec, device: scored.append(prec) or real_autocast(
        prec, device))
    pairs = [(sentences[i], sentences[i + 1], float(i % 5)) for i in range(0, 16, 2)]
    trainer = ContrastiveTrainer(model=model, args=args, train_dataset=data, data_collator=TwoViewCollator(tok),
                                 processing_class=tok, eval_pairs=pairs)
    trainer.train()
    trainer.save_run()
    assert set(trained) == {torch.bfloat16}  # what trained
    assert scored and set(scored) == {"bf16"}  # the dev scores before and after training
    info = json.loads((tmp_path / "out" / "training_info.json").read_text())
    assert info["precision"] == precision.describe("bf16")
    assert info["dev"]["precision"] == precision.describe_scoring("bf16")
