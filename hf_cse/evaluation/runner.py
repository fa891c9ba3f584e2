"""Run a chosen set of evaluations on one encoder and gather every number in one record (:class:`EvalResults`).

Task names: :mod:`hf_cse.task_names`.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import Callable, Sequence

import numpy as np

from ..checks import resolved_path
from ..errors import CSEError
from ..task_names import parse_tasks
from .data import STS_TASKS, STS_YEARS, TRANSFER_TASKS, Mode, Source, load_sts
from .geometry import evaluate_geometry, evaluate_retrieval, stsb_embeddings
from .results import RETRIEVAL_KEYS, EvalResults
from .resume import STSB_TEST_TASKS, finished_tasks, in_order, mean_score, take_finished
from .sts import (
    AGGREGATIONS,
    MODES,
    Aggregation,
    encode_kept,
    evaluate_sts,
    load_sts_tasks,
    pairwise_cosine,
    resolve_sts_tasks,
)
from .transfer import MRPC_FEATURES, MrpcFeatures, evaluate_transfer, load_transfer_task

logger = logging.getLogger(__name__)

def scoring_environment(device) -> dict[str, str]:
    """Where the scores were computed: figures move in the last digits with the device and the libraries' versions
    (docs/evaluation.md), so a results file says which (never compared when an evaluation is finished later)."""
    import torch
    import transformers

    from .. import __version__

    return {**({"device": str(device)} if device is not None else {}), "hf_cse": __version__,
            "torch": torch.__version__, "transformers": transformers.__version__}


def load_task_data(tasks: str | Sequence[str], data_dir=None, source: Source = "local", mode: Mode = "test") -> None:
    """Read every file ``tasks`` need, so a missing or malformed file (``SentEvalDataError``) or an unreachable Hub
    data set fails before any encoding. The readers cache what they parse: the evaluation does not read twice."""
    names = parse_tasks(tasks)
    if mode == "dev" and all(t in STS_YEARS for t in names):  # nothing would be scored: an empty results file
        raise CSEError(f"mode='dev' scores dev splits, and {', '.join(names)} {'has' if len(names) == 1 else 'have'}"
                       " none (SentEval's STS12-16 are test sets only): use mode='test', or add STSBenchmark / "
                       "SICKRelatedness.")
    load_sts_tasks(resolve_sts_tasks([t for t in names if t in STS_TASKS], mode), data_dir, source, mode)
    if "geometry" in names or "retrieval" in names:
        load_sts("STSBenchmark", data_dir, "test", source)
    for task in names:
        if task in TRANSFER_TASKS:
            load_transfer_task(task, data_dir, source, mode)


class _MemoEncode:
    """Remembers the embeddings of each request within one run (STS-B test is asked for by STS, geometry and
    retrieval), in ``cache`` when one is given; never one request's rows for another's (:func:`.sts.encode_kept`)."""

    def __init__(self, encode, cache: dict[tuple[str, ...], np.ndarray] | None = None):
        self.encode_fn = encode
        self.cache: dict[tuple[str, ...], np.ndarray] = {} if cache is None else cache

    def encode(self, sentences):
        return encode_kept(self.encode_fn, sentences, self.cache)


def evaluate(
    encoder,
    tasks: str | Sequence[str] = "sts",
    data_dir=None,
    source: Source = "local",
    mode: Mode = "test",
    sts_aggregation: Aggregation = "all",
    mrpc_features: MrpcFeatures = "senteval",
    on_progress: Callable[[EvalResults], None] | None = None,
    embeddings: dict[str, np.ndarray] | None = None,
    done: EvalResults | None = None,
    extras: dict | None = None,
) -> tuple[EvalResults, dict]:
    """Run ``tasks`` on ``encoder`` (a ``SentenceEncoder``).

    Returns ``(results, extras)``: ``results`` is the :class:`EvalResults` record (STS scores and their average;
    transfer accuracies and theirs; alignment, uniformity; R@1/R@5/R@10; ``details``, ``settings``, ``timing``);
    ``extras`` holds arrays for plots (``stsb_cosine``, ``stsb_gold``).

    ``on_progress(partial)`` is called after the STS tasks (scored together), after geometry / retrieval and
    after each transfer task, with the results so far and ``unfinished_tasks`` listing the rest (run_eval.py
    saves it, so an interruption keeps every finished task).

    ``embeddings``: a dict that keeps the embeddings of the STS tasks (and of STS-B for geometry and retrieval), each
    task's as its own call encoded them (keyed by its distinct sentences: :func:`.sts.encode_kept`), e.g. for
    :func:`hf_cse.evaluation.dimensions.evaluate_dimensions` to cut them instead of encoding them again; the transfer
    tasks' sentences are not kept.

    ``done``: the results an earlier run of this evaluation (the same encoder and settings) saved before it was
    stopped (their ``unfinished_tasks`` listing what it had not finished): the tasks it finished are not run again
    (their scores, details and timings are taken from it) and the averages are over every task, so the record is
    the one an uninterrupted run gives (:mod:`.resume`). ``extras``: the dict to fill with the plots' arrays as the
    tasks run (the one returned), e.g. holding the earlier run's, which a finished task does not compute again.
    """
    if mode not in MODES:
        raise CSEError(f"Unknown mode {mode!r}. Valid modes: {', '.join(MODES)}.")
    if sts_aggregation not in AGGREGATIONS:
        raise CSEError(f"Unknown STS aggregation {sts_aggregation!r}. Valid: {', '.join(AGGREGATIONS)}.")
    if mrpc_features not in MRPC_FEATURES:
        raise CSEError(f"Unknown MRPC features {mrpc_features!r}. Valid: {', '.join(MRPC_FEATURES)}.")
    names = parse_tasks(tasks)
    load_task_data(names, data_dir, source, mode)  # every task's data read and checked before the first encoding
    describe = encoder.describe() if hasattr(encoder, "describe") else {"model": str(encoder)}
    details: dict = {}
    timing: dict = {}
    extras = {} if extras is None else extras
    memo = _MemoEncode(encoder.encode, embeddings)
    settings = {
        **describe,
        "tasks": names,
        "mode": mode,
        "sts_aggregation": sts_aggregation,
        "mrpc_features": mrpc_features,
        "senteval_source": source,
        "senteval_data_dir": resolved_path(data_dir),
        "sts_metric": "Spearman x 100 of cosine similarity",
        "transfer_metric": "accuracy x 100" + (" (dev)" if mode == "dev" else " (test)"),
        "environment": scoring_environment(getattr(encoder, "device", None)),
    }
    results = EvalResults(model=describe.get("model"), details=details, settings=settings, timing=timing)
    finished: set[str] = set()
    if done is not None:
        finished.update(finished_tasks(done, names, mode))
        take_finished(results, done, finished)
        if finished:
            logger.info("kept from the evaluation stopped before: %s", ", ".join(t for t in names if t in finished))

    def finish(*tasks_done: str) -> None:
        finished.update(tasks_done)
        if on_progress is not None:
            on_progress(replace(results, unfinished_tasks=[t for t in names if t not in finished]))

    sts_tasks = [t for t in names if t in STS_TASKS]
    sts_todo = [t for t in sts_tasks if t not in finished]
    if sts_todo:
        t0 = time.perf_counter()
        logger.info("STS: scoring %s", ", ".join(sts_todo))  # encoded now, or cut from the kept embeddings
        sts, preds = evaluate_sts(
            memo, sts_todo, data_dir, source, mode, sts_aggregation, return_predictions=True
        )
        details["sts"] = in_order({**details.get("sts", {}), **sts.pop("details")}, sts_tasks)
        results.sts_avg = sts.pop("avg", None)
        if results.sts:  # with the finished tasks of ``done``: the average over all of them
            sts = in_order({**results.sts, **sts}, sts_tasks)
            results.sts_avg = mean_score(sts)
        results.sts = sts
        if "STSBenchmark" in preds:
            extras["stsb_cosine"], extras["stsb_gold"] = (
                preds["STSBenchmark"]["cosine"],
                preds["STSBenchmark"]["gold"],
            )
        timing["sts_seconds"] = round(time.perf_counter() - t0, 2)
        finish(*sts_tasks)
    elif sts_tasks:
        results.sts_avg = mean_score(results.sts)

    if any(t in names and t not in finished for t in STSB_TEST_TASKS):
        t0 = time.perf_counter()
        logger.info("%s: encoding STS-B test", " and ".join(t for t in ("geometry", "retrieval") if t in names))
        cache = stsb_embeddings(memo, data_dir, source, "test")
        if "geometry" in names:
            geo = evaluate_geometry(memo, data_dir, source, "test", _cache=cache)
            details["geometry"] = geo
            results.alignment, results.uniformity = geo["alignment"], geo["uniformity"]
        if "retrieval" in names:
            ret = evaluate_retrieval(memo, data_dir, source, "test", _cache=cache)
            details["retrieval"] = ret
            results.retrieval = {k: ret[k] for k in RETRIEVAL_KEYS}
        if "stsb_cosine" not in extras:
            pairs, _, emb = cache
            n = len(pairs)
            extras["stsb_cosine"], extras["stsb_gold"] = pairwise_cosine(emb[:n], emb[n:]), pairs.scores
        timing["geometry_retrieval_seconds"] = round(time.perf_counter() - t0, 2)
        finish(*STSB_TEST_TASKS)

    transfer_tasks = [t for t in names if t in TRANSFER_TASKS]
    transfer_todo = [t for t in transfer_tasks if t not in finished]
    if transfer_todo:
        t0 = time.perf_counter()

        def transfer_done(task: str, task_details: dict) -> None:
            details.setdefault("transfer", {})[task] = task_details
            results.transfer[task] = task_details["score"]
            finish(task)

        tr = evaluate_transfer(encoder, transfer_todo, data_dir, source, mode, mrpc_features, transfer_done)
        details["transfer"] = in_order({**details.get("transfer", {}), **tr.pop("details")}, transfer_tasks)
        results.transfer_avg = tr.pop("transfer_avg", None)
        results.transfer = in_order({**results.transfer, **tr}, transfer_tasks)
        if transfer_todo != transfer_tasks:  # with the finished tasks of ``done``: the average over all of them
            results.transfer_avg = mean_score(results.transfer)
        timing["transfer_seconds"] = round(time.perf_counter() - t0, 2)
    elif transfer_tasks:
        results.transfer_avg = mean_score(results.transfer)

    return results, extras
