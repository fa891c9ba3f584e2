"""The evaluation command's settings checked against each other and against ``--tasks``: what needs only the command
line, so that :mod:`hf_cse.cli.entry_points` refuses it before torch is imported and the command (``EvalArguments``)
refuses it the same way. A setting chosen for something the evaluation does not do (``--mrpc_features`` without
MRPC, ``--mteb_model_name`` without an MTEB task) would be accepted, recorded and ignored: refused, naming the task to
add or the flag to drop. ``chosen``: the settings the user gave (typed flags, or values unlike the defaults).

Imports nothing heavy at module level."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from ..checks import InputError
from ..number_lists import parse_truncate_dims
from ..task_names import STS_TASKS, STS_YEARS, TRANSFER_TASKS, mteb_name_problem, mteb_revision_problem, tasks_of

#: setting -> (what it changes, the tasks it applies to, how to name them in the fix): refused when chosen while
#: --tasks names none of them
APPLIES_TO: dict[str, tuple[str, Collection[str], str]] = {
    "mrpc_features": ("sets MRPC's features", ("MRPC",), "MRPC"),
    "sts_aggregation": ("aggregates the subsets of STS12-16", STS_YEARS, "sts (or STS12 ... STS16)"),
}


def _get(args: Any, name: str):
    return args.get(name) if isinstance(args, dict) else getattr(args, name, None)


def check_eval_settings(args: Any, n_models: int, chosen: Collection[str]) -> None:
    """``args`` (the parsed flags: attributes or a dict) ask for something to evaluate, and every setting in
    ``chosen`` applies to a task of ``--tasks``."""
    tasks = _get(args, "tasks")
    if tasks is None:  # a parser without the flag (a stand-in's): nothing here applies
        return
    task_list, mteb = tasks_of(tasks)
    if not (task_list or mteb or _get(args, "eval_file") or _get(args, "eval_dataset_name")):
        raise InputError(f"--tasks {tasks!r} leaves nothing to evaluate: name SentEval tasks, mteb:NAME tasks or "
                         "--eval_file.", fields=("tasks",))
    batch_size = _get(args, "batch_size")
    if isinstance(batch_size, int) and batch_size < 1:
        raise InputError(f"--batch_size must be >= 1, got {batch_size}.", fields=("batch_size",))
    if parse_truncate_dims(_get(args, "truncate_dims")) and not (set(task_list) & set(STS_TASKS) or mteb):
        raise InputError(f"--truncate_dims scores the STS and MTEB tasks of --tasks, and --tasks {tasks!r} names "
                         "none; add sts (or STSBenchmark, mteb:NAME...).", fields=("truncate_dims",))
    if _get(args, "mteb_results_dir") is not None and not mteb:
        raise InputError("--mteb_results_dir saves MTEB results, and --tasks names no MTEB task; add mteb:NAME (e.g. "
                         "--tasks sts,mteb:STS22).", fields=("mteb_results_dir",))
    name, revision = _get(args, "mteb_model_name"), _get(args, "mteb_model_revision")
    if name and n_models > 1:
        raise InputError("--mteb_model_name names one model, and several were given; evaluate them one at a time to "
                         "name each.", fields=("mteb_model_name",))
    problem = name is not None and mteb_name_problem(name)
    if problem:
        raise InputError(f"--mteb_model_name {name!r}: {problem}.", fields=("mteb_model_name",))
    problem = revision is not None and mteb_revision_problem(revision)
    if problem:
        raise InputError(f"--mteb_model_revision {revision!r}: {problem}.", fields=("mteb_model_revision",))
    _refuse_settings_that_do_nothing(args, tasks, task_list, mteb, set(chosen))


def _refuse_settings_that_do_nothing(args: Any, tasks: str, task_list: list[str], mteb: list[str],
                                     chosen: set[str]) -> None:
    for setting, (what, applies_to, add) in APPLIES_TO.items():
        if setting in chosen and not set(task_list) & set(applies_to):
            raise InputError(f"--{setting} {what}, and --tasks {tasks!r} names none of them: add {add} to --tasks, "
                             f"or drop --{setting}.", fields=(setting, "tasks"))
    if "mode" in chosen and _get(args, "mode") == "fast" and not set(task_list) & set(TRANSFER_TASKS):
        raise InputError(f"--mode fast changes only the transfer tasks' classifier (5-fold), and --tasks {tasks!r} "
                         "names none of them: add transfer (or MR, CR...) to --tasks, or drop --mode fast.",
                         fields=("mode", "tasks"))
    for setting in ("mteb_model_name", "mteb_model_revision"):
        if setting in chosen and not mteb:
            raise InputError(f"--{setting} names the model in MTEB's results, and --tasks {tasks!r} names no MTEB "
                             f"task: add mteb:NAME to --tasks, or drop --{setting}.", fields=(setting, "tasks"))
    if "senteval_data_dir" in chosen and _get(args, "senteval_data_dir") is not None:
        if not task_list:
            raise InputError(f"--senteval_data_dir is read for SentEval tasks, and --tasks {tasks!r} names none: "
                             "drop --senteval_data_dir, or name such tasks.", fields=("senteval_data_dir", "tasks"))
        if _get(args, "senteval_source") == "hub":
            raise InputError("--senteval_data_dir is not read with --senteval_source hub (the tasks come from the "
                             "Hub): drop one of them.", fields=("senteval_data_dir", "senteval_source"))
