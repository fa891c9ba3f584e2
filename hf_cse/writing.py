"""Writing result files so that no reader, and no crash, ever sees half of one; and values as JSON holds them.

Every file hf_cse writes for a user (``results.json``, ``training_info.json``, the run record, the model card, the
plots) goes through :func:`write_text_atomic` / :func:`write_json_atomic` / :func:`replace_atomically`: it is
written beside its place under a hidden ``.<name>.partial-<pid>`` name and renamed into place, so the folder holds
the old file or the new one, never a cut-short one.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any


def json_safe(value: Any) -> Any:
    """``value`` as JSON holds it: mappings with string keys, tuples as lists, numpy arrays and scalars as Python
    numbers, non-finite floats as ``None`` (JSON has no NaN), paths and any other object as their ``str``."""
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if value is None or isinstance(value, (bool, str, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    tolist = getattr(value, "tolist", None)  # numpy arrays and scalars, torch tensors
    if callable(tolist):
        return json_safe(tolist())
    return str(value)


def partial_path(path: Path) -> Path:
    """The hidden name ``path`` is written under before it is renamed into place (one per process)."""
    return path.with_name(f".{path.name}.partial-{os.getpid()}")


def replace_atomically(path: str | Path, write: Callable[[Path], Any]) -> Path:
    """Call ``write(partial)`` to write the file's content to a partial name beside ``path``, then rename it into
    place (creating the parent folder). A failure in ``write`` removes the partial file and leaves ``path`` as it
    was."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = partial_path(path)
    try:
        write(partial)
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
    return path


def write_text_atomic(path: str | Path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` through a partial file and a rename."""
    return replace_atomically(path, lambda partial: partial.write_text(text, encoding="utf-8"))


def write_json_atomic(path: str | Path, value: Any, sort_keys: bool = False) -> Path:
    """Write :func:`json_safe` of ``value`` as indented JSON to ``path`` through a partial file and a rename."""
    return write_text_atomic(path, json.dumps(json_safe(value), indent=2, sort_keys=sort_keys) + "\n")
