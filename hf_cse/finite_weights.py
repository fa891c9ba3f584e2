"""A model whose weights hold NaN or inf (saved by a run that diverged, e.g. at a learning rate far too high, before
its loss stopped it) gives NaN embeddings: an export of it would be a broken model, an evaluation score ``nan``.
The export and the evaluation refuse it when they load it, in one line naming the folder, how many weights are not
finite and the first tensor holding one (one pass of ``torch.isfinite`` over the parameters)."""

from __future__ import annotations

from .checks import InputError


class NonFiniteWeightsError(InputError):
    """A model loaded for export or evaluation holds weights that are NaN or inf."""


def check_finite_weights(model, source) -> None:
    """Raise :class:`NonFiniteWeightsError` when a parameter of ``model`` (an ``nn.Module``, loaded from ``source``)
    holds NaN or inf."""
    import torch

    bad, first, total = 0, None, 0
    for name, param in model.named_parameters():
        if param.device.type == "meta":  # not loaded here (offloaded): nothing to read
            continue
        total += param.numel()
        if param.dtype.is_floating_point or param.dtype.is_complex:
            count = int((~torch.isfinite(param.detach())).sum())
            if count:
                bad += count
                first = first or name
    if bad:
        raise NonFiniteWeightsError(
            f"{source} holds {bad} of {total} weights that are not finite (NaN or inf), the first in {first}: the "
            "training that saved it diverged. Use an earlier checkpoint of that run, or train again with a lower "
            "learning_rate.")
