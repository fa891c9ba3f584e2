"""A ``metric_for_best_model`` nobody chose (hf_cse/training_values.py ``unchosen_metric_instead``, applied by
hf_cse/trainer_arguments.py ``select_unchosen_metric``): the trainer selects checkpoints by the run's first dev score,
as hf-cse-train does, where transformers filled in its ``loss`` (load_best_model_at_end without a metric), which no
contrastive run logs, or where a preset's STS dev score meets a run that scores only the caller's pairs. A metric the
caller gave is checked as given."""

from __future__ import annotations

import logging

import pytest
from datasets import Dataset
from eval_helpers import write_toy_senteval
from helpers import random_sentences, tiny_args
from transformers import AutoTokenizer

from hf_cse.best_metric import FILLED_IN, metric_chosen_by, unchosen_metric_instead
from hf_cse.errors import CSEError
from hf_cse.models import SimCSEModel
from hf_cse.presets import from_preset
from hf_cse.trainer import ContrastiveTrainer
from hf_cse.training_args import ContrastiveTrainingArguments

#: evaluation and a checkpoint every step, the best of them loaded at the end
SELECTING = {"max_steps": 2, "eval_strategy": "steps", "eval_steps": 1, "save_strategy": "steps", "save_steps": 1,
             "load_best_model_at_end": True}
#: evaluation every step, a checkpoint saved whenever the dev score improves
SAVING_BEST = {"max_steps": 2, "eval_strategy": "steps", "eval_steps": 1, "save_strategy": "best"}
#: a few scored pairs of one's own, as the trainer's eval_pairs= takes them
PAIRS = [(a, b, float(i % 4)) for i, (a, b) in enumerate(zip(random_sentences(12, seed=1), random_sentences(12, seed=2),
                                                              strict=True))]


def _contrastive_args(out, **values) -> ContrastiveTrainingArguments:
    return ContrastiveTrainingArguments(str(out), per_device_train_batch_size=8, use_cpu=True, report_to=[],
                                        disable_tqdm=True, logging_steps=1, **values)


def _trainer(encoder, args, **kwargs) -> ContrastiveTrainer:
    tok = AutoTokenizer.from_pretrained(encoder)
    return ContrastiveTrainer(model=SimCSEModel.from_encoder(str(encoder)), args=args, processing_class=tok,
                              train_dataset=Dataset.from_dict({"text": random_sentences(32)}), **kwargs)


def test_the_rule_replaces_only_a_metric_nobody_chose_that_the_run_would_not_log():
    scores = ["stsb_spearman", "sickr_spearman", "avg_sts", "mydev_spearman"]
    assert unchosen_metric_instead("loss", FILLED_IN, scores) == "stsb_spearman"
    assert unchosen_metric_instead("loss", FILLED_IN, ["mydev_spearman"]) == "mydev_spearman"
    assert unchosen_metric_instead("loss", FILLED_IN, scores, selects=False) is None  # selects no checkpoint
    assert unchosen_metric_instead("loss", "", scores) is None  # the caller's: checked as given
    assert unchosen_metric_instead("loss", FILLED_IN, []) is None  # nothing known to select by
    assert unchosen_metric_instead("eval_avg_sts", FILLED_IN, scores) is None  # logged
    assert unchosen_metric_instead("stsb_spearman", "preset simcse_bert", ["custom_spearman"]) == "custom_spearman"
    assert unchosen_metric_instead("stsb_spearman", "preset simcse_bert", scores) is None


def test_whether_transformers_filled_the_metric_in_is_recorded_in_the_arguments(tmp_path):
    filled = _contrastive_args(tmp_path, **SELECTING)
    assert (filled.metric_for_best_model, metric_chosen_by(filled)) == ("loss", FILLED_IN)
    typed = _contrastive_args(tmp_path, metric_for_best_model="loss", **SELECTING)
    assert metric_chosen_by(typed) == ""
    assert metric_chosen_by(_contrastive_args(tmp_path)) == ""  # none at all
    # plain TrainingArguments do not say: their 'loss' with load_best_model_at_end is taken for transformers'
    assert metric_chosen_by(tiny_args(tmp_path, **SELECTING)) == FILLED_IN
    # save_strategy="best" without a metric: transformers refuses it as the trainer is built; filled in the same way
    saving = _contrastive_args(tmp_path, **SAVING_BEST)
    assert (saving.metric_for_best_model, saving.greater_is_better, metric_chosen_by(saving)) == ("loss", False,
                                                                                                  FILLED_IN)


def test_save_strategy_best_without_evaluation_is_refused_in_one_line(tmp_path, tiny_bert_dir):
    """transformers saves a 'best' checkpoint only after an evaluation: without one the run kept no checkpoint."""
    said = (r"^save_strategy='best' saves a checkpoint whenever the dev score improves, and eval_strategy='no' "
            r"scores none during training: add eval_strategy='steps' \(with eval_steps\) or 'epoch', or "
            r"save_strategy='steps'\.$")
    with pytest.raises(CSEError, match=said):
        _contrastive_args(tmp_path / "out", save_strategy="best", metric_for_best_model="stsb_spearman")
    with pytest.raises(CSEError, match=said):  # plain TrainingArguments, as the trainer is built
        _trainer(tiny_bert_dir, tiny_args(tmp_path / "plain", save_strategy="best", metric_for_best_model="x"))
    assert not (tmp_path / "plain").exists()


@pytest.mark.slow  # trains two steps four times, with checkpoints
@pytest.mark.parametrize("kind", ["contrastive", "plain"])
@pytest.mark.parametrize("selector", ["load_best_model_at_end", "save_strategy best"])
def test_a_run_selecting_checkpoints_without_a_metric_selects_by_sts_b_dev_and_trains(tiny_bert_dir, tmp_path, caplog,
                                                                                      kind, selector):
    """It was refused at the first evaluation: "metric_for_best_model='loss' is not among the dev metrics", a metric
    the caller never gave; and save_strategy="best" without one stopped in a transformers traceback as the trainer was
    built. The caller's arguments keep their values; the trainer's copy records the choice."""
    senteval = str(write_toy_senteval(tmp_path / "senteval"))
    selecting = SELECTING if selector == "load_best_model_at_end" else SAVING_BEST
    if kind == "contrastive":
        args, given = _contrastive_args(tmp_path / "out", senteval_data_dir=senteval, **selecting), {}
    else:
        args, given = tiny_args(tmp_path / "out", **selecting), {"senteval_data_dir": senteval}
    as_given = (args.metric_for_best_model, args.greater_is_better)
    # transformers' filling in (ContrastiveTrainingArguments' for save_strategy="best"); plain ones give none there
    assert as_given == ((None, None) if (kind, selector) == ("plain", "save_strategy best") else ("loss", False))
    with caplog.at_level(logging.INFO, logger="hf_cse.trainer"):
        trainer = _trainer(tiny_bert_dir, args, **given)
    assert (trainer.args.metric_for_best_model, trainer.args.greater_is_better) == ("stsb_spearman", True)
    assert (args.metric_for_best_model, args.greater_is_better) == as_given
    [said] = [r.getMessage() for r in caplog.records if "selected by" in r.getMessage()]
    assert said == (f"{selector} without metric_for_best_model (transformers' default, 'loss', is never "
                    "logged by a contrastive run): checkpoints are selected by stsb_spearman; metric_for_best_model "
                    "chooses another")
    trainer.train()
    scored = {h["step"]: h["eval_stsb_spearman"] for h in trainer.state.log_history if "eval_stsb_spearman" in h}
    assert trainer.state.best_metric == max(scored[1], scored[2])
    assert trainer.state.best_model_checkpoint.endswith(f"checkpoint-{max((1, 2), key=scored.get)}")


@pytest.mark.slow  # two trainers built
def test_eval_pairs_alone_select_by_their_score_and_a_metric_one_gave_is_still_refused(tiny_bert_dir, tmp_path):
    trainer = _trainer(tiny_bert_dir, _contrastive_args(tmp_path / "out", **SELECTING), eval_pairs=PAIRS)
    assert (trainer.args.metric_for_best_model, trainer.args.greater_is_better) == ("custom_spearman", True)
    for given in ("loss", "stsb_spearman"):  # typed: the caller's choice, refused as before
        with pytest.raises(CSEError, match=rf"^metric_for_best_model {given} is not a score this run logs "
                                           r"\(custom_spearman\): use metric_for_best_model='custom_spearman'\.$"):
            _trainer(tiny_bert_dir, _contrastive_args(tmp_path / given, metric_for_best_model=given, **SELECTING),
                     eval_pairs=PAIRS)


@pytest.mark.slow  # two trainers built
def test_a_presets_sts_metric_gives_way_to_the_trainers_eval_pairs(tiny_bert_dir, tmp_path, caplog):
    """from_preset follows eval_file; the trainer's eval_pairs= is not the preset's to see: the trainer follows them,
    as the preset's metric is nobody's choice. One given to from_preset is checked as given."""
    common = {"use_cpu": True, "per_device_train_batch_size": 8, "report_to": [], "eval_steps": 1, "save_steps": 1}
    model, args = from_preset("simcse_bert", str(tiny_bert_dir), str(tmp_path / "preset"), **common)
    assert (args.metric_for_best_model, args.load_best_model_at_end) == ("stsb_spearman", True)
    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    data = Dataset.from_dict({"text": random_sentences(32)})
    with caplog.at_level(logging.INFO, logger="hf_cse.trainer"):
        trainer = ContrastiveTrainer(model=model, args=args, processing_class=tok, train_dataset=data,
                                     eval_pairs=PAIRS)
    assert (trainer.args.metric_for_best_model, trainer.args.greater_is_better) == ("custom_spearman", True)
    [said] = [r.getMessage() for r in caplog.records if "selected by" in r.getMessage()]
    assert said == ("preset simcse_bert selects by stsb_spearman, but this run scores no STS dev data, only your own "
                    "pairs: checkpoints are selected by custom_spearman; metric_for_best_model chooses another")
    model, chosen = from_preset("simcse_bert", str(tiny_bert_dir), str(tmp_path / "chosen"),
                                metric_for_best_model="stsb_spearman", **common)
    with pytest.raises(CSEError, match=r"metric_for_best_model stsb_spearman is not a score this run logs"):
        ContrastiveTrainer(model=model, args=chosen, processing_class=tok, train_dataset=data, eval_pairs=PAIRS)


@pytest.mark.slow  # scores the untrained encoder
def test_an_evaluator_whose_main_score_is_known_only_once_it_ran_is_refused_naming_its_scores(tiny_bert_dir,
                                                                                              tmp_path):
    """sentence-transformers' EmbeddingSimilarityEvaluator names its primary metric only once it has run: refused
    at the untrained encoder's scoring, before the first step, saying that no metric was given (not quoting
    transformers' 'loss' as the caller's); once it has run, it is known, and selects."""
    from sentence_transformers.sentence_transformer.evaluation import EmbeddingSimilarityEvaluator

    st_eval = EmbeddingSimilarityEvaluator(*map(list, zip(*PAIRS, strict=True)), name="mydev", write_csv=False)
    trainer = _trainer(tiny_bert_dir, _contrastive_args(tmp_path / "out", **SELECTING), evaluator=st_eval)
    with pytest.raises(CSEError, match=r"^load_best_model_at_end=True without metric_for_best_model \(transformers "
                                       r"fills in 'loss', .*: give metric_for_best_model, one of the dev metrics "
                                       r"\(mydev_pearson_cosine, mydev_spearman_cosine\)\.$"):
        trainer.train()
    assert trainer.state.global_step == 0
    again = _trainer(tiny_bert_dir, _contrastive_args(tmp_path / "again", **SELECTING), evaluator=st_eval)
    assert (again.args.metric_for_best_model, again.args.greater_is_better) == ("mydev_spearman_cosine", True)
