"""Starting a training run over in a folder that holds an earlier one (``overwrite_output_dir``, of the Python API and
the training command alike): only the files a run writes there (:data:`RUN_FILES`) are removed, the mark of a finished
run first, so that a kill meanwhile never leaves a folder that looks finished. Everything else stays: the user's own
files and hf-cse-eval's results of the model replaced (said in one log line: they no longer describe the folder). A
model another tool saved in a ``checkpoint-N`` folder is never removed: the caller refuses the folder before."""

from __future__ import annotations

import logging
from pathlib import Path

from .checkpoints import TRAINER_STATE_FILE, is_checkpoint_name, is_killed_weights_write, other_model
from .checks import WRITE_PROBE_PREFIX
from .output_folder import TOKENIZER_FILES, listing, matching, remove_entries, say_removed
from .run_files import (
    ADAPTER_FOLDER,
    CHECKPOINT_PREFIX,
    CURVES_FILE,
    RUN_LOADER_FILES,
    RUN_RECORD_FILE,
    TENSORBOARD_FOLDER,
    TRAIN_RESULTS_FILE,
    TRAINING_INFO_FILE,
    WEIGHT_FILES,
)

logger = logging.getLogger(__name__)

# Everything a training run (the Trainer, the tokenizer, the export, the command's record) writes into its output
# folder; a test checks a finished run leaves nothing else. Only these are removed by a start over.
RUN_FILES = (
    f"{CHECKPOINT_PREFIX}-*", TENSORBOARD_FOLDER, RUN_RECORD_FILE, TRAINING_INFO_FILE, f".{TRAINING_INFO_FILE}.*",
    "sentence-transformers", ".sentence-transformers.*",  # the export and its temporary folders
    "config.json", "generation_config.json", *WEIGHT_FILES, "training_args.bin", TRAINER_STATE_FILE,
    "all_results.json", TRAIN_RESULTS_FILE, "eval_results.json", CURVES_FILE, ADAPTER_FOLDER, *TOKENIZER_FILES,
    *RUN_LOADER_FILES,
)


def run_entries(names, patterns: tuple[str, ...]) -> list[str]:
    """The ``names`` matching ``patterns`` (:data:`RUN_FILES`, ...), of ``checkpoint-*`` those of checkpoints only
    (``checkpoint-<digits>``: not a user's ``checkpoint-3-eval`` or ``checkpoint-notes.txt``)."""
    return [n for n in matching(names, patterns) if not n.startswith(f"{CHECKPOINT_PREFIX}-") or is_checkpoint_name(n)]


def killed_writes(out: Path, names) -> list[str]:
    """Of ``out``'s entries ``names``, the partial files of a run's own files that a killed write left
    (``.<name>.partial-<pid>``, :mod:`hf_cse.writing`; an export's temporary folder; the temporary file of a weights
    file safetensors was writing, :func:`~hf_cse.checkpoints.is_killed_weights_write`) and the probe file of the
    folder's write check: never a run's result, removed by the run that claims the folder next (it holds the lock: no
    run is still writing them)."""
    return [n for n in names if n.startswith(WRITE_PROBE_PREFIX) or is_killed_weights_write(out / n)
            or (n.startswith(".") and ".partial-" in n and run_entries([n[1:].rsplit(".partial-", 1)[0]], RUN_FILES))]


def other_models(out: Path, names: list[str]) -> list[str]:
    """Of ``out``'s entries ``names``, the ``checkpoint-N`` folders another tool saved (:func:`other_model`):
    files no run writes, which no run resumes or removes."""
    return [n for n in run_entries(names, (f"{CHECKPOINT_PREFIX}-*",)) if other_model(out / n)]


def run_files_in(out: Path, names: list[str]) -> list[str]:
    """Of ``out``'s entries ``names``, those a start over removes: a run's files and what its killed writes left,
    never another tool's model."""
    theirs = set(other_models(out, names))
    return sorted(set(run_entries(names, RUN_FILES) + killed_writes(out, names)) - theirs)


def remove_run_files(out: Path, names: list[str]) -> None:
    """Remove ``names`` (:func:`run_files_in`), the mark of a finished run first (module doc)."""
    remove_entries(out, sorted(names, key=lambda n: n != TRAINING_INFO_FILE))


def say_stale_results(out: Path) -> None:
    """hf-cse-eval's results are kept (the user's work), but no longer describe the folder: those of the model removed
    (its eval* folders), or the folder's own where it was an evaluation's output folder."""
    if not out.is_dir():
        return
    stale = sorted(p.name for p in out.glob("eval*") if p.is_dir() and (p / "results.json").is_file())
    stale += [name for name in ("results.json", "results.md") if (out / name).is_file()]
    if stale:
        logger.warning("%s in %s: hf-cse-eval's results of another model, kept; they do not describe the model "
                       "this run trains (move them aside, or evaluate again)", listing(stale), out)


def start_over(output_dir) -> None:
    """Remove the earlier run's files from ``output_dir`` (module doc), said in one log line naming
    ``overwrite_output_dir``, the training argument that asks for it; the caller holds the folder and has refused
    another tool's model there."""
    out = Path(output_dir)
    names = sorted(p.name for p in out.iterdir()) if out.is_dir() else []
    own = run_files_in(out, names)
    if own:
        remove_run_files(out, own)
        say_removed("overwrite_output_dir", out, own, [n for n in names if n not in own])
    say_stale_results(out)
