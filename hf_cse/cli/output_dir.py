"""run_unsup.py's output-folder policy: never lose a run's work, never mix two runs in one folder.

The convention of the transformers example scripts (``transformers.trainer_utils.get_last_checkpoint``), which
transformers 5 no longer enforces itself:

* an absent or empty folder: a new run;
* checkpoints of an interrupted run (``checkpoint-N`` folders and nothing else of a run): resume from the last
  complete one (:mod:`hf_cse.checkpoints`; incomplete ones are skipped with a log line), said in one log line; a run
  with other settings (recorded in ``hf_cse_run.json``) is refused;
* a run whose final save or export was cut short (model files without ``training_info.json``, which a run writes
  last): finished from its last complete checkpoint (refused when there is none);
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

from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from ..checkpoints import checkpoint_problem, last_complete_checkpoint
from ..checks import InputError, check_path_given, check_writable
from ..export import TRAINING_INFO_FILE
from ..export.folders import TOKENIZER_FILES, matching, remove_entries
from ..export.folders import same_or_inside as _same_or_inside
from ..writing import json_safe, write_json_atomic

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


def _read_record(path: Path) -> dict[str, Any]:
    try:
        recorded = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise InputError(f"{path} is not valid JSON ({type(err).__name__} at {getattr(err, 'pos', '?')}): it records "
                         f"the settings of the run in that folder; restore it, or pass {OVERWRITE_FLAG} to start "
                         "over.") from None
    if not isinstance(recorded, dict):
        raise InputError(f"{path} does not hold a JSON object; restore it, or pass {OVERWRITE_FLAG} to start over.")
    return recorded


def _interrupted_run_checkpoint(out: Path, names: list[str]) -> str | None:
    """The checkpoint to resume the run in ``out`` from (None: no complete one); refused when the folder holds a
    finished run (its last file, ``training_info.json``, is there) or files that no run writes. A run whose final
    save or export was cut short (its model files, without ``training_info.json``) is finished from its last complete
    checkpoint; its partly written model is never taken for a finished one."""
    foreign = [n for n in names if n not in matching(names, _INTERRUPTED_RUN_FILES)]
    if (out / TRAINING_INFO_FILE).exists() or [n for n in foreign if n not in matching(foreign, RUN_FILES)]:
        other = [n for n in foreign if n not in matching(foreign, RUN_FILES)]
        what = f"files that are not checkpoints of a run ({_listing(other)})" if other else "a finished run"
        raise InputError(f"--output_dir {out} already holds {what}. Choose another --output_dir, or pass "
                         f"{OVERWRITE_FLAG} to start over (removes the previous run's files, keeps others).")
    resume = last_complete_checkpoint(out)
    if foreign and resume is None:
        raise InputError(f"--output_dir {out} holds a run whose final save was cut short (no {TRAINING_INFO_FILE}) "
                         f"and no complete checkpoint to finish it from. Pass {OVERWRITE_FLAG} to start over, or "
                         "choose another --output_dir.")
    if foreign:
        logger.warning("the final save of the run in %s was cut short (no %s): finishing it from %s", out,
                       TRAINING_INFO_FILE, resume)
    return resume


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
        problem = Path(resume_from_checkpoint).is_dir() and checkpoint_problem(Path(resume_from_checkpoint))
        if problem:
            raise InputError(f"--resume_from_checkpoint {resume_from_checkpoint} is incomplete: {problem}. Give "
                             "a complete checkpoint (an earlier checkpoint-N).")
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
        resume = _interrupted_run_checkpoint(out, names)
        record = out / RUN_RECORD_FILE
        if resume is not None and record.is_file():
            recorded = _read_record(record)
            changed = _differences(json_safe(read_record(recorded)) if read_record else recorded, settings)
            if changed:
                raise InputError(f"--output_dir {out} holds checkpoints of a run with other settings "
                                 f"({'; '.join(changed[:2])})."[:200] + f" Use the same settings to resume it, pass "
                                 f"--resume_from_checkpoint {resume} to continue it with the new ones, choose another "
                                 f"--output_dir, or pass {OVERWRITE_FLAG} to start over.")
        if resume is not None:
            logger.warning("resuming the interrupted run in %s from %s (pass %s to start over instead)", out, resume,
                           OVERWRITE_FLAG)
    if is_main_process and resume is None:
        check_writable(out, "--output_dir")
        write_json_atomic(out / RUN_RECORD_FILE, settings, sort_keys=True)
    return resume
