"""Ending a process at once (``os._exit``) without losing what it printed: a process of a launch after its exit
handlers (:func:`hf_cse.distributed.leave_process_group_process`), and one stopped while it runs them
(:mod:`hf_cse.cli.stop_signals`)."""

from __future__ import annotations

import os
import sys


def exit_now(code: int) -> None:
    """Flush stdout and stderr and end the process with ``code``; the interpreter's finalization (and any exit
    handler not run yet) is skipped."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed or broken stream: nothing more can reach it
            pass
    os._exit(code)
