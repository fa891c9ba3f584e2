"""ESimCSE's momentum contrast (Wu et al., COLING 2022, §3.2): a copy of the encoder updated as an exponential
moving average of it, and a queue of the embeddings that copy gave earlier batches, the extra negatives.

Both are training state: the queue is two buffers and the momentum encoder's weights are parameters that take no
gradient, so a checkpoint saves them with the model and a resumed run restores them (the sentence-transformers
export writes the encoder only).
"""

from __future__ import annotations

import logging

import torch
from torch import nn

from ...errors import CSEError
from ...said_once import first_time

logger = logging.getLogger("hf_cse.models.esimcse")

#: the paper's queue, in global batches (queue 160 for batch 64, §4.1)
PAPER_QUEUE_BATCHES = 2.5
#: a queue above this many global batches is said once (its rows are allocated and saved in full) ...
WARNED_QUEUE_BATCHES = 10
#: ... and refused above this many where it is also more than one epoch enqueues: it can never fill
REFUSED_QUEUE_BATCHES = 100


@torch.no_grad()
def momentum_update(online: nn.Module, momentum: nn.Module, coefficient: float) -> None:
    """``theta_m <- lambda theta_m + (1 - lambda) theta`` for every parameter pair, in the modules' parameter order
    (§3.2; the authors' ``cl_forward``, loop over ``zip(encoder.parameters(), cls.momentum_model.parameters())``)."""
    pairs = list(zip(momentum.parameters(), online.parameters(), strict=True))
    if not pairs:
        return
    averaged, current = [m for m, _ in pairs], [p.detach() for _, p in pairs]
    torch._foreach_mul_(averaged, coefficient)
    torch._foreach_add_(averaged, current, alpha=1.0 - coefficient)


def check_queue_size(size: int, global_batch: int, train_rows: int | None) -> None:
    """A ``queue_size`` against the run: refused where it is over :data:`REFUSED_QUEUE_BATCHES` global batches and
    more than one epoch of ``train_rows`` enqueues (None: a stream, not known), warned once over
    :data:`WARNED_QUEUE_BATCHES` global batches. The queue's rows are allocated in full at the first enqueue and
    saved in every checkpoint, so a queue that cannot fill costs memory and disk for nothing."""
    paper = PAPER_QUEUE_BATCHES * global_batch
    epoch_rows = None if train_rows is None else train_rows // global_batch * global_batch
    if size > REFUSED_QUEUE_BATCHES * global_batch and epoch_rows is not None and size > epoch_rows:
        # kept across epochs (empty_queue_each_epoch=False), it would fill with the batches' own sentences
        raise CSEError(f"esimcse: queue_size {size:,} can never fill: one epoch enqueues at most {epoch_rows:,} rows "
                       f"({train_rows:,} training rows in global batches of {global_batch}), yet all {size:,} rows "
                       f"are allocated and saved in every checkpoint. The paper's queue is {PAPER_QUEUE_BATCHES:g} x "
                       f"the global batch ({paper:g} here): set queue_size to at most {epoch_rows:,}.",
                       fields=("queue_size",))
    # the command line checks before the model is built, the trainer again: said once
    if size > WARNED_QUEUE_BATCHES * global_batch and first_time("esimcse queue large", size, global_batch):
        logger.warning("esimcse: queue_size %s is %.0f x the global batch of %d (the paper's is %g x, %g here): its "
                       "rows are allocated and saved in every checkpoint in full, and its oldest negatives come from "
                       "a momentum encoder many steps behind", f"{size:,}", size / global_batch, global_batch,
                       PAPER_QUEUE_BATCHES, paper)


class EmbeddingQueue(nn.Module):
    """The last ``size`` embeddings enqueued, oldest first (``rows[:count]``); an enqueue appends a batch and drops
    the oldest rows beyond ``size`` (the authors' ``trainers.py:compute_loss``: ``cat((pre_z1, eval_z))[-neg_size:]``).

    The number of rows held is kept on the host as well, so that a training step never reads it from the device;
    it is read from the buffer ``filled`` once after the module is built or loaded.

    The ``size`` rows are allocated at the first enqueue, not when the model is built, so that a queue size the
    trainer refuses (:func:`check_queue_size`) is refused before it costs its memory. A saved state always holds all
    ``size`` rows, as it did before the first enqueue was made the allocation point.
    """

    def __init__(self, size: int, dim: int):
        super().__init__()
        self.size = size
        # transformers builds a model it loads on the meta device (free): there the rows take the saved shape
        held = size if torch.empty(0).is_meta else 0
        self.register_buffer("rows", torch.zeros(held, dim))
        self.register_buffer("filled", torch.zeros((), dtype=torch.long))
        self._count: int | None = None

    def _allocate(self) -> None:
        if self.rows.shape[0] != self.size:
            self.rows = self.rows.new_zeros(self.size, self.rows.shape[1])

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        self._allocate()
        super()._save_to_state_dict(destination, prefix, keep_vars)

    def _load_from_state_dict(self, *args, **kwargs):
        self._allocate()
        super()._load_from_state_dict(*args, **kwargs)
        self._count = None  # a loaded checkpoint's queue: read its length at the next use

    def count(self) -> int:
        if self._count is None:
            self._count = int(self.filled)
        return self._count

    def contents(self) -> torch.Tensor:
        """A copy of the rows held, ``(count, dim)``, oldest first."""
        return self.rows[: self.count()].clone()

    @torch.no_grad()
    def enqueue(self, z: torch.Tensor) -> None:
        self._allocate()
        kept = torch.cat([self.rows[: self.count()], z.detach().to(self.rows.dtype)])[-self.size:]
        self.rows[: kept.shape[0]].copy_(kept)
        self._count = kept.shape[0]
        self.filled.fill_(self._count)

    @torch.no_grad()
    def clear(self) -> None:
        """Hold no rows, as a new queue (the rows zeroed)."""
        self.rows.zero_()
        self.filled.zero_()
        self._count = 0
