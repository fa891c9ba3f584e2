"""The order of a training stream's rows: its shuffle through a buffer (:func:`shuffled_stream`, each pass in an
order of its own). The rules: docs/batches.md, "Corpora larger than memory"."""

from __future__ import annotations

#: rows of a training stream's shuffle buffer (:func:`shuffled_stream`): enough to mix the sentences of many
#: neighbouring documents of a corpus sorted by document or source, few enough to hold tokenized in memory
DEFAULT_STREAM_SHUFFLE_BUFFER = 10_000


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
