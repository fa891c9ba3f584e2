"""The record of a training run (``training_info.json``, written by run_unsup.py beside the checkpoint): what the
model card shows about the data, the training arguments and the final metrics."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..run_files import CHECKPOINT_PREFIX, TRAINING_INFO_FILE
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


def run_folders(checkpoint: str | Path) -> list[Path]:
    """The folders of the run a local checkpoint belongs to: the checkpoint, and the run's output folder when it is
    one of the run's ``checkpoint-<step>`` folders (resolved)."""
    folder = Path(checkpoint).expanduser().resolve()
    if folder.name.startswith(f"{CHECKPOINT_PREFIX}-") and folder.name.split("-", 1)[1].isdigit():
        return [folder, folder.parent]
    return [folder]


def recorded_run_folder(info: Mapping[str, Any]) -> str | None:
    """The output folder a training info records (``training_args.output_dir``, as the run was given it), if any."""
    args = info.get("training_args")
    folder = args.get("output_dir") if isinstance(args, Mapping) else None
    return str(folder) if isinstance(folder, (str, Path)) and str(folder).strip() else None


def is_run_of(info: Mapping[str, Any], info_file: str | Path, checkpoint: str | Path) -> bool:
    """Whether a training info (read from ``info_file``) is the record of the run that trained ``checkpoint``: the
    file lies in one of :func:`run_folders` (the run's own, wherever it was trained), or the output folder it records
    is one of them (an absolute path; a relative one from the current folder, or as the end of their path, where the
    run was started from another folder). A Hub checkpoint, or a record naming no folder, is taken as it is."""
    local = Path(checkpoint).expanduser()
    recorded = recorded_run_folder(info)
    if not local.is_dir() or recorded is None:
        return True
    folders = run_folders(local)
    if Path(info_file).expanduser().resolve().parent in folders:
        return True
    path = Path(recorded).expanduser()
    if path.is_absolute() or path.resolve() in folders:
        return path.resolve() in folders
    parts = Path(*(p for p in path.parts if p not in (".", ""))).parts
    return ".." not in parts and any(folder.parts[-len(parts):] == parts for folder in folders if parts)
