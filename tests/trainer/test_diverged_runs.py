"""A run that diverged (its weights NaN or inf) is never resumed, finished or saved as a trained model
(hf_cse.divergence): its checkpoint is refused on resume, named or found by ``resume_from_checkpoint=True``, in one
line naming the step and the ways on, and nothing of the user's is deleted; the end of ``train()`` and ``save_run()``
check the weights held whatever ``logging_steps`` is; a new run's refusal offers no resume of it. A NaN dev score
after training never beats the untrained encoder's finite one, and the line blames the model, not the dev data."""

from __future__ import annotations

import logging
import math
import re

import pytest
import torch
from helpers import collator, tiny_args, tiny_train_dataset
from safetensors.torch import load_file, save_file

from hf_cse.divergence import DivergedCheckpointError
from hf_cse.evaluation.before_after import DevChange, log_dev_change
from hf_cse.metrics import DivergedError
from hf_cse.models import SimCSEModel
from hf_cse.output_folder import OutputFolderError
from hf_cse.trainer import ContrastiveTrainer

#: a learning rate that makes the tiny encoder's weights NaN within a few steps (Adam moves each weight by ~lr)
DIVERGING = dict(learning_rate=1e6, lr_scheduler_type="constant", logging_steps=500)


def _trainer(encoder, sentences, tmp_path, out, evaluator=None, **args) -> ContrastiveTrainer:
    ds, tok = tiny_train_dataset(encoder, sentences, tmp_path / "data", repeat=4)
    torch.manual_seed(0)
    return ContrastiveTrainer(model=SimCSEModel.from_encoder(str(encoder)), args=tiny_args(out, **args),
                              train_dataset=ds, data_collator=collator(tok), processing_class=tok, evaluator=evaluator)


def _snapshot(folder):
    return sorted((str(p.relative_to(folder)), p.stat().st_mtime_ns) for p in folder.rglob("*"))


def _poison(checkpoint) -> None:
    """Make one weight of ``checkpoint``'s model NaN, as a diverged step would."""
    path = checkpoint / "model.safetensors"
    weights = load_file(path)
    name = next(iter(weights))
    weights[name].view(-1)[0] = math.nan
    save_file(weights, path, metadata={"format": "pt"})


@pytest.mark.slow  # trains 6 steps, then 3 refused trainers
def test_a_diverged_runs_checkpoint_is_never_resumed_or_finished(tiny_bert_dir, sentences, tmp_path):
    """Before: train() raised the divergence, but checkpoint-6 held NaN weights; the refusal of a new run said to pass
    resume_from_checkpoint=True, which "finished" the run from it, and save_run() exported the NaN model."""
    out = tmp_path / "run"
    with pytest.raises(DivergedError, match=r"became NaN or Inf: .* checkpoint-3, checkpoint-6 in output_dir \S+ hold "
                                            r"the diverged weights and will not be resumed; no earlier checkpoint"):
        _trainer(tiny_bert_dir, sentences, tmp_path, out, max_steps=6, save_strategy="steps", save_steps=3,
                 **DIVERGING).train()
    kept = _snapshot(out)
    for resume, words in ((True, r"^resume_from_checkpoint=True: checkpoint-6, the last checkpoint in output_dir "),
                          (str(out / "checkpoint-6"), r"^resume_from_checkpoint \S+checkpoint-6 ")):
        trainer = _trainer(tiny_bert_dir, sentences, tmp_path, out, max_steps=6, save_strategy="steps", save_steps=3,
                           **DIVERGING)
        with pytest.raises(DivergedCheckpointError, match=words) as refused:
            trainer.train(resume_from_checkpoint=resume)
        message = str(refused.value)
        assert "weights that are not finite (NaN or inf)" in message and "\n" not in message
        assert "diverged at or before step 6, and a diverged run is not resumed; no earlier checkpoint" in message
        assert "start a new run with a lower learning_rate in another output_dir" in message
        with pytest.raises(OutputFolderError, match=r"^save_run\(\) finishes the run that train\(\) trained"):
            trainer.save_run()
    with pytest.raises(OutputFolderError, match="holds checkpoints of a run") as refused:  # a new run there
        _trainer(tiny_bert_dir, sentences, tmp_path, out, max_steps=6, **DIVERGING).train()
    assert "resume_from_checkpoint=True" not in str(refused.value)
    assert "its last, checkpoint-6, holds " in str(refused.value) and "diverged" in str(refused.value)
    assert _snapshot(out) == kept  # nothing deleted, nothing saved as the model
    assert not (out / "model.safetensors").exists() and not (out / "sentence-transformers").exists()


@pytest.mark.slow  # trains 4 steps, then 2 from a checkpoint
def test_resume_true_refuses_a_diverged_last_checkpoint_and_names_the_last_finite_one(tiny_bert_dir, sentences,
                                                                                    tmp_path):
    out = tmp_path / "run"
    _trainer(tiny_bert_dir, sentences, tmp_path, out, save_strategy="steps", save_steps=2).train()
    _poison(out / "checkpoint-4")
    trainer = _trainer(tiny_bert_dir, sentences, tmp_path, out, save_strategy="steps", save_steps=2)
    with pytest.raises(DivergedCheckpointError, match=r"holds 1 of \d+ weights that are not finite .* diverged at or "
                                                      r"before step 4, .*; "
                                                      rf"resume_from_checkpoint='{out / 'checkpoint-2'}' goes on from "
                                                      r"the last finite checkpoint at the run's learning rate \(its "
                                                      r"optimizer state keeps it: it may diverge again\), or"):
        trainer.train(resume_from_checkpoint=True)
    trainer.train(resume_from_checkpoint=str(out / "checkpoint-2"))  # the way on it names: trains steps 3 and 4
    assert trainer.state.global_step == 4
    trainer.save_run()
    assert (out / "training_info.json").is_file()


@pytest.mark.slow  # one step trained
def test_the_end_of_train_checks_the_weights_not_only_the_logged_losses(tiny_bert_dir, sentences, tmp_path):
    """One step at a learning rate past float32's range: the step's loss was finite (it was computed before the
    update), the weights after it are not. Before: train() finished and save_run() saved them."""
    out = tmp_path / "run"
    trainer = _trainer(tiny_bert_dir, sentences, tmp_path, out, max_steps=1, **{**DIVERGING, "learning_rate": 1e39})
    with pytest.raises(DivergedError, match=r"^the model after step 1 holds \d+ of \d+ weights that are not finite "
                                            r"\(NaN or inf\), the first in \S+: the training diverged\. Lower the "
                                            "learning_rate"):
        trainer.train()
    with pytest.raises(OutputFolderError, match=r"ended in an error \(the model after step 1 holds .* not finite"):
        trainer.save_run()
    assert not (out / "model.safetensors").exists() and not (out / "training_info.json").exists()


@pytest.mark.slow  # two steps trained
def test_save_run_refuses_non_finite_weights(tiny_bert_dir, sentences, tmp_path):
    out = tmp_path / "run"
    trainer = _trainer(tiny_bert_dir, sentences, tmp_path, out, max_steps=2)
    trainer.train()
    with torch.no_grad():
        next(trainer.model.parameters()).view(-1)[0] = math.inf
    with pytest.raises(DivergedError, match=r"^save_run: the model holds 1 of \d+ weights that are not finite .*A "
                                            "diverged run's weights are not saved or exported as a model"):
        trainer.save_run()
    assert not any((out / name).exists() for name in ("model.safetensors", "sentence-transformers",
                                                      "training_info.json", "trainer_state.json", "train_results.json"))


class UndefinedAfterTraining:
    """A dev evaluator whose score is defined for the untrained encoder only (as when training collapsed every
    embedding to one direction: every pair gets the same cosine, Spearman is NaN)."""

    def __init__(self):
        self.calls = 0

    def __call__(self, encoder):
        self.calls += 1
        return {"toy_spearman": 40.0 if self.calls == 1 else math.nan}


@pytest.mark.slow  # two steps trained, three scorings
def test_a_nan_dev_score_after_training_never_beats_the_untrained_encoders(tiny_bert_dir, sentences, tmp_path,
                                                                          caplog):
    """Before: NaN compared False with everything, so the trained model was kept over the untrained encoder's 40.0,
    and the warning blamed the dev data."""
    out = tmp_path / "run"
    trainer = _trainer(tiny_bert_dir, sentences, tmp_path, out, evaluator=UndefinedAfterTraining(), max_steps=2)
    untrained = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    trainer.train()
    assert trainer.dev.kept_step == 0 and trainer.dev.before == 40.0 and math.isnan(trainer.dev.after)
    for name, weight in trainer.model.state_dict().items():
        torch.testing.assert_close(weight, untrained[name], rtol=0, atol=0, msg=name)
    with caplog.at_level(logging.WARNING, logger="hf_cse"):
        trainer.save_run()
    last = caplog.records[-1].getMessage()
    assert "saved the untrained encoder (step 0)" in last and "the trained model's dev score is undefined" in last
    assert "check the dev data" not in last


def test_the_dev_comparison_with_an_undefined_score(caplog):
    """NaN after a finite before: the untrained encoder wins and the model is blamed; NaN for both (the dev data's
    fault, e.g. every sentence unknown tokens) still blames the data."""
    collapsed = DevChange("stsb_spearman", 40.0, math.nan, kept_step=0)
    assert collapsed.beats_trained(40.0) and collapsed.trained_undefined
    assert not DevChange("stsb_spearman", 40.0, 50.0).beats_trained(40.0)
    assert DevChange("stsb_spearman", 60.0, 50.0).beats_trained(60.0)
    both = DevChange("stsb_spearman", math.nan, math.nan, kept_step=2)
    assert not both.beats_trained(math.nan) and not both.trained_undefined
    logger = logging.getLogger("hf_cse.test_dev")
    with caplog.at_level(logging.WARNING, logger="hf_cse.test_dev"):
        log_dev_change(logger, collapsed)
        log_dev_change(logger, both)
    first, second = (r.getMessage() for r in caplog.records)
    assert "trained model's dev score is undefined" in first and "check the dev data" not in first
    assert "check the dev data" in second


def _run_with_checkpoints(folder, finite_steps, diverged_steps):
    """A stopped run's folder (its record, no model) whose complete checkpoints hold one tiny weight each, finite or
    NaN."""
    from helpers import fake_checkpoint

    (folder / "checkpoint-0").mkdir(parents=True)  # a run's folder: some checkpoint; this one incomplete
    (folder / "hf_cse_run.json").write_text("{}")
    for step in (*finite_steps, *diverged_steps):
        checkpoint = fake_checkpoint(folder / f"checkpoint-{step}")
        (checkpoint / "config.json").write_text('{"model_type": "hf_cse_simcse", "method": "simcse"}')
        value = math.nan if step in diverged_steps else 0.0
        save_file({"weight": torch.full((2,), value)}, checkpoint / "model.safetensors", metadata={"format": "pt"})
    return folder


def test_refusals_of_a_run_whose_last_checkpoint_diverged_name_its_last_finite_one(tmp_path):
    """Checkpoints 2 and 4 finite, 6 NaN: the run folder's refusals (no model yet; unfinished; a checkpoint without
    weights) offered checkpoint-6 as "the last complete one", and the refusal of checkpoint-6 itself said "Use an
    earlier checkpoint of that run" without naming one. Each names checkpoint-4 now."""
    from hf_cse.checks import InputError, check_model_source
    from hf_cse.divergence import check_finite_weights
    from hf_cse.unusable_models import no_weights_to_load, unfinished_run

    run = _run_with_checkpoints(tmp_path / "run", (2, 4), (6,))
    offered = f"{run / 'checkpoint-4'} (the last finite one; checkpoint-6 after it diverged)"
    with pytest.raises(InputError, match=re.escape(f"only its checkpoints: give one of them, e.g. {offered}, ")):
        check_model_source(str(run), "CHECKPOINT")
    assert unfinished_run(run, "export").endswith(f"rerun its training command to finish it, or export {offered}.")
    (run / "checkpoint-8").mkdir()  # its config written, its weights never
    (run / "checkpoint-8" / "config.json").write_text('{"model_type": "hf_cse_simcse"}')
    line = no_weights_to_load(run / "checkpoint-8", "evaluate")
    assert line.endswith(f"evaluate another checkpoint, e.g. {offered}.")

    diverged = torch.nn.Linear(2, 2)
    with torch.no_grad():
        diverged.weight[0, 0] = math.nan
    with pytest.raises(InputError, match=re.escape(f"Use an earlier checkpoint of that run, e.g. "
                                                   f"{run / 'checkpoint-4'} (the last finite one), or train again")):
        check_finite_weights(diverged, str(run / "checkpoint-6"))


def test_a_run_with_no_finite_checkpoint_is_refused_without_offering_one(tmp_path):
    """Every checkpoint NaN: the refusal names them as diverged and the way on, a lower learning rate (it offered the
    last one as "the last complete one")."""
    from hf_cse.checks import InputError, check_model_source

    run = _run_with_checkpoints(tmp_path / "run", (), (2, 4))
    with pytest.raises(InputError, match=re.escape("only its checkpoints: checkpoint-4, checkpoint-2 hold weights "
                                                   "that are not finite (NaN or inf): its run diverged; train it "
                                                   "again with a lower learning_rate.")):
        check_model_source(str(run), "CHECKPOINT")


@pytest.mark.parametrize(("finite", "diverged", "said"), [
    ((2, 4, 6), (), "(resume_from_checkpoint=True goes on from checkpoint-6 instead)"),
    ((2, 4), (6,), "(resume_from_checkpoint='{run}/checkpoint-4' goes on from the last finite one instead; "
                   "checkpoint-6 after it diverged)"),
    ((2,), (4, 6), "(checkpoint-6, checkpoint-4 hold weights that are not finite: the run diverged after this "
                   "checkpoint)"),
], ids=["all finite", "the last diverged", "all diverged"])
def test_resuming_before_later_checkpoints_never_offers_a_diverged_one(tmp_path, caplog, finite, diverged, said):
    """Resuming checkpoint-2 where checkpoint-6 holds NaN: the line said resume_from_checkpoint=True goes on from
    checkpoint-6, which is refused as diverged."""
    from hf_cse.later_checkpoints import warn_later_checkpoints_overwritten

    run = _run_with_checkpoints(tmp_path / "run", finite, diverged)
    with caplog.at_level("WARNING", logger="hf_cse.trainer_folder"):
        warn_later_checkpoints_overwritten(run / "checkpoint-2", run)
    assert f"holds later checkpoints (checkpoint-4, checkpoint-6), which this run trains again and overwrites one by " \
           f"one as it reaches their steps {said.format(run=run)}" in caplog.text
