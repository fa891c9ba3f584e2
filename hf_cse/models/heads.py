"""Training-time projectors applied on top of the pooled vector (dropped at test time for unsup models).

Each projector also knows its sentence-transformers form (``to_sentence_transformers()``: ``Dense`` modules
computing the same function as the head in eval mode), which the export uses when it keeps the head.
"""

from __future__ import annotations

import torch
from torch import nn

from ..errors import CSEError


def dense_module(weight: torch.Tensor, bias: torch.Tensor, activation: nn.Module) -> nn.Module:
    """A sentence-transformers ``Dense`` computing ``activation(weight @ x + bias)`` (float32, CPU copies)."""
    from sentence_transformers.sentence_transformer.modules import Dense

    return Dense(weight.shape[1], weight.shape[0], bias=True, activation_function=activation,
                 init_weight=weight.detach().float().cpu().clone(), init_bias=bias.detach().float().cpu().clone())


def fold_batchnorm(linear: nn.Linear, bn: nn.BatchNorm1d) -> tuple[torch.Tensor, torch.Tensor]:
    """Weight and bias of ``bn(linear(x))`` with ``bn`` in eval mode, as one affine map (exact up to float32
    rounding: folded in float64). A BatchNorm without running statistics has no fixed eval-mode map: ValueError."""
    if bn.running_mean is None or bn.running_var is None:
        raise CSEError("the BatchNorm projector has no running statistics (track_running_stats=False); "
                       "it cannot be exported as fixed Dense layers. Export without keep_projector.")
    w = linear.weight.detach().double()
    b = linear.bias.detach().double() if linear.bias is not None else torch.zeros(w.shape[0], dtype=torch.float64)
    scale = 1.0 / torch.sqrt(bn.running_var.detach().double() + bn.eps)
    shift = -bn.running_mean.detach().double() * scale
    if bn.affine:
        gamma, beta = bn.weight.detach().double(), bn.bias.detach().double()
        scale, shift = scale * gamma, shift * gamma + beta
    return (w * scale[:, None]).float().cpu(), (b * scale + shift).float().cpu()

PROJECTORS = ("mlp", "linear", "batchnorm", "none")


class MLPProjector(nn.Module):
    """SimCSE's ``MLPLayer``: Linear(H, H) + tanh, randomly initialised (not BERT's pooler)."""

    def __init__(self, hidden_size: int):
        super().__init__()
        self.dense = nn.Linear(hidden_size, hidden_size)
        self.activation = nn.Tanh()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.activation(self.dense(x))

    def to_sentence_transformers(self) -> list[nn.Module]:
        """``tanh(W x + b)`` as one Dense module."""
        return [dense_module(self.dense.weight, self.dense.bias, nn.Tanh())]


class SmallInitLinear(nn.Linear):
    """A Linear whose weight and bias are drawn from N(0, 6e-3) (the unified gradient paradigm
    code's ``custom_param_init``)."""

    init_std = 6e-3


class LinearProjector(nn.Module):
    """The unified gradient paradigm paper's head: a single Linear(H, H), no activation, weight and bias drawn
    from N(0, 6e-3)."""

    def __init__(self, hidden_size: int):
        super().__init__()
        self.dense = SmallInitLinear(hidden_size, hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dense(x)

    def to_sentence_transformers(self) -> list[nn.Module]:
        """``W x + b`` as one Dense module (identity activation)."""
        return [dense_module(self.dense.weight, self.dense.bias, nn.Identity())]


class BatchNormProjector(nn.Module):
    """DiffCSE's ``ProjectionMLP`` (DiffCSE, App. A):
    Linear(H, 2H, no bias) -> BatchNorm1d(2H) -> ReLU -> Linear(2H, H, no bias) -> BatchNorm1d(H, affine=False).

    Batch statistics are taken over all 2N rows of the flattened two-view batch, as in the authors' code.
    """

    def __init__(self, hidden_size: int):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(hidden_size, 2 * hidden_size, bias=False),
            nn.BatchNorm1d(2 * hidden_size),
            nn.ReLU(inplace=True),
            nn.Linear(2 * hidden_size, hidden_size, bias=False),
            nn.BatchNorm1d(hidden_size, affine=False),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def to_sentence_transformers(self) -> list[nn.Module]:
        """Two Dense modules (ReLU, identity) with the eval-mode BatchNorm statistics folded into the Linears."""
        lin1, bn1, _, lin2, bn2 = self.net
        w1, b1 = fold_batchnorm(lin1, bn1)
        w2, b2 = fold_batchnorm(lin2, bn2)
        return [dense_module(w1, b1, nn.ReLU()), dense_module(w2, b2, nn.Identity())]


def build_projector(kind: str, hidden_size: int) -> nn.Module | None:
    if kind == "mlp":
        return MLPProjector(hidden_size)
    if kind == "linear":
        return LinearProjector(hidden_size)
    if kind == "batchnorm":
        return BatchNormProjector(hidden_size)
    if kind == "none":
        return None
    raise CSEError(f"Unknown projector {kind!r}. Valid projectors: {', '.join(PROJECTORS)}.")
