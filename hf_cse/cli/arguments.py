"""Command-line arguments of the scripts (parsed with ``HfArgumentParser``).

The model and method flags are not written here: they are derived from the method configurations' fields
(:func:`model_arguments_class`: type, choices and help from each field), from the loss registry
(:func:`loss_arguments_class`: one flag per loss hyperparameter) and from the ``dcl`` loss's own hyperparameters
(:func:`dcl_arguments_class`). Adding a config field or a loss hyperparameter adds its flag.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import re
import sys
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, make_dataclass
from typing import Any, Literal

from ..checks import InputError
from ..hyperparameter_rules import not_taken_error, rule_as_typed
from ..losses import available_losses, get_loss_class, loss_hyperparameters
from ..number_lists import parse_float_list, parse_int_list
from ..objectives import DCL, objectives_for
from ..presets import DEFAULT_METHOD, PRESETS
from .flags_in_use import check_method_flags

#: config fields that are not command-line flags: set by from_encoder (encoder_config, base_encoder,
#: base_encoder_local, pooler_source, encoder_max_seq_length) or built from the loss flags (objectives)
NOT_FLAGS = ("encoder_config", "base_encoder", "base_encoder_local", "objectives", "pooler_source",
             "encoder_max_seq_length")


def _method_configs() -> dict[str, type]:
    from ..models import METHODS

    return {name: model_cls.config_class for name, model_cls in METHODS.items()}


def _own_fields(config_cls: type) -> list[dataclasses.Field]:
    """The dataclass fields hf_cse adds to ``PretrainedConfig`` (those carrying a ``help``), minus :data:`NOT_FLAGS`."""
    return [f for f in dataclasses.fields(config_cls) if "help" in f.metadata and f.name not in NOT_FLAGS]


def _field_type(config_cls: type, name: str) -> Any:
    """A field's annotation resolved in the module of the class that declares it (annotations are strings)."""
    for klass in config_cls.__mro__:
        annotation = klass.__dict__.get("__annotations__", {}).get(name)
        if annotation is not None:
            if not isinstance(annotation, str):
                return annotation
            return eval(annotation, dict(vars(sys.modules[klass.__module__])))  # noqa: S307 - our own annotation
    raise KeyError(name)


def config_fields(config_classes: dict[str, type]) -> dict[str, tuple[Any, str, dict[str, Any]]]:
    """For each config field that is a flag: its type, its help and its default per method that has it."""
    out: dict[str, tuple[Any, str, dict[str, Any]]] = {}
    for method, config_cls in config_classes.items():
        for f in _own_fields(config_cls):
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
            typ, help_text, defaults = out.get(f.name, (_field_type(config_cls, f.name), f.metadata["help"], {}))
            out[f.name] = (typ, help_text, {**defaults, method: default})
    return out


def _metadata(config_classes: dict[str, type], name: str) -> Mapping[str, Any]:
    for config_cls in config_classes.values():
        for f in _own_fields(config_cls):
            if f.name == name:
                return f.metadata
    return {}


def _aliases(config_classes: dict[str, type], name: str) -> list[str]:
    """Other option strings of a config field's flag (``metadata["aliases"]``, other names of the field:
    ``--torch_dtype`` for ``encoder_dtype``, whose own name transformers' config already uses)."""
    return [f"--{alias}" for alias in _metadata(config_classes, name).get("aliases", ())]


def _list_flag(parse: Callable[[str], list]) -> Callable[[str], list]:
    """An argparse type reading one comma-separated value (``--matryoshka_dims 384,256,128``) with ``parse``; a bad
    value is argparse's one-line error with the parser's message."""
    def read(text: str) -> list:
        try:
            return parse(text)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None

    read.__name__ = parse.__name__
    return read


#: config fields whose flag takes one comma-separated value (``metadata["flag_type"]``) instead of argparse's
#: space-separated list
LIST_FLAG_TYPES = {"int_list": _list_flag(parse_int_list), "float_list": _list_flag(parse_float_list)}


def _describe_defaults(defaults: dict[str, Any], methods: Iterable[str]) -> str:
    """`` (--method diffcse only) Method default: ...`` for the help of a config-field flag."""
    methods = list(methods)
    only = "" if set(defaults) == set(methods) else f" (--method {', '.join(sorted(defaults))} only)"
    values = set(map(repr, defaults.values()))
    if values == {"None"}:
        return only
    if len(values) == 1:
        return f"{only} Method default: {next(iter(defaults.values()))}."
    return f"{only} Method default: " + ", ".join(f"{v} for {m}" for m, v in defaults.items()) + "."


@dataclass
class _ScriptModelArguments:
    model_name_or_path: str | None = field(
        default=None, metadata={"help": "Encoder checkpoint (folder or Hub id). Default: packaged all-MiniLM-L6-v2."}
    )
    method: str = field(default=DEFAULT_METHOD, metadata={"help": "Method model (hf_cse.models.METHODS)."})
    trust_remote_code: bool = field(
        default=False, metadata={"help": "Allow an encoder (or tokenizer) whose code lives in its Hub repo / folder "
                                         "to run that code (transformers' trust_remote_code). Off by default."}
    )


def _common_default(defaults: dict[str, Any], methods: Iterable[str]) -> Any:
    """The field's default when every method has the field with the same default, else None."""
    values = list(defaults.values())
    if set(defaults) != set(methods) or any(repr(v) != repr(values[0]) for v in values):
        return None
    return values[0]


def model_arguments_class(config_classes: dict[str, type] | None = None) -> type:
    """``ModelArguments``: the encoder and method flags, plus one flag per config field of the methods. A field
    every method has with one default takes that default (a boolean defaulting to true gets its ``--no_`` form);
    otherwise the default is None = the method's own, and a field only some methods have is refused with the others."""
    config_classes = config_classes or _method_configs()
    method = _ScriptModelArguments.__dataclass_fields__["method"]
    fields = [("method", Literal[tuple(config_classes)],
               field(default=method.default, metadata={"help": f"Method model: {', '.join(config_classes)}."}))]
    for name, (typ, help_text, defaults) in config_fields(config_classes).items():
        common = _common_default(defaults, config_classes)
        help_text = help_text[0].upper() + help_text[1:] + "."
        if common is None:
            help_text += _describe_defaults(defaults, config_classes)
        if rule := _metadata(config_classes, name).get("rule"):
            help_text += f" Must be {rule_as_typed(rule)}."
        metadata = {"help": help_text}
        if aliases := _aliases(config_classes, name):
            metadata["aliases"] = aliases
        if flag_type := _metadata(config_classes, name).get("flag_type"):
            fields.append((name, typing.Optional[LIST_FLAG_TYPES[flag_type]],  # noqa: UP045 - a function, not a type
                           field(default=None, metadata=metadata)))
            continue
        fields.append((name, typ if common is not None else typ | None, field(default=common, metadata=metadata)))
    return make_dataclass("ModelArguments", fields, bases=(_ScriptModelArguments,))


def config_kwargs_from(method: str, model_args, config_classes: dict[str, type] | None = None,
                       chosen: set[str] = frozenset()) -> dict[str, Any]:
    """The config fields set by the flags (those left at None keep the method's default); a field the chosen
    method's config lacks is an error, naming where it was set (``chosen``: a ``--config`` file's key, else the
    flag)."""
    config_classes = config_classes or _method_configs()
    flags = config_fields(config_classes)
    given = {k: getattr(model_args, k) for k in flags if getattr(model_args, k, None) is not None}
    check_method_flags(method, given, method_flags(config_classes), chosen)
    return given


def method_flags(config_classes: dict[str, type] | None = None) -> dict[str, list[str]]:
    """Each method's own settings that are flags (its config's fields), by method."""
    config_classes = config_classes or _method_configs()
    flags = config_fields(config_classes)
    return {m: sorted(f.name for f in _own_fields(cls) if f.name in flags) for m, cls in config_classes.items()}


def method_only_flags(method: str, config_classes: dict[str, type] | None = None) -> set[str]:
    """Config-field flags of other methods that ``method``'s config does not take (e.g. DiffCSE's with simcse)."""
    config_classes = config_classes or _method_configs()
    return set(config_fields(config_classes)) - {f.name for f in _own_fields(config_classes[method])}


@dataclass
class DataArguments:
    train_file: str | None = field(
        default=None, metadata={"help": "One sentence per line (.txt), or a .csv/.tsv column or .json/.jsonl field "
                                        "(--text_column). Default: demo corpus."}
    )
    dataset_name: str | None = field(default=None, metadata={
        "help": "Hub data set with a text column, or a local folder: one save_to_disk wrote, or of train files "
                "(those of its train split)."})
    dataset_config_name: str | None = field(default=None, metadata={"help": "Hub data set configuration."})
    text_column: str | None = field(default=None, metadata={
        "help": "Column (or JSON field) holding the sentences. Default: text, or a .csv/.tsv's only column."})
    pair_column: str | None = field(
        default=None, metadata={"help": "Pair data: column of each row's positive (e.g. an entailed sentence); the "
                                        "--text_column text and it are the two views (.csv/.tsv or Hub data)."}
    )
    negative_column: str | None = field(
        default=None, metadata={"help": "Triplet data (with --pair_column): column of each row's hard negative, "
                                        "an extra candidate of every anchor as in supervised SimCSE."}
    )
    max_train_samples: int | None = field(default=None, metadata={"help": "Use only the first N sentences."})
    preprocessing_num_workers: int | None = field(default=None, metadata={"help": "Processes for tokenizing."})


@dataclass
class StreamingArguments:
    """How the training text is read: streamed, or several files mixed (:mod:`hf_cse.streaming`)."""

    streaming: bool = field(default=False, metadata={
        "help": "Read the training text as a stream (local files or --dataset_name), tokenized on the fly: corpora "
                "larger than memory. Needs --max_steps. Shuffled through a buffer (--stream_shuffle_buffer). See "
                "hf_cse/streaming.py."})
    train_files: list[str] | None = field(default=None, metadata={
        "help": "Several training text files (.txt/.csv/.tsv/.json/.jsonl), mixed by --train_weights."})
    train_weights: list[float] | None = field(default=None, metadata={
        "help": "Mixing weights of --train_files, one per file (normalised to sum 1). Default: equal. The mixture "
                "ends once every file has been read once, so file i is read about (w_i/size_i)/(w_min/size_min) "
                "times per epoch (weights in proportion to the sizes: each once; 0.95 0.05 on two equal files: the "
                "first about 19 times); in memory a warning says the repeats."})


def method_arguments_class() -> type:
    """``--loss`` (its help lists the losses registered now: a caller's own too), ``--preset`` and ``--config``."""
    return make_dataclass("MethodArguments", [
        ("loss", str | None, field(default=None, metadata={
            "help": "Loss of the main contrastive objective (default: the method's, infonce for simcse): "
                    + ", ".join(available_losses())})),
        ("preset", str | None, field(default=None, metadata={
            "help": "A paper's settings (hf_cse.presets): " + ", ".join(sorted(PRESETS))})),
        ("config", str | None, field(default=None, metadata={
            "help": "A run description (.json): settings by flag name, or a run's hf_cse_run.json to run it again; "
                    "flags given win over it, and it over its preset. See hf_cse.cli.run_config."})),
    ])


def main_loss(method: str, loss: str | None) -> str:
    """The main objective's loss: ``--loss`` if given, else the method's own (infonce for simcse)."""
    from ..models import get_method

    return loss or get_method(method).config_class().loss


def _hyperparameter_type(loss: str, name: str) -> Any:
    return typing.get_type_hints(get_loss_class(loss).__init__).get(name, str)


def _flag_type(name: str) -> object:
    """The type of hyperparameter ``name``, checked to agree across every loss that takes it."""
    seen = {loss: _hyperparameter_type(loss, name) for loss in available_losses() if name in loss_hyperparameters(loss)}
    types = set(seen.values())
    if len(types) > 1:
        raise TypeError(f"loss hyperparameter {name!r} has different types across losses: {seen}")
    return types.pop()


#: reStructuredText a docstring's ``Args:`` marks its words with, which a help shows plain: ``x``, :func:`x`, **x**
_RST_MARKUP = re.compile(r"``([^`]+)``|:\w+:`~?([^`]+)`|\*\*([^*]+)\*\*")


def _documented(cls: type, name: str) -> str:
    """What the loss's docstring says of hyperparameter ``name`` in its ``Args:`` section (one line, as plain text),
    or the first of its base classes' that does (the paradigm paper's modified objectives: ModifiedObjective's), or
    ""."""
    for owner in cls.__mro__:
        lines = inspect.cleandoc(owner.__doc__ or "").splitlines()
        start = next((i for i, line in enumerate(lines) if line.strip() == "Args:"), len(lines))
        said, taking = [], False
        for line in lines[start + 1:]:
            stripped = line.strip()
            if not stripped or not line.startswith(" "):
                break
            if re.match(r"\s{1,4}\w+:", line) and not line.startswith(" " * 5):  # the next argument's entry
                taking = stripped.startswith(f"{name}:")
                stripped = stripped[len(name) + 1:].strip() if taking else stripped
            if taking:
                said.append(stripped)
        if said:
            return _RST_MARKUP.sub(lambda m: next(group for group in m.groups() if group), " ".join(said))
    return ""


def _meaning(said: str) -> str:
    """What a hyperparameter is, from what its loss says of it: the first clause (no default, no note); "" where
    that says no more than its choices (the flag lists them) or points elsewhere in the docstring."""
    meaning = re.split(r" \(|; |, |\. ", said, maxsplit=1)[0].rstrip(".")
    return "" if meaning.startswith('"') or "see above" in meaning or meaning.startswith(("False", "True")) else meaning


def _hyperparameter_help(name: str, users: list[str]) -> str:
    """A loss hyperparameter flag's help: the losses taking it with their defaults, what it is (where one main
    loss takes it), and the rule its value keeps (where its losses agree)."""
    main_users = [loss for loss in users if loss != DCL] or users
    defaults = {loss: loss_hyperparameters(loss)[name].default for loss in main_users}
    text = (f"Hyperparameter of the --loss {main_users[0]} (default {defaults[main_users[0]]!r})."
            if len(main_users) == 1 else
            f"Hyperparameter of the --loss {', '.join(f'{k} {v!r}' for k, v in defaults.items())} (their defaults).")
    if len(main_users) == 1:
        said = _documented(get_loss_class(main_users[0]), name)
        text += f" {said}" if said else ""
    else:  # what it is in each loss, where they say (m: focal_infonce's margin on negatives, the GD margin...)
        meanings: dict[str, list[str]] = {}
        for loss in main_users:
            meanings.setdefault(_meaning(_documented(get_loss_class(loss), name)), []).append(loss)
        meanings.pop("", None)
        if len(meanings) == 1 and sum(map(len, meanings.values())) == len(main_users):
            text += f" {next(iter(meanings))}."
        elif meanings:
            text += " " + "; ".join(f"{', '.join(losses)}: {meaning}" for meaning, losses in meanings.items()) + "."
    rules = {get_loss_class(loss).hyperparameter_rules.get(name) for loss in main_users}
    if len(rules) == 1 and None not in rules:
        text += f" Must be {rule_as_typed(rules.pop())}."
    if DCL in users:  # the DCL objective added by --dcl_weight has its own flag
        text += f" The DCL objective of --dcl_weight takes --dcl_{name}."
    return text


def loss_arguments_class() -> type:
    """A dataclass with one optional flag per loss hyperparameter of the registry (default None = the
    loss's own default); ``loss_kwargs_from`` keeps the ones the chosen loss (``--loss``) takes."""
    names = sorted({n for loss in available_losses() for n in loss_hyperparameters(loss)})
    fields = []
    for name in names:
        users = [loss for loss in available_losses() if name in loss_hyperparameters(loss)]
        help_text = _hyperparameter_help(name, users)
        fields.append((name, _flag_type(name) | None, field(default=None, metadata={"help": help_text})))
    return make_dataclass("LossArguments", fields)


def _flag_names(*argument_classes: type) -> dict[str, str]:
    """Each flag name of ``argument_classes`` (a field's, or one of its ``aliases``) -> the field it sets."""
    return {alias.removeprefix("--"): f.name for cls in argument_classes for f in dataclasses.fields(cls)
            for alias in (f.name, *f.metadata.get("aliases", ()))}


def check_method_flag_names(*argument_classes: type) -> None:
    """No method's config field (a flag of its own) takes the name of another flag: a field of ``argument_classes``,
    of the script's model flags or a loss hyperparameter; argparse would stop at the clash with a traceback, or the
    clash would be blamed on a loss."""
    taken = _flag_names(_ScriptModelArguments, *argument_classes)
    hyperparameters: dict[str, list[str]] = {}
    for loss in available_losses():
        for name in loss_hyperparameters(loss):
            hyperparameters.setdefault(name, []).append(loss)
    for method, config_cls in _method_configs().items():
        for f in _own_fields(config_cls):
            for name in (f.name, *(a.removeprefix("--") for a in f.metadata.get("aliases", ()))):
                if name in taken or name in hyperparameters:
                    users = hyperparameters.get(name, [])
                    other = (f"a loss hyperparameter ({', '.join(users[:3])}{', ...' * (len(users) > 3)})"
                             if name not in taken else
                             "a flag" if taken[name] == name else f"an other name of --{taken[name]}")
                    raise InputError(f"method {method} ({config_cls.__module__}.{config_cls.__qualname__}) has a "
                                     f"config field {f.name!r}, but --{name} is already {other}: rename the field.")


def check_loss_flag_names(*argument_classes: type) -> None:
    """No loss hyperparameter takes the name of another flag (a field of ``argument_classes`` or one of its
    ``aliases``): each hyperparameter is a flag of its own, and argparse would stop at the clash with a traceback."""
    taken = _flag_names(*argument_classes)
    for loss in available_losses():
        clash = [name for name in loss_hyperparameters(loss) if name in taken]
        if clash:
            cls, name = get_loss_class(loss), clash[0]
            other = "a flag" if taken[name] == name else f"an other name of --{taken[name]}"
            raise InputError(f"--loss {loss} ({cls.__module__}.{cls.__qualname__}) has a hyperparameter {name!r}, "
                             f"but --{name} is already {other}: rename the hyperparameter in the loss's __init__.")


def dcl_arguments_class() -> type:
    """``--dcl_weight`` and one ``--dcl_<name>`` flag per hyperparameter of the ``dcl`` loss: the dimension-wise
    contrastive objective (ImSimCSE) added after the main one. None = the method's own setting."""
    weights = ", ".join(f"{config_cls().dcl_weight:g} for {m}" for m, config_cls in _method_configs().items())
    fields = [("dcl_weight", float | None, field(default=None, metadata={
        "help": "Weight lambda of the dimension-wise contrastive objective (DCL, ImSimCSE) added to the main loss; "
                f"0 = none. Method default: {weights}."}))]
    for name, param in loss_hyperparameters(DCL).items():
        fields.append((f"dcl_{name}", _hyperparameter_type(DCL, name) | None, field(default=None, metadata={
            "help": f"{name} of the DCL objective (the dcl loss's; default {param.default})."})))
    return make_dataclass("DCLArguments", fields)


def loss_kwargs_from(loss: str, loss_args) -> dict:
    """Hyperparameters given on the command line for ``loss``; a flag the loss does not take is an error."""
    valid = loss_hyperparameters(loss)
    given = {k: v for k, v in vars(loss_args).items() if v is not None}
    wrong = sorted(set(given) - set(valid))
    if wrong:
        raise not_taken_error(loss, wrong, list(valid), dashes="--")
    return given


def objectives_from_flags(defaults: list[dict], loss: str, loss_args, dcl_args) -> list[dict]:
    """The model's objectives from the flags (:func:`hf_cse.objectives.objectives_for`): ``--loss`` and its
    hyperparameter flags make the main one, ``--dcl_weight`` > 0 and the ``--dcl_*`` flags the DCL one."""
    given = {k[len("dcl_"):]: v for k, v in vars(dcl_args).items() if k != "dcl_weight" and v is not None}
    return objectives_for(defaults, loss, loss_kwargs_from(loss, loss_args), dcl_args.dcl_weight, given)
