"""Evaluate sentence embeddings the way the SimCSE-family papers do: ``hf-cse-eval``, ``python -m hf_cse eval``
and ``run_eval.py`` all run :func:`main`.

Examples::

    # STS (7 tasks, 'all' aggregation) + transfer of the packaged all-MiniLM-L6-v2 (its own mean pooling)
    hf-cse-eval --senteval_data_dir ../shared/data/senteval --tasks sts,transfer

    # an hf_cse checkpoint with its test pooler (cls_before_pooler) vs a plain BERT; one align-uniform plot
    hf-cse-eval --model_name_or_path out/simcse,bert-base-uncased --tasks sts,geometry,retrieval

Writes results.json, results.md and PNG plots into --output_dir. Models may be hf_cse checkpoints,
sentence-transformers folders / Hub repos or plain Hugging Face encoders.

Safe to interrupt: the models, the device, every task file (read and checked) and the output folder are checked
before anything is encoded, and results.json / results.md are rewritten (atomically) as each task finishes. An
output folder that holds another evaluation's results is refused unless --overwrite_output_dir is given (they
are replaced when the new evaluation writes its first result: a failure or stop before keeps them); the
partial results of the same command, stopped before it finished, are finished by it: the tasks it finished are
kept and only the others are evaluated (:mod:`hf_cse.cli.eval_run`). A refusal that comes before anything is
written leaves no folder it created behind.
Bad input ends in one line naming the problem and the fix (HF_CSE_DEBUG=1 shows the traceback).
"""

from __future__ import annotations

import logging
import sys
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path

from transformers import HfArgumentParser

from hf_cse.checks import (
    MODEL_FOLDER_MARKERS,
    InputError,
    check_device,
    check_model_source,
    check_path_given,
    check_writable,
    model_list,
    resolved_path,
)
from hf_cse.cli import run_cli
from hf_cse.cli.console import VERBOSE_HELP, setup_console
from hf_cse.cli.eval_checks import check_distinct_mteb_names, check_model_folder, check_truncate_dims_fit
from hf_cse.cli.eval_output_dir import default_eval_output_dir, prepare_eval_output_dir
from hf_cse.cli.eval_run import ModelsEvaluation, warn_undefined_scores  # noqa: F401 - the command's own
from hf_cse.cli.eval_settings import check_eval_settings
from hf_cse.cli.flags_in_use import check_eval_pairs_settings
from hf_cse.cli.help import EVAL_DESCRIPTION, EVAL_EXAMPLE, UnsetDefaultsFormatter, add_short_help, all_flags_layout
from hf_cse.cli.launch import check_one_process
from hf_cse.cli.parsing import (
    PARSER_OPTIONS,
    bare_optional_booleans,
    one_line_errors,
    refuse_empty_paths,
    refuse_unknown_flags,
    typed_flags,
)
from hf_cse.cli.preflight import check_min_seq_length
from hf_cse.cli.user_modules import import_module_field, import_user_modules, requested_modules
from hf_cse.encoders import packaged_encoder_path
from hf_cse.evaluation import EvalResults, SentenceEncoder  # noqa: F401 - SentenceEncoder: the models' loader
from hf_cse.evaluation.custom_dev import EvalDataArguments, pairs_from_args
from hf_cse.evaluation.data import STS_TASKS, Mode, Source
from hf_cse.evaluation.mteb_tasks import (
    get_mteb_tasks,
    model_meta_fields,
    mteb_model_name,
    saved_mteb_results,
)
from hf_cse.evaluation.runner import load_task_data
from hf_cse.evaluation.sts import Aggregation
from hf_cse.evaluation.transfer import MrpcFeatures
from hf_cse.folder_lock import first_missing_folder, releases_folder_locks, remove_made_folders
from hf_cse.models.pooling import POOLERS
from hf_cse.number_lists import parse_truncate_dims
from hf_cse.precision import DEFAULT_EVAL_PRECISION, Precision, PrecisionError, default_device_type, resolve
from hf_cse.task_names import task_aliases, tasks_of, valid_task_names

logger = logging.getLogger("run_eval")


@dataclass
class EvalArguments(EvalDataArguments):
    model_name_or_path: list[str] = field(
        default_factory=list,
        metadata={
            "help": "Model folder(s) or Hub id(s): hf_cse checkpoint, sentence-transformers or plain HF "
            "encoder. Repeat the flag or separate with commas for several models (one combined "
            "align-uniform plot). "
            "Default: the packaged all-MiniLM-L6-v2.",
            "action": "extend",
        },
    )
    pooler: str | None = field(
        default=None,
        metadata={
            "help": "Override the pooling. Default: the model's own: an hf_cse checkpoint's test pooler "
            "(config.test_pooler: the pooling it trained with, which follows its encoder: avg for the packaged "
            "all-MiniLM-L6-v2; cls_before_pooler for a plain BERT/RoBERTa trained with cls and a training-only "
            "head); a sentence-transformers model's own modules; a plain Hugging Face encoder: cls_before_pooler "
            "(a causal decoder, GPT-2, Llama...: last; cls and cls_before_pooler are refused there). Given for a "
            "sentence-transformers model, it pools the encoder's output in place of all its modules (Dense, Normalize: "
            "said in the log; cls is refused where a Dense head follows); a PromptBERT model embeds its template's "
            "token whatever the pooler, which only picks its head (cls) or none (cls_before_pooler).",
            "choices": POOLERS,
        },
    )
    senteval_data_dir: str | None = field(default=None, metadata={
        "help": "SentEval data/downstream folder (default: $HF_CSE_SENTEVAL_DATA, else the first that exists of "
                "SentEval/data/downstream, data/senteval and ../shared/data/senteval, from the current folder)."})
    senteval_source: Source = field(
        default="local",
        metadata={"help": "Read tasks from --senteval_data_dir or from the Hugging Face Hub."},
    )
    tasks: str = field(
        default="sts",
        metadata={"help": f"Comma list of task groups or tasks: {', '.join(valid_task_names())} (any case; also "
                          f"{task_aliases()}); then "
                          "mteb:NAME,NAME,... for MTEB tasks (needs pip install 'hf_cse[mteb]'); 'none' for no "
                          "SentEval task (e.g. only --eval_file)."},
    )
    mode: Mode = field(
        default="test",
        metadata={
            "help": "test: papers' protocol (test splits, 10-fold transfer); dev: STS-B/SICK-R dev + "
            "transfer dev accuracy (fast classifier); fast: test splits with SentEval's fast 5-fold "
            "classifier."
        },
    )
    sts_aggregation: Aggregation = field(
        default="all", metadata={"help": "STS12-16: one Spearman over all subsets (papers) or subset means."}
    )
    mrpc_features: MrpcFeatures = field(
        default="senteval", metadata={"help": "senteval: [|u-v|, u*v] (papers); full: [u, v, |u-v|, u*v]."}
    )
    truncate_dims: str | None = field(
        default=None,
        metadata={"help": "Also score the embeddings cut to their first d coordinates, for each d of this comma "
                          "list (e.g. 256,128,64; as SentenceTransformer(..., truncate_dim=d) serves them): the STS "
                          "and MTEB tasks of --tasks, in results.json 'dimensions', a results.md table and "
                          "score_by_dimension.png."},
    )
    mteb_results_dir: str | None = field(
        default=None,
        metadata={"help": "Also have mteb save the MTEB tasks' results here through its own ResultCache, as its own "
                          "runs do (results/<model>/<revision>/<task>.json, model_meta.json; --truncate_dims as mteb "
                          "experiments truncate_dim=d): the layout of MTEB's results repository."},
    )
    mteb_model_name: str | None = field(
        default=None,
        metadata={"help": "The model's name in MTEB's results (org/name, e.g. your Hub repo). Default: a Hub id as "
                          "given, local/<folder name> for a folder."},
    )
    mteb_model_revision: str = field(
        default="local", metadata={"help": "The model's revision in MTEB's results (e.g. its Hub commit)."}
    )
    batch_size: int = field(default=128, metadata={"help": "Sentences per forward pass."})
    trust_remote_code: bool = field(
        default=False, metadata={"help": "Allow a model whose code ships with its checkpoint to run that code "
                                         "(transformers' trust_remote_code). Off by default."}
    )
    max_seq_length: int | None = field(
        default=None, metadata={"help": "Truncation length in tokens (default: the model's limit)."}
    )
    output_dir: str | None = field(
        default=None,
        metadata={"help": "Where results and plots go. Default: <model folder>/eval for a local model folder "
                          "(<run>/eval-<part> for a run's export or checkpoint), else eval_results/<model name> under "
                          "the current folder (a Hub id, the packaged default, several models)."},
    )
    overwrite_output_dir: bool = field(
        default=False,
        metadata={"help": "Replace the results of an earlier evaluation in --output_dir (otherwise refused) and the "
                          "models' earlier MTEB results in --mteb_results_dir, once the new evaluation writes its "
                          "first result: a model that fails to load, or a stop before, keeps them."},
    )
    device: str | None = field(default=None, metadata={"help": "cpu / cuda (default: cuda if available)."})
    disable_tqdm: bool = field(default=False, metadata={"help": "No progress bars."})
    verbose: bool = field(default=False, metadata={"help": VERBOSE_HELP})
    import_module: list[str] = import_module_field()
    precision: Precision = field(
        default=DEFAULT_EVAL_PRECISION,
        metadata={"help": "Encode in fp32, under bf16 / fp16 (GPU) autocast, or auto: bf16 where the device computes "
                          "it natively. Recorded in results.json (settings.precision)."},
    )

    def __post_init__(self):
        models = model_list(self.model_name_or_path)
        if not models:
            default = packaged_encoder_path()
            if default is None:
                raise ValueError("--model_name_or_path is required (the packaged MiniLM is not installed).")
            models = [default]
        # the settings given (unlike their defaults), before any is resolved here: the command line's early check
        # reads the typed flags instead
        chosen = {f.name for f in fields(self) if f.default is not MISSING and getattr(self, f.name) != f.default}
        check_eval_settings(self, len(models), chosen)
        self.model_name_or_path = models
        self.senteval_data_dir = resolved_path(self.senteval_data_dir)  # recorded (results.json) as the folder it is
        if self.output_dir is None:
            self.output_dir = str(default_eval_output_dir(models))
        self.task_list, self.mteb_tasks = tasks_of(self.tasks)
        self.truncate_dim_list = parse_truncate_dims(self.truncate_dims)
        if self.mteb_results_dir is not None:
            check_distinct_mteb_names(self.model_name_or_path, self.mteb_meta)

    def mteb_meta(self, model: str, embed_dim: int | None = None) -> dict:
        """The ModelMeta fields of ``model``'s MTEB results (name, revision and ``embed_dim``, where measured)."""
        return model_meta_fields(mteb_model_name(model, self.mteb_model_name), self.mteb_model_revision, embed_dim)

    def result_settings(self) -> dict:
        """What shapes the results besides the models (recorded with them in settings["command"]): an output
        folder's partial results are finished only by an evaluation with the same."""
        fields = ("pooler", "max_seq_length", "mode", "sts_aggregation", "mrpc_features", "senteval_source",
                  "senteval_data_dir", "batch_size", "precision", "mteb_model_name", "mteb_model_revision",
                  *EvalDataArguments.__dataclass_fields__)
        return {**{name: getattr(self, name) for name in fields}, "tasks": list(self.task_list),
                "mteb_tasks": list(self.mteb_tasks), "truncate_dims": list(self.truncate_dim_list)}

    @property
    def sts_tasks(self) -> list[str]:
        return [t for t in self.task_list if t in STS_TASKS]


def check_inputs(args: EvalArguments) -> tuple[Path, list[EvalResults], list | None, list]:
    """Everything that can be checked before the models are loaded: the device, every model reference (and
    --truncate_dims within its width, where its files give it), every task file (read and validated; the readers
    cache them), your own scored pairs and the MTEB tasks (their data loaded) and the output folder, claimed last.
    Returns the folder, the records the same evaluation saved there before it was stopped
    (:func:`prepare_eval_output_dir`), the pairs and the MTEB tasks."""
    if args.max_seq_length is not None:
        check_min_seq_length(args.max_seq_length, "Leave it out to score whole sentences (up to the model's limit).")
    check_device(args.device)
    try:  # e.g. fp16 on a CPU
        resolve(args.precision, args.device.split(":")[0] if args.device else default_device_type(), scoring=True)
    except PrecisionError as err:
        raise InputError(str(err), fields=("precision",)) from None
    for name in args.model_name_or_path:
        check_model_source(name, markers=MODEL_FOLDER_MARKERS)
        check_model_folder(name, args.max_seq_length)
        check_truncate_dims_fit(name, args.truncate_dim_list, args.pooler)
    if args.task_list:
        load_task_data(args.task_list, args.senteval_data_dir, args.senteval_source, args.mode)
    eval_pairs = pairs_from_args(args)
    mteb_tasks = get_mteb_tasks(args.mteb_tasks) if args.mteb_tasks else []
    if args.mteb_results_dir is not None:
        check_path_given(args.mteb_results_dir, "--mteb_results_dir")
        check_writable(Path(args.mteb_results_dir).expanduser(), "--mteb_results_dir")
    out, earlier = prepare_eval_output_dir(args.output_dir, args.overwrite_output_dir, args.model_name_or_path,
                                           args.result_settings())
    return out, earlier, eval_pairs, mteb_tasks


def check_mteb_results_free(args: EvalArguments, mteb_tasks: list, models: list[str]) -> None:
    """--mteb_results_dir holds no results of ``models`` on these tasks yet (under their MTEB name and revision: their
    own and any truncate_dim_<d> experiment's, whatever the dimensions) unless --overwrite_output_dir, which removes
    them when the evaluation writes its first result (:meth:`ModelsEvaluation.replace_earlier`), so that another
    run's are not read back with the new ones (other models' and tasks' results there are left alone). ``models``:
    those of the command the stopped evaluation it finishes did not reach (those it did wrote their results there
    themselves)."""
    for model in models:
        meta = args.mteb_meta(model)
        taken = saved_mteb_results(args.mteb_results_dir, mteb_tasks, meta)
        if not taken:
            continue
        if not args.overwrite_output_dir:
            more = f" and {len(taken) - 1} more" if len(taken) > 1 else ""
            raise InputError(f"--mteb_results_dir already holds MTEB results under this model's name, "
                             f"{meta['name']} ({taken[0]}{more}); pass --overwrite_output_dir to replace them, or "
                             "give another --mteb_results_dir / --mteb_model_revision, or --mteb_model_name if they "
                             "are another model's.")


def argument_parser() -> HfArgumentParser:
    parser = bare_optional_booleans(HfArgumentParser(EvalArguments, formatter_class=UnsetDefaultsFormatter,
                                                     **PARSER_OPTIONS))
    return one_line_errors(add_short_help(parser, all_flags_layout(parser, EVAL_DESCRIPTION, EVAL_EXAMPLE)))


def main(argv: list[str] | None = None, prog: str = "hf-cse-eval") -> int:
    """``hf-cse-eval`` / ``python -m hf_cse eval`` / ``run_eval.py``: a foreseeable failure becomes one line on
    stderr and exit code 1."""
    # one process: several would each evaluate everything into the same folder (check_one_process)
    return run_cli(lambda: check_one_process(prog, "evaluates") or evaluate_models(argv), prog)


@releases_folder_locks  # the lock on --output_dir (prepare_eval_output_dir) lasts as long as the evaluation
def evaluate_models(argv: list[str] | None = None) -> int:
    setup_console()  # quiet while the flags are read; --verbose is known after
    import_user_modules(requested_modules(argv or []))  # a method of the user's own: the model's class
    parser = argument_parser()
    refuse_empty_paths(parser, argv)  # before __post_init__ drops an empty --model_name_or_path
    refuse_unknown_flags(parser, argv)
    try:
        (args,) = parser.parse_args_into_dataclasses(args=argv)
    except ValueError as err:  # __post_init__'s checks
        raise InputError(str(err)) from None
    check_eval_pairs_settings(args, typed_flags(parser, argv))  # e.g. --eval_score_column without --eval_file
    setup_console(args.verbose)
    made = first_missing_folder(Path(args.output_dir).expanduser())  # the folders this command creates
    out, earlier, eval_pairs, mteb_tasks = check_inputs(args)
    logger.info("results go to %s", out)
    evaluation = ModelsEvaluation(args, out, earlier, eval_pairs, mteb_tasks)
    try:
        if args.mteb_results_dir is not None:  # the models the stopped evaluation reached wrote there themselves
            check_mteb_results_free(args, mteb_tasks, args.model_name_or_path[len(earlier):])
        written = evaluation.run()
    except BaseException:
        remove_made_folders(out, made)  # a refusal before anything was written leaves no empty folder behind
        kept = evaluation.earlier_kept()  # --overwrite_output_dir, stopped before its first result
        if kept:
            logger.error("stopped before any new result was written; %s", kept)
        elif (out / "results.json").is_file():
            logger.error("stopped; the tasks finished so far are saved in %s", out / "results.json")
        raise
    print("\nwrote " + ", ".join(str(p) for p in written.values()))
    return 0


if __name__ == "__main__":  # python -m hf_cse.cli.evaluate: as python -m hf_cse eval (it ran nothing, exit 0)
    from .commands import main as command_main

    sys.exit(command_main(["eval", *sys.argv[1:]]))
