"""Evaluation of sentence embeddings as the SimCSE-family papers report it: STS, SentEval transfer tasks, alignment /
uniformity, STS-B retrieval, one typed results record (:class:`EvalResults`) with its reports and plots, and the
trainer's dev metrics.

Every STS number is Spearman x 100 of cosine similarity; every transfer number is accuracy x 100.

Typical use::

    from hf_cse.evaluation import SentenceEncoder, evaluate_sts
    enc = SentenceEncoder.from_pretrained("path/to/model")  # hf_cse, sentence-transformers or plain HF
    res = evaluate_sts(enc, data_dir="SentEval/data/downstream")  # {"STS12": ..., "avg": ...}
"""

from .data import (
    ALL_TASKS,
    HUB_DATASETS,
    STS_SUBSETS,
    STS_TASKS,
    TRANSFER_TASKS,
    SentEvalDataError,
    default_senteval_dir,
    load_sts,
)
from .dev import dev_metrics
from .encoder import SentenceEncoder, detect_kind
from .evaluators import PairsEvaluator, STSDevEvaluator
from .figures import plot_alignment_uniformity, plot_cosine_buckets, plot_task_comparison
from .geometry import alignment, evaluate_geometry, evaluate_retrieval, retrieval_recall, uniformity
from .report import summary_text, write_report
from .results import EvalResults, average_label
from .runner import evaluate, parse_tasks
from .sts import evaluate_sts, format_sts_table
from .transfer import evaluate_transfer, format_transfer_table

__all__ = [
    "ALL_TASKS",
    "EvalResults",
    "HUB_DATASETS",
    "STS_SUBSETS",
    "STS_TASKS",
    "TRANSFER_TASKS",
    "PairsEvaluator",
    "STSDevEvaluator",
    "SentEvalDataError",
    "SentenceEncoder",
    "alignment",
    "average_label",
    "default_senteval_dir",
    "detect_kind",
    "dev_metrics",
    "evaluate",
    "evaluate_geometry",
    "evaluate_retrieval",
    "evaluate_sts",
    "evaluate_transfer",
    "format_sts_table",
    "format_transfer_table",
    "load_sts",
    "parse_tasks",
    "plot_alignment_uniformity",
    "plot_cosine_buckets",
    "plot_task_comparison",
    "retrieval_recall",
    "summary_text",
    "uniformity",
    "write_report",
]
