"""Name -> loss class registry. Adding a loss = one file (its class decorated with ``@register_loss``), its import
in ``hf_cse/losses/__init__.py`` and one test: CONTRIBUTING.md works through an example. A loss of the user's own
package registers the same way, when its module is imported; :func:`register_loss` checks the class first
(:func:`check_loss_class`), so a mistake fails at that import in one line.

The registry is a table of names: it reads only what every :class:`hf_cse.losses.base.ContrastiveLoss` subclass
has (``name``, ``hyperparameters()``), so the loss errors (:mod:`.errors`), which name the losses that take hard
negatives, can consult it while the base class raises them.
"""

from __future__ import annotations

import inspect
import types
import typing
from typing import Any, TypeVar

from ..errors import CSEError
from ..hyperparameter_rules import check_needs_declared, unknown_loss_error
from ..references import Paper

LossClass = TypeVar("LossClass", bound=type)

_LOSSES: dict[str, Any] = {}  # name -> ContrastiveLoss subclass


#: the annotations a hyperparameter may have (each also ``| None``), besides a ``typing.Literal`` of strings: its
#: command-line flag is typed from it, and a name shared by several losses is one flag of one type
SIMPLE_TYPES = (float, int, bool)
_TYPES_TEXT = "float, int, bool or a typing.Literal of strings (each may be `| None`)"


def _simple(annotation: Any) -> bool:
    """Whether ``annotation`` is one of :data:`SIMPLE_TYPES` or a ``Literal`` of strings, optionally ``| None``."""
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return len(args) == 1 and len(typing.get_args(annotation)) == 2 and _simple(args[0])
    if typing.get_origin(annotation) is typing.Literal:
        return bool(typing.get_args(annotation)) and all(isinstance(c, str) for c in typing.get_args(annotation))
    return annotation in SIMPLE_TYPES


def _literal_of(annotation: Any) -> tuple | None:
    """The values of a ``Literal`` annotation (or of ``Literal[...] | None``), else None."""
    for candidate in (annotation, *typing.get_args(annotation)):
        if typing.get_origin(candidate) is typing.Literal:
            return typing.get_args(candidate)
    return None


def _type_text(annotation: Any) -> str:
    """``float``, ``int | None``, ``Literal['a', 'b']``: an annotation as it is written."""
    return annotation.__name__ if isinstance(annotation, type) else repr(annotation).replace("typing.", "")


def hyperparameter_types(cls: Any) -> dict[str, Any]:
    """The annotation of each hyperparameter of a loss class (resolved in the module that declares it)."""
    try:
        hints = typing.get_type_hints(cls.__init__)
    except Exception as err:  # a name the annotation uses is not defined in its module
        raise CSEError(f"loss class {cls.__name__}: the annotations of __init__ cannot be resolved ({err}).") from err
    return {k: hints.get(k, inspect.Parameter.empty) for k in cls.hyperparameters()}


def _defined_by_base(cls: type, method: str) -> bool:
    """Whether ``cls`` has ``method`` from ``ContrastiveLoss`` itself (not imported here: it imports torch)."""
    definer = next((k for k in cls.__mro__ if method in vars(k)), None)
    return (definer is not None
            and f"{definer.__module__}.{definer.__qualname__}" == "hf_cse.losses.base.ContrastiveLoss")


def check_loss_class(name: str, cls: Any) -> None:
    """What :func:`register_loss` refuses, each in one line naming the loss and the fix: a class that is no
    ``ContrastiveLoss``, or one without its own ``compute``; ``references`` that are not a tuple of ``Paper`` records; a
    class already registered under another name; a hyperparameter without a default, with no or another annotation than
    :data:`SIMPLE_TYPES` / a ``Literal`` of strings, with a Literal default that is not one of its values, or whose type
    differs from that of another loss's hyperparameter of the same name (one flag serves both); a
    ``hyperparameter_rules`` entry of its own (not inherited) for an argument ``__init__`` does not take."""
    where = f"loss {name!r} ({getattr(cls, '__module__', '?')}.{getattr(cls, '__qualname__', cls)!s})"
    if not isinstance(cls, type) or not callable(getattr(cls, "hyperparameters", None)):
        raise CSEError(f"{where}: a loss is a subclass of hf_cse.losses.ContrastiveLoss (implement its "
                       f"compute(z1, z2)); got {cls!r}.")
    if _defined_by_base(cls, "compute") and _defined_by_base(cls, "forward"):
        raise CSEError(f"{where}: it does not implement compute(self, z1, z2) -> (loss, metrics), the loss itself "
                       "(ContrastiveLoss.forward calls it); define it in the class.")
    references = getattr(cls, "references", ())
    if not isinstance(references, tuple) or not all(isinstance(p, Paper) for p in references):
        raise CSEError(f"{where}: references must be a tuple of hf_cse.references.Paper records, the defining paper "
                       f"first (e.g. `references = (SIMCSE,)`; none: `()`), got {references!r}.")
    taken = [other for other, registered in _LOSSES.items() if registered is cls and other != name]
    if taken:
        raise CSEError(f"{where}: the class is already registered as {taken[0]!r}; a class has one name (register "
                       "a subclass for another).")
    params = cls.hyperparameters()
    hints = hyperparameter_types(cls)
    for param, p in params.items():
        if p.default is inspect.Parameter.empty:
            raise CSEError(f"{where}: hyperparameter {param!r} has no default; give it one (a loss is built with "
                           "its defaults where a value is not given).")
        annotation = hints[param]
        if annotation is inspect.Parameter.empty:
            raise CSEError(f"{where}: hyperparameter {param!r} has no annotation; annotate it ({_TYPES_TEXT}): the "
                           "command line types its value from it.")
        if not _simple(annotation):
            raise CSEError(f"{where}: hyperparameter {param!r} is annotated {_type_text(annotation)}; use "
                           f"{_TYPES_TEXT}.")
        choices = _literal_of(annotation)
        if choices is not None and p.default not in choices and p.default is not None:
            raise CSEError(f"{where}: the default {p.default!r} of hyperparameter {param!r} is not one of its "
                           f"Literal values {list(choices)}.")
        others = {other: hyperparameter_types(registered)[param] for other, registered in sorted(_LOSSES.items())
                  if other != name and param in registered.hyperparameters()}
        differ = sorted(other for other, typ in others.items() if typ != annotation)
        if differ:
            shown = ", ".join(differ[:3]) + (f" and {len(differ) - 3} more" if len(differ) > 3 else "")
            raise CSEError(f"{where}: hyperparameter {param!r} is {_type_text(annotation)} here but "
                           f"{_type_text(others[differ[0]])} in {shown}; a name is one setting shared by every loss "
                           "that takes it: use the same type, or another name.")
    inherited = {k for base in cls.__mro__[1:] for k in getattr(base, "hyperparameter_rules", {})}
    unknown = sorted(set(getattr(cls, "hyperparameter_rules", {})) - inherited - set(params))
    if unknown:
        raise CSEError(f"{where}: hyperparameter_rules names {unknown}, which __init__ does not take; its "
                       f"hyperparameters: {', '.join(params) or '(none)'}.")
    try:
        check_needs_declared(where, getattr(cls, "hyperparameter_needs", {}), set(params))
    except TypeError as err:
        raise CSEError(f"{err}; its hyperparameters: {', '.join(params) or '(none)'}.") from None


def register_loss(name: str):
    """Class decorator: make a loss available to :func:`build_loss` under ``name`` (``@register_loss("my_loss")``).
    Works the same from any package: importing the module that defines the class registers it. The class is checked
    here (:func:`check_loss_class`); a name already taken by another class is refused, but not by an earlier
    definition of the same class (same module and qualified name: a notebook cell run again, a reloaded module)."""
    if not isinstance(name, str) or not name.isidentifier():
        raise CSEError(f"register_loss takes the loss's name, a Python identifier such as 'my_loss' "
                       f"(@register_loss(\"my_loss\") above the class), got {name!r}.")

    def deco(cls: LossClass) -> LossClass:
        held = _LOSSES.get(name)
        # the same class defined again (a notebook cell run twice, a reloaded module) replaces its earlier self
        redefined = held is not None and (held.__module__, held.__qualname__) == (cls.__module__, cls.__qualname__)
        if held is not None and held is not cls and not redefined:
            raise CSEError(f"loss name {name!r} is already registered by {_LOSSES[name].__module__}."
                           f"{_LOSSES[name].__qualname__}; choose another name.")
        check_loss_class(name, cls)
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


def loss_defaults(name: str) -> dict[str, Any]:
    """The defaults of a loss's hyperparameters, by name (registration refuses a hyperparameter without one)."""
    return {k: p.default for k, p in loss_hyperparameters(name).items()}


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
    unset = CSEError(f"loss {name!r} ({cls.__module__}.{cls.__qualname__}): its __init__ does not call "
                     "super().__init__() (torch.nn.Module's set-up); call it first in __init__.")
    try:
        loss = cls(**hparams)
    except AttributeError as err:  # a module or tensor assigned before nn.Module's set-up ran
        if "before Module.__init__() call" in str(err) or "_parameters" in str(err) or "_modules" in str(err):
            raise unset from err
        raise
    if "_modules" not in vars(loss):  # else the first call fails inside torch ('_backward_hooks')
        raise unset
    return loss
