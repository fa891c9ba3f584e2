"""The number of processes that saved a checkpoint, a setting of the run: a checkpoint resumed by another number
gathers another contrastive batch (its in-batch negatives come from every process), trains other data after the
checkpoint and draws other dropout masks. ``resume_from_checkpoint=True`` refuses it (:func:`processes_change`, read
by :func:`hf_cse.trainer_folder.check_same_run`); a checkpoint named by its path goes on, said in one warning
(:func:`warn_other_world_size`)."""

from __future__ import annotations

import logging
from pathlib import Path

from .checkpoints import TRAINER_STATE_FILE, read_json
from .log_window import LOG_WINDOW_FILE
from .training_args import global_batch_size

logger = logging.getLogger("hf_cse.trainer_resume")  # said as the resumed run's other lines


def saved_world_size(checkpoint) -> int | None:
    """How many processes saved ``checkpoint``: each writes its RNG states and its logging window, transformers'
    ``rng_state.pth`` for one process and ``rng_state_<rank>.pth`` for several (the highest rank of either kind
    counts: a file missing from a copy does not lower it); None where it holds none."""
    folder = Path(checkpoint)
    ranks = [int(p.stem.rsplit("_", 1)[1]) for kind in ("rng_state", LOG_WINDOW_FILE)
             for p in folder.glob(f"{kind}_*.pth") if p.stem.rsplit("_", 1)[1].isdigit()]
    if ranks:
        return max(ranks) + 1
    return 1 if (folder / "rng_state.pth").is_file() else None


def _other_world_size(checkpoint, args) -> tuple[int, int | None, int] | None:
    """(processes then, contrastive batch then or None where not known, contrastive batch now) where ``checkpoint``
    was saved by another number of processes than ``args`` run with; None where the same, or not known."""
    saved = saved_world_size(checkpoint)
    if saved is None or saved == args.world_size:
        return None
    state, _ = read_json(Path(checkpoint) / TRAINER_STATE_FILE)
    per_device = state.get("train_batch_size") if isinstance(state, dict) else None
    then = global_batch_size(per_device, saved) if isinstance(per_device, int) else None
    return saved, then, global_batch_size(args.per_device_train_batch_size, args.world_size)


def processes_change(checkpoint, args) -> list[str]:
    """The number of processes, a setting of the run (:func:`hf_cse.trainer_folder.check_same_run`): another one than
    saved ``checkpoint`` gathers another contrastive batch (its in-batch negatives come from every process), trains
    other data after the checkpoint and draws other dropout masks, so ``resume_from_checkpoint=True`` (the command
    line rerun as it was) refuses it; [] where the same (or not known: an older checkpoint without RNG states)."""
    other = _other_world_size(checkpoint, args)
    if other is None:
        return []
    saved, then, now = other
    batch = f": the contrastive batch {then} rows then, {now} now" if then and then != now else ""
    return [f"processes: {saved} then, {args.world_size} now (launch {saved} to resume the run as it was{batch})"]


def warn_other_world_size(checkpoint, args) -> None:
    """A checkpoint named by its path and resumed by another number of processes than saved it
    (``resume_from_checkpoint=True`` refuses it: :func:`processes_change`): the run goes on, but not as it would have
    -- said once, on the main process (the contrastive batch only where the global batch changed: per-device batch x
    processes)."""
    other = _other_world_size(checkpoint, args)
    if other is None:
        return
    saved, then, now = other
    batch = "" if then == now else (f"the contrastive batch has another size ({then} rows then, {now} now), "
                                    if then else "the contrastive batch may have another size, ")
    logger.warning("resuming %s, saved by %d process%s, with %d: %sthe data after the checkpoint is not what the run "
                   "would have trained on (the batches skipped as already trained are counted in this run's batches, "
                   "not in the checkpoint's run's) and the dropout masks differ", checkpoint, saved,
                   "" if saved == 1 else "es", args.world_size, batch)
