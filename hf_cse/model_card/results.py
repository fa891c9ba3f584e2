"""Evaluation results on a model card: ``run_eval.py``'s ``results.json`` read and checked, the Hub ``model-index``
entries, and the card's evaluation section. Task names, their display headers and the Hub data sets standing for
them come from :mod:`hf_cse.evaluation`."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import CSEError, PathNotFoundError
from ..evaluation.data import STS_TASKS, STS_YEARS, TABLE_NAMES, TRANSFER_TASKS
from ..evaluation.hub_data import HUB_DATASETS
from ..evaluation.results import EvalResults, score_text
from ..evaluation.sts import AGGREGATION_WORDS
from ..evaluation.transfer import MRPC_FEATURE_WORDS, TRANSFER_MODE_WORDS
from .extra_scores import mteb_model_index_results, mteb_section, own_data_section
from .text import fmt, is_number, kv_table, table


class ModelCardError(CSEError):
    """A model card that cannot be rendered (e.g. evaluation results that are not one model's)."""


def read_eval_results(results: EvalResults | Mapping[str, Any] | str | Path | None) -> EvalResults:
    """``run_eval.py``'s ``results.json`` of ONE model (a path, an already loaded dict or a record), checked (one
    model's, evaluation results, a finished evaluation's); an empty record when ``results`` is None."""
    if results is None:
        return EvalResults()
    if isinstance(results, EvalResults):
        check_finished(results)
        return results
    source = "eval_results"
    if not isinstance(results, Mapping):
        path = Path(results)
        source = str(path)
        if not path.is_file():
            raise PathNotFoundError(f"evaluation results {path} not found; give the results.json of run_eval.py.")
        try:
            results = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as err:
            raise ModelCardError(f"{path} is not valid JSON ({err}); give the results.json of run_eval.py.") from None
    if not isinstance(results, Mapping):
        raise ModelCardError(f"{source} must hold a JSON object of task -> score, got {type(results).__name__}.")
    if "models" in results:
        raise ModelCardError(f"{source} holds the results of several models; give this model's own results.json "
                             "(run_eval.py writes one per model in model_<i>_<name>/).")
    if "training_args" in results:  # its numbers (world_size, ...) would be published as scores
        raise ModelCardError(f"{source} is a training record (training_info.json), not evaluation results; give it as "
                             "training_info, and run_eval.py's results.json as eval_results.")
    try:
        record = EvalResults.from_dict(results)
    except ValueError as err:
        raise ModelCardError(f"{source}: {err}") from None
    check_finished(record, source)
    return record


def check_finished(results: EvalResults, source: str = "eval_results") -> None:
    """Refuse the results of an evaluation stopped before it finished (``unfinished_tasks``, written while
    ``run_eval.py`` runs): the card and its Hub metadata would publish the tasks it finished as the model's whole
    evaluation. Results stopped while drawing their plots hold every score and are taken."""
    missing = results.unscored_tasks
    if missing:
        raise ModelCardError(f"{source} holds an evaluation stopped before it finished (no results yet for "
                             f"{', '.join(missing)}): run the run_eval.py command that wrote it again, with the same "
                             "settings and output folder, to finish it, and give its results.json then; or leave "
                             "eval_results out.")


def eval_scores(results: EvalResults) -> dict[str, float]:
    """The top-level numeric scores of results.json (``details``, ``settings``, ``timing`` are not scores)."""
    return {str(k): float(v) for k, v in results.to_dict().items() if is_number(v)}


def eval_settings(results: EvalResults) -> dict[str, Any]:
    """How the scores were measured (``run_eval.py``'s ``settings``), without machine-local values."""
    settings = results.settings or {}
    keep = ("mode", "sts_aggregation", "precision", "pooler", "senteval_source", "mrpc_features", "kind")
    return {k: settings[k] for k in keep if settings.get(k) is not None}


def hub_split(task: str, mode: str | None) -> str | None:
    """The Hub data set's split that ``run_eval.py``'s ``mode`` scored ``task`` on: ``dev`` -> its dev split
    (``validation``), ``test`` / ``fast`` -> ``test``; None where the data set has no such split of its own (a
    transfer task's cross-validation over all its rows)."""
    splits = HUB_DATASETS[task].get("splits") or {}
    hub = splits.get("dev" if mode == "dev" else "test")
    return hub[0] if hub else None


def measured_otherwise(results: EvalResults) -> list[tuple[list[str], str]]:
    """The STS and transfer tasks scored otherwise than the papers score them, with how: ``[(tasks, how)]``.
    The ``model-index`` leaves them out (it names a score by its data set and metric only, so they would pass for
    the papers' numbers); the card's text says how they were measured: STS12-16 under an ``sts_aggregation`` other
    than ``all`` (a mean of their subsets' correlations), the transfer tasks of ``mode`` ``fast`` or ``dev`` (the
    fast 5-fold classifier; in ``dev``, its dev accuracy), MRPC with ``mrpc_features`` ``full``."""
    settings = results.settings or {}
    aggregation, mode = settings.get("sts_aggregation", "all"), settings.get("mode", "test")
    features = settings.get("mrpc_features", "senteval")
    found = [
        ([t for t in STS_YEARS if t in results.sts] if aggregation != "all" else [],
         f"{AGGREGATION_WORDS.get(aggregation, aggregation)} (`sts_aggregation` = {aggregation}), not one correlation "
         "over all of the year's pairs as the papers report"),
        ([t for t in TRANSFER_TASKS if t in results.transfer] if mode != "test" else [],
         f"{TRANSFER_MODE_WORDS.get(mode, mode)} (`mode` = {mode})"),
        (["MRPC"] if features != "senteval" and "MRPC" in results.transfer else [],
         f"the classifier saw the pair features {MRPC_FEATURE_WORDS.get(features, features)} "
         f"(`mrpc_features` = {features})"),
    ]
    return [(tasks, how) for tasks, how in found if tasks]


def _protocol_notes(results: EvalResults, tasks: list[str]) -> list[str]:
    """The card's lines on those of ``tasks`` that were :func:`measured_otherwise`."""
    return [line for which, how in measured_otherwise(results) if set(which) & set(tasks)
            for line in ("", f"{', '.join(TABLE_NAMES.get(t, t) for t in which)}: {how}; so not in the Hub metadata "
                             "(`model-index`).")]


def model_index_results(results: EvalResults) -> list:
    """``huggingface_hub.EvalResult`` entries (the card's ``model-index``) for the STS and transfer scores measured
    as the papers measure them (not :func:`measured_otherwise`), with the split that ``run_eval.py``'s ``mode``
    (``settings["mode"]``; default test) scored, and for the MTEB scores whose metric and data can be named
    (:func:`.extra_scores.mteb_model_index_results`)."""
    from huggingface_hub import EvalResult

    mode = (results.settings or {}).get("mode")
    scores = eval_scores(results)
    left_out = {t for tasks, _ in measured_otherwise(results) for t in tasks}
    entries = []
    for task in STS_TASKS:
        if task in scores and task not in left_out:
            entries.append(EvalResult(
                task_type="sentence-similarity", task_name="Semantic Textual Similarity",
                dataset_type=HUB_DATASETS[task]["repo"], dataset_name=task, dataset_split=hub_split(task, mode),
                metric_type="spearman", metric_name="Spearman correlation (x100, cosine)",
                metric_value=round(scores[task], 2),
            ))
    for task in TRANSFER_TASKS:
        if task in scores and task not in left_out:
            entries.append(EvalResult(
                task_type="text-classification", task_name="SentEval transfer",
                dataset_type=HUB_DATASETS[task]["repo"], dataset_name=f"SentEval {task}",
                metric_type="accuracy", metric_name="Accuracy (x100)", metric_value=round(scores[task], 2),
            ))
    return entries + mteb_model_index_results(results)


def kept_untrained(dev: Mapping[str, Any] | None) -> bool:
    """Whether the run saved the untrained encoder (``training_info["dev"]["kept_step"]`` 0): training did not beat
    it on the dev data, so the weights shipped are the encoder's own."""
    return bool(dev) and dev.get("kept_step") == 0


#: what a card says first where the run kept the untrained encoder
KEPT_UNTRAINED = ("**Training did not beat the encoder it started from on the dev data, so the weights here are that "
                  "encoder's, unchanged** (see Evaluation): this model is the untrained encoder with the pooling "
                  "below, not a trained one.")

#: what a card says first where the run's loss was 0 at every step (its record: hf_cse.zero_loss.ZERO_LOSS_KEY)
ZERO_LOSS = ("**The training loss was exactly 0 at every step, so training changed (next to) nothing: the weights "
             "here are (about) those of the encoder it started from** (the objective was already satisfied on the "
             "training batches, e.g. every positive beat its negatives by more than a margin loss's margin).")


def dev_change_line(dev: Mapping[str, Any] | None) -> str:
    """The training run's own check (``training_info["dev"]``): its dev score before and after training, and which
    weights were saved where they are the untrained encoder's."""
    if not dev or not all(is_number(dev.get(k)) for k in ("before", "after", "delta")):
        return ""  # no dev data, or a score that is undefined (every pair scored the same: NaN, stored as null)
    gain = dev["delta"] if dev.get("greater_is_better", True) else -dev["delta"]  # False: a loss, lower is better
    verdict = "better" if gain > 0 else "worse" if gain < 0 else "unchanged"
    kept = (f" The weights saved are the untrained encoder's (step 0, dev {dev['before']:.2f}), not the trained "
            "model's." if kept_untrained(dev) else "")
    step = dev.get("kept_step")  # the step of the weights saved: the last, or the best checkpoint's
    after = (f"at step {step}, whose weights were saved" if isinstance(step, int) and step > 0
             else "for the trained model")
    return (f"During training, the dev metric `{dev['metric']}` went from {dev['before']:.2f} before "
            f"the first step to {dev['after']:.2f} {after} ({dev['delta']:+.2f}: {verdict} than the encoder it "
            "started from)." + (f" Both were scored in {dev['precision']}." if dev.get("precision") else "") + kept)


def _score_table(results: EvalResults, tasks: list[str], avg: float | None, label: str) -> str:
    """One row: the tasks' scores under their display names, and their average under its label."""
    header = tuple(TABLE_NAMES.get(t, t) for t in tasks) + ((label,) if avg is not None else ())
    row = tuple(f"{results.score(t):.2f}" for t in tasks) + ((f"{avg:.2f}",) if avg is not None else ())
    return table(header, [row])


def _dimension_table(results: EvalResults) -> str:
    from ..evaluation.dimensions import dimension_rows

    full = {"sts": results.sts, "avg": results.sts_avg, "mteb": results.mteb}
    rows = dimension_rows((results.settings or {}).get("embedding_dim"), full, results.dimensions or {})
    columns = list(dict.fromkeys(c for _, cols in rows for c in cols))
    header = ("Dimension",) + tuple(results.sts_avg_label if c == "avg" else TABLE_NAMES.get(c, c) for c in columns)
    return table(header, [(label, *("-" if cols.get(c) is None else f"{cols[c]:.2f}" for c in columns))
                          for label, cols in rows])


def evaluation_section(results: EvalResults, pooling: str, dev: Mapping[str, Any] | None = None,
                       dev_note: str | None = None) -> str:
    """The scores as tables (STS, transfer, others, MTEB, the user's own pairs: :mod:`.extra_scores`; averages
    labelled with the tasks they are over) and how they were measured, or how to add them; and the training run's dev
    score before and after training, when it had dev data (with ``dev_note``, where its embedding is not the one the
    model ships: the config's ``dev_scoring_note``)."""
    scores, settings = eval_scores(results), eval_settings(results)
    before_after = dev_change_line(dev)
    if before_after and dev_note:
        before_after = f"{before_after} {dev_note}"
    if not (scores or results.mteb or results.own_data_scores()):
        missing = ("No evaluation results were attached to this export. Score the model with `run_eval.py` and "
                   "re-export with `eval_results results.json` (or `eval_results=` in "
                   "`hf_cse.export.to_sentence_transformer`) to add them here and to the Hub metadata.")
        return f"{before_after}\n\n{missing}" if before_after else missing
    parts = []
    sts = [t for t in STS_TASKS if t in scores]
    if sts:
        split = "dev" if settings.get("mode") == "dev" else "test"
        parts += [f"Semantic textual similarity ({split} sets, Spearman correlation x 100 of cosine similarities, "
                  f"SentEval protocol as in SimCSE, embeddings = {pooling}):", "",
                  _score_table(results, sts, scores.get("avg"), results.sts_avg_label), *_protocol_notes(results, sts)]
    transfer = [t for t in TRANSFER_TASKS if t in scores]
    if transfer:
        mode = settings.get("mode", "test")
        protocol = f"; {TRANSFER_MODE_WORDS['test']}" if mode == "test" else ""  # other modes: in their note
        parts += ["", f"SentEval transfer tasks (accuracy x 100, logistic regression on frozen embeddings{protocol}):",
                  "", _score_table(results, transfer, scores.get("transfer_avg"), results.transfer_avg_label),
                  *_protocol_notes(results, transfer)]
    known = set(STS_TASKS) | set(TRANSFER_TASKS) | {"avg", "transfer_avg"}
    other = {k: score_text(k, v) for k, v in scores.items() if k not in known}  # as results.md writes them
    if other:
        parts += ["", "Other scores:", "", kv_table(("Metric", "Value"), other, value_fmt=str)]
    parts += mteb_section(results) + own_data_section(results)
    if results.dimensions:
        parts += ["", "By embedding dimension (the first d coordinates, as `truncate_dim=d` serves them; "
                  "`hf_cse.evaluation.dimensions.evaluate_dimensions`):", "", _dimension_table(results)]
    if settings:
        parts += ["", "Evaluation settings (`run_eval.py`): "
                  + ", ".join(f"{k} = {fmt(v)}" for k, v in settings.items()) + "."]
    if before_after:
        parts += ["", before_after]
    return "\n".join(parts).strip()
