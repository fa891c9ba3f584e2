"""The hidden folder inside ``mteb_results_dir`` where mteb saves one evaluation's results until every task has run
(:func:`hf_cse.evaluation.mteb_tasks.run_mteb_tasks`), so that the results folder gets all of them or none: made
per process, moved into place at the end, removed on a failure or stop -- and, where the process was killed
(SIGKILL, out of memory) and could remove nothing, by the next evaluation into the same folder on the same machine."""

from __future__ import annotations

import errno
import logging
import os
import shutil
import socket
import tempfile
from pathlib import Path

logger = logging.getLogger(__name__)

#: the start of a staging folder's name; then the machine's name and the process id, so that a later evaluation can
#: tell a killed process's folder from a running one's (on another machine sharing the folder it cannot: left alone)
STAGING_PREFIX = ".hf_cse-mteb-staging-"


def _host() -> str:
    return socket.gethostname().replace("-", "_")  # "-" separates the name's parts


def make_staging_folder(results_dir: Path) -> Path:
    """A new staging folder of this process in ``results_dir``, after removing those of killed processes
    (:func:`remove_killed_staging`)."""
    remove_killed_staging(results_dir)
    return Path(tempfile.mkdtemp(prefix=f"{STAGING_PREFIX}{_host()}-{os.getpid()}-", dir=results_dir))


def _process_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError as err:
        return err.errno == errno.ESRCH  # EPERM: another user's process, alive
    return False


def remove_killed_staging(results_dir: Path) -> list[Path]:
    """Remove the staging folders in ``results_dir`` that processes of this machine left when they were killed (their
    process is gone): the partial results of an evaluation that never reached ``results_dir``, by its promise none
    of them. Folders of other machines, of running processes and of unknown form are left. Returns those removed."""
    removed = []
    for path in sorted(Path(results_dir).glob(f"{STAGING_PREFIX}*")):
        host_pid, _, _ = path.name[len(STAGING_PREFIX):].rpartition("-")
        host, _, pid = host_pid.rpartition("-")
        if path.is_dir() and not path.is_symlink() and host == _host() and pid.isdigit() and _process_gone(int(pid)):
            shutil.rmtree(path, ignore_errors=True)
            logger.info("removed %s, the staging folder of an MTEB evaluation killed before it finished (process %s): "
                        "its results never reached %s", path.name, pid, results_dir)
            removed.append(path)
    return removed


def move_staged_results(staging: Path, results_dir: Path) -> None:
    """Move what mteb's ``ResultCache(staging)`` saved to the same places under ``results_dir``, as mteb would have
    saved it there: a task's file and ``model_meta.json`` replace the one there, ``run_settings.jsonl`` is merged
    into it by mteb's own merge (each task, split and subset once); the rest of ``results_dir`` is left alone."""
    from ..seams import merge_mteb_run_settings

    for path in sorted(p for p in staging.rglob("*") if p.is_file()):
        target = results_dir / path.relative_to(staging)
        target.parent.mkdir(parents=True, exist_ok=True)
        if path.name == "run_settings.jsonl" and target.is_file():
            merge_mteb_run_settings(target, path)
        else:
            shutil.move(path, target)
