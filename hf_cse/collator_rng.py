"""The random draws of the training collator: each batch's own, so that a resumed run, and a loader with worker
processes, mask every batch as the uninterrupted run does.

A collator that draws from a global generator (torch's CPU generator for DiffCSE's edits and SimCSE's masked-LM
inputs; Python's ``random`` for a collator of one's own) draws when the loader *fetches* a batch: in the
training process ahead of the step (Accelerate's loader fetches one batch ahead, transformers' loop all of a step's
accumulation batches), or in a worker process (``dataloader_num_workers > 0``) from that worker's own generators,
which no checkpoint holds and whose draws depend on how many batches the worker collated before. Neither stream is
the one a resumed run continues.

So :class:`CollatorDraws` collates each training batch with these two global generators seeded from the batch
itself -- the run's seed, the epoch and the batch's rows (:func:`batch_seed`) -- and puts their states back afterwards:
a batch's masks are the same wherever and whenever it is collated (the training process or a worker, the
uninterrupted run or a resumed one, a streamed batch re-read to be dropped), and the collation leaves the training
process's generators (dropout, which transformers' checkpoint restores) as they were. Two batches of one epoch with
the same rows in the same order draw the same masks. With ``dataloader_persistent_workers`` the workers keep the
collator of the epoch they started in, so the epoch is left out of the key there (a batch repeated in the same order
in a later epoch draws the same masks).

``DiffCSECollator(seed=...)`` seeds each batch's generators from its seed and the batch's rows itself. Not covered:
a collator of one's own that keeps a running generator (its state is in no checkpoint) or draws from NumPy's global
generator (saving and restoring its state would cost more than a collation's other work).
"""

from __future__ import annotations

import hashlib
import random
from array import array
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from itertools import chain
from typing import Any

import torch


def batch_rows(features: list) -> bytes:
    """Which rows a batch holds, in order: a digest of their token ids (of the whole rows where they have none)."""
    rows = [f.get("input_ids") if isinstance(f, Mapping) else f for f in features]
    rows = [row.tolist() if hasattr(row, "tolist") else row for row in rows]
    try:  # flat rows of token ids (the usual case): hashed as int64s, without a Python step per token
        data = array("q", chain.from_iterable(rows))
        data.extend(map(len, rows))
    except (TypeError, OverflowError):  # nested rows, rows without input_ids
        data = repr(rows if all(row is not None for row in rows) else features).encode()
    return hashlib.sha256(data).digest()


def batch_seed(seed: int, epoch: int | None, features: list) -> int:
    """The seed of one batch's collation: a 64-bit function of the run's seed, the epoch and the batch's rows."""
    key = f"{seed}/{epoch}/".encode() + batch_rows(features)
    return int.from_bytes(hashlib.sha256(key).digest()[:8], "little")


@contextmanager
def drawing_from(seed: int) -> Iterator[None]:
    """Torch's CPU generator and Python's ``random`` seeded from ``seed`` inside the block, and put back as they were
    after it (the CUDA generators are left alone)."""
    saved = torch.get_rng_state(), random.getstate()
    torch.default_generator.manual_seed(seed)
    random.seed(seed)
    try:
        yield
    finally:
        torch.set_rng_state(saved[0])
        random.setstate(saved[1])


class CollatorDraws:
    """The run's seed and the current epoch, which key each training collation (see the module doc)."""

    def __init__(self):
        self.seed = 0
        self.epoch: int | None = None
        self.epoch_in_key = True

    def track(self, collate_fn: Callable, args) -> Callable:
        """``collate_fn`` as the training loader calls it: each batch drawn from its own seed."""
        self.seed = args.seed
        self.epoch_in_key = not (args.dataloader_num_workers > 0 and args.dataloader_persistent_workers)
        return _KeyedCollator(collate_fn, self)

    def epoch_begins(self, epoch: int) -> None:
        """Before the epoch's loader starts (and its workers copy the collator)."""
        self.epoch = epoch

    def seed_of(self, features: list) -> int:
        return batch_seed(self.seed, self.epoch if self.epoch_in_key else None, features)


class _KeyedCollator:
    """A class rather than a closure: a loader with worker processes may pickle its collator."""

    def __init__(self, collate_fn: Callable, draws: CollatorDraws):
        self.collate_fn, self.draws = collate_fn, draws

    def __call__(self, features: list[dict[str, Any]]) -> Any:
        with drawing_from(self.draws.seed_of(features)):
            return self.collate_fn(features)
