"""A sentences file's sentences, read as the training data's reader reads them (:func:`sentences_in`), and the checks
of a sentences file its first 64 KiB answer, made before the commands import the training stack
(:func:`check_sentences_file_start`, :func:`check_enough_sentences`): for a small file, the whole of it."""

from __future__ import annotations

import io
from collections import Counter
from pathlib import Path

from .files import HEAD_BYTES, check_enough_rows, read_head, table_records
from .missing_markers import left_out_markers
from .text_files import (
    JSON_SUFFIXES,
    TABLE_SUFFIXES,
    check_json_head,
    check_layout,
    check_not_numbers,
    check_table_head,
    check_text_column_applies,
    no_sentences_error,
    read_json_sentences,
    table_text_column,
)


def sentences_in(path: Path, text: str, text_column: str | None, warn: bool = True
                 ) -> tuple[list[str], Counter[str]]:
    """The non-blank sentences of ``text``, the whole text of ``path``: its lines, or the ``text_column`` of a
    ``.csv``/``.tsv``/``.json``/``.jsonl`` file; and the missing-value markers left out of them
    (:func:`~hf_cse.missing_markers.left_out_markers`: a column exported with ``NaN`` for its empty cells). None, or a
    column of numbers (:func:`~hf_cse.text_files.check_not_numbers`) or of markers, refused; ``warn`` False: refused
    only (the reader that follows warns)."""
    column, columns = None, None  # a .txt file: lines, no column
    if path.suffix.lower() in JSON_SUFFIXES:
        column = text_column or "text"
        lines = read_json_sentences(path, text_column)
    elif path.suffix.lower() in TABLE_SUFFIXES:
        columns, records = table_records(io.StringIO(text, newline=""), path)  # .tsv: tabs only, no quoting
        column = table_text_column(path, columns, text_column)
        lines = [record[column] for _, record in records]
    else:
        lines = text.splitlines()
    markers = left_out_markers(lines, str(path), column, warn=warn)
    lines = [line for line in lines if line and line.strip() not in markers]
    check_not_numbers(lines, str(path), column, columns, warn=warn)  # "NaN" is a number to float(): markers out first
    sentences = [s.strip() for s in lines if s and s.strip()]
    if not sentences:
        raise no_sentences_error(path)
    return sentences, markers


def check_sentences_file_start(path: Path, text_column: str | None) -> list[str] | None:
    """The checks of a sentences file that its first 64 KiB answer, in the order the reader makes them (its
    encoding, ``text_column``, its layout, a table's column; where those bytes are the whole file, its sentences:
    a table of a header alone, a column of numbers): made before the training stack is imported, so that these
    mistakes cost no seconds. The reader checks the whole file again. Returns the sentences of a file read whole,
    else None."""
    text = read_head(path, "train_file")
    whole = path.stat().st_size < HEAD_BYTES  # (at HEAD_BYTES, a last line without its line break is left out)
    if not text.strip() and whole:  # the whole file read: nothing in it
        raise no_sentences_error(path)
    check_text_column_applies(path, text_column)
    check_layout(path, text)
    check_table_head(path, text, text_column)
    check_json_head(path, text, text_column)  # a record without the field, with its line
    return sentences_in(path, text, text_column, warn=False)[0] if whole else None


def check_enough_sentences(path: Path, count: int, global_batch: int, max_rows: int | None = None) -> None:
    """A sentences file of ``count`` sentences (:func:`check_sentences_file_start`'s, of a file read whole) fewer
    than one global batch, refused from the file alone, before the training stack is imported (the command counts
    again, a larger file too); ``max_rows``: max_train_samples."""
    if max_rows is None:
        check_enough_rows(count, global_batch, str(path))
    else:
        check_enough_rows(min(count, max_rows), global_batch, f"{path} cut to max_train_samples {max_rows}")
