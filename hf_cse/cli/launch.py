"""How many processes did the launcher start (:func:`launched_processes`)? The evaluation and the export run in one
(:func:`check_one_process`). And did it start the processes it was asked for? ``accelerate launch --num_processes N``
without a multi-process config runs accelerate's simple launcher, which starts ONE process and, for N > 1, only sets
``MASTER_ADDR`` / ``MASTER_PORT`` for it (accelerate 1.15, ``prepare_simple_launcher_cmd_env``): on a CPU several
processes come from mpirun (``--mpirun_hostfile``) or a torchrun-based config, never from that launcher alone. The
run would then train one process with the batch of one, exit 0, and say nothing."""

from __future__ import annotations

import os
import re
import signal
import sys
from pathlib import Path

from ..checks import InputError
from ..errors import raised_on_every_process

#: set in each process by torchrun (WORLD_SIZE) or by an MPI launcher: processes really were started together
_STARTED_TOGETHER = ("WORLD_SIZE", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE")
#: every accelerate launcher sets these for the script it starts
_ACCELERATE_LAUNCHED = ("ACCELERATE_USE_CPU", "ACCELERATE_MIXED_PRECISION")


def launched_processes(env: dict[str, str] | None = None) -> int:
    """How many processes a launcher started together with this one (torchrun's ``WORLD_SIZE``, which accelerate's
    multi-process launchers set too, or an MPI launcher's size); 1 for a plain start."""
    env = os.environ if env is None else env
    for name in _STARTED_TOGETHER:
        value = env.get(name, "").strip()
        if value.isdigit() and int(value) > 1:
            return int(value)
    return 1


def check_one_process(prog: str, does: str, env: dict[str, str] | None = None) -> None:
    """Refuse, in one line from the main process (every process raises it alike), a command that works in one
    process (``does``: what it does, e.g. ``evaluates``) started as several: each would do the whole work into the
    same folder, and find its own sibling holding it as "another run"."""
    processes = launched_processes(env)
    if processes > 1:
        start = f"python {prog}" if prog.endswith(".py") else prog
        raise raised_on_every_process(InputError(
            f"{prog} {does} in one process: start it with `{start} ...`, not accelerate launch (or torchrun) with "
            f"{processes} processes."))


def _parent(name: str) -> bytes | None:
    """``/proc/<parent>/<name>`` (the launcher's environment or command line); None where it cannot be read."""
    try:
        with open(f"/proc/{os.getppid()}/{name}", "rb") as f:
            return f.read()
    except OSError:
        return None


def _requested_processes() -> str:
    """N of the launcher's ``--num_processes N`` where its command line can be read, else ``several``."""
    cmdline = (_parent("cmdline") or b"").replace(b"\0", b" ").decode(errors="replace")
    found = re.search(r"--num[_-]processes[= ](\d+)", cmdline)
    return found.group(1) if found else "several"


def check_requested_processes_started(env: dict[str, str] | None = None) -> None:
    """Refuse, in one line naming the command that works, a run that ``accelerate launch`` was asked to start as
    several processes but started alone (see the module docstring). ``MASTER_ADDR`` in the launcher's own
    environment (a cluster's setting, not the launcher's) is not taken for the sign."""
    env = os.environ if env is None else env
    if not all(k in env for k in _ACCELERATE_LAUNCHED) or "MASTER_ADDR" not in env:
        return
    if any(k in env for k in _STARTED_TOGETHER):
        return
    parent_env = _parent("environ")
    if parent_env is not None and b"\0MASTER_ADDR=" in b"\0" + parent_env:
        return
    raise InputError(
        f"accelerate launch was asked for {_requested_processes()} processes but started this one alone (on a CPU its "
        "plain launcher starts several only through mpirun); use `accelerate launch --config_file "
        "\"$(python -m hf_cse config cpu_2proc)\" run_unsup.py --use_cpu true ...` (docs/distributed.md).")


#: Linux's prctl option that sends the calling process a signal when its parent ends
_PR_SET_PDEATHSIG = 1


def torchrun_worker(env: dict[str, str] | None = None) -> bool:
    """Whether torchrun (accelerate's multi-process launchers too) started this process itself: its
    ``TORCHELASTIC_RUN_ID`` set and its parent the launcher (a process one of them starts inherits the variable)."""
    env = os.environ if env is None else env
    if not env.get("TORCHELASTIC_RUN_ID"):
        return False
    try:
        parent = Path(f"/proc/{os.getppid()}/cmdline").read_bytes().replace(b"\0", b" ")
    except OSError:  # no /proc (not Linux): the variable alone
        return True
    return any(name in parent for name in (b"torchrun", b"torch.distributed.run", b"torch/distributed/run",
                                           b"accelerate"))


def end_with_the_launcher(env: dict[str, str] | None = None) -> bool:
    """In a process torchrun started (:func:`torchrun_worker`), ask Linux for SIGTERM when the launcher ends: a
    launcher killed outright (``kill -9``, an out-of-memory killer) left its processes training on, detached, into the
    folder. SIGTERM stops them as a scheduler's does (the last complete checkpoint kept; the same command resumes).
    Whether it was asked (elsewhere, and on other systems: no)."""
    if not sys.platform.startswith("linux") or not torchrun_worker(env):
        return False
    import ctypes

    try:  # (no check that the parent is still there: in a container the launcher itself may be process 1)
        return ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM) == 0
    except (OSError, AttributeError):
        return False
