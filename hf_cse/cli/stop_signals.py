"""Ctrl-C and SIGTERM during a command: one line saying what was kept, in whichever order the two come.

A launcher (``accelerate launch``, torchrun) that gets Ctrl-C sends SIGTERM to its processes right after the SIGINT
they got from the terminal themselves, and a job scheduler stops a job with SIGTERM. SIGTERM's default ends a process
at once, so the line that says what was kept never printed. Inside :func:`stop_signals_as_interrupt` the first of
the two raises ``KeyboardInterrupt`` (:class:`Terminated` for SIGTERM), which the command turns into its line; a
SIGTERM after it is ignored (the process is ending already; the launcher kills it if it lingers) and a second Ctrl-C
interrupts again, as Python's own handler does. A signal the process was started ignoring (a background job of a
script ignores SIGINT) stays ignored.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class Terminated(KeyboardInterrupt):
    """SIGTERM: the command was stopped from outside (a launcher, a job scheduler, ``kill``)."""


@contextmanager
def stop_signals_as_interrupt() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():  # only the main thread may set handlers
        yield
        return
    received: list[int] = []

    def on_signal(signum, frame):
        if received and signum == signal.SIGTERM:
            return
        received.append(signum)
        raise Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()

    previous = {}
    for signum in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(signum) is not signal.SIG_IGN:
            previous[signum] = signal.signal(signum, on_signal)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
