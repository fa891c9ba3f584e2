"""The output folders of the training and evaluation commands: the two job kinds (:class:`TrainingRun` here,
:class:`~hf_cse.cli.eval_output_dir.Evaluation`) of the one output-folder policy,
:func:`hf_cse.output_folder.claim_output_dir` (what every job does: refuse a file, lock the folder, continue the same
job's interrupted work, refuse anything else unless ``--overwrite_output_dir``, which removes only that kind of job's
files).

Training (``hf-cse-train``, the convention of the transformers example scripts,
``transformers.trainer_utils.get_last_checkpoint``, which transformers 5 no longer enforces itself):

* checkpoints of an interrupted run (``checkpoint-N`` folders and nothing else of a run): resume from the last
  complete one (:mod:`hf_cse.checkpoints`; incomplete ones are skipped with a log line), said in one log line; a run
  with other settings (recorded in ``hf_cse_run.json``) is refused;
* the start of a run stopped before its first checkpoint (its record, its TensorBoard logs in ``runs/``, no
  checkpoint): with other settings, refused as its checkpoints would be where it logged (so are logs without a
  record: whose run they are is unknown), so that two runs' logs never show in ``runs/`` as this folder's run (its
  record alone, e.g. of a run that ran out of memory at its first step, is replaced, said in one line); with the same
  settings it is
  the same run started again from step 0: the stopped attempt's logs are the run's own, kept beside the new
  attempt's (as a resumed run's are), and one log line names them (move them aside to show only the new attempt);
* a run whose final save or export was cut short (model files without ``training_info.json``, which a run writes
  last): finished from its last complete checkpoint (refused when there is none);
* a finished run or files no run writes: refused; :data:`RUN_FILES` are what ``--overwrite_output_dir`` removes;
* a model another tool saved (its config.json names no hf_cse model): refused, ``--overwrite_output_dir`` or not;
* a folder that is, holds or lies inside the encoder's folder: refused (saving would overwrite the encoder).

Evaluation (``hf-cse-eval``): another evaluation's results (:func:`hf_cse.evaluation.report.report_files`) are
refused; the partial results of the same command (the same models and settings), stopped before it finished, are
finished by it (the tasks it finished kept, the others evaluated: :mod:`hf_cse.cli.eval_run`); files that are not
results are left alone. A training run's folder is refused.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..checkpoints import (
    checkpoint_problem,
    going_on_from_finished_run,
    killed_weights_writes,
    last_complete_checkpoint,
)
from ..checks import InputError, check_writable
from ..divergence import earlier_finite, goes_on_from, none_earlier, what_diverged
from ..finite_weights import saved_non_finite
from ..output_folder import (
    OutputFolderError,
    claim_output_dir,
    listing,
    same_or_inside,
)
from ..run_files import (
    CHECKPOINT_PREFIX,
    RUN_RECORD_FILE,
    TENSORBOARD_FOLDER,
    TRAINING_INFO_FILE,
)
from ..run_settings import in_brief, setting_differences
from ..start_over import (
    RUN_FILES,
    killed_writes,
    other_models,
    remove_run_files,
    run_entries,
    run_files_in,
    say_stale_results,
)
from ..trainer_folder import (
    cannot_go_on_with,
    check_no_names_taken_for_checkpoints,
    check_not_another_model,
    check_not_encoder_folder,
    check_not_inside_a_run,
    remove_killed_writes,
)
from ..writing import json_safe, write_json_atomic

logger = logging.getLogger(__name__)

OVERWRITE_FLAG = "--overwrite_output_dir"
# What an interrupted run leaves before its model is saved (anything more means the run finished or is not ours).
_INTERRUPTED_RUN_FILES = (f"{CHECKPOINT_PREFIX}-*", TENSORBOARD_FOLDER, RUN_RECORD_FILE)


# --------------------------------------------------------------------------------------------------- training
def _read_record(path: Path) -> dict[str, Any]:
    try:
        recorded = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise OutputFolderError(f"{path} is not valid JSON ({type(err).__name__} at {getattr(err, 'pos', '?')}): it "
                                f"records the settings of the run in that folder; restore it, or pass {OVERWRITE_FLAG} "
                                "to start over.") from None
    if not isinstance(recorded, dict):
        raise OutputFolderError(f"{path} does not hold a JSON object; restore it, or pass {OVERWRITE_FLAG} to start "
                                "over.")
    return recorded


class CommandJob:
    """What the commands' jobs share: ``--overwrite_output_dir`` starts over, and the folder is created and probed
    before any work (a read-only folder fails now, not when the first result is saved)."""

    overwrite_switch = OVERWRITE_FLAG

    def make_ready(self, out: Path, flag: str) -> None:
        check_writable(out, flag)


@dataclass
class TrainingRun(CommandJob):
    """A training run: ``settings`` (JSON-safe) are what makes it the same run; ``read_record`` brings a record
    written by an older hf_cse to today's form of the same settings (so its interrupted run still resumes).
    ``resume_from_checkpoint``: the user names the checkpoint to continue from, whatever the folder holds (the
    Trainer checks it); ``encoder``: the encoder's folder, which the output folder must stay clear of;
    ``training_args``: the run's ``TrainingArguments``, whose learning-rate schedule a checkpoint offered to go on
    with other settings must keep, and ``encoder_config`` the encoder's config, whose sizes its weights must fit
    (:func:`~hf_cse.trainer_folder.cannot_go_on_with`)."""

    settings: dict[str, Any]
    read_record: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    resume_from_checkpoint: str | None = None
    overwrite: bool = False
    encoder: str | None = None
    folder_hint: str = "give a folder path (new or holding this run)"
    is_main_process: bool = True  # the one that removes what a killed run left
    training_args: Any = None
    encoder_config: Any = None
    #: a method's config defaults by name (:func:`~hf_cse.run_settings.setting_differences`)
    method_defaults: Callable[[str], dict[str, Any]] | None = None

    def check(self, out: Path) -> None:
        check_not_encoder_folder(out, self.encoder)
        check_not_inside_a_run(out, "--output_dir")
        check_no_names_taken_for_checkpoints(out, "--output_dir")
        refuse_another_model(out)
        if not self.resume_from_checkpoint:
            return
        if self.overwrite:
            raise InputError(f"{OVERWRITE_FLAG} starts over and --resume_from_checkpoint continues a run; give one.")
        checkpoint = Path(self.resume_from_checkpoint)
        problem = checkpoint.is_dir() and checkpoint_problem(checkpoint)
        if problem:
            raise InputError(f"--resume_from_checkpoint {checkpoint} is incomplete: {problem}. Give a complete "
                             "checkpoint (an earlier checkpoint-N).")

    def left_behind(self, out: Path) -> list[str]:
        return [p.name for p in out.iterdir()] if out.is_dir() else []

    def own_files(self, out: Path, left: list[str]) -> list[str]:
        return run_files_in(out, left)  # another tool's model never

    def remove(self, out: Path, names: list[str]) -> None:
        remove_run_files(out, names)

    def started_over(self, out: Path) -> None:
        say_stale_results(out)

    def _remove_killed_writes(self, out: Path, left: list[str]) -> None:
        if not self.is_main_process:
            return
        partials = [n for n in killed_writes(out, left) if (out / n).exists()]
        partials += [n for n in killed_weights_writes(out) if n not in partials]  # those in checkpoints too
        remove_killed_writes(out, partials)

    def continue_interrupted(self, out: Path, left: list[str]) -> str | None:
        """The checkpoint to resume the run in ``out`` from (None: no complete one); refused when the folder holds
        a finished run (its last file, ``training_info.json``, is there), files that no run writes or a run with
        other settings. A run whose final save or export was cut short (its model files, without
        ``training_info.json``) is finished from its last complete checkpoint; its partly written model is never
        taken for a finished one."""
        if self.resume_from_checkpoint:
            if not same_or_inside(Path(self.resume_from_checkpoint), out):  # another run's checkpoint: this folder's
                refuse_finished_or_foreign(out, left, going_on_taken=False)  # run would be replaced or mixed by it
            self._remove_killed_writes(out, left)
            return self.resume_from_checkpoint
        foreign = refuse_finished_or_foreign(out, left)
        self._remove_killed_writes(out, left)
        resume = last_complete_checkpoint(out)
        if resume is not None:  # before its settings are compared: going on from it is no way out
            refuse_diverged(Path(resume), out)
        if foreign and resume is None:
            raise OutputFolderError(f"--output_dir {out}: a run whose final save was cut short, no checkpoint to "
                                    "finish it from. Its model may be whole (try hf-cse-export); "
                                    f"{OVERWRITE_FLAG} deletes it; or choose another --output_dir.")
        # a finished run's files passed refuse_finished_or_foreign only where a run went on from it: the Trainer
        # says that run replaces it
        if foreign and not (out / TRAINING_INFO_FILE).exists():
            logger.warning("the final save of the run in %s was cut short (no %s): finishing it from %s", out,
                           TRAINING_INFO_FILE, resume)
        record = out / RUN_RECORD_FILE
        if resume is None:
            self._restart_stopped_start(out, left)
        elif record.is_file():
            changed = self._changed_since_record(record)
            if changed:  # name --resume_from_checkpoint only where it would be taken
                blocked = cannot_go_on_with(changed, resume, out, flag_prefix="--", args=self.training_args,
                                            encoder_config=self.encoder_config)
                raise other_settings_refusal(out, changed, resume, blocked)
        if resume is not None:
            logger.warning("resuming the interrupted run in %s from %s (pass %s to start over instead)", out, resume,
                           OVERWRITE_FLAG)
        return resume

    def _changed_since_record(self, record: Path) -> list[str]:
        recorded = _read_record(record)
        return setting_differences(json_safe(self.read_record(recorded)) if self.read_record else recorded,
                                   self.settings, self.method_defaults)

    def _restart_stopped_start(self, out: Path, left: list[str]) -> None:
        """A run stopped before its first checkpoint (its record, its TensorBoard logs, no checkpoint to resume):
        with other settings, or logs whose run's settings are unknown (no record), refused as a run's checkpoints
        would be; with the same settings, the same run starts again from step 0, and its stopped attempt's logs are
        kept beside the new ones, said in one log line (module doc)."""
        record = out / RUN_RECORD_FILE
        logs = sorted(p.name for p in (out / TENSORBOARD_FOLDER).iterdir()) if (
            out / TENSORBOARD_FOLDER).is_dir() else []
        started = [n for n in (RUN_RECORD_FILE, TENSORBOARD_FOLDER) if n in left]
        changed = self._changed_since_record(record) if record.is_file() else []
        if changed and not logs:  # nothing of it but its settings: no work of the stopped start's to lose or mix
            if self.is_main_process:
                logger.warning("%s in %s records a run with other settings (%s) that stopped before its first "
                               "checkpoint and log: replaced by this run's", RUN_RECORD_FILE, out, in_brief(changed))
            return
        if changed or (logs and not record.is_file()):
            what = (f"the start of a run with other settings ({in_brief(changed)})" if changed
                    else f"the logs of a run whose settings are not recorded (no {RUN_RECORD_FILE})")
            raise OutputFolderError(f"--output_dir {out} holds {what}, stopped before its first checkpoint "
                                    f"({listing(started)}): rerun with its settings to start it again, "
                                    f"{OVERWRITE_FLAG} to start over (removes them), or choose another --output_dir.")
        if logs and self.is_main_process:
            logger.warning("%s/ in %s holds the TensorBoard logs of this run's attempt stopped before its first "
                           "checkpoint (%s): the same settings, so the run starts again from step 0 and they are kept "
                           "beside the new attempt's (move them aside to show only the new one)",
                           TENSORBOARD_FOLDER, out, listing(logs, 3))


def other_settings_refusal(out: Path, changed: list[str], resume, blocked: str | None) -> OutputFolderError:
    """The refusal of ``out``, whose last checkpoint ``resume`` is of a run with the ``changed`` settings; it offers
    ``--resume_from_checkpoint`` only where nothing ``blocked`` it (:func:`~hf_cse.trainer_folder.cannot_go_on_with`).
    Said alike whether the record or the checkpoint (the Trainer's comparison) found them."""
    ways = (f"{blocked}: rerun with its settings to resume it, or {OVERWRITE_FLAG} to start over (or choose another "
            "--output_dir)" if blocked else f"rerun with its settings to resume it, --resume_from_checkpoint {resume} "
            f"to go on with these, or {OVERWRITE_FLAG} to start over")
    return OutputFolderError(f"--output_dir {out} holds checkpoints of a run with other settings "
                             f"({in_brief(changed)}): {ways}.")


def refuse_diverged(checkpoint: Path, out: Path) -> None:
    """Refuse to resume ``checkpoint``, the last of ``out``, when its weights are not finite: its run diverged
    (:mod:`hf_cse.divergence`; a checkpoint named by --resume_from_checkpoint is refused by the Trainer's check, in
    :mod:`hf_cse.cli.preflight`); the ways on, in this command's terms."""
    found = saved_non_finite(checkpoint)
    if found is None:
        return
    earlier, read = earlier_finite(checkpoint, out)
    anew = (f"start a new run with a lower --learning_rate in another --output_dir, or in {out} with "
            f"{OVERWRITE_FLAG} (removes this run's files)")
    ways = (f"{goes_on_from(f'--resume_from_checkpoint {earlier}')}, or {anew}" if earlier else
            f"{none_earlier(read)}: {anew}")
    raise OutputFolderError(f"--output_dir {out}: its last checkpoint, {checkpoint.name}, "
                            f"{what_diverged(found, checkpoint)}; {ways}.")


def refuse_another_model(out: Path) -> None:
    """Refuse a folder holding a model another tool saved (its config.json names no hf_cse model), even with
    ``--overwrite_output_dir``: a run's files have the same names (config.json, the weights, the tokenizer), so the
    run would replace that model, and a start over would delete it as if it were an earlier run's. A folder with
    the marks of a run (its record, checkpoints, ``training_info.json``) is a run's: the rest of the policy says."""
    check_not_another_model(out, also=", overwrite_output_dir or not")


def refuse_finished_or_foreign(out: Path, left: list[str], going_on_taken: bool = True) -> list[str]:
    """Of ``out``'s entries ``left``, those beyond an interrupted run's checkpoints (a run's files: its final save,
    cut short, or the finished run a stopped run went on from); refused when they are a finished run's (its last
    file, ``training_info.json``, is there) or files that no run writes. A finished run with a complete checkpoint
    past its last step is the run going on from it, stopped (:func:`~hf_cse.checkpoints.going_on_from_finished_run`):
    resumed, where ``going_on_taken``. Needs no model and no torch: the command line checks it before either is
    loaded (:func:`refuse_occupied_output_dir`), and the run again when it claims the folder."""
    theirs = other_models(out, left)
    interrupted = [n for n in run_entries(left, _INTERRUPTED_RUN_FILES) + killed_writes(out, left)
                   if n not in theirs]
    foreign = [n for n in left if n not in interrupted]
    other = [n for n in foreign if n not in run_entries(foreign, RUN_FILES) or n in theirs]
    # a run writes training_info.json last: named first, whatever lies beside
    finished = (out / TRAINING_INFO_FILE).exists() and not (going_on_taken and going_on_from_finished_run(out))
    if finished or other:
        what = (f"a finished run{f' (and files no run writes: {listing(other)})' if other else ''}" if finished
                else f"files that are not checkpoints of a run ({listing(other)})")
        raise OutputFolderError(f"--output_dir {out} already holds {what}. Choose another --output_dir, or pass "
                                f"{OVERWRITE_FLAG} to start over (removes the previous run's files, keeps others).")
    return foreign


def refuse_occupied_output_dir(output_dir: str) -> None:
    """The refusal of a training command's ``--output_dir`` that holds a finished run or other files, for a command
    that neither starts over nor names the checkpoint to resume (what :class:`TrainingRun` refuses first, before
    the folder is locked)."""
    out = Path(output_dir).expanduser()
    if out.is_dir():
        refuse_another_model(out)
        refuse_finished_or_foreign(out, [p.name for p in out.iterdir()])


def prepare_output_dir(output_dir, settings: dict[str, Any], *, overwrite: bool = False, encoder: str | None = None,
                       resume_from_checkpoint: str | None = None, is_main_process: bool = True,
                       read_record: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
                       hold: bool = False, training_args=None, encoder_config=None,
                       method_defaults: Callable[[str], dict[str, Any]] | None = None) -> str | None:
    """Training's output folder, before anything is loaded (module doc); returns the checkpoint to resume from (or
    ``None`` for a new run). ``settings`` are the run's settings (JSON-able); checkpoints are resumed only when the
    recorded ones are equal. ``hold``: take the folder's lock here (the main process does, before the other
    processes look at the folder); otherwise the caller holds it. Only the main process removes or writes files.
    ``training_args``: the run's ``TrainingArguments``, ``encoder_config`` its encoder's config
    (:class:`TrainingRun`); ``method_defaults``: a method's config defaults, compared where a record leaves them out.
    """
    run = TrainingRun(json_safe(settings), read_record, resume_from_checkpoint, overwrite, encoder,
                      is_main_process=is_main_process, training_args=training_args, encoder_config=encoder_config,
                      method_defaults=method_defaults)
    out, resume = claim_output_dir(output_dir, run, flag="--output_dir", overwrite=overwrite, hold=hold,
                                   is_main_process=is_main_process)
    if resume_from_checkpoint:
        return resume_from_checkpoint
    if is_main_process and resume is None:
        write_json_atomic(out / RUN_RECORD_FILE, run.settings, sort_keys=True)
    return resume
