"""Every private name of transformers, sentence-transformers, datasets and mteb that hf_cse uses, in one place.

A private method or attribute can be renamed or change its signature in any release; a renamed method that hf_cse
*overrides* would simply stop being called (e.g. the sampler's ``set_epoch`` on resume). So the library reaches them
only through this module, :data:`SEAMS` lists each one with the parameters hf_cse passes or receives, and
``tests/test_seams.py`` checks them against the installed versions: an upgrade that moves one fails that test
instead of changing behaviour silently. ``setup.cfg`` bounds these packages below their next major version.

Where a public hook exists it is used instead (``PretrainedConfig.name_or_path``, ``AttentionInterface.valid_keys``,
``Trainer.get_train_dataloader``); transformers 5.24 has no public hook for a batch sampler, for loading a checkpoint
outside ``train``, for the inputs' device placement, for the start of an epoch, for a checkpoint's RNG states, for
the running loss of the logging window or for gradient clipping.

The few private names of torch and of the standard library's argparse used elsewhere (a module's ``_parameters``,
a parser's ``_actions``) stay where they are used: each reads a stable attribute, and ``tests/test_seams.py``'s
``OUTSIDE_SEAMS`` lists every one with why, so a new one fails that test.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import torch

#: (owner, private name, the parameters hf_cse relies on, in order; None for an attribute) -- checked by
#: tests/test_seams.py. The owners are named as import paths so that importing this module loads neither package.
SEAMS: tuple[tuple[str, str, tuple[str, ...] | None], ...] = (
    ("transformers.Trainer", "_load_from_checkpoint", ("self", "resume_from_checkpoint", "model")),
    ("transformers.Trainer", "_load_best_model", ("self",)),
    ("transformers.Trainer", "_prepare_inputs", ("self", "inputs")),
    ("transformers.Trainer", "_remove_unused_columns", ("self", "dataset", "description")),
    ("transformers.Trainer", "_get_collator_with_removed_columns", ("self", "data_collator", "description")),
    ("transformers.Trainer", "_run_epoch", ("self", "model", "epoch")),
    ("transformers.Trainer", "_save_rng_state", ("self", "output_dir")),
    ("transformers.Trainer", "_save_checkpoint", ("self", "model", "trial")),
    ("transformers.Trainer", "_clip_grad_norm", ("self", "model")),
    ("transformers.Trainer", "_train_batch_size", None),  # an instance attribute, set in Trainer.__init__
    # instance attributes, set in Trainer._inner_training_loop: the logging window's loss sum and its first step
    ("transformers.Trainer", "_tr_loss", None),
    ("transformers.Trainer", "_globalstep_last_logged", None),
    ("transformers.Trainer", "_total_loss_scalar", None),
    ("transformers.PretrainedConfig", "_attn_implementation", None),  # a property with a setter
    ("transformers.PreTrainedModel", "_tied_weights_keys", None),  # a class attribute
    ("transformers.PreTrainedModel", "_no_split_modules", None),  # a class attribute, the children's after post_init
    ("transformers.PreTrainedModel", "_init_weights", ("self", "module")),
    ("transformers.PreTrainedModel", "_supports_sdpa", None),  # class attributes
    ("transformers.PreTrainedModel", "_keep_in_fp32_modules_strict", None),
    # an instance attribute, set in __init__: a fast tokenizer's backend (public read-only as backend_tokenizer)
    ("transformers.PreTrainedTokenizerFast", "_tokenizer", None),
    # an instance attribute, set in __init__: the named special tokens (pad_token...) that __setattr__ writes into
    ("transformers.PreTrainedTokenizerBase", "_special_tokens_map", None),
    ("sentence_transformers.SentenceTransformerModelCardData", "_get_snippet_output_dimensionality", ("self",)),
    ("datasets.IterableDataset", "_resolve_features", ("self",)),
    ("mteb.results.task_result", "_read_run_settings_from_file", ("path",)),
    ("mteb.results.task_result", "_write_and_merge_keyed_json", ("path", "entries")),
)


# ------------------------------------------------------------------------------- transformers' Trainer
def load_checkpoint(trainer, checkpoint: str) -> None:
    """Load a checkpoint's weights into the trainer's model the way ``train(resume_from_checkpoint=...)`` does (peft
    adapters, sharded states), without training."""
    trainer._load_from_checkpoint(checkpoint)


def load_best_model(trainer) -> None:
    """Load ``state.best_model_checkpoint`` as ``load_best_model_at_end`` does at the end of ``train``."""
    trainer._load_best_model()


def prepare_inputs(trainer, inputs: dict[str, Any]) -> dict[str, Any]:
    """The batch on the trainer's device, as ``Trainer.training_step`` prepares it."""
    return trainer._prepare_inputs(inputs)


def remove_unused_columns(trainer, dataset, description: str):
    """The data set without the columns the model's ``forward`` does not name, as the Trainer's own loaders make it."""
    return trainer._remove_unused_columns(dataset, description=description)


def collator_with_removed_columns(trainer, collator, description: str):
    """The collator, handed each row without the columns the model's ``forward`` does not name, as the Trainer wraps
    it for a data set it cannot remove columns from (an iterable one); the collator itself where columns are kept."""
    return trainer._get_collator_with_removed_columns(collator, description=description)


def train_batch_size(trainer) -> int:
    """The per-process batch the trainer's loader yields (``auto_find_batch_size`` may have lowered it)."""
    return trainer._train_batch_size


def logging_window(trainer) -> tuple[torch.Tensor, int]:
    """The training loss summed on the device since the last logging step (``_tr_loss``, divided by the steps only
    when it is logged) and that step (``_globalstep_last_logged``), as the training loop keeps them."""
    return trainer._tr_loss, trainer._globalstep_last_logged


def continue_logging_window(trainer, loss_sum: torch.Tensor, last_logged_step: int) -> None:
    """Go on with a logging window begun before a checkpoint (after the loop started its own, before the first step):
    the loss summed since ``last_logged_step`` is put back in place (the loop hands that tensor to its logging); the
    mean loss of this ``train`` call (``train_loss``, from ``_total_loss_scalar``) still counts its own steps only
    (the trainer then makes it the whole run's: :mod:`hf_cse.trainer_resume`)."""
    trainer._tr_loss.copy_(loss_sum)
    trainer._globalstep_last_logged = last_logged_step
    trainer._total_loss_scalar -= float(loss_sum)


class EpochStartHook:
    """A ``Trainer`` mixin that calls ``self.on_epoch_start(epoch)`` before each epoch's batches are drawn, on a fresh
    run and on resume alike (``TrainerCallback.on_epoch_begin`` runs before the loop has the epoch's loader, and
    ``Trainer._run_epoch`` is the only place that sees every epoch, the resumed one included)."""

    def on_epoch_start(self, epoch: int) -> None:
        """Nothing by default."""

    def _run_epoch(self, model, epoch, *args, **kwargs):
        self.on_epoch_start(epoch)
        return super()._run_epoch(model, epoch, *args, **kwargs)


class RngStateSaveHook:
    """A ``Trainer`` mixin that calls ``self.on_rng_state_saved(folder)`` right after a checkpoint's RNG states are
    written, while the generators still hold them, and not when they are not (``save_only_model``). It runs inside
    ``Trainer._save_checkpoint``, before ``trainer_state.json`` marks the checkpoint complete;
    ``TrainerCallback.on_save`` comes after that file."""

    def on_rng_state_saved(self, folder: str) -> None:
        """Nothing by default."""

    def _save_rng_state(self, output_dir):
        super()._save_rng_state(output_dir)
        self.on_rng_state_saved(output_dir)


class CheckpointSaveHook:
    """A ``Trainer`` mixin under which an error of a checkpoint's save (``Trainer._save_checkpoint``: its folder, the
    model, optimizer, RNG and trainer states, the rotation of older ones) is marked as a save's
    (:func:`hf_cse.errors.saving_files`): the command line says a refused write in one line, with the checkpoint
    kept."""

    def _save_checkpoint(self, model, trial, *args, **kwargs):
        from .errors import saving_files

        with saving_files():
            return super()._save_checkpoint(model, trial, *args, **kwargs)


# ------------------------------------------------------------------------------- transformers' attention
def attention_implementation(config) -> str | None:
    """The attention a transformers config runs (``config._attn_implementation``; None without a config)."""
    return getattr(config, "_attn_implementation", None) if config is not None else None


def set_attention_implementation(config, name: str) -> None:
    """Route a loaded encoder's attention through the registered function ``name`` without reloading the model
    (``PreTrainedModel.set_attn_implementation`` checks the name against the model class's own kinds)."""
    config._attn_implementation = name


# ------------------------------------------------------------------------------- transformers' weight loading
def tied_weights_keys(model) -> dict[str, str] | None:
    """The parameters a transformers model ties to others (``{target: source}``, transformers 5), or None."""
    return getattr(model, "_tied_weights_keys", None)


def no_split_modules(model) -> set[str]:
    """The module classes a transformers model must keep whole on one device (``_no_split_modules``; accelerate's
    FSDP shard units), its children's collected by ``post_init``."""
    return set(getattr(model, "_no_split_modules", None) or ())


def set_no_split_modules(model, units: list[str]) -> None:
    """Set the module classes accelerate's FSDP shards by (``_no_split_modules``; :func:`no_split_modules`)."""
    model._no_split_modules = units


class PreTrainedModelHooks:
    """A mixin before ``PreTrainedModel`` in ``CSEPreTrainedModel``'s bases: the private class attributes and the
    weight-initialisation method transformers reads, made from the model's own declarations (``fp32_modules``,
    ``init_new_module``)."""

    _supports_sdpa = True  # the wrapped encoders may run SDPA attention
    _no_split_modules: list[str] = []  # the encoders' own, after post_init (set_no_split_modules)

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "fp32_modules" in cls.__dict__:  # kept fp32 whatever dtype the model loads in, also when reloaded
            cls._keep_in_fp32_modules_strict = list(cls.fp32_modules)

    def _init_weights(self, module: torch.nn.Module) -> None:  # post_init, and weights missing from a checkpoint
        self.init_new_module(module)


def mark_initialized(module: torch.nn.Module) -> None:
    """Flag a module and its own parameters as initialised, so that transformers' ``post_init`` / loading does not
    redraw them (``_is_hf_initialized``)."""
    module._is_hf_initialized = True
    for param in module.parameters(recurse=False):
        param._is_hf_initialized = True


def with_own_backend(tokenizer) -> None:
    """Give a copied fast tokenizer a backend of its own (``_tokenizer``): padding and truncation are set on the
    backend at each call, so a shared one would carry the copy's settings back to the original; and a copied
    tokenizer its own named special tokens (``_special_tokens_map``), where setting one (``pad_token``) writes."""
    if hasattr(tokenizer, "_tokenizer"):
        tokenizer._tokenizer = copy.deepcopy(tokenizer._tokenizer)
    special = tokenizer.__dict__.get("_special_tokens_map")
    if isinstance(special, dict):  # setting the copy's pad_token writes into it: else into the original's too
        tokenizer._special_tokens_map = dict(special)


# ------------------------------------------------------------------------------- sentence-transformers
def with_snippet_dimension(card_data_class: type) -> type:
    """A subclass of sentence-transformers' model card data whose usage snippet states ``embedding_dimension`` (a
    field of the subclass) while no model is loaded (``_get_snippet_output_dimensionality`` asks the model)."""

    class CardDataWithDimension(card_data_class):
        def _get_snippet_output_dimensionality(self) -> int | str:
            if self.model is None:
                return self.embedding_dimension
            return super()._get_snippet_output_dimensionality()

    CardDataWithDimension.__name__ = card_data_class.__name__
    return CardDataWithDimension


class GradClipHook:
    """A ``Trainer`` mixin through which ``self.clipped_in_graph()`` can take over the training loop's gradient
    clipping (``Trainer._clip_grad_norm``, called before every optimizer step of a run that clips): where it returns
    the norm tensor, the clipping is left to the optimizer's captured step, which writes that tensor."""

    def clipped_in_graph(self) -> torch.Tensor | None:
        """None by default: the Trainer clips."""
        return None

    def _clip_grad_norm(self, model):
        norm = self.clipped_in_graph()
        return super()._clip_grad_norm(model) if norm is None else norm


# ------------------------------------------------------------------------------- datasets
def with_resolved_features(stream):
    """A ``datasets.IterableDataset`` whose columns were not known (made from a generator, or mapped without
    ``features``) with its features read from its first rows, by datasets' own inference (no public hook in 5.2)."""
    return stream._resolve_features()


# ------------------------------------------------------------------------------- mteb
def merge_mteb_run_settings(target, source) -> None:
    """Merge the run settings of mteb's ``source`` (a ``run_settings.jsonl``) into ``target`` as mteb's
    ``ResultCache.save_to_cache`` merges a task's into the file there (each task, split and subset once, with the
    latest settings); mteb 2.26 has no public hook for it. An mteb without that merge gets the lines appended (the
    later line of a task, split and subset is the one that counts), as this runs after the earlier results went."""
    try:
        from mteb.results.task_result import _read_run_settings_from_file, _write_and_merge_keyed_json
    except ImportError:
        with Path(target).open("a", encoding="utf-8") as out:
            out.write(Path(source).read_text(encoding="utf-8"))
        return
    _write_and_merge_keyed_json(Path(target), _read_run_settings_from_file(Path(source)))
