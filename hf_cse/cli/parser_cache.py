"""A description of each command's parser, so that ``--help`` and the refusals that need only the flags answer at
once, before the training stack is imported.

Building ``hf-cse-train``'s parser imports transformers' ``TrainingArguments`` and with it torch: seconds before a
word is printed. A description holds what argparse needs of each flag -- option strings, destination, nargs,
choices, default, metavar and its help text with the defaults written in -- and a parser rebuilt from it
(:func:`rebuild`) imports nothing heavy: it prints the same help (argparse lays it out for this program name and
terminal width) and parses the same command line the same way (``--no_`` forms and aliases included, abbreviations
where the parser takes them), so the checks of :mod:`hf_cse.cli` (empty paths, unknown flags) and argparse's own (a
value that is not a number, a choice that is not offered) give the same answers.

A description is valid for one key: everything the flags are made from -- hf_cse's source, transformers' argument
code, torch's version file (``--optim``'s default depends on it) and the Python version. It is found in two places:

* shipped in the package (``hf_cse/cli/parsers/<command>.json``, written by
  ``python scripts/write_parser_descriptions.py``; a test fails when hf_cse's source has changed since), which
  answers from a fresh install's first start on, where transformers, torch and Python are the versions it was
  made with;
* else written by a command's first start (:func:`remember_parser`) in ``$HF_CSE_CACHE`` (default
  ``$XDG_CACHE_HOME/hf_cse`` or ``~/.cache/hf_cse``), in ``parsers/``, for the next starts.

It is only a shortcut: where none is valid, a command takes the slow path, which checks the same things again.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import sys
import tempfile
from pathlib import Path

from .help import HelpAllAction, UnsetDefaultsFormatter, full_help, use_layout
from .parsing import one_line_errors

CACHE_ENV = "HF_CSE_CACHE"
PACKAGE = Path(__file__).resolve().parents[1]
#: files outside hf_cse that the flags are made from: (package, file in it)
UPSTREAM_FILES = (("transformers", "training_args.py"), ("transformers", "hf_argparser.py"),
                  ("transformers", "__init__.py"), ("torch", "version.py"))

#: the argparse actions a description can hold, by the name ``add_argument(action=...)`` takes
_ACTIONS = {argparse._StoreAction: "store", argparse._StoreTrueAction: "store_true",
            argparse._StoreFalseAction: "store_false", argparse._StoreConstAction: "store_const",
            argparse._AppendAction: "append", argparse._ExtendAction: "extend", argparse._CountAction: "count",
            argparse._HelpAction: "help", HelpAllAction: "help_all"}
def _bool_word(value: str) -> str:
    """A boolean flag's value checked as transformers' ``string_to_bool`` checks it (the same refusal), and kept as
    the text typed: the early checks read a boolean flag's text (:func:`hf_cse.cli.train_facts.switched_on`)."""
    if not isinstance(value, str) or value.lower() in ("yes", "true", "t", "y", "1", "no", "false", "f", "n", "0"):
        return value
    raise argparse.ArgumentTypeError(f"Truthy value expected: got {value} but expected one of yes/no, true/false, t/f, "
                                     "y/n, 1/0 (case insensitive).")


#: the flags' types a description keeps (by their names in the parser it describes); any other is read as text
_TYPES = {"int": int, "float": float, "str": str, "string_to_bool": _bool_word}


def cache_folder() -> Path:
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "hf_cse"


def _upstream_digest(package: str, name: str) -> str:
    """The content of an installed package's file (its hash), found without importing the package."""
    try:
        spec = importlib.util.find_spec(package)
        data = (Path(spec.origin).parent / name).read_bytes()
    except (AttributeError, ImportError, OSError, TypeError, ValueError):
        return f"{package}/{name}: absent"
    return f"{package}/{name}: {hashlib.sha256(data).hexdigest()}"


def key_parts() -> dict[str, str]:
    """What a description is made from (module doc): the Python version (argparse's layout and parsing), hf_cse's
    source and transformers' and torch's files, each as a hash; reading them takes milliseconds."""
    source = hashlib.sha256()
    for path in sorted(PACKAGE.rglob("*.py")):
        source.update(path.relative_to(PACKAGE).as_posix().encode() + b"\0" + path.read_bytes())
    upstream = hashlib.sha256("\0".join(_upstream_digest(p, n) for p, n in UPSTREAM_FILES).encode())
    return {"python": "%d.%d" % sys.version_info[:2], "hf_cse": source.hexdigest()[:24],
            "upstream": upstream.hexdigest()[:24]}


def parser_key(command: str, parts: dict[str, str] | None = None) -> str:
    """The key of ``command``'s description: a hash of :func:`key_parts` (given, or read now)."""
    parts = key_parts() if parts is None else parts
    return hashlib.sha256(json.dumps([command, parts], sort_keys=True).encode()).hexdigest()[:24]


def shipped_path(command: str) -> Path:
    return PACKAGE / "cli" / "parsers" / f"{command}.json"


def _path(command: str, key: str) -> Path:
    return cache_folder() / "parsers" / f"{command}-{key}.json"


def _json_value(value):
    """``value`` if JSON keeps it as it is (an enum of strings becomes its value), else None."""
    value = getattr(value, "value", value)
    try:
        return value if json.loads(json.dumps(value)) == value else None
    except (TypeError, ValueError):
        return None


def _help_text(formatter: argparse.HelpFormatter, action: argparse.Action):
    """The help argparse shows for ``action``, its ``%(default)s``-style fields (and a defaults formatter's
    ``(default: ...)``) written in, so that a plain formatter shows the same; None, '' and SUPPRESS as they are."""
    if not action.help or action.help == argparse.SUPPRESS:
        return action.help
    return formatter._expand_help(action)


def describe(parser: argparse.ArgumentParser, facts: dict | None = None) -> dict | None:
    """What :func:`rebuild` needs of ``parser``; None when it has something this module cannot rebuild (an action or
    formatter of another kind, a fixed usage, argument groups: anything that makes the rebuilt help differ). A type
    other than int / float / str is read as text (its errors are left to the full parser), and so are the choices of
    such a type unless all are text (the help shows them as before)."""
    if parser.formatter_class not in (argparse.HelpFormatter, argparse.ArgumentDefaultsHelpFormatter,
                                      UnsetDefaultsFormatter) or parser.usage:
        return None
    formatter = parser._get_formatter()
    actions = []
    for action in parser._actions:
        kind = _ACTIONS.get(type(action))
        if kind is None:
            return None
        type_name = getattr(action.type, "__name__", None)
        choices = list(action.choices) if action.choices is not None else None
        metavar = action.metavar
        if choices is not None and not all(isinstance(c, str) for c in choices):
            choices = None
            if metavar is None:  # as argparse shows choices
                metavar = "{" + ",".join(map(str, action.choices)) + "}"
        actions.append({"option_strings": list(action.option_strings), "dest": action.dest, "kind": kind,
                        "nargs": action.nargs, "const": _json_value(action.const),
                        "default": _json_value(action.default), "choices": choices, "required": action.required,
                        "type": type_name if type_name in _TYPES else None, "metavar": metavar,
                        "help": _help_text(formatter, action)})
    # the program name argparse takes from sys.argv[0] is left to the process that shows it
    prog = None if parser.prog == os.path.basename(sys.argv[0]) else parser.prog
    description = {"prog": prog, "description": parser.description, "epilog": parser.epilog,
                   "allow_abbrev": parser.allow_abbrev, "actions": actions,
                   "help_layout": getattr(parser, "help_layout", None)}  # what --help shows (hf_cse.cli.help)
    if facts:  # what else the command's early checks read (CachedParser.facts)
        description["facts"] = facts
    # what the actions do not say (argument groups, exclusive flags) shows in the help: such a parser is not rebuilt
    rebuilt = rebuild(description)
    same = rebuilt.format_help() == parser.format_help() and full_help(rebuilt) == full_help(parser)
    return description if same else None


class CachedParser(argparse.ArgumentParser):
    """An argparse parser rebuilt from a description (:func:`rebuild`); ``facts``: what else the command's early
    checks read, written into the description by its caller (e.g. the losses' hyperparameter rules)."""

    facts: dict = {}


def rebuild(description: dict) -> CachedParser:
    """A parser with the flags of ``description``, which shows the help of the parser it describes."""
    parser = CachedParser(prog=description["prog"], description=description["description"],
                          epilog=description["epilog"], add_help=False,
                          allow_abbrev=description.get("allow_abbrev", True))
    parser.facts = description.get("facts") or {}
    for item in description["actions"]:
        shown = item["help"]
        if shown == argparse.SUPPRESS:
            shown = argparse.SUPPRESS  # argparse hides a flag whose help *is* its SUPPRESS, not an equal string
        elif shown:
            shown = shown.replace("%", "%%")  # written in already: argparse must not expand it again
        if item["kind"] in ("help", "help_all"):
            action = "help" if item["kind"] == "help" else HelpAllAction
            parser.add_argument(*item["option_strings"], action=action, help=shown)
            continue
        kwargs = {"action": item["kind"], "dest": item["dest"], "default": item["default"], "help": shown}
        if item["kind"] in ("store", "append", "extend"):
            kwargs.update(nargs=item["nargs"], choices=item["choices"], type=_TYPES.get(item["type"]),
                          metavar=item["metavar"])
            if item["nargs"] == "?":
                kwargs["const"] = item["const"]
        elif item["kind"] == "store_const":
            kwargs["const"] = item["const"]
        if not item["option_strings"]:  # a positional: its destination is its name
            del kwargs["dest"]
            parser.add_argument(item["dest"], **kwargs)
        else:
            parser.add_argument(*item["option_strings"], required=item["required"], **kwargs)
    # as the command's own parser: its --help (hf_cse.cli.help), argparse's errors in one line
    return use_layout(one_line_errors(parser), description.get("help_layout"))


def _read(path: Path, key: str) -> CachedParser | None:
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
        return rebuild(found["description"]) if found.get("key") == key else None
    except (OSError, ValueError, KeyError, TypeError, AttributeError):  # none, damaged or of an older form
        return None


def shipped_parser(command: str) -> CachedParser | None:
    """``command``'s parser rebuilt from the package's description, or None where it is not valid here."""
    return _read(shipped_path(command), parser_key(command))


def cached_parser(command: str) -> CachedParser | None:
    """``command``'s parser rebuilt from a valid description (the package's, else the cache's), or None where there
    is none (yet) for this key."""
    key = parser_key(command)
    return _read(shipped_path(command), key) or _read(_path(command, key), key)


def _write(path: Path, record: dict) -> None:
    """Atomically: several processes of one launch may write the same file at once."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=f".{path.name}.", delete=False,
                                     encoding="utf-8") as handle:
        written = Path(handle.name)
        try:
            json.dump(record, handle, indent=1, sort_keys=True)
            handle.write("\n")
        except BaseException:
            handle.close()
            written.unlink(missing_ok=True)
            raise
    os.chmod(written, 0o644)  # a temporary file is private; a description is not
    os.replace(written, path)


def remember_parser(command: str, parser: argparse.ArgumentParser, facts: dict | None = None) -> dict | None:
    """Write ``parser``'s description (with ``facts``, JSON) in the cache for the next starts of ``command`` (a
    folder that cannot be written is left alone) and return it (None where :func:`describe` cannot describe it)."""
    description = describe(parser, facts)
    if description is None:
        return None
    key = parser_key(command)
    try:
        _write(_path(command, key), {"key": key, "description": description})
        _prune(_path(command, key).parent, command)
    except OSError:
        pass
    return description


def ship_parser(command: str, parser: argparse.ArgumentParser, facts: dict | None = None) -> Path:
    """Write ``parser``'s description (with ``facts``) into the package (``hf_cse/cli/parsers``), with what it was
    made from."""
    description = describe(parser, facts)
    if description is None:
        raise ValueError(f"the parser of {command} cannot be described (parser_cache.describe)")
    parts = key_parts()
    _write(shipped_path(command), {"key": parser_key(command, parts), "made_from": parts,
                                   "description": description})
    return shipped_path(command)


#: descriptions kept per command in the cache (each edit of hf_cse's source makes a new one, so the oldest go)
KEEP = 16


def _prune(folder: Path, command: str) -> None:
    found = sorted(folder.glob(f"{command}-*.json"), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in found[KEEP:]:
        old.unlink(missing_ok=True)
