"""Batches without false negatives: no text twice in one global batch.

In-batch contrastive learning treats every other row of the batch as a negative, so a sentence and its copy in
the same batch (a repeated line of a scraped corpus; an NLI premise with several hypotheses) is a *false
negative*: the loss pushes the sentence away from itself. :class:`NoDuplicatesBatchSampler` builds every
*global* batch (per-device batch x processes) so that no text occurs twice in it, over every view of a row
(anchor, positive, hard negative).

Identity of two texts (:func:`text_key`): equal after Unicode NFKC normalisation, case folding and collapsing
runs of white space (``"The  Cat."`` = ``"the cat."``). Data sets without text columns (only token ids) are
compared by their token ids (equal inputs to the encoder).

How batches are made, one epoch: the rows are shuffled (seed + epoch); each row goes into the batch being filled
unless one of its texts is already there, in which case it is *deferred*: it waits (keyed by the clashing text)
and is offered first to every later batch. At the end of the epoch, rows that cannot fill a whole global batch
any more are *dropped* for this epoch (the remainder smaller than a batch, which the Trainer's drop_last drops too,
and copies of a text more frequent than the batches). The counts are logged (debug); the trainer warns once where
copies are left out (more rows than one incomplete batch). Every epoch keeps epoch 0's number of batches
(:meth:`NoDuplicatesBatchSampler._sized_plan`).

Processes: the sampler yields per-device batches, ``world_size`` consecutive ones forming one global batch;
Accelerate's ``BatchSamplerShard`` gives batch ``k`` to process ``k % world_size``, so the global batch is exactly
one of ours. The plan depends only on the seed, the epoch and the data, so every process computes the same one,
and a resumed run (the Trainer skips the batches already trained) sees the batches it would have seen.
"""

from __future__ import annotations

import hashlib
import logging
import random
import re
import time
import unicodedata
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from torch.utils.data import Sampler

from .errors import CSEError

logger = logging.getLogger(__name__)

_SPACE = re.compile(r"\s+")
#: an epoch whose plan falls short of epoch 0's length is drawn again this many times before it is refused
REDRAWS = 16


def normalise_text(text: str) -> str:
    """The form in which two texts are compared: NFKC, case-folded, white space collapsed and stripped."""
    return _SPACE.sub(" ", unicodedata.normalize("NFKC", text).casefold()).strip()


def text_key(text: str) -> int:
    """A 64-bit key of the normalised text (BLAKE2b: the same in every process, unlike Python's ``hash``)."""
    return int.from_bytes(hashlib.blake2b(normalise_text(text).encode("utf-8"), digest_size=8).digest(), "little")


def _ids_key(ids: Sequence[int]) -> int:
    return int.from_bytes(hashlib.blake2b(repr(list(ids)).encode(), digest_size=8).digest(), "little")


def _key_source(dataset):
    """The columns a row's keys are made of, what they are, and the key function; None without such columns."""
    from .data import PAIR_COLUMNS, PAIR_VIEWS

    columns = list(getattr(dataset, "column_names", None) or [])
    texts = [c for c in PAIR_COLUMNS if c in columns]
    if texts:
        return texts, "normalised text", text_key
    views = [p + "input_ids" for p in PAIR_VIEWS if p + "input_ids" in columns]
    return (views, "token ids", _ids_key) if views else None


def _keys_of(dataset, views: list[str], key, rows: slice) -> list:
    # a column read whole ([:] / a slice): iterating datasets' lazy Column fetches row by row, ~6x slower
    columns_values = [dataset[v][rows] for v in views]
    if len(views) == 1:
        return [key(v) for v in columns_values[0]]
    return [tuple(key(v) for v in row) for row in zip(*columns_values, strict=True)]


def row_keys(dataset) -> tuple[list, str] | None:
    """The keys of each row (an int, or a tuple over its views) and what they were made from; None when the data
    set has neither text columns nor ``input_ids``."""
    found = _key_source(dataset)
    if found is None:
        return None
    views, source, key = found
    return _keys_of(dataset, views, key, slice(None)), source


def order_seed(args) -> int:
    """The seed of the training rows' order (the no-duplicates batches, a stream's shuffle) under the training
    arguments ``args``: ``data_seed``, else ``seed``, as transformers seeds its own sampler."""
    return args.data_seed if args.data_seed is not None else args.seed


def check_distinct_texts(dataset, global_batch_size: int, source: str, chunk_rows: int = 4096,
                         seed: int = 0, repeats_allowed: bool = False, warn_if_few: bool = True,
                         tokenizer=None, prompt: str | None = None) -> None:
    """Before tokenizing (and before the model is loaded): data with fewer distinct texts than one global batch has
    rows can make no batch without a repeated text, which the sampler would find only once training starts (rows
    sharing no text need a distinct text each at least; the sampler's own plan stays the exact check). Reads the
    rows ``chunk_rows`` at a time and stops once enough distinct texts are seen (usually in the first chunk).

    Whether or not repeats are allowed (``repeats_allowed``: no_duplicates_in_batch off), one distinct text leaves
    nothing to contrast (every in-batch negative is the positive's own text): refused. Fewer than a global batch with
    repeats allowed: every batch holds copies, each the others' negative: said in one warning (``warn_if_few``; the
    command line leaves it to the trainer it builds, which checks its data again).

    ``tokenizer`` (and the model's ``prompt``), for sentences not yet tokenized: the rows that tokenizing will drop
    (:func:`hf_cse.data.drop_special_only`) are not counted, so that the fix named is one that works (with too few
    rows left, the row count is refused)."""
    from .files import DataError, check_enough_rows

    found = _key_source(dataset)
    if found is None or len(dataset) == 0:
        return
    views, _, key = found
    special_only = _special_only(tokenizer, prompt) if tokenizer is not None and views == ["text"] else None
    distinct: set = set()
    kept_rows = 0
    for start in range(0, len(dataset), chunk_rows):
        keys = _keys_of(dataset, views, key, slice(start, start + chunk_rows))
        if special_only is not None:
            keys = [k for k, drop in zip(keys, special_only(dataset["text"][start:start + chunk_rows])) if not drop]
        kept_rows += len(keys)
        for row in keys:
            distinct.update(row if isinstance(row, tuple) else (row,))
        if len(distinct) >= global_batch_size:
            break
    else:
        if kept_rows < len(dataset):  # rows of special tokens only, which tokenizing drops: the rest must do
            check_enough_rows(kept_rows, global_batch_size, f"{source} without its {len(dataset) - kept_rows} rows "
                              "that tokenize to special tokens only (dropped when tokenized)")
        if len(distinct) < 2:
            raise DataError(f"{source} holds one distinct text in its {kept_rows} rows: every in-batch negative "
                            "would be the positive's own text, so there is nothing to contrast. Use varied data.")
        if repeats_allowed:
            if not warn_if_few:
                return
            logger.warning("%s has %d distinct texts in %d rows, fewer than one global batch of %d: every batch "
                           "holds copies of a text, each the others' in-batch negative. Use more varied data or a "
                           "smaller per_device_train_batch_size.", source, len(distinct), kept_rows,
                           global_batch_size)
            return
        raise DataError(f"{source} has {len(distinct)} distinct text(s) in {kept_rows} rows: no global batch of "
                        f"{global_batch_size} rows without a repeated text can be made. Use more varied data, a "
                        "smaller per_device_train_batch_size, or allow repeats (no_duplicates_in_batch false).")
    # rows of several views (pairs): enough distinct texts may still make no batch (every row with the same anchor);
    # the sampler's plan of the first epoch decides, as the trainer's does (a single view: the count is exact)
    if len(views) > 1 and not repeats_allowed and not len(NoDuplicatesBatchSampler(
            _keys_of(dataset, views, key, slice(None)), global_batch_size, seed=seed)):
        raise DataError(f"{source}: no global batch of {global_batch_size} rows without a repeated text can be made "
                        f"from its {len(dataset)} rows, whose views share their texts too often (a batch holds each "
                        "text once). Use more varied data, a smaller per_device_train_batch_size, or allow repeats "
                        "(no_duplicates_in_batch false).")


def _special_only(tokenizer, prompt: str | None):
    """A function telling which of a batch of texts tokenize to special tokens only (as the training set is
    tokenized: the prompt in front), each distinct text tokenized once."""
    from .data import with_prompt

    special, seen = set(tokenizer.all_special_ids), {}

    def special_only(texts: list[str]) -> list[bool]:
        new = [text for text in dict.fromkeys(texts) if text not in seen]
        if new:
            rows = tokenizer(with_prompt(new, prompt), truncation=True)["input_ids"]
            seen.update((text, all(i in special for i in ids)) for text, ids in zip(new, rows, strict=True))
        return [seen[text] for text in texts]

    return special_only


@dataclass
class EpochPlan:
    """One epoch's batches (row indices, per-device batches in global-batch order) and what they left out."""

    batches: list[list[int]]
    deferred: int  # rows placed in a later batch than their shuffled position
    dropped: int  # rows in no batch this epoch
    seconds: float


class NoDuplicatesBatchSampler(Sampler[list[int]]):
    """Per-device batches of row indices such that no key (text) occurs twice in one global batch.

    Args:
        keys: per row, its key or a tuple of its views' keys (:func:`row_keys`).
        batch_size: rows per device.
        world_size: processes; a global batch is ``batch_size * world_size`` rows.
        seed: shuffling seed (the epoch is added, :meth:`set_epoch`).
    """

    drop_last = True  # read by Accelerate's BatchSamplerShard: every global batch is full

    def __init__(self, keys: Sequence, batch_size: int, world_size: int = 1, seed: int = 0):
        if batch_size < 1 or world_size < 1:
            raise CSEError(f"batch_size and world_size must be >= 1, got {batch_size} and {world_size}.")
        self.keys = keys
        self.batch_size = batch_size
        self.world_size = world_size
        self.seed = seed
        self.epoch = 0
        self._plan: tuple[int, EpochPlan] | None = None
        self._first_length: int | None = None  # per-device batches of epoch 0, which every epoch keeps

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def _row(self, i: int) -> tuple:
        k = self.keys[i]
        return k if isinstance(k, tuple) else (k,)

    def plan(self) -> EpochPlan:
        """The current epoch's batches (computed once per epoch), as many as epoch 0's (:meth:`_sized_plan`)."""
        if self._plan is None or self._plan[0] != self.epoch:
            self._plan = (self.epoch, self._sized_plan())
        return self._plan[1]

    def _sized_plan(self) -> EpochPlan:
        """The epoch's plan with epoch 0's number of batches: the Trainer sizes every epoch (its steps, the
        learning-rate schedule, the batches a resumed run skips) by epoch 0's length, and an epoch of another length
        would merge the last batch of one epoch into the first optimizer step of the next under gradient
        accumulation, and end the run short of ``max_steps``. A longer plan is cut (its extra rows left out this
        epoch); a shorter one is drawn again, with another shuffle, up to :data:`REDRAWS` times."""
        if self.epoch == 0 or self._first_length is None:  # the latter: a run resumed in a later epoch
            plan = self._make_plan(0, 0)
            for attempt in range(1, REDRAWS + 1):  # no batch at all (rows of several views): another shuffle may
                if plan.batches:
                    break
                plan = self._make_plan(0, attempt)
            self._first_length = len(plan.batches)
            if self.epoch == 0:
                return plan
        length, most = self._first_length, 0
        for attempt in range(REDRAWS + 1):
            plan = self._make_plan(self.epoch, attempt)
            if len(plan.batches) >= length:
                cut = (len(plan.batches) - length) * self.batch_size
                return EpochPlan(plan.batches[:length], plan.deferred, plan.dropped + cut, plan.seconds)
            most = max(most, len(plan.batches))
        size = self.batch_size * self.world_size
        raise CSEError(f"no_duplicates_in_batch: epoch {self.epoch} fits only {most // self.world_size} of epoch 0's "
                       f"{length // self.world_size} global batches of {size} without a repeated text "
                       f"({REDRAWS + 1} shuffles tried): the data repeats its texts too often for batches of this "
                       "size. Deduplicate it, use a smaller per_device_train_batch_size, or allow repeats "
                       "(no_duplicates_in_batch false).", fields=("no_duplicates_in_batch",))

    def _make_plan(self, epoch: int, attempt: int) -> EpochPlan:
        start = time.perf_counter()
        size = self.batch_size * self.world_size
        order = list(range(len(self.keys)))
        # attempt 0: the shuffle every epoch had before redraws existed; a str seed hashes alike in every process
        shuffle = self.seed * 1_000_003 + epoch if attempt == 0 else f"{self.seed}/{epoch}/{attempt}"
        random.Random(shuffle).shuffle(order)
        waiting: dict[int, deque[int]] = {}  # clashing key -> rows deferred on it, oldest first
        batches: list[list[int]] = []
        batch: list[int] = []
        seen: set[int] = set()
        deferred = 0

        def offer(i: int) -> int | None:
            """Put row i in the batch, or return the key that clashes."""
            row = self._row(i)
            for k in row:
                if k in seen:
                    return k
            batch.append(i)
            seen.update(row)
            return None

        def close_while_full() -> None:
            nonlocal batch, seen
            while len(batch) == size:
                batches.append(batch)
                batch, seen = [], set()
                # rows that waited go first into the new batch (the head of each clashing key's queue)
                for k in list(waiting):
                    if len(batch) == size:
                        break
                    queue = waiting[k]
                    if offer(queue[0]) is None:
                        queue.popleft()
                        if not queue:
                            del waiting[k]

        for i in order:
            clash = offer(i)
            if clash is not None:
                waiting.setdefault(clash, deque()).append(i)
                deferred += 1
            close_while_full()
        # the end: the rows still waiting fill batches while they can (a full scan each)
        rest = [i for queue in waiting.values() for i in queue]
        while rest:
            left = [i for i in rest if offer(i) is not None]
            if len(batch) < size:
                break
            batches.append(batch[:size])
            rest = batch[size:] + left
            batch, seen = [], set()
        placed = len(batches) * size
        chunks = [b[r * self.batch_size:(r + 1) * self.batch_size] for b in batches for r in range(self.world_size)]
        return EpochPlan(chunks, deferred, len(self.keys) - placed, time.perf_counter() - start)

    def __iter__(self):
        plan = self.plan()
        logger.debug("no-duplicates batches, epoch %d: %d global batches of %d; %d rows deferred to a later batch, "
                     "%d left out this epoch (%.2fs)", self.epoch, len(plan.batches) // self.world_size,
                     self.batch_size * self.world_size, plan.deferred, plan.dropped, plan.seconds)
        yield from plan.batches

    def __len__(self) -> int:
        return len(self.plan().batches)
