"""All-gather with gradients, so every process uses the global batch as negatives."""

from __future__ import annotations

import atexit
import os
import pickle
import threading
from collections.abc import Callable
from typing import TypeVar

import torch
import torch.distributed as dist

from .errors import CSEError, raised_on_every_process
from .process_exit import exit_now

T = TypeVar("T")


def world_size() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


class _GatherWithGrad(torch.autograd.Function):
    """Forward: all_gather. Backward: sum the incoming gradients over processes, keep the local slice.

    Every process computes the same global loss L; summing makes the local slice's gradient
    P * dL/dz_local, and DDP's gradient averaging divides by P again, so the parameters receive
    exactly the single-process gradient of L on the global batch (as lightly's ``GatherLayer``).
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor):
        out = [torch.empty_like(x) for _ in range(dist.get_world_size())]
        dist.all_gather(out, x.contiguous())
        return tuple(out)

    @staticmethod
    def backward(ctx, *grads: torch.Tensor):
        stacked = torch.stack(grads)
        dist.all_reduce(stacked, op=dist.ReduceOp.SUM)
        return stacked[dist.get_rank()]


def gather_with_grad(x: torch.Tensor) -> torch.Tensor:
    """Concatenate ``x`` from every process along dim 0 (rank order); identity on one process."""
    if world_size() == 1:
        return x
    return torch.cat(_GatherWithGrad.apply(x), dim=0)


def check_not_data_parallel(training_args) -> None:
    """Refuse the Trainer's single-process multi-GPU mode: with several visible GPUs and no launcher it wraps the
    model in ``nn.DataParallel``, whose output gather cannot merge a ``CSEOutput`` (``TypeError: 'CSEOutput' object
    is not iterable``), and each replica's loss would see only its slice of the batch as negatives."""
    from transformers.training_args import ParallelMode

    if training_args.n_gpu > 1 and training_args.parallel_mode == ParallelMode.NOT_DISTRIBUTED:
        raise CSEError(
            f"{training_args.n_gpu} GPUs are visible to one process; hf_cse trains with one process per GPU. Launch "
            f"with `accelerate launch --num_processes {training_args.n_gpu} run_unsup.py ...` (or `torchrun "
            f"--nproc_per_node {training_args.n_gpu} ...`), or use one GPU (CUDA_VISIBLE_DEVICES=0)."
        )


def sharding_engine(training_args) -> str | None:
    """``"FSDP"`` / ``"DeepSpeed"`` when the run asks for one (TrainingArguments or ``accelerate launch``'s config),
    else None."""

    if getattr(training_args, "fsdp", None) or os.environ.get("ACCELERATE_USE_FSDP", "").lower() == "true":
        return "FSDP"
    if getattr(training_args, "deepspeed", None) or os.environ.get("ACCELERATE_USE_DEEPSPEED", "").lower() == "true":
        return "DeepSpeed"
    return None


def check_sharding_device(training_args) -> None:
    """Refuse FSDP / DeepSpeed on a CPU: accelerate enables either only on accelerators (GPUs...) and on a CPU
    trains plain DDP without a word, so the run would not shard anything."""
    engine = sharding_engine(training_args)
    if engine and training_args.device.type == "cpu":
        raise CSEError(f"{engine} runs only on GPUs (accelerate enables it on accelerators; on a CPU it would "
                       "silently train plain DDP). On a CPU launch with accelerate's cpu_2proc config "
                       "(hf_cse/configs/accelerate); on GPUs drop use_cpu.")


def on_every_process(args, holds: bool) -> bool:
    """Whether ``holds`` is true on every process of the run (``args``: the TrainingArguments): for what each process
    finds on its own but all must decide alike (a collective over a mix of decisions yields nonsense)."""
    if args.world_size <= 1:
        return holds
    from accelerate.utils import gather_object

    return all(gather_object([bool(holds)]))


def main_process_outcome(args, work: Callable[[], T]) -> T:
    """``work()`` on the main process alone, its result or its error handed to every process (``args``: the
    TrainingArguments): each returns the result, or raises the error (marked
    :func:`~hf_cse.errors.raised_on_every_process`), so that no process is left waiting in a collective for a main
    process that failed (under torchrun it failed with a gloo traceback once the main process had gone)."""
    if args.world_size <= 1:
        return work()
    from accelerate.utils import broadcast_object_list

    outcome: dict = {}
    mine: BaseException | None = None  # the main process raises its own error as it is
    if args.process_index == 0:
        try:
            outcome["result"] = work()
        except Exception as err:
            mine = err
            outcome["error"] = _sendable(err)
    outcome = broadcast_object_list([outcome])[0]
    if "error" in outcome:
        raise raised_on_every_process(mine if mine is not None else outcome["error"])
    return outcome["result"]


def _sendable(err: Exception) -> Exception:
    """``err`` as the other processes raise it: itself where it pickles, else an error of its kind with its message."""
    try:
        pickle.loads(pickle.dumps(err))
        return err
    except Exception:
        kind = CSEError if isinstance(err, CSEError) else RuntimeError
        return kind(f"{err}" if kind is CSEError else f"the main process failed: {type(err).__name__}: {err}")


def main_process_first(args, work: Callable[[], T]) -> T:
    """``work()`` on the main process, then on the others (as ``TrainingArguments.main_process_first``: e.g. the main
    process writes a cache the others read), except that an error of the main process is raised by every process
    (:func:`main_process_outcome`) instead of leaving the others at a barrier the main process never reaches."""
    results: list = []
    main_process_outcome(args, lambda: results.append(work()))
    return results[0] if results else work()


def leave_process_group_process(code: int) -> None:
    """End this process now with exit code ``code`` if it belongs to a process group (a launch of several processes);
    return otherwise. The exit handlers run, other threads of Python are joined and the output is flushed, as at a
    normal exit; only the interpreter's finalization is skipped (``os._exit``).

    Why: with torch's gloo backend a worker thread of the group may still be releasing a finished collective (a
    barrier holding DDP's last all-reduces) while the interpreter finalizes; the thread then waits for the GIL of a
    finalizing interpreter, is ended by it, and the process aborts ("terminate called without an active exception",
    exit -6) after a run that succeeded, so the launcher reports the run as failed (pytorch/pytorch#190489; seen in
    about 1 of 30 two-process runs here). Destroying the group first does not help: DDP keeps references to the
    group, so it outlives ``destroy_process_group``, and freeing DDP afterwards hangs in the group's destructor.
    """
    if not (dist.is_available() and dist.is_initialized()):
        return
    for thread in threading.enumerate():  # as the interpreter does at exit: non-daemon threads finish first
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()  # logging, trackers, loader workers: what a normal exit runs
    exit_now(code)
