"""Name -> loss class registry. Adding a loss = one file (its class decorated with ``@register_loss``), its import
in ``hf_cse/losses/__init__.py`` and one test: CONTRIBUTING.md works through an example.

The registry is a table of names: it reads only what every :class:`hf_cse.losses.base.ContrastiveLoss` subclass
has (``name``, ``hyperparameters()``), so the loss errors (:mod:`.errors`), which name the losses that take hard
negatives, can consult it while the base class raises them.
"""

from __future__ import annotations

import inspect
from typing import Any, TypeVar

from ..errors import CSEError
from ..hyperparameter_rules import unknown_loss_error

LossClass = TypeVar("LossClass", bound=type)

_LOSSES: dict[str, Any] = {}  # name -> ContrastiveLoss subclass


def register_loss(name: str):
    """Class decorator: make a loss available to :func:`build_loss` under ``name``."""

    def deco(cls: LossClass) -> LossClass:
        if name in _LOSSES and _LOSSES[name] is not cls:
            raise CSEError(f"loss name {name!r} is already registered by {_LOSSES[name].__name__}")
        cls.name = name
        _LOSSES[name] = cls
        return cls

    return deco


def available_losses() -> list[str]:
    """Sorted names of every registered loss."""
    return sorted(_LOSSES)


def get_loss_class(name: str) -> Any:
    """The registered ``ContrastiveLoss`` subclass called ``name``."""
    if name not in _LOSSES:
        raise unknown_loss_error(name, _LOSSES)
    return _LOSSES[name]


def loss_hyperparameters(name: str) -> dict[str, inspect.Parameter]:
    """The constructor arguments (hyperparameters) of a loss, by name."""
    return get_loss_class(name).hyperparameters()


def build_loss(name: str, **hparams) -> Any:
    """Instantiate the loss ``name``; unknown names or hyperparameters raise with the valid choices."""
    cls = get_loss_class(name)
    valid = loss_hyperparameters(name)
    unknown = sorted(set(hparams) - set(valid))
    if unknown:
        raise CSEError(
            f"Loss {name!r} does not take hyperparameter(s) {unknown}. "
            f"Valid hyperparameters: {', '.join(valid) or '(none)'}."
        )
    return cls(**hparams)
