"""The record of a training run (``training_info.json``, written by run_unsup.py beside the checkpoint): what the
model card shows about the data, the training arguments and the final metrics."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..run_files import TRAINING_INFO_FILE
from ..writing import json_safe


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


def read_training_info(folder) -> dict[str, Any] | None:
    """The ``training_info.json`` run_unsup.py left in a checkpoint folder, if any."""
    path = Path(folder) / TRAINING_INFO_FILE
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


#: the keys of a training info the model card reads, and the JSON type each must have (null is always allowed)
TRAINING_INFO_TYPES: dict[str, tuple[type, ...]] = {
    "data": (dict,), "training_args": (dict,), "train_metrics": (dict,), "dev": (dict,), "datasets": (list,),
    "world_size": (int,), "language": (str, list), "license": (str,), "base_model": (str,),
    "training_curves": (str,),
}
_JSON_NAMES = {dict: "object", list: "list", int: "number", str: "string"}


def training_info_problem(info: Mapping[str, Any]) -> str | None:
    """What in a training info (e.g. a ``training_info.json`` edited by hand) the model card could not read: a key
    of :data:`TRAINING_INFO_TYPES` holding another JSON type; None when it can be read."""
    for key, types in TRAINING_INFO_TYPES.items():
        value = info.get(key)
        if value is not None and not isinstance(value, types):
            wanted = " or ".join(_JSON_NAMES[t] for t in types)
            return f'"{key}" holds a {type(value).__name__} ({json.dumps(value)[:40]}), not a JSON {wanted}'
    return None
