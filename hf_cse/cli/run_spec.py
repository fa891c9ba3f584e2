"""One typed description of a training run (:class:`RunSpec`), built once from the parsed flags, the preset and the
``--config`` file (:mod:`hf_cse.cli.run_config`), before any data or weights are loaded.

It is the single home of the run's facts -- the method and its objectives (:attr:`RunSpec.loss`), the batch
(:attr:`TrainingSpec.global_batch`), the data (:class:`DataSpec`) and, kept apart, the switches that change how fast
the run goes but not what it computes (:class:`SpeedSpec`) -- and of what is made from them:

* :meth:`RunSpec.fingerprint`: the settings recorded in ``hf_cse_run.json`` (:mod:`hf_cse.cli.output_dir`), which a
  relaunch must match to resume the run's checkpoints. Its keys and values are those hf_cse has always recorded, so a
  run interrupted under an earlier version still resumes; ``--config`` reads it back (:mod:`hf_cse.cli.run_config`);
* :meth:`RunSpec.model_config`: the method config's fields the model is built with;
* :meth:`DataSpec.card_facts`: ``training_info.json``'s ``data``, shown by the model card;
* :attr:`DataSpec.source`: how messages name the training data.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

from ..checks import local_resolved, resolved_path
from ..data_sources import folder_content
from ..evaluation.custom_dev import EvalDataArguments
from ..files import content_fingerprint
from ..run_files import RECORD_NAMES, TRAIN_FILE_CONTENT
from ..run_settings import SPEED_ONLY_CONFIG_FIELDS, TRAINER_SETTINGS, TRAINING_SETTINGS, WORKERS_SETTING
from ..training_args import ContrastiveTrainingArguments, global_batch_size
from .arguments import DataArguments

#: data flags that change how fast the data is prepared, not what the run trains on: never in the fingerprint
SPEED_ONLY_DATA_FLAGS = ("preprocessing_num_workers",)
#: config fields of the masked-LM auxiliary objective: they define nothing without ``do_mlm`` (and records written
#: before it existed lack them), so they are fingerprinted only when it is on
MLM_FIELDS = ("do_mlm", "mlm_weight", "mlm_probability")
#: config fields added after runs began to be recorded, with the value that trains as runs did before them: recorded
#: only when set otherwise, so that a run interrupted before they existed still resumes
LATER_CONFIG_FIELDS = {"freeze_embeddings": False, "empty_queue_each_epoch": True}


#: the flags that define the data: DataArguments' fields, and the truncation length (the trainer's own option, where
#: it tokenizes text: ContrastiveTrainingArguments.max_seq_length)
_DATA_FIELDS = [*(f for f in dataclasses.fields(DataArguments) if f.name not in SPEED_ONLY_DATA_FLAGS),
                next(f for f in dataclasses.fields(ContrastiveTrainingArguments) if f.name == "max_seq_length")]
#: DataSpec's first fields are made from them (one declaration)
_DataFlags = dataclasses.make_dataclass(
    "_DataFlags", [(f.name, f.type, dataclasses.field(default=f.default)) for f in _DATA_FIELDS], frozen=True)


@dataclass(frozen=True)
class DataSpec(_DataFlags):
    """The training data: where it comes from, how it is cut, which columns are the views, how it is read.

    Its first fields are :class:`hf_cse.cli.arguments.DataArguments`' own (but the speed-only ones, in
    :class:`SpeedSpec`); the others are the streaming flags (:class:`hf_cse.cli.arguments.StreamingArguments`).
    Paths are kept as given (the card names the file, messages the path) and, resolved against the folder the run
    started in, as ``resolved_*`` (the fingerprint: the same file reached from another folder is the same run)."""

    streaming: bool = False
    train_files: tuple[str, ...] | None = None
    train_weights: tuple[float, ...] | None = None
    resolved_train_file: str | None = None
    resolved_train_files: tuple[str, ...] = ()

    @classmethod
    def from_args(cls, data_args, stream_args, max_seq_length: int) -> DataSpec:
        files = tuple(stream_args.train_files) if stream_args.train_files else None
        flags = {k: v for k, v in vars(data_args).items() if k not in SPEED_ONLY_DATA_FLAGS}
        return cls(**flags, max_seq_length=max_seq_length, streaming=bool(stream_args.streaming), train_files=files,
                   train_weights=tuple(stream_args.train_weights) if stream_args.train_weights else None,
                   resolved_train_file=resolved_path(data_args.train_file),
                   resolved_train_files=tuple(resolved_path(f) for f in files or ()))

    @property
    def pairs(self) -> bool:
        """(anchor, positive[, hard negative]) rows whose columns are the views, not one sentence per row."""
        return self.pair_column is not None

    @property
    def unit(self) -> Literal["rows", "sentences"]:
        return "rows" if self.pairs else "sentences"

    @property
    def read_as_text_stream(self) -> bool:
        """Read by :func:`hf_cse.streaming.load_training_text`: streamed, or several files mixed by weight."""
        return self.streaming or bool(self.train_files)

    @property
    def source(self) -> str:
        """The data as messages name it: the path or data set as given, and the flag that cut it."""
        source = self.train_file or self.dataset_name or " + ".join(self.train_files or ()) or "the demo corpus"
        # the setting, not the file, is what to change; as a field, run_cli shows it and the message's others as flags
        if self.max_train_samples is not None:
            source = f"{source} cut to max_train_samples {self.max_train_samples}"
        return source

    def fingerprint(self) -> dict[str, Any]:
        """The data flags that define the run (paths resolved); the streaming ones only when used (older records
        lack them); the content of the local training files and of a local ``dataset_name`` folder's
        (:data:`TRAIN_FILE_CONTENT`)."""
        flags = {f.name: getattr(self, f.name) for f in _DATA_FIELDS}
        flags["train_file"] = self.resolved_train_file
        if self.read_as_text_stream:
            flags.update(streaming=self.streaming, train_weights=self.train_weights and list(self.train_weights),
                         train_files=list(self.resolved_train_files))
        content = {Path(f).name: content_fingerprint(f) for f in (self.resolved_train_file, *self.resolved_train_files)
                   if f and Path(f).is_file()}
        if self.dataset_name:  # a local folder's files, keyed by its name and their paths in it
            content.update(folder_content(self.dataset_name, "train", self.dataset_config_name))
        if content:  # an edited or replaced file is another run's data, though its path is the same
            flags[TRAIN_FILE_CONTENT] = content
        return flags

    def card_facts(self, num_sentences: int | None = None) -> dict[str, Any]:
        """``training_info.json``'s ``data``, shown by the card: the source (file names only, nothing machine-local),
        size and truncation length; for pair / triplet data the columns that were the views (and rows, not
        sentences). ``num_sentences``: the rows left after tokenizing (None for a stream: unknown)."""
        data = {
            "source": Path(self.train_file).name if self.train_file else self.dataset_name or "hf_cse demo corpus",
            "dataset_name": self.dataset_name,
            "dataset_config_name": self.dataset_config_name,
            "num_sentences": num_sentences,
            "max_seq_length": self.max_seq_length,
            "max_train_samples": self.max_train_samples,
        }
        if self.dataset_name and Path(self.dataset_name).expanduser().exists():  # a data set saved here: no Hub id
            data.update(source=f"local folder {Path(self.dataset_name).expanduser().resolve().name}",
                        dataset_name=None)  # the card's metadata lists Hub data sets only
        if self.train_files:  # several sources mixed by weight (hf_cse.streaming)
            weights = self.train_weights or (1.0,) * len(self.train_files)
            data["source"] = " + ".join(f"{Path(f).name} (weight {w:g})" for f, w in zip(self.train_files, weights))
        if self.streaming:
            data["streamed"] = True
        if self.pairs:
            kind = "triplets" if self.negative_column else "pairs"
            data["pair_data"] = {"kind": kind, "anchor": self.text_column or "text", "positive": self.pair_column,
                                 "hard_negative": self.negative_column}
            data["num_rows"], data["num_sentences"] = data.pop("num_sentences"), None
        return {k: v for k, v in data.items() if v is not None}


@dataclass(frozen=True)
class TrainingSpec:
    """The ``TrainingArguments`` that define a run: resuming a checkpoint with other values would silently continue
    a different one. The others (logging, saving, evaluation, precision) change how the run is watched or how fast
    it goes; ``training_info.json`` records them all."""

    seed: int
    per_device_train_batch_size: int
    gradient_accumulation_steps: int
    learning_rate: float
    weight_decay: float
    num_train_epochs: float
    max_steps: int
    lr_scheduler_type: str
    warmup_steps: int | float
    world_size: int

    @classmethod
    def from_args(cls, training_args) -> TrainingSpec:
        values = {f.name: getattr(training_args, f.name, None) for f in dataclasses.fields(cls)}
        scheduler = values["lr_scheduler_type"]
        warmup = values["warmup_steps"]  # a whole count as an int however it was given (0, not 0.0 from a file)
        if isinstance(warmup, float) and warmup.is_integer() and warmup >= 1 or warmup == 0:
            warmup = int(warmup)
        return cls(**{**values, "lr_scheduler_type": getattr(scheduler, "value", scheduler),  # an enum: its name
                      "warmup_steps": warmup})

    @property
    def global_batch(self) -> int:
        """Rows in one optimizer step's batch across the processes, before gradient accumulation."""
        return global_batch_size(self.per_device_train_batch_size, self.world_size)

    def fingerprint(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


#: the arguments naming the user's own scored pairs (:class:`~hf_cse.evaluation.custom_dev.EvalDataArguments`)
EVAL_PAIRS_ARGS = tuple(f.name for f in dataclasses.fields(EvalDataArguments))
#: the arguments naming the dev data a run is scored on and how its checkpoints are saved and chosen
DEV_AND_SELECTION_ARGS = ("senteval_data_dir", "eval_source", *EVAL_PAIRS_ARGS,
                          "eval_strategy", "eval_steps", "save_strategy", "save_steps", "save_total_limit",
                          "metric_for_best_model", "greater_is_better", "load_best_model_at_end")


def dev_and_selection(training_args) -> dict[str, Any]:
    """How ``training_args`` score the run and choose its checkpoint (:data:`DEV_AND_SELECTION_ARGS` that are set;
    folders resolved, strategies by name), recorded beside the fingerprint so that ``--config <run>/hf_cse_run.json``
    runs it again whole. Not part of the fingerprint: a run relaunched with another dev schedule still resumes."""
    names = DEV_AND_SELECTION_ARGS
    if not (getattr(training_args, "eval_file", None) or getattr(training_args, "eval_dataset_name", None)):
        names = [n for n in names if n not in EVAL_PAIRS_ARGS]  # the columns of no scored pairs: nothing to record
    values = {name: getattr(training_args, name, None) for name in names}
    values = {name: getattr(value, "value", value) for name, value in values.items() if value is not None}
    for name in ("senteval_data_dir", "eval_file"):
        if name in values and Path(values[name]).exists():  # a local path; a Hub name stays as given
            values[name] = resolved_path(values[name])
    return values


def training_arguments(training_args, streamed: bool = False, precision_chosen: bool = False) -> dict[str, Any]:
    """The run's other training arguments that its checkpoints record and the Trainer compares on resume
    (:data:`~hf_cse.run_settings.TRAINING_SETTINGS` and :data:`~hf_cse.run_settings.TRAINER_SETTINGS` beyond
    :class:`TrainingSpec`'s: optimizer, clipping, data order; ``--dataloader_num_workers`` too where the run is
    ``streamed``: they order a stream's rows, :data:`~hf_cse.run_settings.WORKERS_SETTING`), by flag
    name, recorded beside the fingerprint so that ``--config <run>/hf_cse_run.json`` runs it again whole; those left
    at nothing (None, no kwargs) are left out. ``precision_chosen``: a precision was asked for (``--precision``
    other than ``auto``, or ``--bf16`` / ``--fp16``), and is recorded too (it changes the weights; ``auto``, resolved
    anew on each machine, is not)."""
    own = {f.name for f in dataclasses.fields(TrainingSpec)}
    streams = (WORKERS_SETTING,) if streamed else ()
    names = [n for n in (*TRAINING_SETTINGS, *TRAINER_SETTINGS, *streams) if n not in own]
    values = {name: getattr(training_args, name, None) for name in (*names, *(["precision"] * precision_chosen))}
    return {name: getattr(value, "value", value) for name, value in values.items() if value not in (None, {})}


@dataclass(frozen=True)
class SpeedSpec:
    """Switches that change how fast the run goes, not what it computes: never in the fingerprint, so a run relaunched
    with another value resumes. ``padding_free`` (:mod:`hf_cse.models.padding_free`: the same function on the real
    tokens only) is the one a resumed checkpoint may decide (:meth:`RunSpec.resuming`)."""

    padding_free: bool = True
    preprocessing_num_workers: int | None = None  # processes tokenizing the data


@dataclass(frozen=True)
class RunSpec:
    """A training run as the flags and the preset define it (see the module doc): the model (encoder, method and
    the config fields given, the resolved pooling and the objectives among them), the data and the run-defining
    training arguments, and what the card names the run by (preset, precision)."""

    encoder: str
    method: str
    config: Mapping[str, Any]  # the method config's fields set by flags, --config or preset (read-only), no speed one
    data: DataSpec
    training: TrainingSpec
    speed: SpeedSpec = SpeedSpec()
    preset: str | None = None
    precision: str | None = None  # resolved for this machine (hf_cse.precision.training_flags)

    def __post_init__(self):
        object.__setattr__(self, "config", MappingProxyType(copy.deepcopy(dict(self.config))))

    @classmethod
    def from_args(cls, *, encoder: str, method: str, config_kwargs: Mapping[str, Any], data_args, stream_args,
                  training_args, preset: str | None = None, precision: str | None = None) -> RunSpec:
        """The spec of a run from what ``train_from_args`` holds after its checks: ``config_kwargs`` are the model's
        config fields (objectives and resolved pooling included), the ``*_args`` the parsed flag dataclasses."""
        # never in the fingerprint, so a run interrupted before they existed, or relaunched with another value, resumes
        config = {k: v for k, v in config_kwargs.items() if k not in SPEED_ONLY_CONFIG_FIELDS}
        speed = SpeedSpec(padding_free=config_kwargs.get("padding_free", True),
                          preprocessing_num_workers=data_args.preprocessing_num_workers)
        return cls(encoder=encoder, method=method, config=config,
                   data=DataSpec.from_args(data_args, stream_args, training_args.max_seq_length),
                   training=TrainingSpec.from_args(training_args), speed=speed, preset=preset, precision=precision)

    def resuming(self, *, padding_free: bool) -> RunSpec:
        """This run continuing a checkpoint that trained with ``padding_free`` (the fingerprint is unchanged)."""
        return dataclasses.replace(self, speed=dataclasses.replace(self.speed, padding_free=padding_free))

    @property
    def loss(self) -> str:
        """The main objective's loss (the ``--loss`` given, else the method's)."""
        return self.config["objectives"][0]["loss"]

    def model_config(self) -> dict[str, Any]:
        """The method config's fields the model is built with: the run's and the speed switch of the encoder."""
        return {**copy.deepcopy(dict(self.config)), "padding_free": self.speed.padding_free}

    @property
    def objectives(self) -> list[dict[str, Any]]:
        return copy.deepcopy(self.config.get("objectives") or [])

    @property
    def generator(self) -> str | None:
        """DiffCSE's generator as given (None: the method's default)."""
        return self.config.get(RECORD_NAMES["generator"])

    def fingerprint(self) -> dict[str, Any]:
        """The run's settings as ``hf_cse_run.json`` records them: the encoder, method, config fields, generator (a
        local folder resolved, as the data paths: a ``--config`` of the record reaches it from any folder), the
        data flags and the run-defining training arguments; the masked-LM settings only with ``do_mlm``, the
        :data:`LATER_CONFIG_FIELDS` only when not at their earlier behaviour; no speed-only field."""
        generator_field = RECORD_NAMES["generator"]  # recorded as "generator", resolved
        config = {k: v for k, v in copy.deepcopy(dict(self.config)).items() if k != generator_field}
        settings = {"encoder": local_resolved(self.encoder), "method": self.method, **config,
                    "generator": local_resolved(self.generator), **self.data.fingerprint(),
                    **self.training.fingerprint()}
        if not self.config.get("do_mlm"):
            settings = {k: v for k, v in settings.items() if k not in MLM_FIELDS}
        return {k: v for k, v in settings.items() if k not in LATER_CONFIG_FIELDS or v != LATER_CONFIG_FIELDS[k]}


def method_config_defaults(method: str) -> dict[str, Any]:
    """The config defaults of ``method``'s flags, those a run uses where its flag is not given (the record leaves it
    out): :func:`hf_cse.run_settings.setting_differences` compares them as used."""
    from ..models import get_method
    from .arguments import config_fields

    return {name: defaults[method] for name, (_, _, defaults) in
            config_fields({method: get_method(method).config_class}).items()}
