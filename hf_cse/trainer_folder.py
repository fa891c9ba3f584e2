"""What :class:`hf_cse.trainer.ContrastiveTrainer` checks of its output folder before training, so that a run from
Python keeps the command line's promise (:mod:`hf_cse.output_folder`): never mix two runs in one folder, resume only
a run of the same method, refuse in one line what transformers would stop on with a traceback (or, worse, run).

* a new run (no ``resume_from_checkpoint``) into a folder holding a trained model or checkpoints is refused: its
  checkpoints would join the other run's (and their rotation delete them), its save replace that run's model;
* so is a new run into a folder holding files of the names its final save writes (a tokenizer's, ``all_results.json``,
  ``training_args.bin``, ...: :data:`SAVED_BY_A_RUN`), which would be replaced; ``save_model(folder)`` into a folder
  holding the files it writes without a model's ``config.json``, likewise;
* so is a new run into a folder holding an earlier run's TensorBoard logs (``runs/``, of a run stopped before its
  first checkpoint): its own logs would show beside them there as one run's (the command line, which records its
  run's settings, starts the same run again and keeps them, :mod:`hf_cse.cli.output_dir`);
* so is any run into a folder inside another run's folder (one of its checkpoints, or below it): that run's
  checkpoint rotation or start-over would delete it, and its resume could take this run's model for a checkpoint;
* ``resume_from_checkpoint=True`` is the folder's last *complete* checkpoint (:mod:`hf_cse.checkpoints`), so that a
  run whose last checkpoint is its final step is finished as it is rather than trained one step further;
* a named checkpoint must exist, be complete and be of the trainer's method;
* ``resume_from_checkpoint=True`` ("continue the interrupted run") is refused when the settings that define the run
  (:mod:`hf_cse.run_settings`: the method's config, the learning rate, batch, seed, ..., the training set, the number
  of processes) differ from those the checkpoint was saved with, as the command line refuses them; a checkpoint
  named by its path goes on with the new settings, and one log line lists what changed -- except the learning rate
  and weight decay, which the checkpoint's optimizer and scheduler state bring back (transformers restores them): a
  change is refused, not silently dropped;
* a named checkpoint resumed with other settings is refused where the output folder holds later checkpoints: going on
  from it there would overwrite them one by one, and the folder would hold two runs' checkpoints;
* the output folder may not be, hold or lie inside the folder of the encoder the model was built from (its save would
  overwrite or mix with the encoder's files);
* a checkpoint resumed into a folder holding a finished run (training it further) replaces that run's model and
  record when it finishes: one log line says so. Another total of steps is refused where the learning-rate schedule
  follows it, and the best checkpoint is chosen again under another ``metric_for_best_model``
  (:mod:`hf_cse.trainer_resume`).

A command that claimed the folder (:mod:`hf_cse.cli.output_dir`: it holds its lock) has applied its whole policy
already, ``overwrite_output_dir`` included; these checks then stand aside.
"""

from __future__ import annotations

import logging
from pathlib import Path

from .checkpoints import (
    TRAINER_STATE_FILE,
    checkpoint_problem,
    encoder_change,
    finished_run_step,
    holds_model_only,
    is_checkpoint_name,
    killed_weights_writes,
    last_complete_checkpoint,
    other_model,
    run_marks,
    saved_config,
    taken_for_checkpoints,
    trained_from,
    training_run_files,
)
from .divergence import check_resumable, how_to_go_on
from .folder_lock import claimed_by_command, held_here
from .later_checkpoints import check_no_later_checkpoints, later_checkpoints, warn_later_checkpoints_overwritten
from .output_folder import TOKENIZER_FILES, OutputFolderError, listing, matching, remove_entries, same_or_inside
from .run_files import (
    ADAPTER_FOLDER,
    CHECKPOINT_PREFIX,
    CURVES_FILE,
    RUN_LOADER_FILES,
    RUN_RECORD_FILE,
    TENSORBOARD_FOLDER,
    TRAIN_RESULTS_FILE,
    TRAINING_INFO_FILE,
    WEIGHT_FILES,
)
from .run_settings import in_brief, settings_changed_since

logger = logging.getLogger(__name__)

#: what a run writes into its folder only once it has trained: the model, its export, its record
TRAINED_RUN_FILES = (TRAINING_INFO_FILE, TRAINER_STATE_FILE, "sentence-transformers", ADAPTER_FOLDER, *WEIGHT_FILES)
#: what ``save_model`` writes besides the weights (transformers' ``training_args.bin``, the processing class's files)
MODEL_SAVE_FILES = ("config.json", "generation_config.json", "training_args.bin", *TOKENIZER_FILES)
#: the rest of what a run's final save writes (``save_run``, transformers' ``save_metrics``): files of these names in
#: a new run's folder are someone's that the save would replace
SAVED_BY_A_RUN = (*MODEL_SAVE_FILES, "all_results.json", TRAIN_RESULTS_FILE, "eval_results.json", CURVES_FILE,
                  *RUN_LOADER_FILES)


def check_not_encoder_folder(output_dir, encoder: str | None) -> None:
    """Refuse an output folder that is, holds or lies inside the local folder of ``encoder`` (the model's base
    encoder; a Hub name is no folder here)."""
    if not encoder or not Path(encoder).expanduser().is_dir():
        return
    enc, out = Path(encoder).expanduser(), Path(output_dir).expanduser()
    if same_or_inside(out, enc) or same_or_inside(enc, out):
        raise OutputFolderError(f"output_dir {output_dir} is, holds or lies inside the encoder's folder {enc}: saving "
                                "there would overwrite or mix with the encoder's files. Choose another output_dir.",
                                fields=("output_dir",))


def checkpoint_holding(path: Path, run: Path) -> str | None:
    """The name of the checkpoint of the run folder ``run`` that ``path`` (resolved, inside ``run``) is or lies in,
    or None."""
    part = path.relative_to(run).parts[0] if path != run else ""
    return part if is_checkpoint_name(part) and (run / part).is_dir() else None


def runs_holding(path) -> list[Path]:
    """The folders of the training runs ``path`` lies inside, nearest first: folders holding checkpoints or a
    finished run's record (a run record alone may be a copy kept to rerun a run's settings)."""
    return [parent for parent in Path(path).expanduser().resolve().parents if (parent / TRAINING_INFO_FILE).is_file()
            or [n for n in training_run_files(parent) if n != RUN_RECORD_FILE]]


def check_not_inside_a_run(output_dir, flag: str = "output_dir", finished_run_ok: bool = False) -> None:
    """Refuse an output folder inside another training run's folder (module doc); ``flag`` names the path in the
    message (the field, or the command's flag). ``finished_run_ok`` (the export): a finished run's folder may hold
    it, outside the run's checkpoints (which that run's overwrite_output_dir removes), and so may the folder of an
    unfinished run that this process holds (the run exporting its own model as it finishes)."""
    out = Path(output_dir).expanduser().resolve()
    for parent in runs_holding(out):
        finished = (parent / TRAINING_INFO_FILE).is_file()
        if not finished_run_ok:
            raise OutputFolderError(f"{flag} {output_dir} lies inside the folder of another training run ({parent}): "
                                    "that run could delete it or resume from it. Choose a folder outside it.")
        part = checkpoint_holding(out, parent)
        if part:
            raise OutputFolderError(f"{flag} {output_dir} lies inside {part}, a checkpoint of the training run "
                                    f"{parent}: the run's checkpoint rotation (save_total_limit) or a start over "
                                    "would delete it with the checkpoint. Choose a folder outside the run.")
        if not finished and not held_here(parent):
            raise OutputFolderError(f"{flag} {output_dir} lies inside the folder of an unfinished training run "
                                    f"({parent}): files there would stop the same training command from resuming "
                                    "it. Choose a folder outside the run.")


def remove_killed_writes(output_dir, names: list[str] | None = None) -> None:
    """Remove ``names`` (paths relative to ``output_dir``; default: the temporary files of killed safetensors saves
    there and in its checkpoints, :func:`~hf_cse.checkpoints.killed_weights_writes`), said in one log line. Only the
    process that holds the folder calls it: no save of its is running, and none of another run can be."""
    out = Path(output_dir)
    names = killed_weights_writes(out) if names is None else names
    if names:
        remove_entries(out, names)
        logger.warning("removed %s in %s: left by a run that was killed while writing them", listing(names), out)


def check_no_names_taken_for_checkpoints(output_dir, flag: str = "output_dir") -> None:
    """Refuse an output folder holding a folder that transformers' checkpoint rotation takes for a checkpoint
    (:func:`~hf_cse.checkpoints.taken_for_checkpoints`): with ``save_total_limit`` the run would delete it."""
    taken = taken_for_checkpoints(Path(output_dir).expanduser())
    if taken:
        raise OutputFolderError(f"{flag} {output_dir} holds {listing(taken)}, which transformers' checkpoint rotation "
                                "takes for a checkpoint of the run and may delete: rename it (e.g. "
                                f"eval-{taken[0]}) or choose another {flag}.")


def check_not_another_model(output_dir, also: str = "") -> None:
    """Refuse a run into a folder holding a model another tool saved (its config.json names no hf_cse model, and no
    mark of a run lies beside it): the run's files have the same names, so it would replace that model, and removing
    "that run's files" to start over would delete it. ``also``: what the caller adds to the reason."""
    out = Path(output_dir)
    theirs = out.is_dir() and not run_marks(out) and other_model(out)
    if theirs:
        raise OutputFolderError(f"output_dir {out} holds another model ({theirs} config.json): a run there would "
                                f"replace its files{also}. Choose another output_dir.")


def check_new_run_folder(output_dir, overwrite: bool = False) -> None:
    """Refuse a new run into a folder that holds another model, or another run's trained model or checkpoints
    (module doc); with ``overwrite`` (``overwrite_output_dir``: the run's files go when training starts,
    :func:`hf_cse.start_over.start_over`) only another tool's model, whose files a start over would take for a
    run's."""
    out = Path(output_dir)
    if not out.is_dir() or claimed_by_command(out):
        return
    check_not_another_model(out, also=", overwrite_output_dir or not" if overwrite else "")
    if overwrite:
        return
    names = [p.name for p in out.iterdir()]
    trained = matching(names, TRAINED_RUN_FILES)
    if trained:
        raise OutputFolderError(f"output_dir {out} already holds a trained run ({listing(trained)}): choose another "
                                "output_dir, or pass overwrite_output_dir=True to start over (removes that run's "
                                "files, keeps others).")
    checkpoints = [n for n in names if is_checkpoint_name(n) and (out / n).is_dir()]
    if checkpoints:  # a diverged run's last checkpoint is not offered (hf_cse.divergence)
        raise OutputFolderError(f"output_dir {out} holds checkpoints of a run ({listing(checkpoints)}): "
                                f"{how_to_go_on(out, last_complete_checkpoint(out, say_skipped=False))}.")
    logs = out / TENSORBOARD_FOLDER
    if logs.is_dir() and any(logs.iterdir()):
        raise OutputFolderError(f"output_dir {out} holds the TensorBoard logs of an earlier run "
                                f"({TENSORBOARD_FOLDER}/: {listing(sorted(p.name for p in logs.iterdir()), 3)}) and no "
                                "checkpoint to resume: this run's logs would show beside them as one run's. Move or "
                                f"remove {TENSORBOARD_FOLDER}/ to start over, or choose another output_dir.")
    replaced = matching(names, SAVED_BY_A_RUN)
    if replaced:
        raise OutputFolderError(f"output_dir {out} holds {listing(replaced)}, which this run's final save writes: "
                                "they would be replaced. Move them out, or choose another output_dir.")


def check_resume_or_start_over(resume_from_checkpoint, output_dir, overwrite: bool) -> None:
    """``overwrite_output_dir`` starts a new run over an earlier one's files (its checkpoints too), and
    ``resume_from_checkpoint`` goes on from a checkpoint: not both (a command that claimed the folder has decided)."""
    if overwrite and resume_from_checkpoint and not claimed_by_command(Path(output_dir)):
        raise OutputFolderError(f"overwrite_output_dir starts a new run (removing the earlier run's files in "
                                f"{output_dir}) and resume_from_checkpoint={resume_from_checkpoint!r} goes on from a "
                                "checkpoint: drop one of them.",
                                fields=("overwrite_output_dir", "resume_from_checkpoint"))


def checkpoint_to_resume(resume_from_checkpoint, output_dir, method: str | None, trainer=None) -> str:
    """The checkpoint folder ``resume_from_checkpoint`` (``True``: the last complete one in ``output_dir``) names,
    checked: it exists, is complete and holds a model of ``method``; with ``trainer``, the one to resume it, the
    run's settings are compared too (:func:`check_same_run`), and its steps with ``max_steps``
    (:func:`~hf_cse.trainer_resume.check_steps_kept`, as the command line checks them)."""
    if resume_from_checkpoint is True:
        found = last_complete_checkpoint(output_dir)
        if found is None:
            raise OutputFolderError(f"resume_from_checkpoint=True: output_dir {output_dir} holds no complete "
                                    "checkpoint to resume from; train without it to start a new run.")
        checkpoint = Path(found)
    else:
        checkpoint = Path(resume_from_checkpoint)
        if not checkpoint.is_dir():
            raise OutputFolderError(f"resume_from_checkpoint {checkpoint} is not a folder; name a checkpoint folder "
                                    f"({CHECKPOINT_PREFIX}-N of an earlier run), or True for the last one in "
                                    "output_dir.")
        problem = checkpoint_problem(checkpoint)
        if problem:
            raise OutputFolderError(f"resume_from_checkpoint {checkpoint} is incomplete: {problem}. Name a complete "
                                    f"checkpoint (an earlier {CHECKPOINT_PREFIX}-N).")
    theirs = other_model(checkpoint)
    if theirs:
        raise OutputFolderError(f"resume_from_checkpoint {checkpoint} holds {theirs[:-2]} (saved by another tool, "
                                "not an hf_cse run): no hf_cse run resumes it. Train without resume_from_checkpoint "
                                "in another output_dir.")
    check_resumable(checkpoint, output_dir, chosen=resume_from_checkpoint is True)  # not a diverged run's
    saved = _saved_method(checkpoint)
    if method and saved and saved != method:
        raise OutputFolderError(f"resume_from_checkpoint {checkpoint} holds a {saved} model, and this trainer trains "
                                f"a {method} model: resume it with the {saved} method, or start a new run in another "
                                "output_dir.")
    if trainer is not None:
        model_config = trainer.accelerator.unwrap_model(trainer.model).config
        check_same_encoder(checkpoint, getattr(model_config, "encoder_config", None))
        check_same_run(checkpoint, trainer, named=resume_from_checkpoint is not True, output_dir=output_dir)
        from .trainer_resume import check_steps_kept, saved_steps  # transformers' Trainer: only where a run resumes

        # before a finished run's checkpoint is taken as it is (no step trained, no schedule built to check it)
        steps = saved_steps(checkpoint) or (None, 0)
        check_steps_kept(checkpoint, *steps, trainer.args.max_steps, trainer.args)
        total = trainer.args.max_steps if trainer.args.max_steps > 0 else steps[0]
        if holds_model_only(checkpoint) and (total is None or steps[1] < total):  # steps left to train
            raise OutputFolderError(f"resume_from_checkpoint {checkpoint} holds the model only (saved with "
                                    "save_only_model=True: no optimizer, scheduler or RNG state), so a run resumed "
                                    "from it would not go on as the run it was: start a new run in another "
                                    "output_dir (its weights load with from_pretrained), and keep resumable "
                                    "checkpoints without save_only_model.",
                                    fields=("resume_from_checkpoint", "save_only_model"))
        warn_finished_run_replaced(output_dir, checkpoint)
    return str(checkpoint)


def check_same_encoder(checkpoint, encoder_config) -> None:
    """Refuse a checkpoint whose model was trained from another encoder than the one ``encoder_config`` describes
    (:func:`~hf_cse.checkpoints.encoder_change`), before any of its weights are loaded into a model: the Trainer's
    resume and the command line's check before the model loads."""
    change = encoder_change(checkpoint, encoder_config)
    if change:
        base = trained_from(checkpoint)
        raise OutputFolderError(f"resume_from_checkpoint {checkpoint} was trained from another encoder ({change}): "
                                "its weights do not fit this model. Build the model from the encoder it was trained "
                                f"from{f' (model_name_or_path {base})' if base else ''} to resume it, or start a new "
                                "run (without resume_from_checkpoint) in another output_dir.",
                                fields=("resume_from_checkpoint", "output_dir", "model_name_or_path"))


def warn_finished_run_replaced(output_dir, checkpoint: Path) -> None:
    """A checkpoint resumed into a folder holding a finished run (its ``training_info.json``): going on (e.g. to a
    larger ``max_steps``) is how a finished run is trained further, and its model and record are replaced when the
    resumed run finishes -- said in one log line."""
    out = Path(output_dir)
    if not (out / TRAINING_INFO_FILE).is_file():
        return
    step = finished_run_step(out)
    logger.warning("output_dir %s holds a finished run%s: resuming %s, this run replaces its model and record "
                   "(%s) when it finishes", out, f" (trained to step {step})" if step is not None else "",
                   checkpoint, TRAINING_INFO_FILE)


#: settings a resumed run takes from the checkpoint's optimizer and scheduler state whatever it is given (torch's
#: ``load_state_dict`` brings back each parameter group's hyperparameters), or whose state loads into no other
#: optimizer (``optim``)
RESTORED_WITH_THE_OPTIMIZER = ("learning_rate", "weight_decay", "adam_beta1", "adam_beta2", "adam_epsilon", "optim")


#: settings that define which weights a checkpoint holds: with another value they load into no model these build
SHAPING_THE_WEIGHTS = ("method", "lora_r", "lora_target_modules", "do_mlm")


def cannot_go_on_with(changed: list[str], checkpoint, output_dir, flag_prefix: str = "",
                      args=None, encoder_config=None) -> str | None:
    """Why ``checkpoint`` named by its path could not go on with the ``changed`` settings
    (:func:`~hf_cse.run_settings.setting_differences`), or None: a setting that shapes its weights
    (:data:`SHAPING_THE_WEIGHTS`, or the encoder, ``encoder_config`` where known: :func:`check_same_encoder`) or that
    its optimizer and scheduler state bring back changed, later checkpoints in ``output_dir`` would be overwritten, or
    the resuming ``TrainingArguments`` ``args`` change the learning-rate schedule of its steps
    (:func:`~hf_cse.trainer_resume.schedule_change`). A refusal of the checkpoint with other settings offers to name
    it only where this is None (else that way out is refused in turn). ``flag_prefix``: ``"--"`` where the settings
    are named as flags."""
    names = [c.split(":", 1)[0] for c in changed]
    shaping = [name for name in names if name in SHAPING_THE_WEIGHTS]
    if shaping:
        return (f"{' and '.join(flag_prefix + name for name in shaping)} cannot change when resuming (the "
                "checkpoint's weights would not load into the model built with the new value)")
    encoder = encoder_change(checkpoint, encoder_config) if "encoder" in names else None
    if encoder:
        return (f"the checkpoint was trained from another encoder ({encoder}), whose weights do not fit the new "
                "one's model")
    restored = [name for name in names if name in RESTORED_WITH_THE_OPTIMIZER]
    if restored:
        return (f"{' and '.join(flag_prefix + name for name in restored)} cannot change when resuming (the "
                "checkpoint's optimizer and scheduler state bring back its run's)")
    later = later_checkpoints(checkpoint, output_dir) if output_dir is not None else []
    if later:
        return (f"going on from it with other settings would overwrite the later checkpoints "
                f"({listing([p.name for p in later])})")
    if args is not None:
        from .trainer_resume import checkpoint_schedule_change  # transformers' Trainer: only where a run resumes

        return checkpoint_schedule_change(checkpoint, args)
    return None


class OtherRunsCheckpointError(OutputFolderError):
    """``resume_from_checkpoint=True`` found the last checkpoint of a run with other settings (:func:`check_same_run`):
    ``checkpoint``, the ``changed`` settings and why naming it would be refused too (``blocked``, or None), for a
    caller that words the refusal in its own terms (the command line: hf_cse.cli.train)."""

    def __init__(self, message: str, *, checkpoint: Path, changed: list[str], blocked: str | None):
        super().__init__(message)
        self.checkpoint, self.changed, self.blocked = checkpoint, changed, blocked


def check_same_run(checkpoint: Path, trainer, named: bool, output_dir=None) -> None:
    """Refuse to continue the run of ``checkpoint`` with settings that define another run (module doc), unless the
    checkpoint was ``named`` by its path: then the run goes on with them (not where ``output_dir`` holds later
    checkpoints, nor with another learning rate or weight decay), and one log line says what changed."""
    changed = settings_changed_since(checkpoint, trainer)
    if not named:  # named, it goes on with them: resume_processes.warn_other_world_size says what that changes
        from .resume_processes import processes_change  # transformers' arguments: only where a run resumes

        changed += processes_change(checkpoint, trainer.args)
    restored = [c for c in changed if c.split(":", 1)[0] in RESTORED_WITH_THE_OPTIMIZER]
    if restored and named:
        raise OutputFolderError(f"resume_from_checkpoint {checkpoint}: {'; '.join(restored)} cannot change when "
                                "resuming: the checkpoint's optimizer and scheduler state bring back its run's (the "
                                "new value would be logged and recorded, not used; another optimizer's state does not "
                                "load). Resume with its run's value, or "
                                "start a new run in another output_dir.")
    shaping = [c for c in changed if c.split(":", 1)[0] in SHAPING_THE_WEIGHTS]
    if shaping and named:  # its weights would load into no model these settings build (missing / unexpected keys)
        raise OutputFolderError(f"resume_from_checkpoint {checkpoint}: {'; '.join(shaping)} cannot change when "
                                "resuming: the checkpoint's weights would not load into the model built with the new "
                                "value. Build the model with its run's value to resume it, or start a new run in "
                                "another output_dir.", fields=("resume_from_checkpoint", "output_dir"))
    if named and output_dir is not None and not changed:
        warn_later_checkpoints_overwritten(checkpoint, output_dir)
    if changed and named:
        if output_dir is not None:
            check_no_later_checkpoints(checkpoint, output_dir)
        logger.warning("resuming %s with other settings than its run's (%s): going on with these", checkpoint,
                       "; ".join(changed))
    elif changed:
        config = trainer.accelerator.unwrap_model(trainer.model).config
        blocked = cannot_go_on_with(changed, checkpoint, output_dir, args=trainer.args,
                                    encoder_config=getattr(config, "encoder_config", None))
        ways = (f"{blocked}: resume it with its run's settings, or start a new run in another output_dir" if blocked
                else f"resume it with its run's settings, pass resume_from_checkpoint='{checkpoint}' to go on from "
                     "it with these settings, or start a new run in another output_dir")
        raise OtherRunsCheckpointError(f"resume_from_checkpoint=True: {checkpoint} is a checkpoint of a run with "
                                       f"other settings ({in_brief(changed, 240)}): {ways}.", checkpoint=checkpoint,
                                       changed=changed, blocked=blocked)


def _saved_method(checkpoint: Path) -> str | None:
    return (saved_config(checkpoint) or {}).get("method")
