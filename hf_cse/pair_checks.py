"""Pair and triplet data read from a ``.csv`` / ``.tsv`` file or a data set, (anchor, positive[, hard negative]) per
row, as supervised SimCSE's NLI triplets: where its rows come from, the columns of its views and the checks of its
rows, in a module that imports nothing heavy, so that the training command makes them from a small file before the
training stack is imported (:func:`check_pair_file_start`); :func:`hf_cse.data.load_pair_dataset` reads the rows."""

from __future__ import annotations

import io
import logging
from pathlib import Path
from typing import Any

from .files import HEAD_BYTES, DataError, check_train_file, read_head, table_records, without_cut_line
from .missing_markers import find_missing_markers
from .text_files import TABLE_SUFFIXES, check_layout, is_number

#: the data readers' logger (their warnings are the data module's)
logger = logging.getLogger("hf_cse.data")


def is_empty_cell(cell: Any) -> bool:
    """A pair / triplet row's cell without text: missing (None) or blank."""
    return cell is None or not str(cell).strip()


def _rows_shown(rows: list[int]) -> str:
    return ", ".join(map(str, rows[:5])) + (f" and {len(rows) - 5} more" if len(rows) > 5 else "")


def check_pair_rows(rows: list[dict[str, Any]], columns: list[str], wanted: dict[str, str], source: str,
                    head: bool = False, warn: bool = True) -> None:
    """Every wanted column exists, no cell of it is empty or a missing value written out (``NaN`` in a notable share
    of its rows: :func:`~hf_cse.missing_markers.find_missing_markers`; one line naming the rows), and each view differs
    from the one before it (:func:`_check_views_differ`); ``head``: ``rows`` are a stream's first rows; ``warn``
    False: refusals only (the reader that follows warns)."""
    for flag, column in wanted.items():
        if column not in columns:
            raise DataError(f"{source}: no column {column!r} for {flag}; columns are {columns}. Pass {flag} NAME.")
    for flag, column in wanted.items():
        empty = [i for i, row in enumerate(rows, 1) if is_empty_cell(row[column])]
        if empty:
            raise DataError(f"{source}: {len(empty)} row(s) with an empty {column!r} cell ({flag}), data rows "
                            f"{_rows_shown(empty)}. Every row needs all its texts: remove or fill those rows.")
    for flag, column in wanted.items():  # "NaN" written for an empty cell (df.astype(str)): an empty cell too
        markers = find_missing_markers(row[column] for row in rows)[0]
        missing = [i for i, row in enumerate(rows, 1) if str(row[column]).strip() in markers]
        if missing:
            spelled = ", ".join(map(repr, markers))
            raise DataError(f"{source}: {len(missing)} row(s) whose {column!r} cell ({flag}) is {spelled}, how "
                            f"pandas writes a missing value, not a text; data rows {_rows_shown(missing)}. Every row "
                            "needs all its texts: remove or fill those rows.")
    for flag, column in wanted.items():  # a label column named by mistake: (sentence, "1") pairs trained on
        values = [row[column] for row in rows]
        odd = next((value for value in values if not isinstance(value, str)), None)
        what = f"{type(odd).__name__} values ({odd!r:.30})" if odd is not None else "only numbers"
        if odd is not None or (values and all(map(is_number, values))):
            raise DataError(f"{source}: column {column!r} ({flag}) holds {what}, not sentences; pass {flag} NAME "
                            f"of a text column (columns: {columns}).")
    _check_views_differ(rows, columns, wanted, source, head, warn)


def _check_views_differ(rows: list[dict[str, Any]], columns: list[str], wanted: dict[str, str], source: str,
                        head: bool, warn: bool = True) -> None:
    """A positive equal to its anchor (or a negative to its positive) on every row is refused: almost surely a wrong
    column (a copy of the other), which trains on one text twice; on most rows, said in one warning."""
    views, rows_read = list(wanted.items()), f"{'its first' if head else 'all'} {len(rows)} rows"
    for (flag, column), (other_flag, other) in zip(views, views[1:]):  # anchor-positive, positive-negative
        same = sum(str(row[column]).strip() == str(row[other]).strip() for row in rows)
        said = f"{source}: column {other!r} ({other_flag}) equals column {column!r} ({flag}) on"
        if rows and same == len(rows):
            raise DataError(f"{said} {rows_read}: almost surely a wrong column. Pass {other_flag} NAME of the "
                            f"column of other text (columns: {columns}).")
        if warn and same * 2 > len(rows):
            logger.warning("%s %d of %s, which train on one text twice; check %s", said, same, rows_read, other_flag)


def pair_columns(text_column: str | None, pair_column: str, negative_column: str | None) -> dict[str, str]:
    """The flag -> column mapping of pair / triplet data, in view order (anchor, positive[, negative])."""
    wanted = {"text_column": text_column or "text", "pair_column": pair_column}
    if negative_column:
        wanted["negative_column"] = negative_column
    columns = list(wanted.values())
    shared = [flag for flag, column in wanted.items() if columns.count(column) > 1]
    if shared:  # a view that is a copy of another: a positive equal to its anchor, or a negative to its positive
        raise DataError(f"{' and '.join(shared)} name the same column ({wanted[shared[0]]!r}): each view of a row "
                        "needs its own column.")
    return wanted


def check_pair_source(train_file: str | None, dataset_name: str | None) -> Path | None:
    """Where pair / triplet rows are read from: a ``.csv`` / ``.tsv`` ``train_file`` (returned) or a data set (None)."""
    if train_file and dataset_name:
        raise DataError("Give either train_file or dataset_name, not both.")
    if not train_file and not dataset_name:
        raise DataError("pair_column needs pair data: train_file a .csv/.tsv file (or dataset_name) with "
                        "the anchor in text_column and the positive in pair_column.")
    if dataset_name:
        return None
    path = check_train_file(train_file, wanted="")
    if path.suffix.lower() not in TABLE_SUFFIXES:
        raise DataError(f"pair_column needs a .csv or .tsv file with named columns; got {path.name}.")
    return path


def check_pair_file_start(train_file: str | None, dataset_name: str | None, text_column: str | None,
                          pair_column: str, negative_column: str | None) -> None:
    """The checks of pair / triplet data that its source and the first 64 KiB of its file answer, as
    :func:`hf_cse.data.load_pair_dataset` makes them (the source, the views' columns, a ``.csv`` separated otherwise,
    the header; every row where the head is the whole file): made before the training stack is imported, so that
    these mistakes cost no seconds. The reader checks the whole file again."""
    path = check_pair_source(train_file, dataset_name)
    wanted = pair_columns(text_column, pair_column, negative_column)
    if path is None:  # a data set: read by the command
        return
    text = read_head(path, "train_file")
    check_layout(path, text)  # a .csv separated by semicolons: one column
    whole = path.stat().st_size < HEAD_BYTES
    columns, records = table_records(io.StringIO(without_cut_line(path, text), newline=""), path, complete=whole)
    check_pair_rows([], columns, wanted, str(path))  # a missing column, before any row is read
    rows = [record for _, record in records]
    if whole:
        check_pair_rows(rows, columns, wanted, str(path), warn=False)
