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
import re
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


#: the dev score of each STS task with a dev split, as :class:`hf_cse.evaluation.evaluators.STSDevEvaluator` logs it
#: (its one home: here, for the checks made before torch is imported)
STS_DEV_METRICS = {"STSBenchmark": "stsb_spearman", "SICKRelatedness": "sickr_spearman"}
#: what STS dev scoring logs: each task's score and their mean
STS_DEV_SCORES = (*STS_DEV_METRICS.values(), "avg_sts")


def dev_scores(scores_sts: bool, pairs_name: str | None = None) -> list[str]:
    """The dev scores a run logs, its primary one first: STS-B / SICK-R dev's where it scores them (``scores_sts``:
    ``senteval_data_dir`` given, or ``eval_source="hub"``), and its own scored pairs' (``pairs_name``, the
    ``eval_name`` of an ``eval_file`` / ``eval_dataset_name``; None: no pairs of its own)."""
    return [*(STS_DEV_SCORES if scores_sts else ()), *([f"{pairs_name}_spearman"] if pairs_name else [])]


def dev_scores_of(values) -> list[str]:
    """The dev scores a run of these values logs (:func:`dev_scores`), read from its arguments (or their values by
    the same names): STS dev's with ``senteval_data_dir`` or ``eval_source="hub"``, its own pairs' with ``eval_file``
    or ``eval_dataset_name``."""
    own = getattr(values, "eval_file", None) or getattr(values, "eval_dataset_name", None)
    scores_sts = getattr(values, "senteval_data_dir", None) is not None or getattr(values, "eval_source", None) == "hub"
    return dev_scores(scores_sts, (getattr(values, "eval_name", None) or "custom") if own else None)


#: who set a ``metric_for_best_model`` the caller did not give (:func:`metric_chosen_by`): transformers, which fills
#: in ``loss`` where ``load_best_model_at_end`` names no metric, or a preset (``"preset NAME"``)
FILLED_IN, PRESET = "transformers", "preset"


def checkpoint_selector(args) -> str:
    """What keeps a checkpoint by ``metric_for_best_model``: ``"load_best_model_at_end"`` (the best one loaded at the
    end), ``"save_strategy"`` (``'best'``: one saved whenever the dev score improves), or ``""`` (nothing)."""
    if getattr(args, "load_best_model_at_end", False):
        return "load_best_model_at_end"
    return "save_strategy" if strategy_name(getattr(args, "save_strategy", None)) == "best" else ""


def fill_in_best_metric(args) -> None:
    """transformers fills in ``loss`` where ``load_best_model_at_end`` names no ``metric_for_best_model``, and refuses
    ``save_strategy='best'`` without one with a traceback as the trainer is built: filled in the same way for both,
    so the trainer's rule (:func:`unchosen_metric_instead`) selects by the run's dev score in either."""
    if getattr(args, "metric_for_best_model", None) is None and checkpoint_selector(args) == "save_strategy":
        args.metric_for_best_model = "loss"


def metric_chosen_by(args) -> str:
    """Who chose ``args.metric_for_best_model``: ``""`` the caller (or nobody: None), :data:`FILLED_IN` transformers'
    ``loss`` (:func:`fill_in_best_metric`), ``"preset NAME"`` a preset (``ContrastiveTrainingArguments.filled_in``
    records both). Plain ``TrainingArguments`` do not say: ``loss`` where the run selects a checkpoint
    (:func:`checkpoint_selector`) is taken for the filling in."""
    recorded = getattr(args, "filled_in", None)
    if recorded is not None:
        return recorded.get("metric_for_best_model", "")
    metric = getattr(args, "metric_for_best_model", None)
    return FILLED_IN if metric in ("loss", "eval_loss") and checkpoint_selector(args) else ""


def unchosen_metric_instead(metric: str | None, chosen_by: str, scores: list[str],
                            selects: bool = True) -> str | None:
    """The dev score that replaces a ``metric_for_best_model`` nobody chose which the run would not log, the one rule
    of the command line and the trainer: transformers' ``loss`` (``chosen_by`` :data:`FILLED_IN`) in a run that
    ``selects`` a checkpoint by it (:func:`checkpoint_selector`) gives way to the run's first dev score
    (``scores[0]``: STS-B dev's where it is scored, else the user's own pairs', else an evaluator's primary metric),
    and a preset's STS dev score in a run that scores no STS dev data to the user's pairs' score. None: kept
    (``chosen_by`` empty: the caller's choice, checked as given; or logged; or no dev score to select by)."""
    name = (metric or "").removeprefix("eval_")
    if not metric or not chosen_by or not scores or name in scores:
        return None
    if chosen_by == FILLED_IN:
        return scores[0] if selects else None
    sts_scored = any(score in STS_DEV_SCORES for score in scores)
    return scores[0] if chosen_by.startswith(PRESET) and name in STS_DEV_SCORES and not sts_scored else None


def unchosen_metric_said(metric: str, chosen_by: str, instead: str, scored: str = "your own pairs",
                         term=str, scoring: str = "this run scores", selector: str = "load_best_model_at_end") -> str:
    """The log line of :func:`unchosen_metric_instead`'s replacement of ``metric`` by ``instead``; ``scored``: what
    the run scores instead of STS dev data; ``term``: how an option is named (the command line's ``--flag``);
    ``scoring``: what scores, with its verb (``"these arguments score"`` where they are made, before any run:
    :func:`hf_cse.presets.from_preset`); ``selector``: :func:`checkpoint_selector`'s answer."""
    if chosen_by == FILLED_IN:
        option = f"{term('save_strategy')} best" if selector == "save_strategy" else term(selector)
        why = (f"{option} without {term('metric_for_best_model')} (transformers' default, 'loss', is never logged by "
               f"a contrastive run)")
    else:
        why = f"{term(chosen_by)} selects by {metric}, but {scoring} no STS dev data, only {scored}"
    return f"{why}: checkpoints are selected by {instead}; {term('metric_for_best_model')} chooses another"


def own_pairs_metric(values) -> str | None:
    """The score of the user's own pairs that replaces a preset's STS dev ``metric_for_best_model`` in a run that
    scores those pairs and no STS dev data, which would never log it (the trainer refuses it); None where the metric
    is logged or is no STS dev score. Applies only to a metric a preset set: one the user chose is checked as given."""
    return unchosen_metric_instead(getattr(values, "metric_for_best_model", None), PRESET, dev_scores_of(values))


#: a correlation's metric name: ``..._spearman`` / ``..._pearson``, or a sentence-transformers evaluator's with its
#: similarity (``..._spearman_cosine``)
CORRELATION_NAME = re.compile(r"(^|_)(spearman|pearson)(_(cosine|dot|euclidean|manhattan|max))?$")


def higher_is_better(metric: str, logged: list[str] = ()) -> bool:
    """Whether ``metric`` is known to be higher the better: every score hf_cse logs for model selection (``logged``)
    is a correlation on dev pairs (``stsb_spearman``, ``sickr_spearman``, ``avg_sts``, ``<eval_name>_spearman``), and
    so is a sentence-transformers evaluator's Spearman or Pearson score (``sts-dev_spearman_cosine``); not a name
    that merely holds the word (``sts-dev_spearman_pvalue``, ``pearson_distance``)."""
    name = metric.removeprefix("eval_")
    return name in logged or name == "avg_sts" or CORRELATION_NAME.search(name) is not None


def check_best_metric_direction(args, logged: list[str] = ()) -> None:
    """``greater_is_better=False`` with a score that is higher the better (:func:`higher_is_better`) would keep the
    checkpoint of the lowest dev score, the worst. Refused whatever the eval_strategy: the comparison with the
    untrained encoder after training reads ``metric_for_best_model`` in the same direction. A metric not known here
    (one's own evaluator's, a loss) is left to ``greater_is_better``."""
    metric = args.metric_for_best_model
    if metric and args.greater_is_better is False and higher_is_better(metric, logged):
        raise InputError(f"greater_is_better False would keep the checkpoint of the lowest {metric}, the worst: it "
                         "is a correlation, higher the better. Leave greater_is_better out (or set it True).",
                         fields=("greater_is_better", "metric_for_best_model"))


def check_best_metric(args, logged: list[str], filled_in: bool | None = None) -> None:
    """``metric_for_best_model`` names a score the run's evaluation logs (``logged``; none known: not checked): the
    Trainer looks it up only at the first evaluation, steps (and a checkpoint) later, and fails with a KeyError there.
    ``loss`` (its default with load_best_model_at_end) is never logged: contrastive runs are scored on dev pairs.
    ``greater_is_better`` reads it the right way round (:func:`check_best_metric_direction`). ``filled_in``: whether
    the metric is transformers' filling in (None: taken to be where it is ``loss`` with load_best_model_at_end)."""
    check_best_metric_direction(args, logged)
    metric = args.metric_for_best_model
    strategy = getattr(args.eval_strategy, "value", args.eval_strategy)  # IntervalStrategy.STEPS -> "steps"
    if metric and logged and strategy != "no" and metric.removeprefix("eval_") not in logged:
        # transformers sets "loss" itself where load_best_model_at_end names no metric: say where it came from
        if filled_in is None:
            filled_in = metric_chosen_by(args) == FILLED_IN
        given = (f" (what transformers sets where {checkpoint_selector(args) or 'load_best_model_at_end'} names no "
                 "metric)") if filled_in else ""
        raise InputError(f"metric_for_best_model {metric}{given} is not a score this run logs "
                         f"({', '.join(logged)}): use metric_for_best_model={logged[0]!r}.",
                         fields=("metric_for_best_model", "load_best_model_at_end"))


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
