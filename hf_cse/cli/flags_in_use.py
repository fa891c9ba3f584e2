"""Refusals of settings a run would accept and then ignore, because the feature they set is off in it (the DCL
objective's temperature while its weight is 0, the eval pairs' columns without eval pairs), as ``--mlm_weight``
without ``--do_mlm`` is refused (:func:`check_needs`, the needs a config field or loss declares): one line naming the
setting to change, or the one to drop (hf-cse-eval's too: the eval pairs' columns without eval pairs). Only the
settings a user chose are refused -- typed, or written in a ``--config`` file (named then: :class:`ChosenSettings`)
-- never a preset's value nor a method's default.

Imports nothing heavy at module level (:mod:`hf_cse.cli.preflight` imports it)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from ..checks import InputError
from ..hyperparameter_rules import need_words, shown_value, unmet_need

_UNSET = object()


class ChosenSettings(set):
    """The names of the settings a user chose: the flags typed and the values of the ``--config`` file ``config``
    (``file_only``: those the file set and no typed flag did), so that a refusal names where the user wrote it."""

    def __init__(self, typed: Iterable[str] = (), from_file: Iterable[str] = (), config: str | None = None,
                 dropped_from_file: str | None = None):
        super().__init__({*typed, *from_file})
        self.file_only = set(from_file) - set(typed)
        self.config = config
        #: the file's settings a typed flag made inapplicable and the command left out, in words (logged)
        self.dropped_from_file = dropped_from_file


def _file_of(chosen: set[str], name: str) -> str | None:
    """The ``--config`` file that alone set ``name`` (None: a typed flag, or a plain set of names)."""
    return getattr(chosen, "config", None) if name in getattr(chosen, "file_only", ()) else None


def given_as(chosen: set[str], name: str, value=_UNSET) -> str:
    """Setting ``name`` as the user wrote it: ``--name value``, or ``--config F: 'name'`` where the file alone set
    it."""
    file = _file_of(chosen, name)
    if file is not None:
        return f"--config {file}: {name!r}"
    return f"--{name}" if value is _UNSET else f"--{name} {value}"


def drop_fix(chosen: set[str], name: str) -> str:
    """How to stop setting ``name``: ``drop --name``, or ``remove 'name' from --config F``."""
    file = _file_of(chosen, name)
    return f"remove {name!r} from --config {file}" if file is not None else f"drop --{name}"


def check_needs(chosen: set[str], needs: Mapping[str, list], value_of: Callable[[str], object],
                values: Mapping | None = None) -> None:
    """Each setting the user chose (``chosen``) that ``needs`` names acts only while its needs hold (a method
    config's ``metadata["needs"]``, a loss's ``hyperparameter_needs``: e.g. ESimCSE's ``momentum`` only with
    ``queue_size > 0``); ``value_of(other)``: the run's value of the setting a need tests; ``values``: what the
    user gave."""
    for name in (name for name in needs if name in chosen):
        need = unmet_need(needs[name], value_of)
        if need is not None:
            other = need[0]
            shown = (given_as(chosen, name, shown_value(values[name])) if values and name in values
                     else given_as(chosen, name))
            raise InputError(f"{shown} does nothing while --{other} is {shown_value(value_of(other))}: it acts only "
                             f"with {need_words(*need, dashes='--')}. Set that, or {drop_fix(chosen, name)}.",
                             fields=(name, other))


def check_method_flags(method: str, given: Iterable[str], method_flags: dict[str, list[str]],
                       chosen: set[str] = frozenset()) -> None:
    """The method settings ``given`` (flags, or a ``--config`` file's keys) that ``method`` takes; ``method_flags``:
    each method's own (e.g. DiffCSE's ``--lambda_weight`` with simcse is refused, naming the methods that take it)."""
    wrong = sorted(set(given) - set(method_flags.get(method, ())))
    if wrong:
        owners = sorted({m for m, names in method_flags.items() for name in wrong if name in names})
        raise InputError(f"{', '.join(given_as(chosen, w) for w in wrong)} only appl{'y' if len(wrong) > 1 else 'ies'}"
                         f" to --method {' / '.join(owners)} (got {given_as(chosen, 'method', method)}): "
                         f"{drop_fix(chosen, wrong[0])}, or choose that method.")


def check_dcl_settings(chosen: set[str], objectives: list[dict]) -> None:
    """A ``--dcl_<hyperparameter>`` chosen while the run has no DCL objective (``--dcl_weight`` 0, simcse's
    default) would do nothing."""
    from ..losses import loss_hyperparameters
    from ..objectives import DCL

    given = sorted(f"dcl_{name}" for name in loss_hyperparameters(DCL) if f"dcl_{name}" in chosen)
    if given and not any(objective["loss"] == DCL for objective in objectives):
        raise InputError(f"{given_as(chosen, given[0])} does nothing while --dcl_weight is 0 (no DCL objective): add "
                         f"--dcl_weight 0.1, or {drop_fix(chosen, given[0])}.")


def check_off_dropout(model_cls, config_kwargs: dict, chosen: set[str]) -> None:
    """Off-dropout (a dropout-free pass giving no-dropout negatives) matches the losses, said in the command line's
    terms: the model's own refusal names the Python field and class, and calls the method's default (imsimcse's) a
    setting the user never typed."""
    from ..losses import available_losses
    from ..models import METHODS
    from ..objectives import no_dropout_losses, takes_no_dropout

    defaults = model_cls.config_class()
    losses = [o["loss"] for o in config_kwargs.get("objectives") or defaults.objectives]
    if any(loss not in available_losses() for loss in losses):
        return  # the config refuses an unknown loss in its own words
    given = config_kwargs.get("off_dropout")
    on = defaults.off_dropout if given is None else given
    main = losses[0]
    if on and not any(map(takes_no_dropout, losses)):
        takers = " / ".join(no_dropout_losses())
        if given is None:  # the method's default: the user typed no --off_dropout
            raise InputError(f"--method {defaults.method} trains with off-dropout negatives (its default), but loss "
                             f"{main!r} does not use them: pass --off_dropout false, use --loss {takers}, or choose "
                             "another --method.")
        raise InputError(f"{given_as(chosen, 'off_dropout')} makes no-dropout negatives, but loss {main!r} does not "
                         f"use them: use --loss {takers}, or {drop_fix(chosen, 'off_dropout')}.")
    if not on and any(map(takes_no_dropout, losses)):
        methods = " / ".join(name for name, cls in METHODS.items() if cls.config_class().off_dropout)
        if given is False:
            typed = _file_of(chosen, "off_dropout") is None
            raise InputError(f"loss {main!r} needs no-dropout embeddings (off-dropout), which "
                             f"{given_as(chosen, 'off_dropout', 'false')} turns off: "
                             f"{drop_fix(chosen, 'off_dropout')}{' false' * typed}.")
        raise InputError(f"loss {main!r} needs no-dropout embeddings (off-dropout): add --off_dropout"
                         f"{f' (or use --method {methods})' if methods else ''}.")


#: the eval pairs' settings that apply to a Hub data set's pairs only (``eval_dataset_name``)
HUB_PAIRS_SETTINGS = ("eval_dataset_config_name", "eval_dataset_split")


def check_eval_pairs_settings(args, chosen: set[str]) -> None:
    """The eval pairs' columns and name (the fields of :class:`~hf_cse.evaluation.custom_dev.EvalDataArguments`)
    chosen without eval pairs to describe, and a Hub data set's config or split chosen with a file's pairs: both
    commands that take them (hf-cse-train, hf-cse-eval)."""
    from ..evaluation.custom_dev import EvalDataArguments

    sources = ("eval_file", "eval_dataset_name")
    if not any(getattr(args, name, None) for name in sources):
        for field in EvalDataArguments.__dataclass_fields__:
            if field not in sources and field in chosen:
                raise InputError(f"{given_as(chosen, field, getattr(args, field))} does nothing without "
                                 "--eval_file or --eval_dataset_name (the scored pairs it describes): add one, or "
                                 f"{drop_fix(chosen, field)}.")
    if getattr(args, "eval_file", None) and not getattr(args, "eval_dataset_name", None):  # a file's pairs
        for field in HUB_PAIRS_SETTINGS:
            if field in chosen:
                raise InputError(f"{given_as(chosen, field, getattr(args, field))} does nothing with --eval_file "
                                 "(it sets which Hub data set's pairs --eval_dataset_name reads): "
                                 f"{drop_fix(chosen, field)}.")


def check_training_settings(training_args, chosen: set[str]) -> None:
    """Training arguments chosen for a feature that is off in this run: the eval pairs' columns and name without
    eval pairs (a checkpoint limit without checkpoints: the arguments' own check, as the other step intervals)."""
    check_eval_pairs_settings(training_args, chosen)
