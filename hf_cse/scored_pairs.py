"""A file of scored sentence pairs (``eval_file``: two sentences and a similarity score a row) read into its three
columns, each row checked, and the rule of pairs a Spearman correlation can rank models by: in a module that imports
nothing heavy, so that the training command refuses a bad file before the training stack is imported
(:mod:`hf_cse.cli.entry_points`). :func:`hf_cse.evaluation.custom_dev.read_pair_file` reads it into ``STSPairs``.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from pathlib import Path

from .checks import InputError
from .files import read_text

#: the fewest scored pairs a dev set may hold: a Spearman over 2 is +-1 whatever the model (a few more: warned)
MIN_DEV_PAIRS = 3


def _delimiter(path: Path, first_line: str) -> str | None:
    """'\\t' for tab-separated files, None for comma-separated CSV."""
    return "\t" if path.suffix.lower() in (".tsv", ".txt") or "\t" in first_line else None


def _rows(path: Path) -> tuple[list[list[str]], str]:
    """The file's rows, and the fix of a row with another number of fields than the header's."""
    text = read_text(path, "eval_file")  # the training files' reader: BOM, compressed, binary, not UTF-8
    lines = text.splitlines()
    if not lines:
        raise InputError(f"eval_file {path} is empty; it needs scored sentence pairs (two sentences + a score).")
    if _delimiter(path, lines[0]) == "\t":  # no quoting: STS files hold unbalanced quote characters
        return [line.split("\t") for line in lines], "The file is split on every tab (no quoting): fix the row."
    return (list(csv.reader(io.StringIO(text, newline=""))),  # a quoted field keeps its line breaks
            'Quote fields that hold a comma ("Hello, said the boy."), or fix the row.')


def _column_index(column: str, header: list[str] | None, path: Path, flag: str) -> int:
    if header is None:
        return int(column)
    names = [h.strip() for h in header]
    if column not in names:
        raise InputError(f"{path}: no column {column!r} (set by {flag}); its header has: {', '.join(names)}. "
                         f"Pass {flag} with one of these names, or 0-based column numbers for a file without header.",
                         fields=(flag,))
    return names.index(column)


def read_scored_rows(path, sentence1_column: str = "sentence1", sentence2_column: str = "sentence2",
                     score_column: str = "score") -> tuple[list[str], list[str], list[float]]:
    """The first sentences, second sentences and scores of a CSV/TSV file of scored pairs
    (:mod:`hf_cse.evaluation.custom_dev` says how it is laid out); a malformed row is an :class:`InputError` naming
    the file and line. Blank lines are skipped."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"eval_file {path}: no such file.")
    columns = (sentence1_column, sentence2_column, score_column)
    numbered = [c.strip().isdigit() for c in columns]
    if any(numbered) and not all(numbered):
        raise InputError("eval_sentence1_column, eval_sentence2_column and eval_score_column must be all names "
                         f"(file with header) or all 0-based numbers (file without header); got {', '.join(columns)}.")
    rows, fix = _rows(path)
    header = None if all(numbered) else rows[0]
    flags = ("eval_sentence1_column", "eval_sentence2_column", "eval_score_column")
    i1, i2, i_score = (_column_index(c.strip(), header, path, f) for c, f in zip(columns, flags))
    a, b, y = [], [], []
    first = 1 if header is not None else 0
    for line_no, row in enumerate(rows[first:], start=first + 1):
        if not any(cell.strip() for cell in row):
            continue
        if header is not None and len(row) != len(header):  # an unquoted comma shifts the cells: the wrong pair
            raise InputError(f"{path}, line {line_no}: {len(row)} fields, the header has {len(header)}. {fix}")
        if len(row) <= max(i1, i2, i_score):
            raise InputError(f"{path}, line {line_no}: {len(row)} columns, but column {max(i1, i2, i_score)} "
                             "(0-based) is needed. Fix the row or the eval_*_column settings.")
        s1, s2, raw = row[i1].strip(), row[i2].strip(), row[i_score].strip()
        if not s1 or not s2:
            raise InputError(f"{path}, line {line_no}: empty sentence. Remove the row or fill it in.")
        try:
            score = float(raw)
        except ValueError:
            score = math.nan
        if not math.isfinite(score):
            raise InputError(f"{path}, line {line_no}: score {raw!r} is not a number (column {score_column}). "
                             "Fix the row, or point eval_score_column at the score column.")
        a.append(s1)
        b.append(s2)
        y.append(score)
    return a, b, y


def check_rankable(sentences1: Sequence[str], sentences2: Sequence[str], scores: Sequence[float],
                   source: str) -> None:
    """Pairs a Spearman correlation can rank models by: at least :data:`MIN_DEV_PAIRS` with different scores (over 2
    pairs it is +-1 whatever the model, and the trainer would keep checkpoints on it), and pairs of two different
    sentences (a sentence and itself have cosine 1 whatever the model: a Spearman over those ranks rounding
    noise)."""
    if len(scores) < MIN_DEV_PAIRS or len(set(scores)) < 2:
        raise InputError(f"{source}: {len(scores)} scored pair(s) with {len(set(scores))} distinct score(s); a "
                         f"Spearman correlation needs at least {MIN_DEV_PAIRS} pairs with different scores to rank "
                         "models by (over 2 it is +-1 whatever the model): add pairs.")
    if list(sentences1) == list(sentences2):
        raise InputError(f"{source}: the two sentences of every pair are the same, so every cosine is 1 whatever the "
                         "model and the score would rank rounding noise; eval_sentence1_column and "
                         "eval_sentence2_column must name the two different sentence columns.",
                         fields=("eval_sentence1_column", "eval_sentence2_column"))


def check_scored_pair_file(path, sentence1_column: str = "sentence1", sentence2_column: str = "sentence2",
                           score_column: str = "score") -> None:
    """An ``eval_file``'s rows (:func:`read_scored_rows`) and pairs (:func:`check_rankable`) checked as the reader
    checks them, from the file alone: before the training stack is imported."""
    check_rankable(*read_scored_rows(path, sentence1_column, sentence2_column, score_column), str(path))
