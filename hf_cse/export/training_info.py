"""The record of a training run (``training_info.json``, written by run_unsup.py beside the checkpoint): what the
model card shows about the data, the training arguments and the final metrics."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..writing import json_safe

TRAINING_INFO_FILE = "training_info.json"  # written by run_unsup.py next to the checkpoint; read by the CLI


def training_info_from_run(training_args=None, data: Mapping[str, Any] | None = None,
                           train_metrics: Mapping[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    """The ``training_info`` dict of a run (JSON-safe): ``TrainingArguments.to_dict()`` without secrets, data set
    facts, final training metrics, world size, plus any ``extra`` keys (e.g. ``preset``)."""
    info: dict[str, Any] = {}
    if training_args is not None:
        args = training_args.to_dict() if hasattr(training_args, "to_dict") else dict(training_args)
        info["training_args"] = {k: v for k, v in args.items() if not k.endswith("token")}
        info["world_size"] = int(getattr(training_args, "world_size", 1) or 1)
    if data:
        info["data"] = dict(data)
    if train_metrics:
        info["train_metrics"] = dict(train_metrics)
    info.update({k: v for k, v in extra.items() if v is not None})
    return json_safe(info)


def data_facts(data_args, num_sentences: int | None = None) -> dict[str, Any]:
    """What the card says about the training data, from run_unsup.py's data arguments: its source, size and
    truncation length; for pair / triplet data the columns that were the views (and rows, not sentences)."""
    if data_args is None:
        return {}
    fields = vars(data_args)
    train_file = fields.get("train_file")
    data = {
        "source": Path(train_file).name if train_file else fields.get("dataset_name") or "hf_cse demo corpus",
        "dataset_name": fields.get("dataset_name"),
        "dataset_config_name": fields.get("dataset_config_name"),
        "num_sentences": num_sentences,
        "max_seq_length": fields.get("max_seq_length"),
        "max_train_samples": fields.get("max_train_samples"),
    }
    if fields.get("train_files"):  # several sources mixed by weight (hf_cse.streaming)
        weights = fields.get("train_weights") or [1.0] * len(fields["train_files"])
        data["source"] = " + ".join(f"{Path(f).name} (weight {w:g})" for f, w in zip(fields["train_files"], weights))
    if fields.get("streaming"):
        data["streamed"] = True
    if fields.get("pair_column"):
        kind = "triplets" if fields.get("negative_column") else "pairs"
        data["pair_data"] = {"kind": kind, "anchor": fields.get("text_column") or "text",
                             "positive": fields["pair_column"], "hard_negative": fields.get("negative_column")}
        data["num_rows"], data["num_sentences"] = data.pop("num_sentences", None), None
    return {k: v for k, v in data.items() if v is not None}


def read_training_info(folder) -> dict[str, Any] | None:
    """The ``training_info.json`` run_unsup.py left in a checkpoint folder, if any."""
    path = Path(folder) / TRAINING_INFO_FILE
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
