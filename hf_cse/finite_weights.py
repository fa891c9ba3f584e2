"""A model whose weights hold NaN or inf (saved by a run that diverged, e.g. at a learning rate far too high, before
its loss stopped it) gives NaN embeddings: an export of it would be a broken model, an evaluation score ``nan``.
:func:`non_finite` counts them (one pass of ``torch.isfinite`` over the parameters): the export and the evaluation
refuse such a model when they load it (:func:`hf_cse.divergence.check_finite_weights`).

:func:`saved_non_finite` reads the same of a saved folder's weight files without building a model (a checkpoint a
run would resume: :mod:`hf_cse.divergence`), once per folder and version of its files; :func:`first_finite` finds
the checkpoint a message names instead of diverged ones."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

#: the most checkpoints read, newest first, to find a finite one to name (each read is a pass over its weights)
LOOKED_BACK = 5


@dataclass(frozen=True)
class NonFinite:
    """``bad`` of ``total`` weights are NaN or inf, the first in the tensor ``first``."""

    bad: int
    total: int
    first: str


def local_part(tensor):
    """This process's part of ``tensor``: an FSDP2 DTensor's local shard (a DTensor does not mix with plain tensors in
    arithmetic), else the tensor."""
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor


def non_finite(named_tensors: Iterable) -> NonFinite | None:
    """How many of the ``(name, tensor)`` pairs' values are not finite, or None where all are (tensors not loaded
    here, on the meta device, are skipped)."""
    import torch

    bad, first, total = 0, None, 0
    for name, tensor in named_tensors:
        tensor = local_part(tensor)  # a sharded model's: this process's shard
        if tensor.device.type == "meta":  # not loaded here (offloaded): nothing to read
            continue
        total += tensor.numel()
        if tensor.dtype.is_floating_point or tensor.dtype.is_complex:
            count = int((~torch.isfinite(tensor.detach())).sum())
            if count:
                bad += count
                first = first or name
    return NonFinite(bad, total, first) if bad else None


#: the weight files of a saved folder read by :func:`saved_non_finite`: the model's (whole or sharded) and a peft
#: adapter's, in the folder or a folder of it (a LoRA run's ``adapter/``); FSDP's and DeepSpeed's states are not read
SAVED_WEIGHTS = ("*.safetensors", "*/adapter_model.safetensors", "pytorch_model*.bin", "adapter_model.bin",
                 "*/adapter_model.bin")

_seen: dict[tuple, NonFinite | None] = {}  # a folder's answer by the version of its files: read once


def saved_non_finite(folder) -> NonFinite | None:
    """:func:`non_finite` of the weights saved in ``folder`` (:data:`SAVED_WEIGHTS`, read one tensor at a time), or
    None where all are finite or there are none to read."""
    paths = sorted({p for pattern in SAVED_WEIGHTS for p in Path(folder).glob(pattern) if p.is_file()})
    key = (str(Path(folder).resolve()), tuple((str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in paths))
    if key not in _seen:
        if len(_seen) > 64:
            _seen.clear()
        _seen[key] = non_finite(_tensors(paths))
    return _seen[key]


def _tensors(paths: list[Path]):
    import torch
    from safetensors import safe_open

    for path in paths:
        if path.suffix == ".safetensors":
            with safe_open(str(path), framework="pt") as fh:
                for name in fh.keys():  # noqa: SIM118 (a safe_open handle is no dict)
                    yield name, fh.get_tensor(name)
        else:
            state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
            yield from ((name, t) for name, t in state.items() if isinstance(t, torch.Tensor))


def first_finite(checkpoints: Sequence, most: int) -> tuple[str | None, list[str]]:
    """The first of ``checkpoints`` (folders, newest first; at most ``most`` read) whose saved weights are finite
    (None: none of those read), and the names of those read before it, whose weights are not."""
    diverged = []
    for folder in list(checkpoints)[:most]:
        if saved_non_finite(folder) is None:
            return str(folder), diverged
        diverged.append(Path(folder).name)
    return None, diverged
