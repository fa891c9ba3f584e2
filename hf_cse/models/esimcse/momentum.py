"""ESimCSE's momentum contrast (Wu et al., COLING 2022, §3.2): a copy of the encoder updated as an exponential
moving average of it, and a queue of the embeddings that copy gave earlier batches, the extra negatives.

Both are training state: the queue is two buffers and the momentum encoder's weights are parameters that take no
gradient, so a checkpoint saves them with the model and a resumed run restores them (the sentence-transformers
export writes the encoder only).
"""

from __future__ import annotations

import torch
from torch import nn


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


class EmbeddingQueue(nn.Module):
    """The last ``size`` embeddings enqueued, oldest first (``rows[:count]``); an enqueue appends a batch and drops
    the oldest rows beyond ``size`` (the authors' ``trainers.py:compute_loss``: ``cat((pre_z1, eval_z))[-neg_size:]``).

    The number of rows held is kept on the host as well, so that a training step never reads it from the device;
    it is read from the buffer ``filled`` once after the module is built or loaded.
    """

    def __init__(self, size: int, dim: int):
        super().__init__()
        self.size = size
        self.register_buffer("rows", torch.zeros(size, dim))
        self.register_buffer("filled", torch.zeros((), dtype=torch.long))
        self._count: int | None = None

    def _load_from_state_dict(self, *args, **kwargs):
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
