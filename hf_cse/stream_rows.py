"""The rows of a streamed training source, checked as the stream is read (:mod:`hf_cse.streaming` reads only a file's
first 64 KiB up front): a JSON-lines file read line by line (:func:`json_lines_stream`), each record refused by its
line where a file read whole is refused (:func:`hf_cse.text_files.json_record_fault`), and the map of any source's
texts to its stripped sentences (:class:`SentenceTexts`), which refuses a text that is no string and says, once, that
empty rows are left out. A ``.csv`` / ``.tsv`` file streams row by row as it is read whole (:func:`table_stream`),
and an error while ``datasets`` reads a stream ends the run in one line naming the file's line or the data set
(:func:`read_checked`)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from .files import HEAD_BYTES, DataError, table_records
from .text_files import find_unreadable_line, json_record_fault

logger = logging.getLogger(__name__)

#: how a refusal of a file's line says when it was found
MET = f"met mid-stream (only the first {HEAD_BYTES >> 10} KiB are checked up front)"


def mid_stream_error(path: Path, line: int, fault: str, fix: str) -> DataError:
    """The refusal of ``path``'s ``line``, met as the stream was read: ``fault`` follows "line N" (" is not valid
    JSON (...)"), ``fix`` says what to do with the line."""
    return DataError(f"{path}: line {line}{fault}, {MET}. {fix} (sed -n '{line}p' {path.name} shows it).")


def convert_fix(path: Path) -> str:
    """The fix of a line that is not UTF-8."""
    return f"Convert the file (e.g. iconv -f latin1 -t utf-8 {path.name} > fixed{path.suffix}) or fix the line"


def is_json_list(path: Path) -> bool:
    """Whether the JSON file ``path`` holds one list (read whole by any reader) rather than JSON lines."""
    with path.open("rb") as fh:
        return fh.read(64).lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"[")


def json_lines_stream(path: Path, column: str):
    """The JSON-lines file ``path`` as a stream of rows of one column, ``column`` (null where a record lacks it),
    read line by line as training goes: a line that is not UTF-8, not JSON, not an object, or whose ``column`` holds
    no string (a number, a list) ends the run in one line naming the line. ``datasets``' JSON reader said neither
    file nor line (a traceback from pyarrow), or passed a number on (``'int' object has no attribute 'strip'``,
    mid-run), or, in a later chunk of the file, trained on it as the text "5"."""
    import datasets

    return datasets.IterableDataset.from_generator(
        _json_rows, features=datasets.Features({column: datasets.Value("string")}),
        gen_kwargs={"path": str(path), "column": column})


def _json_rows(path: str, column: str):
    source = Path(path)
    with open(path, "rb") as fh:
        for line, raw in enumerate(fh, 1):
            try:
                text = raw.decode("utf-8-sig" if line == 1 else "utf-8").rstrip("\n")
            except UnicodeDecodeError as err:
                raise mid_stream_error(source, line, f" is not valid UTF-8 ({err.reason})",
                                       convert_fix(source)) from None
            if not text.strip():
                continue
            try:
                record = json.loads(text)
            except json.JSONDecodeError as err:
                raise mid_stream_error(source, line, f" is not valid JSON ({err.msg})",
                                       "Fix or delete the line") from None
            fault = json_record_fault(record, column)
            if fault:
                fix = ("Fix or delete the line" if not isinstance(record, dict) else
                       f"The field {column!r} must hold sentences (text): fix or delete the line, or pass "
                       "text_column NAME of the field that holds them")
                raise mid_stream_error(source, line, fault, fix)
            yield {column: record.get(column)}


class SentenceTexts:
    """The batched map of a streamed source's ``text`` column to its stripped, non-blank sentences. A text that is no
    string (a data set's number) ends the run in one line naming ``source`` and ``column`` (it failed as
    ``'int' object has no attribute 'strip'``, mid-run); the first empty row (a blank line, an empty or null cell, a
    record without the field) is said once, in one log line, as a source read whole says how many it left out.
    ``markers``: the missing-value markers its first rows showed (:func:`hf_cse.missing_markers.left_out_markers`,
    which said them), left out too."""

    def __init__(self, source: str, column: str, markers: frozenset[str] = frozenset()):
        self.source, self.column, self.markers, self.said = source, column, markers, False

    def __call__(self, batch: dict[str, list]) -> dict[str, list]:
        kept = []
        for text in batch["text"]:
            if text is not None and not isinstance(text, str):
                raise DataError(f"{self.source}: column {self.column!r} holds {type(text).__name__} {text!r:.40}, "
                                "not a sentence (a string), met mid-stream (only its first rows are checked up "
                                "front). The column must hold sentences (text): fix those rows, or pass text_column "
                                "NAME of the column that holds them.")
            if text and text.strip() in self.markers:
                continue
            if text and text.strip():
                kept.append(text.strip())
            elif not self.said:
                self.said = True
                logger.info("%s: left out a row as empty (a blank line, an empty or null cell, or a record without "
                            "the %r field), met in the stream; any more are left out without a word (a stream is "
                            "not counted ahead)", self.source, self.column)
        return {"text": kept}


def table_stream(path: Path):
    """A ``.csv`` / ``.tsv`` file streamed as :func:`hf_cse.files.table_records` reads it (as it is read whole): every
    cell a string, a row whose number of fields is not the header's refused by its line when the stream reaches it
    (``datasets``' CSV reader fills a short row's missing cells with empty strings, which passed as blank lines)."""
    import datasets

    with path.open(encoding="utf-8-sig", newline="") as fh:
        columns = [name for name in table_records(fh, path)[0] if name]
    return datasets.IterableDataset.from_generator(
        _table_rows, features=datasets.Features({name: datasets.Value("string") for name in columns}),
        gen_kwargs={"path": str(path)})  # no list there: datasets would read it as shards


def _table_rows(path: str):
    with open(path, encoding="utf-8-sig", newline="") as fh:
        header, records = table_records(fh, path)
        for _, record in records:
            yield {name: record[name] for name in header if name}


def read_checked(stream, refusal):
    """``stream``, read by ``datasets`` as training goes, where an error while reading it that ``refusal(rows_read,
    err)`` names (a :class:`DataError`; None: not the data's fault, re-raised as it is) ends the run in that one line
    instead of a traceback from inside ``datasets``: a file's line it cannot read (:func:`file_unreadable`; only its
    first 64 KiB were checked up front, :func:`hf_cse.streaming._check_start`), a data set's row or dropped connection
    (:func:`dataset_unreadable`). The checkpoints saved before the failure stay (the error ends ``train`` as any
    other)."""
    import datasets

    return described_as(stream, datasets.IterableDataset.from_generator(
        _checked_rows, features=stream.features, gen_kwargs={"stream": stream, "refusal": refusal}))


def described_as(stream, made):
    """``made`` (a stream made from a generator over ``stream``, named "generator" by datasets) with ``stream``'s
    description: its data set's name (the trainer records it, :func:`hf_cse.trainer_dataset.data_facts`), config,
    licence and citation."""
    for field in ("dataset_name", "config_name", "description", "citation", "homepage", "license"):
        setattr(made.info, field, getattr(stream.info, field))
    return made


def rows_of(stream):
    """The rows of ``stream``, read whole wherever it is read: by a generator over it, which makes a stream of one
    shard. Iterated row by row inside a DataLoader worker, a stream reads only the shards of that worker's number, and
    ``datasets`` gives the one shard of the stream made to one worker: of a stream of several shards, only that
    worker's part was read (16 rows in 2 shards, read with dataloader_num_workers=2: 8 rows a pass).
    ``IterableDataset.iter`` splits by no worker (read a row at a time: an error names the rows read before it);
    outside a worker, and for another iterable, the stream is read as it is (faster)."""
    import datasets
    import torch.utils.data

    if not isinstance(stream, datasets.IterableDataset) or torch.utils.data.get_worker_info() is None:
        yield from stream
        return
    for batch in stream.iter(batch_size=1):
        yield {column: values[0] for column, values in batch.items()}


def _checked_rows(stream, refusal):
    read = 0
    try:
        for row in rows_of(stream):
            yield row
            read += 1
    except Exception as err:
        refused = None if isinstance(err, DataError) else refusal(read, err)
        if refused is None:
            raise
        raise refused from None


def dataset_unreadable(name: str, rows_read: int, err: Exception) -> DataError | None:
    """The refusal of the streamed data set ``name`` (the Hub's, or a local data set folder) whose reading failed
    with ``err`` after ``rows_read`` rows: a row it cannot read (``ValueError``) or a connection that failed
    (``OSError``); None for any other error."""
    if not isinstance(err, (ValueError, OSError)):
        return None
    what = (str(err).strip().splitlines() or [""])[0][:300]
    return DataError(f"data set {name}: reading it failed after {rows_read} rows, mid-stream ({type(err).__name__}: "
                     f"{what}). A broken row: train on a copy without it (train_file); a dropped connection: "
                     "resume_from_checkpoint once it is back (the checkpoints saved so far stay).")


def file_unreadable(path: Path, rows_read: int, err: Exception) -> DataError | None:
    """The refusal of ``path``, whose reader failed with ``err`` after ``rows_read`` rows: the first line that is not
    UTF-8, found by reading the file again up to it; None where no such line is found and ``err`` is no decoding
    error (then it is no fault of the file that hf_cse can name), and for an error that is no ``ValueError``. A
    table's row with the wrong number of fields is refused by :func:`table_stream` itself, a JSON-lines file's bad
    line by :func:`hf_cse.stream_rows.json_lines_stream`."""
    if not isinstance(err, ValueError):
        return None
    found = find_unreadable_line(path)
    if found is None:
        if not isinstance(err, UnicodeDecodeError):
            return None
        return DataError(f"{path}: bytes that are not UTF-8 ({err.reason}) after its first {rows_read} rows, {MET}. "
                         f"Convert the file to UTF-8; grep -naxv '.*' {path.name} finds the lines.")
    line, what = found
    return mid_stream_error(path, line, f" is {what}", convert_fix(path))
