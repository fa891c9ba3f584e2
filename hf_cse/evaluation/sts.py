"""Semantic textual similarity: cosine of the two embeddings vs gold scores, Spearman x 100.

Follows SimCSE's modified SentEval (``senteval/sts.py``, ``evaluation.py``):

* STS12-16: every subset is scored; the reported number is, by default, **"all"**: one Spearman over the
  concatenation of the year's subsets (what the five papers report). ``"wmean"`` (mean of the subsets'
  Spearman weighted by their number of pairs) and ``"mean"`` (unweighted) are SentEval's other two.
* STSBenchmark and SICKRelatedness: the test split (``mode="test"`` / ``"fast"``) or the dev split
  (``mode="dev"``, used for model selection); STS12-16 have no dev split and are skipped in dev mode.
* ``avg`` is the mean of the task scores that were computed: the papers' "Avg." only when all 7 tasks ran
  (tables label it with its tasks: :func:`hf_cse.evaluation.results.average_label`).

No training of any kind (the unsupervised STS-B / SICK-R evaluations, never the ``-finetune`` regressors).
"""

from __future__ import annotations

import logging
from typing import Literal, Sequence, get_args

import numpy as np
from scipy.stats import pearsonr, spearmanr

from ..errors import CSEError
from .data import MODES, STS_TASKS, STS_YEARS, TABLE_NAMES, Mode, Source, STSPairs, load_sts
from .results import average_label, text_table

logger = logging.getLogger(__name__)

#: how STS12-16's subsets make one score (see the module docstring)
Aggregation = Literal["all", "wmean", "mean"]
AGGREGATIONS: tuple[str, ...] = get_args(Aggregation)
#: what a score of STS12-16 is under each aggregation, as a model card says it
AGGREGATION_WORDS = {"all": "one Spearman correlation over all of the year's pairs, as the papers report",
                     "wmean": "the mean of the Spearman correlations of the year's subsets, weighted by their pairs",
                     "mean": "the mean of the Spearman correlations of the year's subsets"}


def pairwise_cosine(emb1: np.ndarray, emb2: np.ndarray) -> np.ndarray:
    """Row-wise cosine (float64) of un-normalised vectors; 0 where a vector is zero (SentEval nan_to_num)."""
    a = np.asarray(emb1, dtype=np.float64)
    b = np.asarray(emb2, dtype=np.float64)
    num = (a * b).sum(axis=1)
    den = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.nan_to_num(num / den)


def spearman100(pred: np.ndarray, gold: np.ndarray) -> float:
    return float(spearmanr(pred, gold)[0] * 100.0)


def pearson100(pred: np.ndarray, gold: np.ndarray) -> float:
    return float(pearsonr(pred, gold)[0] * 100.0)


def aggregate(subsets: dict[str, tuple[np.ndarray, np.ndarray]]) -> dict[str, dict]:
    """SentEval's aggregation of scored subsets ``{name: (predicted, gold)}``.

    Returns ``{"subsets": {name: {"spearman", "pearson", "n"}}, "all": ..., "wmean": ..., "mean": ...}``
    (all Spearman x 100; "all" pools every pair, "wmean"/"mean" average the per-subset Spearman).
    """
    per = {
        name: {"spearman": spearman100(p, g), "pearson": pearson100(p, g), "n": int(len(g))}
        for name, (p, g) in subsets.items()
    }
    spr = np.array([v["spearman"] for v in per.values()])
    weights = np.array([v["n"] for v in per.values()], dtype=np.float64)
    pred = np.concatenate([p for p, _ in subsets.values()])
    gold = np.concatenate([g for _, g in subsets.values()])
    return {
        "subsets": per,
        "all": spearman100(pred, gold),
        "wmean": float(np.average(spr, weights=weights)),
        "mean": float(np.mean(spr)),
    }


def resolve_sts_tasks(tasks: Sequence[str] | None, mode: Mode) -> list[str]:
    tasks = list(STS_TASKS if tasks is None else tasks)
    for t in tasks:
        if t not in STS_TASKS:
            raise CSEError(f"Unknown STS task {t!r}. Valid STS tasks: {', '.join(STS_TASKS)}.")
    if mode not in MODES:
        raise CSEError(f"Unknown mode {mode!r}. Valid modes: {', '.join(MODES)}.")
    if mode == "dev":
        skipped = [t for t in tasks if t in STS_YEARS]
        if skipped:
            logger.info("mode=dev: %s have no dev split and are skipped.", ", ".join(skipped))
        tasks = [t for t in tasks if t not in STS_YEARS]
    return tasks


def load_sts_tasks(tasks: Sequence[str], data_dir=None, source: Source = "local", mode: Mode = "test"):
    """``{task: {subset: STSPairs}}`` for the split that ``mode`` evaluates."""
    split = "dev" if mode == "dev" else "test"
    return {t: load_sts(t, data_dir, "test" if t in STS_YEARS else split, source) for t in tasks}


def encode_function(encoder):
    """What the evaluations call to encode a list of sentences: ``encoder.encode`` (a ``SentenceEncoder``, a
    sentence-transformers model...), or ``encoder`` itself where it is a plain function."""
    return encoder.encode if hasattr(encoder, "encode") else encoder


def encode_kept(encode, sentences, kept: dict[tuple[str, ...], np.ndarray]) -> np.ndarray:
    """``encode(sentences)`` through ``kept``, which holds the embeddings of each request (its distinct sentences, in
    order) as one call encoded them: a request asked again is not encoded again, and a sentence is never taken
    from another request's call (under autocast a sentence's embedding depends on the batch it was encoded in, so
    a task borrowing another task's rows would score differently with that task than without it)."""
    sentences = list(sentences)
    if not sentences:
        return np.zeros((0, 0), np.float32)
    key = tuple(dict.fromkeys(sentences))
    if key not in kept:
        kept[key] = np.asarray(encode(list(key)))
    row = {s: i for i, s in enumerate(key)}
    return kept[key][[row[s] for s in sentences]]


def score_sts(
    encode, data: dict[str, dict[str, STSPairs]], aggregation: Aggregation = "all", return_predictions: bool = False
):
    """Score loaded STS data with ``encode(list[str]) -> array``. Each task's sentences (de-duplicated) are encoded
    in one call of their own, so a task scores the same whichever tasks are scored with it: under autocast the make-up
    of the length-sorted batches moves the embeddings' last bits, and a Spearman over near-equal cosines with them
    (seen: 0.0014 on STS-B dev in bf16 with SICK-R dev or without). The trainer's dev scoring and ``run_eval``'s
    STS-B dev are thereby the same computation."""
    if aggregation not in AGGREGATIONS:
        raise CSEError(f"Unknown STS aggregation {aggregation!r}. Valid: {', '.join(AGGREGATIONS)}.")
    results: dict = {}
    details: dict = {}
    predictions: dict = {}
    for task, subsets in data.items():
        index: dict[str, int] = {}
        for pairs in subsets.values():
            for s in pairs.sentences1 + pairs.sentences2:
                index.setdefault(s, len(index))
        emb = encode(list(index)) if index else np.zeros((0, 1), np.float32)
        scored = {}
        for name, pairs in subsets.items():
            e1 = emb[[index[s] for s in pairs.sentences1]]
            e2 = emb[[index[s] for s in pairs.sentences2]]
            scored[name] = (pairwise_cosine(e1, e2), pairs.scores)
        agg = aggregate(scored)
        details[task] = agg
        results[task] = agg[aggregation] if task in STS_YEARS else agg["all"]
        if return_predictions:
            predictions[task] = {
                "cosine": np.concatenate([p for p, _ in scored.values()]),
                "gold": np.concatenate([g for _, g in scored.values()]),
            }
    if results:
        results["avg"] = float(np.mean([results[t] for t in data]))
    results["details"] = details
    return (results, predictions) if return_predictions else results


def evaluate_sts(
    encoder,
    tasks: Sequence[str] | None = None,
    data_dir=None,
    source: Source = "local",
    mode: Mode = "test",
    aggregation: Aggregation = "all",
    return_predictions: bool = False,
):
    """STS scores (Spearman x 100) of ``encoder`` (a ``SentenceEncoder`` or any ``encode(list[str])``).

    Returns ``{"STS12": ..., ..., "STSBenchmark": ..., "SICKRelatedness": ..., "avg": ..., "details": {...}}``
    with the tasks that ``mode`` evaluates; ``details`` holds per-subset Spearman/Pearson and the three
    aggregations. With ``return_predictions`` also ``{task: {"cosine", "gold"}}``.
    """
    tasks = resolve_sts_tasks(tasks, mode)
    if aggregation not in AGGREGATIONS:
        raise CSEError(f"Unknown STS aggregation {aggregation!r}. Valid: {', '.join(AGGREGATIONS)}.")
    if source == "hub" and aggregation != "all":
        logger.warning("Hub STS12-16 sets carry no subset names: 'wmean'/'mean' equal 'all' there.")
    data = load_sts_tasks(tasks, data_dir, source, mode)
    return score_sts(encode_function(encoder), data, aggregation, return_predictions)


def format_sts_table(results: dict, name: str | None = None) -> str:
    """The papers' Table 1 row: ``STS12 STS13 STS14 STS15 STS16 STS-B SICK-R`` and the average, labelled with the
    tasks it is over ("STS Avg." for all seven; :func:`.results.average_label`). Missing tasks show '-'."""
    cols = [TABLE_NAMES[t] for t in STS_TASKS] + [average_label([t for t in STS_TASKS if t in results])]
    return text_table(cols, [results.get(t) for t in STS_TASKS] + [results.get("avg")], name)
