"""From the library's terms to the command line's: which flag sets each field an error names.

The library's messages name fields and arguments as a Python caller writes them (``cached_minibatch_size``,
:mod:`hf_cse.errors`); only the command line knows they are flags. The flag of a field is ``--`` + its name
(what ``HfArgumentParser`` makes of a dataclass field), read from the parser of the command being run, except for
the fields in :data:`FLAG_OF_FIELD`. :func:`in_flag_terms` rewrites an error's message with them.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager

#: fields whose flag is not ``--`` + their name: the export's positional arguments, named as its usage writes them
FLAG_OF_FIELD = {"checkpoint": "CHECKPOINT", "out_dir": "OUT_DIR"}
#: flags every command takes, read before its parser is (hf_cse.cli.user_modules)
EVERY_COMMANDS_FLAGS = ("import_module",)

# destination -> flag of the parser of the command being run (set by use_parser)
_command_flags: dict[str, str] = {}


def use_parser(actions) -> None:
    """Take the flags of an argparse parser's ``actions`` as those of the command being run: their destinations and long
    option of the same name, else the first (``encoder_dtype`` -> ``--encoder_dtype``, not its alias
    ``--torch_dtype``)."""
    _command_flags.clear()
    for action in actions:
        long = [o for o in action.option_strings if o.startswith("--") and o != "--help"]
        # HfArgumentParser adds --a-b after --a_b, and --no_a (same destination) after --a for a field true by
        # default: the field's own spelling wins
        if long and _command_flags.get(action.dest) != f"--{action.dest}":
            _command_flags[action.dest] = f"--{action.dest}" if f"--{action.dest}" in long else long[0]


def flag_for(field: str) -> str:
    """The flag that sets ``field`` on the command line (``--`` + the name unless :data:`FLAG_OF_FIELD` says
    otherwise)."""
    return FLAG_OF_FIELD.get(field) or _command_flags.get(field) or f"--{field}"


def _mention(name: str) -> re.Pattern:
    # the name as a word of its own: not part of a longer name, a path, a file name or an existing flag, nor the
    # noun after an article ("not a device")
    return re.compile(rf"(?<![\w\-/.'\"])(?<!\ba )(?<!\ban )(?<!\bthe ){re.escape(name)}(?![\w/]|\.\w)")


def _setting(name: str) -> re.Pattern:
    # name=value, the way a Python caller sets it (``streaming=True``, ``method='diffcse'``)
    return re.compile(rf"(?<![\w\-/.'\"]){re.escape(name)}=(True\b)?")


def in_flag_terms(message: str, fields=()) -> str:
    """``message`` with each field it names as its flag: every ``name=value`` of a flag of the command
    (``streaming=True`` -> ``--streaming``, ``method='diffcse'`` -> ``--method 'diffcse'``), the ``fields`` the error
    lists, and every flag of the command that is a name with an underscore (``per_device_train_batch_size``: never an
    English word). The command line's own checks already speak in flags: a message naming one is left as it is."""
    if re.search(r"(?<![\w-])--\w", message):
        return message
    for name in sorted(_command_flags, key=len, reverse=True):
        message = _setting(name).sub(lambda m, name=name: flag_for(name) + ("" if m.group(1) else " "), message)
    names = set(fields) | set(EVERY_COMMANDS_FLAGS) | {dest for dest in _command_flags if "_" in dest}
    for name in sorted(names, key=len, reverse=True):  # longest first: train_file inside eval_train_file stays whole
        message = _mention(name).sub(flag_for(name), message)
    return message


@contextmanager
def flag_terms_in_logs() -> Iterator[None]:
    """While a command runs, hf_cse's log lines name flags too (:func:`in_flag_terms` of each record's message)."""
    make_record = logging.getLogRecordFactory()

    def in_flags(*args, **kwargs) -> logging.LogRecord:
        record = make_record(*args, **kwargs)
        if record.name.startswith("hf_cse") and isinstance(record.msg, str):
            record.msg = in_flag_terms(record.msg)
        return record

    logging.setLogRecordFactory(in_flags)
    try:
        yield
    finally:
        logging.setLogRecordFactory(make_record)
