"""The checkpoints of an output folder past one named to resume (:mod:`hf_cse.trainer_folder` decides what to do
with them: refused with other settings, said with the run's own), and a named checkpoint that went away between
the folder check and its load."""

from __future__ import annotations

import logging
from pathlib import Path

from .checkpoints import CHECKPOINT_PREFIX, checkpoint_problem, checkpoint_step
from .finite_weights import LOOKED_BACK, first_finite
from .output_folder import OutputFolderError, listing

logger = logging.getLogger("hf_cse.trainer_folder")  # said as the folder checks' own lines


def check_no_later_checkpoints(checkpoint: Path, output_dir) -> None:
    """``output_dir`` holds no checkpoint past the step of ``checkpoint``, the one to resume with other settings:
    the run would overwrite them one by one (and leave the rest beside its own: two runs in one folder), and a
    relaunch would resume the wrong one. Incomplete ones (a save cut short) hold nothing to resume and are not
    counted: the fix named was to resume from one of them."""
    step = checkpoint_step(checkpoint)
    later = [p for p in later_checkpoints(checkpoint, output_dir) if checkpoint_problem(p) is None]
    if later:
        raise OutputFolderError(f"resume_from_checkpoint {checkpoint}: output_dir {output_dir} holds later "
                                f"checkpoints ({listing([p.name for p in later])}), which going on from step {step} "
                                f"with other settings there would overwrite one by one. Resume from "
                                f"{later[-1]}, or go on from {checkpoint.name} in another output_dir.")


def warn_later_checkpoints_overwritten(checkpoint: Path, output_dir) -> None:
    """Said where ``checkpoint``, named to go on from with its run's settings, lies before complete checkpoints of
    ``output_dir``: going on trains their steps again and overwrites them one by one (what naming an earlier
    checkpoint is for, e.g. to train past a spike again; resume_from_checkpoint=True would go on from the last)."""
    later = [p for p in later_checkpoints(checkpoint, output_dir) if checkpoint_problem(p) is None]
    if not later:
        return
    finite, diverged = first_finite(later[::-1], LOOKED_BACK + 1)  # read for this line alone
    names = ", ".join(diverged)
    instead = (f"resume_from_checkpoint=True goes on from {later[-1].name} instead" if not diverged else
               f"resume_from_checkpoint={finite!r} goes on from the last finite one instead; {names} after it "
               "diverged" if finite else f"{names} {'hold' if len(diverged) > 1 else 'holds'} weights that are not "
               "finite: the run diverged after this checkpoint")
    logger.warning("resuming %s: output_dir %s holds later checkpoints (%s), which this run trains again and "
                   "overwrites one by one as it reaches their steps (%s)", checkpoint, output_dir,
                   listing([p.name for p in later]), instead)


def checkpoint_gone(checkpoint) -> OutputFolderError | None:
    """The one line for a failure while ``checkpoint`` (the checkpoint resumed, checked complete before) loaded, where
    it is gone or incomplete by now: removed meanwhile (another run's save_total_limit, by hand), which transformers
    reports with a traceback of its own. None where it is still whole (the failure is another)."""
    if not checkpoint or checkpoint is True:
        return None
    problem = "it is gone" if not Path(checkpoint).is_dir() else checkpoint_problem(Path(checkpoint))
    if problem is None:
        return None
    return OutputFolderError(f"resume_from_checkpoint {checkpoint} was complete when the run started, and no longer "
                             f"is ({problem}): something removed it meanwhile (another run's save_total_limit, or by "
                             "hand). Name a checkpoint that is there, or resume_from_checkpoint=True for the last "
                             "one in output_dir.", fields=("resume_from_checkpoint",))


def later_checkpoints(checkpoint, output_dir) -> list[Path]:
    """The checkpoint folders of ``output_dir`` past the step of ``checkpoint`` (complete or not), by step."""
    step = checkpoint_step(Path(checkpoint))
    return sorted((p for p in Path(output_dir).glob(f"{CHECKPOINT_PREFIX}-*")
                   if p.is_dir() and checkpoint_step(p) > step >= 0), key=checkpoint_step)
