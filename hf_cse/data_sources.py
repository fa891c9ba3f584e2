"""Data sets named by ``dataset_name``: a Hub data set (``datasets.load_dataset``), a folder that
``Dataset.save_to_disk`` wrote (which ``load_dataset`` refuses, naming ``load_from_disk``), or a local folder of data
files.

A folder of the files a ``train_file`` may be (``.txt``, ``.csv``/``.tsv``, ``.json``/``.jsonl``) is, for training
sentences, a list of train files: the files of the split, found by their names as ``datasets`` finds them
(:func:`folder_train_files`: ``train.txt``, ``data/train-00000.csv``, a folder ``train/``; every file where no name
says a split), each checked and read as one ``train_file`` is, whatever its kind (``hf_cse.data.load_train_dataset``).
A folder whose dataset card names its files (``configs`` in README.md), or of files of other kinds only (Parquet,
Arrow, compressed text) is read by ``datasets``' own rules."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from .files import DataError, content_fingerprint, local_dataset_folder
from .said_once import first_time
from .text_files import JSON_SUFFIXES, TABLE_SUFFIXES, find_unreadable_line

#: the data readers' logger (their warnings are the data module's)
logger = logging.getLogger("hf_cse.data")

#: the files of a folder that hf_cse reads itself, as it reads a train_file
TRAIN_FILE_SUFFIXES = (".txt", *TABLE_SUFFIXES, *JSON_SUFFIXES)
#: data files that datasets reads and hf_cse does not: beside train files in one split, some would be left out
OTHER_DATA_SUFFIXES = (".parquet", ".arrow", ".gz", ".bz2", ".xz", ".zst", ".zip")
#: what datasets reads a folder's train files as: one reader for the whole split, chosen by the most common kind
DATASETS_READER = {".txt": "text", ".csv": "CSV", ".tsv": "TSV", ".json": "JSON", ".jsonl": "JSON"}


def is_saved_dataset(folder: Path) -> bool:
    """``folder`` holds a data set ``Dataset.save_to_disk`` (or ``DatasetDict.save_to_disk``) wrote."""
    return (folder / "state.json").is_file() or (folder / "dataset_dict.json").is_file()


def empty_saved_dataset(name: str, split: str | None = None) -> DataError:
    """The refusal of a saved data set (or its ``split``) without rows: ``datasets`` fails on one with an IndexError
    deep in its tables (no data files), or when it streams it (no shard to read)."""
    where = f" in its {split!r} split" if split else ""
    return DataError(f"dataset_name {name} is empty (0 rows{where}): Dataset.save_to_disk wrote a data set without "
                     "rows. Save the data set again with its sentences, or give another dataset_name / train_file.")


def check_saved_rows(folder: Path, name: str, split: str = "train") -> None:
    """Refuse a folder ``Dataset.save_to_disk`` wrote of a data set without rows (its ``split``, for a
    ``DatasetDict``'s), told by its ``state.json``, which lists no data files (torch-free: the commands check it before
    the training stack is imported). A data set whose files hold 0 rows is refused once read
    (:func:`load_named_dataset`)."""
    is_dict = (folder / "dataset_dict.json").is_file()
    state = folder / split / "state.json" if is_dict else folder / "state.json"
    try:
        files = json.loads(state.read_text(encoding="utf-8")).get("_data_files")
    except (OSError, ValueError, AttributeError):  # no such split (said when read), or not datasets' own file
        return
    if files == []:
        raise empty_saved_dataset(name, split if is_dict else None)


def _card_names_files(folder: Path) -> bool:
    """The folder's dataset card (README.md's YAML header) or ``.huggingface.yaml`` may name its data files
    (``configs``): ``datasets`` reads those."""
    readme = folder / "README.md"
    if (folder / ".huggingface.yaml").is_file():
        return True
    if not readme.is_file():
        return False
    text = readme.read_text(encoding="utf-8", errors="replace")
    header = text[3:].split("\n---", 1)[0] if text.startswith("---") else ""
    return any(line.startswith("configs:") for line in header.splitlines())


def folder_data_files(folder: Path, name: str, split: str, config_name: str | None = None) -> list[Path] | None:
    """The train files (:data:`TRAIN_FILE_SUFFIXES`) of ``split`` in the local folder ``folder`` (given as
    ``name``), sorted, found as ``datasets`` finds a folder's splits; None for a folder ``datasets`` reads by its own
    rules (module doc). Refused in one line: a folder without data files, one without ``split`` (naming the splits
    its file names make), train files beside data files of other kinds in the split, a ``config_name``."""
    from datasets.data_files import DataFilesDict, EmptyDatasetError, get_data_patterns

    if is_saved_dataset(folder) or _card_names_files(folder):
        return None
    base = str(folder.resolve())
    try:
        found = DataFilesDict.from_patterns(get_data_patterns(base), base_path=base)
    except EmptyDatasetError:
        raise DataError(f"dataset_name {name} holds no data files: give a folder of .txt/.csv/.tsv/.json/.jsonl "
                        "files (or one Dataset.save_to_disk wrote).") from None
    kinds = TRAIN_FILE_SUFFIXES + OTHER_DATA_SUFFIXES
    splits = {str(key): sorted(Path(f) for f in files if Path(f).suffix.lower() in kinds)
              for key, files in found.items()}
    splits = {key: files for key, files in splits.items() if files}
    if not any(f.suffix.lower() in TRAIN_FILE_SUFFIXES for files in splits.values() for f in files):
        return None
    if split not in splits:
        shown = "; ".join(f"{key}: {', '.join(f.name for f in files[:3])}{' ...' if len(files) > 3 else ''}"
                          for key, files in splits.items())
        raise DataError(f"dataset_name {name} has no {split!r} split: datasets splits a folder by its file names, "
                        f"and these make {', '.join(map(repr, splits))} ({shown}). Name the training files "
                        f"{split}.txt, {split}-00000.txt, ... (or put them in a folder {split}/), or give them as "
                        "train_file / train_files.")
    files = splits[split]
    in_splits = {Path(f).resolve() for split_files in found.values() for f in split_files}
    _warn_of_files_in_no_split(folder, name, split, files, kinds, in_splits)
    others = [f.name for f in files if f.suffix.lower() not in TRAIN_FILE_SUFFIXES]
    if others:
        mine = [f.name for f in files if f.suffix.lower() in TRAIN_FILE_SUFFIXES]
        raise DataError(f"dataset_name {name} holds train files ({', '.join(mine[:3])}) and data files of other kinds "
                        f"({', '.join(others[:3])}) in its {split!r} split, which datasets reads as one kind, "
                        "leaving the others out: put them in separate folders, or convert the others to "
                        ".txt/.jsonl.")
    if config_name:
        raise DataError(f"dataset_name {name} is a folder of data files, which has no configurations; drop "
                        "dataset_config_name.")
    return files


def _warn_of_files_in_no_split(folder: Path, name: str, split: str, files: list[Path], kinds: tuple[str, ...],
                               split_files: set[Path]) -> None:
    """One warning (once a process) naming the data files of ``folder`` (of ``kinds``; not hidden) in no split:
    ``datasets`` reads only the files whose names name a split once one does (``train.txt``), and leaves the
    others (``more.jsonl``) out without a word. Not refused: a folder may hold files that are no training text."""
    base = folder.resolve()
    unsplit = sorted(path.relative_to(base).as_posix() for path in base.rglob("*")
                     if path.suffix.lower() in kinds and path.is_file() and path.resolve() not in split_files
                     and not any(part.startswith((".", "__")) for part in path.relative_to(base).parts))
    if not unsplit or not first_time("files in no split", str(base), split):
        return
    shown = ", ".join(unsplit[:5]) + (f" and {len(unsplit) - 5} more" if len(unsplit) > 5 else "")
    one = len(unsplit) == 1
    it = "it" if one else "them"
    logger.warning("dataset_name %s: %s %s in no split and left out: once a file's name names a split (%s), datasets "
                   "reads only the files so named. To train on %s, name %s %s-<name> (e.g. %s-%s) or put %s in a "
                   "folder %s/; else move %s out of the folder.", name, shown, "is" if one else "are", files[0].name,
                   it, it, split, split, Path(unsplit[0]).name, it, split, it)


def folder_train_files(name: str, split: str, config_name: str | None = None) -> list[Path] | None:
    """The train files of ``split`` when ``name`` is a local folder of them (:func:`folder_data_files`), each to be
    read as a ``train_file`` is; None for a Hub id and a folder read as a data set. A local path that names nothing
    or names a file is refused in one line (:func:`~hf_cse.files.local_dataset_folder`)."""
    folder = local_dataset_folder(name)
    return None if folder is None else folder_data_files(folder, name, split, config_name)


def folder_file_words(name: str, split: str) -> str:
    """How a message names a file of the ``dataset_name`` folder ``name`` (before the file's path): by the folder the
    user gave, then the file, not as if the file were the value given."""
    return f"dataset_name {name}: its {split} file"


def folder_text_columns(files: list[Path], text_column: str | None) -> list[str | None]:
    """The text column each of a folder's ``files`` is read by: ``text_column`` for its tables and JSON files, none
    for its plain text files (lines) where the folder mixes the two kinds, so that one ``text_column`` reads them
    all; where no file has columns, each gets it (and the first refuses it: a plain text file has none)."""
    columns = [path.suffix.lower() in TABLE_SUFFIXES + JSON_SUFFIXES for path in files]
    return [text_column if has or not any(columns) else None for has in columns]


def folder_content(name: str, split: str = "train", config_name: str | None = None) -> dict[str, str]:
    """The content (:func:`~hf_cse.files.content_fingerprint`) of the files the local folder ``name`` (a
    ``dataset_name``) is read from, keyed ``<folder name>/<path inside it>`` (a "/" no train_file's name holds), so
    that a run resumed on an edited, added or removed file is told; empty for a Hub id. A folder of data files: the
    files of ``split`` (:func:`folder_data_files`); one ``datasets`` reads by its own rules (a saved data set, a card
    naming its files, Parquet or compressed files): every file in it but hidden ones, as any of them may be read."""
    folder = local_dataset_folder(name)
    if folder is None:
        return {}
    base = folder.resolve()
    files = folder_data_files(folder, name, split, config_name)
    if files is None:
        files = sorted(p for p in base.rglob("*") if p.is_file() and (p.name == ".huggingface.yaml" or not any(
            part.startswith(".") for part in p.relative_to(base).parts)))
    return {f"{base.name}/{Path(p).relative_to(base).as_posix()}": content_fingerprint(p) for p in files}


def load_named_dataset(name: str, config_name: str | None, split: str, streaming: bool = False):
    """``datasets.load_dataset(name, ...)``'s split, or, for a folder ``Dataset.save_to_disk`` wrote (which
    ``load_dataset`` refuses, naming ``load_from_disk``), that data set: its ``split`` where it holds several. A local
    folder of train files is checked first (:func:`folder_data_files`: its split, its kinds; they are read by one
    reader here, so of one kind), and a file of it that is not UTF-8 refused by its line."""
    import datasets

    folder = local_dataset_folder(name)
    if folder is None:
        return datasets.load_dataset(name, config_name, split=split, streaming=streaming)
    if not is_saved_dataset(folder):
        return _load_folder(folder, name, config_name, split, streaming)
    if config_name:
        raise DataError(f"dataset_name {name} is a data set saved with save_to_disk, which has no configurations; "
                        "drop dataset_config_name.")
    saved, is_dict = folder, (folder / "dataset_dict.json").is_file()
    if is_dict:  # its split alone is read: datasets reads every split of the folder, an empty one failing
        if not (folder / split / "state.json").is_file():
            raise DataError(f"dataset_name {name} holds the splits {', '.join(_saved_splits(folder))}, not {split!r}: "
                            "save the split to train on alone (ds[split].save_to_disk(folder)).")
        saved = folder / split
    check_saved_rows(folder, name, split)
    ds = datasets.load_from_disk(str(saved))
    if len(ds) == 0:  # data files of 0 rows (a filter's result saved): streamed, datasets fails on them
        raise empty_saved_dataset(name, split if is_dict else None)
    return ds.to_iterable_dataset() if streaming else ds


def _saved_splits(folder: Path) -> list[str]:
    """The splits a saved ``DatasetDict`` holds (its ``dataset_dict.json``)."""
    try:
        return list(json.loads((folder / "dataset_dict.json").read_text(encoding="utf-8"))["splits"])
    except (OSError, ValueError, KeyError, TypeError):
        return sorted(p.name for p in folder.iterdir() if (p / "state.json").is_file())


def _load_folder(folder: Path, name: str, config_name: str | None, split: str, streaming: bool):
    """A local folder of data files, read by ``datasets``: one kind of train files per split (datasets reads the most
    common kind and leaves the others out), a file that is not UTF-8 and a split that is not there in one line."""
    import datasets
    from datasets.exceptions import DatasetGenerationError

    files = folder_data_files(folder, name, split, config_name) or []
    readers = sorted({DATASETS_READER[f.suffix.lower()] for f in files})
    if len(readers) > 1:
        shown = ", ".join(f"{f.name} ({DATASETS_READER[f.suffix.lower()]})" for f in files[:6])
        raise DataError(f"dataset_name {name} holds files of several kinds in its {split!r} split ({shown}), which "
                        "datasets reads as one kind, leaving the others out: keep files of one kind in the folder.")
    try:
        return datasets.load_dataset(str(folder), config_name, split=split, streaming=streaming)
    except DatasetGenerationError:
        unreadable = next(((f, found) for f in files for found in [find_unreadable_line(f)] if found), None)
        if unreadable is None:
            raise
        path, (line, what) = unreadable
        raise DataError(f"dataset_name {name}: line {line} of {path.name} is {what}. Convert the file to UTF-8, "
                        f"e.g. `iconv -f latin1 -t utf-8 {path.name} > fixed{path.suffix}`.") from None
    except ValueError as err:  # a split that a dataset card's configs do not make
        if not str(err).startswith("Unknown split"):
            raise
        raise DataError(f"dataset_name {name}: {err} (the splits its dataset card makes). Name the training files' "
                        f"split {split!r} in README.md, or give them as train_file / train_files.") from None
