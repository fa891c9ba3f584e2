"""run_unsup.py's output-folder policy: never lose a run's work, never mix two runs in one folder.

The convention of the transformers example scripts (``transformers.trainer_utils.get_last_checkpoint``), which
transformers 5 no longer enforces itself:

* an absent or empty folder: a new run;
* checkpoints of an interrupted run (``checkpoint-N`` folders and nothing else of a run): resume from the last
  one, said in one log line; a run with other settings (recorded in ``hf_cse_run.json``) is refused;
* anything else (a finished run, other files): refused, naming ``--overwrite_output_dir``;
* ``--overwrite_output_dir``: start over; the previous run's files (:data:`RUN_FILES`) are removed first so that
  none of them survives beside the new model; files no run writes (a log, notes) are kept;
* a folder that is, holds or lies inside the encoder's folder: refused (saving would overwrite the encoder).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, get_last_checkpoint

from .cli import InputError, check_path_given, check_writable
from .export import TRAINING_INFO_FILE
from .export.folders import TOKENIZER_FILES, matching, remove_entries
from .export.folders import same_or_inside as _same_or_inside
from .export.training_info import json_safe

logger = logging.getLogger(__name__)

RUN_RECORD_FILE = "hf_cse_run.json"  # the settings of the run that owns the folder, written when it starts
OVERWRITE_FLAG = "--overwrite_output_dir"
# Everything run_unsup.py (the Trainer, the tokenizer, the export) writes into its output folder; a test checks a
# finished run leaves nothing else. Only these are removed by --overwrite_output_dir.
RUN_FILES = (
    f"{PREFIX_CHECKPOINT_DIR}-*", "runs", RUN_RECORD_FILE, TRAINING_INFO_FILE, f".{TRAINING_INFO_FILE}.*",
    "sentence-transformers", ".sentence-transformers.*",  # the export and its temporary folders
    "config.json", "generation_config.json", "model*.safetensors*", "pytorch_model*.bin*", "training_args.bin",
    "trainer_state.json", "*_results.json", *TOKENIZER_FILES,
)
# What an interrupted run leaves before its model is saved (anything more means the run finished or is not ours).
_INTERRUPTED_RUN_FILES = (f"{PREFIX_CHECKPOINT_DIR}-*", "runs", RUN_RECORD_FILE)


@dataclass
class OutputDirArguments:
    overwrite_output_dir: bool = field(
        default=False,
        metadata={"help": "Start over in an --output_dir that holds another or an interrupted run: that run's files "
                          "are removed first (other files are kept). Without it, checkpoints of the same run are "
                          "resumed and anything else is refused."},
    )


def _listing(names: list[str], limit: int = 5) -> str:
    shown = ", ".join(sorted(names)[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _differences(recorded: dict[str, Any], current: dict[str, Any]) -> list[str]:
    keys = sorted(set(recorded) | set(current))
    return [f"{k}: {recorded.get(k)!r} then, {current.get(k)!r} now" for k in keys if recorded.get(k) != current.get(k)]


def check_not_encoder_folder(output_dir: Path, encoder: str | None) -> None:
    if encoder is None or not Path(encoder).expanduser().exists():
        return
    enc = Path(encoder).expanduser()
    if _same_or_inside(output_dir, enc) or _same_or_inside(enc, output_dir):
        raise InputError(f"--output_dir {output_dir} is, holds or lies inside the encoder's folder {enc}: saving "
                         "there would overwrite or mix with the encoder. Choose another --output_dir.")


def prepare_output_dir(output_dir, settings: dict[str, Any], *, overwrite: bool = False, encoder: str | None = None,
                       resume_from_checkpoint: str | None = None, is_main_process: bool = True,
                       read_record: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> str | None:
    """Apply the policy of the module doc before anything is loaded; returns the checkpoint to resume from (or
    ``None`` for a new run). ``settings`` are the run's settings (JSON-able); checkpoints are resumed only when
    the recorded ones are equal. ``read_record`` brings a record written by an older hf_cse to today's form of the
    same settings (so its interrupted run still resumes). Only the main process removes or writes files."""
    check_path_given(str(output_dir), "--output_dir")
    out = Path(output_dir).expanduser()
    if out.exists() and not out.is_dir():
        raise InputError(f"--output_dir {output_dir} is a file; give a folder path (new or holding this run).")
    check_not_encoder_folder(out, encoder)
    settings = json_safe(settings)
    names = [p.name for p in out.iterdir()] if out.is_dir() else []
    if resume_from_checkpoint:
        if overwrite:
            raise InputError(f"{OVERWRITE_FLAG} starts over and --resume_from_checkpoint continues a run; give one.")
        return resume_from_checkpoint  # the user chose the checkpoint; the Trainer checks it
    resume = None
    if names and overwrite:
        stale = matching(names, RUN_FILES)
        if is_main_process and stale:
            remove_entries(out, stale)
            kept = [n for n in names if n not in stale]
            logger.warning("%s: removed the previous run's files in %s (%s)%s", OVERWRITE_FLAG, out, _listing(stale),
                           f"; kept files no run writes: {_listing(kept)}" if kept else "")
    elif names:
        foreign = [n for n in names if n not in matching(names, _INTERRUPTED_RUN_FILES)]
        if foreign:
            finished = any((out / n).exists() for n in ("config.json", TRAINING_INFO_FILE))
            what = "a finished run" if finished else f"files that are not checkpoints of a run ({_listing(foreign)})"
            raise InputError(f"--output_dir {out} already holds {what}. Choose another --output_dir, or pass "
                             f"{OVERWRITE_FLAG} to start over (removes the previous run's files, keeps others).")
        resume = get_last_checkpoint(str(out))
        record = out / RUN_RECORD_FILE
        if resume is not None and record.is_file():
            recorded = json.loads(record.read_text(encoding="utf-8"))
            changed = _differences(json_safe(read_record(recorded)) if read_record else recorded, settings)
            if changed:
                raise InputError(f"--output_dir {out} holds checkpoints of a run with other settings "
                                 f"({'; '.join(changed[:3])}). Use the same settings to resume it, choose another "
                                 f"--output_dir, or pass {OVERWRITE_FLAG} to start over.")
        if resume is not None:
            logger.warning("resuming the interrupted run in %s from %s (pass %s to start over instead)", out, resume,
                           OVERWRITE_FLAG)
    if is_main_process and resume is None:
        check_writable(out, "--output_dir")
        (out / RUN_RECORD_FILE).write_text(json.dumps(settings, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return resume
