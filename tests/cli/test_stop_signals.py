"""Ctrl-C and SIGTERM during a command (hf_cse/cli/stop_signals.py): one line and the shell's exit code, also when a
launcher's SIGTERM follows the terminal's SIGINT while the process is still cleaning up."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
from helpers import answer_ctrl_c_as_in_a_terminal, hang_timeout

from hf_cse.cli.stop_signals import stop_signals_as_interrupt
from hf_cse.errors import CSEError

#: a command whose work waits, and whose clean-up after an interrupt takes a while (a real run's closes files)
STOPPABLE = """
import sys, time
from hf_cse.cli import run_cli
def main():
    try:
        print("working", flush=True)
        time.sleep(600)
    finally:
        print("cleaning up", flush=True)
        time.sleep(1.5)
        print("cleaned up", flush=True)
sys.exit(run_cli(main, "prog"))
"""


def _started() -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "HF_CSE_DEBUG"}
    proc = subprocess.Popen([sys.executable, "-c", STOPPABLE], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=answer_ctrl_c_as_in_a_terminal)
    assert proc.stdout.readline() == "working\n"
    return proc


@pytest.mark.slow
def test_sigterm_is_one_line_and_exit_code_143():
    proc = _started()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=hang_timeout(60))
    assert proc.returncode == 143, err
    assert err.strip().splitlines() == [
        "prog: stopped (SIGTERM, from a launcher, a job scheduler or kill); what was saved so far is kept."]


@pytest.mark.slow
@pytest.mark.parametrize("second", [signal.SIGTERM, signal.SIGINT], ids=["sigterm", "forwarded_sigint"])
def test_a_launchers_second_signal_right_after_ctrl_c_does_not_cut_the_line_short(second):
    """accelerate launch / torchrun answer Ctrl-C by sending its processes, which got SIGINT from the terminal
    already, SIGTERM or the same SIGINT again: SIGTERM ended the process mid clean-up, before its line, and the second
    SIGINT raised KeyboardInterrupt again, which cut the clean-up short (or, during the first one's handling, its
    line)."""
    proc = _started()
    proc.send_signal(signal.SIGINT)
    assert proc.stdout.readline() == "cleaning up\n"
    proc.send_signal(second)
    out, err = proc.communicate(timeout=hang_timeout(60))
    assert proc.returncode == 130, err
    assert out == "cleaned up\n"
    assert err.strip().splitlines() == ["prog: interrupted (Ctrl-C); what was saved so far is kept."]


def test_a_signal_ignored_from_the_start_stays_ignored_and_handlers_are_put_back():
    """A background job of a script starts with SIGINT ignored: the command must not start answering it."""
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    # SIGINT answered by Python as in a terminal, whatever the test process inherited (a background job ignores it)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        with stop_signals_as_interrupt():
            assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
            assert signal.getsignal(signal.SIGINT) is not signal.default_int_handler  # answered by the command
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, before[0])
        signal.signal(signal.SIGTERM, before[1])


@pytest.mark.parametrize(("first", "late", "code"), [(None, signal.SIGTERM, 1), (signal.SIGINT, signal.SIGINT, 130)],
                         ids=["launchers_sigterm_after_an_error", "second_ctrl_c"])
def test_a_stop_signal_while_a_launched_process_runs_its_exit_handlers_ends_it_quietly(first, late, code,
                                                                                        monkeypatch, capsys):
    """A 2-process run, one worker killed: the survivor said its line, then the launcher's SIGTERM reached it while
    it ran its exit handlers (hf_cse.distributed.leave_process_group_process), and the handler raised Terminated
    there: "Exception ignored in atexit callback ... Terminated" and a traceback after the run's line (a user's
    second Ctrl-C while they run raised KeyboardInterrupt there alike)."""
    import hf_cse.cli as cli
    import hf_cse.cli.stop_signals as stop_signals
    import hf_cse.distributed as distributed

    monkeypatch.delenv("HF_CSE_DEBUG", raising=False)
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setitem(sys.modules, "torch.distributed", sys.modules.get("torch.distributed", object()))
    ended = []

    def end_now(exit_code):  # os._exit: stands for the end of the process here
        ended.append(exit_code)
        raise SystemExit(exit_code)

    def exit_handlers(exit_code):  # the launcher stops this process while its exit handlers run
        os.kill(os.getpid(), late)
        pytest.fail("the signal did not end the process")

    monkeypatch.setattr(os, "_exit", end_now)
    monkeypatch.setattr(distributed, "leave_process_group_process", exit_handlers)
    def command():
        if first is None:
            raise CSEError("the run's own error")
        os.kill(os.getpid(), first)

    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        if first is not None:  # the launcher's forward of the first Ctrl-C is past (ignored: the test above)
            monkeypatch.setattr(stop_signals, "REPEAT_GRACE_S", 0.0)
        with pytest.raises(SystemExit) as exited:
            try:
                cli.run_cli(command, "prog")
            except KeyboardInterrupt as raised:  # as it was (and here it would end pytest)
                pytest.fail(f"{type(raised).__name__} raised in the exit handlers")
    finally:
        signal.signal(signal.SIGINT, before[0])
        signal.signal(signal.SIGTERM, before[1])
    assert exited.value.code == code and ended == [code]
    assert len(capsys.readouterr().err.strip().splitlines()) == 1  # the run's line, and nothing after it
