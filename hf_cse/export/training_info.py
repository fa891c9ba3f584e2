"""The record of a training run (``training_info.json``, written by run_unsup.py beside the checkpoint): what the
model card shows about the data, the training arguments and the final metrics."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..checkpoints import checkpoint_step as folder_step
from ..checkpoints import json_object, training_run_files
from ..run_files import RUN_SETTINGS_FILE, TRAIN_RESULTS_FILE, TRAINING_INFO_FILE, WEIGHT_FILES
from ..run_settings import TRAINING_SETTINGS
from ..writing import json_safe
from ..zero_loss import ZERO_LOSS_KEY


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
    "training_curves": (str,), ZERO_LOSS_KEY: (bool,),
}
_JSON_NAMES = {dict: "object", list: "list", int: "number", str: "string", bool: "true or false"}


def training_info_problem(info: Mapping[str, Any]) -> str | None:
    """What in a training info (e.g. a ``training_info.json`` edited by hand) the model card could not read: a key
    of :data:`TRAINING_INFO_TYPES` holding another JSON type; None when it can be read."""
    for key, types in TRAINING_INFO_TYPES.items():
        value = info.get(key)
        if value is not None and not isinstance(value, types):
            wanted = " or ".join(_JSON_NAMES[t] for t in types)
            return f'"{key}" holds a {type(value).__name__} ({json.dumps(value)[:40]}), not a JSON {wanted}'
    return None


def is_evaluation_results(info: Mapping[str, Any]) -> bool:
    """Whether a JSON object given as a training record is run_eval.py's ``results.json`` (its scores would be shown
    as training information)."""
    return "training_args" not in info and {"settings", "timing"} <= set(info)


def checkpoint_step(checkpoint: Any) -> int | None:
    """The step of a run's ``checkpoint-<step>`` folder (a local one, named so once resolved), None for anything else
    (a run's final model, a Hub id, a loaded model)."""
    if not isinstance(checkpoint, (str, Path)) or not Path(checkpoint).expanduser().is_dir():
        return None
    step = folder_step(Path(checkpoint).expanduser().resolve())
    return step if step >= 0 else None


def run_folders(checkpoint: str | Path) -> list[Path]:
    """The folders of the run a local checkpoint belongs to: the checkpoint, and the run's output folder when it is
    one of the run's ``checkpoint-<step>`` folders (resolved)."""
    folder = Path(checkpoint).expanduser().resolve()
    if checkpoint_step(checkpoint) is not None:
        return [folder, folder.parent]
    return [folder]


#: what a run's record says of its final model only: the dev score before and after training (and which weights were
#: saved), the final training metrics and the curves up to the last step -- none of it true of an earlier checkpoint
FINAL_MODEL_KEYS = ("dev", "train_metrics", "training_curves")


def for_checkpoint(info: Mapping[str, Any] | None, checkpoint: Any) -> dict[str, Any] | None:
    """The part of a run's record (``info``) that is true of ``checkpoint``: all of it for the run's final model; for
    one of its ``checkpoint-<step>`` folders, the data and the settings only (not :data:`FINAL_MODEL_KEYS`), with the
    step, and, where no record is given, the settings the checkpoint holds itself (:data:`RUN_SETTINGS_FILE`)."""
    step = checkpoint_step(checkpoint)
    if step is None:
        return dict(info) if info is not None else None
    kept = {k: v for k, v in (info or {}).items() if k not in FINAL_MODEL_KEYS}
    if not kept.get("training_args"):
        settings = json_object(Path(checkpoint).expanduser() / RUN_SETTINGS_FILE)
        args = {k: v for k, v in (settings or {}).items() if k in TRAINING_SETTINGS and v is not None}
        if args:
            kept["training_args"] = args
    kept["checkpoint"] = (f"step {step} of its run (the run's dev scores, final training metrics and curves are "
                          "those of the run's final model, so they are not shown)")
    return kept


def recorded_run_folder(info: Mapping[str, Any]) -> str | None:
    """The output folder a training info records (``training_args.output_dir``, as the run was given it), if any."""
    args = info.get("training_args")
    folder = args.get("output_dir") if isinstance(args, Mapping) else None
    return str(folder) if isinstance(folder, (str, Path)) and str(folder).strip() else None


def own_run_folder(info_file: str | Path) -> Path | None:
    """The folder of the run whose own record ``info_file`` is (resolved): the folder it lies in, when it is the
    ``training_info.json`` a run wrote beside its model or its run files (wherever that folder was moved or copied
    to, as a whole); None for a record kept elsewhere."""
    path = Path(info_file).expanduser().resolve()
    folder = path.parent
    if path.name != TRAINING_INFO_FILE:
        return None
    if training_run_files(folder) or any(next(folder.glob(pattern), None) for pattern in WEIGHT_FILES):
        return folder
    return None


def record_run_folder(info: Mapping[str, Any], info_file: str | Path) -> Path | None:
    """The folder of the run a training info (read from ``info_file``) is the record of, exactly (resolved): the run
    folder the file lies in (:func:`own_run_folder`), else the output folder it records -- a relative one from the
    current folder, where a run started here resolved it. None when it names none (written by hand)."""
    own = own_run_folder(info_file)
    if own is not None:
        return own
    recorded = recorded_run_folder(info)
    return Path(recorded).expanduser().resolve() if recorded is not None else None


def final_metrics_differ(info: Mapping[str, Any], run: Path) -> bool:
    """Whether the final training metrics of a training info differ from those the run in ``run`` wrote
    (:data:`TRAIN_RESULTS_FILE`; its runtime tells two runs of the same settings apart); False when either lacks
    them."""
    recorded, written = info.get("train_metrics"), run / TRAIN_RESULTS_FILE
    if not isinstance(recorded, Mapping) or not written.is_file():
        return False
    try:
        metrics = json_safe(json.loads(written.read_text(encoding="utf-8")))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return False
    return not isinstance(metrics, dict) or any(metrics[k] != recorded[k] for k in metrics.keys() & recorded.keys())


def run_record_problem(info: Mapping[str, Any], info_file: str | Path, checkpoint: str | Path) -> str | None:
    """Why a training info (read from ``info_file``) is not the record of the run that trained ``checkpoint``, or
    None when it is: the file lies in one of :func:`run_folders` (the run's own, wherever the run was moved or copied
    to), or the run it is the record of (:func:`record_run_folder`) is one of them -- the same folder, not one whose
    path merely ends alike (two projects' ``outputs/simcse``) -- with the final training metrics that run wrote
    (:func:`final_metrics_differ`: a copy kept elsewhere naming the folder relative to another project). A Hub
    checkpoint, or a record naming no folder, is taken as it is."""
    local = Path(checkpoint).expanduser()
    if not local.is_dir():
        return None
    folders = run_folders(local)
    if Path(info_file).expanduser().resolve().parent in folders:
        return None
    run = record_run_folder(info, info_file)
    if run is None:
        return None
    if run not in folders:
        return f"is the record of the run in {run}, not of the checkpoint {checkpoint}"
    if final_metrics_differ(info, run):
        return (f"names the folder of the checkpoint's run ({run}), but its final training metrics are not those "
                f"that run wrote ({TRAIN_RESULTS_FILE}): it is the record of another run in a folder of that name")
    return None
