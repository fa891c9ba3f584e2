"""Run a chosen set of evaluations on one encoder and gather every number in one flat dict.

Task names accepted by :func:`parse_tasks` (comma separated, order kept, duplicates dropped):

* groups: ``sts`` (the 7 STS tasks), ``transfer`` (the 7 SentEval transfer tasks), ``geometry``
  (alignment + uniformity), ``retrieval`` (DiffCSE's STS-B retrieval), ``all`` (everything);
* single tasks: ``STS12`` ... ``STS16``, ``STSBenchmark``, ``SICKRelatedness``, ``MR``, ``CR``, ``SUBJ``,
  ``MPQA``, ``SST2``, ``TREC``, ``MRPC`` (case-insensitive; ``STSB``/``STS-B``, ``SICK-R``/``SICKR``,
  ``SST``/``SST-2`` also work).
"""

from __future__ import annotations

import time
from typing import Sequence

import numpy as np

from .data import STS_TASKS, TRANSFER_TASKS
from .geometry import _stsb_embeddings, evaluate_geometry, evaluate_retrieval
from .sts import AGGREGATIONS, MODES, evaluate_sts, pairwise_cosine
from .transfer import MRPC_FEATURES, evaluate_transfer

GROUPS = {
    "sts": STS_TASKS,
    "transfer": TRANSFER_TASKS,
    "geometry": ("geometry",),
    "retrieval": ("retrieval",),
    "all": STS_TASKS + TRANSFER_TASKS + ("geometry", "retrieval"),
}
ALIASES = {
    "sts-b": "STSBenchmark",
    "stsb": "STSBenchmark",
    "sick-r": "SICKRelatedness",
    "sickr": "SICKRelatedness",
    "sick": "SICKRelatedness",
    "sst": "SST2",
    "sst-2": "SST2",
}


def valid_task_names() -> list[str]:
    return list(GROUPS) + list(STS_TASKS) + list(TRANSFER_TASKS)


def parse_tasks(spec: str | Sequence[str]) -> list[str]:
    """Expand a task spec (``"sts,transfer"``, ``["STS12", "MR"]``...) into task names."""
    items = spec.split(",") if isinstance(spec, str) else [p for s in spec for p in str(s).split(",")]
    canonical = {t.lower(): t for t in STS_TASKS + TRANSFER_TASKS}
    out: list[str] = []
    for raw in items:
        name = raw.strip()
        if not name:
            continue
        key = name.lower()
        if key in GROUPS:
            expanded = GROUPS[key]
        elif key in ALIASES:
            expanded = (ALIASES[key],)
        elif key in canonical:
            expanded = (canonical[key],)
        else:
            raise ValueError(f"Unknown task {name!r}. Valid tasks: {', '.join(valid_task_names())}.")
        out += [t for t in expanded if t not in out]
    if not out:
        raise ValueError(f"No task given. Valid tasks: {', '.join(valid_task_names())}.")
    return out


class _MemoEncode:
    """Remembers embeddings by text within one run (STS-B is used by STS, geometry and retrieval)."""

    def __init__(self, encode):
        self.encode_fn = encode
        self.cache: dict[str, np.ndarray] = {}

    def encode(self, sentences):
        sentences = list(sentences)
        todo = list(dict.fromkeys(s for s in sentences if s not in self.cache))
        if todo:
            for s, e in zip(todo, self.encode_fn(todo)):
                self.cache[s] = e
        if not sentences:
            return np.zeros((0, 0), np.float32)
        return np.stack([self.cache[s] for s in sentences])


def evaluate(
    encoder,
    tasks: str | Sequence[str] = "sts",
    data_dir=None,
    source: str = "local",
    mode: str = "test",
    sts_aggregation: str = "all",
    mrpc_features: str = "senteval",
) -> tuple[dict, dict]:
    """Run ``tasks`` on ``encoder`` (a ``SentenceEncoder``).

    Returns ``(results, extras)``: ``results`` is the flat, JSON-ready dict (STS keys ``STS12`` ...
    ``SICKRelatedness``, ``avg``; transfer keys ``MR`` ... ``MRPC``, ``transfer_avg``; ``alignment``,
    ``uniformity``; ``R@1``/``R@5``/``R@10``; ``details``, ``settings``, ``timing``); ``extras`` holds
    arrays for plots (``stsb_cosine``, ``stsb_gold``).
    """
    if mode not in MODES:
        raise ValueError(f"Unknown mode {mode!r}. Valid modes: {', '.join(MODES)}.")
    if sts_aggregation not in AGGREGATIONS:
        raise ValueError(f"Unknown STS aggregation {sts_aggregation!r}. Valid: {', '.join(AGGREGATIONS)}.")
    if mrpc_features not in MRPC_FEATURES:
        raise ValueError(f"Unknown MRPC features {mrpc_features!r}. Valid: {', '.join(MRPC_FEATURES)}.")
    names = parse_tasks(tasks)
    describe = encoder.describe() if hasattr(encoder, "describe") else {"model": str(encoder)}
    results: dict = {"model": describe.get("model")}
    details: dict = {}
    timing: dict = {}
    extras: dict = {}
    memo = _MemoEncode(encoder.encode)

    sts_tasks = [t for t in names if t in STS_TASKS]
    if sts_tasks:
        t0 = time.perf_counter()
        sts, preds = evaluate_sts(
            memo, sts_tasks, data_dir, source, mode, sts_aggregation, return_predictions=True
        )
        details["sts"] = sts.pop("details")
        results.update(sts)
        if "STSBenchmark" in preds:
            extras["stsb_cosine"], extras["stsb_gold"] = (
                preds["STSBenchmark"]["cosine"],
                preds["STSBenchmark"]["gold"],
            )
        timing["sts_seconds"] = round(time.perf_counter() - t0, 2)

    if "geometry" in names or "retrieval" in names:
        t0 = time.perf_counter()
        cache = _stsb_embeddings(memo, data_dir, source, "test")
        if "geometry" in names:
            geo = evaluate_geometry(memo, data_dir, source, "test", _cache=cache)
            details["geometry"] = geo
            results["alignment"], results["uniformity"] = geo["alignment"], geo["uniformity"]
        if "retrieval" in names:
            ret = evaluate_retrieval(memo, data_dir, source, "test", _cache=cache)
            details["retrieval"] = ret
            results.update({k: ret[k] for k in ("R@1", "R@5", "R@10")})
        if "stsb_cosine" not in extras:
            pairs, _, emb = cache
            n = len(pairs)
            extras["stsb_cosine"], extras["stsb_gold"] = pairwise_cosine(emb[:n], emb[n:]), pairs.scores
        timing["geometry_retrieval_seconds"] = round(time.perf_counter() - t0, 2)

    transfer_tasks = [t for t in names if t in TRANSFER_TASKS]
    if transfer_tasks:
        t0 = time.perf_counter()
        tr = evaluate_transfer(encoder, transfer_tasks, data_dir, source, mode, mrpc_features)
        details["transfer"] = tr.pop("details")
        results.update(tr)
        timing["transfer_seconds"] = round(time.perf_counter() - t0, 2)

    results["details"] = details
    results["settings"] = {
        **describe,
        "tasks": names,
        "mode": mode,
        "sts_aggregation": sts_aggregation,
        "mrpc_features": mrpc_features,
        "senteval_source": source,
        "senteval_data_dir": None if data_dir is None else str(data_dir),
        "sts_metric": "Spearman x 100 of cosine similarity",
        "transfer_metric": "accuracy x 100" + (" (dev)" if mode == "dev" else " (test)"),
    }
    results["timing"] = timing
    return results, extras
