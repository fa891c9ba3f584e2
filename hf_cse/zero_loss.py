"""A run whose training loss is exactly 0 trains (next to) nothing, while it looks like any finished run: a margin
loss (MET, MPT, the gradient paradigm's hinge objectives) whose margin every pair of the encoder's views already
beats has no active anchor and so no gradient; the weights stay the encoder's own. Seen on all-MiniLM-L6-v2, which
separates positives from negatives by more than MET's margin of 0.44 from the first step.

Said at the first logging step of a training, so that a long run can be stopped there, and once more when it ends
(:func:`trained_nothing`); the run's record then holds :data:`ZERO_LOSS_KEY`, from which the model card says it."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

logger = logging.getLogger("hf_cse.trainer")

#: why a loss is 0 and what helps
ZERO_LOSS_CAUSE = ("the encoder already satisfies the objective on these batches (e.g. every positive beats its "
                   "negatives by more than a margin loss's margin), so the gradient is zero or vanishing and the "
                   "weights stay (about) the encoder's own; raise the loss's margin, or choose another loss")


#: the key of a run's record (``training_info.json``) saying its loss was exactly 0 at every step
ZERO_LOSS_KEY = "loss_always_zero"


def trained_nothing(train_metrics: Mapping[str, Any], log_history: Sequence[Mapping[str, Any]] = ()) -> bool:
    """Whether the loss was exactly 0 at every step: ``train_loss`` (the mean over the run's steps, a resumed
    run's too: :mod:`hf_cse.trainer_resume`) and every logged window's ``loss`` (a resumed run's history has the windows
    before too) are 0; a loss is never negative where the objective is a hinge."""
    return train_metrics.get("train_loss") == 0.0 and all(entry["loss"] == 0.0 for entry in log_history
                                                             if "loss" in entry)


class ZeroLossWatch:
    """Warns when the first logging window of a training has a loss of exactly 0, and when the whole training had."""

    def __init__(self) -> None:
        self._windows = 0
        self.trained_nothing = False

    def on_log(self, logs: Mapping[str, Any], step: int) -> None:
        self._windows += 1
        if self._windows == 1 and logs.get("loss") == 0.0:
            logger.warning("loss: exactly 0 at every step of the first logging window (up to step %d): %s", step,
                           ZERO_LOSS_CAUSE)

    def at_end(self, train_metrics: Mapping[str, Any], log_history: Sequence[Mapping[str, Any]]) -> None:
        self.trained_nothing = trained_nothing(train_metrics, log_history)
        if self.trained_nothing:
            logger.warning("loss: exactly 0 at every step of this training: it trained nothing; %s", ZERO_LOSS_CAUSE)
