"""Markdown building blocks of a model card: values as card text and tables."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any


def fmt(value: Any) -> str:
    """A value as card text (``None`` never reaches the card: it reads "not set")."""
    if value is None:
        return "not set"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (dict, list, tuple)):
        return "`" + json.dumps(value, default=str, sort_keys=True) + "`"
    if isinstance(value, str) and len(value) > 1 and Path(value).is_absolute():
        return f"local folder `{Path(value).name}`"  # machine paths say nothing to readers of the card
    text = str(value).replace("|", "\\|").replace("\n", " ")
    return text if text else "(empty)"


def table(header: tuple[str, ...], rows: list[tuple[Any, ...]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def kv_table(header: tuple[str, str], values: Mapping[str, Any], value_fmt: Callable[[Any], str] = fmt) -> str:
    """Two-column table of ``values`` sorted by key, keys in code font."""
    return table(header, [(f"`{k}`", value_fmt(v)) for k, v in sorted(values.items())])


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
