"""Ctrl-C and SIGTERM during a command: one line saying what was kept, in whichever order the two come.

A launcher (``accelerate launch``, torchrun) that gets Ctrl-C sends its processes that signal again, or SIGTERM, right
after the SIGINT they got from the terminal themselves, and a job scheduler stops a job with SIGTERM. SIGTERM's
default ends a process at once, and a second KeyboardInterrupt cuts the first one's handling short, so the line that
says what was kept did not always print. Inside :func:`stop_signals_as_interrupt` the first signal raises
``KeyboardInterrupt`` (:class:`Terminated` for SIGTERM), which the command turns into its line; a SIGTERM after it is
ignored (the process is ending already; the launcher kills it if it lingers), and so is a Ctrl-C within
:data:`REPEAT_GRACE_S`; a later Ctrl-C interrupts again, as Python's own handler does. A signal the process was
started ignoring (a background job of a script ignores SIGINT) stays ignored.

Once the command has said its line and ends (``ending(code)`` of the context, before a process of a launch runs its
exit handlers itself: :func:`hf_cse.distributed.leave_process_group_process`), a stop signal that is not one of those
ignored ends the process at once with that code, quietly: the launcher's SIGTERM to the survivor of a run whose other
process was killed raised :class:`Terminated` inside an exit handler, a traceback after the run's line.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from ..process_exit import exit_now

#: a Ctrl-C this soon after the first is the launcher forwarding the same one (torchrun sends its processes the
#: signal it got, which they got from the terminal already); a later one is the user's second Ctrl-C
REPEAT_GRACE_S = 2.0


class Terminated(KeyboardInterrupt):
    """SIGTERM: the command was stopped from outside (a launcher, a job scheduler, ``kill``)."""


@contextmanager
def stop_signals_as_interrupt() -> Iterator[Callable[[int], None]]:
    """Yields ``ending(code)``: to call once the command has said its line and the process ends with ``code``."""
    if threading.current_thread() is not threading.main_thread():  # only the main thread may set handlers
        yield lambda code: None
        return
    first: list[float] = []  # when the first stop signal came
    ending_code: list[int] = []  # the exit code, once the command has said its line

    def on_signal(signum, frame):
        if first and (signum == signal.SIGTERM or time.monotonic() - first[0] < REPEAT_GRACE_S):
            return  # stopping already: the launcher's forward of the same Ctrl-C, or its SIGTERM
        if ending_code:  # nothing is left to say or keep: raising here would be a traceback from an exit handler
            exit_now(ending_code[0])
        first[:] = [time.monotonic()]
        raise Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()

    previous = {}
    for signum in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(signum) is not signal.SIG_IGN:
            previous[signum] = signal.signal(signum, on_signal)
    try:
        yield lambda code: ending_code.append(code)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)

