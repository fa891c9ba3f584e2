"""A resumed run takes over its checkpoint's learning-rate schedule and checkpoint selection only where they agree
with the resuming arguments (hf_cse.trainer_resume): another total of steps under a schedule that follows the total is
refused in one line; another metric_for_best_model chooses the best checkpoint again from the logged evaluations,
among the checkpoints still there; resuming a finished run's checkpoint says that its model is replaced."""

from __future__ import annotations

import json

import pytest
import torch
from helpers import collator, tiny_args, tiny_train_dataset
from transformers import TrainerCallback, TrainerState, TrainingArguments

from hf_cse.models import SimCSEModel
from hf_cse.output_folder import OutputFolderError
from hf_cse.trainer import ContrastiveTrainer
from hf_cse.trainer_resume import check_schedule_kept, reselect_best


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


class _StopAt(TrainerCallback):
    """Stops the run after ``step`` (its checkpoint saved): the run as a kill leaves it."""

    def __init__(self, step: int):
        self.step = step

    def on_save(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            control.should_training_stop = True


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
