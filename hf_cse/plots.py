"""Figures a user looks at: the training curves of a run and a per-task comparison of several evaluated models.

* :func:`plot_training_curves` reads ``trainer.state.log_history`` (``run_unsup.py`` writes
  ``<output_dir>/training_curves.png`` at the end of training): loss terms, positive / negative cosine, the
  gradient diagnostics of the unified gradient paradigm (Li, Zhang & Nie: GD share ``gd_active``,
  hardest-negative weight ``hardest_weight``, ratio ``ratio``) and the dev metrics over steps.
* :func:`plot_task_comparison` is ``run_eval.py``'s bar chart of per-task scores when several models are evaluated.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .evaluation.report import _pyplot, _save, short_name
from .evaluation.sts import TABLE_NAMES

CURVES_FILE = "training_curves.png"
COSINES = ("pos_cos", "neg_cos")
GRADIENT_DIAGNOSTICS = {"gd_active": "GD share (gd_active)", "hardest_weight": "hardest-negative weight",
                        "ratio": "ratio R"}
LINE_STYLES = ("-", "--", ":", "-.")
_EVAL_BOOKKEEPING = ("eval_epoch", "eval_runtime", "eval_samples_per_second", "eval_steps_per_second")


def _series(log_history: Sequence[dict], key: str) -> tuple[np.ndarray, np.ndarray]:
    points = [(h["step"], h[key]) for h in log_history if key in h and "step" in h and h[key] is not None]
    steps, values = zip(*points) if points else ((), ())
    return np.asarray(steps, dtype=float), np.asarray(values, dtype=float)


def curve_panels(log_history: Sequence[dict]) -> dict[str, list[str]]:
    """The panels that have data: ``{title: [log keys]}`` (loss terms, cosines, gradient diagnostics, dev)."""
    keys = list(dict.fromkeys(k for h in log_history for k in h))
    panels = {
        "loss terms": [k for k in keys if k == "loss" or k.endswith("_loss") and not k.startswith(("eval_", "train_"))],
        "cosine of positive / negative pairs": [k for k in COSINES if k in keys],
        "gradient diagnostics": [k for k in GRADIENT_DIAGNOSTICS if k in keys],
        "dev metrics (evaluation)": [k for k in keys if k.startswith("eval_") and k not in _EVAL_BOOKKEEPING],
    }
    return {title: ks for title, ks in panels.items() if ks}


def plot_training_curves(log_history: Sequence[dict], path, title: str | None = None) -> Path | None:
    """Write the training curves of ``log_history`` to ``path`` (None, nothing written, when nothing was logged)."""
    panels = curve_panels(log_history)
    if not panels:
        return None
    plt = _pyplot()
    cols = 1 if len(panels) == 1 else 2
    rows = (len(panels) + 1) // 2
    fig, axes = plt.subplots(rows, cols, figsize=(6 * cols, 3.6 * rows), squeeze=False)
    for ax, (panel, keys) in zip(axes.flat, panels.items()):
        for i, key in enumerate(keys):
            steps, values = _series(log_history, key)
            label = GRADIENT_DIAGNOSTICS.get(key, key.removeprefix("eval_"))
            # a different dash per line: equal series (e.g. loss = contrastive_loss with one term) stay visible
            ax.plot(steps, values, linestyle=LINE_STYLES[i % len(LINE_STYLES)], linewidth=2.2 - 0.4 * (i % 3),
                    marker="o" if len(steps) < 15 else None, markersize=3, label=label)
        ax.set_title(panel, fontsize=10)
        ax.set_xlabel("optimizer step")
        ax.set_ylabel({"loss terms": "loss", "gradient diagnostics": "value",
                       "cosine of positive / negative pairs": "cosine"}.get(panel, "score"))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="best")
    for ax in list(axes.flat)[len(panels):]:
        ax.remove()
    fig.suptitle(title or "training curves", fontsize=11)
    return _save(fig, plt, path)


def _task_scores(result: dict) -> dict[str, float]:
    """Per-task scores of one run_eval result (STS / transfer x 100, own data, MTEB main score x 100)."""
    from .evaluation.data import STS_TASKS, TRANSFER_TASKS

    scores = {TABLE_NAMES.get(t, t): result[t] for t in STS_TASKS + TRANSFER_TASKS if result.get(t) is not None}
    for key, value in result.get("own_data", {}).items():
        if key.endswith("_spearman"):
            scores[key.removesuffix("_spearman")] = value
    scores.update({f"MTEB {t}": v for t, v in result.get("mteb", {}).items()})
    return scores


def plot_task_comparison(results: Sequence[dict], path, title: str | None = None) -> Path | None:
    """Grouped bars: one group per task, one bar per model (None when no task has a score)."""
    per_model = [_task_scores(r) for r in results]
    tasks = list(dict.fromkeys(t for s in per_model for t in s))
    if not tasks:
        return None
    plt = _pyplot()
    width = 0.8 / len(results)
    rotate = len(tasks) > 6 or max(len(t) for t in tasks) > 14
    fig, ax = plt.subplots(figsize=(max(6.0, 0.8 * len(tasks) * max(1, len(results) / 2) + 3), 5.5 if rotate else 4.5))
    x = np.arange(len(tasks))
    for i, (result, scores) in enumerate(zip(results, per_model)):
        values = [scores.get(t, np.nan) for t in tasks]
        ax.bar(x + (i - (len(results) - 1) / 2) * width, values, width, label=short_name(result.get("model", "?")))
    ax.set_xticks(x)
    ax.set_xticklabels(tasks, rotation=30 if rotate else 0, ha="right" if rotate else "center")
    ax.set_xlabel("task")
    ax.set_ylabel("score (Spearman or accuracy x 100)")
    ax.set_title(title or "per-task scores")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=9, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False, title="model")
    return _save(fig, plt, path)
