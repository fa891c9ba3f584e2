"""``hf-cse-eval``'s evaluation of its models, one after the other, each in steps saved as they finish: its SentEval
tasks (:func:`hf_cse.evaluation.evaluate`), then your own pairs, the MTEB tasks, the scores by dimension and the
plots (the steps an unfinished record lists after its tasks in ``unfinished_tasks``).

An evaluation stopped before it finished is finished by the same command: the records it saved
(:func:`hf_cse.cli.eval_output_dir.prepare_eval_output_dir`) keep every model and step it finished, which are not
run again (a model with nothing left is not even loaded), and only the rest is evaluated. Each save is the whole
record so far, written atomically (:func:`hf_cse.evaluation.write_report`), so a stop while finishing it still
leaves at least what was there before; the finished record is the one an uninterrupted run writes (timings
apart).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..checks import InputError
from ..errors import CSEError
from ..evaluation import EvalResults, SentenceEncoder, evaluate, summary_text, write_report
from ..evaluation.dimensions import KeepingEncoder, check_dims_fit, evaluate_dimensions
from ..evaluation.evaluators import PairsEvaluator
from ..evaluation.mteb_tasks import remove_mteb_results, run_mteb_tasks, saved_mteb_results
from ..evaluation.report import model_folder, read_plot_data, remove_plot_data, remove_report_files, report_files
from ..evaluation.results import PLOTS_STEP
from ..evaluation.resume import STSB_TEST_TASKS, finished_tasks
from ..output_folder import listing
from ..precision import say_scoring_precision
from ..writing import json_safe
from . import say_when_stopped
from .flags import in_flag_terms

logger = logging.getLogger("run_eval")

#: a model's steps after its SentEval tasks, as ``unfinished_tasks`` names them (the plots: the record's own name)
OWN_DATA, MTEB, DIMENSIONS, PLOTS = "own data", "MTEB", "dimensions", PLOTS_STEP


def record_settings(results: EvalResults, args) -> None:
    """The command's settings, with the results (what finishing a stopped evaluation compares)."""
    results.settings = {**(results.settings or {}), "command": json_safe(args.result_settings())}


def warn_undefined_scores(name: str, results: EvalResults) -> None:
    """A NaN score is not a result: say why, as the training side does for its dev score."""
    undefined = [task for task, score in results.task_scores().items() if not math.isfinite(score)]
    if undefined:
        logger.warning("%s: the score of %s is undefined (NaN: every pair got the same cosine, e.g. sentences cut to "
                       "nothing by --max_seq_length, or read as unknown tokens only); check the model's tokenizer, "
                       "--max_seq_length and the data", name, ", ".join(undefined[:5]))


def print_results(name: str, args, results: EvalResults) -> None:
    settings = results.settings or {}
    print(f"\n{name}  (pooler: {settings.get('representation', settings.get('pooler'))}, mode: {args.mode})")
    print(summary_text(results, args.eval_name))


def load_encoder(name: str, args) -> SentenceEncoder:
    try:
        return SentenceEncoder.from_pretrained(
            name,
            pooler=args.pooler,
            batch_size=args.batch_size,
            max_length=args.max_seq_length,
            device=args.device,
            show_progress_bar=not args.disable_tqdm,
            precision=args.precision,
            trust_remote_code=args.trust_remote_code,
        )
    except CSEError as err:  # e.g. a max_seq_length that leaves no token of a sentence
        raise InputError(f"--model_name_or_path {name}: {in_flag_terms(str(err), err.fields)}") from err
    except Exception as err:  # the path was checked up front: what fails here are the model's own files
        raise InputError(f"cannot load model {name}: {type(err).__name__}: {err}") from err


def finished_steps(earlier: EvalResults | None) -> set[str]:
    """Of a model's steps after its SentEval tasks, those ``earlier`` (its record saved by the stopped evaluation)
    holds and does not list as unfinished."""
    if earlier is None:
        return set()
    saved = {OWN_DATA: earlier.own_data, MTEB: earlier.mteb, DIMENSIONS: earlier.dimensions}
    return {step for step, value in saved.items() if value is not None and step not in earlier.unfinished_tasks}


@dataclass
class ModelsEvaluation:
    """The models of ``args`` (:class:`hf_cse.cli.evaluate.EvalArguments`) evaluated into ``out``; ``earlier``: the
    records the same evaluation saved there before it was stopped (one for each model it reached)."""

    args: Any
    out: Path
    earlier: list[EvalResults]
    eval_pairs: list | None = None
    mteb_tasks: list = field(default_factory=list)
    results: list[EvalResults] = field(default_factory=list)
    extras: list[dict] = field(default_factory=list)
    wrote: bool = False  # whether it has written anything yet (:meth:`replace_earlier`)
    replaced: bool = False  # whether it removed earlier results (--overwrite_output_dir)

    @property
    def combined(self) -> bool:
        return len(self.args.model_name_or_path) > 1

    def run(self) -> dict[str, Path]:
        """Evaluate every model (module doc); returns the files of the finished report."""
        say_when_stopped(self.kept_when_stopped)
        if self.earlier:  # as evaluate_model decides: a model with its plots alone left, their arrays kept, is scored
            done = [r.model + ("; its plots left to draw" if r.unfinished_tasks else "")
                    for index, r in enumerate(self.earlier) if not r.unfinished_tasks
                    or r.unfinished_tasks == [PLOTS] and read_plot_data(self.out, index, self.combined)]
            logger.info("finishing the evaluation stopped before: %d of %d model(s) scored%s",
                        len(done), len(self.args.model_name_or_path), f" ({', '.join(done)})" if done else "")
        written: dict[str, Path] = {}
        for index, name in enumerate(self.args.model_name_or_path):
            written = self.evaluate_model(index, name)
        remove_plot_data(self.out)  # kept for a stop until now
        return written

    def replace_earlier(self) -> None:
        """Called before each write: before the first, --overwrite_output_dir's earlier results go (the output
        folder's, :func:`~hf_cse.evaluation.report.report_files`, and the models' MTEB results under
        --mteb_results_dir), so that none mixes with the new ones; until then they are kept, so that a model that
        fails to load or a stop leaves them as they were (:meth:`earlier_kept`). The MTEB tasks call it once they
        have all run (mteb saves into a folder of its own until then: :func:`run_mteb_tasks`)."""
        if self.wrote:
            return
        self.wrote = True
        if not self.args.overwrite_output_dir:
            return
        removed = remove_report_files(self.out)
        self.replaced = bool(removed)
        if removed:
            logger.info("--overwrite_output_dir: removed the earlier results in %s (%s)", self.out,
                        listing([str(p.relative_to(self.out)) for p in removed]))
        for model, taken in self.earlier_mteb_results().items():
            remove_mteb_results(taken)
            self.replaced = True
            meta = self.args.mteb_meta(model)
            logger.warning("--overwrite_output_dir: removed %d earlier MTEB result file(s) of %s (revision %s) for %s "
                           "from %s", len(taken), meta["name"], meta["revision"],
                           ", ".join(t.metadata.name for t in self.mteb_tasks), self.args.mteb_results_dir)

    def earlier_mteb_results(self) -> dict[str, list[Path]]:
        """The MTEB result files under --mteb_results_dir of the models this evaluation runs from the start, by model
        (those a stopped evaluation it finishes reached are its own)."""
        if self.args.mteb_results_dir is None:
            return {}
        found = {model: saved_mteb_results(self.args.mteb_results_dir, self.mteb_tasks, self.args.mteb_meta(model))
                 for model in self.args.model_name_or_path[len(self.earlier):]}
        return {model: taken for model, taken in found.items() if taken}

    def earlier_kept(self) -> str | None:
        """What --overwrite_output_dir was to replace and is still there, as nothing was written yet, or None."""
        if self.wrote or not self.args.overwrite_output_dir:
            return None
        kept = [f"the earlier results in {self.out}"] if report_files(self.out) else []
        kept += [f"the earlier MTEB results under {self.args.mteb_results_dir}"] if self.earlier_mteb_results() else []
        return f"{' and '.join(kept)} are kept" if kept else None

    def kept_when_stopped(self) -> str:
        """What a stop keeps (said after "interrupted (Ctrl-C); ")."""
        kept = self.earlier_kept()
        if kept:
            return f"no new result was written yet: {kept}."
        record = self.out / "results.json"
        if not record.is_file() and self.replaced:  # stopped between the removal and the first write
            return (f"the earlier results were removed (--overwrite_output_dir) just before the first new one was "
                    f"written; {self.out} holds no record of the new evaluation yet.")
        if not record.is_file():
            return f"no task had finished yet: nothing was written to {self.out}."
        return f"the finished tasks are kept in {record}; the same command evaluates the rest."

    def evaluate_model(self, index: int, name: str) -> dict[str, Path]:
        args = self.args
        earlier = self.earlier[index] if index < len(self.earlier) else None
        extras = read_plot_data(self.out, index, self.combined) if earlier is not None else {}
        if earlier is not None and earlier.unfinished_tasks and not extras:
            # its plot is still to draw, and the arrays of a finished STS-B (e.g. of an older hf_cse) are not there:
            # scored again for them
            plotted = ["STSBenchmark"] if "STSBenchmark" in args.task_list else list(STSB_TEST_TASKS)
            earlier = replace(earlier, unfinished_tasks=[*earlier.unfinished_tasks, *plotted])
        done = finished_steps(earlier)
        finished = [] if earlier is None else finished_tasks(earlier, args.task_list, args.mode)
        todo = [t for t in args.task_list if t not in finished]
        todo += [step for step, asked in ((OWN_DATA, self.eval_pairs is not None), (MTEB, bool(self.mteb_tasks)),
                                          (DIMENSIONS, bool(args.truncate_dim_list))) if asked and step not in done]
        if earlier is not None and not todo:  # stopped while its report was written: nothing to encode
            logger.info("%s: every task was finished before the stop; its results are kept", name)
            return self.finish_model(name, replace(earlier, unfinished_tasks=[]), extras)
        logger.info("Evaluating %s on %s (mode %s)", name, ", ".join(todo), args.mode)
        encoder = load_encoder(name, args)
        say_scoring_precision(encoder.precision, encoder.device)
        width = None  # the embedding size (one sentence encoded), where the dimensions or MTEB's meta need it
        if args.truncate_dim_list or args.mteb_results_dir:
            try:
                width = check_dims_fit(encoder, args.truncate_dim_list)
            except InputError as err:
                if index == 0:
                    raise
                # this command can no longer finish: rerunning it would meet the same model
                raise InputError(f"--{err} The models before it were scored with these dimensions (kept in "
                                 f"{self.out / 'results.json'}): rerun with dimensions every model gives and "
                                 "--overwrite_output_dir, or into another --output_dir.") from None
        kept = {} if args.truncate_dim_list else None  # the full embeddings, cut for each dimension
        results, extras = evaluate(
            encoder, args.task_list, data_dir=args.senteval_data_dir, source=args.senteval_source, mode=args.mode,
            sts_aggregation=args.sts_aggregation, mrpc_features=args.mrpc_features,
            on_progress=lambda partial: self.save_partial(partial, extras), embeddings=kept, done=earlier,
            extras=extras,
        ) if args.task_list else (EvalResults(model=name, settings=encoder.describe()), extras)
        if self.eval_pairs is not None:
            if OWN_DATA in done:
                results.own_data = earlier.own_data
            else:
                source = args.eval_file or args.eval_dataset_name
                logger.info("%s: encoding %d pairs", source, len(self.eval_pairs))
                results.own_data = {**PairsEvaluator(self.eval_pairs, args.eval_name)(encoder),
                                    "pairs": len(self.eval_pairs), "source": source}
                self.save_partial(results, extras)
        folder = model_folder(self.out, index, name, several=self.combined) / "mteb"
        meta = args.mteb_meta(name, embed_dim=width)
        if self.mteb_tasks:
            if MTEB in done:
                results.add_mteb(earlier.mteb, (earlier.details or {}).get("mteb", {}))
            else:
                results.add_mteb(*run_mteb_tasks(encoder if kept is None else KeepingEncoder(encoder, kept),
                                                 self.mteb_tasks, folder, args.mteb_results_dir, meta,
                                                 before_writing=self.replace_earlier))
                self.save_partial(results, extras)
        if args.truncate_dim_list:
            results.settings = {**(results.settings or {}), "embedding_dim": width}
            results.dimensions = earlier.dimensions if DIMENSIONS in done else evaluate_dimensions(
                encoder, args.truncate_dim_list, args.sts_tasks, self.mteb_tasks, folder, args.mteb_results_dir, meta,
                embeddings=kept, data_dir=args.senteval_data_dir, source=args.senteval_source, mode=args.mode,
                sts_aggregation=args.sts_aggregation)
        return self.finish_model(name, results, extras)

    def save_partial(self, partial: EvalResults, extras: dict) -> None:
        """The record so far of the model being evaluated, beside the finished ones: the text files only (the plots
        come at the end of a model), with its plot's arrays. A record whose tasks are done lists the steps after
        them, so that it never passes for a finished one."""
        partial = replace(partial)  # the model's own record is left as it is
        record_settings(partial, self.args)
        if not partial.unfinished_tasks:
            steps = ((OWN_DATA, self.eval_pairs is not None and partial.own_data is None),
                     (MTEB, bool(self.mteb_tasks) and partial.mteb is None),
                     (DIMENSIONS, bool(self.args.truncate_dim_list) and partial.dimensions is None), (PLOTS, True))
            partial = replace(partial, unfinished_tasks=[step for step, left in steps if left])
        self.replace_earlier()
        write_report([*self.results, partial], self.out, [*self.extras, extras], combined=self.combined, plots=False,
                     plot_data=True)

    def finish_model(self, name: str, results: EvalResults, extras: dict) -> dict[str, Path]:
        """The finished record of a model, with the report and plots of every model so far."""
        record_settings(results, self.args)
        warn_undefined_scores(name, results)
        self.results.append(results)
        self.extras.append(extras)
        self.replace_earlier()
        written = write_report(self.results, self.out, self.extras, combined=self.combined, plot_data=True)
        print_results(name, self.args, results)
        return written
