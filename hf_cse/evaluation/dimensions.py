"""Scores per embedding dimension (``run_eval.py --truncate_dims 256,128,64``): the embeddings cut to their first
``d`` coordinates, as ``SentenceTransformer(folder, truncate_dim=d)`` serves them, scored on the STS tasks (and the
MTEB tasks) of the run for each ``d``. A Matryoshka-trained model (``matryoshka_dims``) should lose little; a
plain one shows what truncating it costs.

The model encodes each task's sentences once, for the full size and every dimension: the full-size scoring keeps
its embeddings (``evaluate(..., embeddings=cache)`` for the STS tasks, :class:`KeepingEncoder` for the MTEB tasks) and
:class:`TruncatedEncoder` cuts them, sharing that one cache over the dimensions; cosine similarity normalises each
cut vector itself, so a model's Normalize module needs no redo.
``results.json`` holds the scores under ``dimensions`` (:class:`hf_cse.evaluation.results.EvalResults`),
results.md a table and ``score_by_dimension.png`` the curve.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..checks import InputError
from .sts import encode_kept

logger = logging.getLogger(__name__)


class TruncatedEncoder:
    """``encoder``'s embeddings cut to their first ``dim`` coordinates; the full embeddings of each request are
    computed once into ``cache`` (shared by the encoders of every dimension; keyed as :func:`.sts.encode_kept` keys
    them, so a task's cut rows are those its own full-size call encoded). Everything else is ``encoder``'s."""

    def __init__(self, encoder, dim: int, cache: dict[tuple[str, ...], np.ndarray] | None = None):
        self.encoder, self.dim = encoder, int(dim)
        self.cache = {} if cache is None else cache

    def __getattr__(self, name: str) -> Any:  # name, batch_size, max_length, device, effective_pooler...
        return getattr(self.encoder, name)

    def encode(self, sentences: Sequence[str], batch_size: int | None = None,
               show_progress_bar: bool | None = None) -> np.ndarray:
        options = {k: v for k, v in (("batch_size", batch_size), ("show_progress_bar", show_progress_bar))
                   if v is not None}
        full = encode_kept(lambda todo: self.encoder.encode(todo, **options), sentences, self.cache)
        if not len(full):
            return np.zeros((0, self.dim), np.float32)
        if self.dim > full.shape[1]:
            raise InputError(f"truncate_dims {self.dim}: the model's embeddings have {full.shape[1]} dimensions; "
                             f"choose dimensions up to {full.shape[1]}.")
        return full[:, :self.dim]

    def describe(self) -> dict:
        own = self.encoder.describe() if hasattr(self.encoder, "describe") else {"model": str(self.encoder)}
        return {**own, "truncate_dim": self.dim}


class KeepingEncoder:
    """``encoder`` as it is, which also keeps the embeddings of each request it encodes in ``cache`` (the MTEB tasks'
    full-size run, whose sentences the dimensions then cut without encoding them again; keyed as
    :func:`.sts.encode_kept` keys them)."""

    def __init__(self, encoder, cache: dict[tuple[str, ...], np.ndarray]):
        self.encoder, self.cache = encoder, cache

    def __getattr__(self, name: str) -> Any:
        return getattr(self.encoder, name)

    def encode(self, sentences: Sequence[str], *args, **kwargs) -> np.ndarray:
        return encode_kept(lambda todo: self.encoder.encode(todo, *args, **kwargs), sentences, self.cache)


def check_dims_fit(encoder, dims: Sequence[int]) -> int:
    """The encoder's embedding size (one short sentence encoded); dimensions beyond it fail before any task runs."""
    width = int(encoder.encode(["a"], show_progress_bar=False).shape[1])
    too_large = [d for d in dims if d > width]
    if too_large:
        raise InputError(f"truncate_dims {too_large}: {encoder.name} gives {width}-dimensional embeddings; choose "
                         f"dimensions up to {width}.")
    return width


def evaluate_dimensions(encoder, dims: Sequence[int], sts_tasks: Sequence[str], mteb_tasks: Sequence = (),
                        mteb_folder=None, mteb_results_dir=None, mteb_meta: dict | None = None,
                        embeddings: dict[str, np.ndarray] | None = None, **sts_kwargs) -> dict[str, dict[str, Any]]:
    """``{str(d): {"sts": {task: score}, "avg": ..., "mteb": {task: score}}}`` for each ``d`` of ``dims``: the run's
    STS tasks (``sts_kwargs``: data_dir, source, mode, sts_aggregation of :func:`hf_cse.evaluation.evaluate`) and
    MTEB tasks (their result files in ``mteb_folder/dim_<d>/``; with ``mteb_results_dir``, also saved by mteb as
    the experiment ``truncate_dim=d`` of the model ``mteb_meta`` names) on the cut embeddings. ``embeddings``: the
    full embeddings of each request that the full-size scoring kept (see the module doc); a request missing there
    is encoded, once, and added to it."""
    from .mteb_tasks import run_mteb_tasks, truncated_model_meta
    from .runner import evaluate

    cache = {} if embeddings is None else embeddings
    out: dict[str, dict[str, Any]] = {}
    for d in dims:
        logger.info("dimensions: scoring the first %d coordinates (the embeddings are encoded once)", d)
        cut = TruncatedEncoder(encoder, d, cache)
        entry: dict[str, Any] = {}
        if sts_tasks:
            scored, _ = evaluate(cut, list(sts_tasks), **sts_kwargs)
            entry["sts"], entry["avg"] = dict(scored.sts), scored.sts_avg
        if mteb_tasks:
            entry["mteb"], _ = run_mteb_tasks(cut, list(mteb_tasks), mteb_folder / f"dim_{d}", mteb_results_dir,
                                              truncated_model_meta(mteb_meta, d))
        out[str(d)] = entry
    return out


def dimension_rows(full_dim: int | None, full: dict[str, Any], by_dim: dict[str, dict[str, Any]]
                   ) -> list[tuple[str, dict[str, float | None]]]:
    """``[(label, {column: score})]``: the full embedding first, then each truncation, largest first; the columns
    are the STS tasks, ``avg`` and ``MTEB <task>``."""
    def columns(entry: dict[str, Any]) -> dict[str, float | None]:
        cols = dict(entry.get("sts") or {})
        if entry.get("avg") is not None:
            cols["avg"] = entry["avg"]
        cols.update({f"MTEB {t}": v for t, v in (entry.get("mteb") or {}).items()})
        return cols

    label = f"{full_dim} (full)" if full_dim else "full"
    rows = [(label, columns(full))]
    # a dimension asked for that is the full size is the full row again: shown once
    rows += [(d, columns(entry)) for d, entry in sorted(by_dim.items(), key=lambda kv: -int(kv[0]))
             if int(d) != full_dim]
    return rows
