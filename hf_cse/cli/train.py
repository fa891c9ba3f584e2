"""Train a sentence encoder with an unsupervised contrastive method: ``hf-cse-train``, ``python -m hf_cse train``
and ``run_unsup.py`` all run :func:`main`.

    hf-cse-train --loss gs_infonce                                        # embedded defaults
    accelerate launch -m hf_cse train --preset simcse_bert --model_name_or_path bert-base-uncased \
        --train_file wiki1m_for_simcse.txt --senteval_data_dir SentEval/data/downstream --output_dir out/simcse

With no flags it trains the packaged all-MiniLM-L6-v2 on the small demo corpus shipped in the package.
"""

from __future__ import annotations

import dataclasses
import logging
import sys
from functools import partial
from pathlib import Path

from transformers import HfArgumentParser, TrainingArguments, set_seed

from hf_cse.cached import check_cached_without_cuda_graphs
from hf_cse.checks import InputError
from hf_cse.cli import run_cli, say_when_stopped
from hf_cse.cli.arguments import (
    DataArguments,
    StreamingArguments,
    check_loss_flag_names,
    check_method_flag_names,
    config_kwargs_from,
    dcl_arguments_class,
    loss_arguments_class,
    main_loss,
    method_arguments_class,
    method_only_flags,
    model_arguments_class,
    objectives_from_flags,
)
from hf_cse.cli.console import ConsoleArguments, setup_console
from hf_cse.cli.flags import in_flag_terms
from hf_cse.cli.flags_in_use import ChosenSettings, check_training_settings
from hf_cse.cli.help import TRAIN_COMMON, UnsetDefaultsFormatter, add_short_help, train_layout
from hf_cse.cli.older_runs import record_in_objectives_form, trained_padding_free
from hf_cse.cli.output_dir import other_settings_refusal, prepare_output_dir
from hf_cse.cli.parsing import (
    PARSER_OPTIONS,
    bare_optional_booleans,
    one_line_errors,
    refuse_empty_paths,
    refuse_unknown_flags,
    typed_flags,
)
from hf_cse.cli.preflight import (
    check_dropout_views,
    check_eval_data,
    check_max_seq_length,
    check_max_train_samples,
    check_objectives,
    check_pair_training,
    check_resume_fits,
    check_training_arguments,
    default_best_metric,
    encoder_config,
    load_tokenizer,
    resume_from_last_checkpoint,
)
from hf_cse.cli.presets import drop_unused_preset_values, unknown_preset
from hf_cse.cli.run_config import check_settings, drop_what_typed_flags_replace, read_run_config
from hf_cse.cli.run_record import RecordWhenSaved
from hf_cse.cli.run_spec import RunSpec, dev_and_selection, method_config_defaults, training_arguments
from hf_cse.cli.train_facts import check_hub_settings, check_trainer_decides
from hf_cse.cli.user_modules import import_user_modules, recorded_modules, requested_modules, typed_loss
from hf_cse.cuda_graphs import decide_for_run
from hf_cse.data import (
    DEMO_CORPUS,
    check_enough_rows,
    load_pair_dataset,
    load_train_dataset,
    tokenize_dataset,
    tokenize_pair_dataset,
)
from hf_cse.distributed import main_process_first
from hf_cse.encoders import default_encoder
from hf_cse.errors import CSEError, same_on_every_process
from hf_cse.evaluation.custom_dev import pairs_from_args
from hf_cse.export import take_over_hub_push
from hf_cse.export.sources import check_pushable, test_pooler_of
from hf_cse.folder_lock import releases_folder_locks
from hf_cse.losses import get_loss_class
from hf_cse.models import get_method
from hf_cse.models.lora import describe_lora
from hf_cse.models.padding_free import describe_padding_free
from hf_cse.models.pooling import describe_pooling, resolve_pooling
from hf_cse.out_of_memory import out_of_memory_as_refusal
from hf_cse.presets import PRESETS, REPLACED_OWN
from hf_cse.run_files import DEV_AND_SELECTION, TRAINING_ARGUMENTS
from hf_cse.sampler import check_distinct_texts, order_seed
from hf_cse.sharding import check_method_shards, launched_engine
from hf_cse.streaming import (
    check_settings_for_data,
    check_streaming_arguments,
    load_pair_stream,
    load_training_text,
    tokenize_stream,
)
from hf_cse.tokenizer_match import check_room_for_text
from hf_cse.trainer import ContrastiveTrainer
from hf_cse.trainer_folder import OtherRunsCheckpointError
from hf_cse.training_args import ContrastiveTrainingArguments
from hf_cse.training_values import check_given_intervals, unapplied_intervals

logger = logging.getLogger("run_unsup")

# Defaults of this script where they differ from ContrastiveTrainingArguments' (a preset or a flag overrides them).
SCRIPT_DEFAULTS = {"output_dir": None, "report_to": "none", "disable_tqdm": False}


def argument_parser() -> HfArgumentParser:
    """The parser of every flag of the script, with its own defaults (before any preset or --config file)."""
    model, method, loss, dcl = (model_arguments_class(), method_arguments_class(), loss_arguments_class(),
                                dcl_arguments_class())
    others = (model, DataArguments, method, dcl, StreamingArguments, ContrastiveTrainingArguments,
              ConsoleArguments)
    check_method_flag_names(*others[1:])  # a method or loss of the caller's own may take a name a flag has
    check_loss_flag_names(*others)
    parser = bare_optional_booleans(HfArgumentParser((*others[:3], loss, *others[3:]),
                                                     formatter_class=UnsetDefaultsFormatter, **PARSER_OPTIONS))
    parser.set_defaults(**SCRIPT_DEFAULTS)
    # --help: hf_cse's groups of flags and the Trainer's most used ones; --help_all: every flag (hf_cse.cli.help)
    trainer = [f.name for f in dataclasses.fields(TrainingArguments) if f.init]  # the flags HfArgumentParser makes
    data = _names(DataArguments, StreamingArguments)
    data.insert(data.index("max_train_samples"), "max_seq_length")  # the trainer's field, where it cuts the data
    groups = [("model and method", [n for n in _names(model, method) if n != "loss"]),
              ("data", data), ("loss", ["loss", *_names(loss, dcl)]),
              ("training and evaluation (hf_cse)",
               [n for n in _names(ContrastiveTrainingArguments, ConsoleArguments)
                if n not in [*trainer, *data, *TRAIN_COMMON]])]
    return one_line_errors(add_short_help(parser, train_layout(groups, trainer), help_all=True))


def _names(*classes: type) -> list[str]:
    return [f.name for cls in classes for f in dataclasses.fields(cls)]


def parse_args(argv: list[str]):
    """The argument dataclasses, and the set of settings the user chose: the flags typed on the command line and the
    ``--config`` file's values other than the script's defaults (a run's record holds every setting; a preset's values
    are only defaults). The file's values and the preset's are defaults, the file's over the preset's, so a typed flag
    wins over both. The training arguments resolve --precision with the Trainer's --bf16 / --fp16 for this machine."""
    import_user_modules(requested_modules(argv))  # their losses' and methods' flags are in the parser
    loss = typed_loss(argv)
    if loss is not None:  # registered? before its hyperparameters' flags are called unknown
        get_loss_class(loss)
    parser = argument_parser()
    refuse_empty_paths(parser, argv)  # e.g. --output_dir "$UNSET": never the current folder
    known = parser.parse_known_args(argv)[0]
    from_file = read_run_config(known.config, parser) if known.config is not None else {}
    chosen_in_file = {name for name, value in from_file.items() if value != parser.get_default(name)}
    preset = known.preset if known.preset is not None else from_file.get("preset")
    if preset is not None and preset not in PRESETS:
        parser.error(unknown_preset(preset))
    preset_settings = check_settings(PRESETS[preset], parser, f"--preset {preset}") if preset is not None else {}
    parser.set_defaults(**{**preset_settings, **from_file})  # the file over the preset
    typed = typed_flags(parser, argv)
    dropped, why = drop_what_typed_flags_replace(parser, argv, typed, from_file, known.config, preset_settings)
    chosen = ChosenSettings(typed, chosen_in_file - dropped, known.config, why or None)
    # a preset's or a record's step interval whose strategy is turned off: left out, not refused as a contradiction
    # (the training arguments refuse an interval given with its strategy 'no', training_values.check_step_intervals)
    unapplied = unapplied_intervals(vars(parser.parse_known_args(argv)[0]), typed)
    defaults = {f.name: f.default for f in dataclasses.fields(ContrastiveTrainingArguments)}
    parser.set_defaults(**{name: defaults[name] for name in unapplied})
    chosen -= set(unapplied)
    if "output_dir" not in chosen:
        known = parser.parse_known_args(argv)[0]
        parser.set_defaults(output_dir=f"outputs/{known.method}-{main_loss(known.method, known.loss)}")
    refuse_unknown_flags(parser, argv)  # a typo gets the closest flag, not a list of unused arguments
    try:
        parsed = parser.parse_args_into_dataclasses(args=argv)
    except ValueError as err:  # the dataclasses' __post_init__ checks (TrainingArguments' own included)
        set_by = {k for k, v in {**(PRESETS.get(preset) or {}), **from_file}.items() if v} - typed
        if "load_best_model_at_end" in set_by and "load_best_model_at_end" in str(err):
            where = f"--preset {preset}" if "load_best_model_at_end" not in from_file else f"--config {known.config}"
            message = in_flag_terms(str(err), getattr(err, "fields", ()))  # before a flag is added: then left as is
            raise InputError(f"{message} ({where} sets --load_best_model_at_end true; --load_best_model_at_end "
                             "false goes without)") from None
        if isinstance(err, CSEError):
            raise
        raise InputError(str(err)) from None
    # a typed interval at its field's default (--save_steps 500), which the arguments' own check takes for none given
    training_args = next(a for a in parsed if isinstance(a, ContrastiveTrainingArguments))
    check_given_intervals(training_args, typed)
    check_trainer_decides(chosen, vars(training_args))
    check_hub_settings(chosen, vars(training_args))
    return (*parsed, chosen)


def main(argv: list[str] | None = None, prog: str = "hf-cse-train") -> int:
    """``hf-cse-train`` / ``python -m hf_cse train`` / ``run_unsup.py``: :func:`train_from_args` with one line on
    stderr per foreseeable failure and its exit code (:func:`hf_cse.cli.run_cli`)."""
    return run_cli(lambda: train_from_args(argv), prog)


@releases_folder_locks  # the lock on --output_dir (taken in step 3) lasts as long as the run
def train_from_args(argv: list[str] | None = None) -> None:
    # steps 1-4: every process of a launch checks the same flags, files and folder, and refuses alike (one line)
    with same_on_every_process():
        trainer, resume_from, max_seq_length, finish = _prepared_run(argv)
    say_when_stopped(partial(kept_when_stopped, trainer.args))

    # 5. Train (the trainer scores the dev data, if any, before the first step and after the last, and keeps the
    #    better of the trained and the untrained encoder).
    # A checkpoint the folder chose (not named by --resume_from_checkpoint) goes to the Trainer as True: it compares
    # it with all the settings its checkpoints record and refuses other ones, where a named one would go on.
    chosen_by_folder = resume_from and not trainer.args.resume_from_checkpoint
    with out_of_memory_as_refusal(trainer, max_seq_length):  # one line naming the batch, length and fixes
        try:
            trainer.train(resume_from_checkpoint=True if chosen_by_folder else resume_from)
        except OtherRunsCheckpointError as refused:  # in this command's terms, as the record's comparison says it
            raise other_settings_refusal(Path(trainer.args.output_dir), refused.changed, refused.checkpoint,
                                         refused.blocked) from None

    # 6. Save the model, its tokenizer, the sentence-transformers export + card and training_info.json (pushed with
    #    --push_to_hub); the last line is the dev score before and after training.
    trainer.save_run(**finish)
    for record in (c for c in trainer.callback_handler.callbacks if isinstance(c, RecordWhenSaved)):
        record.write(trainer.is_world_process_zero())  # a run finished as it is wrote none (hf_cse.cli.run_record)


def kept_when_stopped(training_args) -> str:
    """What a stopped run leaves to resume from: its last complete checkpoint, or none (and why)."""
    from hf_cse.checkpoints import holds_model_only, last_complete_checkpoint

    out = Path(training_args.output_dir)
    last = last_complete_checkpoint(out) if out.is_dir() else None
    if last is not None and holds_model_only(last):
        return f"{last} holds the model only (--save_only_model): no run resumes from it."
    if last is not None:  # a checkpoint named to go on from is refused beside it (trainer_folder)
        without = " without --resume_from_checkpoint" if training_args.resume_from_checkpoint else ""
        return f"{last} is kept: the same command{without} resumes from it."
    strategy = getattr(training_args.save_strategy, "value", training_args.save_strategy)
    if strategy == "no":
        return (f"no checkpoint was saved ({out} keeps no trained weights): this run saves none unless asked; add "
                "--save_strategy steps --save_steps N to keep one every N steps.")
    return f"no checkpoint was complete yet in {out}: the same command starts the run again."


def _prepared_run(argv: list[str] | None) -> tuple[ContrastiveTrainer, str | None, int, dict]:
    """Steps 1-4 of :func:`train_from_args`: the trainer, the checkpoint to resume, the maximum sequence length and
    the arguments of ``save_run``."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    (model_args, data_args, method_args, loss_args, dcl_args, stream_args, training_args, console, chosen) = args
    setup_console(console.verbose, main_process=training_args.process_index == 0)
    if chosen.dropped_from_file:
        logger.info("--config %s: dropped %s", chosen.config, chosen.dropped_from_file)
    set_seed(training_args.seed)
    said = default_best_metric(training_args, chosen, method_args.preset)  # one nobody typed, which the run won't log
    if said:
        logger.info("%s", said)

    # 1. Every check that needs no weights and no tokenized data, so bad input fails at once (hf_cse.cli.preflight).
    check_training_arguments(training_args)
    check_training_settings(training_args, chosen)  # e.g. --eval_name without --eval_file: it would do nothing
    check_max_train_samples(data_args.max_train_samples)
    resume_from_last_checkpoint(training_args)
    loss = main_loss(model_args.method, method_args.loss)
    check_pair_training(model_args.method, loss, data_args.pair_column, data_args.negative_column,
                        getattr(loss_args, "hard_negative_weight", None))
    check_streaming_arguments(stream_args, data_args, training_args.max_steps, model_args.method)
    no_duplicates = "no_duplicates_in_batch" in chosen and training_args.no_duplicates_in_batch
    check_settings_for_data(training_args, stream_args.streaming, no_duplicates_asked=no_duplicates,
                            shuffle_asked="stream_shuffle_buffer" in chosen)
    encoder = model_args.model_name_or_path or default_encoder()
    remote = {"trust_remote_code": True} if model_args.trust_remote_code else {}
    enc_config = encoder_config(encoder, **remote)
    check_max_seq_length(training_args.max_seq_length, enc_config, encoder)
    tokenizer = load_tokenizer(encoder, **remote)  # cheap: its files checked here, before the data and weights
    model_cls = get_method(model_args.method)
    dropped = drop_unused_preset_values(method_args.preset, chosen, loss, method_only_flags(model_args.method),
                                        loss_args, model_args, dcl_args, method_args)
    if dropped:
        logger.info("--preset %s: dropped %s (not taken by --loss %s / --method %s)", method_args.preset,
                    ", ".join("--" + name for name in dropped), loss, model_args.method)
    # every config field given as a flag (None = the method's own default, e.g. imsimcse's off-dropout), and the
    # objectives: the method's own, overridden only where a loss or DCL flag is given (e.g. imsimcse's m = 0.9)
    config_kwargs = config_kwargs_from(model_args.method, model_args, chosen=chosen)
    config_kwargs["objectives"] = objectives_from_flags(model_cls.config_class().objectives, loss, loss_args, dcl_args)
    # the pooling: a flag's or preset's, else the encoder's own (a sentence-transformers model keeps its pooling)
    # (the card names what set each: --pooler_type or the preset, and --normalize)
    pooling_by = "--pooler_type"
    if "pooler_type" not in chosen and method_args.preset and "pooler_type" in PRESETS[method_args.preset]:
        pooling_by = f"--preset {method_args.preset}"
    pooling = resolve_pooling(encoder, config_kwargs.get("pooler_type"), config_kwargs.get("normalize"),
                              given_by=pooling_by, normalize_given_by="--normalize" if "normalize" in chosen else None)
    if config_kwargs.get("pooler_type") is None:  # the method's rule (PromptBERT on a decoder), as from_encoder's
        pooling = model_cls.pooling_when_unset(pooling, enc_config)
    config_kwargs.update(pooling.config_fields())

    # The run's description, once: what every step below reads (hf_cse.cli.run_spec).
    spec = RunSpec.from_args(encoder=encoder, method=model_args.method, config_kwargs=config_kwargs,
                             data_args=data_args, stream_args=stream_args, training_args=training_args,
                             preset=method_args.preset, precision=training_args.precision)
    data = spec.data
    check_objectives(model_cls, spec.model_config(), enc_config, training_args.cached_minibatch_size, chosen)
    check_dropout_views(model_cls, spec.model_config(), enc_config, data.pairs)
    check_cached_without_cuda_graphs(training_args, training_args.cached_minibatch_size)
    decide_for_run(training_args.cuda_graphs, training_args, model_cls)  # --cuda_graphs on where it cannot apply
    check_method_shards(model_cls, launched_engine(training_args))
    eval_pairs = pairs_from_args(training_args)  # --eval_file / --eval_dataset_name: read and checked, once
    check_eval_data(training_args, training_args.senteval_data_dir, training_args.eval_source, spec.preset,
                    own_eval_data=eval_pairs is not None, pairs_name=training_args.eval_name)
    hub_repo = take_over_hub_push(training_args)  # --push_to_hub uploads the export of step 6, not checkpoints
    if hub_repo:  # a model the export cannot express: refused now, not after the training
        check_pushable(model_cls, test_pooler_of(model_cls, spec.model_config()), hub_repo)

    # 2. Data (read and checked; tokenized after the model's tokenizer is loaded).
    if data.pairs:  # (anchor, positive[, hard negative]) rows: the columns are the views
        raw = load_pair_stream(data_args) if data.streaming else load_pair_dataset(
            data.pair_column, data.train_file, data.dataset_name, data.dataset_config_name, data.text_column,
            data.negative_column)
    elif data.read_as_text_stream:
        raw = load_training_text(stream_args, data_args, training_args.seed)
    else:
        raw = load_train_dataset(data.train_file, data.dataset_name, data.dataset_config_name, data.text_column)
    if data.max_train_samples is not None:
        raw = (raw.take(data.max_train_samples) if data.streaming
               else raw.select(range(min(data.max_train_samples, len(raw)))))
    global_batch = spec.training.global_batch
    if data.streaming:  # a stream's length is unknown; one global batch of it is read to see that it holds one
        check_enough_rows(sum(1 for _ in raw.take(global_batch)), global_batch, data.source, data.unit)
    else:
        check_enough_rows(len(raw), global_batch, data.source, data.unit)
        check_distinct_texts(raw, global_batch, data.source, seed=order_seed(training_args),  # said by the trainer
                             repeats_allowed=not training_args.no_duplicates_in_batch, warn_if_few=False,
                             tokenizer=tokenizer, prompt=spec.config.get("prompt"))  # counted as tokenizing keeps
    check_room_for_text(tokenizer, data.max_seq_length, spec.config.get("prompt"))
    model_config = model_cls.config_class(encoder_config=enc_config, **spec.model_config())
    model_cls.check_with_tokenizer(model_config, tokenizer, enc_config)
    model_cls.check_run_batches(model_config, global_batch, None if data.streaming else len(raw))  # before the model

    # 3. The output folder (hf_cse.cli.output_dir): a new run, the interrupted run to resume, or a refusal.
    main_process = training_args.process_index == 0  # it owns (locks) the folder; the others follow it
    settings = {**spec.fingerprint(), DEV_AND_SELECTION: dev_and_selection(training_args),
                TRAINING_ARGUMENTS: training_arguments(training_args, data.streaming, training_args.precision_given),
                **recorded_modules(console.import_module)}
    resume_from = main_process_first(training_args, lambda: prepare_output_dir(
        training_args.output_dir, settings, overwrite=training_args.overwrite_output_dir, encoder=encoder,
        resume_from_checkpoint=training_args.resume_from_checkpoint, is_main_process=main_process,
        hold=main_process, read_record=record_in_objectives_form, training_args=training_args,
        encoder_config=enc_config, method_defaults=method_config_defaults))
    check_resume_fits(resume_from, model_cls, spec.model_config(), enc_config, training_args)

    why_padded = "--padding_free false"
    if resume_from and "padding_free" not in chosen:  # continue as the run would have gone on uninterrupted
        spec = spec.resuming(padding_free=trained_padding_free(resume_from))
        if not spec.speed.padding_free:
            why_padded = f"the run it resumes ({resume_from}) trained padded; --padding_free true to change"
    # the precision is said once, by the trainer when built (hf_cse.precision.say_training_precision)
    preset_replaced = pooling.replaced_own and pooling_by.startswith("--preset")
    logger.log(logging.WARNING if preset_replaced else logging.INFO, "pooling: %s%s",
               describe_pooling(pooling, model_cls.own_representation(spec.model_config())),
               in_flag_terms(REPLACED_OWN.format(pooling.replaced_own)) if preset_replaced else "")

    if not (data_args.train_file or data_args.dataset_name or stream_args.train_files):  # text nobody chose
        logger.info("no --train_file or --dataset_name: training on hf_cse's packaged demo corpus (%s, %s "
                    "sentences written for the project); give --train_file (one sentence a line) to train on your "
                    "own text",
                    DEMO_CORPUS.name, "its" if data.streaming else f"{len(raw):,}")

    # 4. Model and tokenized data: the method class wraps any AutoModel encoder; the method lives in its config.
    model = model_cls.from_encoder(encoder, **remote, **spec.model_config())
    if model.config.lora_r:
        logger.info("%s", describe_lora(model))
    logger.info("padding-free: %s", describe_padding_free(model.encoder, model.config.padding_free, why_padded,
                                                          training_args.device.type))
    if data.streaming:  # tokenized as it is read
        tokenize = tokenize_pair_dataset if data.pairs else tokenize_stream
        train_dataset = tokenize(raw, tokenizer, data.max_seq_length, prompt=model.config.prompt)
    else:
        tokenize = tokenize_pair_dataset if data.pairs else tokenize_dataset
        train_dataset = main_process_first(training_args, lambda: tokenize(  # the others read the main one's cache
            raw, tokenizer, data.max_seq_length, spec.speed.preprocessing_num_workers, prompt=model.config.prompt,
            keep_text=training_args.no_duplicates_in_batch))  # the sampler compares texts
        # again after tokenizing: sentences of special tokens only were dropped (hf_cse.data.drop_special_only)
        check_enough_rows(len(train_dataset), global_batch, data.source, data.unit)
    num_rows = None if data.streaming else len(train_dataset)
    logger.info("method=%s loss=%s encoder=%s sentences=%s global batch=%d", spec.method, spec.loss, spec.encoder,
                "streamed" if data.streaming else num_rows, global_batch * training_args.gradient_accumulation_steps)
    trainer = ContrastiveTrainer(model=model, args=training_args, train_dataset=train_dataset,
                                 processing_class=tokenizer, eval_pairs=eval_pairs,
                                 trust_remote_code=model_args.trust_remote_code)
    if resume_from:  # the folder's record becomes this run's once it saves (hf_cse.cli.run_record)
        trainer.add_callback(RecordWhenSaved(training_args.output_dir, settings))
    return trainer, resume_from, data.max_seq_length, {"data": data.card_facts(num_rows), "preset": spec.preset,
                                                       "hub_repo": hub_repo}


if __name__ == "__main__":  # python -m hf_cse.cli.train: as python -m hf_cse train (it ran nothing, exit 0)
    from .commands import main as command_main

    sys.exit(command_main(["train", *sys.argv[1:]]))
