"""Where the commands start: ``hf-cse-train`` / ``hf-cse-eval`` / ``hf-cse-export``, ``python -m hf_cse
train|eval|export``, ``run_unsup.py`` and ``run_eval.py``.

Importing a command's module (:mod:`.train`, :mod:`.evaluate`, :mod:`.export`) imports torch, transformers and the
rest of the training stack: seconds. Here, before that, what needs only the command line is answered from the
command's cached parser (:mod:`.parser_cache`): ``--help``; an empty path, an unknown flag, a value argparse refuses;
and the paths that name nothing (``--train_file``, a model folder, the checkpoint to export). Then the module's
``main`` runs, which checks everything again, so a first start (no cached parser yet) refuses the same things, only
later; it writes the parser down for the next start.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable

from ..checks import MODEL_FOLDER_MARKERS, check_model_source, model_list
from ..files import check_train_file
from . import refuse_empty_paths, refuse_unknown_flags, run_cli
from .parser_cache import cached_parser, rebuild, remember_parser

#: command -> the module whose ``main(argv, prog)`` runs it
MODULES = {"train": "hf_cse.cli.train", "eval": "hf_cse.cli.evaluate", "export": "hf_cse.cli.export"}
#: command -> the function of its module that makes its parser
PARSER_BUILDERS = {"train": "argument_parser", "eval": "argument_parser", "export": "build_parser"}


def _check_train_paths(args: dict) -> None:
    if args.get("model_name_or_path"):
        check_model_source(args["model_name_or_path"], "--model_name_or_path")
    # the file read as plain sentences; pair data, streams and Hub data sets are read (and checked) otherwise
    read_otherwise = ("dataset_name", "pair_column", "streaming", "train_files")
    if args.get("train_file") and not any(args.get(name) for name in read_otherwise):
        check_train_file(args["train_file"])


def _check_eval_paths(args: dict) -> None:
    for name in model_list(args.get("model_name_or_path") or []):
        check_model_source(name, markers=MODEL_FOLDER_MARKERS)


def _check_export_paths(args: dict) -> None:
    if args.get("checkpoint"):
        check_model_source(args["checkpoint"], "CHECKPOINT")


#: command -> its checks of paths, on the values the cached parser read (by destination)
PATH_CHECKS: dict[str, Callable] = {"train": _check_train_paths, "eval": _check_eval_paths,
                                    "export": _check_export_paths}


def check_command_line(command: str, parser, argv: list[str]) -> None:
    """The checks that need only the command line: empty paths and unknown flags, first as in the command's
    ``main`` (argparse's own errors surface in either), then the paths that name nothing (``main`` meets them after
    its checks of values)."""
    refuse_empty_paths(parser, argv)
    refuse_unknown_flags(parser, argv)
    PATH_CHECKS[command](vars(parser.parse_args(argv)))


def run_command(command: str, argv: list[str] | None = None, prog: str | None = None) -> int:
    """Answer from the cached parser what needs no model (one line and exit code 1 for a refusal, argparse's exit
    code 2 for its own errors, 0 after ``--help``), then run the command's ``main``. On a first start the parser is
    built, written down and checked from its description in the same way, so that every start makes the same checks
    in the same order, only later."""
    argv = sys.argv[1:] if argv is None else list(argv)
    prog = prog or f"hf-cse-{command}"
    parser, module = cached_parser(command), None
    if parser is None:
        module = importlib.import_module(MODULES[command])
        description = remember_parser(command, getattr(module, PARSER_BUILDERS[command])())
        parser = description and rebuild(description)
    if parser is not None:
        code = run_cli(lambda: check_command_line(command, parser, argv), prog)
        if code:
            return code
    module = module or importlib.import_module(MODULES[command])
    return module.main(argv, prog=prog)


def train(argv: list[str] | None = None, prog: str = "hf-cse-train") -> int:
    return run_command("train", argv, prog)


def evaluate(argv: list[str] | None = None, prog: str = "hf-cse-eval") -> int:
    return run_command("eval", argv, prog)


def export(argv: list[str] | None = None, prog: str = "hf-cse-export") -> int:
    return run_command("export", argv, prog)
