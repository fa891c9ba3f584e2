"""The embeddings a loss is given: the dtype it reads them in, the checks they must pass, and the check of what a
loss's ``compute`` returns.

Precision: every loss computes its similarities, logits and reductions in at least fp32
(:func:`compute_dtype`): fp16/bf16 inputs are upcast, fp32 stays fp32 and fp64 stays fp64 (so closed-form
tests can be exact).

The checks name the loss and the input (``z1``, ``z_neg``, ...) in one line; :class:`hf_cse.losses.base.ContrastiveLoss`
runs them on every call. Inside the trainer (:func:`finite_checks_deferred`) those that would read a device value on
the host are skipped, and the rows that cannot be normalised are counted in a metric instead.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

import torch

from ..errors import CSEError
from .errors import BatchTooSmallError


def compute_dtype(z: torch.Tensor) -> torch.dtype:
    """The dtype losses compute in: at least fp32 (fp16/bf16 -> fp32, fp64 stays fp64)."""
    return torch.promote_types(z.dtype, torch.float32)


# Set by the trainer (finite_checks_deferred): reading ``isfinite(z).all()`` on the host is a device sync per step.
_FINITE_CHECKS_DEFERRED = contextvars.ContextVar("hf_cse_finite_checks_deferred", default=False)


@contextlib.contextmanager
def finite_checks_deferred() -> Iterator[None]:
    """Inside, losses skip the NaN/Inf check of their inputs; the caller must check the loss instead
    (ContrastiveTrainer does at logging steps: a NaN input gives a NaN loss)."""
    token = _FINITE_CHECKS_DEFERRED.set(True)
    try:
        yield
    finally:
        _FINITE_CHECKS_DEFERRED.reset(token)


#: rows whose l2 norm is at or below this are "zero" to :func:`hf_cse.losses.base.unit` (its eps, as
#: ``nn.CosineSimilarity``) and to :func:`check_nonzero_norm`
NORM_EPS = 1e-8


def check_tensor(z: torch.Tensor, which: str, loss_name: str) -> None:
    if not isinstance(z, torch.Tensor):
        raise TypeError(f"{loss_name}: {which} must be a torch.Tensor, got {type(z).__name__}.")
    if not z.is_floating_point():
        raise TypeError(f"{loss_name}: {which} must be a floating-point tensor of embeddings, got {z.dtype}.")
    if z.dim() != 2:
        raise CSEError(
            f"{loss_name}: {which} must be a 2-D (batch, dim) tensor of embeddings, got shape "
            f"{tuple(z.shape)}."
        )


def check_finite(z: torch.Tensor, which: str, loss_name: str) -> None:
    if _FINITE_CHECKS_DEFERRED.get():
        return
    if not torch.isfinite(z).all():
        raise CSEError(
            f"{loss_name}: {which} contains NaN or Inf. The encoder diverged or the input is broken; "
            "lower the learning rate or train in fp32/bf16 instead of fp16."
        )


def check_same_kind(z: torch.Tensor, ref: torch.Tensor, which: str, loss_name: str) -> None:
    """``z`` must have the dtype and device of ``z1`` (bf16 is fine: losses upcast both the same way)."""
    if z.dtype != ref.dtype:
        raise TypeError(
            f"{loss_name}: z1 is {ref.dtype} but {which} is {z.dtype}; give every embedding in one dtype "
            "(e.g. both from the same autocast region, or .float() on each)."
        )
    if z.device != ref.device:
        raise CSEError(f"{loss_name}: z1 is on {ref.device} but {which} is on {z.device}; move both to one device.")


def _row_norms(z: torch.Tensor) -> torch.Tensor:
    return torch.linalg.vector_norm(z.detach().to(compute_dtype(z)), dim=-1)


def _unnormalisable(norms: torch.Tensor) -> torch.Tensor:
    """Boolean per row: norm 0 (<= NORM_EPS) or a norm that overflows."""
    return ~(norms > NORM_EPS) | ~torch.isfinite(norms)


#: metric a loss reports inside the trainer instead of raising at once (read at logging steps, no host sync)
UNNORMALISABLE_ROWS = "unnormalisable_rows"


def check_nonzero_norm(z: torch.Tensor, which: str, loss_name: str) -> None:
    """Rows that normalise to zero (norm 0, or a norm that overflows) have cosine 0 with everything: the loss
    is then a constant (log N for InfoNCE) with zero gradient, so training silently stops learning. Inside the
    trainer (checks deferred) the count is reported as the metric ``unnormalisable_rows`` instead."""
    if _FINITE_CHECKS_DEFERRED.get():
        return
    norms = _row_norms(z)
    bad = _unnormalisable(norms)
    if bad.any():
        rows = bad.nonzero().flatten().tolist()
        kind = "overflows" if not torch.isfinite(norms[rows[0]]) else f"is 0 (<= {NORM_EPS:g})"
        raise CSEError(
            f"{loss_name}: {len(rows)} of {z.shape[0]} rows of {which} cannot be normalised (row {rows[0]}'s norm "
            f"{kind}); they would give a constant loss with zero gradient. Likely an all-zero encoder or projector "
            "output (zeroed weights, inputs of padding only) or values too large for the dtype: check the model "
            "and lower the learning rate."
        )


#: rows a batch needs: a contrastive loss contrasts each anchor with the others' views (its in-batch negatives)
MIN_BATCH = 2


def check_pair(z1: torch.Tensor, z2: torch.Tensor, loss_name: str) -> None:
    """Raise a clear ``ValueError`` for inputs no loss can use."""
    for which, z in (("z1", z1), ("z2", z2)):
        check_tensor(z, which, loss_name)
    if z1.shape != z2.shape:
        raise CSEError(
            f"{loss_name}: the two views must have the same shape, got z1 {tuple(z1.shape)} and "
            f"z2 {tuple(z2.shape)}."
        )
    if z1.shape[0] < MIN_BATCH:
        raise BatchTooSmallError(loss_name, MIN_BATCH, z1.shape[0])
    check_same_kind(z2, z1, "z2", loss_name)
    for which, z in (("z1", z1), ("z2", z2)):
        check_finite(z, which, loss_name)
        check_nonzero_norm(z, which, loss_name)


def checks_deferred() -> bool:
    """Whether the caller runs inside :func:`finite_checks_deferred` (the trainer's step)."""
    return _FINITE_CHECKS_DEFERRED.get()


def unnormalisable_rows(*zs: torch.Tensor) -> torch.Tensor:
    """How many rows of ``zs`` cannot be normalised, as a 0-d tensor (no host read): the trainer's metric
    :data:`UNNORMALISABLE_ROWS`."""
    return sum(_unnormalisable(_row_norms(z)).sum() for z in zs)


def checked_result(loss_name: str, result, inputs) -> tuple[torch.Tensor, dict]:
    """``compute``'s ``(loss, metrics)``, refused in one line where it is not: a 0-d floating-point tensor attached
    to the inputs' graph (where they need a gradient) and a dict of 0-d tensors or numbers; a NaN/Inf loss from
    finite inputs where the checks are not deferred. Shapes and flags only: no host synchronisation."""
    where = f"{loss_name}: compute(z1, z2) must return (loss, metrics), a 0-d tensor and a dict of 0-d tensors"
    if not (isinstance(result, tuple) and len(result) == 2):
        raise CSEError(f"{where}; got {type(result).__name__}" + (f" of shape {tuple(result.shape)}" if isinstance(
            result, torch.Tensor) else "") + ". Return `loss, {}` when there is nothing else to log.")
    loss, metrics = result
    if not (isinstance(loss, torch.Tensor) and loss.is_floating_point() and loss.dim() == 0):
        got = f"a {loss.dtype} tensor of shape {tuple(loss.shape)}" if isinstance(loss, torch.Tensor) else repr(loss)
        raise CSEError(f"{where}; its loss is {got}. Reduce it to one number, the mean over anchors (.mean()), "
                       "computed from z1, z2 with torch (not .item() or a Python float).")
    if torch.is_grad_enabled() and any(z.requires_grad for z in inputs) and not loss.requires_grad:
        raise CSEError(f"{loss_name}: the loss compute returned is detached from z1, z2 (.detach(), .item(), "
                       "torch.no_grad or a new tensor): it would train nothing. Compute it from the inputs with torch.")
    if not isinstance(metrics, dict):
        raise CSEError(f"{where}; its metrics are {type(metrics).__name__}. Return `loss, {{}}` for no metrics.")
    for key, value in metrics.items():
        if not (isinstance(key, str) and (isinstance(value, int | float) or (isinstance(value, torch.Tensor)
                                                                            and value.dim() == 0))):
            shown = f"shape {tuple(value.shape)}" if isinstance(value, torch.Tensor) else type(value).__name__
            raise CSEError(f"{where}; metric {key!r} is {shown}. Log one number per metric (e.g. .mean()).")
    if not _FINITE_CHECKS_DEFERRED.get() and not torch.isfinite(loss):
        raise CSEError(f"{loss_name}: compute returned a {loss.item()} loss from finite inputs: the loss's own "
                       "arithmetic overflows or divides by zero (compute in fp32, clamp before log/exp/division).")
    return loss, metrics
