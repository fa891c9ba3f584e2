"""The saving half of :class:`hf_cse.trainer.ContrastiveTrainer`: :meth:`RunSaving.save_run` finishes a run's
folder (metrics and state, training curves, the model, its sentence-transformers export with a model card, and the
run's record written last), refused before anything is written when the folder no longer holds this trainer's run
or its weights are not finite; :meth:`RunSaving.save_model` into a folder the caller names checks it first
(:func:`check_save_folder`)."""

from __future__ import annotations

import logging
from pathlib import Path

import torch
from transformers import Trainer

from .checkpoints import other_model, run_marks, saved_config
from .distributed import main_process_outcome
from .divergence import check_weights_held
from .errors import saving_files
from .evaluation.before_after import log_dev_change
from .output_folder import OutputFolderError, listing, matching, same_or_inside
from .precision import describe
from .run_files import RUN_EXPORT_FOLDER, WEIGHT_FILES
from .sharding import full_models_while_loading
from .trainer_claim import check_save_run_arguments
from .trainer_folder import (
    MODEL_SAVE_FILES,
    check_not_encoder_folder,
    check_not_inside_a_run,
    checkpoint_holding,
)
from .zero_loss import ZERO_LOSS_KEY

logger = logging.getLogger(__name__)


class RunSaving(Trainer):
    def save_model(self, output_dir: str | None = None, _internal_call: bool = False) -> None:
        """transformers' ``save_model``; a folder the caller names is checked first: not the encoder's, another
        model's or another run's (:func:`check_save_folder`)."""
        if output_dir is not None and not _internal_call:
            main_process_outcome(self.args, lambda: check_save_folder(output_dir, self))
        super().save_model(output_dir, _internal_call)
        if not _internal_call:
            self._claim.model_saved(self, output_dir or self.args.output_dir)

    def push_to_hub(self, commit_message: str | None = None, blocking: bool = True, token: str | None = None,
                    revision: str | None = None, private: bool | None = None, **kwargs) -> str:
        """Push the run's sentence-transformers export with its model card (the folder :meth:`save_run` wrote) to the
        arguments' ``hub_model_id`` (default: the output folder's name), as :func:`hf_cse.export.push_export` does;
        returns the repo's URL. transformers' own push would upload the whole output folder: the two-view training
        model, the Trainer's state and a generic card. ``token`` / ``revision`` / ``private``: default the arguments'
        ``hub_token`` / ``hub_revision`` / ``hub_private_repo``; the push always completes before it returns
        (``blocking``). Refused in one line before ``save_run`` (there is no export yet) and where a push cannot work
        (offline, not logged in). transformers' model card keywords (``**kwargs``) are refused: the card is hf_cse's."""
        from .export.hub import HubPushError, push_export

        if kwargs:
            raise HubPushError(f"push_to_hub takes commit_message, token, revision and private; not "
                               f"{', '.join(sorted(kwargs))} (transformers' model card's: the export's card is "
                               "hf_cse's, written by save_run).", fields=("push_to_hub",))
        folder = self.export_folder
        if folder is None:
            raise HubPushError("push_to_hub pushes the run's sentence-transformers export with its model card, which "
                               "save_run() writes: call trainer.save_run() first (or set push_to_hub=True in the "
                               "arguments, and save_run pushes it).", fields=("push_to_hub",))
        repo_id = self._hub_repo or self.args.hub_model_id or Path(self.args.output_dir).absolute().name
        token = token or self.args.hub_token

        def push() -> str:
            url = push_export(folder, repo_id, token=token, commit_message=commit_message or "End of training",
                              private=bool(self.args.hub_private_repo if private is None else private),
                              revision=revision or self.args.hub_revision)
            logger.info("pushed the sentence-transformers export %s to %s", folder, url)
            return url

        return main_process_outcome(self.args, push)

    def save_run(self, data: dict | None = None, preset: str | None = None, hub_repo: str | None = None) -> None:
        """Finish the run in ``args.output_dir``: the final training metrics and Trainer state, the training curves,
        the model with its tokenizer (the best on the dev data, see :meth:`train`), a sentence-transformers export
        with its model card, and ``training_info.json``, the run's record, written last (it marks the run as
        finished). ``data``: the training data's facts for the record and the card (``hf-cse-train`` gives them; by
        default what the trainer knows: :func:`hf_cse.trainer_dataset.data_facts`); ``preset``: the preset the run's
        settings came from, for the record and the card (default: the one :func:`hf_cse.presets.from_preset` made the
        arguments of);
        ``hub_repo``: push the export there (default: the arguments' ``push_to_hub`` repo, taken over from the
        Trainer when it was built: :func:`hf_cse.export.take_over_hub_push`). The last log line is the dev score
        before and after training and which model was saved. Refused in one line, before anything is written:
        an argument of the wrong type, a trainer that has not trained in ``args.output_dir``, a folder that holds
        another run since this trainer's ``train()`` (another trainer trained there since, or another run's record,
        model, checkpoints or curves arrived: :mod:`hf_cse.trainer_claim`), and weights that are not finite."""
        check_save_run_arguments(data, preset, hub_repo)
        with self._claim.saving(self, self._trained_in):  # refused unless the folder still holds this run
            check_weights_held(self, saving=True)  # a diverged run's weights are never saved as a model
            with saving_files():  # a refused write is one line on the command line
                self._save_run(data, preset, hub_repo or self._hub_repo)

    def _save_run(self, data: dict | None, preset: str | None, hub_repo: str | None) -> None:
        from .export import export_after_training
        from .export.training_info import training_info_from_run
        from .plots import plot_training_curves
        from .run_files import CURVES_FILE

        output_dir = Path(self.args.output_dir)
        if logger.isEnabledFor(logging.DEBUG):  # --verbose: the progress bar's last line already shows them
            self.log_metrics("train", self.train_metrics)
        self.save_metrics("train", self.train_metrics)
        self.save_state()
        model = self.accelerator.unwrap_model(self.model)
        if self.is_world_process_zero():  # before the export, which copies the curves beside the model card
            title = f"{model.config.method} + {model.config.objectives[0]['loss']}: {output_dir.name}"
            curves = plot_training_curves(self.state.log_history, output_dir / CURVES_FILE, title=title)
            if curves is None:
                logger.info("training curves: none written (nothing was logged: the run is shorter than "
                            "logging_steps=%s)", self.args.logging_steps)
            else:
                logger.info("training curves: %s", curves)
        self.save_model(str(output_dir))  # with the tokenizer (processing_class)
        logger.info("saved %s model to %s", model.config.method, output_dir)

        preset = preset or getattr(self.args, "preset_name", None) or None  # from_preset's arguments: their preset

        def export() -> None:
            info = self._options.recorded(training_info_from_run(
                self.args, data=self._data_facts if data is None else data, train_metrics=self.train_metrics,
                preset=preset, precision=describe(self.precision), dev=self.dev and self.dev.as_dict(),
                **{ZERO_LOSS_KEY: self._zero_loss.trained_nothing or None}),
                streamed=isinstance(self.train_dataset, torch.utils.data.IterableDataset),
                sampling=getattr(self.args, "train_sampling_strategy", "random"))
            # sharded (FSDP / DeepSpeed ZeRO-3): the in-memory model holds this process's shards; the export reads
            # the full model save_model just gathered and wrote
            sharded = self.is_fsdp_enabled or self.is_deepspeed_enabled
            logger.info("exporting for sentence-transformers with a model card to %s (reloaded to check it)",
                        output_dir / "sentence-transformers")
            with full_models_while_loading(getattr(self.accelerator.state, "deepspeed_plugin", None)):
                export_after_training(str(output_dir) if sharded else model, self.processing_class, self.args, info,
                                      hub_repo)

        # on the main process; the others wait for it (none leaves and tears down the group while it runs) and raise
        # its error, if any, rather than fail at a barrier it never reaches
        main_process_outcome(self.args, export)
        self.export_folder = output_dir / RUN_EXPORT_FOLDER  # what push_to_hub pushes
        # the run's last line: did training make the model better on the dev data?
        log_dev_change(logger, self.dev, self.dev_metrics_scored)


def check_save_folder(folder, trainer) -> None:
    """A folder ``trainer.save_model(folder)`` is asked to save into, other than the trainer's own output folder:
    not the encoder's (:func:`~hf_cse.trainer_folder.check_not_encoder_folder`), nor one holding another model (its
    config and weights would be replaced), another training run (its record would describe a model no longer there)
    or, without a model, files of the names the save writes (a tokenizer's, ``training_args.bin``: someone's)."""
    out = Path(folder).expanduser()
    own = Path(trainer.args.output_dir).expanduser().resolve()
    if out.resolve() == own:
        return
    config = trainer.accelerator.unwrap_model(trainer.model).config
    check_not_encoder_folder(out, getattr(config, "base_encoder", None))
    inside_own = same_or_inside(out, own)
    part = inside_own and checkpoint_holding(out.resolve(), own)
    if part:
        raise OutputFolderError(f"save_model: {folder} lies inside {part}, a checkpoint of this run: its weights "
                                "would no longer be those of its optimizer state, and its rotation would delete the "
                                "save. Choose a folder outside the checkpoints.", fields=("output_dir",))
    if not inside_own:  # another run's folder (a checkpoint of it, its results): that run's files would mix
        check_not_inside_a_run(out, "save_model: folder")
    if not out.is_dir():
        return
    theirs = other_model(out)
    run = run_marks(out)
    if run or theirs:
        what = f"a training run ({listing(run)})" if run else f"another model ({theirs} config.json)"
        raise OutputFolderError(f"save_model: {folder} holds {what}; saving there would replace its files. Choose "
                                "a new folder (or the trainer's own output_dir).", fields=("output_dir",))
    if saved_config(out) is None:  # no model there: files of the names the save writes are someone else's
        replaced = matching([p.name for p in out.iterdir()], (*MODEL_SAVE_FILES, *WEIGHT_FILES))
        if replaced:
            raise OutputFolderError(f"save_model: {folder} holds {listing(replaced)} and no model; saving there "
                                    "would replace them. Choose a new folder (or move them out).",
                                    fields=("output_dir",))
