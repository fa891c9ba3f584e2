"""Lists of numbers given as one value (``"384,256,128"``, the command line's form, or a list): the one home of the
rules that read them, with no torch, so that the command line's early checks (:mod:`hf_cse.cli.entry_points`) refuse
a bad list before the training stack is imported, in the words the library uses for it later.

:mod:`hf_cse.matryoshka` reads ``matryoshka_dims`` / ``matryoshka_weights`` with :func:`parse_int_list` /
:func:`parse_float_list`; the evaluation's ``truncate_dims`` is :func:`parse_truncate_dims`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .checks import InputError
from .errors import CSEError

#: the flags' and config fields' names of Matryoshka training (one home: the config, the export and the card read them)
DIMS_FIELD, WEIGHTS_FIELD = "matryoshka_dims", "matryoshka_weights"
#: the evaluation's list of embedding sizes to cut to
TRUNCATE_DIMS_FIELD = "truncate_dims"


def parse_int_list(value: Any, name: str = DIMS_FIELD) -> list[int] | None:
    """``"384,256,128"`` (the command line's form), ``[384, 256, 128]`` or None -> a list of ints (or None)."""
    return _parse_list(value, name, int)


def parse_float_list(value: Any, name: str = WEIGHTS_FIELD) -> list[float] | None:
    return _parse_list(value, name, float)


def _parse_list(value: Any, name: str, kind: type) -> list | None:
    if value is None:
        return None
    items = value.replace(",", " ").split() if isinstance(value, str) else value
    try:
        if isinstance(items, str | bytes) or not isinstance(items, Sequence):
            raise TypeError
        out = []
        for item in items:
            if isinstance(item, bool) or (kind is int and isinstance(item, float) and not item.is_integer()):
                raise TypeError
            out.append(kind(item))
    except (TypeError, ValueError):
        raise CSEError(f"{name} must be a comma-separated list of {kind.__name__}s (e.g. 384,256,128,64), "
                       f"got {value!r}.") from None
    return out


def parse_truncate_dims(value: str | Sequence[int] | None) -> list[int]:
    """``"256,128,64"`` (or ``"256 128 64"``, ``[256, 128, 64]``) -> ``[256, 128, 64]`` (largest first); None ->
    ``[]`` (no cut sizes). A bad list, or one that names no dimension (``""``, ``","``), is one :class:`InputError`
    line."""
    try:
        dims = parse_int_list(value, TRUNCATE_DIMS_FIELD)
    except ValueError as err:
        raise InputError(str(err)) from None
    if dims is None:
        return []
    if not dims:
        raise InputError(f"{TRUNCATE_DIMS_FIELD} {value!r} names no dimension; give one or more distinct dimensions "
                         ">= 1, e.g. 256,128,64, or leave it out to score the full embeddings only.")
    if any(d < 1 for d in dims) or len(set(dims)) != len(dims):
        raise InputError(f"{TRUNCATE_DIMS_FIELD} {value!r}: give distinct dimensions >= 1, e.g. 256,128,64.")
    return sorted(dims, reverse=True)
