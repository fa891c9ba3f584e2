"""The training curves of a run (the evaluation's figures are in :mod:`hf_cse.evaluation.figures`).

:func:`plot_training_curves` reads ``trainer.state.log_history`` (``run_unsup.py`` writes
``<output_dir>/training_curves.png`` at the end of training): loss terms, positive / negative cosine, the
gradient diagnostics of the unified gradient paradigm (Li, Zhang & Nie: GD share ``gd_active``,
hardest-negative weight ``hardest_weight``, ratio ``ratio``) and the dev metrics over steps.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .evaluation.figures import pyplot, save_figure

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
    plt = pyplot()
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
    return save_figure(fig, plt, path)
