"""What a loss raises for inputs it cannot use: ``ValueError`` subclasses whose message says what is wrong in the
loss's own terms (batch sizes, input names) and whose attributes carry the facts, so that a caller who knows where
the inputs came from (a script's flags, a data set's columns) can say what to change. The training scripts do in
:func:`hf_cse.cli.run_cli`; a loss never names a command-line flag."""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import CSEError
from ..hyperparameter_rules import hard_negatives_words
from .registry import available_losses, get_loss_class


class LossInputError(CSEError):
    """Inputs a loss cannot use."""


class BatchTooSmallError(LossInputError):
    """Fewer rows than the loss needs (a contrastive loss needs at least 2: the others are the negatives). The
    message names the training argument that sets the batch (``per_device_train_batch_size``, in ``fields``), so
    that inside any trainer (hf_cse's, sentence-transformers') it says what to change."""

    def __init__(self, loss_name: str, min_batch: int, got: int):
        self.loss_name, self.min_batch, self.got = loss_name, min_batch, got
        super().__init__(f"{loss_name}: needs a batch of at least {min_batch} sentences to have in-batch negatives, "
                         f"got {got}; increase per_device_train_batch_size (or the number of processes).",
                         fields=("per_device_train_batch_size",))


class MissingInputsError(LossInputError):
    """Extra embeddings the loss requires (its ``extra_inputs``, e.g. ``z_nodropout``) were not passed."""

    def __init__(self, loss_name: str, missing: Sequence[str]):
        self.loss_name, self.missing = loss_name, tuple(missing)
        super().__init__(f"{loss_name}: needs the extra input(s) {list(self.missing)} (its extra_inputs) as keyword "
                         "arguments beside z1, z2; in training the model's forward makes them (z_nodropout: "
                         "off_dropout=True).")


class HardNegativesNotTakenError(LossInputError):
    """Hard negatives (``z_neg``) given to a loss that has no defined use for them. ``source`` names where they came
    from in the caller's terms (e.g. "a third column"); ``takers`` are the losses that do take them."""

    def __init__(self, loss_name: str, source: str | None = None):
        self.loss_name, self.source = loss_name, source
        self.takers = tuple(n for n in available_losses() if get_loss_class(n).takes_hard_negatives)
        super().__init__(hard_negatives_words(loss_name, source, self.takers))
