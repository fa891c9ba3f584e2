"""One owner per output folder: a training, evaluation or export run holds a lock on its output folder for its
lifetime, so a second run started into the same folder is refused in one line instead of mixing its files with the
first run's (or silently replacing its model).

The lock is a file beside the folder, ``.<name>.lock`` (beside, not inside: an export's folder is replaced as a whole
by a rename), holding the owner's pid, host, start time and command. It is held with ``flock``, which the kernel
releases whenever the process ends, ``SIGKILL`` included: a lock file that can be locked again is stale (its process
is gone), and the next run names that process in a log line and takes the lock over. Ownership is checked by the
lock, not by the pid written in the file, so neither a reused pid nor a clock makes a live run look dead.

Entry points mark their lifetime with :func:`releases_folder_locks`; :func:`hold_folder` takes a lock that is
released when the marked function returns or raises (or, at the latest, when the process ends). Under a
multi-process launch only the main process takes it (the others follow the main process, which owns the folder).
An entry point's folder that did not exist when it took the lock, and is still empty when it releases it (the
command was refused, or stopped, before writing anything there), is removed with it: a refusal leaves no folder it
made.
"""

from __future__ import annotations

import atexit
import functools
import json
import logging
import os
import socket
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from .checks import InputError

logger = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., Any])
# (lock file, open descriptor holding the flock, the first parent folder it created, the object that took it: None
# for an entry point, the folder locked where an entry point took the lock before it existed), innermost last
_held: list[tuple[Path, int, Path | None, object, Path | None]] = []


class FolderBusyError(InputError):
    """The output folder is owned by a run that is still going."""


def lock_file(folder) -> Path:
    """Where the lock of ``folder`` lives: ``.<name>.lock`` beside it (links and ``..`` resolved)."""
    folder = Path(folder).expanduser().resolve()
    return folder.parent / f".{folder.name or 'root'}.lock"


def _owner() -> dict[str, Any]:
    return {"pid": os.getpid(), "host": socket.gethostname(), "started": time.strftime("%Y-%m-%d %H:%M:%S"),
            "command": " ".join(sys.argv)[:200]}


def _read_owner(fd: int) -> dict[str, Any]:
    os.lseek(fd, 0, os.SEEK_SET)
    try:
        data = json.loads(os.read(fd, 4096).decode("utf-8", "replace") or "{}")
    except json.JSONDecodeError:
        return {}
    return data if isinstance(data, dict) else {}


def _describe(owner: dict[str, Any]) -> str:
    if not owner:
        return "a process that wrote no details"
    return f"process {owner.get('pid')} on {owner.get('host')}, started {owner.get('started')}"


def first_missing_folder(path: Path) -> Path | None:
    """The outermost folder of ``path`` (itself included) that does not exist yet: the first one
    ``path.mkdir(parents=True)`` would create (None when ``path`` exists)."""
    missing = None
    for parent in [path, *path.parents]:
        if parent.exists():
            break
        missing = parent
    return missing


def remove_made_folders(path: Path, made: Path | None) -> None:
    """Remove ``path`` and its parents up to ``made`` (from :func:`first_missing_folder`) while they are empty."""
    if made is None:
        return
    for parent in [path, *path.parents]:
        try:
            parent.rmdir()
        except OSError:
            break
        if parent == made:
            break


@contextmanager
def made_folders_removed_on_failure(path: Path, made: Path | None):
    """Within it, a failure (a refusal) removes the folders of ``path`` up to ``made`` while they are empty, and is
    raised as it is: the Python trainer's output folder, which transformers' ``Trainer`` makes as it is built."""
    try:
        yield
    except BaseException:
        remove_made_folders(path, made)
        raise


def hold_folder(folder, flag: str = "output_dir", owner: object = None) -> Path:
    """Take the lock of ``folder`` until the function marked with :func:`releases_folder_locks` ends; a folder
    locked by a running process raises :class:`FolderBusyError` naming it. Returns the lock file."""
    import fcntl

    path = lock_file(folder)
    created = first_missing_folder(path.parent)
    locked = Path(folder).expanduser().resolve()
    new = locked if owner is None and not locked.exists() else None  # an entry point's: removed again if left empty
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as err:
        # the lock lives beside the folder (an export is renamed into place whole), so the folder may be writable
        # while its parent is not (a volume mounted on a read-only root): a folder inside it has a writable parent
        fix = (f"the lock lives beside the folder, in {path.parent}: give a folder inside it instead (e.g. "
               f"{locked / 'run1'})" if locked.is_dir() and os.access(locked, os.W_OK)
               else "choose a folder you can write to")
        raise InputError(f"{flag} {folder}: cannot create its lock file {path} ({err.strerror}); {fix}.") from None
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = _read_owner(fd)
            os.close(fd)
            raise FolderBusyError(f"{flag} {folder} is in use by another run ({_describe(owner)}). Wait for it to "
                                  f"end, or choose another {flag}.") from None
        try:
            same_file = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same_file = False
        if same_file:
            break
        os.close(fd)  # the previous owner removed the file between our open and our lock: lock the new one
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    previous = _read_owner(fd)
    if previous:
        logger.warning("%s %s: taking over the stale lock %s of %s, which ended without releasing it (killed?)",
                       flag, folder, path, _describe(previous))
    os.ftruncate(fd, 0)
    os.lseek(fd, 0, os.SEEK_SET)
    os.write(fd, json.dumps(_owner()).encode("utf-8"))
    _held.append((path, fd, created, owner, new))
    return path


def _release_to(depth: int) -> None:
    while len(_held) > depth:
        path, fd, created, _, new = _held.pop()
        remove_made_folders(new, new)  # an entry point's folder that it made and left empty (module doc)
        try:
            path.unlink(missing_ok=True)  # before unlocking, so nobody locks a file that is about to go
        finally:
            os.close(fd)
        remove_made_folders(path.parent, created)  # the folders made for the lock, if empty


def _holder(folder) -> tuple[bool, object]:
    """Whether this process holds the lock of ``folder``, and the object that took it (None: an entry point)."""
    path = lock_file(folder)
    return next(((True, owner) for held, _, _, owner, _ in _held if held == path), (False, None))


def held_here(folder) -> bool:
    """Whether this process holds the lock of ``folder`` (an entry point's or a library job's, such as a trainer's)."""
    return _holder(folder)[0]


def claimed_by_command(folder) -> bool:
    """Whether an entry point of this process claimed ``folder`` (and applied the output-folder policy)."""
    held, owner = _holder(folder)
    return held and owner is None


@contextmanager
def folder_held(folder, owner: object, flag: str = "output_dir") -> Iterator[None]:
    """Hold the lock of ``folder`` for the ``with`` block on behalf of ``owner`` (a library job such as a trainer),
    unless an entry point of this process claimed it for its whole run; another owner in this process that holds it
    is refused as another process would be."""
    held, by = _holder(folder)
    if held and (by is None or by is owner):
        yield
        return
    if held:
        raise FolderBusyError(f"{flag} {folder} is in use by another run (another trainer of this process, still "
                              f"training or saving). Wait for it to end, or choose another {flag}.")
    depth = len(_held)
    hold_folder(folder, flag, owner)
    try:
        yield
    finally:
        _release_to(depth)


atexit.register(_release_to, 0)  # a lock still held when the interpreter ends normally is not left to look stale


def releases_folder_locks(fn: F) -> F:
    """Mark an entry point: the folder locks it takes (:func:`hold_folder`) are released when it returns or raises."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        depth = len(_held)
        try:
            return fn(*args, **kwargs)
        finally:
            _release_to(depth)

    return wrapper  # type: ignore[return-value]
