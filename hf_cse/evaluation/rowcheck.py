"""Checked reading of SentEval's rows: a malformed row fails with one :class:`SentEvalDataError` that names the
file and the line, instead of being read with shifted columns, scored as nan, or ending in an IndexError.

Line numbers are 1-based lines of the file as a text editor shows them (a header counts as line 1).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

from ..errors import CSEError

FIX = "fix or remove that line, or get the file again with SentEval's data/downstream/get_transfer_data.bash"


class SentEvalDataError(CSEError, FileNotFoundError):
    """A task's data file is missing, malformed or too small for its protocol; the message names the task or file
    (and line) and the fix.

    A ``FileNotFoundError`` for a missing file and a ``ValueError`` for a malformed one, so callers catching either
    see it."""


#: the settings a message about where SentEval's data is read from names, as the evaluation calls them (run_eval's
#: fields; :func:`hf_cse.evaluation.runner.evaluate` takes them as ``data_dir`` and ``source``)
DATA_SETTINGS = ("senteval_data_dir", "senteval_source")
#: a training run's name of ``senteval_source`` (its dev data: ContrastiveTrainer's and run_unsup's eval_source)
TRAINING_SOURCE = "eval_source"


def in_training_terms(err: SentEvalDataError) -> SentEvalDataError:
    """``err`` as a training run words it: the setting that chooses the source is its ``eval_source``, not the
    evaluation's ``senteval_source`` (so the command line prints each command's own flag)."""
    source = DATA_SETTINGS[1]
    if source not in str(err):
        return err
    worded = type(err)(str(err).replace(source, TRAINING_SOURCE),
                       fields=[TRAINING_SOURCE if name == source else name for name in err.fields])
    worded.__cause__ = err.__cause__
    return worded


def row_error(path: Path | str, lineno: int, problem: str) -> SentEvalDataError:
    return SentEvalDataError(f"{path}, line {lineno}: {problem}; {FIX}.")


def columns(path: Path | str, lineno: int, line: str, names: Sequence[str], sep: str = "\t") -> list[str]:
    """``line`` split on ``sep``; exactly one column per name (an extra column would shift every later one)."""
    cols = line.split(sep)
    if len(cols) != len(names):
        what = "tab-separated" if sep == "\t" else f"{sep!r}-separated"
        raise row_error(path, lineno, f"expected {len(names)} {what} columns ({', '.join(names)}), found {len(cols)}")
    return cols


def sentence(path: Path | str, lineno: int, text: str, name: str = "sentence") -> str:
    """The sentence, which must hold at least one non-blank character."""
    if not text.split():
        raise row_error(path, lineno, f"{name} is empty")
    return text


def score(path: Path | str, lineno: int, text: str, low: float, high: float) -> float:
    """A gold similarity score: a finite number in ``[low, high]``."""
    try:
        value = float(text)
    except ValueError:
        raise row_error(path, lineno, f"gold score {text.strip()!r} is not a number") from None
    if not math.isfinite(value):
        raise row_error(path, lineno, f"gold score {text.strip()!r} is not a finite number")
    if not low <= value <= high:
        raise row_error(path, lineno, f"gold score {value:g} is outside the task's range {low:g}-{high:g}")
    return value


def label(path: Path | str, lineno: int, text: str, allowed: Sequence[str]) -> int:
    """The index of ``text`` (stripped) in ``allowed``."""
    value = text.strip()
    if value not in allowed:
        raise row_error(path, lineno, f"label {value!r} is not one of {', '.join(allowed)}")
    return list(allowed).index(value)
