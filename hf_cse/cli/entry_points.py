"""Where the commands start: ``hf-cse-train`` / ``hf-cse-eval`` / ``hf-cse-export``, ``python -m hf_cse
train|eval|export``, ``run_unsup.py`` and ``run_eval.py``.

Importing a command's module (:mod:`.train`, :mod:`.evaluate`, :mod:`.export`) imports torch, transformers and the rest
of the training stack: seconds. Here, before that, what needs only the command line is answered from the command's
parser description (:mod:`.parser_cache`: shipped in the package, or written by an earlier start): ``--help``; an empty
path, an unknown flag, a value argparse refuses, a count or optimizer value the Trainer would misread; the paths that
name nothing (``--train_file``, a model folder, the checkpoint to export); a sentences file whose start shows it cannot
be read as asked (:func:`~hf_cse.sentence_files.check_sentences_file_start`); a training ``--output_dir`` that holds a
finished run or files no run writes; a value typed for the chosen loss's hyperparameters, or for the method's settings,
that breaks their rules (:mod:`hf_cse.hyperparameter_rules`); Matryoshka dimensions and weights that break the library's
rules (a repeat, a 0, a weight count unlike the dimensions'), or trained through a projection head the exported
embedding skips (:mod:`hf_cse.matryoshka_rules`); an evaluation's ``--truncate_dims`` that is no list of distinct
dimensions (:mod:`hf_cse.number_lists`). Then the module's ``main`` runs, which checks everything again. Where no
description is valid (hf_cse or its requirements changed since it was written) the module is imported first, to build
the parser and write it down, and the same checks follow.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

from ..checks import MODEL_FOLDER_MARKERS, InputError, check_model_source, model_list
from ..data_sources import check_saved_rows, is_saved_dataset
from ..encoders import packaged_encoder_path
from ..errors import CSEError, same_on_every_process
from ..files import check_train_file, local_dataset_folder
from ..matryoshka_rules import check_head_flags, check_matryoshka
from ..number_lists import DIMS_FIELD, WEIGHTS_FIELD, parse_int_list, parse_truncate_dims
from ..pair_checks import check_pair_file_start
from ..presets import PRESETS
from ..scored_pairs import check_scored_pair_file
from ..sentence_files import check_enough_sentences, check_sentences_file_start
from ..task_names import tasks_of
from ..trainer_folder import check_not_encoder_folder
from ..training_values import check_given_intervals
from . import is_main_process, run_cli, say_line
from .eval_output_dir import default_eval_output_dir, refuse_other_results
from .eval_settings import check_eval_settings
from .flags_in_use import check_method_flags
from .help import HELP_ALL
from .launch import check_one_process, end_with_the_launcher, launched_processes
from .output_dir import refuse_occupied_output_dir
from .parser_cache import cached_parser, describe, rebuild, remember_parser, ship_parser
from .parsing import refuse_empty_paths, refuse_unknown_flags, typed_flags
from .preflight import (
    check_max_train_samples,
    check_not_run_folder,
    check_optimizer_arguments,
    check_training_counts,
    check_typed_best_metric,
)
from .presets import unknown_preset
from .stop_signals import Terminated
from .train_facts import (
    all_numbers,
    check_dcl_values,
    check_hub_settings,
    check_loss_values,
    check_method_values,
    check_pair_values,
    check_trainer_decides,
    check_typed_needs,
    refuse_unregistered_loss,
    switched_on,
    train_facts,
)
from .user_modules import import_user_modules, requested_modules, typed_loss

#: command -> the module whose ``main(argv, prog)`` runs it
MODULES = {"train": "hf_cse.cli.train", "eval": "hf_cse.cli.evaluate", "export": "hf_cse.cli.export"}
#: command -> the function of its module that makes its parser
PARSER_BUILDERS = {"train": "argument_parser", "eval": "argument_parser", "export": "build_parser"}


#: the counts :func:`~.preflight.check_training_counts` reads
COUNT_VALUES = ("gradient_accumulation_steps", "max_seq_length", "per_device_train_batch_size", "max_steps",
                "num_train_epochs")
#: the optimizer's values :func:`~.preflight.check_optimizer_arguments` reads
OPTIMIZER_VALUES = ("learning_rate", "warmup_steps", "weight_decay", "adam_beta1", "adam_beta2", "adam_epsilon",
                    "max_grad_norm")
#: where pair rows come from and their columns, as :func:`~hf_cse.pair_checks.check_pair_file_start` takes them
PAIR_VALUES = ("train_file", "dataset_name", "text_column", "pair_column", "negative_column")
#: ``--eval_file`` and its columns, as :func:`~hf_cse.scored_pairs.check_scored_pair_file` takes them
EVAL_FILE_VALUES = ("eval_file", "eval_sentence1_column", "eval_sentence2_column", "eval_score_column")


def _train_values(parser, argv: list[str]) -> dict:
    """The values the cached train parser reads, with a ``--preset``'s values as the defaults (as the command sets
    them)."""
    args = vars(parser.parse_args(argv))
    if args.get("preset") is not None and args["preset"] not in PRESETS:  # argparse's kind of error, as main's
        parser.error(unknown_preset(args["preset"]))
    preset = PRESETS.get(args.get("preset") or "")
    if preset:
        parser.set_defaults(**{name: value for name, value in preset.items() if name in args})
        args = vars(parser.parse_args(argv))
    return args


def _numbers(args: dict, names) -> SimpleNamespace | None:
    """``args``' values of ``names``, where all are numbers."""
    values = {name: args.get(name) for name in names}
    return SimpleNamespace(**values) if all_numbers(values.values()) else None


#: command -> what its early checks read besides its flags
FACTS: dict[str, Callable[[], dict]] = {"train": train_facts}


def command_facts(command: str) -> dict | None:
    return FACTS[command]() if command in FACTS else None


def _check_train(parser, argv: list[str]) -> None:
    typed = {name for name, value in vars(parser.parse_args(argv)).items() if value is not None}  # before a preset's
    args = _train_values(parser, argv)
    counts = None if args.get("config") else _numbers(args, COUNT_VALUES)  # a --config file may set them
    if counts is not None:
        check_training_counts(counts, world_size=None)
    samples = _numbers(args, ("max_train_samples",))
    if samples is not None:
        check_max_train_samples(samples.max_train_samples)
    given = typed_flags(parser, argv)
    check_trainer_decides(given, args)
    for flag in ("bf16", "fp16"):  # false is their default: the precision then comes from --precision (auto)
        if flag in given and not switched_on(args.get(flag)) and \
                args.get("precision") != "fp32":  # beside --precision fp32 it says the same
            raise InputError(f"--{flag} false does not turn {flag} off: it is its default, and the precision comes "
                             "from --precision (auto unless given). Pass --precision fp32 for fp32.",
                             fields=(flag, "precision"))
    if not args.get("config"):  # the file may push
        check_hub_settings(given, args)
    optimizer = _numbers(args, OPTIMIZER_VALUES)
    if optimizer is not None:
        check_optimizer_arguments(optimizer)
    if not args.get("config"):  # the file may choose another loss, head or pooling, dev data or strategy
        values, given = SimpleNamespace(**args), typed_flags(parser, argv)  # typed: not the parser's defaults
        check_given_intervals(values, given)  # e.g. --eval_steps with --eval_strategy no
        check_typed_best_metric(values, given)  # a --metric_for_best_model the dev data will not log
        facts = getattr(parser, "facts", {})
        own = facts.get("method_flags", {})
        if args.get("method") in own:  # another method's setting typed (DiffCSE's --lambda_rtd with simcse); a
            every = {name for names in own.values() for name in names}  # preset's the command drops
            check_method_flags(args["method"], sorted(every & typed), own)
        check_loss_values(facts, args, typed)
        check_method_values(facts, args, typed)
        check_typed_needs(facts, args, given)
        check_dcl_values(facts, args, typed)
        check_pair_values(facts, args)  # e.g. --pair_column with --method diffcse
        check_matryoshka(args.get(DIMS_FIELD), args.get(WEIGHTS_FIELD))  # the library's rule: repeats, a 0, counts
        projector = args.get("projector") or facts.get("method_projectors", {}).get(args.get("method"))
        if projector is not None:
            parse_int_list(args.get(DIMS_FIELD))  # a bad list in its own words first, as the config reads it
            check_head_flags(args.get(DIMS_FIELD), projector, args.get("pooler_type"), args.get("mlp_only_train"))
    if args.get("model_name_or_path"):
        check_model_source(args["model_name_or_path"], "--model_name_or_path")
        check_not_run_folder(args["model_name_or_path"])  # an hf_cse run's folder: its export, or resume it
    # the file read as plain sentences; pair data, streams and Hub data sets are read (and checked) otherwise
    read_otherwise = ("dataset_name", "pair_column", "streaming", "train_files")
    if args.get("train_file") and not any(args.get(name) for name in read_otherwise):
        path = check_train_file(args["train_file"])
        sentences = check_sentences_file_start(path, args.get("text_column"))  # a small file's, read whole
        sizes = None if args.get("config") else _numbers(args, ("per_device_train_batch_size",))
        if sizes is not None and sentences is not None:  # against one global batch (these processes' batch)
            cap = args.get("max_train_samples")
            check_enough_sentences(path, len(sentences), int(sizes.per_device_train_batch_size) *
                                   launched_processes(), int(cap) if isinstance(cap, int | float) else None)
    elif args.get("pair_column") and not any(args.get(name) for name in ("config", "streaming", "train_files")):
        check_pair_file_start(*(args.get(name) for name in PAIR_VALUES))  # its rows too, where the file is small
    if args.get("eval_file") and not any(args.get(name) for name in ("eval_dataset_name", "config")):
        check_scored_pair_file(*(args.get(name) for name in EVAL_FILE_VALUES))  # read whole: a few pairs a row
    if args.get("dataset_name"):  # a local path that names nothing (a typo) or names a file; a Hub id passes
        folder = local_dataset_folder(args["dataset_name"])
        if folder is not None and is_saved_dataset(folder):  # one save_to_disk wrote without rows
            check_saved_rows(folder, args["dataset_name"])
    if args.get("output_dir"):  # the encoder's own folder first: refused whatever else is asked, and said so
        check_not_encoder_folder(args["output_dir"], args.get("model_name_or_path"))
    # a finished run or other files in the output folder, unless the command starts over or names the checkpoint
    # to resume (any value given: the cached parser reads a bool as text), or a --config file may say so
    if args.get("output_dir") and not any(args.get(name) not in (None, False) for name in
                                          ("overwrite_output_dir", "resume_from_checkpoint", "config")):
        refuse_occupied_output_dir(args["output_dir"])


def _check_eval(parser, argv: list[str]) -> None:
    args = vars(parser.parse_args(argv))
    parse_truncate_dims(args.get("truncate_dims"))  # the command's own rule and line, before torch
    if args.get("tasks") is not None:
        tasks_of(args["tasks"])  # a mistyped task: before the models are read
    models = model_list(args.get("model_name_or_path") or [])
    for name in models:
        check_model_source(name, markers=MODEL_FOLDER_MARKERS)
    models = models or [p for p in [packaged_encoder_path()] if p]  # none: the command says one is required
    # e.g. --mrpc_features without MRPC; a default typed changes nothing (as the command compares them)
    chosen = {name for name in typed_flags(parser, argv) if args.get(name) != parser.get_default(name)}
    check_eval_settings(args, max(len(models), 1), chosen)
    # another evaluation's results (or a run's, a model's files) in the output folder, unless the command replaces
    # them; the same models' partial results are compared with the settings when the folder is claimed
    if models and args.get("overwrite_output_dir") in (None, False):
        refuse_other_results(args.get("output_dir") or str(default_eval_output_dir(models)), models)


def _check_export(parser, argv: list[str]) -> None:
    args = vars(parser.parse_args(argv))
    if args.get("checkpoint"):
        check_model_source(args["checkpoint"], "CHECKPOINT")


#: command -> its checks of values and paths, given the cached parser and the command line
VALUE_CHECKS: dict[str, Callable] = {"train": _check_train, "eval": _check_eval, "export": _check_export}


def check_command_line(command: str, parser, argv: list[str]) -> None:
    """The checks that need only the command line: empty paths and unknown flags, first as in the command's
    ``main`` (argparse's own errors surface in either), then the optimizer's values and the paths that name nothing
    (``main`` meets those among its other checks)."""
    with same_on_every_process():  # each process of a launch reads the same command line and files
        if command == "train":  # an unregistered loss first: its hyperparameters' flags are unknown for that reason
            refuse_unregistered_loss(getattr(parser, "facts", {}), typed_loss(argv))
        refuse_empty_paths(parser, argv)
        refuse_unknown_flags(parser, argv)
        VALUE_CHECKS[command](parser, argv)


def run_command(command: str, argv: list[str] | None = None, prog: str | None = None) -> int:
    """Answer from the cached parser what needs no model (one line and exit code 1 for a refusal, argparse's exit
    code 2 for its own errors, 0 after ``--help``), then run the command's ``main``. On a first start the parser is
    built, written down and checked from its description in the same way, so that every start makes the same checks
    in the same order, only later."""
    argv = sys.argv[1:] if argv is None else list(argv)
    prog = prog or f"hf-cse-{command}"
    end_with_the_launcher()  # under torchrun: a launcher killed outright stops this process too
    try:
        return _run_command(command, argv, prog)
    except KeyboardInterrupt as stop:  # while the training stack is imported (seconds), before main's own handling
        return _stopped_while_starting(stop, prog)


def _stopped_while_starting(stop: KeyboardInterrupt, prog: str) -> int:
    """One line for a command stopped before its ``main`` ran, on the main process alone (Ctrl-C reaches every
    process of a launch, and a launcher stops the others with SIGTERM once one failed: the failed one's line is
    the run's), naming the signal that came; the shell's exit code for it."""
    terminated = isinstance(stop, Terminated)
    if is_main_process():
        how = "stopped (SIGTERM, from a launcher, a job scheduler or kill)" if terminated else "interrupted (Ctrl-C)"
        say_line(f"{prog}: {how} while starting; nothing was done.")
    return 143 if terminated else 130


def callers_own_classes() -> list[str]:
    """The losses, methods and projectors the caller's own code registered before this start (a script that imports
    its module and calls :func:`train`): found in the registries imported already, classes from outside hf_cse.
    Their flags are not in the descriptions of hf_cse's own parsers."""
    tables = []
    losses = sys.modules.get("hf_cse.losses.registry")
    if losses is not None:
        tables.append({name: losses.get_loss_class(name) for name in losses.available_losses()})
    for module_name, table in (("hf_cse.models", "METHODS"), ("hf_cse.models.heads", "PROJECTORS")):
        tables.append(getattr(sys.modules.get(module_name), table, {}))
    return sorted(name for classes in tables for name, cls in classes.items()
                  if cls is not None and not cls.__module__.startswith("hf_cse."))


#: the flags that print a command's help and end it
HELP_FLAGS = frozenset(("-h", "--help", HELP_ALL))

#: command -> what it does, for the commands that run in one process (:func:`~.launch.check_one_process`)
ONE_PROCESS = {"eval": "evaluates", "export": "exports"}


def _run_command(command: str, argv: list[str], prog: str) -> int:
    if command in ONE_PROCESS:  # a launch of several: refused before anything is read or written
        code = run_cli(lambda: check_one_process(prog, ONE_PROCESS[command]), prog)
        if code:
            return code
    if not is_main_process() and HELP_FLAGS & set(argv):  # a launch of several prints its help once
        return 0
    modules = requested_modules(argv)
    if modules:  # what they register is read below, as a calling script's own classes are
        code = run_cli(lambda: import_user_modules(modules), prog)
        if code:
            return code
    own = callers_own_classes()  # then the parser is the command's own, built now and written nowhere
    parser, module = (None if own else cached_parser(command)), None
    if parser is None:
        module = importlib.import_module(MODULES[command])
        try:
            built = build_parser(command)
        except CSEError:  # e.g. a loss of the caller's own whose hyperparameter is a flag: main says so in one line
            built = None
        if built is not None:
            facts = command_facts(command)
            description = describe(built, facts) if own else remember_parser(command, built, facts)
            parser = description and rebuild(description)
    if parser is not None:
        code = run_cli(lambda: check_command_line(command, parser, argv), prog)
        if code:
            return code
    module = module or importlib.import_module(MODULES[command])
    return module.main(argv, prog=prog)


def build_parser(command: str):
    """``command``'s own parser (its module imported: seconds)."""
    return getattr(importlib.import_module(MODULES[command]), PARSER_BUILDERS[command])()


def ship_parsers() -> list[Path]:
    """Write each command's parser description into the package, for the first start of a fresh install
    (``python scripts/write_parser_descriptions.py``; :mod:`.parser_cache`)."""
    return [ship_parser(command, build_parser(command), command_facts(command)) for command in MODULES]


def train(argv: list[str] | None = None, prog: str = "hf-cse-train") -> int:
    return run_command("train", argv, prog)


def evaluate(argv: list[str] | None = None, prog: str = "hf-cse-eval") -> int:
    return run_command("eval", argv, prog)


def export(argv: list[str] | None = None, prog: str = "hf-cse-export") -> int:
    return run_command("export", argv, prog)
