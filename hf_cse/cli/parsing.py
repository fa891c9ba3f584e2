"""The commands' argparse parsers: how they are made (no abbreviations, bare optional booleans, argparse's errors in
one line with the closest choice) and what is read from a command line before anything else (empty path flags,
unknown flags, the flags typed).
"""

from __future__ import annotations

import argparse
import re
import sys

from ..checks import InputError, check_path_given
from ..errors import closest_name
from .flags import FLAG_OF_FIELD, use_parser
from .help import usage_text

#: flags that name a file or folder besides those ending in _dir, _file or _path (e.g. _or_path)
PATH_FLAGS = ("resume_from_checkpoint", "checkpoint", "tokenizer", "training_info", "eval_results", "deepspeed")


def is_path_flag(name: str) -> bool:
    return name.endswith(("_dir", "_file", "_path")) or name in PATH_FLAGS


#: argparse's refusal of a value outside a flag's choices (Python 3.11-3.13 quote the choices or not)
_INVALID_CHOICE = re.compile(r"invalid choice: (?P<value>'[^']*'|\S+) \(choose from (?P<choices>.*)\)$")


#: what users of sentence-transformers call a pooler, and hf_cse's name for it (checked against
#: hf_cse.models.pooling.ST_POOLING_MODES by the tests: this module stays free of torch)
CHOICE_ALIASES = {"mean": "avg", "lasttoken": "last"}


def closest_choice(message: str) -> str:
    """argparse's ``invalid choice: 'simsce' (choose from ...)`` with the closest choice named (``'simsce'; did you
    mean 'simcse'? (choose from ...)``), or the choice another library's name means (``'mean'``: ``'avg'``); any
    other message as it is."""
    found = _INVALID_CHOICE.search(message)
    if found is None:
        return message
    value = found.group("value").strip("'")
    choices = [choice.strip().strip("'") for choice in found.group("choices").split(",")]
    close = CHOICE_ALIASES[value] if CHOICE_ALIASES.get(value) in choices else closest_name(value, choices)
    if not close:
        return message
    at = found.start("value") + len(found.group("value"))
    return f"{message[:at]}; did you mean {close!r}?{message[at:]}"


def _without_dashed_twins(message: str) -> str:
    """``argument --learning_rate: ...`` for argparse's ``argument --learning_rate/--learning-rate: ...``: the
    dashed spelling HfArgumentParser adds to each flag is named nowhere else."""
    found = re.match(r"argument (\S+): ", message)
    if found is None:
        return message
    options = found.group(1).split("/")
    return f"argument {'/'.join(o for o in options if not _dashed_twin(o, options))}: {message[found.end():]}"


def _dashed_twin(option: str, options) -> bool:
    """Whether ``option`` is the dashed spelling (``--learning-rate``) of another of ``options``."""
    return option.startswith("--") and "-" in option[2:] and "--" + option[2:].replace("-", "_") in options


def one_line_errors(parser):
    """``parser`` with argparse's own errors (a value that is not a number, a choice not offered, a missing value)
    as one line, ``PROG: error: ...`` (exit code 2, argparse's), with the closest choice (:func:`closest_choice`):
    argparse prints its usage above, every flag (187 lines for hf-cse-train), which buries the line that says what
    is wrong. A missing positional gets the usage line's words."""
    def error(message: str):
        message = closest_choice(_without_dashed_twins(" ".join(str(message).split())))
        if "arguments are required" in message:
            message += f" (usage: {usage_text(parser)})"
        missing = re.fullmatch(r"argument (--\S+): expected one argument", message)
        if missing:  # e.g. --matryoshka_weights -1,1: argparse reads a value starting with '-' as the next flag
            message += f" (give it a value; one that starts with '-' reads as a flag: write {missing.group(1)}=VALUE)"
        parser.exit(2, f"{parser.prog}: error: {message}\n")

    parser.error = error
    parser.print_usage = lambda file=None: (file or sys.stderr).write(f"usage: {usage_text(parser)}\n")
    return parser


def bare_optional_booleans(parser):
    """``parser`` with the flag of each optional boolean field (``bool | None``, default None: not set = the method's
    or the encoder's own, e.g. ``--off_dropout``, ``--normalize``) taking the bare form ``--normalize`` for true, as
    every other boolean flag does: HfArgumentParser gives that form only to a boolean field with a default.
    ``--normalize false`` / ``true`` work as before, and leaving the flag out still leaves the field unset."""
    for action in parser._actions:
        if getattr(action.type, "__name__", "") == "string_to_bool" and action.nargs is None:
            action.nargs, action.const = "?", True
    return parser


def refuse_empty_paths(parser, argv: list[str] | None) -> None:
    """:func:`check_path_given` for every path flag (:func:`is_path_flag`) of an argparse ``parser`` in ``argv``,
    before anything else reads them."""
    given = vars(parser.parse_known_args(argv)[0])
    for name, value in given.items():
        if is_path_flag(name):
            for item in value if isinstance(value, list) else [value]:
                check_path_given(item, FLAG_OF_FIELD.get(name, f"--{name}"))


#: how the commands' parsers are made: no abbreviations, for argparse took a flag's prefix for it silently
#: (``--max_step 20`` for ``--max_steps``) or refused it as ambiguous (``--temp``); a prefix is an unknown flag, which
#: :func:`refuse_unknown_flags` names with the closest one
PARSER_OPTIONS = {"allow_abbrev": False}


def refuse_unknown_flags(parser, argv: list[str] | None) -> None:
    """One line for a flag ``parser`` does not know, with the closest one it does (a typo such as --lerning_rate
    would otherwise be an argparse error listing every unused argument, or a usage screen)."""
    use_parser(parser._actions)  # the flags an error's fields are printed as (hf_cse.cli.flags)
    unknown = parser.parse_known_args(argv)[1]
    if not unknown:
        return
    flags = [arg.split("=", 1)[0] for arg in unknown if arg.startswith("-")]
    if not flags:
        raise InputError(f"unexpected argument {unknown[0]!r}: every value follows its flag (see --help).")
    known = [option for action in parser._actions for option in action.option_strings]
    close = closest_name(flags[0], known)
    raise InputError(f"unknown flag {flags[0]}" + (f"; did you mean {close}?" if close else "; see --help."))


def typed_flags(parser: argparse.ArgumentParser, argv: list[str] | None) -> set[str]:
    """The options given on the command line (--no_x forms and other names included), by destination name."""
    # "not given": a list of each destination's own, which an option replaces, and which an option adding to its
    # value (action "extend", hf-cse-eval's --model_name_or_path) copies before adding: given is what no longer is it
    unset = {action.dest: [] for action in parser._actions}
    parsed = parser.parse_known_args(argv, namespace=argparse.Namespace(**unset))[0]
    return {name for name, value in vars(parsed).items() if value is not unset.get(name)}
