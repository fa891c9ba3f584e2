"""The trained model's dev score is taken at the last step inside transformers' loop
(hf_cse/trainer_evaluation.py ``ScoreTheLastStep``), so the reporters see it before ``on_train_end`` closes them; and
the final metrics say how much of ``train_runtime`` went to dev scoring."""

from __future__ import annotations

import pytest
from datasets import Dataset
from eval_helpers import write_toy_senteval
from helpers import random_sentences
from transformers import AutoTokenizer, TrainerCallback

from hf_cse.models import SimCSEModel
from hf_cse.trainer import ContrastiveTrainer
from hf_cse.training_args import ContrastiveTrainingArguments


class Reporter(TrainerCallback):
    """What a reporter (TensorBoard, trackio) is handed, in order: each log's metric names, then the end."""

    def __init__(self):
        self.events: list = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        self.events.append((state.global_step, sorted(logs)))

    def on_train_end(self, args, state, control, **kwargs):
        self.events.append("train_end")


def _trained(encoder, out, **values) -> tuple[ContrastiveTrainer, Reporter]:
    args = ContrastiveTrainingArguments(str(out / "run"), per_device_train_batch_size=8, use_cpu=True, report_to=[],
                                        disable_tqdm=True, logging_steps=2,
                                        senteval_data_dir=str(write_toy_senteval(out / "senteval")), **values)
    reporter = Reporter()
    trainer = ContrastiveTrainer(model=SimCSEModel.from_encoder(str(encoder)), args=args,
                                 processing_class=AutoTokenizer.from_pretrained(encoder), callbacks=[reporter],
                                 train_dataset=Dataset.from_dict({"text": random_sentences(24)}))
    trainer.train()
    return trainer, reporter


def _scored_steps(reporter: Reporter) -> list[int]:
    return [step for step, names in (e for e in reporter.events if e != "train_end") if "eval_stsb_spearman" in names]


@pytest.mark.slow  # trains three steps
@pytest.mark.parametrize("strategy", ["no", "epoch"])
def test_the_last_steps_dev_score_reaches_the_reporters_before_training_ends_once(tiny_bert_dir, tmp_path, strategy):
    """It was scored after train() returned: logged after on_train_end (TensorBoard opened a second event file,
    trackio a second run). With eval_strategy='epoch' the loop scores the last step itself: not twice."""
    trainer, reporter = _trained(tiny_bert_dir, tmp_path, eval_strategy=strategy, num_train_epochs=1)
    assert trainer.state.global_step == 3
    assert _scored_steps(reporter) == [0, 3]
    end = reporter.events.index("train_end")
    assert end == len(reporter.events) - 1
    [(step, final)] = [e for e in reporter.events[:end] if "train_runtime" in e[1]]
    assert reporter.events[end - 1] == (3, final)  # the final metrics last, after the last dev score
    scored = [h["eval_stsb_spearman"] for h in trainer.state.log_history if "eval_stsb_spearman" in h]
    assert trainer.dev.after == scored[-1]


@pytest.mark.slow  # trains three steps
def test_the_final_metrics_say_the_seconds_of_dev_scoring_within_train_runtime(tiny_bert_dir, tmp_path):
    trainer, _ = _trained(tiny_bert_dir, tmp_path, num_train_epochs=1)
    metrics = trainer.train_metrics
    assert 0 < metrics["train_dev_scoring_runtime"] <= metrics["train_runtime"]
    assert trainer.state.log_history[-1]["train_dev_scoring_runtime"] == metrics["train_dev_scoring_runtime"]
