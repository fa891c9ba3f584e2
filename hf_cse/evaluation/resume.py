"""Finishing an evaluation that was stopped before it finished: the results it saved (an :class:`EvalResults` with
``unfinished_tasks``) keep the tasks it finished, :func:`hf_cse.evaluation.evaluate` (``done=``) runs the others,
and the merged record is the one an uninterrupted evaluation writes (the averages over every task, taken in the
same order, are the same numbers). Only the timings differ: those of the tasks run now are measured now.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from .data import STS_TASKS, STS_YEARS, TRANSFER_TASKS
from .results import EvalResults

#: the tasks evaluated together (one STS-B encoding): finished together, run again together
STSB_TEST_TASKS = ("geometry", "retrieval")


def finished_tasks(done: EvalResults, names: Sequence[str], mode: str) -> list[str]:
    """Of ``names``, the tasks whose results ``done`` holds and that its ``unfinished_tasks`` does not list (an STS
    year in mode "dev" has none: it has no dev split, and counts as finished)."""
    details = done.details or {}

    def saved(task: str) -> bool:
        if task in STS_TASKS:
            return task in done.sts and task in (details.get("sts") or {}) or mode == "dev" and task in STS_YEARS
        if task in TRANSFER_TASKS:
            return task in done.transfer and task in (details.get("transfer") or {})
        return task in details  # geometry, retrieval

    finished = [t for t in names if t not in done.unfinished_tasks and saved(t)]
    together = [t for t in STSB_TEST_TASKS if t in names]
    if not all(t in finished for t in together):
        finished = [t for t in finished if t not in together]
    return finished


def take_finished(results: EvalResults, done: EvalResults, finished: Iterable[str]) -> None:
    """Copy into ``results`` (whose ``details`` and ``timing`` dicts are updated in place) the scores, details and
    timings of the ``finished`` tasks of ``done``."""
    finished = set(finished)
    details = done.details or {}
    results.sts = {t: v for t, v in done.sts.items() if t in finished}
    results.transfer = {t: v for t, v in done.transfer.items() if t in finished}
    for kind, scores in (("sts", results.sts), ("transfer", results.transfer)):
        if scores:
            results.details[kind] = {t: (details.get(kind) or {})[t] for t in scores}
    if "geometry" in finished:
        results.details["geometry"] = details["geometry"]
        results.alignment, results.uniformity = done.alignment, done.uniformity
    if "retrieval" in finished:
        results.details["retrieval"] = details["retrieval"]
        results.retrieval = dict(done.retrieval)
    results.timing.update(done.timing or {})


def in_order(scores: Mapping[str, object], order: Sequence[str]) -> dict:
    """``scores`` in the order of ``order`` (the tasks' order in the run: the order an uninterrupted run keeps)."""
    return {t: scores[t] for t in order if t in scores}


def mean_score(scores: Mapping[str, float | None]) -> float | None:
    """The average of ``scores`` as the STS and transfer averages take it (NaN where a score is undefined, read back
    from results.json as None); None when there is none."""
    values = [math.nan if v is None else v for v in scores.values()]
    return float(np.mean(values)) if values else None
