"""The random draws of the training collator across a checkpoint, so that a resumed run masks every batch as the
uninterrupted run did.

A collator that draws from torch's global CPU generator (DiffCSE's edits, SimCSE's masked-LM inputs) draws when the
loader *fetches* a batch, and the loader fetches ahead of the step: Accelerate's loader one batch (to know the last
one), transformers' loop all of a step's accumulation batches. The uninterrupted run's stream thus reads ... collate
batch k+1, step k, [checkpoint: transformers saves the generator's state S], collate k+2, step k+1 ... S comes after
batch k+1 was collated, and a resumed run restores S only after its new loader has collated batches k+1 and k+2 from
the new process's state: batch k+1's masks, and every draw after them, differ from the uninterrupted run's.

:class:`CollatorDraws` keeps, for each collated batch not yet trained on, the state its collation started from; the
checkpoint saves them, with the batches' rows and S, beside transformers' RNG file. A resumed run finds those batches
again by their rows (a streamed data set's loader first re-reads the batches before them, to drop them), collates
them from their saved states and the batches after them from S on, drawing from a copy (transformers rewinds the
global generator only once the batches are in hand); its first training step then hands the copy's state to the
global generator, which stands where the uninterrupted run's stood. An uninterrupted run draws exactly as before.

Only collations in the training process are followed: a loader's worker processes draw from their own generators.
"""

from __future__ import annotations

import hashlib
from collections import deque
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import get_worker_info
from transformers.trainer_utils import get_last_checkpoint

from .writing import replace_atomically

COLLATOR_RNG_FILE = "collator_rng_state"


def collator_rng_file(folder: str | Path, process_index: int, world_size: int) -> Path:
    """Where a checkpoint keeps one process's collator states (one file per process, as transformers' RNG file)."""
    name = COLLATOR_RNG_FILE if world_size <= 1 else f"{COLLATOR_RNG_FILE}_{process_index}"
    return Path(folder) / f"{name}.pth"


def batch_rows(features: list) -> str:
    """Which rows a batch holds, by their token ids: the resumed run finds a saved batch again by it."""
    ids = [f.get("input_ids") if isinstance(f, Mapping) else f for f in features]
    return hashlib.sha256(repr([i.tolist() if hasattr(i, "tolist") else i for i in ids]).encode()).hexdigest()


class CollatorDraws:
    """The global CPU generator's state before each training collation (see the module doc)."""

    def __init__(self):
        # (state, features) of each batch collated and not yet trained on, oldest first
        self.untrained: deque[tuple[torch.Tensor, list]] = deque()
        self._replay: deque[tuple[torch.Tensor, str]] = deque()  # resuming: the checkpoint's (state, rows) of those
        self._stream: torch.Tensor | None = None  # resuming: the copy the batches after them draw from

    def track(self, collate_fn: Callable) -> Callable:
        """``collate_fn`` as the training loader calls it, followed by this object."""
        return _TrackedCollator(collate_fn, self)

    def collate(self, collate_fn: Callable, features: list[dict[str, Any]]) -> Any:
        if self._stream is None:
            self.untrained.append((torch.get_rng_state(), features))
            return collate_fn(features)
        if self._replay and batch_rows(features) != self._replay[0][1]:
            # a batch the resumed loader reads only to drop it (a streamed data set's): it draws from no one's stream
            with torch.random.fork_rng(devices=[]):
                return collate_fn(features)
        replayed = bool(self._replay)
        start = self._replay.popleft()[0] if replayed else self._stream
        outer = torch.get_rng_state()
        torch.set_rng_state(start)
        try:
            batch = collate_fn(features)
            if not replayed:
                self._stream = torch.get_rng_state()
        finally:
            torch.set_rng_state(outer)
        self.untrained.append((start, features))
        return batch

    def step_begins(self) -> None:
        """A training step takes the oldest collated batch; the first one of a resumed run (transformers has restored
        the checkpoint's states by then) continues the global CPU generator from the collations' copy."""
        if self.untrained:
            self.untrained.popleft()
        if self._stream is not None:
            torch.set_rng_state(self._stream)
            self.stop_resuming()

    def epoch_begins(self) -> None:
        """A new epoch's loader: batches fetched and never trained on (a run stopped mid-epoch) are gone."""
        self.untrained.clear()

    def save(self, folder: str | Path, args) -> None:
        """Beside transformers' RNG file (written just before, from the same state): the untrained batches' states."""
        saved = {"untrained": [state for state, _ in self.untrained],
                 "rows": [batch_rows(features) for _, features in self.untrained], "after": torch.get_rng_state()}
        replace_atomically(collator_rng_file(folder, args.process_index, args.world_size),
                           lambda partial: torch.save(saved, partial))

    def resume_from(self, checkpoint: str | Path | bool | None, args) -> None:
        """Collate as the run that wrote ``checkpoint`` (a folder; True: the last one in ``args.output_dir``, as
        transformers finds it) did. Nothing to do when it saved no untrained batch (at the end of an epoch
        transformers restores its states before the next epoch's loader draws), predates this module, or when the
        resumed run trains its epoch's batches again (``ignore_data_skip``)."""
        if checkpoint is True:
            checkpoint = get_last_checkpoint(args.output_dir)
        if not checkpoint or args.ignore_data_skip:
            return
        path = collator_rng_file(checkpoint, args.process_index, args.world_size)
        if not path.is_file():
            return
        saved = torch.load(path, weights_only=True)
        if saved["untrained"]:
            self._replay, self._stream = deque(zip(saved["untrained"], saved["rows"])), saved["after"]

    def stop_resuming(self) -> None:
        self._replay.clear()
        self._stream = None


class _TrackedCollator:
    """A class rather than a closure: a loader with worker processes may pickle its collator."""

    def __init__(self, collate_fn: Callable, draws: CollatorDraws):
        self.collate_fn, self.draws = collate_fn, draws

    def __call__(self, features):
        if get_worker_info() is not None:
            return self.collate_fn(features)
        return self.draws.collate(self.collate_fn, features)
