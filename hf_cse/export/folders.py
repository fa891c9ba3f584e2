"""Writing an export folder atomically: it is built in a temporary folder beside the target and renamed into
place, so a failure leaves nothing behind (nor the parent folders it created), and a non-empty target is replaced
only when asked."""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def same_or_inside(path: Path, folder: Path) -> bool:
    """Whether ``path`` is ``folder`` or lies inside it (links resolved)."""
    path, folder = Path(path).resolve(), Path(folder).resolve()
    return path == folder or folder in path.parents


def _first_missing_ancestor(path: Path) -> Path | None:
    missing = None
    for parent in [path, *path.parents]:
        if parent.exists():
            break
        missing = parent
    return missing


def check_target(out_dir: Path, overwrite: bool) -> None:
    """Refuse a target that is a file, or a non-empty folder without ``overwrite`` (before any work is done)."""
    if out_dir.exists() and not out_dir.is_dir():
        raise FileExistsError(f"{out_dir} exists and is a file; choose a folder path for the export.")
    if out_dir.is_dir() and any(out_dir.iterdir()) and not overwrite:
        raise FileExistsError(
            f"{out_dir} is not empty; pass overwrite=True (--overwrite) to replace it, or choose another folder."
        )


@contextmanager
def atomic_output_dir(out_dir: Path, overwrite: bool) -> Iterator[Path]:
    """Yield a temporary folder beside ``out_dir``; on success it replaces ``out_dir``, on failure it is removed."""
    check_target(out_dir, overwrite)
    created = _first_missing_ancestor(out_dir.parent)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.partial-", dir=out_dir.parent))
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o777 & ~umask)  # mkdtemp makes 0700 folders; an export is a normal folder
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if created is not None:  # remove the parents this call created, if still empty
            for parent in [out_dir.parent, *out_dir.parent.parents]:
                try:
                    parent.rmdir()
                except OSError:
                    break
                if parent == created:
                    break
        raise
    old = None
    if out_dir.exists():
        old = out_dir.with_name(f".{out_dir.name}.old-{uuid.uuid4().hex[:8]}")
        out_dir.rename(old)
    try:
        tmp.rename(out_dir)
    except BaseException:
        if old is not None:
            old.rename(out_dir)
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def replace_file(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a file beside it and a rename: never left half-written."""
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(text, encoding="utf-8")
    os.replace(partial, path)
