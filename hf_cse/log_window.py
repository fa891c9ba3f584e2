"""The logging window across a checkpoint: a resumed run logs at every logging step what the uninterrupted run logs.

Between two logging steps transformers' loop sums the training loss on the device and divides the sum, at the next
logging step, by the steps since the last one (:func:`hf_cse.seams.logging_window`); hf_cse sums its metrics the same
way (:class:`hf_cse.metrics.MetricAccumulator`). A checkpoint between two logging steps kept neither sum, so a
resumed run began both afresh at the checkpoint's step: its first logged loss and metrics averaged the steps since
the resume only, where the uninterrupted run's averaged the whole window.

:class:`LogWindow` saves each process's sums and the window's last logging step beside its RNG file, and a resumed run
takes them up before its first step. A checkpoint without them (saved by an earlier hf_cse, or by another number of
processes) resumes as before, and one log line says that the first values logged cover the steps since the resume.
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from . import seams
from .distributed import on_every_process
from .metrics import MetricAccumulator
from .writing import replace_atomically

logger = logging.getLogger(__name__)

LOG_WINDOW_FILE = "log_window_state"


def log_window_file(folder: str | Path, process_index: int, world_size: int) -> Path:
    """Where a checkpoint keeps one process's logging window (one file per process, as transformers' RNG file)."""
    name = LOG_WINDOW_FILE if world_size <= 1 else f"{LOG_WINDOW_FILE}_{process_index}"
    return Path(folder) / f"{name}.pth"


def logged_loss_sum(log_history, up_to: int) -> tuple[float, int]:
    """The training losses of the steps up to the last logging step at or before ``up_to`` summed, from the logged
    means (each ``loss`` the mean of its window: the steps since the logging step before), and that step."""
    total, last = 0.0, 0
    for entry in log_history:
        step = entry.get("step", 0)
        if "loss" in entry and last < step <= up_to:
            total, last = total + entry["loss"] * (step - last), step
    return total, last


def loss_before(checkpoint, state, args) -> float | None:
    """The training losses of every step up to ``checkpoint``'s (its trainer state ``state``) summed: the logged
    windows' and the running sum of the window open at the checkpoint, saved with it by every process (a logged loss
    is the processes' mean, so the open window's is too); None where a process's sum was not saved for ``args``'
    number of processes (the losses of its steps are known to no one)."""
    total, last = logged_loss_sum(state.log_history, state.global_step)
    if last == state.global_step:
        return total
    sums = []
    for process in range(args.world_size):
        path = log_window_file(checkpoint, process, args.world_size)
        saved = torch.load(path, weights_only=True) if path.is_file() else None
        if saved is None or saved["world_size"] != args.world_size or saved["last_logged_step"] != last:
            return None
        sums.append(float(saved["loss_sum"]))
    return total + sum(sums) / len(sums)


class LogWindow:
    """The logging window of a checkpoint, saved with it and taken up by the run that resumes it."""

    def __init__(self):
        self._saved: dict | None = None  # resuming: the checkpoint's window, until the first epoch starts

    def save(self, trainer, metrics: MetricAccumulator, folder: str | Path) -> None:
        """In ``folder``, a checkpoint being written: this process's sums since the last logging step."""
        loss_sum, last_logged = seams.logging_window(trainer)
        saved = {"loss_sum": loss_sum.detach().float().cpu(), "last_logged_step": int(last_logged),
                 "world_size": trainer.args.world_size, "metrics": metrics.state()}
        replace_atomically(log_window_file(folder, trainer.args.process_index, trainer.args.world_size),
                           lambda partial: torch.save(saved, partial))

    def resume_from(self, checkpoint: str | None, state, args) -> None:
        """Read the window of ``checkpoint`` (None: a new run), whose trainer state is ``state``, for :meth:`take_up`;
        without one, say once what the first logged values cover."""
        self._saved = None
        if not checkpoint or state is None:
            return
        path = log_window_file(checkpoint, args.process_index, args.world_size)
        saved = torch.load(path, weights_only=True) if path.is_file() else None
        mine = saved is not None and saved["world_size"] == args.world_size
        # taken up by every process or by none: metrics reduced over a restored window and an empty one are NaN
        if on_every_process(args, mine):
            self._saved = saved
            return
        last = max((entry["step"] for entry in state.log_history if "loss" in entry), default=0)
        if state.global_step > last and args.process_index == 0:
            files = sorted(Path(checkpoint).glob(f"{LOG_WINDOW_FILE}*.pth"))  # another process count's, or a part
            saved = saved if saved is not None or not files else torch.load(files[0], weights_only=True)
            saved_by = saved["world_size"] if saved is not None else 0
            why = "it predates hf_cse's saving of it" if not saved_by else \
                "the window of a process of the run is missing" if saved_by == args.world_size else \
                (f"it was saved by {saved_by} process{'' if saved_by == 1 else 'es'}, not {args.world_size}: each "
                 "process's window is its own")
            steps = f"steps {last + 1}-{state.global_step}" if last + 1 < state.global_step else f"step {last + 1}"
            logger.warning("%s holds no running loss of %s (%s): the first loss and metrics logged after the resume "
                           "average only the steps from %d on", checkpoint, steps, why, state.global_step + 1)

    def take_up(self, trainer, metrics: MetricAccumulator) -> None:
        """Before the resumed run's first step (its loop has started a window of its own): go on with the saved one."""
        if self._saved is None:
            return
        saved, self._saved = self._saved, None
        seams.continue_logging_window(trainer, saved["loss_sum"].to(trainer.args.device), saved["last_logged_step"])
        metrics.load_state(saved["metrics"], trainer.args.device)
