"""Texts that spell a missing value: the words pandas writes for one and reads as one (``NaN``, ``None``, ``null``,
``N/A``...). A file of sentences exported with its missing values written out (``df.astype(str)``, a spreadsheet's
``#N/A``) holds them as text, and each would be trained on as a "sentence", all alike (false negatives of one
another). The readers keep every cell as the text it is (a sentence may be "NA"), so a few of them pass; a notable
share of a source's texts (:func:`find_missing_markers`) is an export's missing values, left out as empty cells are,
with one warning (:func:`left_out_markers`)."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable
from typing import Any

from .files import DataError

#: the data readers' logger (their warnings are the data module's)
logger = logging.getLogger("hf_cse.data")

#: the texts pandas reads as a missing value by default (its ``na_values``, but "": an empty cell, left out anyway)
MISSING_MARKERS = frozenset({
    "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND", "1.#QNAN", "<NA>", "N/A", "NA",
    "NULL", "NaN", "None", "n/a", "nan", "null",
})
#: the share of a source's non-blank texts, and the fewest rows, that markers must make to be taken for missing values
MARKER_SHARE = 0.1
MARKER_ROWS = 3


def find_missing_markers(texts: Iterable[Any]) -> tuple[Counter[str], int]:
    """The missing-value markers (:data:`MISSING_MARKERS`) that are whole texts of ``texts`` (stripped), with how many
    of each, where together they make at least :data:`MARKER_SHARE` of the non-blank texts and :data:`MARKER_ROWS`
    rows (else none: a marker here and there is a sentence); and the number of non-blank texts."""
    filled, found = 0, Counter()
    for text in texts:
        if isinstance(text, str) and text.strip():
            filled += 1
            if text.strip() in MISSING_MARKERS:
                found[text.strip()] += 1
    return (found if sum(found.values()) >= max(MARKER_ROWS, MARKER_SHARE * filled) else Counter()), filled


def left_out_markers(texts: Iterable[Any], source: str, column: str | None = None, head: bool = False,
                     warn: bool = True) -> Counter[str]:
    """The missing-value markers of ``texts`` to leave out as empty cells (:func:`find_missing_markers`), said in one
    warning naming them, their rows and the fix; a source of nothing but markers refused. ``column``: the text column
    of a table, of JSON records or of a data set; None: a plain text file's lines. ``head``: ``texts`` are a stream's
    first rows (the markers met later are left out too). ``warn`` False: refused only (the reader that follows
    says them)."""
    found, filled = find_missing_markers(texts)
    if not found:
        return found
    where = f"values of column {column!r}" if column else "lines"
    shown = ", ".join(f"{marker!r}" + (f" ({count})" * (len(found) > 1)) for marker, count in found.most_common())
    if sum(found.values()) == filled:
        fix = "pass text_column NAME of the sentence column" if column else "give a file of sentences"
        raise DataError(f"{source}: all its {'first ' if head else ''}{filled} {where} are missing values as pandas "
                        f"writes them ({shown}), not sentences; {fix}.")
    if not warn:
        return found
    later = " (and any more the stream meets)" if head else ""
    logger.warning("%s: %d of the %s%d %s are %s, which is how pandas writes a missing value, not a sentence: they "
                   "are left out%s, as empty cells are. Drop those rows, or save missing values as empty cells "
                   "(pandas' to_csv does, unless the column went through astype(str)).", source, sum(found.values()),
                   "first " if head else "", filled, where, shown, later)
    return found
