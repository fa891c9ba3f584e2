"""Training arguments a Python caller gets wrong are refused in one line, in the API's terms, when the arguments or the
trainer are made (hf_cse.training_values): not a traceback from inside torch at the first step, and not a run that
trains nothing and saves the untouched encoder as trained."""

from __future__ import annotations

import datasets
import numpy as np
import pytest
from helpers import random_sentences, tiny_args
from transformers import AutoTokenizer

from hf_cse.data import DataError, tokenize_dataset
from hf_cse.errors import CSEError
from hf_cse.models import SimCSEModel
from hf_cse.trainer import ContrastiveTrainer
from hf_cse.training_args import ContrastiveTrainingArguments


@pytest.mark.parametrize("field, value, words", [
    ("learning_rate", "3e-5", r"^learning_rate must be a number, got '3e-5' \(a string: write it without quotes, "
                              r"e\.g\. learning_rate=3e-5\)\.$"),
    ("per_device_train_batch_size", "16", "per_device_train_batch_size must be an integer, got '16'"),
    ("max_steps", 5.0, r"max_steps must be an integer, got 5\.0 \(write max_steps=5\)"),
    ("seed", "42", "seed must be an integer"),
    ("no_duplicates_in_batch", "false", r"no_duplicates_in_batch must be True or False, got 'false' .*"
                                        r"no_duplicates_in_batch=False\)"),  # a YAML string: it would read as true
    ("cached_minibatch_size", 8.5, "cached_minibatch_size must be an integer or None, got 8.5"),
    ("max_seq_length", "64", r"max_seq_length must be an integer, got '64' .*max_seq_length=64\)"),
    ("max_seq_length", 1, r"max_seq_length must be at least 2 \(.*\), got 1\.$"),  # 1 would turn truncation off
])
def test_a_value_of_the_wrong_type_or_range_is_refused_when_the_arguments_are_made(tmp_path, field, value, words):
    with pytest.raises(CSEError, match=words) as refused:
        ContrastiveTrainingArguments(str(tmp_path / "out"), use_cpu=True, **{field: value})
    assert refused.value.fields == (field,) and "\n" not in str(refused.value)


#: what greater_is_better=False with a correlation is refused with
LOWEST_IS_WORST = ("greater_is_better False would keep the checkpoint of the lowest {}, the worst: it is a "
                   "correlation, higher the better. Leave greater_is_better out (or set it True).")


@pytest.mark.parametrize("metric", ["stsb_spearman", "eval_avg_sts", "mine_spearman", "sts-dev_spearman_cosine"])
def test_greater_is_better_false_with_a_correlation_is_refused_when_the_arguments_are_made(tmp_path, metric):
    """The run chose the checkpoint of the lowest dev correlation (the worst), and the comparison with the untrained
    encoder after training read it the other way round. A loss stays lower-is-better, as transformers sets it."""
    selection = dict(senteval_data_dir=str(tmp_path), eval_strategy="steps", eval_steps=2, save_strategy="steps",
                     save_steps=2, max_steps=6,
                     load_best_model_at_end=True, use_cpu=True)
    with pytest.raises(CSEError) as refused:
        ContrastiveTrainingArguments(str(tmp_path / "out"), metric_for_best_model=metric, greater_is_better=False,
                                     **selection)
    assert str(refused.value) == LOWEST_IS_WORST.format(metric)
    assert refused.value.fields == ("greater_is_better", "metric_for_best_model")
    args = ContrastiveTrainingArguments(str(tmp_path / "out"), metric_for_best_model=metric, **selection)
    assert args.greater_is_better is True
    for loss, given in (("loss", None), ("eval_loss", False), ("sts-dev_spearman_pvalue", False),
                        ("pearson_distance", False)):  # lower the better, only holding the word
        args = ContrastiveTrainingArguments(str(tmp_path / "out"), metric_for_best_model=loss,
                                            greater_is_better=given, **selection)
        assert args.greater_is_better is False


@pytest.mark.slow
def test_greater_is_better_false_with_a_dev_score_is_refused_when_the_trainer_is_built(tiny_bert_dir, rows, tmp_path):
    """transformers' own TrainingArguments: the trainer checks them, with its STS dev data or one's own evaluator."""
    from eval_helpers import write_toy_senteval

    ds, tok = rows
    senteval = str(write_toy_senteval(tmp_path / "senteval"))
    for dev, metric in (({"senteval_data_dir": senteval}, "sickr_spearman"), ({"evaluator": len}, "own_spearman")):
        with pytest.raises(CSEError) as refused:
            ContrastiveTrainer(model=SimCSEModel.from_encoder(str(tiny_bert_dir)), train_dataset=ds,
                               args=tiny_args(tmp_path / "out", per_device_train_batch_size=4, eval_strategy="no",
                                              metric_for_best_model=metric, greater_is_better=False),
                               processing_class=tok, no_duplicates_in_batch=False, **dev)
        assert str(refused.value) == LOWEST_IS_WORST.format(metric)


def test_numbers_of_numpy_and_none_where_allowed_are_taken(tmp_path):
    args = ContrastiveTrainingArguments(str(tmp_path / "out"), use_cpu=True, max_steps=np.int64(5),
                                        learning_rate=np.float64(1e-5), cached_minibatch_size=None)
    assert args.max_steps == 5


@pytest.fixture
def rows(tiny_bert_dir):
    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    return tokenize_dataset(datasets.Dataset.from_dict({"text": random_sentences(10)}), tok), tok


@pytest.mark.parametrize("overrides, error, words", [
    ({"learning_rate": 0.0}, CSEError, r"^learning_rate 0\.0 must be a finite number > 0; 0 trains nothing"),
    # each value its own reason ("0 trains nothing" was given for all three)
    ({"learning_rate": -1e-5}, CSEError, r"^learning_rate -1e-05 must be a finite number > 0; a negative one climbs "
                                         r"the loss\. The papers use 1e-5 to 5e-5\.$"),
    ({"learning_rate": float("inf")}, CSEError, r"^learning_rate inf must be a finite number > 0; it makes every "
                                                r"weight NaN at the first step\."),
    ({"learning_rate": "3e-5"}, CSEError, "learning_rate must be a number"),  # plain TrainingArguments too
    ({"gradient_accumulation_steps": 0}, CSEError, "gradient_accumulation_steps must be at least 1, got 0"),
    ({"per_device_train_batch_size": 1}, CSEError, "a contrastive batch needs at least 2 sentences"),
    ({"max_steps": 0}, CSEError, "max_steps 0 trains nothing"),
    ({"max_steps": -5}, CSEError, r"max_steps -5 is no number of steps: .* or -1 \(the default\)"),
    # 10 rows for a batch of 16: every batch incomplete and dropped, 0 steps trained
    ({"per_device_train_batch_size": 16}, DataError, r"the training set has 10 rows, fewer than one global batch of "
                                                     r"16"),
])
def test_the_trainer_refuses_values_that_would_fail_or_train_nothing(tiny_bert_dir, rows, tmp_path, overrides, error,
                                                                     words):
    ds, tok = rows
    args = tiny_args(tmp_path / "out", **{"per_device_train_batch_size": 4, **overrides})
    with pytest.raises(error, match=words):
        ContrastiveTrainer(model=SimCSEModel.from_encoder(str(tiny_bert_dir)), args=args, train_dataset=ds,
                           processing_class=tok, no_duplicates_in_batch=False)
    assert not (tmp_path / "out").exists()  # refused before transformers creates the output folder


def test_a_learning_rate_far_above_the_papers_is_said_once(tiny_bert_dir, rows, tmp_path, caplog):
    """1e3 trained without a word: the weights grew ~1,800x without a NaN, and without dev data the export called
    the wrecked encoder trained. A warning, not a refusal: heads and adapters may be trained at larger rates."""
    import logging

    ds, tok = rows
    for lr in (1e3, 1e-3):
        with caplog.at_level(logging.WARNING, logger="hf_cse.trainer"):
            ContrastiveTrainer(model=SimCSEModel.from_encoder(str(tiny_bert_dir)), train_dataset=ds,
                               args=tiny_args(tmp_path / str(lr), per_device_train_batch_size=4, learning_rate=lr),
                               processing_class=tok, no_duplicates_in_batch=False)
    said = [r.getMessage() for r in caplog.records if "learning_rate" in r.getMessage()]
    assert said == ["learning_rate 1000 is 20000000x the papers' largest (5e-5; LoRA runs use up to about 1e-3): it "
                    "can wreck the pretrained encoder without a NaN, so nothing would say so without dev data. Check "
                    "the value (e.g. 3e-5, not 3e5)."]


def test_the_dev_data_and_the_best_metric_are_checked_when_the_trainer_is_built(tiny_bert_dir, rows, tmp_path):
    """A wrong senteval_data_dir failed only after the untrained encoder's scoring (or at the first evaluation), a
    mistyped metric_for_best_model at the first evaluation, steps and a checkpoint later: both now when built."""
    from eval_helpers import write_toy_senteval

    ds, tok = rows

    def build(**args):
        return ContrastiveTrainer(model=SimCSEModel.from_encoder(str(tiny_bert_dir)),
                                  args=tiny_args(tmp_path / "out", per_device_train_batch_size=4, **args),
                                  train_dataset=ds, processing_class=tok, no_duplicates_in_batch=False,
                                  senteval_data_dir=senteval)

    senteval = str(tmp_path / "no-such-senteval")
    with pytest.raises(CSEError, match="no-such-senteval") as refused:
        build()
    assert "(eval_source hub)" in str(refused.value) and "senteval_source" not in str(refused.value)  # the trainer's
    assert refused.value.fields == ("senteval_data_dir", "eval_source")
    senteval = str(write_toy_senteval(tmp_path / "senteval"))
    with pytest.raises(CSEError, match=r"metric_for_best_model stsb_spearmann is not a score this run logs "
                                       r"\(stsb_spearman, sickr_spearman, avg_sts\): use "
                                       r"metric_for_best_model='stsb_spearman'"):
        build(eval_strategy="steps", eval_steps=2, metric_for_best_model="stsb_spearmann")
    build(eval_strategy="steps", eval_steps=2, metric_for_best_model="eval_avg_sts")  # its own name, prefixed too


@pytest.mark.parametrize("given, words", [
    (dict(eval_steps=1), "eval_steps=1 scores nothing during training: the dev data is scored before the first step "
                         "and after the last only (with eval_strategy='no'); add eval_strategy='steps', or drop "
                         "eval_steps."),
    (dict(save_strategy="no", save_steps=5), "save_steps=5 saves nothing: no checkpoint is saved during training "
                                             "(with save_strategy='no'); add save_strategy='steps', or drop "
                                             "save_steps."),
    (dict(save_total_limit=1), "save_total_limit=1 keeps or deletes nothing: no checkpoint is saved during training "
                               "(with save_strategy='no'); add save_strategy='steps', or drop save_total_limit."),
])
def test_an_interval_without_its_strategy_is_refused_when_the_arguments_are_made(tmp_path, given, words):
    """The command line refused --eval_steps without --eval_strategy steps; from Python the run evaluated before and
    after training only, without a word."""
    with pytest.raises(CSEError) as refused:
        ContrastiveTrainingArguments(str(tmp_path / "out"), use_cpu=True, **given)
    assert str(refused.value) == words


def test_intervals_that_apply_or_were_not_given_are_taken(tmp_path, tiny_bert_dir):
    """Only the contradiction given: transformers' own eval_steps (logging_steps', for eval_strategy steps), the
    defaults, and a preset's intervals whose strategy the caller turned off."""
    from hf_cse.presets import from_preset

    out = str(tmp_path / "out")
    assert ContrastiveTrainingArguments(out, use_cpu=True, eval_strategy="steps", logging_steps=3).eval_steps == 3
    assert ContrastiveTrainingArguments(out, use_cpu=True, save_strategy="no", eval_strategy="epoch").eval_steps is None
    _, args = from_preset("simcse_bert", str(tiny_bert_dir), out, eval_strategy="no", save_strategy="no",
                          load_best_model_at_end=False, use_cpu=True)
    assert (args.eval_steps, args.save_steps) == (None, type(args).__dataclass_fields__["save_steps"].default)


def test_a_copy_with_evaluation_turned_off_is_not_refused_for_the_interval_transformers_filled_in(tmp_path):
    """eval_steps is filled in from logging_steps for eval_strategy="steps"; dataclasses.replace(args,
    eval_strategy="no") carried it as if given, and the copy was refused with a fix that undid what it asked."""
    import dataclasses

    args = ContrastiveTrainingArguments(str(tmp_path / "out"), eval_strategy="steps", use_cpu=True,
                                        senteval_data_dir=str(tmp_path))
    assert args.eval_steps == args.logging_steps
    assert dataclasses.replace(args, eval_strategy="no").eval_steps == args.logging_steps
    with pytest.raises(CSEError, match=r"^eval_steps=7 scores nothing during training"):
        ContrastiveTrainingArguments(str(tmp_path / "out"), use_cpu=True, eval_steps=7)


def test_an_eval_steps_given_equal_to_logging_steps_is_refused_without_its_strategy(tmp_path):
    """eval_steps=5 (logging_steps' default) with eval_strategy "no" was accepted, taken for transformers' filling
    in, while eval_steps=10 was refused: the run scored no dev data during training, without a word."""
    import dataclasses

    out = str(tmp_path / "out")
    with pytest.raises(CSEError, match=r"^eval_steps=5 scores nothing during training: .* add eval_strategy='steps'"):
        ContrastiveTrainingArguments(out, use_cpu=True, eval_steps=5)
    with pytest.raises(CSEError, match=r"^eval_steps=3 scores nothing during training"):
        ContrastiveTrainingArguments(out, use_cpu=True, eval_steps=3, logging_steps=3)
    given = ContrastiveTrainingArguments(out, use_cpu=True, eval_strategy="steps", eval_steps=5,
                                         senteval_data_dir=str(tmp_path))
    with pytest.raises(CSEError, match=r"^eval_steps=5 scores nothing"):  # a copy of the given one: given too
        dataclasses.replace(given, eval_strategy="no")


def test_best_model_selection_without_checkpoints_is_one_line_in_field_terms(tmp_path):
    """save_strategy defaults to "no" here: transformers' refusal of load_best_model_at_end without saves was several
    lines naming --flags; one line now, with both ways on."""
    with pytest.raises(CSEError) as refused:
        ContrastiveTrainingArguments(str(tmp_path / "out"), eval_strategy="steps", eval_steps=10, use_cpu=True,
                                     load_best_model_at_end=True, senteval_data_dir=str(tmp_path))
    message = str(refused.value)
    assert "\n" not in message and "--" not in message, message
    assert "add save_strategy='steps' (as eval_strategy)" in message and "load_best_model_at_end=False" in message
    ContrastiveTrainingArguments(str(tmp_path / "out"), eval_strategy="steps", eval_steps=10, save_strategy="steps",
                                 save_steps=10, use_cpu=True, load_best_model_at_end=True,
                                 senteval_data_dir=str(tmp_path))


def test_best_model_selection_without_evaluations_is_refused_in_one_line(tmp_path):
    """eval_strategy and save_strategy both "no" passed transformers' check (the strategies match), and the run then
    trained with no evaluation and no checkpoint: load_best_model_at_end did nothing, without a word."""
    with pytest.raises(CSEError) as refused:
        ContrastiveTrainingArguments(str(tmp_path / "out"), use_cpu=True, load_best_model_at_end=True,
                                     metric_for_best_model="stsb_spearman", senteval_data_dir=str(tmp_path))
    assert str(refused.value) == (
        "load_best_model_at_end=True keeps the checkpoint that scored best on the dev data, and eval_strategy='no' "
        "scores none during training: add eval_strategy='steps' and save_strategy='steps' (save_steps a multiple of "
        "eval_steps), or load_best_model_at_end=False.")
    assert {"load_best_model_at_end", "eval_strategy", "save_strategy"} <= set(refused.value.fields)


def test_an_interval_its_caller_gave_is_refused_whatever_its_value(tmp_path):
    """check_step_intervals lets an eval_steps equal to logging_steps pass (it may be transformers' filling in,
    carried into a copy with evaluation off); a caller that knows what was given refuses it."""
    import dataclasses

    from hf_cse.training_values import check_given_intervals

    on = ContrastiveTrainingArguments(str(tmp_path / "out"), use_cpu=True, eval_strategy="steps",
                                      senteval_data_dir=str(tmp_path))
    off = dataclasses.replace(on, eval_strategy="no")  # eval_steps == logging_steps, filled in by transformers
    check_given_intervals(off, set())
    check_given_intervals(on, {"eval_steps"})
    with pytest.raises(CSEError, match=r"^eval_steps=5 scores nothing during training: .* add eval_strategy='steps'"):
        check_given_intervals(off, {"eval_steps"})


@pytest.mark.parametrize("values, replacement", [
    ({"metric_for_best_model": "stsb_spearman", "eval_file": "dev.tsv", "eval_name": "mydev"}, "mydev_spearman"),
    ({"metric_for_best_model": "eval_avg_sts", "eval_dataset_name": "me/pairs"}, "custom_spearman"),
    # logged: STS dev data is scored, or the metric is the pairs' own
    ({"metric_for_best_model": "stsb_spearman", "eval_file": "dev.tsv", "senteval_data_dir": "SentEval"}, None),
    ({"metric_for_best_model": "stsb_spearman", "eval_file": "dev.tsv", "eval_source": "hub"}, None),
    ({"metric_for_best_model": "custom_spearman", "eval_file": "dev.tsv"}, None),
    # no pairs of one's own to select by, or no STS dev score to replace
    ({"metric_for_best_model": "stsb_spearman"}, None),
    ({"metric_for_best_model": "loss", "eval_file": "dev.tsv"}, None),
    ({"metric_for_best_model": None, "eval_file": "dev.tsv"}, None),
])
def test_a_presets_sts_dev_metric_gives_way_to_your_own_pairs_score_where_only_they_are_scored(values, replacement):
    """One rule for the command line's --preset with --eval_file and for presets.from_preset with eval_file."""
    from types import SimpleNamespace

    from hf_cse.best_metric import own_pairs_metric

    assert own_pairs_metric(SimpleNamespace(**values)) == replacement
