"""A resumed run takes over its checkpoint's learning-rate schedule and checkpoint selection only where they agree
with the resuming arguments (hf_cse.trainer_resume): another total of steps under a schedule that follows the total is
refused in one line; another metric_for_best_model chooses the best checkpoint again from the logged evaluations,
among the checkpoints still there; other dev data chooses it again from the evaluations on the new data only;
resuming a finished run's checkpoint says that its model is replaced."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from helpers import collator, scored_pairs_file, tiny_args, tiny_train_dataset
from transformers import TrainerCallback, TrainerState, TrainingArguments

from hf_cse.evaluation.data import STSPairs
from hf_cse.evaluation.evaluators import PairsEvaluator, dev_data_fingerprint
from hf_cse.models import SimCSEModel
from hf_cse.output_folder import OutputFolderError
from hf_cse.run_files import RUN_SETTINGS_FILE
from hf_cse.trainer import ContrastiveTrainer
from hf_cse.trainer_resume import (
    DevDataChange,
    check_schedule_kept,
    check_steps_kept,
    dev_data_change,
    recorded_dev_data,
    reselect_best,
    restart_selection,
)
from hf_cse.training_args import ContrastiveTrainingArguments


def _args(tmp_path, **kwargs) -> TrainingArguments:
    return TrainingArguments(output_dir=str(tmp_path / "out"), report_to="none", use_cpu=True, **kwargs)


def _state(max_steps: int, global_step: int, log_history=(), **kwargs) -> TrainerState:
    return TrainerState(max_steps=max_steps, global_step=global_step, log_history=list(log_history), **kwargs)


@pytest.mark.parametrize(("kwargs", "refused"), [
    ({}, True),  # linear: the rate of each step follows the total
    ({"lr_scheduler_type": "cosine"}, True),
    ({"lr_scheduler_type": "constant"}, False),
    ({"lr_scheduler_type": "constant_with_warmup", "warmup_steps": 2}, False),
    ({"lr_scheduler_type": "constant_with_warmup", "warmup_steps": 0.5}, True),  # a warmup ratio of the total
])
def test_another_total_is_refused_where_the_schedule_follows_it(tmp_path, kwargs, refused):
    args = _args(tmp_path, learning_rate=1e-3, **kwargs)
    if not refused:
        check_schedule_kept("ckpt", 6, 6, 8, args)
        return
    with pytest.raises(OutputFolderError) as err:
        check_schedule_kept("ckpt", 6, 6, 8, args)
    message = str(err.value)
    assert message.startswith("resume_from_checkpoint ckpt: its run trains 6 steps and this one 8 (max_steps or "
                              "num_train_epochs changed)"), message
    assert "Resume with the run's total (max_steps=6), or start a new run from the checkpoint's weights" in message
    assert "\n" not in message and "--" not in message
    check_schedule_kept("ckpt", 8, 6, 8, args)  # the same total: nothing to refuse



@pytest.mark.parametrize(("saved_epoch", "epochs", "refused"), [
    (2.0, 1, True), (1.5, 1, True), (2.0, 2, False), (1.5, 2, False), (2.0, 3, False)])
def test_a_checkpoint_past_the_epochs_asked_is_refused_before_the_data_is_counted(tmp_path, saved_epoch, epochs,
                                                                                  refused):
    """A run counted in epochs (no max_steps) has no total of steps before its data loader is built: the epoch the
    checkpoint reached is compared with num_train_epochs instead."""
    checkpoint = tmp_path / "checkpoint-16"
    checkpoint.mkdir()
    (checkpoint / "trainer_state.json").write_text(json.dumps({"epoch": saved_epoch, "global_step": 16,
                                                               "max_steps": 16}))
    args = _args(tmp_path, num_train_epochs=epochs, lr_scheduler_type="constant")
    if not refused:
        check_steps_kept(checkpoint, 16, 16, args.max_steps, args)
        return
    with pytest.raises(OutputFolderError) as err:
        check_steps_kept(checkpoint, 16, 16, args.max_steps, args)
    assert str(err.value) == (f"resume_from_checkpoint {checkpoint} is at epoch {saved_epoch:g}, past num_train_epochs "
                              f"{epochs}: give num_train_epochs={saved_epoch:g} or more to go on from it, or an "
                              "earlier checkpoint.")


def test_another_metric_chooses_again_among_the_checkpoints_left(tmp_path):
    out = tmp_path / "out"
    for step in (6, 8):  # save_total_limit=2: checkpoint-2 and -4 rotated away
        (out / f"checkpoint-{step}").mkdir(parents=True)
    history = [{"eval_stsb_spearman": 10.0, "eval_sickr_spearman": 20.0, "step": 0}]  # before the first step
    history += [{"eval_stsb_spearman": s, "eval_sickr_spearman": k, "step": step}
                for step, s, k in ((2, 30.0, 50.0), (4, 41.0, 44.0), (6, 35.0, 47.0), (8, 33.0, 46.9))]
    history.append({"eval_stsb_spearman": 99.0, "eval_sickr_spearman": 99.0, "step": 8})  # a resume's rescoring
    chosen_by_stsb = dict(best_metric=41.0, best_global_step=4, best_model_checkpoint=str(out / "checkpoint-4"))
    state = _state(10, 8, history, **chosen_by_stsb)
    # the same metric: the selection stands
    assert reselect_best(state, _args(tmp_path, metric_for_best_model="stsb_spearman"), out, "ckpt") is None
    assert (state.best_metric, state.best_global_step) == (41.0, 4)
    line = reselect_best(state, _args(tmp_path, metric_for_best_model="sickr_spearman"), out, "ckpt")
    assert (state.best_metric, state.best_global_step) == (47.0, 6)
    assert state.best_model_checkpoint == str(out / "checkpoint-6")
    assert line == (f"resuming ckpt: its best checkpoint was chosen by another metric_for_best_model or "
                    f"greater_is_better (best_metric 41 at step 4); chosen again by eval_sickr_spearman (greater is "
                    f"better) among the 4 evaluations logged whose checkpoints are still in {out}: checkpoint-6 "
                    f"(eval_sickr_spearman 47); step 2 scored best (50) but its checkpoint is gone (rotated away by "
                    "save_total_limit), so it cannot be kept")
    # the direction changed: the smallest score among those left
    state = _state(10, 8, history, **chosen_by_stsb)
    reselect_best(state, _args(tmp_path, metric_for_best_model="stsb_spearman", greater_is_better=False), out, "c")
    assert (state.best_metric, state.best_global_step) == (33.0, 8)
    # no evaluated checkpoint left: nothing is best, the evaluations from here on choose
    state = _state(10, 8, history, **chosen_by_stsb)
    line = reselect_best(state, _args(tmp_path, metric_for_best_model="sickr_spearman"), tmp_path / "empty", "c")
    assert state.best_metric is None and state.best_global_step is None and state.best_model_checkpoint is None
    assert "chosen again by eval_sickr_spearman" in line and ": none (no evaluated step's checkpoint is left" in line


def test_the_dev_data_is_fingerprinted_by_its_content():
    pairs = lambda scores: STSPairs(("a b", "c d", "e f"), ("g h", "i j", "k l"), np.array(scores))  # noqa: E731
    same = dev_data_fingerprint(PairsEvaluator(pairs([1.0, 2.0, 3.0])))
    assert same == dev_data_fingerprint([PairsEvaluator(pairs([1, 2, 3]))])  # the same data, however given
    assert same.startswith("3 custom pairs, sha256 ")
    assert dev_data_fingerprint(PairsEvaluator(pairs([3.0, 2.0, 1.0]))) != same  # the gold scores edited
    assert dev_data_fingerprint(None) is None


def test_other_dev_data_is_known_from_the_checkpoint_and_an_older_checkpoint_resumes_as_before(tmp_path):
    checkpoint = tmp_path / "checkpoint-4"
    checkpoint.mkdir()
    state = _state(6, 4, [{"eval_custom_spearman": 20.0, "step": 0}, {"eval_custom_spearman": 30.0, "step": 2}])
    assert recorded_dev_data(checkpoint) is None and dev_data_change(checkpoint, state, "new") is None  # older
    (checkpoint / RUN_SETTINGS_FILE).write_text(json.dumps({"learning_rate": 1e-3,
                                                            "dev_and_selection": {"dev_data": "old"}}))
    assert dev_data_change(checkpoint, state, "old") is None
    assert dev_data_change(checkpoint, state, "new") == DevDataChange("old", "new", 2)
    assert dev_data_change(checkpoint, state, None) is None  # no dev data now: nothing is selected by it


def test_other_dev_data_chooses_again_from_the_evaluations_on_the_new_data_only(tmp_path):
    out = tmp_path / "out"
    for step in (2, 4):
        (out / f"checkpoint-{step}").mkdir(parents=True)
    history = [{"eval_custom_spearman": s, "step": step} for step, s in ((0, 19.87), (2, 21.23), (4, 15.0))]
    before = dict(best_metric=21.23, best_global_step=2, best_model_checkpoint=str(out / "checkpoint-2"))
    change = DevDataChange("20 custom pairs, sha256 aaa", "20 custom pairs, sha256 bbb", len(history))
    state = _state(6, 4, [*history, {"eval_custom_spearman": -15.0, "step": 4}], **before)  # rescored on resuming
    line = restart_selection(state, _args(tmp_path, metric_for_best_model="custom_spearman"), out, "ckpt", change)
    assert (state.best_metric, state.best_global_step) == (-15.0, 4)  # not step 2's 21.23 on the earlier data
    assert state.best_model_checkpoint == str(out / "checkpoint-4")
    assert line == ("resuming ckpt: the dev data changed since its run's checkpoint (20 custom pairs, sha256 aaa then, "
                    "20 custom pairs, sha256 bbb now), so the scores logged before are of other data: the best "
                    "checkpoint, checkpoint-2 (21.23) on the earlier data, is chosen again by eval_custom_spearman "
                    "from the evaluations on the new data only: checkpoint-4 (eval_custom_spearman -15 on the new "
                    "data) until a later evaluation beats it")
    # its checkpoint elsewhere (named by its path): nothing is best yet
    state = _state(6, 4, [*history, {"eval_custom_spearman": -15.0, "step": 4}], **before)
    line = restart_selection(state, _args(tmp_path, metric_for_best_model="custom_spearman"), tmp_path / "other",
                             "ckpt", change)
    assert state.best_metric is None and state.best_model_checkpoint is None
    assert line.endswith("from the evaluations on the new data only: the evaluations on the new data from here on")


class _StopAt(TrainerCallback):
    """Stops the run after ``step`` (its checkpoint saved): the run as a kill leaves it."""

    def __init__(self, step: int):
        self.step = step

    def on_save(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            control.should_training_stop = True


class _Killed(Exception):
    pass


class _KillAt(TrainerCallback):
    """Ends the run with an exception once the checkpoint of ``step`` is saved: the folder as a kill leaves it."""

    def __init__(self, step: int):
        self.step = step

    def on_save(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            raise _Killed


def _trainer(encoder, sentences, tmp_path, out, senteval_dir=None, callbacks=(), **args):
    ds, tok = tiny_train_dataset(encoder, sentences, tmp_path / "data", repeat=4)
    torch.manual_seed(0)
    return ContrastiveTrainer(model=SimCSEModel.from_encoder(str(encoder)), callbacks=list(callbacks),
                              args=tiny_args(out, **{"save_strategy": "steps", "save_steps": 2, **args}),
                              train_dataset=ds, data_collator=collator(tok), processing_class=tok,
                              senteval_data_dir=senteval_dir)


@pytest.mark.slow
def test_a_resume_with_another_metric_keeps_the_best_checkpoint_of_that_metric(tiny_bert_dir, sentences, tmp_path,
                                                                              senteval_dir, caplog):
    out = tmp_path / "out"
    dev = dict(eval_strategy="steps", eval_steps=2, load_best_model_at_end=True, max_steps=6)
    _trainer(tiny_bert_dir, sentences, tmp_path, out, senteval_dir, [_StopAt(4)],
             metric_for_best_model="stsb_spearman", **dev).train()
    state = json.loads((out / "checkpoint-4" / "trainer_state.json").read_text())
    assert state["global_step"] == 4
    resumed = _trainer(tiny_bert_dir, sentences, tmp_path, out, senteval_dir, metric_for_best_model="sickr_spearman",
                       **dev)
    with caplog.at_level("WARNING", logger="hf_cse.trainer_resume"):
        resumed.train(resume_from_checkpoint=True)
    assert "its best checkpoint was chosen by another metric_for_best_model" in caplog.text
    scores = {}
    for entry in resumed.state.log_history:  # the first evaluation of each step counted
        if "eval_sickr_spearman" in entry and entry["step"] > 0:
            scores.setdefault(entry["step"], entry["eval_sickr_spearman"])
    assert sorted(scores) == [2, 4, 6]
    best = max(scores, key=lambda step: (scores[step], -step))
    assert resumed.state.best_metric == scores[best]
    assert resumed.state.best_model_checkpoint == str(out / f"checkpoint-{best}")


@pytest.mark.slow
def test_a_longer_run_from_a_checkpoint_is_refused_under_a_linear_schedule_and_goes_on_under_a_constant_one(
        tiny_bert_dir, sentences, tmp_path, caplog):
    out = tmp_path / "out"
    finished = _trainer(tiny_bert_dir, sentences, tmp_path, out, max_steps=2)
    finished.train()
    finished.save_run()
    longer = _trainer(tiny_bert_dir, sentences, tmp_path, out, max_steps=4)
    with pytest.raises(OutputFolderError, match=r"its run trains 2 steps and this one 4 .* the linear learning-rate "
                                                r"schedule follows the total"):
        longer.train(resume_from_checkpoint=str(out / "checkpoint-2"))
    assert not (out / "checkpoint-4").exists()
    # a constant schedule: the rate of every step is the same whatever the total, so the run goes on, and replacing
    # the finished run's model is said
    constant = tmp_path / "constant"
    run = _trainer(tiny_bert_dir, sentences, tmp_path, constant, max_steps=2, lr_scheduler_type="constant")
    run.train()
    run.save_run()
    longer = _trainer(tiny_bert_dir, sentences, tmp_path, constant, max_steps=4, lr_scheduler_type="constant")
    with caplog.at_level("WARNING", logger="hf_cse.trainer_folder"):
        longer.train(resume_from_checkpoint=str(constant / "checkpoint-2"))
    assert longer.state.global_step == 4
    assert [e["learning_rate"] for e in longer.state.log_history if "loss" in e] == [1e-3] * 4
    assert (f"output_dir {constant} holds a finished run (trained to step 2): resuming {constant / 'checkpoint-2'}, "
            "this run replaces its model and record (training_info.json) when it finishes") in caplog.text


@pytest.mark.slow
def test_a_checkpoint_saved_with_save_only_model_is_refused_a_resume_with_steps_left(tiny_bert_dir, sentences,
                                                                                   tmp_path):
    """The reviewer's case: such a checkpoint holds no optimizer, scheduler or RNG state; transformers resumed it
    without a word, the linear schedule starting again at its first rate and Adam's moments at zero, and the run
    ended as another one. The checkpoint of the last step has nothing left to train: it is taken as it is."""
    out = tmp_path / "out"
    _trainer(tiny_bert_dir, sentences, tmp_path, out, max_steps=4, save_only_model=True).train()
    again = _trainer(tiny_bert_dir, sentences, tmp_path, out, max_steps=4, save_only_model=True)
    with pytest.raises(OutputFolderError, match=r"checkpoint-2 holds the model only \(saved with save_only_model=True: "
                                                r"no optimizer, scheduler or RNG state\)") as refused:
        again.train(resume_from_checkpoint=str(out / "checkpoint-2"))
    assert refused.value.fields == ("resume_from_checkpoint", "save_only_model")
    again.train(resume_from_checkpoint=True)  # checkpoint-4: the run's last step
    assert again.state.global_step == 4


def _snapshot(folder):
    return sorted((str(p.relative_to(folder)), p.stat().st_mtime_ns) for p in folder.rglob("*"))


@pytest.mark.slow
@pytest.mark.parametrize(("schedule", "refusal"), [
    ("linear", r"checkpoint-2: its run trains 2 steps and this one 1 \(max_steps or num_train_epochs changed\)"),
    ("constant", r"checkpoint-2 is at step 2, past max_steps 1: give max_steps=2 or more to go on from it"),
])
def test_a_finished_run_resumed_with_fewer_steps_is_refused_and_its_record_kept(tiny_bert_dir, sentences, tmp_path,
                                                                                schedule, refusal):
    """The reviewer's case: resume_from_checkpoint=True with a smaller max_steps over a finished run went through
    (its checkpoint holds every step: taken as it is), kept the model of 2 steps and rewrote training_info.json and
    the card with max_steps 1, without the train metrics. The command line refused it, by the same rule."""
    out = tmp_path / "out"
    finished = _trainer(tiny_bert_dir, sentences, tmp_path, out, max_steps=2, lr_scheduler_type=schedule)
    finished.train()
    finished.save_run()
    before = _snapshot(out)
    fewer = _trainer(tiny_bert_dir, sentences, tmp_path, out, max_steps=1, lr_scheduler_type=schedule)
    for resume in (True, str(out / "checkpoint-2")):
        with pytest.raises(OutputFolderError, match=refusal) as refused:
            fewer.train(resume_from_checkpoint=resume)
        assert "--" not in str(refused.value)  # the library names the arguments, not the flags
    assert _snapshot(out) == before  # nothing written: the record and card still say 2 steps


@pytest.mark.slow
def test_a_finished_run_counted_in_epochs_resumed_with_fewer_is_refused_and_its_record_kept(tiny_bert_dir, sentences,
                                                                                           tmp_path):
    """As above, counted in epochs: the finished run's checkpoint (taken as it is, no step trained) was recorded as a
    run of 1 epoch."""
    out = tmp_path / "out"
    finished = _trainer(tiny_bert_dir, sentences, tmp_path, out, max_steps=-1, num_train_epochs=2,
                        lr_scheduler_type="constant", save_steps=8)
    finished.train()
    finished.save_run()
    before = _snapshot(out)
    fewer = _trainer(tiny_bert_dir, sentences, tmp_path, out, max_steps=-1, num_train_epochs=1,
                     lr_scheduler_type="constant", save_steps=8)
    with pytest.raises(OutputFolderError, match=r"checkpoint-16 is at epoch 2, past num_train_epochs 1: give "
                                                r"num_train_epochs=2 or more"):
        fewer.train(resume_from_checkpoint=True)
    assert _snapshot(out) == before


@pytest.mark.slow
def test_a_resume_on_other_dev_data_chooses_from_the_new_data_and_scores_the_start_on_it(
        tiny_bert_dir, sentences, tmp_path, caplog):
    """The reviewer's case: the dev file's gold scores reversed between the kill and the resume. Before: the best
    checkpoint stayed the one chosen on the old file, new scores were compared with old ones, and the score before
    training was the untrained encoder's on the old file."""
    out, dev = tmp_path / "out", scored_pairs_file(tmp_path / "dev.tsv", 20, 5, seed=11)
    ds, tok = tiny_train_dataset(tiny_bert_dir, sentences, tmp_path / "data", repeat=4)

    def trainer(callbacks=()):
        torch.manual_seed(0)
        args = ContrastiveTrainingArguments(
            str(out), eval_file=str(dev), per_device_train_batch_size=8, learning_rate=1e-3, max_steps=6,
            logging_steps=1, report_to="none", use_cpu=True, disable_tqdm=True, remove_unused_columns=False, seed=0,
            dataloader_drop_last=True, eval_strategy="steps", eval_steps=2, save_strategy="steps", save_steps=2,
            save_total_limit=1, load_best_model_at_end=True, metric_for_best_model="custom_spearman")
        return ContrastiveTrainer(model=SimCSEModel.from_encoder(str(tiny_bert_dir)), args=args, train_dataset=ds,
                                  data_collator=collator(tok), processing_class=tok, callbacks=list(callbacks))

    with pytest.raises(_Killed):  # not stopped: a run that ends deletes its last checkpoint under save_total_limit=1
        trainer([_KillAt(4)]).train()
    saved = json.loads((out / "checkpoint-4" / "trainer_state.json").read_text())
    assert recorded_dev_data(out / "checkpoint-4") == dev_data_fingerprint(trainer().evaluator)
    step0 = saved["log_history"][0]["eval_custom_spearman"]
    rows = dev.read_text().splitlines()
    dev.write_text("\n".join([rows[0]] + [f"{row.rsplit(chr(9), 1)[0]}\t{4 - int(row.rsplit(chr(9), 1)[1])}"
                                          for row in rows[1:]]) + "\n")  # the gold order reversed
    resumed = trainer()
    with caplog.at_level("INFO", logger="hf_cse"):
        resumed.train(resume_from_checkpoint=True)
    assert "the dev data changed since its run's checkpoint" in caplog.text
    assert "not the run's untrained encoder" not in caplog.text
    new = {}
    for entry in resumed.state.log_history[len(saved["log_history"]):]:  # scored on the new data
        if "eval_custom_spearman" in entry:
            new.setdefault(entry["step"], entry["eval_custom_spearman"])
    assert sorted(new) == [4, 6]
    best = max(new, key=lambda step: (new[step], -step))
    assert resumed.state.best_metric == new[best]
    assert resumed.state.best_model_checkpoint == str(out / f"checkpoint-{best}")
    # the score before training is the given encoder's on the new data: step 0's on the reversed file, negated
    assert resumed.dev.before == pytest.approx(-step0, abs=1e-4)
