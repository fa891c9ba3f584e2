"""Writing an export folder atomically: it is built in a temporary folder beside the target and renamed into
place, so a failure (or a kill) never leaves a half-written export under the target's name, nor the parent folders
it created. A non-empty target is replaced only when asked, and then only the files an export writes
(:data:`EXPORT_FILES`) go: other files in it (notes, another model) are moved into the new export, the rule
run_unsup.py's and run_eval.py's ``--overwrite_output_dir`` follow too. What a killed export left beside the target
(its temporary folder, or the previous export set aside during the swap) is cleaned up or put back by the next one.
"""

from __future__ import annotations

import fnmatch
import logging
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..checkpoints import training_run_files
from ..errors import PathTakenError
from ..folder_lock import first_missing_folder, remove_made_folders
from ..plots import CURVES_FILE
from .card import CARD_INPUTS_FILE
from .modules import HF_CSE_CONFIG_FILE

logger = logging.getLogger(__name__)

#: what ``save_pretrained`` writes for a tokenizer (every kind the encoders use)
TOKENIZER_FILES = ("tokenizer*", "vocab.*", "merges.txt", "special_tokens_map.json", "added_tokens.json",
                   "spiece.model", "sentencepiece.bpe.model", "chat_template.jinja")
#: what an export writes into its folder (sentence-transformers' modules, the card, its inputs, the curves)
EXPORT_FILES = ("modules.json", "config.json", "config_sentence_transformers.json", "sentence_bert_config.json",
                HF_CSE_CONFIG_FILE, CARD_INPUTS_FILE, "README.md", "model*.safetensors*", "pytorch_model*.bin*",
                "[0-9]_*", CURVES_FILE, *TOKENIZER_FILES)


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


def check_target(out_dir: Path, overwrite: bool) -> None:
    """Refuse a target that is a file, or a non-empty folder without ``overwrite`` (before any work is done)."""
    if out_dir.exists() and not out_dir.is_dir():
        raise PathTakenError(f"{out_dir} exists and is a file; choose a folder path for the export.")
    run_files = training_run_files(out_dir)
    if run_files:  # even with overwrite: the run's record and checkpoints are what resumes or finishes it
        raise PathTakenError(f"{out_dir} is a training run's folder ({', '.join(run_files[:3])}); an export there "
                             "would mix with the run. Choose another folder, e.g. <that folder>/sentence-transformers"
                             ".")
    if out_dir.is_dir() and any(out_dir.iterdir()) and not overwrite:
        raise PathTakenError(
            f"{out_dir} is not empty; pass overwrite=True to replace the export files in it (other "
            "files are kept), or choose another folder."
        )
    from ..models import is_cse_checkpoint

    if out_dir.is_dir() and is_cse_checkpoint(out_dir):  # its config.json would be replaced, its checkpoints kept
        raise PathTakenError(f"{out_dir} holds an hf_cse model (a training run's folder); an export there would mix "
                             "with it. Choose another folder, e.g. <that folder>/sentence-transformers.")


def _move_entries(source: Path, target: Path, names) -> None:
    for name in names:
        if not (target / name).exists():
            (source / name).rename(target / name)


def recover_leftovers(out_dir: Path) -> None:
    """Clean up what a killed export left beside ``out_dir`` (call it holding the folder's lock, so no export is
    still writing them): its temporary folders go; a previous export set aside during the swap is put back when the
    target is missing, else the files an export does not write are moved back from it into the target."""
    for partial in out_dir.parent.glob(f".{out_dir.name}.partial-*"):
        shutil.rmtree(partial, ignore_errors=True)
        logger.warning("removed %s, the temporary folder of an export that was killed", partial)
    for old in out_dir.parent.glob(f".{out_dir.name}.old-*"):
        if not out_dir.exists():
            old.rename(out_dir)
            logger.warning("put back %s: the export in it was set aside by an export that was killed", out_dir)
            continue
        names = [p.name for p in old.iterdir()]
        _move_entries(old, out_dir, [n for n in names if n not in matching(names, EXPORT_FILES)])
        shutil.rmtree(old, ignore_errors=True)
        logger.warning("removed %s, the previous export set aside by an export that was killed", old)


@contextmanager
def atomic_output_dir(out_dir: Path, overwrite: bool) -> Iterator[Path]:
    """Yield a temporary folder beside ``out_dir``; on success it replaces ``out_dir``, on failure it is removed."""
    check_target(out_dir, overwrite)
    created = first_missing_folder(out_dir.parent)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.partial-", dir=out_dir.parent))
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o777 & ~umask)  # mkdtemp makes 0700 folders; an export is a normal folder
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        remove_made_folders(out_dir.parent, created)  # the parents this call created, if still empty
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
    if old is not None:  # files no export writes stay in the folder (a kill here: recover_leftovers moves them)
        names = [p.name for p in old.iterdir()]
        kept = [n for n in names if n not in matching(names, EXPORT_FILES)]
        _move_entries(old, out_dir, kept)
        shutil.rmtree(old, ignore_errors=True)
        if kept:
            logger.info("overwrite: kept the files no export writes in %s (%s)", out_dir, ", ".join(sorted(kept)))

