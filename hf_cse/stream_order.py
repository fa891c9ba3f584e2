"""The order of a training stream's rows: its shuffle through a buffer (:func:`shuffled_stream`, each pass in an
order of its own), and how often a mixture of sources by weight reads each one (:func:`source_reads`; said where the
sizes are known, :func:`warn_of_repeated_sources`). The rules: docs/batches.md, "Corpora larger than memory"."""

from __future__ import annotations

import logging
from pathlib import Path

from .checks import InputError

logger = logging.getLogger("hf_cse.streaming")  # said among the stream's other warnings

#: rows of a training stream's shuffle buffer (:func:`shuffled_stream`): enough to mix the sentences of many
#: neighbouring documents of a corpus sorted by document or source, few enough to hold tokenized in memory
DEFAULT_STREAM_SHUFFLE_BUFFER = 10_000
#: reads of a source in one pass of a mixture from which they are said (:func:`warn_of_repeated_sources`): below it,
#: unequal sizes under equal weights only repeat part of the smaller source
SAID_READS = 1.5


def check_shuffle_buffer(buffer_size) -> None:
    """``stream_shuffle_buffer`` is a whole number of rows >= 0 (None: file order, as 0), refused before any data is
    read (the training arguments' field, or the trainer's keyword that wins over it)."""
    if buffer_size is not None and (isinstance(buffer_size, bool) or not isinstance(buffer_size, int)
                                    or buffer_size < 0):
        raise InputError(f"stream_shuffle_buffer must be a whole number of rows >= 0 (0: no shuffle, file order), "
                         f"got {buffer_size!r}.", fields=("stream_shuffle_buffer",))


def shuffled_stream(stream, seed: int, buffer_size: int | None):
    """``stream`` shuffled through a buffer of ``buffer_size`` rows (``datasets.IterableDataset.shuffle``: each row
    drawn at random from the next ``buffer_size``, a data set of several shards read in a shuffled shard order too),
    seeded by ``seed``; after ``set_epoch(p)`` by ``seed + p``, so each pass has an order of its own and reading pass
    ``p`` again gives the same one (a resumed run's skip, :class:`hf_cse.trainer_batches.StreamPasses`). ``stream``
    as it is for ``buffer_size`` 0 / None (file order) and for an iterable data set that is no ``datasets`` one (its
    order is its own)."""
    import datasets

    if not buffer_size or not isinstance(stream, datasets.IterableDataset):
        return stream
    return stream.shuffle(seed=seed, buffer_size=buffer_size)


def source_reads(sizes: list[int], weights: list[float]) -> list[float]:
    """About how many times each source of ``sizes`` rows is read in one pass over their mixture by ``weights``
    (``datasets.interleave_datasets``' ``all_exhausted``, :data:`hf_cse.streaming.STOPPING_STRATEGY`): the mixture
    ends once the last source is exhausted, the one of the least weight per row (``w / size``), which is read once;
    source ``i`` is read ``(w_i / size_i) / (w_min / size_min)`` times."""
    least = min(w / n for w, n in zip(weights, sizes, strict=True))
    return [w / n / least for w, n in zip(weights, sizes, strict=True)]


def warn_of_repeated_sources(paths: list[str], sizes: list[int], weights: list[float], rows: int) -> None:
    """One warning when the mixture of the sources read into memory repeats one of them (:func:`source_reads`)."""
    reads = source_reads(sizes, weights)
    if max(reads) < SAID_READS:
        return

    def times(r: float) -> str:
        return "once" if r < 1.05 else f"about {r:.0f} times" if r >= 9.5 else f"about {r:.1f} times"

    each = ", ".join(f"{Path(p).name} {times(r)} ({n:,} rows, weight {w:g})"
                     for p, n, w, r in zip(paths, sizes, weights, reads, strict=True))
    logger.warning("train_weights: the mixture ends once every source has been read once, so a source of more weight "
                   "per row is read again meanwhile, about (w_i/size_i)/(w_min/size_min) times: %s; %s rows in one "
                   "pass (epoch) from the sources' %s. Weights in proportion to the sources' sizes read each one once.",
                   each, f"{rows:,}", f"{sum(sizes):,}")
