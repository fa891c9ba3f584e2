"""Training arguments' values that transformers' Trainer takes as given and then fails on deep inside torch (a
string learning rate, a float step count), trains nothing with (a learning rate of 0, ``max_steps=0``), or misreads
(``no_duplicates_in_batch="false"``, which is true): refused in one line, in the Python API's terms, when the
arguments or the trainer are made. The command line runs the same checks on its flags (``hf_cse.cli.preflight``).

No torch or transformers here: the command line's earliest checks run before the training stack is imported."""

from __future__ import annotations

import dataclasses
import logging
import math
import numbers
import typing
from collections.abc import Collection, Mapping

from .checks import InputError

logger = logging.getLogger(__name__)

#: the scalar types a field may be declared as, and the values each accepts (a bool is no number here)
_ACCEPTS = {
    bool: lambda v: isinstance(v, bool) or type(v).__name__ == "bool_",  # NumPy's too
    int: lambda v: isinstance(v, numbers.Integral) and not isinstance(v, bool),  # NumPy's integers too
    float: lambda v: isinstance(v, numbers.Real) and not isinstance(v, bool),
}
_NAMES = {bool: "True or False", int: "an integer", float: "a number"}
_declared: dict[type, dict[str, tuple[type, bool]]] = {}


def _scalar_fields(cls: type) -> dict[str, tuple[type, bool]]:
    """``name -> (scalar type, None allowed)`` of the dataclass fields declared ``bool`` / ``int`` / ``float`` (or
    ``X | None``); a field of another or a mixed type (``int | str``) is left out."""
    if cls not in _declared:
        try:
            hints = typing.get_type_hints(cls)
        except Exception:  # noqa: BLE001 - a hint this Python cannot resolve: no field is checked, as before
            hints = {}
        found = {}
        for f in dataclasses.fields(cls):
            hint = hints.get(f.name)
            options = [a for a in typing.get_args(hint) if a is not type(None)] if typing.get_args(hint) else [hint]
            if len(options) == 1 and options[0] in _ACCEPTS and f.init:
                found[f.name] = (options[0], type(None) in typing.get_args(hint))
        _declared[cls] = found
    return _declared[cls]


def check_field_types(args) -> None:
    """Each ``bool`` / ``int`` / ``float`` field of the arguments (a dataclass: ``TrainingArguments`` and its
    subclasses) holds a value of its type: ``"3e-5"`` (a number read from a text file), ``5.0`` steps or ``"false"``
    are refused, naming the field and the value to write."""
    if not dataclasses.is_dataclass(args):
        return
    for name, (kind, optional) in _scalar_fields(type(args)).items():
        value = getattr(args, name, None)
        if (value is None and optional) or _ACCEPTS[kind](value):
            continue
        hint = ""
        if isinstance(value, str):
            hint = f" (a string: write it without quotes, e.g. {name}={_unquoted(value, kind)})"
        elif kind is int and isinstance(value, float) and value.is_integer():
            hint = f" (write {name}={int(value)})"
        raise InputError(f"{name} must be {_NAMES[kind]}{' or None' if optional else ''}, got {value!r}{hint}.",
                         fields=(name,))


def _unquoted(text: str, kind: type) -> str:
    if kind is bool:
        return "True" if text.strip().lower() in ("true", "1", "yes") else "False"
    return text.strip()


def _refusal(name: str, value, rule: str, why: str) -> InputError:
    return InputError(f"{name} {value} {rule}; {why}", fields=(name,))


def check_optimizer_values(args) -> None:
    """The optimizer's values: a learning rate of 0 learns nothing (and the export would call the untouched encoder
    trained), a negative or NaN one fails or diverges only once training runs."""
    lr = args.learning_rate
    if not math.isfinite(lr) or lr <= 0:
        why = ("0 trains nothing (the export would describe an untrained encoder as trained)" if lr == 0 else
               "a negative one climbs the loss" if lr < 0 else "it makes every weight NaN at the first step")
        raise _refusal("learning_rate", lr, "must be a finite number > 0", f"{why}. The papers use 1e-5 to 5e-5.")
    warmup = args.warmup_steps
    if not math.isfinite(warmup) or warmup < 0:
        raise _refusal("warmup_steps", warmup, "must be >= 0", "a number of steps, or a fraction < 1 of them.")
    decay = args.weight_decay
    if not math.isfinite(decay) or decay < 0:
        raise _refusal("weight_decay", decay, "must be a finite number >= 0", "0 (the default) turns it off.")
    for name in ("adam_beta1", "adam_beta2"):
        beta = getattr(args, name)
        if not 0 <= beta < 1:
            raise _refusal(name, beta, "must be in [0, 1)", "AdamW's defaults are 0.9 and 0.999.")
    if not args.adam_epsilon > 0:
        raise _refusal("adam_epsilon", args.adam_epsilon, "must be > 0", "the default is 1e-8.")
    norm = args.max_grad_norm
    if norm is not None and not (math.isfinite(norm) and norm >= 0):
        raise _refusal("max_grad_norm", norm, "must be a finite number >= 0", "0 turns clipping off; the default is 1.")


def check_step_counts(args, world_size: int | None) -> None:
    """The batch and step counts. ``world_size`` None: the processes are not known yet (the command line's earliest
    checks), so only a batch that is empty on every process is refused."""
    if args.gradient_accumulation_steps < 1:
        raise InputError(f"gradient_accumulation_steps must be at least 1, got {args.gradient_accumulation_steps}.",
                         fields=("gradient_accumulation_steps",))
    rows = args.per_device_train_batch_size * (world_size or 1)
    if rows < (1 if world_size is None else 2):
        raise InputError("a contrastive batch needs at least 2 sentences (the others in the batch are the negatives); "
                         "raise per_device_train_batch_size.", fields=("per_device_train_batch_size",))
    if args.max_steps < -1:  # the Trainer reads any negative count as "train by epochs", and records this one
        raise InputError(f"max_steps {args.max_steps} is no number of steps: give a positive max_steps, or -1 (the "
                         "default) to train num_train_epochs.", fields=("max_steps",))
    if args.max_steps == 0:
        raise InputError("max_steps 0 trains nothing (the Trainer would silently train num_train_epochs instead); give "
                         "a positive max_steps, or leave it out to train by epochs.", fields=("max_steps",))
    epochs = args.num_train_epochs
    if args.max_steps < 0 and not math.isfinite(epochs):  # the Trainer's step count would be NaN / inf
        raise InputError(f"num_train_epochs must be a finite number > 0, got {epochs}; or give max_steps.",
                         fields=("num_train_epochs",))
    if args.max_steps < 0 and epochs <= 0:
        raise InputError(f"num_train_epochs {epochs} trains nothing, and the export would describe an untrained "
                         "encoder as trained; give a positive num_train_epochs or max_steps.",
                         fields=("num_train_epochs",))


#: a ``*_steps`` interval, the strategy that must be ``steps`` for it to apply, and what it does without
STEP_INTERVALS = (("save_steps", "save_strategy", "saves nothing: no checkpoint is saved during training"),
                  ("eval_steps", "eval_strategy", "scores nothing during training: the dev data is scored before "
                                                  "the first step and after the last only"),
                  ("save_total_limit", "save_strategy", "keeps or deletes nothing: no checkpoint is saved during "
                                                        "training"))


def strategy_name(value) -> str:
    return str(getattr(value, "value", value))  # IntervalStrategy.NO -> "no"


def _interval_refusal(args, steps: str, strategy: str, outcome: str) -> InputError:
    return InputError(f"{steps}={getattr(args, steps):g} {outcome} (with {strategy}='no'); add {strategy}='steps', "
                      f"or drop {steps}.",
                      fields=(steps, strategy))


class _FilledInInt(int):
    """An interval transformers filled in (``eval_steps`` from ``logging_steps``): a number like any other, whose
    type says that nobody gave it, carried as it is into a copy (``dataclasses.replace``)."""

    __slots__ = ()


class _FilledInFloat(float):
    __doc__ = _FilledInInt.__doc__
    __slots__ = ()


def filled_in_interval(value):
    """``value`` (an interval transformers' ``__post_init__`` filled in) marked as filled in
    (:func:`check_step_intervals`)."""
    return _FilledInInt(value) if isinstance(value, numbers.Integral) else _FilledInFloat(value)


def _filled_in_by_transformers(args, steps: str, value) -> bool:
    if isinstance(value, (_FilledInInt, _FilledInFloat)):
        return True
    # arguments that do not mark what transformers filled in (plain TrainingArguments): an eval_steps equal to
    # logging_steps may be its filling in, carried into a copy whose evaluation was turned off
    return (not getattr(args, "marks_filled_in_intervals", False) and steps == "eval_steps"
            and value == getattr(args, "logging_steps", None))


def check_step_intervals(args) -> None:
    """``save_steps`` / ``eval_steps`` given (other than the field's default) while their strategy is ``no``: the
    interval would be ignored, so the run would save no checkpoint that a Ctrl-C or a crash could resume from, or
    score no dev data between its first and last step. Only the explicit contradiction: transformers fills
    ``eval_steps`` in (from ``logging_steps``) only for ``eval_strategy="steps"``. A preset's interval goes with its
    strategy (:func:`unapplied_intervals`). transformers' own filling in, carried into a copy whose evaluation was
    turned off (``dataclasses.replace(args, eval_strategy="no")``), is left alone: arguments that mark it
    (``ContrastiveTrainingArguments``: :func:`filled_in_interval`) are refused for any ``eval_steps`` given, whatever
    its value; other arguments are not for one equal to ``logging_steps``, which may be the filling in (a caller who
    knows which intervals were given checks those too: :func:`check_given_intervals`). ``load_best_model_at_end``
    without evaluations or without checkpoints is refused here too, in one line (transformers' refusal is several
    lines naming flags, and it has none for evaluation and saving both off, where the best checkpoint would silently
    be none)."""
    defaults = {f.name: f.default for f in dataclasses.fields(args)} if dataclasses.is_dataclass(args) else {}
    for steps, strategy, outcome in STEP_INTERVALS:
        value = getattr(args, steps, None)
        filled_in = _filled_in_by_transformers(args, steps, value)
        if (steps in defaults and value != defaults[steps] and not filled_in
                and strategy_name(getattr(args, strategy, None)) == "no"):
            raise _interval_refusal(args, steps, strategy, outcome)
    best = getattr(args, "load_best_model_at_end", False)
    save = strategy_name(getattr(args, "save_strategy", None))
    evaluate = strategy_name(getattr(args, "eval_strategy", None))
    if save == "best" and evaluate == "no":  # transformers would save no checkpoint at all, without a word
        raise InputError("save_strategy='best' saves a checkpoint whenever the dev score improves, and eval_strategy="
                         "'no' scores none during training: add eval_strategy='steps' (with eval_steps) or 'epoch', "
                         "or save_strategy='steps'.", fields=("save_strategy", "eval_strategy"))
    if best and evaluate == "no":
        raise InputError("load_best_model_at_end=True keeps the checkpoint that scored best on the dev data, and "
                         "eval_strategy='no' scores none during training: add eval_strategy='steps' and save_strategy="
                         "'steps' (save_steps a multiple of eval_steps), or load_best_model_at_end=False.",
                         fields=("load_best_model_at_end", "eval_strategy", "save_strategy", "save_steps",
                                 "eval_steps"))
    if best and save == "no":
        raise InputError(f"load_best_model_at_end=True keeps the best checkpoint, and save_strategy='no' saves none: "
                         f"add save_strategy={evaluate!r} (as eval_strategy) with save_steps a multiple of eval_steps, "
                         "or load_best_model_at_end=False.",
                         fields=("load_best_model_at_end", "save_strategy", "eval_strategy", "save_steps",
                                 "eval_steps"))


def check_given_intervals(args, given: Collection[str]) -> None:
    """The intervals among ``given`` (those the caller gave: the flags typed on a command line) set while their
    strategy is ``no``, whatever their value: where the caller gave it, an interval at its field's default
    (``save_steps=500``) or, in arguments that do not mark transformers' filling in, an ``eval_steps`` equal to
    ``logging_steps`` is given too (which :func:`check_step_intervals` cannot tell apart)."""
    for steps, strategy, outcome in STEP_INTERVALS:
        if (steps in given and getattr(args, steps, None) is not None
                and strategy_name(getattr(args, strategy, None)) == "no"):
            raise _interval_refusal(args, steps, strategy, outcome)


def unapplied_intervals(values: Mapping[str, object], given: Collection[str]) -> list[str]:
    """The step intervals among ``values`` (a preset's, a run record's, with the caller's) that the caller did not
    give (``given``) and whose strategy is ``no``: the caller turned their strategy off, so they are left out (at
    their default) rather than refused as a contradiction (:func:`check_step_intervals`)."""
    return [steps for steps, strategy, _ in STEP_INTERVALS
            if steps in values and steps not in given and strategy_name(values.get(strategy)) == "no"]


def whole_batches_only(args, made: bool = False) -> None:
    """ContrastiveTrainer trains on whole batches only: an incomplete last batch has fewer in-batch negatives (one
    sentence: none) and cannot be gathered across processes. ``dataloader_drop_last=False`` given to arguments whose
    own default is True (:class:`~hf_cse.training_args.ContrastiveTrainingArguments`; ``made``: as they are made,
    so someone chose it) would do nothing, and is refused. Set later (transformers' ``set_dataloader`` sets it
    unasked) it is set back to True with a warning; plain ``TrainingArguments``' False (transformers' default), said
    at debug level."""
    if args.dataloader_drop_last:
        return
    default = getattr(type(args), "__dataclass_fields__", {}).get("dataloader_drop_last")
    ours = default is not None and default.default is True
    if ours and made:
        raise InputError("dataloader_drop_last=False: ContrastiveTrainer trains on whole batches only (an incomplete "
                         "last batch has fewer in-batch negatives, one sentence none, and cannot be gathered across "
                         "processes), so it would drop them anyway: leave dataloader_drop_last at True.",
                         fields=("dataloader_drop_last",))
    logger.log(logging.WARNING if ours else logging.DEBUG, "dataloader_drop_last=False set back to True: "
               "ContrastiveTrainer trains on whole batches only (an epoch's incomplete last batch is skipped)")
    args.dataloader_drop_last = True


#: TrainingArguments only transformers' supervised paths read (its label smoother, its evaluation and prediction
#: loops), never an hf_cse run: their unset values, and why each would do nothing
SUPERVISED_ONLY = {
    "label_smoothing_factor": (0.0, "the contrastive losses take no label smoothing (it smooths transformers' own "
                                    "cross-entropy of labels)"),
    **{name: (unset, "transformers' evaluation loop reads it, and hf_cse scores its dev data itself")
       for name, unset in (("prediction_loss_only", False), ("label_names", None), ("include_for_metrics", []),
                           ("eval_accumulation_steps", None), ("batch_eval_metrics", False))},
}


def check_supervised_only(args) -> None:
    """Refuse a :data:`SUPERVISED_ONLY` argument given a value: the run would accept it, record it and ignore it."""
    for name, (unset, why) in SUPERVISED_ONLY.items():
        value = getattr(args, name, unset)
        if value not in (unset, None) and value != []:
            raise InputError(f"{name}={value!r} does nothing here: {why}. Drop {name}.", fields=(name,))


def check_loader_and_schedule(args) -> None:
    """Values torch or transformers would refuse with a traceback once training starts: persistent loader workers
    without workers (torch's DataLoader), a keyword the learning-rate schedule does not take (its function)."""
    if getattr(args, "dataloader_persistent_workers", False) and not getattr(args, "dataloader_num_workers", 0):
        raise InputError("dataloader_persistent_workers=True keeps the loader's worker processes alive, and "
                         "dataloader_num_workers is 0 (none): give dataloader_num_workers > 0, or drop "
                         "dataloader_persistent_workers.", fields=("dataloader_persistent_workers",
                                                                   "dataloader_num_workers"))
    given = getattr(args, "lr_scheduler_kwargs", None)
    if not isinstance(given, dict) or not given:
        return
    import inspect

    from transformers.optimization import TYPE_TO_SCHEDULER_FUNCTION
    from transformers.trainer_utils import SchedulerType

    kind = SchedulerType(getattr(args.lr_scheduler_type, "value", args.lr_scheduler_type))
    params = inspect.signature(TYPE_TO_SCHEDULER_FUNCTION[kind]).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    takes = [name for name in params if name not in ("optimizer", "num_warmup_steps", "num_training_steps")]
    wrong = sorted(set(given) - set(takes))
    if wrong:
        raise InputError(f"lr_scheduler_kwargs {', '.join(map(repr, wrong))}: the {kind.value} schedule takes "
                         f"{', '.join(takes) or 'no keyword'} (the trainer gives the step counts itself); drop "
                         f"{'them' if len(wrong) > 1 else 'it'}.", fields=("lr_scheduler_kwargs", "lr_scheduler_type"))
