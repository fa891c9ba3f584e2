"""Switching a module tree to eval mode for a while (export checks, dropout-free passes)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from torch import nn


@contextmanager
def eval_mode(model: nn.Module) -> Iterator[None]:
    """Every sub-module in eval mode (SDPA attention dropout reads ``module.training``, so switching only the
    dropout modules is not enough); each module's own flag is restored after."""
    flags = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        yield
    finally:
        for module, flag in flags:
            module.training = flag
