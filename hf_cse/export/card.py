"""The model card's inputs, kept beside an export so the card can be rendered again for another model id (a push
to a Hub repo the export was not made for) instead of being patched after rendering.

The record holds nothing machine-local beyond what the card shows (the folder an export names as its model id
until it is pushed): the config is the published ``hf_cse_config.json``, absolute paths in the training info become
folder names, and the base encoder is kept as what the card shows of it (its Hub id, or a local folder's name).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..evaluation.results import EvalResults
from ..model_card import base_encoder_unknown, resolve_base_model
from ..writing import json_safe, write_json_atomic, write_text_atomic
from .modules import HF_CSE_CONFIG_FILE, without_local_paths

CARD_INPUTS_FILE = "hf_cse_card_inputs.json"


def card_title(model_id: str | None) -> str | None:
    """The card's heading for a Hub repo: its name (None: the card's own default heading)."""
    return model_id.split("/")[-1] if model_id else None


def record_card_inputs(folder: Path, config, *, model_id: str, export: Mapping[str, Any],
                       eval_results: EvalResults | None, training_info: Mapping[str, Any] | None,
                       title: str | None) -> None:
    """Write into ``folder`` what :func:`hf_cse.model_card.render_model_card` was given (besides the config,
    which ``hf_cse_config.json`` holds), and the names of the files the export wrote (``files``: everything in
    ``folder`` now, this record included), which an overwrite or a push replaces (:func:`recorded_export_files`)."""
    base = config.base_encoder
    files = sorted({p.name for p in Path(folder).iterdir()} | {CARD_INPUTS_FILE})
    record = {"model_id": model_id, "title": title, "export": dict(export), "files": files,
              "eval_results": eval_results.to_dict() if eval_results else {},
              "training_info": without_local_paths(json_safe(training_info or {})),
              "base_model": resolve_base_model(base, getattr(config, "base_encoder_local", None)),
              "base_encoder_name": Path(base).name if base else None,
              "base_encoder_unknown": base_encoder_unknown(config)}
    write_json_atomic(folder / CARD_INPUTS_FILE, record)


def read_card_inputs(folder: Path) -> dict[str, Any] | None:
    """The record :func:`record_card_inputs` left in an export folder (None for exports made without one)."""
    path = Path(folder) / CARD_INPUTS_FILE
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def recorded_export_files(folder: Path) -> list[str]:
    """The names of the files the export in ``folder`` wrote, as its record lists them (none for an export made
    before records listed them, or a folder without one)."""
    try:
        files = (read_card_inputs(folder) or {}).get("files")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return []
    return [str(name) for name in files] if isinstance(files, list) else []


def _recorded_config(folder: Path, record: Mapping[str, Any]):
    """The export's hf_cse config (``hf_cse_config.json``) with the base encoder as the card saw it."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    from .. import models  # noqa: F401 - registers the hf_cse config classes

    data = json.loads((Path(folder) / HF_CSE_CONFIG_FILE).read_text(encoding="utf-8"))
    if record["base_model"]:
        data["base_encoder"], data["base_encoder_local"] = record["base_model"], False
    elif record["base_encoder_name"] and not record.get("base_encoder_unknown"):
        # a local folder: given as an absolute path, so it is not read as a Hub id
        data["base_encoder"] = str(Path(Path(folder).resolve().anchor) / record["base_encoder_name"])
        data["base_encoder_local"] = True
    return CONFIG_MAPPING[data["model_type"]].from_dict(data)


def render_card_for(folder: Path, model_id: str, revision: str | None = None) -> bool:
    """Render the export's card again for ``model_id`` (its branch ``revision``, None: the default one) from its
    recorded inputs and write it (README.md) with the record updated; returns False when the folder has no record (an
    export made before records were kept) or no ``hf_cse_config.json``."""
    from ..model_card import render_model_card

    record = read_card_inputs(folder)  # its eval_results: results.json's layout, read by EvalResults.from_dict
    if record is None or not (Path(folder) / HF_CSE_CONFIG_FILE).is_file():
        return False
    export = {**record["export"], "revision": revision or None}
    if record["model_id"] == model_id and record["export"].get("revision") == export["revision"]:
        return True
    title = card_title(model_id)
    card = render_model_card(_recorded_config(folder, record), model_id=model_id, export=export,
                             eval_results=record["eval_results"], training_info=record["training_info"], title=title)
    write_text_atomic(Path(folder) / "README.md", card)
    record.update(model_id=model_id, title=title, export=export)
    write_json_atomic(Path(folder) / CARD_INPUTS_FILE, record)
    return True
