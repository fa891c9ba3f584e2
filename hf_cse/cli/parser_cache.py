"""A description of each command's parser kept on disk, so that ``--help`` and the refusals that need only the flags
answer at once, before the training stack is imported.

Building ``hf-cse-train``'s parser imports transformers' ``TrainingArguments`` and with it torch: seconds before a
word is printed. So the first start of a command writes its parser down (:func:`remember_parser`): each flag's
option strings, destination, nargs, choices and default, and the usage and help text argparse prints. Later starts
rebuild an argparse parser from it without importing anything heavy (:func:`cached_parser`): it prints the same help
and parses the same command line the same way (abbreviations, ``--no_`` forms and aliases included), so the checks
of :mod:`hf_cse.cli` (empty paths, unknown flags) and argparse's own (a value that is not a number, a choice that is
not offered) give the same answers.

A description is found by a key of everything the flags are made from: hf_cse's source, transformers' argument code,
torch's version (``--optim``'s default depends on it), the Python version, the program name and the
terminal width (the help's line breaks). It lives in ``$HF_CSE_CACHE`` (default ``$XDG_CACHE_HOME/hf_cse`` or
``~/.cache/hf_cse``), in ``parsers/``. It is only a shortcut: where it cannot be read or written, a command takes
the slow path, which checks the same things again.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

CACHE_ENV = "HF_CSE_CACHE"
PACKAGE = Path(__file__).resolve().parents[1]
#: files outside hf_cse that the flags are made from: (package, file in it)
UPSTREAM_FILES = (("transformers", "training_args.py"), ("transformers", "hf_argparser.py"),
                  ("transformers", "__init__.py"), ("torch", "version.py"))

#: the argparse actions a description can hold, by the name ``add_argument(action=...)`` takes
_ACTIONS = {argparse._StoreAction: "store", argparse._StoreTrueAction: "store_true",
            argparse._StoreFalseAction: "store_false", argparse._StoreConstAction: "store_const",
            argparse._AppendAction: "append", argparse._ExtendAction: "extend", argparse._CountAction: "count",
            argparse._HelpAction: "help"}
_TYPES = {"int": int, "float": float, "str": str}


def cache_folder() -> Path:
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "hf_cse"


def _upstream_stamp(package: str, name: str) -> str:
    """The size and modification time of an installed package's file, found without importing the package."""
    try:
        spec = importlib.util.find_spec(package)
        stat = (Path(spec.origin).parent / name).stat()
    except (AttributeError, ImportError, OSError, TypeError, ValueError):
        return f"{package}/{name}: absent"
    return f"{package}/{name}: {stat.st_size} {stat.st_mtime_ns}"


def parser_key(command: str) -> str:
    """The key of ``command``'s parser in this process (its program name, as argparse takes it from ``sys.argv[0]``,
    and this terminal's width), built from everything its flags and help are made from (see the module doc); reading
    hf_cse's source takes milliseconds."""
    digest = hashlib.sha256()
    prog = os.path.basename(sys.argv[0]) if sys.argv else ""
    for part in (sys.version, command, prog, str(shutil.get_terminal_size().columns),
                 *(_upstream_stamp(package, name) for package, name in UPSTREAM_FILES)):
        digest.update(part.encode() + b"\0")
    for path in sorted(PACKAGE.rglob("*.py")):
        digest.update(str(path.relative_to(PACKAGE)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:24]


def _path(command: str) -> Path:
    return cache_folder() / "parsers" / f"{command}-{parser_key(command)}.json"


def _json_value(value):
    """``value`` if JSON keeps it as it is (an enum of strings becomes its value), else None."""
    value = getattr(value, "value", value)
    try:
        return value if json.loads(json.dumps(value)) == value else None
    except (TypeError, ValueError):
        return None


def describe(parser: argparse.ArgumentParser) -> dict | None:
    """What :func:`rebuild` needs of ``parser``; None when it has an action this module cannot rebuild. A type other
    than int / float / str is read as text (its errors are left to the full parser), and so are the choices of such
    a type unless all are text."""
    actions = []
    for action in parser._actions:
        kind = _ACTIONS.get(type(action))
        if kind is None:
            return None
        type_name = getattr(action.type, "__name__", None)
        choices = list(action.choices) if action.choices is not None else None
        if choices is not None and not all(isinstance(c, str) for c in choices):
            choices = None
        actions.append({"option_strings": list(action.option_strings), "dest": action.dest, "kind": kind,
                        "nargs": action.nargs, "const": _json_value(action.const),
                        "default": _json_value(action.default), "choices": choices, "required": action.required,
                        "type": type_name if type_name in _TYPES else None, "metavar": action.metavar})
    return {"prog": parser.prog, "usage": parser.format_usage(), "help": parser.format_help(), "actions": actions}


class CachedParser(argparse.ArgumentParser):
    """An argparse parser rebuilt from a description: the same flags, and the usage and help text of the parser it
    describes."""

    def __init__(self, description: dict):
        super().__init__(prog=description["prog"], add_help=False)
        self._usage_text, self._help_text = description["usage"], description["help"]

    def format_usage(self) -> str:
        return self._usage_text

    def format_help(self) -> str:
        return self._help_text


def rebuild(description: dict) -> CachedParser:
    parser = CachedParser(description)
    for item in description["actions"]:
        kwargs = {"action": item["kind"], "dest": item["dest"], "default": item["default"]}
        if item["kind"] == "help":
            parser.add_argument(*item["option_strings"], action="help")
            continue
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
    return parser


def cached_parser(command: str) -> CachedParser | None:
    """``command``'s parser rebuilt from its description, or None where there is none (yet) for this key."""
    try:
        return rebuild(json.loads(_path(command).read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError):  # none yet, or unreadable: the slow path
        return None


def remember_parser(command: str, parser: argparse.ArgumentParser) -> dict | None:
    """Write ``parser``'s description for the next starts of ``command`` (atomically: several processes of one
    launch may write it at once; a folder that cannot be written is left alone) and return it (None where
    :func:`describe` cannot describe it)."""
    description = describe(parser)
    if description is None:
        return None
    path, written = _path(command), None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=f".{path.name}.", delete=False,
                                         encoding="utf-8") as handle:
            written = Path(handle.name)
            json.dump(description, handle)
        os.replace(written, path)
        _prune(path.parent, command)
    except OSError:
        if written is not None:
            written.unlink(missing_ok=True)
    return description


#: descriptions kept per command (program names x terminal widths in use); each edit of hf_cse's source makes a new
#: one, so the oldest go
KEEP = 16


def _prune(folder: Path, command: str) -> None:
    found = sorted(folder.glob(f"{command}-*.json"), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in found[KEEP:]:
        old.unlink(missing_ok=True)
