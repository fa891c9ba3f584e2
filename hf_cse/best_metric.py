"""The dev scores a run logs and the ``metric_for_best_model`` that selects its checkpoint: which scores a run's
settings log (:func:`dev_scores_of`), who chose the metric (the caller, transformers' filling in, a preset), the one
rule that replaces a metric nobody chose which the run would never log, and the refusals of a metric the run does not
log or reads the wrong way round. Checked where the arguments are made, by the trainer, and by the command line before
the training stack is imported.

No torch or transformers here (as :mod:`hf_cse.training_values`)."""

from __future__ import annotations

import re

from .checks import InputError
from .training_values import strategy_name

#: the dev score of each STS task with a dev split, as :class:`hf_cse.evaluation.evaluators.STSDevEvaluator` logs it
#: (its one home: here, for the checks made before torch is imported)
STS_DEV_METRICS = {"STSBenchmark": "stsb_spearman", "SICKRelatedness": "sickr_spearman"}
#: what STS dev scoring logs: each task's score and their mean
STS_DEV_SCORES = (*STS_DEV_METRICS.values(), "avg_sts")


def dev_scores(scores_sts: bool, pairs_name: str | None = None) -> list[str]:
    """The dev scores a run logs, its primary one first: STS-B / SICK-R dev's where it scores them (``scores_sts``:
    ``senteval_data_dir`` given, or ``eval_source="hub"``), and its own scored pairs' (``pairs_name``, the
    ``eval_name`` of an ``eval_file`` / ``eval_dataset_name``; None: no pairs of its own)."""
    return [*(STS_DEV_SCORES if scores_sts else ()), *([f"{pairs_name}_spearman"] if pairs_name else [])]


def dev_scores_of(values) -> list[str]:
    """The dev scores a run of these values logs (:func:`dev_scores`), read from its arguments (or their values by
    the same names): STS dev's with ``senteval_data_dir`` or ``eval_source="hub"``, its own pairs' with ``eval_file``
    or ``eval_dataset_name``."""
    own = getattr(values, "eval_file", None) or getattr(values, "eval_dataset_name", None)
    scores_sts = getattr(values, "senteval_data_dir", None) is not None or getattr(values, "eval_source", None) == "hub"
    return dev_scores(scores_sts, (getattr(values, "eval_name", None) or "custom") if own else None)


#: who set a ``metric_for_best_model`` the caller did not give (:func:`metric_chosen_by`): transformers, which fills
#: in ``loss`` where ``load_best_model_at_end`` names no metric, or a preset (``"preset NAME"``)
FILLED_IN, PRESET = "transformers", "preset"


def checkpoint_selector(args) -> str:
    """What keeps a checkpoint by ``metric_for_best_model``: ``"load_best_model_at_end"`` (the best one loaded at the
    end), ``"save_strategy"`` (``'best'``: one saved whenever the dev score improves), or ``""`` (nothing)."""
    if getattr(args, "load_best_model_at_end", False):
        return "load_best_model_at_end"
    return "save_strategy" if strategy_name(getattr(args, "save_strategy", None)) == "best" else ""


def fill_in_best_metric(args) -> None:
    """transformers fills in ``loss`` where ``load_best_model_at_end`` names no ``metric_for_best_model``, and refuses
    ``save_strategy='best'`` without one with a traceback as the trainer is built: filled in the same way for both,
    so the trainer's rule (:func:`unchosen_metric_instead`) selects by the run's dev score in either."""
    if getattr(args, "metric_for_best_model", None) is None and checkpoint_selector(args) == "save_strategy":
        args.metric_for_best_model = "loss"


def metric_chosen_by(args) -> str:
    """Who chose ``args.metric_for_best_model``: ``""`` the caller (or nobody: None), :data:`FILLED_IN` transformers'
    ``loss`` (:func:`fill_in_best_metric`), ``"preset NAME"`` a preset (``ContrastiveTrainingArguments.filled_in``
    records both). Plain ``TrainingArguments`` do not say: ``loss`` where the run selects a checkpoint
    (:func:`checkpoint_selector`) is taken for the filling in."""
    recorded = getattr(args, "filled_in", None)
    if recorded is not None:
        return recorded.get("metric_for_best_model", "")
    metric = getattr(args, "metric_for_best_model", None)
    return FILLED_IN if metric in ("loss", "eval_loss") and checkpoint_selector(args) else ""


def unchosen_metric_instead(metric: str | None, chosen_by: str, scores: list[str],
                            selects: bool = True) -> str | None:
    """The dev score that replaces a ``metric_for_best_model`` nobody chose which the run would not log, the one rule
    of the command line and the trainer: transformers' ``loss`` (``chosen_by`` :data:`FILLED_IN`) in a run that
    ``selects`` a checkpoint by it (:func:`checkpoint_selector`) gives way to the run's first dev score
    (``scores[0]``: STS-B dev's where it is scored, else the user's own pairs', else an evaluator's primary metric),
    and a preset's STS dev score in a run that scores no STS dev data to the user's pairs' score. None: kept
    (``chosen_by`` empty: the caller's choice, checked as given; or logged; or no dev score to select by)."""
    name = (metric or "").removeprefix("eval_")
    if not metric or not chosen_by or not scores or name in scores:
        return None
    if chosen_by == FILLED_IN:
        return scores[0] if selects else None
    sts_scored = any(score in STS_DEV_SCORES for score in scores)
    return scores[0] if chosen_by.startswith(PRESET) and name in STS_DEV_SCORES and not sts_scored else None


def unchosen_metric_said(metric: str, chosen_by: str, instead: str, scored: str = "your own pairs",
                         term=str, scoring: str = "this run scores", selector: str = "load_best_model_at_end") -> str:
    """The log line of :func:`unchosen_metric_instead`'s replacement of ``metric`` by ``instead``; ``scored``: what
    the run scores instead of STS dev data; ``term``: how an option is named (the command line's ``--flag``);
    ``scoring``: what scores, with its verb (``"these arguments score"`` where they are made, before any run:
    :func:`hf_cse.presets.from_preset`); ``selector``: :func:`checkpoint_selector`'s answer."""
    if chosen_by == FILLED_IN:
        option = f"{term('save_strategy')} best" if selector == "save_strategy" else term(selector)
        why = (f"{option} without {term('metric_for_best_model')} (transformers' default, 'loss', is never logged by "
               f"a contrastive run)")
    else:
        why = f"{term(chosen_by)} selects by {metric}, but {scoring} no STS dev data, only {scored}"
    return f"{why}: checkpoints are selected by {instead}; {term('metric_for_best_model')} chooses another"


def own_pairs_metric(values) -> str | None:
    """The score of the user's own pairs that replaces a preset's STS dev ``metric_for_best_model`` in a run that
    scores those pairs and no STS dev data, which would never log it (the trainer refuses it); None where the metric
    is logged or is no STS dev score. Applies only to a metric a preset set: one the user chose is checked as given."""
    return unchosen_metric_instead(getattr(values, "metric_for_best_model", None), PRESET, dev_scores_of(values))


#: a correlation's metric name: ``..._spearman`` / ``..._pearson``, or a sentence-transformers evaluator's with its
#: similarity (``..._spearman_cosine``)
CORRELATION_NAME = re.compile(r"(^|_)(spearman|pearson)(_(cosine|dot|euclidean|manhattan|max))?$")


def higher_is_better(metric: str, logged: list[str] = ()) -> bool:
    """Whether ``metric`` is known to be higher the better: every score hf_cse logs for model selection (``logged``)
    is a correlation on dev pairs (``stsb_spearman``, ``sickr_spearman``, ``avg_sts``, ``<eval_name>_spearman``), and
    so is a sentence-transformers evaluator's Spearman or Pearson score (``sts-dev_spearman_cosine``); not a name
    that merely holds the word (``sts-dev_spearman_pvalue``, ``pearson_distance``)."""
    name = metric.removeprefix("eval_")
    return name in logged or name == "avg_sts" or CORRELATION_NAME.search(name) is not None


def check_best_metric_direction(args, logged: list[str] = ()) -> None:
    """``greater_is_better=False`` with a score that is higher the better (:func:`higher_is_better`) would keep the
    checkpoint of the lowest dev score, the worst. Refused whatever the eval_strategy: the comparison with the
    untrained encoder after training reads ``metric_for_best_model`` in the same direction. A metric not known here
    (one's own evaluator's, a loss) is left to ``greater_is_better``."""
    metric = args.metric_for_best_model
    if metric and args.greater_is_better is False and higher_is_better(metric, logged):
        raise InputError(f"greater_is_better False would keep the checkpoint of the lowest {metric}, the worst: it "
                         "is a correlation, higher the better. Leave greater_is_better out (or set it True).",
                         fields=("greater_is_better", "metric_for_best_model"))


def check_best_metric(args, logged: list[str], filled_in: bool | None = None) -> None:
    """``metric_for_best_model`` names a score the run's evaluation logs (``logged``; none known: not checked): the
    Trainer looks it up only at the first evaluation, steps (and a checkpoint) later, and fails with a KeyError there.
    ``loss`` (its default with load_best_model_at_end) is never logged: contrastive runs are scored on dev pairs.
    ``greater_is_better`` reads it the right way round (:func:`check_best_metric_direction`). ``filled_in``: whether
    the metric is transformers' filling in (None: taken to be where it is ``loss`` with load_best_model_at_end)."""
    check_best_metric_direction(args, logged)
    metric = args.metric_for_best_model
    strategy = getattr(args.eval_strategy, "value", args.eval_strategy)  # IntervalStrategy.STEPS -> "steps"
    if metric and logged and strategy != "no" and metric.removeprefix("eval_") not in logged:
        # transformers sets "loss" itself where load_best_model_at_end names no metric: say where it came from
        if filled_in is None:
            filled_in = metric_chosen_by(args) == FILLED_IN
        given = (f" (what transformers sets where {checkpoint_selector(args) or 'load_best_model_at_end'} names no "
                 "metric)") if filled_in else ""
        raise InputError(f"metric_for_best_model {metric}{given} is not a score this run logs "
                         f"({', '.join(logged)}): use metric_for_best_model={logged[0]!r}.",
                         fields=("metric_for_best_model", "load_best_model_at_end"))
