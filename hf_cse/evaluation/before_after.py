"""Did training make the model better? The dev score before the first step and after the last one.

``run_unsup.py`` scores its dev data (STS-B/SICK-R dev with ``--senteval_data_dir`` or ``--eval_source hub``, or the
user's own pairs with ``--eval_file``) once before training (the Trainer's ``eval_on_start``, logged at step 0 and kept
in every checkpoint's log history, so a resumed run still knows it) and once at the end. The run's last lines say
``dev: before X -> after Y``; ``training_info.json`` and the model card record both.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

#: a drop larger than this (Spearman x 100) is called out as the model getting worse (seed noise is ~0.5 here)
NOISE_POINTS = 0.5


@dataclass(frozen=True)
class DevChange:
    """One dev metric before training and after it (Spearman x 100)."""

    metric: str
    before: float
    after: float

    @property
    def delta(self) -> float:
        return self.after - self.before

    @property
    def worse(self) -> bool:
        """Whether training lost more than the noise on the dev data (an undefined score, NaN, is not)."""
        return self.delta < -NOISE_POINTS

    def line(self) -> str:
        return f"dev: before {self.before:.2f} -> after {self.after:.2f} ({self.metric}, {self.delta:+.2f})"

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "delta": self.delta}


def primary_metric(metrics: Mapping[str, Any], preferred: str | None = None) -> str | None:
    """The dev metric to judge a run by: ``preferred`` (``metric_for_best_model``) when it was scored, else STS-B
    dev, else the first Spearman score (a user's own ``--eval_file``); names without the ``eval_`` prefix."""
    names = [k[len("eval_"):] for k, v in metrics.items() if k.startswith("eval_") and isinstance(v, (int, float))]
    for name in (preferred and preferred.removeprefix("eval_"), "stsb_spearman"):
        if name in names:
            return name
    return next((n for n in names if n.endswith("spearman")), None)


def dev_change(log_history: Sequence[Mapping[str, Any]], final: Mapping[str, Any],
               preferred: str | None = None) -> DevChange | None:
    """Before (the evaluation logged at step 0) and after (``final``, the evaluation of the saved model); None when
    there was no dev data or no evaluation before training."""
    metric = primary_metric(final, preferred)
    if metric is None:
        return None
    key = f"eval_{metric}"
    before = next((entry[key] for entry in log_history if entry.get("step") == 0 and key in entry), None)
    if before is None:
        return None
    return DevChange(metric, float(before), float(final[key]))


def log_dev_change(logger, dev: DevChange | None) -> None:
    """The run's last line: the dev score before and after training, a warning when the model lost more than the
    noise, or that no dev data checked it."""
    if dev is not None and not (math.isfinite(dev.before) and math.isfinite(dev.after)):
        logger.warning("%s: the dev score is undefined (every pair got the same cosine, e.g. sentences the tokenizer "
                       "reads as unknown tokens only); check the dev data (--eval_file) and the encoder's language",
                       dev.line())
    elif dev is None:
        logger.warning("dev: no dev data, so nothing checked that training made the model better; pass "
                       "--senteval_data_dir (or --eval_source hub) or --eval_file to score it before and after "
                       "training")
    elif dev.worse:
        logger.warning("%s: WORSE than the untrained encoder by more than %.1f points; try a lower --learning_rate or "
                       "fewer steps, or keep the encoder as it was", dev.line(), NOISE_POINTS)
    else:
        logger.info(dev.line())
