"""``run_unsup.py --preset NAME``: the papers' main settings (:data:`hf_cse.presets.PRESETS`, their one home) as
defaults of the command line.

A preset only supplies defaults: any flag given on the command line (or set by a ``--config`` file) wins. A preset is
a run description in the format of ``--config`` (:mod:`hf_cse.cli.run_config`: settings by flag name), checked as
one when it is applied (and every preset by ``tests/cli/test_run_config.py``).
"""

from __future__ import annotations

from ..errors import closest_name
from ..presets import PRESETS, unused_preset_values


def drop_unused_preset_values(preset: str | None, typed: set[str], loss: str, other_methods_flags: set[str],
                              *arg_objects) -> list[str]:
    """Unset (``None`` = the default) the preset's values that the chosen loss or method does not take
    (``other_methods_flags``: :func:`hf_cse.cli.arguments.method_only_flags` of the method), unless the user typed
    them (``typed``: the flags given on the command line), so ``--preset focal_infonce_bert --loss infonce`` drops the
    preset's ``m`` instead of failing on a flag nobody gave. Returns the dropped names."""
    if preset is None:
        return []
    unused = unused_preset_values(preset, loss, other_methods_flags)
    dropped = sorted(unused - typed)
    for args in arg_objects:
        for name in dropped:
            if hasattr(args, name):
                setattr(args, name, None)
    return dropped


def unknown_preset(name: str) -> str:
    """The refusal of a ``--preset`` that is none of :data:`PRESETS`, with the closest one."""
    close = closest_name(name, PRESETS)
    hint = f"did you mean {close!r}? " if close else ""
    return f"unknown --preset {name!r}; {hint}presets: {', '.join(sorted(PRESETS))}"
