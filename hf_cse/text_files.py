"""How a training file's sentences are laid out, by its name: ``.csv`` / ``.tsv`` tables and ``.json`` / ``.jsonl``
records read by a text column, anything else one sentence per line; and the checks that a file's content fits its
name (:func:`check_layout`), run on the whole file or on the start of one that is streamed, and
(:mod:`hf_cse.sentence_files`) before the commands import the training stack."""

from __future__ import annotations

import csv
import io
import json
import logging
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from .files import (
    HEAD_BYTES,
    DataError,
    is_tsv,
    read_text,
    table_records,
    without_cut_line,
)

#: the data readers' logger (their warnings are the data module's)
logger = logging.getLogger("hf_cse.data")

TABLE_SUFFIXES = (".csv", ".tsv")
JSON_SUFFIXES = (".json", ".jsonl")


def check_text_column_applies(path: Path, text_column: str | None) -> None:
    """``text_column`` names a column; a plain text file has none."""
    if text_column and path.suffix.lower() not in TABLE_SUFFIXES + JSON_SUFFIXES:
        raise DataError(f"text_column {text_column} was given, but {path} is read as plain text (one sentence per "
                        "line, no columns). Drop text_column, or give a .csv/.tsv/.json/.jsonl file.")


#: words from which a lone column's name is taken for a sentence (a file without a header)
HEADER_WORDS = 4


def column_fix(text_column: str | None) -> str:
    """The fix of a text column not found: name one where none was given (``text`` was looked for); else the one
    given is none of them, and another is to be set."""
    return ("Pass text_column NAME." if not text_column else
            f"text_column is set to {text_column!r}, which is none of them: set it to the column of sentences.")


def table_text_column(path: Path, columns: list[str], text_column: str | None) -> str:
    """The column of a ``.csv``/``.tsv`` file with header ``columns`` that holds the sentences: ``text_column``,
    else the only column, else ``text``."""
    column = text_column or (columns[0] if len(columns) == 1 else "text")
    if not text_column and len(columns) == 1 and len(column.split()) >= HEADER_WORDS:
        # a file without a header: its first sentence would be taken for the column's name, and never trained on
        raise DataError(f"{path}: the header {column!r:.60} reads like a sentence (a .csv/.tsv's first line names its "
                        "columns and is not trained on): add a header line (e.g. text), or, one sentence per line, "
                        "name the file .txt.")
    if column not in columns:
        raise DataError(f"{path}: no column {column!r}; columns are {columns}. {column_fix(text_column)}")
    return column


def check_table_head(path: Path, text: str, text_column: str | None, sentences: bool = True) -> None:
    """A ``.csv``/``.tsv`` file's start ``text``, read as the whole file is (:func:`~hf_cse.files.table_records`):
    its header names the text column (:func:`table_text_column`; ``sentences=False``: a file of pair rows, whose
    columns are named otherwise) and its rows have the header's number of fields, the last one too where ``text`` is
    the whole file (else it may be cut). Nothing to check in a file of another kind."""
    text = without_cut_line(path, text)  # a header longer than the head: no column names to check
    if path.suffix.lower() not in TABLE_SUFFIXES or not text.strip():
        return
    header, records = table_records(io.StringIO(text, newline=""), path, complete=path.stat().st_size < HEAD_BYTES)
    if sentences:
        table_text_column(path, header, text_column)
    for _ in records:
        pass


def no_sentences_error(path: Path) -> DataError:
    return DataError(f"{path} contains no sentences (empty or blank lines only).")


#: separators a .csv may have been written with instead of commas (a spreadsheet in a decimal-comma locale: ";")
OTHER_SEPARATORS = {";": "semicolons", "\t": "tabs", "|": "vertical bars"}
#: how many of a file's first non-blank lines :func:`check_layout` looks at
LAYOUT_LINES = 20


def _is_json_object(line: str) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:
        return False


def check_layout(path: Path, text: str) -> None:
    """Refuse a file whose first lines show it is not laid out as its name says it is read, where training would
    go on, on nonsense: JSON lines in a plain text file (``.txt``, ``.ndjson``...; every line, braces and field
    names included, would be a sentence), tab-separated columns in one (:func:`_check_no_tab_columns`), or a
    ``.csv`` separated by semicolons, tabs or bars (read as one column, so every whole line, its other fields
    included, would be a sentence). ``text``: the file's text, or its start."""
    lines = [line for line in text[:HEAD_BYTES].splitlines() if line.strip()][:LAYOUT_LINES]
    suffix = path.suffix.lower()
    if not lines or suffix in JSON_SUFFIXES:
        return
    if suffix not in TABLE_SUFFIXES:
        kind = suffix or "file without suffix"
        if all(map(_is_json_object, lines[:5])):
            raise DataError(f"{path} holds JSON objects ({lines[0]!r:.40}...), but a {kind} is read as plain text: "
                            "the JSON itself would be trained on. Name it .jsonl (text_column picks the field; text "
                            "by default).")
        _check_no_tab_columns(path, kind, lines)
        _check_no_csv_header(path, kind, lines)
        return
    if is_tsv(path) or len(lines) < 2 or len(next(csv.reader(lines[:1]))) > 1:
        return
    for separator, name in OTHER_SEPARATORS.items():
        count = lines[0].count(separator)
        if count and all(line.count(separator) >= count for line in lines[1:]):
            rename = " or name it .tsv" if separator == "\t" else ""
            raise DataError(f"{path}: its header {lines[0]!r:.60} is one column with {name} in it, and so are its "
                            f"rows: a .csv is read as comma-separated, so every whole line would be a sentence. Save "
                            f"it comma-separated{rename}.")


def _check_no_tab_columns(path: Path, kind: str, lines: list[str]) -> None:
    """Refuse plain text whose ``lines`` (its first :data:`LAYOUT_LINES` non-blank lines) are tab-separated columns,
    ``id<TAB>sentence`` or ``sentence<TAB>label``: each line would be trained on whole, ids, labels and tabs included.

    The rule: at least two lines, and every one of them holds the same number (one or more) of tabs between its
    first and last character (tabs at either end are stripped off by the reader, so they are no columns). A
    corpus with a tab here and there, or with a varying number of them, is read as text. Tabs that belong to the
    sentences on every line pass as a ``.jsonl`` (``{"text": ...}`` per line) or a ``.csv`` with the header ``text``,
    where no tab splits anything."""
    counts = {line.strip().count("\t") for line in lines}
    if len(lines) < 2 or len(counts) != 1 or 0 in counts:
        return
    tabs = counts.pop()
    fields = lines[0].strip().split("\t")
    shown = " | ".join(repr(field[:16] + ("..." if len(field) > 16 else "")) for field in fields[:3])
    shown += " | ..." * (len(fields) > 3)
    sentence = max(range(len(fields)), key=lambda i: len(fields[i].split())) + 1  # the field with the most words
    raise DataError(f"{path}: each of its first {len(lines)} lines holds {tabs} tab{'s' * (tabs > 1)} (the first: "
                    f"{shown}): columns, which a {kind} trains on whole. Use a .tsv with a header and text_column, "
                    f"or keep the sentences (cut -f{sentence} {path.name}); tabs inside sentences: "
                    "a .jsonl.")


#: a table's column name: a word of letters, digits and underscores (``id``, ``sentence1``), not a sentence's start
COLUMN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _check_no_csv_header(path: Path, kind: str, lines: list[str]) -> None:
    """Refuse plain text that is a CSV table: its first line a header of two or more column names (``id,sentence``)
    and each line after it (of the first :data:`LAYOUT_LINES`) as many comma-separated fields: the header and each
    row's other fields (``0,``, a label) would be trained on as sentences. A sentence does not start as a header
    does, so a corpus with commas is read as text."""
    header = [name.strip() for name in next(csv.reader(lines[:1]))]
    if len(lines) < 2 or len(header) < 2 or not all(COLUMN_NAME.fullmatch(name) for name in header):
        return
    if all(len(row) == len(header) for row in csv.reader(lines[1:])):
        raise DataError(f"{path}: its first line {lines[0]!r:.60} is a CSV header and the lines after it have "
                        f"{len(header)} comma-separated fields each, but a {kind} is read as plain text: the header "
                        "and every field would be trained on. Name it .csv (text_column picks the sentence column).")


def _json_records(path: Path, column: str) -> list[tuple[str, Any]]:
    """``(where, record)`` of a JSON-lines file (``line N``), or of a ``.json`` file holding one list of records
    (``record N``); a file that is one JSON document holding its records refused (:func:`_check_not_one_document`)."""
    text = read_text(path, "train_file")
    if path.suffix.lower() == ".json" and text.lstrip().startswith("["):
        try:
            return [(f"record {n}", record) for n, record in enumerate(json.loads(text), 1)]
        except json.JSONDecodeError as err:
            raise DataError(f"{path}: not valid JSON ({err.msg} at line {err.lineno}).") from None
    _check_not_one_document(path, text, column)
    return _json_lines(path, text)


def _check_not_one_document(path: Path, text: str, column: str) -> None:
    """Refuse a file that is one JSON object holding the records (``{"data": [{"text": ...}, ...]}``), written over
    several lines or on one line without the ``column`` field: read line by line it would be said to be invalid JSON,
    or a record without the field. ``text`` may be the file's start only (a pretty-printed object is then known by its
    first line, a lone ``{``)."""
    lines = text.strip().splitlines()
    if not lines or not lines[0].startswith("{"):
        return
    try:
        whole = json.loads(text)
    except json.JSONDecodeError:
        whole = None
    if not isinstance(whole, dict):
        if lines[0].strip() == "{":  # an object over several lines, cut or broken: no record starts with a bare {
            raise DataError(f"{path} holds one JSON object over several lines, not records: give a .jsonl file of "
                            "one object per line, or a .json file holding one list of objects.")
        return
    lists = [key for key, value in whole.items() if isinstance(value, list)]
    if len(lines) == 1 and (column in whole or not lists):
        return  # a JSON-lines file of one record
    inside = f" (its records may be the list under {lists[0]!r})" if lists else ""
    spread = "over several lines" if len(lines) > 1 else f"without a {column!r} field"
    raise DataError(f"{path} holds one JSON object {spread}, with the keys {sorted(whole)[:5]}{inside}, not records: "
                    "give a .jsonl file of one object per line, or a .json file holding one list of objects.")


def _json_lines(path: Path, text: str) -> list[tuple[str, Any]]:
    """``(line N, record)`` of each non-blank line of ``text``, JSON lines."""
    records = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                records.append((f"line {lineno}", json.loads(line)))
            except json.JSONDecodeError as err:
                raise DataError(f"{path}: line {lineno} is not valid JSON ({err.msg}); give one JSON object per "
                                "line, or a .json file holding one list of objects.") from None
    return records


#: JSON's names of the kinds of values (a record that is no object is said by its kind)
JSON_KINDS = {dict: "object", list: "list", str: "string", bool: "boolean", int: "number", float: "number",
              type(None): "null"}


def json_record_fault(record: Any, column: str) -> str | None:
    """What is wrong with one JSON-lines ``record``, in the words that follow ``line N`` ("is a JSON list, ...",
    ": field ... holds int 5, ..."), or None: an object whose ``column`` holds a string or null, or is missing (which
    a reader of the whole file refuses, a stream drops)."""
    if not isinstance(record, dict):
        return f" is a JSON {JSON_KINDS.get(type(record), 'value')}, not an object with a {column!r} field"
    value = record.get(column)
    if value is not None and not isinstance(value, str):
        return f": field {column!r} holds {type(value).__name__} {value!r:.40}, not a sentence (a string)"
    return None


def _sentence_of(record: Any, text_column: str | None, path: Path, where: str) -> str:
    """The ``text_column`` (default ``text``) string of one JSON record ("" for null), or one line naming what is
    wrong with it and ``where`` it is (``line N``, ``record N``)."""
    column = text_column or "text"
    fault = json_record_fault(record, column)
    if fault:
        raise DataError(f"{path}: {where}{fault}.")
    if column not in record:
        raise DataError(f"{path}: {where} has no field {column!r}; its fields are {sorted(record)}. "
                        f"{column_fix(text_column)}")
    return record[column] or ""


def read_json_sentences(path: Path, text_column: str | None = None) -> list[str]:
    """The ``text_column`` (default ``text``) strings of a JSON-lines / JSON-list file; null or blank values are
    dropped like blank lines, anything else that is not a string is refused with its line."""
    records = _json_records(path, text_column or "text")
    return [_sentence_of(record, text_column, path, where) for where, record in records]


def check_json_head(path: Path, text: str, text_column: str | None) -> None:
    """:func:`read_json_sentences`' checks on the whole records of ``text``, the start of a JSON-lines file that is
    streamed: a stream reads a record without the field as null and drops it without a word (and a JSON list is
    read whole by any reader). A record longer than the head is left to the reader. Nothing to check in a file of
    another kind."""
    if path.suffix.lower() not in JSON_SUFFIXES or text.lstrip().startswith("["):
        return
    _check_not_one_document(path, text, text_column or "text")
    for where, record in _json_lines(path, without_cut_line(path, text)):
        _sentence_of(record, text_column, path, where)


def is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def check_not_numbers(texts: Iterable[Any], source: str, column: str | None = None, columns: list[str] | None = None,
                      head: bool = False, warn: bool = True) -> None:
    """The rule of training text stored as numbers (``"12"``: a CSV's cells, JSON strings, a data set's string
    column), whatever it is read from: each would be trained on as a "sentence", most likely the wrong column or
    file. Refused where every non-blank text is a number, said in one warning where most are (``warn`` False: refused
    only, the reader that follows warns). ``column`` (of ``columns``): the text column; None: a plain text file's
    lines. ``head``: ``texts`` are a stream's first rows."""
    filled = numbers = 0
    for text in texts:
        if isinstance(text, str) and text.strip():
            filled += 1
            numbers += is_number(text)
    if not filled or numbers * 2 <= filled or (numbers < filled and not warn):
        return
    where, rows = (f"column {column!r}", "values") if column else ("its lines", "lines")
    if numbers == filled:
        verb, first = "holds" if column else "hold", f" (its first {filled} {rows})" if head else ""
        shown = f" (columns: {columns})" if columns else ""
        fix = f"pass text_column NAME of the sentence column{shown}" if column else "give a file of sentences"
        raise DataError(f"{source}: {where} {verb} only numbers, not sentences{first}; {fix}.")
    logger.warning("%s: %d of the %s%d rows of %s are numbers, not sentences; they are trained on as text (check %s)",
                   source, numbers, "first " if head else "", filled, where,
                   "text_column and the file" if column else "the file")


#: bytes :func:`find_unreadable_line` reads at a time
SCAN_BYTES = 1 << 20


def find_unreadable_line(path: Path) -> tuple[int, str] | None:
    """The first line of ``path`` that is not UTF-8: its number and what is wrong with it; None when every line
    reads. For a file that failed while it was streamed, whose reader says neither line nor file (a JSON-lines
    file's lines are checked as it is read: :func:`hf_cse.stream_rows.json_lines_stream`). Reads the file once, up to
    that line, in blocks, decoding them in C."""
    lineno, carry, first = 1, b"", True
    with path.open("rb") as fh:
        while True:
            block = fh.read(SCAN_BYTES)
            data = carry + block
            cut = data.rfind(b"\n") + 1 if block else len(data)  # whole lines, but for the file's last one
            if not cut:
                if not data:
                    return None
                carry = data  # a line longer than a block
                continue
            data, carry = data[:cut], data[cut:]
            try:
                data.decode("utf-8-sig" if first else "utf-8")
            except UnicodeDecodeError as err:
                return lineno + data.count(b"\n", 0, err.start), f"not valid UTF-8 ({err.reason})"
            first = False
            lineno += data.count(b"\n")


#: words of a column's name that say it holds no sentence but an identifier or a label (MNLI's ``pairID``, SNLI's
#: ``gold_label``): never a text column left unread
NOT_TEXT_WORDS = frozenset({"id", "ids", "idx", "uid", "guid", "key", "label", "labels"})


def names_a_label(name: str) -> bool:
    """Whether a column's name says it holds an identifier or a label (:data:`NOT_TEXT_WORDS`, as words of
    ``pairID``, ``gold_label``)."""
    return bool(NOT_TEXT_WORDS & {w.lower() for w in re.findall(r"[A-Z]+(?![a-z])|[A-Z]?[a-z0-9]+", name)})


def unread_text_columns_of(features: Any, read: Iterable[str], rows: Iterable[Mapping] = ()) -> list[str]:
    """The string columns of a data set's ``features`` (its column -> type) outside ``read``, but for those named as
    identifiers or labels (:func:`names_a_label`) and, given its first ``rows`` (a CSV's columns are read as strings
    all), those holding numbers only there (scores); [] where the types are unknown."""
    if not isinstance(features, Mapping):
        return []
    read, rows = set(read), list(rows)

    def is_text(name: str, feature) -> bool:
        if getattr(feature, "dtype", None) not in ("string", "large_string"):
            return False
        filled = [value for row in rows for value in [row.get(name)] if isinstance(value, str) and value.strip()]
        return not (filled and all(map(is_number, filled)))

    return [name for name, feature in features.items()
            if name not in read and is_text(name, feature) and not names_a_label(name)]


#: rows of a data set whose values tell a column of numbers stored as strings (:func:`warn_unread_columns`)
UNREAD_HEAD_ROWS = 8


def warn_unread_columns(ds, column: str, source: str) -> None:
    """One warning where sentences are read from ``column`` of the data set ``ds`` (of ``source``), and its other
    string columns (:func:`unread_text_columns_of`, told by their types and first rows) are left out: a file of pairs
    or triplets read for sentences trains on one of its columns alone. Names them and the fields that read them:
    pair_column (a positive), negative_column (a hard negative)."""
    features = getattr(ds, "features", None)
    if not isinstance(features, Mapping) or not set(features) - {column}:
        return
    unread = unread_text_columns_of(features, [column], ds.take(UNREAD_HEAD_ROWS))
    if unread:
        them = "it" if len(unread) == 1 else "them"
        logger.warning("%s: %s %s (strings) %s not read: the run trains on the sentences of text_column %r alone. "
                       "For pairs, name the positive's column as pair_column (a hard negative's as negative_column); "
                       "else remove %s.", source, "column" if len(unread) == 1 else "columns", ", ".join(unread),
                       "is" if len(unread) == 1 else "are", column, them)
