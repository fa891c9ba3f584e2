"""Runs written by an earlier hf_cse, read in today's terms so that relaunching such an interrupted run resumes it."""

from __future__ import annotations

import json
from pathlib import Path

from hf_cse.models import get_method
from hf_cse.objectives import LEGACY_FIELDS
from hf_cse.presets import DEFAULT_METHOD

from ..checks import local_resolved
from ..run_files import RECORD_NAMES


def record_in_objectives_form(record: dict) -> dict:
    """A run record (``hf_cse_run.json``) written before objectives were a list -- with ``loss``, ``loss_kwargs`` and
    the ``dcl_*`` settings, absent ones meaning the method's defaults -- in today's form, through the config's own
    conversion of those fields, so that relaunching such an interrupted run resumes it. So is one written before a
    local encoder or generator was recorded resolved (the relaunch, from the same folder, reaches it the same way),
    and one that recorded the generator's config field beside ``generator``."""
    found = {k: local_resolved(record[k]) for k in ("encoder", "generator") if isinstance(record.get(k), str)}
    resolved = {k: path for k, path in found.items() if path != record[k]}
    record = {**record, **resolved} if resolved else record
    if "generator" in record:  # one written before the generator's config field was left out, as "generator" holds it
        record = {k: v for k, v in record.items() if k != RECORD_NAMES["generator"]}
    if "objectives" in record or "loss" not in record:
        return record
    legacy = {k: v for k, v in record.items() if k in LEGACY_FIELDS and v is not None}
    record = {k: v for k, v in record.items() if k not in LEGACY_FIELDS}
    config = get_method(record.get("method", DEFAULT_METHOD)).config_class(**legacy)
    return {**record, "objectives": config.objectives}


def trained_padding_free(checkpoint: str) -> bool:
    """Whether the run a checkpoint belongs to trained padding-free (its config.json; a checkpoint written before
    the padding-free forward existed trained padded). A resumed run keeps it unless --padding_free is given: the
    dropout masks are drawn over other shapes, so switching would make the resumed run differ from the run
    uninterrupted."""
    config = Path(checkpoint) / "config.json"
    return bool(json.loads(config.read_text()).get("padding_free", False)) if config.is_file() else True
