"""A run whose training loss is exactly 0 trains (next to) nothing, while it looks like any finished run: a margin
loss (MET, MPT, the gradient paradigm's hinge objectives) whose margin every pair of the encoder's views already
beats has no active anchor and so no gradient; the weights stay the encoder's own. Seen on all-MiniLM-L6-v2, which
separates positives from negatives by more than MET's margin of 0.44 from the first step.

Said at the first logging step of a training, so that a long run can be stopped there, and once more when it ends
(from ``train_loss``, the mean loss of its steps); the model card says it from the same recorded ``train_loss``
(:func:`trained_nothing`)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

logger = logging.getLogger("hf_cse.trainer")

#: why a loss is 0 and what helps
ZERO_LOSS_CAUSE = ("the encoder already satisfies the objective on these batches (e.g. every positive beats its "
                   "negatives by more than a margin loss's margin), so the gradient is zero or vanishing and the "
                   "weights stay (about) the encoder's own; raise the loss's margin, or choose another loss")


def trained_nothing(train_metrics: Mapping[str, Any] | None) -> bool:
    """Whether a run's recorded training metrics show a loss of exactly 0 at every step (``train_loss``, the mean
    of the steps' losses: they are never negative where the objective is a hinge)."""
    return (train_metrics or {}).get("train_loss") == 0.0


class ZeroLossWatch:
    """Warns when the first logging window of a training has a loss of exactly 0, and when the whole training had."""

    def __init__(self) -> None:
        self._windows = 0

    def on_log(self, logs: Mapping[str, Any], step: int) -> None:
        self._windows += 1
        if self._windows == 1 and logs.get("loss") == 0.0:
            logger.warning("loss: exactly 0 at every step up to step %d: %s", step, ZERO_LOSS_CAUSE)

    @staticmethod
    def at_end(train_metrics: Mapping[str, Any]) -> None:
        if trained_nothing(train_metrics):
            logger.warning("loss: exactly 0 at every step of this training: it trained nothing; %s", ZERO_LOSS_CAUSE)
