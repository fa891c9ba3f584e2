"""Which run a :class:`~hf_cse.trainer.ContrastiveTrainer`'s output folder holds between ``train()`` and
``save_run()``, so that ``save_run()`` finishes only the run its own ``train()`` trained there.

The folder is locked only while ``train()`` or ``save_run()`` runs (:mod:`hf_cse.folder_lock`); with
``save_strategy="no"`` nothing of the run is on disk between the two, so another trainer may train (and save) there
meanwhile: a notebook's old ``trainer.save_run()`` cell run again, a second notebook, the command line. Then:

* the last ``train()`` in a folder holds its run: a trainer of this process that trains where another one trained
  and has not saved yet takes the folder over (said in one log line), and the first one's ``save_run()`` is refused
  (a run that left checkpoints there is refused by the new run's folder check already,
  :func:`hf_cse.trainer_folder.check_new_run_folder`: only an unsaved run without checkpoints is taken over, the way
  a new run goes ahead in a folder holding only the record of an interrupted one);
* ``save_run()`` is refused, before it writes anything, when the folder received another run's files since this
  trainer's ``train()`` (its record, model, export, checkpoints, curves, logs: :data:`RUN_OUTPUTS`), whoever wrote
  them (another process, another tool); the first of two unsaved runs to save keeps the folder. Files removed
  meanwhile are no other run's; the trainer's own ``save_model()`` into its folder is its own.

Also: the output folder's path is checked before transformers' Trainer creates it (:func:`check_output_dir`), and
``save_run``'s arguments before it writes anything (:func:`check_save_run_arguments`).
"""

from __future__ import annotations

import fnmatch
import logging
import weakref
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, nullcontext
from pathlib import Path

from .checkpoints import is_checkpoint_name
from .checks import check_path_given
from .distributed import main_process_outcome
from .errors import CSEError
from .folder_lock import folder_held
from .output_folder import OutputFolderError, listing
from .run_files import (
    ADAPTER_FOLDER,
    CURVES_FILE,
    RUN_EXPORT_FOLDER,
    RUN_LOADER_FILES,
    RUN_RECORD_FILE,
    TENSORBOARD_FOLDER,
    TRAINING_INFO_FILE,
    WEIGHT_FILES,
)

logger = logging.getLogger(__name__)

#: what a trainer's ``save_model`` writes into its folder (its own, when it saves there itself)
MODEL_FILES = (*WEIGHT_FILES, "config.json", "generation_config.json", ADAPTER_FOLDER)
#: what a run writes into its folder (besides the tokenizer): another run's when one appears or changes after this
#: trainer's ``train()`` (checkpoints: ``checkpoint-<step>`` folders). Not what the trainer's own Trainer methods
#: write there as transformers' examples call them after train() (save_state: trainer_state.json; save_metrics:
#: train_results.json, all_results.json): another run that saves writes its record and model too
RUN_OUTPUTS = (TRAINING_INFO_FILE, CURVES_FILE, RUN_EXPORT_FOLDER, TENSORBOARD_FOLDER, RUN_RECORD_FILE,
               *RUN_LOADER_FILES, *MODEL_FILES)

#: what a trainer whose run its folder no longer holds can still do with it (its save_run() is refused)
SAVE_ELSEWHERE = "save this trainer's model elsewhere with trainer.save_model(folder)"

# the folder (resolved) -> the claim of the trainer of this process that trained there last
_claims: weakref.WeakValueDictionary[str, FolderClaim] = weakref.WeakValueDictionary()


def check_output_dir(output_dir) -> None:
    """An output folder's path that can be a run's folder: not empty, not a file, not below a file (transformers'
    Trainer would fail creating it, with a traceback)."""
    check_path_given(output_dir, "output_dir")
    path = Path(output_dir).expanduser()
    if path.exists() and not path.is_dir():
        raise OutputFolderError(f"output_dir {output_dir} is a file: give a folder (a new one, or this run's).",
                                fields=("output_dir",))
    blocking = next((p for p in path.parents if p.exists() and not p.is_dir()), None)
    if not path.exists() and blocking is not None:
        raise OutputFolderError(f"output_dir {output_dir} lies below {blocking}, which is a file: give a folder.",
                                fields=("output_dir",))


def check_save_run_arguments(data, preset, hub_repo) -> None:
    """``save_run``'s arguments, before it writes anything: ``data`` a dict of facts, ``preset`` a name,
    ``hub_repo`` a Hub repo id."""
    if data is not None and not isinstance(data, Mapping):
        raise CSEError(f"save_run(data=...) takes a dict of the training data's facts (e.g. {{'dataset_name': "
                       f"'wiki1m'}}), not a {type(data).__name__} ({str(data)[:40]!r}); omit it to record what the "
                       "trainer knows.")
    if data is not None and not all(isinstance(key, str) for key in data):
        raise CSEError(f"save_run(data=...) takes a dict with text keys, not {listing([repr(k) for k in data])}.")
    for name, value in (("preset", preset), ("hub_repo", hub_repo)):
        if value is not None and not isinstance(value, str):
            raise CSEError(f"save_run({name}=...) takes a str, not a {type(value).__name__} ({str(value)[:40]!r}).")
    if hub_repo is not None:
        from .export.hub import check_repo_id

        check_repo_id(hub_repo, "hub_repo")


def _signatures(folder: Path, patterns: tuple[str, ...]) -> dict[str, tuple[int, int, int]]:
    """The entries of ``folder`` a run writes (``patterns``, and checkpoints), each with what changes when it is
    written again: its inode, modification time and size."""
    if not folder.is_dir():
        return {}
    found = {}
    for entry in folder.iterdir():
        if is_checkpoint_name(entry.name) or any(fnmatch.fnmatchcase(entry.name, p) for p in patterns):
            try:
                stat = entry.stat()
            except OSError:  # removed meanwhile
                continue
            found[entry.name] = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
    return found


class FolderClaim:
    """A trainer's claim of its output folder (module doc); used on the main process, which holds the folder."""

    def __init__(self) -> None:
        self.folder: str | None = None  # where train() last trained (resolved)
        self.seen: dict[str, tuple[int, int, int]] = {}  # the run's files there when this trainer last wrote them
        self.saved = False
        self.failed: str | None = None  # the first line of the error the last train() ended in

    def check_not_trained_twice(self, trained_in: str | None, resume_from_checkpoint) -> None:
        """A trainer's second ``train()`` (not resuming): transformers would start the schedule and the optimizer
        over on the trained weights, and score them as the untrained encoder. What to do with the run instead: save
        it (save_run), nothing (saved), or, where another trainer has taken the folder over (so save_run() is
        refused), save its model elsewhere."""
        if trained_in is None or resume_from_checkpoint:
            return
        if self.folder is not None and _claims.get(self.folder) is not self:
            finish = (f"another trainer has trained there since and holds the folder, so this trainer's run is not "
                      f"saved there: {SAVE_ELSEWHERE}")
        else:
            finish = "save_run() has saved it" if self.saved else "call save_run() to finish it"
        raise OutputFolderError(f"this trainer has trained its run already (output_dir {trained_in}): {finish}, and "
                                "build a new trainer for another run (to train further, resume a checkpoint: "
                                "resume_from_checkpoint=True with a larger max_steps, under a constant learning-rate "
                                "schedule).")

    @contextmanager
    def training(self, trainer) -> Iterator[None]:
        """``train()``'s hold of the folder: locked (on the main process), taken over from an unsaved run of
        another trainer of this process, and its files noted when training ends."""
        self.failed = None
        try:
            if not trainer.is_world_process_zero():
                yield
                return
            out = trainer.args.output_dir
            with folder_held(out, trainer):
                key = str(Path(out).expanduser().resolve())
                other = _claims.get(key)
                if other is not None and other is not self and other.folder == key and not other.saved:
                    logger.warning("output_dir %s holds the run of another trainer, trained but not saved (save_run): "
                                   "this run takes the folder over, and that trainer's save_run() will be refused", out)
                _claims[key] = self
                self.folder, self.saved = key, False
                yield
                self.seen = _signatures(Path(key), RUN_OUTPUTS)
        except BaseException as err:  # save_run() then says why there is no run to save
            first = (str(err).splitlines() or [type(err).__name__])[0]
            self.failed = first if len(first) <= 160 else first[:160].rsplit(" ", 1)[0] + " ..."
            raise

    @contextmanager
    def saving(self, trainer, trained_in: str | None) -> Iterator[None]:
        """``save_run()``'s hold of the folder, refused (on every process, before anything is written) unless it
        still holds the run this trainer's ``train()`` trained; its files noted once saved."""
        out = trainer.args.output_dir
        alone = "trainer.save_model(folder) saves the model alone, into a folder of your choice"
        if trained_in != out and self.failed is not None:  # its last train() ended in an error
            raise OutputFolderError(f"save_run(): this trainer's train() ended in an error ({self.failed}), so there "
                                    f"is no trained run to save; train again (a new trainer) once it is mended "
                                    f"({alone}).")
        if trained_in is not None and trained_in != out:
            raise OutputFolderError(f"save_run() finishes the run that train() trained in output_dir {trained_in}, and "
                                    f"args.output_dir is {out} now: set it back to save the run there ({alone}).")
        if trained_in != out:  # train() refused or never ran: the folder is not ours
            raise OutputFolderError(
                f"save_run() finishes the run that train() trained in output_dir {out}, and this trainer has trained "
                f"none there: call trainer.train() first ({alone}).")
        zero = trainer.is_world_process_zero()
        with folder_held(out, trainer) if zero else nullcontext():
            main_process_outcome(trainer.args, lambda: self._check_still_ours(out))
            yield
            if zero:
                self.seen, self.saved = _signatures(Path(out).expanduser(), RUN_OUTPUTS), True

    def _check_still_ours(self, out) -> None:
        key = str(Path(out).expanduser().resolve())
        if self.folder is not None and key != self.folder:  # a relative output_dir after os.chdir
            raise OutputFolderError(f"save_run(): output_dir {out} is {key} from the working directory now, and "
                                    f"train() trained in {self.folder}: change back to the directory train() ran in, "
                                    f"or set args.output_dir to {self.folder}.")
        keep = f"{SAVE_ELSEWHERE}, or train again into a new output_dir"
        if _claims.get(key) is not self:
            raise OutputFolderError(f"save_run(): another trainer trained in output_dir {out} after this one, and "
                                    f"the folder holds its run now: this trainer's run is not saved there; {keep}.")
        now = _signatures(Path(key), RUN_OUTPUTS)
        theirs = sorted(name for name, signature in now.items() if self.seen.get(name) != signature)
        if theirs:
            raise OutputFolderError(f"save_run(): output_dir {out} received another run's files since this trainer's "
                                    f"train() ({listing(theirs)}): finishing this run there would mix the two. Move "
                                    f"them aside to save this run there, or {keep}.")

    def model_saved(self, trainer, folder) -> None:
        """The trainer saved its model into ``folder`` itself (``save_model``): where that is its own output folder,
        the model files there are its own."""
        key = str(Path(folder).expanduser().resolve())
        if key == self.folder and _claims.get(key) is self and trainer.is_world_process_zero():
            self.seen.update(_signatures(Path(key), MODEL_FILES))
