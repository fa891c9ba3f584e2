"""What a resumed run takes over from its checkpoint besides the weights, made to agree with the arguments of the
trainer that resumes it (a mixin of :class:`hf_cse.trainer.ContrastiveTrainer`):

* the learning-rate schedule: the checkpoint's scheduler state brings back its step count, and the optimizer the
  rate of the checkpoint's step, computed for the checkpoint's run's total of steps; a run resumed with another total
  (``max_steps``, or ``num_train_epochs``) whose schedule follows the total (``linear``, ``cosine``, a warmup given as
  a ratio, ...) would train its first step at the old schedule's rate (0 at the end of a finished linear run) and the
  rest on a schedule the steps already trained did not follow. It is refused before any step, in one line naming the
  two ways out; a schedule that does not follow the total (``constant``, ``constant_with_warmup`` with a warmup in
  steps, ``inverse_sqrt``) goes on. A checkpoint past the total asked (or past ``num_train_epochs``) is refused
  whatever the schedule: a finished run's would be kept as it is and recorded as a run of fewer steps
  (:func:`check_steps_kept`, the command line's rule too).
* the checkpoint selection: transformers restores ``best_metric`` and the best checkpoint from the checkpoint's
  ``trainer_state.json`` as they were chosen, by the checkpoint's run's ``metric_for_best_model`` and
  ``greater_is_better``. A run resumed with another metric (or direction), which continues the same run (it is not a
  setting that defines the run, :mod:`hf_cse.run_settings`), would compare its evaluations with a score of another
  metric and never count the evaluations before the checkpoint. The selection is made again from the evaluations the
  state logged (``log_history``), under the resuming arguments, among the checkpoints still in the output folder (a
  checkpoint rotated away by ``save_total_limit`` cannot be kept), and one log line says so (and names a step that
  scored best but whose checkpoint is gone).
* the dev data: each checkpoint records what the run scores and a hash of its data
  (:func:`~hf_cse.evaluation.evaluators.dev_data_fingerprint`, in :data:`~hf_cse.run_files.RUN_SETTINGS_FILE`). A run
  resumed on other dev data (another or an edited ``eval_file``, ...) continues the same run (the dev data is not a
  setting that defines it), but the scores logged before the checkpoint are of the earlier data: the best checkpoint
  is chosen again from the evaluations on the new data only, the first being the checkpoint's own, scored again as
  the resumed run starts (``eval_on_start``), and one log line says so; the score before training is the model given
  to the resumed trainer scored on the new data (:mod:`hf_cse.trainer_evaluation`), not step 0's. A checkpoint saved
  before the dev data was recorded resumes as before.
* the mean training loss: transformers' ``train_loss`` averages the steps since the resume; the steps before are
  summed from the checkpoint (its logged windows and the window open at it, :func:`~hf_cse.log_window.loss_before`),
  so the run records the mean over all its steps, as the uninterrupted run does. A checkpoint without that open
  window records the mean of the steps after the resume under its own name (:data:`RESUMED_STEPS_LOSS`). A run
  finished from its last checkpoint records the run's loss, ``total_flos`` and, where its stopped save wrote them,
  its speed metrics.
"""

from __future__ import annotations

import logging
import math
import operator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transformers import Trainer, TrainerState
from transformers.trainer_utils import TrainOutput

from . import seams
from .checkpoints import TRAINER_STATE_FILE, read_json
from .log_window import loss_before
from .output_folder import OutputFolderError
from .run_files import CHECKPOINT_PREFIX, DEV_AND_SELECTION, DEV_DATA, RUN_SETTINGS_FILE

logger = logging.getLogger(__name__)

#: the most steps at which two schedules are compared (evenly spaced, the checkpoint's step among them)
COMPARED_STEPS = 2000


def schedule_factors(args, total: int, steps: list[int]) -> list[float] | None:
    """The factors of the learning rate ``args``' scheduler gives after each of ``steps`` (the rate of the next step
    is ``learning_rate`` times it), for a run of ``total`` optimizer steps, as the Trainer builds that scheduler; None
    for a scheduler that is no function of the step (``reduce_lr_on_plateau``)."""
    import torch
    from transformers import get_scheduler

    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    scheduler = get_scheduler(args.lr_scheduler_type, optimizer=optimizer, num_training_steps=total,
                              num_warmup_steps=args.get_warmup_steps(total),
                              scheduler_specific_kwargs=args.lr_scheduler_kwargs)
    factor = getattr(scheduler, "lr_lambdas", [None])[0]
    return None if factor is None else [float(factor(step)) for step in steps]


def schedule_change(before: int | None, last: int, total: int, args) -> str | None:
    """Why a checkpoint at step ``last`` of a run of ``before`` optimizer steps cannot go on as a run of ``total``
    under ``args``' learning-rate schedule (module doc), or None: the same total, no step trained, or a schedule whose
    rates of the steps so far do not follow the total."""
    if not before or before == total or last <= 0:
        return None
    count = min(last + 1, COMPARED_STEPS)
    steps = sorted({round(i * last / max(count - 1, 1)) for i in range(count)})
    then, now = schedule_factors(args, before, steps), schedule_factors(args, total, steps)
    if then is None or all(math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12) for a, b in zip(then, now, strict=True)):
        return None
    scheduler = getattr(args.lr_scheduler_type, "value", args.lr_scheduler_type)
    return (f"its run trains {before} steps and this one {total} (max_steps or num_train_epochs changed), and the "
            f"{scheduler} learning-rate schedule follows the total: the first step after step {last} would take the "
            "old schedule's rate and the rest a schedule the steps trained did not follow")


def check_schedule_kept(checkpoint, before: int | None, last: int, total: int, args) -> None:
    """Refuse to resume ``checkpoint``, at step ``last`` of a run of ``before`` optimizer steps, for a run of
    ``total`` when the learning-rate schedule of its steps so far changes with that total (module doc)."""
    why = schedule_change(before, last, total, args)
    if why:
        raise OutputFolderError(f"resume_from_checkpoint {checkpoint}: {why}. Resume with the run's total "
                                f"(max_steps={before}), or start a new run from the checkpoint's weights in another "
                                "output_dir (a constant schedule may change its total).", fields=("max_steps",))


def check_steps_kept(checkpoint, before: int | None, last: int, total: int, args) -> None:
    """Refuse to resume ``checkpoint``, at step ``last`` of a run of ``before`` optimizer steps, for a run of
    ``total`` (``max_steps``; 0 or less: not known yet, nothing checked): its schedule changes
    (:func:`check_schedule_kept`), or the checkpoint lies past ``total`` (its model would be kept, recorded and
    exported as a run of fewer steps than it trained). The command line and the trainer both check it here."""
    if total <= 0:  # counted in epochs: the total of steps follows the data (the trainer checks it once counted)
        _check_epochs_kept(checkpoint, args)
        return
    check_schedule_kept(checkpoint, before, last, total, args)
    if total < last:
        raise OutputFolderError(f"resume_from_checkpoint {checkpoint} is at step {last}, past max_steps {total}: "
                                f"give max_steps={last} or more to go on from it, or an earlier checkpoint.",
                                fields=("resume_from_checkpoint", "max_steps"))


def _check_epochs_kept(checkpoint, args) -> None:
    """Refuse a checkpoint past ``num_train_epochs`` before the data is counted: a finished run's is taken as it is
    (no step trained, so no total of steps is ever built to compare with) and would be recorded as the run of fewer
    epochs asked."""
    state = read_json(Path(checkpoint) / TRAINER_STATE_FILE)[0]
    epoch = state.get("epoch") if isinstance(state, dict) else None
    if isinstance(epoch, (int, float)) and epoch > args.num_train_epochs * (1 + 1e-6):
        raise OutputFolderError(f"resume_from_checkpoint {checkpoint} is at epoch {epoch:g}, past num_train_epochs "
                                f"{args.num_train_epochs:g}: give num_train_epochs={epoch:g} or more to go on from it, "
                                "or an earlier checkpoint.", fields=("resume_from_checkpoint", "num_train_epochs"))


def saved_steps(checkpoint) -> tuple[int, int] | None:
    """The total of optimizer steps of the run of the checkpoint folder ``checkpoint`` and the step it was saved
    at, from its ``trainer_state.json`` (None where it holds neither)."""
    state = read_json(Path(checkpoint) / TRAINER_STATE_FILE)[0]
    if not isinstance(state, dict) or not isinstance(state.get("max_steps"), int):
        return None
    step = state.get("global_step")
    return state["max_steps"], step if isinstance(step, int) else 0


def checkpoint_schedule_change(checkpoint, args) -> str | None:
    """:func:`schedule_change` of the checkpoint folder ``checkpoint`` for a run of ``args``, before any trainer is
    built: known only where ``args.max_steps`` gives the total (a total of epochs follows the data; the trainer
    checks it once the data is counted)."""
    steps = saved_steps(checkpoint) if args.max_steps > 0 else None
    return schedule_change(*steps, args.max_steps, args) if steps else None


def _evaluations(state: TrainerState, key: str, since: int = 0) -> list[tuple[int, float]]:
    """The evaluations of ``key`` transformers' selection compared, in order: the first logged at each step after
    step 0 up to the state's step (the score before the first step, and the one a resumed run logs again at its
    checkpoint's step, are no candidates), among the ``log_history`` entries from ``since`` on."""
    seen: dict[int, float] = {}
    for entry in state.log_history[since:]:
        step = entry.get("step", 0)
        if key in entry and 0 < step <= state.global_step and step not in seen:
            seen[step] = float(entry[key])
    return list(seen.items())


def _best(evaluations: list[tuple[int, float]], greater_is_better: bool) -> tuple[int | None, float | None]:
    """The step and score transformers' selection keeps of ``evaluations`` (a later score must beat it strictly)."""
    better = operator.gt if greater_is_better else operator.lt
    step, best = None, -math.inf if greater_is_better else math.inf
    for at, value in evaluations:
        if better(value, best):
            step, best = at, value
    return step, (best if step is not None else None)


def _keep_best(state: TrainerState, evaluations: list[tuple[int, float]], greater_is_better: bool,
               folder: Path) -> tuple[int | None, float | None]:
    """Make the best of ``evaluations`` whose checkpoint is still in ``folder`` the best of ``state``; returns its
    step and score (None: none is left)."""
    kept = [(at, v) for at, v in evaluations if (folder / f"{CHECKPOINT_PREFIX}-{at}").is_dir()]
    step, value = _best(kept, greater_is_better)
    state.best_metric, state.best_global_step = value, step
    state.best_model_checkpoint = str(folder / f"{CHECKPOINT_PREFIX}-{step}") if step else None
    return step, value


def reselect_best(state: TrainerState, args, output_dir, checkpoint: str) -> str | None:
    """Where the best checkpoint of ``state`` (resumed from ``checkpoint``) was not chosen by ``args``'
    ``metric_for_best_model`` and ``greater_is_better``, choose it again under them (module doc), updating ``state``;
    returns the log line saying so, or None where the selection stands."""
    metric = args.metric_for_best_model
    if not metric:
        return None
    key = metric if metric.startswith("eval_") else f"eval_{metric}"
    evaluations = _evaluations(state, key)
    step, value = _best(evaluations, bool(args.greater_is_better))
    if state.best_metric == value and (state.best_global_step is None or state.best_global_step == step):
        return None  # the same selection: transformers' own replay of the same evaluations
    folder = Path(output_dir)
    old = (f"best_metric {state.best_metric:.6g} at step {state.best_global_step}" if state.best_metric is not None
           else "no best_metric")
    kept_step, kept_value = _keep_best(state, evaluations, bool(args.greater_is_better), folder)
    direction = "greater" if args.greater_is_better else "smaller"
    chosen = (f"{CHECKPOINT_PREFIX}-{kept_step} ({key} {kept_value:.6g})" if kept_step
              else "none (no evaluated step's checkpoint is left: the evaluations from here on choose)")
    gone = (f"; step {step} scored best ({value:.6g}) but its checkpoint is gone (rotated away by "
            "save_total_limit), so it cannot be kept" if step is not None and step != kept_step else "")
    return (f"resuming {checkpoint}: its best checkpoint was chosen by another metric_for_best_model or "
            f"greater_is_better ({old}); chosen again by {key} ({direction} is better) among the {len(evaluations)} "
            f"evaluations logged whose checkpoints are still in {folder}: {chosen}{gone}")


@dataclass(frozen=True)
class DevDataChange:
    """The dev data a resumed run scores (``now``) is not what its checkpoint's run scored (``then``); the entries of
    the state's ``log_history`` from ``logged_before`` on are the resumed run's (those before, the checkpoint's)."""

    then: str
    now: str
    logged_before: int


def recorded_dev_data(checkpoint) -> str | None:
    """The dev data the run of ``checkpoint`` scored, as recorded in it (None: not recorded, an older hf_cse's)."""
    saved = read_json(Path(checkpoint) / RUN_SETTINGS_FILE)[0]
    dev = saved.get(DEV_AND_SELECTION) if isinstance(saved, dict) else None
    recorded = dev.get(DEV_DATA) if isinstance(dev, dict) else None
    return recorded if isinstance(recorded, str) else None


def dev_data_change(checkpoint, state: TrainerState, now: str | None) -> DevDataChange | None:
    """How the dev data ``now`` differs from what the run of ``checkpoint`` (its ``state`` as saved) scored, or None:
    the same, or either unknown."""
    then = recorded_dev_data(checkpoint)
    return DevDataChange(then, now, len(state.log_history)) if then and now and then != now else None


def restart_selection(state: TrainerState, args, output_dir, checkpoint: str, change: DevDataChange) -> str:
    """The dev data changed since ``checkpoint`` (module doc): the best checkpoint of ``state`` is chosen again by
    ``args``' metric from the evaluations logged since the resume (``change.logged_before`` on: the checkpoint scored
    again on the new data), among the checkpoints in the output folder, updating ``state``; returns the log line."""
    metric = args.metric_for_best_model
    folder = Path(output_dir)
    old = (f"{CHECKPOINT_PREFIX}-{state.best_global_step} ({state.best_metric:.6g})"
           if state.best_metric is not None and state.best_global_step else None)
    line = (f"resuming {checkpoint}: the dev data changed since its run's checkpoint ({change.then} then, "
            f"{change.now} now), so the scores logged before are of other data")
    if not metric:
        return line
    key = metric if metric.startswith("eval_") else f"eval_{metric}"
    new = _evaluations(state, key, since=change.logged_before)  # the first: the checkpoint scored again
    step, value = _keep_best(state, new, bool(args.greater_is_better), folder)
    chosen = (f"{CHECKPOINT_PREFIX}-{step} ({key} {value:.6g} on the new data) until a later evaluation beats it"
              if step else "the evaluations on the new data from here on")
    return (f"{line}: the best checkpoint{f', {old} on the earlier data,' if old else ''} is chosen again by {key} "
            f"from the evaluations on the new data only: {chosen}")


#: a resumed run's record of the mean loss of its steps after the resume, where the losses of the steps before are
#: not known (its checkpoint kept no running loss of the window open at it): ``train_loss`` would not be the run's
RESUMED_STEPS_LOSS = "train_loss_of_the_steps_after_resume"


def finished_run_metrics(output_dir, state: TrainerState) -> dict[str, float]:
    """The speed metrics (``train_runtime``, ...) the run of ``state``, at its last step, logged as it finished, from
    the ``trainer_state.json`` its ``save_run`` wrote in ``output_dir`` before it was stopped: that state's step and
    logged losses are ``state``'s (another run's are not carried over); none where it is not there."""
    saved = read_json(Path(output_dir) / TRAINER_STATE_FILE)[0]
    history = saved.get("log_history") if isinstance(saved, dict) else None
    if not isinstance(history, list) or not history or saved.get("global_step") != state.global_step:
        return {}
    losses = lambda log: [(e.get("step"), e["loss"]) for e in log if isinstance(e, dict) and "loss" in e]  # noqa: E731
    final = history[-1]
    if losses(history) != losses(state.log_history) or not isinstance(final, dict) or "train_runtime" not in final:
        return {}
    return {k: v for k, v in final.items() if k.startswith("train_") and k != "train_loss"}


class ResumedRun(Trainer):
    """A mixin before ``Trainer``: :meth:`_resume_from` before ``Trainer.train`` resumes a checkpoint,
    :meth:`_take_up_resumed` before the first step (``on_epoch_start``). It reads the trainer's ``_log_window``,
    ``_metrics`` and ``dev_data_identity`` (:class:`~hf_cse.trainer_evaluation.DevScoring`), and sets
    ``_dev_data_change``, which that mixin reads."""

    _resumed: tuple[str, TrainerState] | None = None
    _dev_data_change: DevDataChange | None = None
    _loss_before: tuple[float | None, int] | None = None  # resumed: the losses summed before, and the step

    def _finished_from(self, checkpoint: str, state: TrainerState) -> TrainOutput:
        """A checkpoint that holds every step of the run: its model (the best, with load_best_model_at_end) and
        state taken over, no step trained."""
        logger.info("%s holds every step of the run (%d of %d): loaded as it is, no further step", checkpoint,
                    state.global_step, state.max_steps)
        seams.load_checkpoint(self, checkpoint)  # transformers' own loader (peft adapters, sharded states)
        self.state = state
        self._dev_data_change = dev_data_change(checkpoint, state, self.dev_data_identity)
        best = state.best_model_checkpoint
        if self.args.load_best_model_at_end and best and Path(best).is_dir():
            seams.load_best_model(self)
        # the run's final metrics, where known: its loss from the checkpoint's, its runtime from its own save
        metrics = finished_run_metrics(self.args.output_dir, state)
        if state.total_flos:
            metrics["total_flos"] = float(state.total_flos)
        before = loss_before(checkpoint, state, self.args)
        if before is not None and state.global_step > 0:
            metrics["train_loss"] = before / state.global_step
        metrics["epoch"] = float(state.epoch or 0.0)
        return TrainOutput(state.global_step, metrics.get("train_loss", 0.0), metrics)

    def _whole_run_loss(self, output: TrainOutput) -> TrainOutput:
        """``output`` of a resumed run with ``train_loss`` the mean over every step of the run, as the uninterrupted
        run records it (transformers': over the steps since the resume); where the losses of the steps before are
        not known, their mean under :data:`RESUMED_STEPS_LOSS` instead, said in a log line. The last log entry too."""
        known, self._loss_before = self._loss_before, None
        if known is None or "train_loss" not in output.metrics or output.global_step <= known[1]:
            return output
        before, resumed_at = known
        metrics = dict(output.metrics)
        resumed_mean = metrics.pop("train_loss")
        if before is None:
            new = {RESUMED_STEPS_LOSS: resumed_mean}
            if self.is_world_process_zero():
                logger.warning("train_loss: the checkpoint resumed at step %d kept no running loss of the logging "
                               "window open at it, so the run's mean loss is not known; recorded instead: %s, over "
                               "steps %d-%d", resumed_at, RESUMED_STEPS_LOSS, resumed_at + 1, output.global_step)
        else:
            new = {"train_loss": (before + resumed_mean * (output.global_step - resumed_at)) / output.global_step}
        metrics.update(new)
        final = self.state.log_history[-1] if self.state.log_history else {}
        if final.get("train_loss") == resumed_mean:  # transformers' log of the final metrics
            del final["train_loss"]
            final.update(new)
        return TrainOutput(output.global_step, new.get("train_loss", resumed_mean), metrics)

    def _resume_from(self, checkpoint: str | None, state: TrainerState | None) -> None:
        """Before ``Trainer.train``: the checkpoint to resume (None: a new run) and its trainer state."""
        self._log_window.resume_from(checkpoint, state, self.args)
        self._resumed = (str(checkpoint), state) if checkpoint and state is not None else None
        # the losses of the steps before the resume, for the run's train_loss (_whole_run_loss)
        self._loss_before = (loss_before(checkpoint, state, self.args), state.global_step) if self._resumed else None
        self._dev_data_change = dev_data_change(checkpoint, state, self.dev_data_identity) if self._resumed else None

    def set_initial_training_values(self, args, dataloader) -> Any:
        values = super().set_initial_training_values(args, dataloader)
        if self._resumed is not None:
            checkpoint, state = self._resumed  # the run's total of steps: the last value
            check_steps_kept(checkpoint, state.max_steps, state.global_step, values[-1], args)
        return values

    def _take_up_resumed(self) -> None:
        """Before the resumed run's first step, its state loaded: the logging window, the checkpoint selection."""
        self._log_window.take_up(self, self._metrics)
        if self._resumed is None:
            return
        checkpoint, _ = self._resumed
        self._resumed = None
        change = self._dev_data_change
        line = (restart_selection(self.state, self.args, self.args.output_dir, checkpoint, change) if change
                else reselect_best(self.state, self.args, self.args.output_dir, checkpoint))
        if line and self.is_world_process_zero():
            logger.warning(line)
