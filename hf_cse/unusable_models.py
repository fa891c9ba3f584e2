"""Why a saved model folder cannot be exported or evaluated, known from its files alone, and which checkpoint of its
run a refusal offers instead (:func:`checkpoint_offered`: the last complete one, or, where later ones diverged, the
last finite one). The one home of these lines: the export and the evaluation refuse such a folder with them before
loading, rather than with loading's traceback or a missing tokenizer. Torch-free until a refusal reads the weights
of the checkpoints it offers."""

from __future__ import annotations

from pathlib import Path

from .checkpoints import (
    complete_checkpoints,
    is_checkpoint_name,
    saved_config,
    training_run_files,
    weights_problem,
)
from .finite_weights import LOOKED_BACK, first_finite
from .run_files import TRAINING_INFO_FILE, WEIGHT_FILES


def checkpoint_offered(output_dir) -> tuple[str | None, str | None]:
    """The checkpoint of the run ``output_dir`` that a refusal offers instead of a model, and what it is:
    ``(path, "the last complete one")``; where later complete ones hold weights that are not finite, the last
    finite one, ``(path, "the last finite one; checkpoint-6 after it diverged")``; ``(None, why)`` where none of
    those read is finite, ``(None, None)`` where it holds no complete checkpoint. Only refusals ask: it reads the
    weights of the checkpoints, newest first, up to the first finite one (at most
    :data:`~hf_cse.finite_weights.LOOKED_BACK` + 1)."""
    finite, diverged = first_finite(complete_checkpoints(output_dir), LOOKED_BACK + 1)
    names = ", ".join(diverged)
    if finite and not diverged:
        return finite, "the last complete one"
    if finite:
        return finite, f"the last finite one; {names} after it diverged"
    if diverged:
        return None, (f"{names} {'hold' if len(diverged) > 1 else 'holds'} weights that are not finite (NaN or inf): "
                      "its run diverged")
    return None, None


def unfinished_run(folder, use: str) -> str | None:
    """Where ``folder`` is a training run's folder without its final model (its checkpoints or record, but neither
    ``training_info.json``, which a run writes last, nor whole weights: the run was stopped before or during its
    final save), the line that says so and what to do instead, for a job that would ``use`` the model ("export",
    "evaluate"); else None."""
    folder = Path(folder).expanduser()
    if not folder.is_dir() or (folder / TRAINING_INFO_FILE).is_file() or not training_run_files(folder):
        return None
    weights = [p for pattern in WEIGHT_FILES for p in folder.glob(pattern)]
    if weights and not weights_problem(folder):
        return None
    offered, described = checkpoint_offered(folder)
    instead = (f"or {use} {offered} ({described})" if offered else
               f"no checkpoint of it can be used instead ({described})" if described else
               "no complete checkpoint is there to use instead")
    return (f"{folder} holds a training run without its final model (no {TRAINING_INFO_FILE}; the run was stopped "
            f"before or during its final save): rerun its training command to finish it, {instead}.")


def no_weights_to_load(folder, use: str) -> str | None:
    """Where ``folder`` holds an hf_cse model's config.json but none of the weight files loading reads
    (:data:`~hf_cse.run_files.WEIGHT_FILES`: removed, or its save was cut short before them), the line that says so
    and what to ``use`` ("export", "evaluate") instead (:func:`checkpoint_offered`); else None."""
    folder = Path(folder).expanduser()
    if not folder.is_dir() or any(next(folder.glob(pattern), None) for pattern in WEIGHT_FILES):
        return None
    if not str((saved_config(folder) or {}).get("model_type", "")).startswith("hf_cse"):
        return None  # another model's folder: loading it says what it lacks
    offered, described = checkpoint_offered(folder.parent if is_checkpoint_name(folder.name) else folder)
    instead = (f"{use} another checkpoint, e.g. {offered} ({described})" if offered else
               f"save the model into it again, or {use} another one{f' ({described})' if described else ''}")
    return (f"{folder} has no weight file ({WEIGHT_FILES[0]} or pytorch_model.bin; its save was cut short, or it "
            f"was removed): {instead}.")


def model_folder_problem(folder, use: str) -> str | None:
    """Why the model folder ``folder`` cannot be loaded to ``use`` it ("export", "evaluate"), known from its files
    alone: a training run without its final model (:func:`unfinished_run`), an hf_cse model without its weights
    (:func:`no_weights_to_load`); else None."""
    return unfinished_run(folder, use) or no_weights_to_load(folder, use)
