"""Data sets named by ``dataset_name``: a Hub data set (``datasets.load_dataset``), or a folder that
``Dataset.save_to_disk`` wrote, which ``load_dataset`` refuses (naming ``load_from_disk``)."""

from __future__ import annotations

from pathlib import Path

from .files import DataError


def load_named_dataset(name: str, config_name: str | None, split: str, streaming: bool = False):
    """``datasets.load_dataset(name, ...)``'s split, or, for a folder ``Dataset.save_to_disk`` wrote (which
    ``load_dataset`` refuses, naming ``load_from_disk``), that data set: its ``split`` where it holds several."""
    import datasets

    folder = Path(name).expanduser()
    if not (folder / "state.json").is_file() and not (folder / "dataset_dict.json").is_file():
        return datasets.load_dataset(name, config_name, split=split, streaming=streaming)
    if config_name:
        raise DataError(f"dataset_name {name} is a data set saved with save_to_disk, which has no configurations; "
                        "drop dataset_config_name.")
    ds = datasets.load_from_disk(str(folder))
    if isinstance(ds, datasets.DatasetDict):
        if split not in ds:
            raise DataError(f"dataset_name {name} holds the splits {', '.join(ds)}, not {split!r}: save the split to "
                            "train on alone (ds[split].save_to_disk(folder)).")
        ds = ds[split]
    return ds.to_iterable_dataset() if streaming else ds
