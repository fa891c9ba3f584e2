"""The training script's last step: record the run, export the model for sentence-transformers, push it if asked."""

from __future__ import annotations

import logging
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..run_files import CURVES_FILE, RUN_EXPORT_FOLDER
from ..writing import write_json_atomic
from .errors import ExportError
from .folders import point_run_folder_at_export
from .hub import push_export
from .sentence_transformers import to_sentence_transformer
from .training_info import TRAINING_INFO_FILE, training_info_from_run

logger = logging.getLogger(__name__)


def export_after_training(model, tokenizer, training_args, training_info: Mapping[str, Any] | None = None,
                          hub_repo: str | None = None) -> Path | None:
    """Export to ``<output_dir>/sentence-transformers`` with a model card showing ``training_info`` (the run's record:
    :func:`hf_cse.export.training_info.training_info_from_run` completed by
    :meth:`hf_cse.trainer_options.TrainingOptions.recorded`, as :meth:`hf_cse.trainer_saving.RunSaving.save_run`
    builds it; default: the training arguments alone), record it as ``training_info.json`` beside the checkpoint
    (last: it marks the run as finished) and push the export when ``hub_repo`` is set (from
    :func:`hf_cse.export.hub.take_over_hub_push`).

    A model whose pooler cannot be exported only logs a warning (the checkpoint is saved) unless a push was asked;
    an export already in the folder is then removed, so it cannot pass for this run's. ``training_info.json`` is
    replaced atomically (written beside, then renamed), never left half-written.
    """
    info = dict(training_info) if training_info is not None else training_info_from_run(training_args)
    output_dir = Path(training_args.output_dir)
    curves = output_dir / CURVES_FILE  # written by run_unsup.py; the card links the copy beside it
    if curves.is_file():
        info["training_curves"] = CURVES_FILE
    export_dir = output_dir / RUN_EXPORT_FOLDER
    try:
        out = to_sentence_transformer(model, export_dir, tokenizer=tokenizer,
                                      overwrite=True, training_info=info, repo_id=hub_repo)
    except ExportError as err:
        if hub_repo:
            raise
        if export_dir.is_dir():  # an earlier run's export must not sit beside this run's model
            shutil.rmtree(export_dir)
            logger.warning("removed the earlier export %s: it does not hold this run's model", export_dir)
        logger.warning("no sentence-transformers export: %s", err)
        out = None
    if out is not None:
        logger.debug("sentence-transformers export with model card: %s", out)  # the export's own line said it
        if curves.is_file():
            shutil.copy2(curves, out / CURVES_FILE)
    point_run_folder_at_export(output_dir, out)
    # written last: it marks the run as finished (hf_cse.cli.output_dir), so a kill before it is a run to finish
    write_json_atomic(output_dir / TRAINING_INFO_FILE, info)
    if out is not None and hub_repo:
        url = push_export(out, hub_repo, token=training_args.hub_token, private=bool(training_args.hub_private_repo),
                          revision=getattr(training_args, "hub_revision", None))
        logger.info("pushed the sentence-transformers export to %s", url)
    return out
