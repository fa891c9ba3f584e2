"""Evaluation of sentence embeddings as the SimCSE-family papers report it: STS, SentEval transfer tasks, alignment /
uniformity, STS-B retrieval, reports and plots, and the trainer's dev metrics.

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
from .geometry import alignment, evaluate_geometry, evaluate_retrieval, retrieval_recall, uniformity
from .report import plot_alignment_uniformity, plot_cosine_buckets, write_report
from .runner import evaluate, parse_tasks
from .sts import evaluate_sts, format_sts_table
from .transfer import evaluate_transfer, format_transfer_table

__all__ = [
    "ALL_TASKS",
    "HUB_DATASETS",
    "STS_SUBSETS",
    "STS_TASKS",
    "TRANSFER_TASKS",
    "PairsEvaluator",
    "STSDevEvaluator",
    "SentEvalDataError",
    "SentenceEncoder",
    "alignment",
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
    "retrieval_recall",
    "uniformity",
    "write_report",
]
