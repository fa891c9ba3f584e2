"""What :class:`hf_cse.trainer.ContrastiveTrainer` takes from its training arguments, and what it does to the model and
the arguments before transformers' ``Trainer`` sees them: the method's collator, the checks of the training set
against it and the encoder (:mod:`hf_cse.data_checks`, :mod:`hf_cse.trainer_dataset`), the columns it needs kept, the
method's own preparation (DiffCSE's generator) and activation checkpointing inside the encoder."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any

from .checks import resolved_path
from .distributed import check_not_data_parallel, check_sharding_device
from .errors import CSEError
from .padding import pad_where_positions_allow
from .precision import check_training_args, say_training_precision
from .presets import check_preset_method
from .sharding import check_method_shards, deepspeed_autocast, engine_of, fsdp_autocast
from .stream_order import DEFAULT_STREAM_SHUFFLE_BUFFER, check_shuffle_buffer
from .tokenized_rows import check_rows_tokenizer
from .tokenizer_match import check_training_tokenizer
from .trainer_dataset import (
    check_rows_for_a_batch,
    check_rows_for_model,
    check_views_tokenized,
    data_facts,
    is_stream,
    pair_rows,
    tokenized_here,
    untokenized_sentences,
    with_known_columns,
)

logger = logging.getLogger("hf_cse.trainer")


@dataclass(frozen=True)
class TrainingOptions:
    """The contrastive options of a run: :class:`~hf_cse.training_args.ContrastiveTrainingArguments`' fields, or the
    trainer's keyword arguments of the same names (which win; plain ``TrainingArguments`` have only those)."""

    senteval_data_dir: str | None = None
    eval_source: str = "local"
    cached_minibatch_size: int | None = None
    no_duplicates_in_batch: bool = True
    stream_shuffle_buffer: int | None = DEFAULT_STREAM_SHUFFLE_BUFFER

    @classmethod
    def from_args(cls, training_args, **given: Any) -> TrainingOptions:
        values = {name: given[name] if given.get(name) is not None else getattr(training_args, name, default)
                  for name, default in vars(cls()).items()}
        values["cached_minibatch_size"] = values["cached_minibatch_size"] or None  # 0 = off
        check_shuffle_buffer(values["stream_shuffle_buffer"])
        values["stream_shuffle_buffer"] = values["stream_shuffle_buffer"] or 0  # None = file order
        values["senteval_data_dir"] = resolved_path(values["senteval_data_dir"])
        from .evaluation.data import SOURCES

        if values["eval_source"] not in SOURCES:  # else a run would go on without its dev data
            raise CSEError(f"eval_source must be one of {', '.join(SOURCES)}, got {values['eval_source']!r}.")
        return cls(**values)

    def recorded(self, info: dict[str, Any], streamed: bool = False, sampling: str = "random") -> dict[str, Any]:
        """``info`` (:func:`hf_cse.export.training_info.training_info_from_run`'s) with the dev data this run scored
        on in its ``training_args``, where a command-line run records them: the trainer's keywords win over the
        arguments' fields, and plain ``TrainingArguments`` have none, so that the card and run_eval find the folder
        (resolved) a run from Python was given too. Where the run scored no STS dev data, both are added only where
        the arguments have them. ``no_duplicates_in_batch`` is recorded as applied: false for a ``streamed`` training
        set, which the no-duplicates sampler never searches, or another ``sampling`` (``train_sampling_strategy``)
        than random, which it gives way to; ``stream_shuffle_buffer`` only for a stream."""
        args = info.setdefault("training_args", {})
        scored = self.senteval_data_dir is not None or self.eval_source != TrainingOptions.eval_source
        for name in ("senteval_data_dir", "eval_source"):
            if scored or name in args:
                args[name] = getattr(self, name)
        applied = self.no_duplicates_in_batch and not streamed and sampling == "random"
        if "no_duplicates_in_batch" in args or not applied:
            args["no_duplicates_in_batch"] = applied
        if not streamed:  # no stream was shuffled (the arguments' default would say one was)
            args.pop("stream_shuffle_buffer", None)
        return info

    def evaluator(self, training_args, extra=None, pairs=None):
        """What the dev score is computed on: STS-B / SICK-R dev, the arguments' own scored pairs (``pairs``, the
        trainer's ``eval_pairs``, when given: :func:`~hf_cse.evaluation.custom_dev.given_pairs`; else read from
        ``eval_file`` / ``eval_dataset_name``) and ``extra`` evaluators; None when nothing is given."""
        from .evaluation.custom_dev import given_pairs, pairs_from_args
        from .evaluation.evaluators import training_evaluator

        pairs = given_pairs(pairs)  # the trainer's eval_pairs: STSPairs or (sentence1, sentence2, score) rows
        if pairs is None and hasattr(training_args, "eval_file"):
            pairs = pairs_from_args(training_args)
        return training_evaluator(self.senteval_data_dir, self.eval_source, pairs=pairs,
                                  pairs_name=getattr(training_args, "eval_name", "custom"), extra=extra)


def method_collator(model, tokenizer, pairs: bool):
    """The collator of the model's method: of (anchor, positive[, hard negative]) rows for pair data
    (:func:`pair_rows`), else of single sentences seen twice."""
    return (model.pair_collator if pairs else model.collator)(tokenizer, model.config)


def fill_in_special_token_ids(config, tokenizer) -> None:
    """The tokenizer's pad / bos / eos ids set on a method config that holds none: transformers' Trainer sets them as
    training starts and warns on every run ("The tokenizer has new PAD/BOS/EOS tokens ..."), as a method config
    carries none of its own (the encoder's are in its ``encoder_config``) and nothing generates text with them. An id
    the config holds is left to transformers (and its warning where the tokenizer's differs)."""
    for name in ("pad_token_id", "bos_token_id", "eos_token_id"):
        if getattr(tokenizer, name, None) is not None and getattr(config, name, None) is None:
            setattr(config, name, getattr(tokenizer, name))


def prepare_run(given: dict[str, Any], trust_remote_code: bool = False) -> dict[str, Any]:
    """Adjust ``Trainer.__init__``'s arguments ``given`` (in place; ``given["args"]``: the trainer's own copy,
    :func:`hf_cse.trainer_arguments.own_copy`) for an hf_cse method model; a model of one's own (without the method's
    ``collator``) is left as it is. Returns the training set's facts (:func:`data_facts`)."""
    from .data_checks import check_own_collator, check_training_data, warn_unread_text_columns

    model, args = given.get("model"), given["args"]
    tokenizer, train_dataset = given.get("processing_class"), given.get("train_dataset")
    if model is not None and not hasattr(getattr(model, "config", None), "objectives"):
        raise CSEError(f"ContrastiveTrainer trains hf_cse method models, whose config names their objectives; got "
                       f"{type(model).__name__}. Wrap the encoder in a method, e.g. "
                       "hf_cse.models.SimCSEModel.from_encoder(name_or_path).")
    if model is not None:
        check_preset_method(model, args)  # another paper's settings, trained without a word
    if is_stream(train_dataset):
        from .streaming import check_method_streams

        # before anything reads the stream: DiffCSE's unigram generator would read all of it, and its columns come
        # from its first rows (an empty stream has none)
        check_method_streams(type(model), streaming_asked=False)
        check_rows_for_a_batch(train_dataset, args, read_stream=True)
    if not hasattr(model, "collator"):
        return {}
    if isinstance(tokenizer, (str, os.PathLike)):
        raise CSEError(f"processing_class is a path ({os.fsdecode(tokenizer)!r:.80}), not a tokenizer: pass "
                       f"AutoTokenizer.from_pretrained({os.fsdecode(tokenizer)!r:.80}).")
    if tokenizer is not None:
        check_training_tokenizer(tokenizer, model)
        pad_where_positions_allow(tokenizer, getattr(model.config, "encoder_config", None))
        fill_in_special_token_ids(model.config, tokenizer)
    cut_at = None  # the length the trainer cut the text at; a caller's own tokens: not known here
    train_dataset = given["train_dataset"] = with_known_columns(train_dataset)
    views = pair_rows(train_dataset)  # before tokenizing: a tokenized stream's columns may not be known
    own_collator = check_own_collator(given.get("data_collator"), train_dataset, model)
    if not own_collator:
        check_views_tokenized(train_dataset)
        check_rows_for_model(model, views)
        warn_unread_text_columns(train_dataset, model, views)
    # a collator of one's own too: it gets tokenized rows
    if tokenizer is not None and untokenized_sentences(train_dataset):
        check_rows_for_a_batch(train_dataset, args)  # an empty set first: datasets maps it to no columns at all
        train_dataset, cut_at = tokenized_here(train_dataset, tokenizer, model, args, pairs=bool(views))
        given["train_dataset"] = train_dataset
    if not own_collator and tokenizer is not None:
        given["data_collator"] = method_collator(model, tokenizer, bool(views))
    elif given.get("data_collator") is None and train_dataset is not None:
        # transformers' default collator would hand the model rows it cannot read
        raise CSEError("ContrastiveTrainer needs the tokenizer to build the method's batches: pass "
                       "processing_class=tokenizer (or a data_collator of your own).")
    # untokenized data, rows past the encoder's positions, ids outside its vocabulary: one line now, not an
    # IndexError inside torch at the first step (streams: each batch, on the CPU, in the loader)
    given["data_collator"] = check_training_data(train_dataset, given.get("data_collator"), model,
                                                 pair_rows=None if own_collator else bool(views), cut_at=cut_at)
    if tokenizer is not None and cut_at is None and not own_collator:  # rows tokenized apart: by this tokenizer?
        check_rows_tokenizer(train_dataset, tokenizer, model.config.prompt)
    if args.remove_unused_columns:
        # the collators read the views' columns (positive_input_ids, ...), which the model's forward does not name
        logger.debug("ContrastiveTrainer sets remove_unused_columns=False (the collator reads every view's columns).")
        args.remove_unused_columns = False
    if getattr(args, "activation_checkpointing", False) or args.gradient_checkpointing:
        # inside the encoders; the Trainer must not redo it on the wrapper, which has no layers of its own
        model.enable_activation_checkpointing()
        args.gradient_checkpointing = False
        if hasattr(args, "activation_checkpointing"):
            args.activation_checkpointing = False
    if tokenizer is not None and train_dataset is not None:
        model.prepare_for_training(tokenizer, train_dataset, trust_remote_code)  # e.g. DiffCSE's generator
    return data_facts(train_dataset, cut_at, views or ())


#: a learning rate above which fine-tuning a pretrained encoder is said to be suspect: 200x the papers' 5e-5
LARGE_LEARNING_RATE = 1e-2


def check_training_values(args) -> None:
    """The training arguments' types, optimizer values and counts (:mod:`hf_cse.training_values`), for any
    ``TrainingArguments`` a caller hands the trainer, before transformers reads them."""
    from .best_metric import fill_in_best_metric
    from .training_args import check_optimizer_builds, check_schedule_builds
    from .training_values import check_field_types, check_optimizer_values, check_step_counts, check_step_intervals

    check_field_types(args)
    check_step_counts(args, args.world_size)
    check_optimizer_values(args)
    if args.learning_rate > LARGE_LEARNING_RATE:  # it may not diverge to NaN, and without dev data nothing tells
        logger.warning("learning_rate %g is %.0fx the papers' largest (5e-5; LoRA runs use up to about 1e-3): it can "
                       "wreck the pretrained encoder without a NaN, so nothing would say so without dev data. Check "
                       "the value (e.g. 3e-5, not 3e5).", args.learning_rate, args.learning_rate / 5e-5)
    check_step_intervals(args)  # plain TrainingArguments too (ContrastiveTrainingArguments check it when made)
    check_schedule_builds(args)  # and the schedule and optimizer transformers builds from them at the first step
    check_optimizer_builds(args)
    fill_in_best_metric(args)  # the trainer's copy: save_strategy="best" without a metric, as in theirs


def check_dev_ready(evaluators, args) -> None:
    """Before any step: the STS dev sets the trainer will score are read now (small, parsed once and kept), so a
    missing or wrong ``senteval_data_dir`` is one line here rather than after the untrained encoder's scoring or at
    the first evaluation; and ``metric_for_best_model`` names a score the evaluation logs (the Trainer looks it up
    only at the first evaluation, steps and a checkpoint later); and each evaluator is one the trainer can run.
    Evaluators of one's own log names unknown here. A metric nobody chose is replaced by the run's first dev score
    first (:func:`hf_cse.trainer_arguments.select_unchosen_metric`)."""
    from .best_metric import check_best_metric
    from .evaluation.data import load_sts
    from .evaluation.evaluators import STSDevEvaluator, check_evaluator, known_dev_scores
    from .evaluation.rowcheck import SentEvalDataError, in_training_terms
    from .trainer_arguments import select_unchosen_metric

    for evaluator in evaluators or []:
        check_evaluator(evaluator)
    for evaluator in evaluators or []:
        if isinstance(evaluator, STSDevEvaluator):
            for task in evaluator.tasks:
                try:
                    load_sts(task, evaluator.data_dir, "dev", evaluator.source)
                except SentEvalDataError as err:  # its fix names the trainer's eval_source
                    raise in_training_terms(err) from err
    scores, complete = known_dev_scores(evaluators)
    select_unchosen_metric(args, scores)
    # an evaluator's names not known here: only greater_is_better's direction is checked
    check_best_metric(args, list(scores) if complete else [])


def set_batch_copying(args) -> None:
    """How batches reach the device: pinned memory only where it speeds up copies to a GPU (torch warns without
    one), and there a non-blocking copy, which pinned memory makes safe: a blocking copy of the batch waits for the
    previous step's kernels, so the host could not queue the next step while the GPU works."""
    if args.dataloader_pin_memory and args.device.type == "cpu":
        args.dataloader_pin_memory = False
    if args.dataloader_pin_memory and args.device.type == "cuda" and hasattr(args.accelerator_config, "non_blocking"):
        args.accelerator_config.non_blocking = True


def check_built_trainer(trainer) -> None:
    """The arguments checked against the trainer transformers built from them: the precision its accelerator computes
    in (fp16 on a CPU, which it would silently run in fp32, refused; bf16 emulated on this CPU, said), its devices
    (no ``DataParallel``; sharding on a device that takes it) and the method under FSDP / DeepSpeed (where each
    computes bf16 as torch autocast over fp32 weights, said)."""
    args, state, model = trainer.args, trainer.accelerator.state, trainer.model
    check_training_args(args)
    say_training_precision(args, trainer.precision)
    check_not_data_parallel(args)
    check_sharding_device(args)
    check_method_shards(type(trainer.accelerator.unwrap_model(model)), engine_of(
        trainer.is_fsdp_enabled, state.deepspeed_plugin.zero_stage if trainer.is_deepspeed_enabled else None))
    if trainer.is_deepspeed_enabled and deepspeed_autocast(state.deepspeed_plugin.deepspeed_config, trainer.precision,
                                                           model):
        logger.info("DeepSpeed computes bf16 as torch autocast over fp32 weights, as the plain run does")
    if trainer.is_fsdp_enabled and fsdp_autocast(state.fsdp_plugin, model, trainer.precision, args.device.type):
        logger.info("FSDP computes %s as torch autocast over fp32 weights, as the plain run does", trainer.precision)
