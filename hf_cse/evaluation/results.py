"""One model's evaluation as a typed record: what :func:`hf_cse.evaluation.runner.evaluate` measures, what
``results.json`` holds and what results.md, the printout, the plots, the model card and the experiment tables read.

:meth:`EvalResults.to_dict` is ``results.json``'s layout, unchanged: ``model``; the STS task scores (Spearman x 100)
and ``avg``; ``alignment``, ``uniformity``; ``R@1``/``R@5``/``R@10``; the transfer accuracies (x 100) and
``transfer_avg``; then ``details``, ``settings`` (how it was measured; ``model_weights``: the weight files of a
local model folder, :func:`hf_cse.files.weights_fingerprint`, absent from older files), ``timing``,
``unfinished_tasks`` (only while it runs), ``own_data`` (``eval_file``), ``mteb`` and ``dimensions``
(``truncate_dims``: the scores of the embeddings cut to each dimension, :mod:`hf_cse.evaluation.dimensions`).
:meth:`EvalResults.from_dict` reads it back.

Averages say what they are over (:func:`average_label`): SimCSE's "Avg." (Table 1: STS12-16, STS-B, SICK-R; Table 3:
MR, CR, SUBJ, MPQA, SST, TREC, MRPC) only when all seven tasks ran, "STS Avg." / "Transfer Avg."; otherwise the
label names the tasks, e.g. "Avg (STS-B, SICK-R)".
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import CSEError
from .data import STS_TASKS, TABLE_NAMES, TRANSFER_TASKS

RETRIEVAL_KEYS = ("R@1", "R@5", "R@10")
#: the entries that are no score x 100 (a distance, a log-potential): written with four decimals, not two
GEOMETRY_KEYS = ("alignment", "uniformity")
STS_AVG_LABEL = "STS Avg."
TRANSFER_AVG_LABEL = "Transfer Avg."
#: results.json's single-number entries, and the rest of its known keys (any other key is kept in ``extra``)
_SCALARS = ("avg", "alignment", "uniformity", "transfer_avg")
_BOOKKEEPING = ("model", "details", "settings", "timing", "unfinished_tasks", "own_data", "mteb", "dimensions")
#: the last step of ``run_eval.py``'s evaluation of a model, after its last task (``unfinished_tasks`` names it while
#: the plots are drawn): results stopped there hold every score
PLOTS_STEP = "plots"


def average_label(tasks: Sequence[str]) -> str:
    """How an average over ``tasks`` is called: the papers' 7-task STS / transfer average, or one naming its tasks."""
    if set(tasks) == set(STS_TASKS):
        return STS_AVG_LABEL
    if set(tasks) == set(TRANSFER_TASKS):
        return TRANSFER_AVG_LABEL
    order = {task: i for i, task in enumerate((*STS_TASKS, *TRANSFER_TASKS))}  # the tables' order, however run
    ordered = sorted(tasks, key=lambda t: order.get(t, len(order)))
    return f"Avg ({', '.join(TABLE_NAMES.get(t, t) for t in ordered)})"


def score_text(key: str, value: float | None) -> str:
    """A number of the results as results.md, the printout and the model card write it: two decimals for a score x 100
    (STS, transfer, R@k, MTEB, the user's pairs), as the papers' tables; four for alignment and uniformity; '-' for
    None."""
    return "-" if value is None else f"{value:.{4 if key in GEOMETRY_KEYS else 2}f}"


def text_table(columns: Sequence[str], values: Sequence[float | None], name: str | None = None) -> str:
    """One row of scores (x 100, two decimals; None as '-') under its headers, each column as wide as its header
    (at least 7); with ``name``, a ``model`` column first."""
    widths = [max(7, len(c)) for c in columns]
    head = " ".join(c.rjust(w) for c, w in zip(columns, widths))
    row = " ".join(("-" if v is None else f"{v:.2f}").rjust(w) for v, w in zip(values, widths))
    if name is None:
        return f"{head}\n{row}"
    pad = max(len(name), 5)
    return f"{'model'.ljust(pad)} {head}\n{name.ljust(pad)} {row}"


def short_name(name: str) -> str:
    """A readable label for a model path (last two path parts when the last is ``model``/``best``/``final``)."""
    parts = [p for p in str(name).replace("\\", "/").split("/") if p]
    if len(parts) >= 2 and parts[-1] in ("model", "best", "final"):
        return "/".join(parts[-2:])
    return parts[-1] if parts else str(name)


def model_labels(results: Sequence[EvalResults]) -> list[str]:
    """Each model's label in tables and plots: its :func:`short_name`, lengthened by the path parts before it where
    two models would share one (``run1/checkpoint-500`` beside ``run2/checkpoint-500``, two runs'
    ``sentence-transformers`` exports), numbered where the same model was given twice."""
    names = [str(r.model or "?") for r in results]
    parts = [[p for p in n.replace("\\", "/").split("/") if p] or [n] for n in names]
    labels = [short_name(n) for n in names]
    while True:  # lengthen the labels that other models share (the same model twice is numbered below)
        longer = [i for i, label in enumerate(labels) if label.count("/") + 1 < len(parts[i])
                  and any(other == label and names[j] != names[i] for j, other in enumerate(labels))]
        if not longer:
            break
        for i in longer:
            labels[i] = "/".join(parts[i][-(labels[i].count("/") + 2):])
    repeated = {label for label in labels if labels.count(label) > 1}
    seen: dict[str, int] = {}
    for i, label in enumerate(labels):
        if label in repeated:
            seen[label] = seen.get(label, 0) + 1
            labels[i] = f"{label} ({seen[label]})"
    return labels


def _score(key: str, value: Any) -> float | None:
    """A score as read from results.json: a number, or None (JSON's stand-in for a NaN score)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise CSEError(f"results: {key!r} must be a number, got {value!r}; give the results.json of run_eval.py.")
    return float(value)


def _nan_if_none(value: float | None) -> float:
    return math.nan if value is None else value  # a NaN average was written as null: still one that was taken


@dataclass
class EvalResults:
    """One model's scores and how they were measured (see the module docstring). An average or geometry value is
    None when it was not measured; NaN when it was but is undefined (e.g. constant embeddings)."""

    model: str | None = None
    #: task -> Spearman x 100 of cosine, in the order the tasks ran (None: undefined)
    sts: dict[str, float | None] = field(default_factory=dict)
    sts_avg: float | None = None
    alignment: float | None = None
    uniformity: float | None = None
    #: ``R@1``, ``R@5``, ``R@10`` (x 100) of DiffCSE's STS-B retrieval
    retrieval: dict[str, float | None] = field(default_factory=dict)
    #: task -> accuracy x 100 (test; dev in mode "dev")
    transfer: dict[str, float | None] = field(default_factory=dict)
    transfer_avg: float | None = None
    details: dict[str, Any] | None = None
    settings: dict[str, Any] | None = None
    timing: dict[str, Any] | None = None
    #: tasks still to run (written while the evaluation runs; kept when it was interrupted)
    unfinished_tasks: list[str] = field(default_factory=list)
    #: ``eval_file`` pairs: ``{"<name>_spearman": ..., "pairs": n, "source": ...}``
    own_data: dict[str, Any] | None = None
    #: MTEB task -> main score x 100
    mteb: dict[str, float] | None = None
    #: ``truncate_dims``: ``{"128": {"sts": {task: score}, "avg": ..., "mteb": {task: score}}}``, the scores of the
    #: embeddings cut to their first d coordinates (``settings["embedding_dim"]``: the full size)
    dimensions: dict[str, dict[str, Any]] | None = None
    #: top-level keys hf_cse does not know, kept as read
    extra: dict[str, Any] = field(default_factory=dict)

    # ------------------------------------------------------------------------------------------ reading
    @property
    def name(self) -> str:
        return short_name(self.model or "?")

    @property
    def sts_avg_label(self) -> str:
        return average_label(list(self.sts))

    @property
    def transfer_avg_label(self) -> str:
        return average_label(list(self.transfer))

    def score(self, task: str) -> float | None:
        """The STS or transfer score of ``task`` (None when it was not run)."""
        return self.sts.get(task, self.transfer.get(task))

    @property
    def unscored_tasks(self) -> list[str]:
        """The tasks an interrupted evaluation left without results (``unfinished_tasks`` but the plots)."""
        return [task for task in self.unfinished_tasks if task != PLOTS_STEP]

    def own_data_scores(self) -> dict[str, float]:
        """``{name: Spearman x 100}`` of the user's own pairs."""
        return {k.removesuffix("_spearman"): v for k, v in (self.own_data or {}).items() if k.endswith("_spearman")}

    def task_scores(self) -> dict[str, float]:
        """Every per-task score under its table name: STS, transfer, own data, ``MTEB <task>``."""
        scores = {TABLE_NAMES.get(t, t): v for t, v in {**self.sts, **self.transfer}.items() if v is not None}
        scores.update(self.own_data_scores())
        scores.update({f"MTEB {t}": v for t, v in (self.mteb or {}).items()})
        return scores

    # ------------------------------------------------------------------------------------------ changing
    def add_mteb(self, scores: dict[str, float], details: dict[str, Any]) -> None:
        """MTEB's main scores and their details (``run_mteb_tasks``' two results)."""
        self.mteb = scores
        self.details = {**(self.details or {}), "mteb": details}

    # ------------------------------------------------------------------------------------------ results.json
    def to_dict(self) -> dict[str, Any]:
        """results.json's layout (NaN stays a float: :func:`hf_cse.writing.json_safe` writes it as null)."""
        out: dict[str, Any] = {} if self.model is None else {"model": self.model}
        out.update(self.sts)
        for key, value in (("avg", self.sts_avg), ("alignment", self.alignment), ("uniformity", self.uniformity)):
            if value is not None:
                out[key] = value
        out.update(self.retrieval)
        out.update(self.transfer)
        if self.transfer_avg is not None:
            out["transfer_avg"] = self.transfer_avg
        out.update(self.extra)
        for key in ("details", "settings", "timing"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.unfinished_tasks:
            out["unfinished_tasks"] = list(self.unfinished_tasks)
        if self.own_data is not None:
            out["own_data"] = self.own_data
        if self.mteb is not None:
            out["mteb"] = self.mteb
        if self.dimensions is not None:
            out["dimensions"] = self.dimensions
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EvalResults:
        """The record of one model's ``results.json`` (as loaded by ``json.load``); a bad value fails in one line."""
        if not isinstance(data, Mapping):
            raise CSEError(f"results must be a JSON object of task -> score, got {type(data).__name__}.")
        if "models" in data:
            raise CSEError("these results hold several models ({\"models\": [...]}); read each entry on its own.")
        record = cls(model=None if data.get("model") is None else str(data["model"]))
        for key, value in data.items():
            if key in STS_TASKS:
                record.sts[key] = _score(key, value)
            elif key in TRANSFER_TASKS:
                record.transfer[key] = _score(key, value)
            elif key in RETRIEVAL_KEYS:
                record.retrieval[key] = _score(key, value)
            elif key in _SCALARS:
                setattr(record, {"avg": "sts_avg"}.get(key, key), _nan_if_none(_score(key, value)))
            elif key not in _BOOKKEEPING:
                record.extra[key] = value
        for key in ("details", "settings", "timing", "own_data", "mteb", "dimensions"):
            value = data.get(key)
            if value is not None and not isinstance(value, Mapping):
                raise CSEError(f"results: {key!r} must be a JSON object, got {type(value).__name__}.")
            setattr(record, key, None if value is None else dict(value))
        record.unfinished_tasks = [str(t) for t in data.get("unfinished_tasks") or []]
        return record
