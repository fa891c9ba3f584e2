"""``--config run.json``: a run's settings read from a file, in the one format presets and experiments configs use.

The format is a JSON object of the settings a user chooses, each under the name of its ``hf-cse-train`` flag
(``{"method": "simcse", "loss": "infonce", "temperature": 0.05, "learning_rate": 3e-05}``): a true JSON type per
setting (a number, not the string ``"3e-05"``; ``true``, not ``"true"``; a list for ``train_files`` or
``matryoshka_dims``), ``null`` only where the flag's default is unset. The settings record a run writes,
``hf_cse_run.json`` (:meth:`hf_cse.cli.run_spec.RunSpec.fingerprint`), is read as such a file too: its own keys are
translated by :func:`settings_from_record` (``encoder``, ``generator``, the ``objectives`` list as ``loss`` and its
hyperparameters); the derived ``pooler_source``, ``world_size`` (the launch's) and ``train_file_content`` (the
data's) are not settings. One more key is
for the reader, not for the run: ``about`` (free text or an object, e.g. the experiment's name and paper).

The file's values are defaults, as a preset's are: a flag typed on the command line wins over the file, and the file
over its ``preset``. :data:`hf_cse.presets.PRESETS` are the same settings, checked by :func:`check_settings`.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..checks import InputError, check_path_given
from ..errors import closest_name
from ..run_files import DEV_AND_SELECTION, RECORD_NAMES, TRAIN_FILE_CONTENT, TRAINING_ARGUMENTS, USER_MODULES

#: the key a description may carry for its reader (an experiment's name, paper, regimes): never a setting
ABOUT = "about"
#: keys of hf_cse_run.json that are not settings a user chooses: derived from them, from the launch or from the data
DERIVED_RECORD_KEYS = ("pooler_source", "world_size", TRAIN_FILE_CONTENT)
#: keys of hf_cse_run.json that are not flags at all (translated by settings_from_record)
RECORD_ONLY_KEYS = (*RECORD_NAMES, "objectives", DEV_AND_SELECTION, TRAINING_ARGUMENTS, USER_MODULES,
                    *DERIVED_RECORD_KEYS)
#: flags a description cannot hold: the file itself, and the user's modules (imported before any file is read)
NOT_IN_A_FILE = ("config", "import_module")


def _flag_action(parser: argparse.ArgumentParser, name: str) -> argparse.Action | None:
    """The action of flag ``--name`` (the one taking a value: ``--no_x`` shares the destination of ``--x``)."""
    actions = [a for a in parser._actions if a.dest == name and a.option_strings and a.nargs != 0]
    return next((a for a in actions if f"--{name}" in a.option_strings), actions[0] if actions else None)


def _type_name(action: argparse.Action) -> str:
    kind = getattr(action.type, "__name__", "")
    if action.choices is not None:
        return "one of " + ", ".join(json.dumps(c) for c in action.choices)
    if kind == "string_to_bool":
        return "true or false"
    if kind in ("parse_int_list", "parse_float_list"):
        return "a list of numbers"
    element = {"int": "a whole number", "float": "a number", "str": "a string"}.get(kind, "a string")
    return f"a list of {element.split(' ', 1)[1]}s" if action.nargs in ("+", "*") else element


def _typed_value(action: argparse.Action, value: Any) -> Any:
    """``value`` as the flag's parsing would give it; ValueError when its JSON type is not the flag's."""
    kind = getattr(action.type, "__name__", "")
    if action.nargs in ("+", "*"):
        if not isinstance(value, list):
            raise ValueError
        return [_scalar(action, kind, v) for v in value]
    if kind in ("parse_int_list", "parse_float_list"):  # one comma-separated value on the command line
        if isinstance(value, list) and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
            value = ",".join(map(str, value))
        if not isinstance(value, str):
            raise ValueError
        return action.type(value)
    return _scalar(action, kind, value)


def _scalar(action: argparse.Action, kind: str, value: Any) -> Any:
    if action.choices is not None:
        if isinstance(value, (list, dict)) or value not in action.choices:
            raise ValueError
        return value
    if kind == "string_to_bool":
        if not isinstance(value, bool):
            raise ValueError
        return value
    if isinstance(value, bool):  # JSON true is no number
        raise ValueError
    if kind == "int":
        if not isinstance(value, int):
            raise ValueError
        return value
    if kind == "float":
        if not isinstance(value, (int, float)):
            raise ValueError
        return float(value)
    if not isinstance(value, str):
        raise ValueError
    return action.type(value) if callable(action.type) and kind != "str" else value


def _json_object_flags() -> set[str]:
    """The Trainer's flags that take a JSON object as text (``--lr_scheduler_kwargs '{"min_lr": 1e-06}'``): a
    file, and a run's record, gives them as a JSON object. transformers declares them ``dict | str`` (the declared
    annotation: its argument parser rewrites the fields' types to ``str``)."""
    from transformers import TrainingArguments

    declared = {name: [part.strip() for part in str(kind).split("|")]
                for name, kind in TrainingArguments.__annotations__.items()}
    return {name for name, parts in declared.items() if "str" in parts and any(p.startswith("dict") for p in parts)}


def _parses_unquoted(action: argparse.Action, text: str) -> bool:
    """Whether ``text`` without its quotes would be a valid value (``"3e-05"`` for a number, ``"true"``)."""
    try:
        _typed_value(action, json.loads(text))
    except (ValueError, TypeError, argparse.ArgumentTypeError):
        return False
    return True


def check_settings(settings: Mapping[str, Any], parser: argparse.ArgumentParser, where: str) -> dict[str, Any]:
    """``settings`` (flag name -> JSON value) checked against the flags of ``parser`` and typed as parsing them would
    type them. ``where`` names the source in the one-line refusal (``--config run.json``, ``preset simcse_bert``)."""
    if not isinstance(settings, Mapping):
        raise InputError(f"{where}: a run description is a JSON object of settings by flag name "
                         f"({{\"loss\": \"infonce\", ...}}), got {type(settings).__name__}.")
    names = sorted({a.dest for a in parser._actions if a.option_strings and a.dest != "help"} - set(NOT_IN_A_FILE))
    typed = {}
    for name, value in settings.items():
        if name == ABOUT:
            continue
        if name in NOT_IN_A_FILE:
            why = ("the command imports them before it reads any file: name them on the command line"
                   if name == "import_module" else "a file names no other file")
            raise InputError(f"{where}: {name!r} cannot be a setting of a run description ({why}); remove it.")
        action = _flag_action(parser, name)
        if action is None:
            close = closest_name(name, names)
            fix = f"did you mean {close!r}?" if close else "remove it (the keys are hf-cse-train's flag names)."
            raise InputError(f"{where}: unknown key {name!r}; {fix}")
        expected = _type_name(action)
        if value is None:
            if action.default is not None:
                raise InputError(f"{where}: {name!r} cannot be null (its default is {action.default!r}); give "
                                 f"{expected}, or remove the key.")
            typed[name] = None
            continue
        if isinstance(value, Mapping) and name in _json_object_flags():
            typed[name] = json.dumps(value)  # the text the flag takes; the training arguments read it as JSON
            continue
        try:
            typed[name] = _typed_value(action, value)
        except (ValueError, TypeError, argparse.ArgumentTypeError):
            fix = f"give {expected}"
            if isinstance(value, str) and _parses_unquoted(action, value):
                fix = f"write {value} without quotes (a JSON {'boolean' if value in ('true', 'false') else 'number'})"
            raise InputError(f"{where}: {name!r} must be {expected}, got {json.dumps(value)}; {fix}.") from None
    return typed


def settings_from_record(record: Mapping[str, Any], where: str = "the record") -> dict[str, Any]:
    """The settings a user chose, by flag name, from a run record (``hf_cse_run.json``): ``encoder`` and
    ``generator`` under their flags' names, the ``objectives`` as ``--loss`` with its hyperparameters and
    ``--dcl_weight`` / ``--dcl_*``, the pooling given only where the record says it was set (else the encoder's
    own is found again; set by a preset: that ``preset``, whose other values come with it), the run's dev data and
    checkpoint selection (its ``dev_and_selection``, which win over the preset's) and its other training arguments
    (``training_arguments``: optimizer, clipping, data order), the derived keys left out. A
    description without those keys is returned as it is."""
    from ..models import METHODS
    from ..objectives import DCL
    from ..presets import DEFAULT_METHOD, PRESETS

    settings = {k: v for k, v in record.items() if k not in RECORD_ONLY_KEYS}
    # the record's own names last: an older record holds the generator's config field too, as typed, after it
    settings.update({RECORD_NAMES[k]: v for k, v in record.items() if k in RECORD_NAMES})
    dev = record.get(DEV_AND_SELECTION) or {}
    if not isinstance(dev, Mapping):
        raise InputError(f"{where}: {DEV_AND_SELECTION!r} must be an object of flags (dev data, evaluation and save "
                         "schedule), as a run records it; or give those flags as keys of their own.")
    settings.update(dev)  # the dev data and checkpoint selection the run had: as it was watched, not only trained
    more = record.get(TRAINING_ARGUMENTS) or {}
    if not isinstance(more, Mapping):
        raise InputError(f"{where}: {TRAINING_ARGUMENTS!r} must be an object of flags (optimizer, clipping, data "
                         "order), as a run records it; or give those flags as keys of their own.")
    settings.update(more)
    source = str(record.get("pooler_source", "set by "))
    if not source.startswith("set by "):
        settings.pop("pooler_type", None)  # the encoder's own (or the papers' default): resolved again, not chosen
    preset = source.removeprefix("set by --preset ").split(";")[0] if source.startswith("set by --preset ") else None
    if preset in PRESETS and PRESETS[preset].get("pooler_type") == record.get("pooler_type"):
        # the preset chose the pooling (and normalize, unless set apart, was the encoder's own): the run named it,
        # so the file does
        settings["preset"] = preset
        settings.pop("pooler_type", None)
        if "; normalize set by " not in source:
            settings.pop("normalize", None)
    if "objectives" not in record:
        return settings
    method = record.get("method", DEFAULT_METHOD)
    settings["method"] = method  # a record without one (an older simcse run's) is simcse's all the same
    if method not in METHODS:
        raise InputError(f"{where}: unknown method {method!r}; methods: {', '.join(METHODS)}.{_modules_hint(record)}")
    defaults = METHODS[method].config_class().objectives
    objectives = list(record["objectives"] or [])
    if not objectives or not all(isinstance(o, Mapping) and "loss" in o for o in objectives):
        raise InputError(f"{where}: 'objectives' must be the list a run records ([{{\"loss\": ..., \"weight\": ..., "
                         "\"hyperparameters\": {...}}, ...]); or give 'loss' and its hyperparameters instead.")
    main, rest = objectives[0], objectives[1:]
    if float(main.get("weight", 1.0)) != float(defaults[0]["weight"]):
        raise InputError(f"{where}: the main objective's weight {main.get('weight')} is not the method's "
                         f"({defaults[0]['weight']}): no flag sets it; remove 'weight' or use the method's.")
    settings["loss"] = main["loss"]
    settings.update(main.get("hyperparameters") or {})
    dcl = [o for o in rest if o["loss"] == DCL]
    if dcl or any(o["loss"] == DCL for o in defaults[1:]):
        settings["dcl_weight"] = float(dcl[0]["weight"]) if dcl else 0.0
        settings.update({f"dcl_{k}": v for k, v in (dcl[0].get("hyperparameters") or {}).items()} if dcl else {})
    others, method_others = [o for o in rest if o["loss"] != DCL], [o for o in defaults[1:] if o["loss"] != DCL]
    if json.dumps(others, sort_keys=True) != json.dumps(method_others, sort_keys=True):
        raise InputError(f"{where}: objectives other than the main one and DCL must be the method's own "
                         f"({method_others}); no flag changes them. Remove them from 'objectives'.")
    return settings


def _modules_hint(record: Mapping[str, Any]) -> str:
    """Where a run record names the modules of the user's own its run imported: the flag that imports them."""
    modules = record.get(USER_MODULES) if isinstance(record, Mapping) else None
    if not modules or not isinstance(modules, list):
        return ""
    return f" The run imported {' '.join(map(str, modules))}: give --import_module {' '.join(map(str, modules))} too."


def read_run_config(path: str, parser: argparse.ArgumentParser) -> dict[str, Any]:
    """The settings of the run description at ``path`` (a file of this module's format or a run's
    ``hf_cse_run.json``), checked against ``parser``'s flags; one line naming the key and the fix otherwise."""
    where = f"--config {path}"
    file = Path(path)
    if not file.is_file():
        raise InputError(f"{where}: no such file; give the path of a run description (.json), e.g. a run's "
                         "hf_cse_run.json.")
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise InputError(f"{where} is not JSON ({getattr(err, 'msg', err)} at line {getattr(err, 'lineno', '?')}): "
                         "write one JSON object of settings by flag name.") from None
    hint = _modules_hint(data)
    if isinstance(data, Mapping) and any(k in data for k in RECORD_ONLY_KEYS):
        data = settings_from_record(data, where)
    if isinstance(data, Mapping) and isinstance(data.get("loss"), str):  # registered? before its hyperparameters' keys
        from ..errors import CSEError
        from ..losses import get_loss_class

        try:
            get_loss_class(data["loss"])
        except CSEError as err:
            raise InputError(f"{where}: {err}{hint}") from None
    settings = check_settings(data, parser, where)
    from .parsing import is_path_flag

    for name, value in settings.items():  # "" would be read as the current folder, as an empty flag would
        if is_path_flag(name):
            for item in value if isinstance(value, list) else [value]:
                check_path_given(item, f"{where}: {name!r}")
    return settings


def check_file_hyperparameters(path: str | None, settings: Mapping[str, Any], parser: argparse.ArgumentParser,
                               final: argparse.Namespace, typed: set[str] = frozenset()) -> list[str]:
    """The loss hyperparameters the ``--config`` file at ``path`` sets (``settings``: those no typed flag overrides)
    are taken by the run's loss (the file's, a typed ``--loss``'s or the method's): refused by the file and key, not
    as flags the user never typed. Where ``--loss`` is typed (``typed``: the flags given) over the file's, those it
    does not take, and the file's own loss does, are left out, as a preset's are: returned, for the caller to unset
    and say. ``final``: the command line parsed over the file's and the preset's settings."""
    if path is None:
        return []
    from ..hyperparameter_rules import not_taken_error
    from ..losses import available_losses, loss_hyperparameters
    from .arguments import main_loss

    loss = main_loss(final.method, final.loss)
    if loss not in available_losses():
        return []  # refused in its own words
    every = {name for other in available_losses() for name in loss_hyperparameters(other)}
    takes = list(loss_hyperparameters(loss))
    wrong = sorted(name for name, value in settings.items() if name in every - set(takes) and value is not None)
    own = main_loss(parser.get_default("method"), parser.get_default("loss"))  # the file's (or preset's) loss
    replaced = [name for name in wrong if "loss" in typed and own in available_losses()
                and name in loss_hyperparameters(own)]
    if replaced == wrong:
        return replaced  # the file's loss's, which the typed --loss replaces
    wrong = [name for name in wrong if name not in replaced]
    if wrong:
        keys = ", ".join(map(repr, wrong))
        raise InputError(f"--config {path}: {not_taken_error(loss, wrong, takes)} Remove {keys} from the file, or "
                         f"choose a loss that takes {'it' if len(wrong) == 1 else 'them'}.")
    return []


def settings_a_typed_flag_idles(final: argparse.Namespace, typed: set[str], from_file: set[str]) -> dict[str, str]:
    """The ``--config`` file's settings (``from_file``, none typed) that a typed flag leaves with nothing to do,
    by the needs the method's config fields and the run's loss declare (``--config <ESimCSE run> --queue_size 0``:
    the file's ``momentum``): name -> the typed flag. The caller leaves them out, as a preset's are. ``final``: the
    command line parsed over the file's and the preset's settings."""
    from ..hyperparameter_rules import field_needs, run_value, unmet_need
    from ..losses import available_losses, get_loss_class, loss_defaults
    from ..models import METHODS
    from .arguments import main_loss
    from .train_facts import HUB_PUSH_SETTINGS

    if final.method not in METHODS:
        return {}
    config_cls = METHODS[final.method].config_class
    needs, defaults_of_loss = dict(field_needs(config_cls)), {}
    needs.update({name: [("push_to_hub", "==", True)] for name in HUB_PUSH_SETTINGS})  # a typed --push_to_hub false
    loss = main_loss(final.method, final.loss)
    if loss in available_losses():
        needs.update(get_loss_class(loss).hyperparameter_needs)
        defaults_of_loss = loss_defaults(loss)
    value_of = run_value(vars(final).get, vars(config_cls()), defaults_of_loss)
    idle = {}
    for name in sorted(from_file - typed):
        need = unmet_need(needs[name], value_of) if name in needs else None
        if need is not None and need[0] in typed:
            idle[name] = need[0]
    return idle


def drop_what_typed_flags_replace(parser: argparse.ArgumentParser, argv: list[str] | None, typed: set[str],
                                  from_file: Mapping[str, Any], path: str | None,
                                  under: Mapping[str, Any] = {}) -> tuple[set[str], str]:  # noqa: B006 (read only)
    """Leave out the ``--config`` file's settings that typed flags (``typed``) replace: the file's method's own where
    another method is typed (:func:`files_method_own`), the hyperparameters of the file's loss a typed ``--loss``
    does not take, and the settings a typed flag leaves with nothing to do (:func:`settings_a_typed_flag_idles`), as
    a preset's are; the others keep their checks. Each left out falls back to ``under`` (the preset's settings, which
    the file's were set over) or is unset. Returns their names and what was left out and why, in words ("" for
    nothing)."""
    if path is None:
        return set(), ""

    def leave_out(names) -> None:
        parser.set_defaults(**{name: under.get(name) for name in names})

    untyped = {name: value for name, value in from_file.items() if name not in typed}
    final = parser.parse_known_args(argv)[0]
    methods_own = files_method_own(from_file.get("method"), final.method, untyped)
    if methods_own:  # the file's method's own objectives and settings give way to the typed method's
        leave_out(methods_own)
        untyped = {name: value for name, value in untyped.items() if name not in methods_own}
        final = parser.parse_known_args(argv)[0]
    replaced = check_file_hyperparameters(path, untyped, parser, final, typed)
    idle = settings_a_typed_flag_idles(final, typed, set(untyped) - set(replaced))
    leave_out([*replaced, *idle])
    said = [f"{', '.join(map(repr, methods_own))} (the file's --method {from_file.get('method')}'s own, not "
            f"--method {final.method}'s)"] * bool(methods_own)
    said += [f"{', '.join(map(repr, replaced))} (not taken by --loss {final.loss})"] * bool(replaced)
    said += [f"{name!r} (nothing to do with --{flag} typed)" for name, flag in idle.items()]
    return {*methods_own, *replaced, *idle}, "; ".join(said)


def files_method_own(file_method, method: str, untyped: Mapping[str, Any]) -> list[str]:
    """The settings of a ``--config`` file (``untyped``: those no typed flag replaces) that are its method's own
    defaults, its objectives (``--loss``, its hyperparameters, ``--dcl_*``) and config fields, where the command
    line types another ``method``: ``--config <an ImSimCSE run> --method simcse`` trains SimCSE's objectives, not
    ImSimCSE's off-dropout loss (refused as needing off-dropout, which the user never asked for)."""
    from ..models import METHODS
    from .arguments import method_flags

    if file_method == method or file_method not in METHODS or method not in METHODS:
        return []

    def defaults(of: str) -> dict[str, Any]:  # a method's objectives and config fields, as a record gives them
        config = METHODS[of].config_class()
        return {**settings_from_record({"method": of, "objectives": config.objectives}),
                **{name: getattr(config, name) for name in method_flags()[of]}}

    own, theirs = defaults(file_method), defaults(method)  # a default both methods share stays, said by no one
    return sorted(name for name, value in untyped.items() if name != "method" and value is not None and name in own
                  and own[name] == value and (name not in theirs or theirs[name] != value))
