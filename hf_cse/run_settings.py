"""The settings that define a training run, and how two sets of them are compared: a checkpoint resumed with other
values of these would silently continue a different run.

The command line records its run's settings in ``hf_cse_run.json`` (:mod:`hf_cse.cli.output_dir`) and compares them
with :func:`setting_differences`; :class:`hf_cse.trainer.ContrastiveTrainer` compares a checkpoint with the trainer
that resumes it (:func:`settings_changed_since`, refused or said by :mod:`hf_cse.trainer_folder`), from what the
checkpoint holds:

* the model's ``config.json``: every field of the method's config (method, objectives and their hyperparameters,
  pooler, projector, dropout, LoRA, Matryoshka, prompt, ...) but :data:`NOT_COMPARED_CONFIG_FIELDS`; transformers'
  own fields (``transformers_version``, ``dtype``, ``architectures``, ...) are no fields of it;
* :data:`RUN_SETTINGS_FILE`, which the trainer writes into each checkpoint before ``trainer_state.json`` marks it
  complete: :data:`TRAINING_SETTINGS`, :data:`TRAINER_SETTINGS`, the training set (:func:`data_description`) and,
  for a stream, the loader's workers (:data:`WORKERS_SETTING`);
* in a checkpoint saved before that file existed, ``trainer_state.json``'s ``train_batch_size`` (the per-device
  batch: hf_cse runs no ``DataParallel``).

Only what the checkpoint holds is compared, so a checkpoint of an earlier hf_cse still resumes. ``training_args.bin``
is never read: it is a pickle (transformers itself loads each checkpoint file with ``weights_only=True``). Not
compared: what a user changes to go on (``max_steps``, ``num_train_epochs``), to watch or save the run (logging,
saving, evaluation, ``output_dir``, ``report_to``, ``run_name``), how fast it goes (workers, but a stream's, which
order its rows: :data:`WORKERS_SETTING`; precision, CUDA graphs, :data:`SPEED_ONLY_CONFIG_FIELDS`). The number of
processes is compared from the checkpoint's RNG states, where the trainer resumes it
(:func:`hf_cse.resume_processes.processes_change`; a checkpoint named by its path goes on with another, said by
:func:`hf_cse.resume_processes.warn_other_world_size`).

This module imports nothing heavy: the command line's checks that run before torch is loaded import it.
"""

from __future__ import annotations

import hashlib
import json
import weakref
from collections.abc import Callable, Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

from .checkpoints import TRAINER_STATE_FILE
from .errors import CSEError
from .run_files import (
    DEV_AND_SELECTION,
    DEV_DATA,
    RUN_SETTINGS_FILE,
    TRAIN_FILE_CONTENT,
    TRAINING_ARGUMENTS,
    USER_MODULES,
)
from .writing import json_safe, write_json_atomic

#: ``TrainingArguments`` that define a run; ``optim`` recorded as :func:`optimizer_kind`
TRAINING_SETTINGS = ("learning_rate", "per_device_train_batch_size", "gradient_accumulation_steps", "seed",
                     "data_seed", "lr_scheduler_type", "lr_scheduler_kwargs", "warmup_steps", "weight_decay",
                     "adam_beta1", "adam_beta2", "adam_epsilon", "max_grad_norm", "optim", "optim_args",
                     "optim_target_modules", "neftune_noise_alpha", "train_sampling_strategy")
#: ``optim`` values that compute AdamW's update with AdamW's state (torch's loop, its fused kernel, the XLA and NPU
#: builds): ``optim``'s default follows the torch version (fused from torch 2.8 on), and a run resumes across them
SAME_AS_ADAMW_TORCH = ("adamw_torch_fused", "adamw_torch_xla", "adamw_torch_npu_fused")
#: the trainer's own options that define a run (:class:`~hf_cse.training_args.ContrastiveTrainingArguments` fields
#: or the trainer's keywords), as the trainer resolved them; not ``cached_minibatch_size``: the gradient cache computes
#: the whole batch's gradient (memory, not the update), so a run that ran out of memory may resume with it;
#: ``stream_shuffle_buffer`` None where the training set is no stream
TRAINER_SETTINGS = ("no_duplicates_in_batch", "stream_shuffle_buffer")
#: the loader's worker processes, a setting of a run on a stream: ``datasets`` gives each worker shards of its own
#: (their batches taken in turn) and shifts its shuffle's seed by its number, so that another count reads a shuffled
#: stream, or one of several shards (which a stream wrapping it, as the trainer's tokenized one, does not show), in
#: other batches. Not of a map-style set: its sampler orders it in the training process, and
#: :mod:`hf_cse.collator_rng` seeds each batch's draws from the batch. Checkpoints saved before lack it, and resume
#: as they did
WORKERS_SETTING = "dataloader_num_workers"
#: config fields that change how fast the encoder computes, not what (:mod:`hf_cse.models.padding_free`: the same
#: function on the real tokens only): the command line never records them either
SPEED_ONLY_CONFIG_FIELDS = ("padding_free",)
#: method config fields that do not define the run a checkpoint continues: its weights are the checkpoint's whatever
#: encoder the model was built from (``base_encoder``, ``base_encoder_local``, ``encoder_config``), attention
#: computes the same either way
#: (``encoder_attention``), ``pooler_source`` only words where the pooling came from, and
#: ``encoder_max_seq_length`` is the length the encoder is served with, not trained with
NOT_COMPARED_CONFIG_FIELDS = (*SPEED_ONLY_CONFIG_FIELDS, "base_encoder", "base_encoder_local", "encoder_config",
                              "encoder_attention", "pooler_source", "encoder_max_seq_length")
#: the name of the training set among the settings (the trainer's argument)
DATA_SETTING = "train_dataset"
#: rows of the training set whose token ids are hashed (evenly spaced, the first and the last among them)
SAMPLED_ROWS = 16


def setting_differences(recorded: dict[str, Any], current: dict[str, Any],
                        method_defaults: Callable[[str], Mapping[str, Any]] | None = None) -> list[str]:
    """Each setting whose value differs, as ``name: <then> then, <now> now`` (sorted by name; a setting on one side
    only counts as ``None`` on the other), then each training file (or dataset_name folder's file) whose content
    changed. ``method_defaults``: the config defaults of a method by name (the command line's record leaves out a
    method field whose flag was not given), compared as used where both sides are of one method."""
    # pooler_source only words where pooler_type and normalize (both compared) came from: its wording may change
    # how the run is scored and its checkpoint chosen: watching it differently continues the same run
    keys = sorted((set(recorded) | set(current)) - {TRAIN_FILE_CONTENT, "pooler_source", DEV_AND_SELECTION,
                                                     USER_MODULES, TRAINING_ARGUMENTS})
    if method_defaults is not None and recorded.get("method") and recorded.get("method") == current.get("method"):
        defaults = method_defaults(current["method"])
        recorded, current = _as_used(recorded, defaults), _as_used(current, defaults)
    recorded, current = _lora_alpha_as_used(recorded), _lora_alpha_as_used(current)
    recorded, current = _matryoshka_as_used(recorded), _matryoshka_as_used(current)
    changed = [_objectives_change(recorded[k], current[k]) if k == "objectives" and _objective_lists(
               recorded.get(k), current.get(k)) else f"{k}: {recorded.get(k)!r} then, {current.get(k)!r} now"
               for k in keys if recorded.get(k) != current.get(k)]
    changed = [c for c in changed if c]  # objectives equal once each loss's defaults are filled in
    if TRAIN_FILE_CONTENT in recorded:  # records written before hf_cse recorded it resume as they did
        then, now = recorded[TRAIN_FILE_CONTENT] or {}, current.get(TRAIN_FILE_CONTENT) or {}
        moved = _moved_file_names(recorded, current)  # another file: its path's change says it, not its content
        # a dataset_name folder's files (keyed "<folder>/<path>"): records written before they were lack them all
        folder_then = any("/" in name for name in then)
        changed += [_content_change(name, then.get(name), now.get(name)) for name in sorted(set(then) | set(now))
                    if then.get(name) != now.get(name) and name not in moved and (folder_then or "/" not in name)]
    return changed


#: the settings naming the training files whose content is recorded (:data:`TRAIN_FILE_CONTENT`, by file name)
TRAIN_FILE_SETTINGS = ("train_file", "train_files")


def _moved_file_names(recorded: dict[str, Any], current: dict[str, Any]) -> set[str]:
    """The names of the training files named on one side only (another path, though maybe the same name), and of the
    files of a ``dataset_name`` folder where another is named: their recorded content is another file's, so
    comparing it would call a file that was never touched edited."""
    def paths(values: dict[str, Any]) -> set[str]:
        named = [values.get(k) for k in TRAIN_FILE_SETTINGS]
        return {str(p) for v in named for p in (v if isinstance(v, (list, tuple)) else [v]) if p}

    moved = {Path(p).name for p in paths(recorded) ^ paths(current)}
    if recorded.get("dataset_name") != current.get("dataset_name"):
        moved |= {name for values in (recorded, current) for name in values.get(TRAIN_FILE_CONTENT) or {}
                  if "/" in name}
    return moved


def _as_used(values: dict[str, Any], defaults: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` with each method field left out (or None) at the method's default, so that typing a default out
    (``queue_size`` 160 for ESimCSE) continues the same run, and a change names the value the run used."""
    return {**values, **{k: v for k, v in defaults.items() if values.get(k) is None and v is not None}}


def _lora_alpha_as_used(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` with the LoRA alpha the adapters are built with: ``lora_alpha`` not set is ``2 * lora_r``
    (:func:`hf_cse.models.lora.lora_alpha`), so that spelling that default out continues the same run."""
    from .models.lora import lora_alpha

    return {**values, "lora_alpha": lora_alpha(values["lora_r"], values.get("lora_alpha"))} if values.get("lora_r") \
        else values


def _matryoshka_as_used(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` with the Matryoshka dimensions and weights as the config holds them (largest dimension first, the
    weights following, 1 each where not set), so that the same training typed in another order continues the run."""
    from .matryoshka_rules import check_matryoshka

    if values.get("matryoshka_dims") is None:
        return values
    try:
        dims, weights = check_matryoshka(values["matryoshka_dims"], values.get("matryoshka_weights"))
    except CSEError:  # not what a run trains with: compared as written
        return values
    return {**values, "matryoshka_dims": dims, "matryoshka_weights": weights}


def _objective_lists(*values: Any) -> bool:
    return all(isinstance(v, list) and all(isinstance(o, dict) and "loss" in o for o in v) for v in values)


def loss_defaults(loss: str) -> dict[str, Any]:
    """The hyperparameters of the registered loss ``loss`` that have a default (its constructor's), as JSON holds
    them; empty for a loss not registered in this process. Imports the losses (torch): only called where two runs'
    objectives differ as recorded."""
    import inspect

    from .losses.registry import loss_hyperparameters

    try:
        parameters = loss_hyperparameters(loss)
    except CSEError:
        return {}
    return {k: _as_saved({k: p.default})[k] for k, p in parameters.items() if p.default is not inspect.Parameter.empty}


def _objectives_change(then: list[dict], now: list[dict]) -> str | None:
    """What changed between two lists of objectives, by loss: the losses where they differ, else each weight and
    hyperparameter that changed (``infonce temperature: 0.05 then, 0.5 now``), shorter than the lists themselves,
    which a one-line refusal would cut before the difference. A hyperparameter given on one side only is compared
    with the loss's default (:func:`loss_defaults`): typing the default is the same run. None: no change."""
    losses = [o["loss"] for o in then], [o["loss"] for o in now]
    if losses[0] != losses[1]:
        return f"objectives: {' + '.join(losses[0])} then, {' + '.join(losses[1])} now"
    parts = []
    for before, after in zip(then, now, strict=True):
        fields = {"weight": (before.get("weight", 1.0), after.get("weight", 1.0))}
        defaults = loss_defaults(before["loss"])
        hyper = ({**defaults, **(before.get("hyperparameters") or {})},
                 {**defaults, **(after.get("hyperparameters") or {})})
        fields |= {k: (hyper[0].get(k), hyper[1].get(k)) for k in sorted(set(hyper[0]) | set(hyper[1]))}
        shown = lambda v: "its default" if v is None else repr(v)  # noqa: E731 - a value a record leaves out
        parts += [f"{before['loss']} {k}: {shown(a)} then, {shown(b)} now" for k, (a, b) in fields.items() if a != b]
    return "objectives: " + "; ".join(parts) if parts else None


def _content_change(name: str, then: str | None, now: str | None) -> str:
    """How a training file at the same path changed, shortly (:func:`hf_cse.files.content_fingerprint`: "N bytes,
    sha256 H"): the sizes where they differ, else the hashes; a file found on one side only, as such."""
    if then is None or now is None:
        return f"{name}: {'no file' if then is None else 'a file'} then, {'no file' if now is None else 'a file'} now"
    size_then, _, hash_then = (then or "").partition(", ")
    size_now, _, hash_now = (now or "").partition(", ")
    shown = (size_then, size_now) if size_then != size_now else (hash_then, hash_now)
    return f"{name} was edited ({shown[0]} then, {shown[1]} now)"


def in_brief(changed: list[str], width: int = 120) -> str:
    """What a one-line refusal shows of :func:`setting_differences`: whole differences, never one cut mid-value (a
    path cut short names no file): the first, then the next one while the line stays within ``width`` characters
    (at most two), then how many more there are."""
    shown = changed[:1]
    for change in changed[1:2]:
        if len("; ".join([*shown, change])) <= width:
            shown.append(change)
    left = len(changed) - len(shown)
    return "; ".join(shown) + (f"; and {left} more" if left else "")


# ------------------------------------------------------------------------------------ a trainer and its checkpoint
def data_description(dataset) -> str | None:
    """The training set as its settings show it: its rows, its longest row (cut by another ``max_seq_length``, the
    rows that were longer are shorter) and a hash of the token ids of :data:`SAMPLED_ROWS` rows (another data set, or
    another tokenizer). Read from an Arrow-backed ``datasets.Dataset`` without reading the whole set (a pyarrow
    reduction and a few rows); a ``datasets`` stream by its first rows (:func:`_stream_description`); None for data
    that cannot be read ahead (a torch data set)."""
    import datasets

    from .data_checks import table_token_extent

    if isinstance(dataset, datasets.IterableDataset):
        return _stream_description(dataset)
    if not isinstance(dataset, datasets.Dataset) or not len(dataset):
        return None
    columns, extent = table_token_extent(dataset)
    if extent is None:
        return None
    n = len(dataset)
    picked = sorted({i * (n - 1) // (SAMPLED_ROWS - 1) for i in range(SAMPLED_ROWS)})
    rows = dataset.select_columns(columns).with_format("arrow")[picked].to_pydict()
    digest = hashlib.sha256(json.dumps(rows, sort_keys=True).encode()).hexdigest()[:12]
    return f"{n} rows, the longest {extent[0]} tokens, sampled token ids {digest}"


def _stream_description(stream) -> str | None:
    """A stream's :func:`data_description` from its first :data:`SAMPLED_ROWS` rows, as it gives them before the
    trainer's shuffle (a seeded mixture or shuffle of one's own gives the same rows each time): their longest row
    and a hash of their token ids. Another corpus, tokenizer or cut length shows there unless its first rows are
    the same."""
    from itertools import islice

    import pyarrow as pa

    from .data_checks import TOKEN_COLUMNS, token_extent

    rows = [row for row in islice(stream, SAMPLED_ROWS) if isinstance(row, dict)]
    columns = [c for c in TOKEN_COLUMNS if rows and c in rows[0]]
    if not columns:
        return None
    picked = {c: [row.get(c) for row in rows] for c in columns}
    try:
        extent = token_extent(pa.Table.from_pydict(picked), columns)
    except (pa.ArrowInvalid, pa.ArrowTypeError):  # rows of other shapes: not described, as before
        return None
    if extent is None:
        return None
    digest = hashlib.sha256(json.dumps(picked, sort_keys=True).encode()).hexdigest()[:12]
    return f"a stream, its first {len(rows)} rows: the longest {extent[0]} tokens, token ids {digest}"


#: :func:`data_description` of each training set described (:func:`training_data_description`)
_DESCRIBED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def training_data_description(dataset) -> str | None:
    """:func:`data_description` of a trainer's training set, taken once: the trainer takes it when it is built,
    before any pass over a stream (the trainer sets each pass's epoch on a stream it does not shuffle itself, and a
    shuffle of the user's own then gives other first rows), and each checkpoint records that one."""
    try:
        return _DESCRIBED[dataset]
    except KeyError:
        described = _DESCRIBED[dataset] = data_description(dataset)
        return described
    except TypeError:  # not weakly referable (a list of rows): described each time
        return data_description(dataset)


def _as_saved(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` as they read back from JSON (tuples as lists, enums as their names)."""
    return json.loads(json.dumps(json_safe(values)))


def config_settings(config) -> dict[str, Any]:
    """The fields of a method ``config`` that define the run (module doc)."""
    from transformers import PretrainedConfig

    own = {f.name for f in fields(type(config))} - {f.name for f in fields(PretrainedConfig)}
    return _as_saved({name: getattr(config, name, None) for name in sorted(own - set(NOT_COMPARED_CONFIG_FIELDS))})


def run_settings(trainer) -> dict[str, Any]:
    """The settings of the run ``trainer`` trains that :data:`RUN_SETTINGS_FILE` records (the model's are in its
    ``config.json``)."""
    settings = {name: getattr(trainer.args, name, None) for name in TRAINING_SETTINGS}
    settings["optim"] = optimizer_kind(settings["optim"])
    settings.update({name: getattr(trainer, name, None) for name in TRAINER_SETTINGS})
    if trainer.stream_shuffle_buffer is not None:  # a stream: its workers order its rows (WORKERS_SETTING)
        settings[WORKERS_SETTING] = trainer.args.dataloader_num_workers
    data = training_data_description(trainer.train_dataset)
    if data is not None:
        settings[DATA_SETTING] = data
    dev = getattr(trainer, "dev_data_identity", None)  # not compared (DEV_AND_SELECTION): hf_cse.trainer_resume
    if dev is not None:
        settings[DEV_AND_SELECTION] = {DEV_DATA: dev}
    return _as_saved(settings)


def optimizer_kind(optim) -> str | None:
    """``optim`` (a name or transformers' ``OptimizerNames``) as a resumed run compares it: the AdamW builds of
    :data:`SAME_AS_ADAMW_TORCH` as ``adamw_torch``."""
    name = getattr(optim, "value", optim)
    return "adamw_torch" if name in SAME_AS_ADAMW_TORCH else name


def save_run_settings(trainer, checkpoint) -> None:
    """Write :func:`run_settings` into ``checkpoint``, being saved (the main process; the others have the same)."""
    if trainer.is_world_process_zero():
        write_json_atomic(Path(checkpoint) / RUN_SETTINGS_FILE, run_settings(trainer), sort_keys=True)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return {}
    return value if isinstance(value, dict) else {}


def saved_settings(checkpoint, config_class) -> dict[str, Any]:
    """What ``checkpoint`` holds of its run's settings (module doc); ``config_class``: the method's config class,
    which reads its ``config.json`` (its older forms included)."""
    checkpoint = Path(checkpoint)
    saved: dict[str, Any] = {}
    config = _read_json(checkpoint / "config.json")
    if config:
        try:
            saved.update(config_settings(config_class.from_dict(config)))
        except (ValueError, TypeError, KeyError):  # a config this hf_cse cannot read: loading it says why
            pass
    batch = _read_json(checkpoint / TRAINER_STATE_FILE).get("train_batch_size")
    if batch is not None:
        saved["per_device_train_batch_size"] = batch
    saved.update(_read_json(checkpoint / RUN_SETTINGS_FILE))
    return saved


def settings_changed_since(checkpoint, trainer) -> list[str]:
    """:func:`setting_differences` between the run ``checkpoint`` was saved by and the run ``trainer`` trains, of the
    settings the checkpoint holds."""
    config = trainer.accelerator.unwrap_model(trainer.model).config
    saved = saved_settings(checkpoint, type(config))
    current = {**config_settings(config), **run_settings(trainer)}
    both = set(saved) & set(current)  # a setting one side does not know is not compared
    return setting_differences({k: saved[k] for k in both}, {k: current[k] for k in both})
