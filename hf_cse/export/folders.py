"""The export as a job of the one output-folder policy (:mod:`hf_cse.output_folder`: :class:`Export`), and its
writing, atomic: the export is built in a temporary folder beside the target and renamed into place, so a failure (or
a kill) never leaves a half-written export under the target's name, nor the parent folders it created. A non-empty
target is replaced only when asked (``overwrite``), and then only the files an export wrote (:func:`export_files`)
go: other files in it (notes, another model) are moved into the new export, the rule the training and evaluation
jobs' ``overwrite_output_dir`` follows too. What a killed export left beside the target (its temporary folder,
or the previous export set aside during the swap) is cleaned up or put back by the next one.
The folder and the one it is written in are probed for writing before the model is loaded, and a swap that fails
anyway (a folder that cannot be renamed) leaves the target as it was and no temporary folder.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ..checkpoints import read_json, training_run_files
from ..checks import check_writable
from ..folder_lock import first_missing_folder, remove_made_folders
from ..output_folder import TOKENIZER_FILES, OutputFolderError, claim_output_dir, listing, matching
from ..run_files import CURVES_FILE, RUN_EXPORT_FOLDER, RUN_LOADER_FILES, WEIGHT_FILES
from ..trainer_folder import check_not_inside_a_run, runs_holding
from ..writing import write_json_atomic
from .card import CARD_INPUTS_FILE, recorded_export_files
from .modules import HF_CSE_CONFIG_FILE
from .onnx import ONNX_FILE

logger = logging.getLogger(__name__)

#: what any export writes into its folder (sentence-transformers' modules, the card, its inputs, the curves, the ONNX
#: backend's folder: an earlier export's is never kept beside a new export's weights); an export's own code files (a
#: method's modules) are named by its record and its modules.json (:func:`export_files`)
EXPORT_FILES = ("modules.json", "config.json", "config_sentence_transformers.json", "sentence_bert_config.json",
                HF_CSE_CONFIG_FILE, CARD_INPUTS_FILE, "README.md", *WEIGHT_FILES, "[0-9]_*", CURVES_FILE,
                *TOKENIZER_FILES, ONNX_FILE.split("/")[0])
#: the files of a model (or a tokenizer) in a folder: an export replaces them only in an export's folder
MODEL_FILES = ("config.json", "modules.json", "model*.safetensors*", "pytorch_model*.bin*", *TOKENIZER_FILES)
#: the files by which an export recognises an earlier export (sentence-transformers' modules and hf_cse's config)
EXPORT_MARKERS = ("modules.json", HF_CSE_CONFIG_FILE)


def export_files(folder: Path) -> list[str]:
    """The names in ``folder`` that its export wrote: those its record lists (:func:`recorded_export_files`: every
    file the export wrote, a method's own code included), those of :data:`EXPORT_FILES`, and the code files its
    ``modules.json`` names (``file.Class``: an export made before records listed its files)."""
    names = [p.name for p in folder.iterdir()] if folder.is_dir() else []
    written = set(recorded_export_files(folder)) | set(matching(names, EXPORT_FILES))
    modules, _ = read_json(folder / "modules.json")
    for module in modules if isinstance(modules, list) else []:
        kind = str(module.get("type", "")) if isinstance(module, dict) else ""
        if kind.count(".") == 1:  # a module of the folder's own code, not sentence_transformers.<...>
            written.add(f"{kind.split('.')[0]}.py")
    return [n for n in names if n in written]


def is_export_folder(folder: Path) -> bool:
    """Whether ``folder`` holds an hf_cse export (:data:`EXPORT_MARKERS`), the only model an export replaces."""
    return all((folder / marker).is_file() for marker in EXPORT_MARKERS)


@dataclass
class Export:
    """The export's answers to the output-folder policy (:class:`hf_cse.output_folder.OutputJob`). A training run's
    folder is refused even with ``overwrite`` (its record and checkpoints are what resumes or finishes it), and so is
    a folder holding an hf_cse model (its config.json would be replaced, its weights kept) or any other model or
    tokenizer that is not an earlier export (:func:`is_export_folder`: an encoder's folder, a plain
    sentence-transformers model). An export is never
    continued: a killed one left its work beside the folder (:func:`recover_leftovers`), so anything in the folder
    is refused without ``overwrite``. With it nothing is removed first: the files an export writes are replaced when
    the new export is complete (:func:`atomic_output_dir`), so a failed export leaves the previous one whole."""

    folder_hint: str = "choose a folder path for the export"
    overwrite_switch: str = "overwrite=True"

    def check(self, out: Path) -> None:
        run_files = training_run_files(out)
        if run_files:
            raise OutputFolderError(f"{out} is a training run's folder ({', '.join(run_files[:3])}); an export there "
                                    "would mix with the run. Choose another folder, e.g. <that folder>/"
                                    "sentence-transformers.")
        from ..models import is_cse_checkpoint

        if out.is_dir() and is_cse_checkpoint(out):
            raise OutputFolderError(f"{out} holds an hf_cse model (a training run's folder); an export there would "
                                    "mix with it. Choose another folder, e.g. <that folder>/sentence-transformers.")
        model_files = matching([p.name for p in out.iterdir()], MODEL_FILES) if out.is_dir() else []
        if model_files and not is_export_folder(out):
            raise OutputFolderError(f"{out} holds a model or tokenizer that is not an hf_cse export "
                                    f"({listing(model_files, 3)}); an export there would replace it, even with "
                                    f"{self.overwrite_switch}. Choose another folder for the export.")
        # not in a run's checkpoint (its rotation deletes it) nor an unfinished run's folder (it would not resume)
        check_not_inside_a_run(out, "out_dir", finished_run_ok=True)

    def left_behind(self, out: Path) -> list[str]:
        return [p.name for p in out.iterdir()] if out.is_dir() else []

    def own_files(self, out: Path, left: list[str]) -> list[str]:
        return []  # replaced by the swap once the new export is complete, not removed before

    def remove(self, out: Path, names: list[str]) -> None:
        pass

    def started_over(self, out: Path) -> None:
        pass

    def continue_interrupted(self, out: Path, left: list[str]) -> None:
        raise OutputFolderError(f"{out} is not empty; pass {self.overwrite_switch} to replace the export files in it "
                                "(other files are kept), or choose another folder.")

    def make_ready(self, out: Path, flag: str) -> None:
        """The export is written beside the folder and renamed into place (:func:`atomic_output_dir`): probe now,
        before the model is loaded, that the folder it is written in (or the nearest one there is: the missing ones
        are created then) and the folder itself, where it exists, can be written."""
        parent = next(p for p in out.absolute().parents if p.exists())
        where = "its parent folder" if parent == out.absolute().parent else "the folder to create it in"
        check_writable(parent, f"{flag} {out}: {where}")
        if out.is_dir():
            check_writable(out, flag)


def check_export_folder(out_dir: Path, overwrite: bool) -> Path:
    """The output-folder policy's answer for an export into ``out_dir`` (before any work is done; the caller holds
    the folder's lock when it writes): raises :class:`~hf_cse.output_folder.OutputFolderError`."""
    out, _ = claim_output_dir(out_dir, Export(), overwrite=overwrite, flag="out_dir")
    return out


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
        written = export_files(old)
        _move_entries(old, out_dir, [p.name for p in old.iterdir() if p.name not in written])
        shutil.rmtree(old, ignore_errors=True)
        logger.warning("removed %s, the previous export set aside by an export that was killed", old)


@contextmanager
def atomic_output_dir(out_dir: Path, overwrite: bool) -> Iterator[Path]:
    """Yield a temporary folder beside ``out_dir``; on success it replaces ``out_dir``, on failure it is removed."""
    check_export_folder(out_dir, overwrite)
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
    try:  # a failed swap (a folder that cannot be renamed) leaves the target as it was, and no temporary folder
        if out_dir.exists():
            old = out_dir.with_name(f".{out_dir.name}.old-{uuid.uuid4().hex[:8]}")
            out_dir.rename(old)
        tmp.rename(out_dir)
    except BaseException:
        if old is not None and old.exists():
            old.rename(out_dir)
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if old is not None:  # files no export writes stay in the folder (a kill here: recover_leftovers moves them)
        written = export_files(old)
        kept = [p.name for p in old.iterdir() if p.name not in written]
        _move_entries(old, out_dir, kept)
        shutil.rmtree(old, ignore_errors=True)
        if kept:
            logger.info("overwrite: kept the files no export writes in %s (%s)", out_dir, ", ".join(sorted(kept)))


def point_run_folder_at_export(output_dir: Path, export_dir: Path | None) -> None:
    """Write :data:`RUN_LOADER_FILES` into the run folder ``output_dir`` for its export ``export_dir`` (a subfolder);
    an earlier run's are removed first, and none are written without an export or for one whose modules are its own
    code (sentence-transformers imports those from the folder it loads)."""
    for name in RUN_LOADER_FILES:
        (output_dir / name).unlink(missing_ok=True)
    if export_dir is None:
        return
    modules = json.loads((export_dir / "modules.json").read_text(encoding="utf-8"))
    if any(not str(module.get("type", "")).startswith("sentence_transformers.") for module in modules):
        return
    inside = export_dir.relative_to(output_dir).as_posix()
    settings = export_dir / "config_sentence_transformers.json"
    if settings.is_file():
        write_json_atomic(output_dir / settings.name, json.loads(settings.read_text(encoding="utf-8")))
    # last: sentence-transformers takes the folder for its model by this file
    write_json_atomic(output_dir / "modules.json",
                      [{**module, "path": f"{inside}/{module.get('path') or ''}".rstrip("/")} for module in modules])


def repoint_run_folder(out_dir: Path) -> None:
    """Where ``out_dir`` is a training run's own export folder (``<run>/sentence-transformers``), point the run
    folder at it again (:func:`point_run_folder_at_export`), so that ``SentenceTransformer(<run>)`` loads the
    modules that are there now (a re-export with another head, length or pooling)."""
    out = Path(out_dir).expanduser().resolve()
    if out.name == RUN_EXPORT_FOLDER and out.parent in runs_holding(out):
        point_run_folder_at_export(out.parent, out)
