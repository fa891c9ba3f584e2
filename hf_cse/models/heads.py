"""Training-time projectors applied on top of the pooled vector (dropped at test time for unsup models)."""

from __future__ import annotations

import torch
from torch import nn

PROJECTORS = ("mlp", "linear", "batchnorm", "none")


class MLPProjector(nn.Module):
    """SimCSE's ``MLPLayer``: Linear(H, H) + tanh, randomly initialised (not BERT's pooler)."""

    def __init__(self, hidden_size: int):
        super().__init__()
        self.dense = nn.Linear(hidden_size, hidden_size)
        self.activation = nn.Tanh()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.activation(self.dense(x))


class SmallInitLinear(nn.Linear):
    """A Linear whose weight and bias are drawn from N(0, 6e-3) (seed 002's ``custom_param_init``)."""

    init_std = 6e-3


class LinearProjector(nn.Module):
    """Seed 002's head: a single Linear(H, H), no activation, weight and bias drawn from N(0, 6e-3)."""

    def __init__(self, hidden_size: int):
        super().__init__()
        self.dense = SmallInitLinear(hidden_size, hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dense(x)


class BatchNormProjector(nn.Module):
    """DiffCSE's ``ProjectionMLP`` (seed 001 App. A):
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


def build_projector(kind: str, hidden_size: int) -> nn.Module | None:
    if kind == "mlp":
        return MLPProjector(hidden_size)
    if kind == "linear":
        return LinearProjector(hidden_size)
    if kind == "batchnorm":
        return BatchNormProjector(hidden_size)
    if kind == "none":
        return None
    raise ValueError(f"Unknown projector {kind!r}. Valid projectors: {', '.join(PROJECTORS)}.")
