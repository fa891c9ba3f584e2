"""The one output-folder policy of every job that writes a folder for a user (training, evaluation, export): never
lose a job's work, never mix two jobs in one folder. :func:`claim_output_dir` takes the same steps for each, each
job kind saying what it writes and how it recognises its own interrupted work (an :class:`OutputJob`: the training
run and the evaluation in :mod:`hf_cse.cli.output_dir`, the export in :mod:`hf_cse.export.folders`):

* the path must be given and must not be a file; the folder is locked for the job's lifetime
  (:mod:`hf_cse.folder_lock`);
* what an earlier job left: none -> a new job; the same job, interrupted -> it is continued; anything else ->
  refused in one line naming how to start over;
* starting over (``overwrite_output_dir``, the export's ``overwrite``): only the files that kind of job writes
  go, so none of them survives beside the new ones; files no job writes (a log, notes) are kept. The export and the
  evaluation replace them only once they write their own (:meth:`OutputJob.own_files` is then empty), so that a
  failure before keeps them;
* the folder is made ready to be written (created and probed; the export writes beside it and renames).

A refusal is an :class:`OutputFolderError`.
"""

from __future__ import annotations

import fnmatch
import logging
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from .checks import InputError, check_path_given
from .folder_lock import hold_folder

logger = logging.getLogger(__name__)

#: what ``save_pretrained`` writes for a tokenizer (every kind the encoders use)
TOKENIZER_FILES = ("tokenizer*", "vocab.*", "merges.txt", "special_tokens_map.json", "added_tokens.json",
                   "spiece.model", "sentencepiece.bpe.model", "chat_template.jinja")
#: of those, the files by which a folder or Hub repo is recognised as holding a tokenizer (exact names, which a
#: Hub cache can be asked for)
TOKENIZER_MARKERS = ("tokenizer_config.json", "tokenizer.json")


class OutputFolderError(InputError, FileExistsError):
    """An output folder a job may not write into (a file, or a folder holding another job's work); the message
    says how to start over or where to write instead. A ``FileExistsError`` too, as the export has always raised."""


def matching(names, patterns: tuple[str, ...]) -> list[str]:
    """The ``names`` that match one of the glob ``patterns`` (case-sensitive)."""
    return [n for n in names if any(fnmatch.fnmatchcase(n, pattern) for pattern in patterns)]


def remove_entries(folder: Path, names) -> None:
    """Delete ``folder/name`` for each name (folders with their contents, links as links)."""
    for name in names:
        path = folder / name
        shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()


def same_or_inside(path: Path, folder: Path) -> bool:
    """Whether ``path`` is ``folder`` or lies inside it (links resolved)."""
    path, folder = Path(path).resolve(), Path(folder).resolve()
    return path == folder or folder in path.parents


def listing(names: Sequence[str], limit: int = 5) -> str:
    """Up to ``limit`` of ``names``, sorted, and how many more."""
    shown = ", ".join(sorted(names)[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


class OutputJob(Protocol):
    """One kind of job that owns an output folder, for :func:`claim_output_dir`."""

    #: how the folder's path should be, said after "exists and is a file; " when it is a file
    folder_hint: str
    #: how the user asks to start over, for messages (``--overwrite_output_dir``)
    overwrite_switch: str

    def check(self, out: Path) -> None:
        """The job's own checks of the folder and its flags, before anything in it is looked at."""

    def left_behind(self, out: Path) -> list[str]:
        """The entries of ``out`` that bear on this job (an earlier job's files; for training, every entry)."""

    def own_files(self, out: Path, left: list[str]) -> list[str]:
        """Of ``left``, the entries this kind of job writes and removes before it writes, when starting over."""

    def remove(self, out: Path, names: list[str]) -> None:
        """Remove ``names`` (from :meth:`own_files`) from ``out``."""

    def started_over(self, out: Path) -> None:
        """After a start over (the job's own files removed, where there were any): what is kept, said."""

    def continue_interrupted(self, out: Path, left: list[str]) -> Any:
        """What ``left`` is the same job's interrupted work to continue from (job-specific); raises
        :class:`OutputFolderError` naming how to start over when it is anything else."""

    def make_ready(self, out: Path, flag: str) -> None:
        """Make ``out`` ready to be written, or fail now rather than when the first result is saved."""


def say_removed(switch: str, out: Path, removed: list[str], kept: list[str]) -> None:
    """The one log line of a start over (``switch``: the field or flag that asked for it) in ``out``."""
    logger.warning("%s: removed the earlier files in %s (%s)%s", switch, out, listing(removed),
                   f"; kept files no run writes: {listing(kept)}" if kept else "")


def claim_output_dir(output_dir, job: OutputJob, *, flag: str, overwrite: bool = False, hold: bool = False,
                     is_main_process: bool = True) -> tuple[Path, Any]:
    """The steps every job takes on its output folder (module doc); returns the folder and what
    :meth:`OutputJob.continue_interrupted` found to continue (``None``: a new job). ``hold``: take the folder's lock
    (the caller's entry point is marked with :func:`hf_cse.folder_lock.releases_folder_locks`). Only the main process
    removes files or makes the folder ready. ``flag`` names the path in messages (the field or the flag the user
    gave it as)."""
    check_path_given(str(output_dir), flag)
    out = Path(output_dir).expanduser()
    if out.is_symlink() and not out.exists():
        raise OutputFolderError(f"{flag} {output_dir} is a link to {os.readlink(out)}, which does not exist: create "
                                "that folder, or give another path.")
    if out.exists() and not out.is_dir():
        raise OutputFolderError(f"{flag} {output_dir} exists and is a file; {job.folder_hint}.")
    if hold:
        hold_folder(out, flag)
    job.check(out)
    left = job.left_behind(out)
    found = None
    if left and overwrite:
        own = job.own_files(out, left)
        if is_main_process and own:
            job.remove(out, own)
            say_removed(job.overwrite_switch, out, own, [n for n in left if n not in own])
        if is_main_process:
            job.started_over(out)
    elif left:
        found = job.continue_interrupted(out, left)
    if is_main_process:
        job.make_ready(out, flag)
    return out, found
