"""The rows of a streamed training source, checked as the stream is read (:mod:`hf_cse.streaming` reads only a file's
first 64 KiB up front): a JSON-lines file read line by line (:func:`json_lines_stream`), each record refused by its
line where a file read whole is refused (:func:`hf_cse.text_files.json_record_fault`), and the map of any source's
texts to its stripped sentences (:class:`SentenceTexts`), which refuses a text that is no string and says, once, that
empty rows are left out."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from .files import HEAD_BYTES, DataError
from .text_files import json_record_fault

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
    record without the field) is said once, in one log line, as a source read whole says how many it left out."""

    def __init__(self, source: str, column: str):
        self.source, self.column, self.said = source, column, False

    def __call__(self, batch: dict[str, list]) -> dict[str, list]:
        kept = []
        for text in batch["text"]:
            if text is not None and not isinstance(text, str):
                raise DataError(f"{self.source}: column {self.column!r} holds {type(text).__name__} {text!r:.40}, "
                                "not a sentence (a string), met mid-stream (only its first rows are checked up "
                                "front). The column must hold sentences (text): fix those rows, or pass text_column "
                                "NAME of the column that holds them.")
            if text and text.strip():
                kept.append(text.strip())
            elif not self.said:
                self.said = True
                logger.info("%s: left out a row as empty (a blank line, an empty or null cell, or a record without "
                            "the %r field), met in the stream; any more are left out without a word (a stream is "
                            "not counted ahead)", self.source, self.column)
        return {"text": kept}
