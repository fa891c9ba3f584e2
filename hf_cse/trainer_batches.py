"""The batches of :class:`hf_cse.trainer.ContrastiveTrainer`: the training loader with the no-duplicates batch
sampler (:mod:`hf_cse.sampler`) where it applies, a stream's loader that drops its incomplete batches, its epochs,
and its collations, each drawn from a seed of its own (:mod:`hf_cse.collator_rng`)."""

from __future__ import annotations

import logging

import torch
from transformers import Trainer

from . import seams
from .data import PAIR_COLUMNS, DataError
from .data_checks import reads_token_rows
from .sampler import NoDuplicatesBatchSampler, order_seed, row_keys
from .stream_order import shuffled_stream
from .trainer_dataset import is_stream
from .training_args import global_batch_size

logger = logging.getLogger("hf_cse.trainer")


class StreamPasses(torch.utils.data.IterableDataset):
    """A stream read again and again (the training loader's data set of a stream), each pass cut to its whole
    global batches of ``batch_size`` rows (the rows after the last one are left out of that pass: other rows each
    pass when the stream is shuffled, :func:`hf_cse.stream_order.shuffled_stream`).

    transformers cannot tell where a pass over a data set without length ends: it takes the epoch for ``max_steps``
    steps long and, on resume, skips ``global_step`` x ``gradient_accumulation_steps`` batches of the epoch it
    computes from that length. A resume past the first pass then ran the pass dry and began the next one from its
    start, and a step's accumulation ended with a pass. One endless epoch of passes makes that count right: the
    resumed run re-reads (and drops) the batches already trained, over as many passes as they span, and continues
    with the batch the uninterrupted run trained next. Pass ``p`` reads the stream after ``set_epoch(p)`` (a shuffled
    stream's order of that pass, the same whenever pass ``p`` is read) and calls ``pass_begins(p)`` first (the
    collations' key, :mod:`hf_cse.collator_rng`). A pass of no whole batch ends the reading (a stream too small, or a
    loader worker the stream gives no shard)."""

    def __init__(self, stream, batch_size: int, pass_begins):
        super().__init__()
        self.stream, self.batch_size, self.pass_begins = stream, batch_size, pass_begins

    def __iter__(self):
        from itertools import count

        for number in count():
            if hasattr(self.stream, "set_epoch"):
                self.stream.set_epoch(number)
            self.pass_begins(number)
            batch, whole = [], 0
            for row in self.stream:
                batch.append(row)
                if len(batch) == self.batch_size:  # held back until whole: the pass's last rows are left out
                    yield from batch
                    batch, whole = [], whole + 1
            if not whole:
                return


class TrainingBatches(Trainer):
    """A mixin before ``Trainer`` in ``ContrastiveTrainer``'s bases; it reads the trainer's
    ``no_duplicates_in_batch``, ``stream_shuffle_buffer``, ``_batch_sampler`` and ``_collator_draws``."""

    def _no_duplicates_sampler(self) -> NoDuplicatesBatchSampler | None:
        """The no-duplicates batch sampler for the training set, or None where it does not apply (turned off, an
        iterable data set, another ``train_sampling_strategy``, no text / token columns)."""
        dataset = self.train_dataset
        if not self.no_duplicates_in_batch or dataset is None or is_stream(dataset):
            return None
        if getattr(self.args, "train_sampling_strategy", "random") != "random":
            logger.warning("train_sampling_strategy=%s: the no-duplicates batch sampler is not used (duplicate texts "
                           "may share a batch).", self.args.train_sampling_strategy)
            return None
        found = row_keys(dataset)
        if found is None:
            logger.warning("the training set has no text or input_ids column to compare rows by: the no-duplicates "
                           "batch sampler is not used.")
            return None
        keys, source = found
        logger.debug("no-duplicates batches: rows compared by %s over all their views", source)
        return NoDuplicatesBatchSampler(keys, seams.train_batch_size(self), self.args.world_size, order_seed(self.args))

    def get_train_dataloader(self):
        """The Trainer's training loader, with :class:`NoDuplicatesBatchSampler` as its batch sampler where it
        applies (Accelerate then hands every process its share of each global batch); each of its collations draws
        from a seed of its own, in a worker process too (:mod:`hf_cse.collator_rng`)."""
        collator = self.data_collator
        self.data_collator = self._collator_draws.track(collator, self.args)  # the training loader's, not evaluation's
        try:
            return self._train_dataloader()
        finally:
            self.data_collator = collator

    def _train_dataloader(self):
        from functools import partial

        from transformers.trainer_utils import seed_worker

        self._batch_sampler = self._no_duplicates_sampler()
        if self._batch_sampler is None and is_stream(self.train_dataset):
            return self._stream_loader()
        if self._batch_sampler is None:
            return super().get_train_dataloader()
        if len(self._batch_sampler) == 0:
            size = global_batch_size(self._batch_sampler.batch_size, self.args.world_size)
            distinct, count, example = self._most_frequent_text()
            raise DataError(f"no global batch of {size} rows without a repeated text can be made from the "
                            f"{len(self.train_dataset)} training rows ({distinct} distinct texts; the most frequent"
                            f"{example} is in {count} rows). Use more varied data or a smaller per-device batch, or "
                            "allow repeats with no_duplicates_in_batch=False.")
        self._warn_of_left_out_rows()
        dataset = self.train_dataset
        collator = self.data_collator
        if self.args.remove_unused_columns:  # a model of one's own (a method model's collator reads every column)
            dataset = seams.remove_unused_columns(self, dataset, "Training")
        elif reads_token_rows(getattr(collator, "collate_fn", collator)):
            # the texts were read for the sampler's keys; hf_cse's collators read token columns only, and fetching a
            # batch's texts too takes about as long as fetching its tokens
            dataset = dataset.remove_columns([c for c in PAIR_COLUMNS if c in dataset.column_names])
        return self._prepared_loader(dataset, collator, batch_sampler=self._batch_sampler, worker_init_fn=partial(
            seed_worker, num_workers=self.args.dataloader_num_workers, rank=self.args.process_index))

    def _stream_loader(self):
        """An iterable training set's loader, of whole batches only. transformers passes ``dataloader_drop_last`` to
        the loaders of map-style data sets alone, and Accelerate reads ``drop_last`` from the loader it prepares: each
        pass over a stream ended in a smaller batch (fewer in-batch negatives), and under several processes
        Accelerate's ``IterableDatasetShard`` filled it up with rows of the pass's first batch.

        The loader yields global batches, which Accelerate splits (``split_batches``): by default process 0 read one
        batch per process and joined them, which failed once the collator had padded them to different lengths.
        Split, each global batch is one collation of the rows a single process with that batch trains on, padded to
        its longest row only (padding every batch to max_seq_length would join them, at the cost of every step).

        The stream is shuffled through a buffer of ``stream_shuffle_buffer`` rows (seeded by
        :func:`~hf_cse.sampler.order_seed`), each pass in an order of its own. The loader reads the stream pass after
        pass without end (:class:`StreamPasses`):
        transformers takes the epoch of a data set without length for ``max_steps`` steps long, so the whole run is
        its epoch 0, and a resumed run skips the ``global_step`` x ``gradient_accumulation_steps`` batches already
        trained across the passes."""
        collator = seams.collator_with_removed_columns(self, self.data_collator, "Training")
        size = global_batch_size(seams.train_batch_size(self), self.args.world_size)
        stream = shuffled_stream(self.train_dataset, order_seed(self.args), self.stream_shuffle_buffer)
        passes = StreamPasses(stream, size, self._collator_draws.epoch_begins)
        config = self.accelerator.dataloader_config
        asked, config.split_batches = config.split_batches, True
        try:
            return self._prepared_loader(passes, collator, drop_last=True, batch_size=size)
        finally:
            config.split_batches = asked

    def _prepared_loader(self, dataset, collator, **batching):
        """The loader of ``dataset`` with the arguments' loader settings and ``batching``, prepared by Accelerate
        (which shards it over the processes)."""
        from torch.utils.data import DataLoader

        loader = DataLoader(
            dataset, collate_fn=collator,
            num_workers=self.args.dataloader_num_workers, pin_memory=self.args.dataloader_pin_memory,
            persistent_workers=self.args.dataloader_persistent_workers,
            multiprocessing_context=self.args.dataloader_multiprocessing_context,
            prefetch_factor=self.args.dataloader_prefetch_factor, **batching,
        )
        return self.accelerator.prepare(loader)

    def _warn_of_left_out_rows(self) -> None:
        """One warning when the no-duplicates batches leave out more rows than the last incomplete batch: copies of a
        text that outnumber the batches (a corpus of repeated lines) are not trained on, which the run's row count
        would not tell."""
        sampler = self._batch_sampler
        plan, size = sampler.plan(), global_batch_size(sampler.batch_size, self.args.world_size)
        if plan.dropped < size:
            return
        _, count, example = self._most_frequent_text()
        logger.warning("no-duplicates batches: %d of the %d training rows are left out of each epoch (%.0f%%): "
                       "copies of texts that occur more often than there are batches, the most frequent %d times%s. "
                       "Deduplicate the data, or allow repeats with no_duplicates_in_batch=False.", plan.dropped,
                       len(sampler.keys), 100 * plan.dropped / len(sampler.keys), count, example)

    def _most_frequent_text(self) -> tuple[int, int, str]:
        """The sampler's number of distinct texts, the rows of the most frequent one, and that text quoted (where
        rows have one text column; else "")."""
        from collections import Counter

        keys = self._batch_sampler.keys
        counts = Counter(k for row in keys for k in (row if isinstance(row, tuple) else (row,)))
        key, count = counts.most_common(1)[0]
        texts = getattr(self.train_dataset, "column_names", None) or []
        example = ""
        if "text" in texts and not isinstance(keys[0], tuple):
            example = f" ({self.train_dataset[keys.index(key)]['text']!r:.60})"
        return len(counts), count, example

    def on_epoch_start(self, epoch: int) -> None:
        # the plan of every epoch is fixed by (seed, epoch); Accelerate's skip wrapper on resume does not forward
        # set_epoch to a batch sampler under its BatchSamplerShard, so set it here
        if self._batch_sampler is not None:
            self._batch_sampler.set_epoch(epoch)
        self._collator_draws.epoch_begins(epoch)  # before the epoch's loader starts its workers
