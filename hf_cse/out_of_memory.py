"""A device that runs out of memory while a run trains (or scores its dev data) is a refusal, not a bug: the batch
and the length in use do not fit, and the library has the fixes. :func:`out_of_memory_as_refusal` turns torch's
out-of-memory error into :class:`TrainingOutOfMemoryError`, whose one line names the batch size and sequence length
in use and those fixes, in the terms of the Python API (the command line prints them as flags). Nothing the run
saved before is touched: its checkpoints stay where they are.

    with out_of_memory_as_refusal(trainer, max_seq_length=32):
        trainer.train()
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

from .cached import IncompatibleOptionsError, check_cached_compatible
from .checkpoints import last_complete_checkpoint
from .errors import CSEError
from .memory_errors import is_out_of_memory

#: transformers' default ``per_device_eval_batch_size``, which the dev scoring reads as not set
#: (:func:`hf_cse.trainer_evaluation.dev_batch_size`)
TRANSFORMERS_EVAL_BATCH = 8


class TrainingOutOfMemoryError(CSEError):
    """The device ran out of memory during training; the message names the batch, the length and the fixes."""


def _tried_to_allocate(err: BaseException) -> str:
    """The size torch's message says it failed to allocate (the rest of it is a page of advice on the allocator's
    settings), as `` (tried to allocate 2.00 GiB)``; "" where it names none."""
    tried = re.search(r"[Tt]ried to allocate ([\d.]+ ?[KMGT]i?B)", str(err))
    if tried:
        return f" (tried to allocate {tried.group(1)})"
    in_bytes = re.search(r"[Tt]ried to allocate (\d+) bytes", str(err))  # the CPU allocator's form
    return f" (tried to allocate {int(in_bytes.group(1)) / 2**30:.2f} GiB)" if in_bytes else ""


def out_of_memory_error(err: BaseException, *, device, per_device_train_batch_size: int, max_seq_length: int,
                        cached_minibatch_size: int | None = None, cached_applies: bool = True,
                        activation_checkpointing: bool = False,
                        resumes_from: str | None = None) -> TrainingOutOfMemoryError:
    """The refusal for ``err``: what did not fit, then the fixes. A fix that keeps the run's settings comes first,
    as the run resumes from ``resumes_from`` (its last checkpoint) with it: the gradient cache (:mod:`hf_cse.cached`;
    half the mini-batch when it is on already), or activation checkpointing where the method's batch does not split
    into mini-batches. A smaller batch or length is another run."""
    batch, minibatch = per_device_train_batch_size, cached_minibatch_size or None
    in_use = f"per_device_train_batch_size {batch}" + (f" (cached_minibatch_size {minibatch})" if minibatch else "")
    same_run = None  # a fix that leaves the gradient as it is: the run goes on from its last checkpoint with it
    if cached_applies and (minibatch or batch) > 1:
        same_run = f"cached_minibatch_size={max(1, (minibatch or batch) // (2 if minibatch else 4))}"
    elif not cached_applies and not activation_checkpointing:
        same_run = "activation_checkpointing=True"
    other_run = "per_device_train_batch_size or max_seq_length"
    if same_run:
        why = f"resumes {resumes_from.rstrip('/').rpartition('/')[2]}" if resumes_from else "same gradient"
        fixes = f"set {same_run} ({why}), or lower {other_run}"
    else:
        fixes = f"lower {other_run}"
    message = (f"{device} ran out of memory{_tried_to_allocate(err)} at {in_use}, max_seq_length {max_seq_length}: "
               f"{fixes}.")
    fields = ["per_device_train_batch_size", "max_seq_length", "cached_minibatch_size", "activation_checkpointing"]
    return TrainingOutOfMemoryError(message, fields=[name for name in fields if name in message])


def _checkpointing(encoder) -> bool:
    """Whether a transformers model recomputes its activations (transformers 5's name, else 4's: reading the old
    name on 5 warns)."""
    on = getattr(encoder, "is_activation_checkpointing", None)
    return bool(getattr(encoder, "is_gradient_checkpointing", False) if on is None else on)


@contextmanager
def out_of_memory_as_refusal(trainer, max_seq_length: int) -> Iterator[None]:
    """Within the block, an out-of-memory error (:func:`is_out_of_memory`) raised while ``trainer`` (a
    :class:`~hf_cse.trainer.ContrastiveTrainer`) trains or scores becomes :func:`out_of_memory_error`'s refusal,
    with the settings of ``trainer`` and the tokens per sentence ``max_seq_length``."""
    try:
        yield
    except RuntimeError as err:  # torch.OutOfMemoryError is one
        if not is_out_of_memory(err):
            raise
        model = trainer.accelerator.unwrap_model(trainer.model)
        try:
            check_cached_compatible(model.config, 1)
            cached_applies = True
        except IncompatibleOptionsError:  # e.g. DiffCSE: its batch does not split into mini-batches
            cached_applies = False
        encoders = model.transformer_encoders() if hasattr(model, "transformer_encoders") else []
        checkpointing = any(_checkpointing(e) for e in encoders)
        raise out_of_memory_error(
            err, device=trainer.args.device, per_device_train_batch_size=trainer.args.per_device_train_batch_size,
            max_seq_length=max_seq_length, cached_minibatch_size=getattr(trainer, "cached_minibatch_size", None),
            cached_applies=cached_applies, activation_checkpointing=checkpointing,
            resumes_from=last_complete_checkpoint(trainer.args.output_dir)) from err


@contextmanager
def dev_out_of_memory_as_refusal(device, batch_size: int) -> Iterator[None]:
    """Within the block, which scores the dev data in batches of ``batch_size``, an out-of-memory error becomes a
    refusal naming that batch: the training settings do not change what scoring holds in memory."""
    try:
        yield
    except RuntimeError as err:
        if not is_out_of_memory(err):
            raise
        smaller = batch_size // 2
        if smaller == TRANSFORMERS_EVAL_BATCH:  # read as not set: the dev data would be scored in batches of 128
            smaller //= 2
        fix = (f"set per_device_eval_batch_size={smaller} (the training is the same with it)" if smaller else
               "no smaller batch is left: free the device's memory, or score on one with more")
        raise TrainingOutOfMemoryError(
            f"{device} ran out of memory{_tried_to_allocate(err)} scoring the dev data in batches of {batch_size}: "
            f"{fix}.", fields=("per_device_eval_batch_size",)) from err
