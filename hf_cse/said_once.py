"""Lines said once per process. The command line builds a run's config several times, and loading a model reads its
config more than once, so a warning given where a config is checked would otherwise repeat."""

from __future__ import annotations

from collections.abc import Hashable

#: the keys already said in this process (tests that count a line set it empty first)
_SAID: set[tuple[Hashable, ...]] = set()


def first_time(*key: Hashable) -> bool:
    """Whether ``key`` (what is said, then the values it is said of) is new in this process; it counts as said from
    now on."""
    if key in _SAID:
        return False
    _SAID.add(key)
    return True
