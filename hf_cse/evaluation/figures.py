"""PNG figures (matplotlib, Agg backend), each written atomically; the home of hf_cse's figure helpers.

* :func:`plot_alignment_uniformity`: one point per model in the (alignment, uniformity) plane, lower-left
  is better, coloured by the STS average when known (ImSimCSE Fig. 1 / SimCSE Fig. 2 style);
* :func:`plot_cosine_buckets`: distribution of the predicted cosine of STS-B pairs grouped by gold score
  (0-1, 1-2, 2-3, 3-4, 4-5; DiffCSE Fig. 2 style);
* :func:`plot_task_comparison`: ``run_eval.py``'s bar chart of per-task scores when several models are evaluated.

:func:`pyplot` and :func:`save_figure` also draw the training curves (:mod:`hf_cse.plots`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..errors import CSEError
from ..writing import replace_atomically
from .results import EvalResults, model_labels

BUCKETS = ((0, 1), (1, 2), (2, 3), (3, 4), (4, 5))


def pyplot():
    """matplotlib.pyplot on the Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, plt, path) -> Path:
    """Write ``fig`` as a PNG to ``path`` through a partial file and a rename, and close it."""
    fig.tight_layout()
    try:
        return replace_atomically(path, lambda partial: fig.savefig(partial, dpi=120, format="png"))
    finally:
        plt.close(fig)


def plot_alignment_uniformity(results: Sequence[EvalResults], path, labels: Sequence[str] | None = None, title=None):
    """Scatter of (alignment, uniformity) for several models' results (those without both are skipped)."""
    plt = pyplot()
    pts = [(r, lab) for r, lab in zip(results, labels or model_labels(results))]
    pts = [(r, lab) for r, lab in pts if r.alignment is not None and r.uniformity is not None]
    if not pts:
        raise CSEError("No result has both alignment and uniformity.")
    fig, ax = plt.subplots(figsize=(5.5, 4.5))
    xs = np.array([r.alignment for r, _ in pts])
    ys = np.array([r.uniformity for r, _ in pts])
    colour = [r.sts_avg for r, _ in pts]
    avg_labels = {r.sts_avg_label for r, _ in pts}
    if all(c is not None for c in colour):
        sc = ax.scatter(xs, ys, c=colour, cmap="viridis", s=70, edgecolors="black", zorder=3)
        label = avg_labels.pop() if len(avg_labels) == 1 else "STS average (over different tasks)"
        fig.colorbar(sc, ax=ax, label=f"{label} (Spearman x 100)")
    else:
        ax.scatter(xs, ys, s=70, edgecolors="black", zorder=3)
    for (_, lab), x, y in zip(pts, xs, ys):
        ax.annotate(lab, (x, y), textcoords="offset points", xytext=(6, 4), fontsize=8)
    pad_x = max(0.01, 0.15 * (xs.max() - xs.min()))
    pad_y = max(0.05, 0.15 * (ys.max() - ys.min()))
    ax.set_xlim(xs.min() - pad_x, xs.max() + 2 * pad_x)
    ax.set_ylim(ys.min() - pad_y, ys.max() + pad_y)
    ax.set_xlabel(r"$\ell_{align}$ (lower is better)")
    ax.set_ylabel(r"$\ell_{uniform}$ (lower is better)")
    ax.set_title(title or "Alignment vs uniformity (STS-B)")
    ax.grid(alpha=0.3)
    return save_figure(fig, plt, path)


def bucket_of(gold: np.ndarray) -> np.ndarray:
    """Index of the gold-score bucket 0-1, 1-2, 2-3, 3-4, 4-5 (5.0 falls in 4-5)."""
    return np.clip(np.floor(np.asarray(gold, dtype=np.float64)), 0, len(BUCKETS) - 1).astype(int)


def plot_cosine_buckets(cosine: np.ndarray, gold: np.ndarray, path, title: str | None = None):
    """Histograms of predicted cosine similarity per gold-score bucket, one row per bucket."""
    plt = pyplot()
    cosine = np.asarray(cosine, dtype=np.float64)
    buckets = bucket_of(gold)
    lo = min(0.0, float(np.floor(cosine.min() * 10) / 10)) if len(cosine) else 0.0
    bins = np.linspace(lo, 1.0, 41)
    fig, axes = plt.subplots(len(BUCKETS), 1, figsize=(5.5, 6), sharex=True)
    for i, (ax, (a, b)) in enumerate(zip(axes[::-1], BUCKETS)):
        vals = cosine[buckets == i]
        ax.hist(
            vals, bins=bins, color=plt.cm.viridis(i / (len(BUCKETS) - 1)), alpha=0.85, density=len(vals) > 0
        )
        ax.set_ylabel(f"{a}-{b}", rotation=0, labelpad=18, va="center")
        ax.set_yticks([])
        if len(vals):
            ax.axvline(vals.mean(), color="black", lw=1, ls="--")
        ax.text(0.01, 0.75, f"n={len(vals)}", transform=ax.transAxes, fontsize=7)
    axes[-1].set_xlabel("cosine similarity")
    fig.suptitle(title or "STS-B cosine similarity by gold score")
    return save_figure(fig, plt, path)


def plot_task_comparison(results: Sequence[EvalResults], path, title: str | None = None) -> Path | None:
    """Grouped bars: one group per task, one bar per model (None when no task has a score)."""
    per_model = [r.task_scores() for r in results]
    tasks = list(dict.fromkeys(t for s in per_model for t in s))
    if not tasks:
        return None
    plt = pyplot()
    width = 0.8 / len(results)
    rotate = len(tasks) > 6 or max(len(t) for t in tasks) > 14
    fig, ax = plt.subplots(figsize=(max(6.0, 0.8 * len(tasks) * max(1, len(results) / 2) + 3), 5.5 if rotate else 4.5))
    x = np.arange(len(tasks))
    for i, (label, scores) in enumerate(zip(model_labels(results), per_model)):
        values = [scores.get(t, np.nan) for t in tasks]
        ax.bar(x + (i - (len(results) - 1) / 2) * width, values, width, label=label)
    ax.set_xticks(x)
    ax.set_xticklabels(tasks, rotation=30 if rotate else 0, ha="right" if rotate else "center")
    ax.set_xlabel("task")
    ax.set_ylabel("score (Spearman or accuracy x 100)")
    ax.set_title(title or "per-task scores")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=9, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False, title="model")
    return save_figure(fig, plt, path)


def plot_score_by_dimension(results: Sequence[EvalResults], path, title: str | None = None) -> Path:
    """Score against embedding dimension (``truncate_dims``, the full embedding included): one line per model and
    score (the STS average, each MTEB task), dimensions on a log scale."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    ticks: set[int] = set()
    for r, name in zip(results, model_labels(results)):
        if not r.dimensions:
            continue
        full_dim = (r.settings or {}).get("embedding_dim")
        points = {int(d): e for d, e in r.dimensions.items()}
        if full_dim:
            points[int(full_dim)] = {"avg": r.sts_avg, "mteb": r.mteb}
        dims = sorted(points)
        ticks.update(dims)
        series = {r.sts_avg_label: [points[d].get("avg") for d in dims]} if r.sts else {}
        for task in dict.fromkeys(t for e in points.values() for t in e.get("mteb") or {}):
            series[f"MTEB {task}"] = [(points[d].get("mteb") or {}).get(task) for d in dims]
        for label, values in series.items():
            ax.plot(dims, [np.nan if v is None else v for v in values], marker="o", label=f"{name}: {label}")
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted(ticks), [str(d) for d in sorted(ticks)])
    ax.set_xlabel("embedding dimension (first d coordinates)")
    ax.set_ylabel("score x 100")
    ax.set_title(title or "score by embedding dimension")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return save_figure(fig, plt, path)
