"""Checks run_unsup.py makes before it loads a model or tokenizes data: a bad argument fails at once, in one line,
not at the step (or the evaluation) that first meets it, possibly hours in.

The modules that import torch are imported inside the checks that need them, so that the commands' earliest checks
(:mod:`hf_cse.cli.entry_points`, before the training stack is imported) can use those here that need none."""

from __future__ import annotations

import inspect
import logging
from pathlib import Path
from types import SimpleNamespace

from ..best_metric import (
    PRESET,
    check_best_metric,
    checkpoint_selector,
    dev_scores,
    dev_scores_of,
    metric_chosen_by,
    unchosen_metric_instead,
    unchosen_metric_said,
)
from ..checks import InputError, check_model_source
from ..encoders import encoder_max_length, seq_length_problem
from ..errors import CSEError
from ..hyperparameter_rules import field_needs, run_value
from ..run_as_encoder import RunAsEncoder, is_method_model_config, local_run_as_encoder
from ..training_values import check_optimizer_values, check_step_counts
from .flags import in_flag_terms
from .flags_in_use import check_dcl_settings, check_needs, check_off_dropout
from .launch import check_requested_processes_started
from .train_facts import check_pair_flags, pair_facts

logger = logging.getLogger("run_unsup")  # the training command's


def _value(option) -> str:
    return str(getattr(option, "value", option))  # IntervalStrategy.STEPS -> "steps"


def check_training_arguments(training_args) -> None:
    """Values the Trainer would accept and then fail on, or silently misread."""
    check_requested_processes_started()
    check_training_counts(training_args, training_args.world_size)
    check_optimizer_arguments(training_args)
    check_report_to(training_args.report_to)
    from ..distributed import check_not_data_parallel, check_sharding_device
    from ..precision import check_no_full_eval

    check_no_full_eval(training_args)

    check_not_data_parallel(training_args)
    check_sharding_device(training_args)


def check_report_to(report_to: list[str] | None) -> None:
    """Each ``--report_to`` integration's package is installed: transformers builds the integration's callback only
    when the Trainer starts, after the weights are loaded and the text tokenized. Building the callback here is what
    the Trainer does, minus the logging (callbacks connect to their service at the first log, not when built)."""
    from transformers.integrations import get_reporting_integration_callbacks

    for name in report_to or []:
        if name in ("none", "all"):
            continue
        try:
            (callback,) = get_reporting_integration_callbacks([name])
            callback()
        except (ImportError, RuntimeError) as err:
            raise InputError(f"--report_to {name}: its package is not installed here ({' '.join(str(err).split())}). "
                             f"Install it (e.g. pip install {name}) or drop --report_to {name}.") from None


def check_min_seq_length(max_seq_length: int, hint: str = "The papers use 32.") -> None:
    """The shortest --max_seq_length any command takes (:func:`hf_cse.encoders.seq_length_problem`), before a
    tokenizer is loaded (the tokenizer's own count: :func:`hf_cse.tokenizer_match.check_room_for_text`)."""
    problem = seq_length_problem(max_seq_length, None)
    if problem:
        raise InputError(f"{in_flag_terms(problem, ('max_seq_length',))}. {hint}")


def check_training_counts(training_args, world_size: int | None) -> None:
    """The batch, step and length counts the Trainer would accept and then fail on, or silently misread
    (:func:`hf_cse.training_values.check_step_counts`). ``world_size`` None: the processes are not known yet (the
    command line's earliest checks, on the typed values before ``ContrastiveTrainingArguments`` refuses a length);
    the command checks again with them."""
    check_min_seq_length(training_args.max_seq_length)
    check_step_counts(training_args, world_size)


def check_max_train_samples(value: int | None) -> None:
    """At least one row kept, where rows are counted (0 failed deep in ``datasets`` for a stream)."""
    if value is not None and value < 1:
        raise InputError(f"--max_train_samples must be at least 1, got {value}.")


def resume_from_last_checkpoint(training_args) -> None:
    """``--resume_from_checkpoint True`` (any case; not a folder of that name), as the Trainer takes ``True``: the
    last complete checkpoint in ``--output_dir``, named from here on; refused in one line when there is none (it was
    taken for a folder named True, refused after the model was loaded, by a message offering True). A checkpoint
    named by its path must be a complete checkpoint folder."""
    value = training_args.resume_from_checkpoint
    if not isinstance(value, str):
        return
    if value.lower() != "true" or Path(value).exists():
        from ..trainer_folder import checkpoint_to_resume

        # a named checkpoint that is no folder or is incomplete: refused now, not after the model is loaded (the
        # trainer checks it again, with the model's method)
        checkpoint_to_resume(value, training_args.output_dir, None)
        return
    from ..checkpoints import last_complete_checkpoint

    out = Path(training_args.output_dir)
    found = last_complete_checkpoint(out) if out.is_dir() else None
    if found is None:
        raise InputError(f"--resume_from_checkpoint {value}: --output_dir {out} holds no complete checkpoint to "
                         "resume from; run without --resume_from_checkpoint to start (or finish) the run there.")
    training_args.resume_from_checkpoint = found


def check_optimizer_arguments(training_args) -> None:
    """The optimizer's values, before the encoder is loaded (:func:`hf_cse.training_values.check_optimizer_values`)."""
    check_optimizer_values(training_args)


def check_tokenizer_files(encoder: str, flag: str = "--model_name_or_path") -> None:
    """A local model folder without tokenizer files (e.g. a run folder whose tokenizer was not saved): transformers
    would then suggest installing sentencepiece, which does not help."""
    from ..output_folder import TOKENIZER_FILES, matching

    path = Path(encoder).expanduser()
    if path.is_dir() and not matching([p.name for p in path.iterdir()], TOKENIZER_FILES):
        raise InputError(f"{flag} {encoder} holds no tokenizer files (tokenizer.json, tokenizer_config.json, "
                         "vocab.txt...): save the tokenizer into it (tokenizer.save_pretrained), or give the encoder "
                         "folder it was trained from.")


def encoder_config(encoder: str, flag: str = "--model_name_or_path", trust_remote_code: bool = False):
    """The encoder's config (config.json only: no weights), after checking the reference can load."""
    from transformers import AutoConfig

    check_model_source(encoder, flag)
    check_not_run_folder(encoder, flag)
    check_tokenizer_files(encoder, flag)
    try:
        config = AutoConfig.from_pretrained(encoder, trust_remote_code=trust_remote_code)
    except (OSError, ValueError) as err:  # e.g. code in the model's folder that trust_remote_code must allow
        raise InputError(f"{flag} {encoder}: its config cannot be read ({' '.join(str(err).split())})") from err
    if is_method_model_config(config):  # a Hub repo of an hf_cse run's model
        raise run_folder_refusal(RunAsEncoder.of(encoder, config.model_type), flag)
    return config


def check_not_run_folder(encoder: str, flag: str = "--model_name_or_path") -> None:
    """Refuse a local hf_cse run folder (or checkpoint) as the encoder to start from, naming the fixes
    (:mod:`hf_cse.run_as_encoder`); read from its config.json alone, before torch is needed."""
    found = local_run_as_encoder(encoder)
    if found is not None:
        raise run_folder_refusal(found, flag)


def run_folder_refusal(found: RunAsEncoder, flag: str) -> InputError:
    """One line for an hf_cse run's model given as the encoder (``flag``): start from its export, or go on with the
    run itself (``--resume_from_checkpoint``, offered for ``--model_name_or_path``)."""
    if found.export is not None:
        new = f"give {flag} {found.export} (its export: the merged plain encoder)"
    else:
        new = f"export it (hf-cse-export {found.source} OUT: the merged plain encoder) and give {flag} OUT"
    if found.last_checkpoint is not None:
        go_on = f"; to go on with that run itself, give --output_dir {found.run} --resume_from_checkpoint " \
                f"{found.last_checkpoint}"
    elif found.run is None:  # a Hub repo
        go_on = "; to go on with that run itself, give its folder as --output_dir with --resume_from_checkpoint"
    else:
        go_on = " (the run itself saved no checkpoint to go on from with --resume_from_checkpoint)"
    resume = go_on if flag == "--model_name_or_path" else ""
    return InputError(f"{flag} {found.source} {found.what}. To start a new run from what it learned, {new}{resume}.")


def load_tokenizer(encoder: str, flag: str = "--model_name_or_path", **kwargs):
    """The encoder's tokenizer (after :func:`encoder_config`'s checks); one line if its files cannot be read, its
    tokenizer class needs a package that is not installed, or they hold no vocabulary (the stand-in transformers
    builds would train on a few special tokens: :func:`hf_cse.tokenizer_match.is_stand_in`), or it has neither a
    padding nor an end-of-text token to pad batches with (:func:`hf_cse.padding.check_can_pad`)."""
    from transformers import AutoTokenizer

    from ..padding import check_can_pad
    from ..tokenizer_match import check_not_stand_in

    try:
        tokenizer = AutoTokenizer.from_pretrained(encoder, **kwargs)
    except (OSError, ValueError, ImportError) as err:
        raise InputError(f"{flag} {encoder}: its tokenizer cannot be loaded ({' '.join(str(err).split())})") from err
    # tokenizer files without a vocabulary, or a Hub repo of weights only
    check_not_stand_in(tokenizer, f"{flag} {encoder}", "save the encoder's tokenizer into it "
                       "(tokenizer.save_pretrained), or give the encoder folder or Hub id it was trained from")
    try:  # nothing to pad batches with: found here, not by the collator once the weights are loaded
        check_can_pad(tokenizer)
    except CSEError as err:  # no flag sets one: the tokenizer saved with the model pads
        hub = "" if Path(encoder).expanduser().is_dir() else (" A Hub model: save it and its tokenizer into a folder "
                                                              "(save_pretrained) and give that folder.")
        raise InputError(f"{flag} {encoder}: {err}{hub}") from err
    return tokenizer


def check_max_seq_length(max_seq_length: int, enc_config, encoder: str) -> None:
    """A length beyond the encoder's position embeddings would crash at the first batch holding a long sentence."""
    problem = seq_length_problem(max_seq_length, encoder_max_length(enc_config, cap=None), encoder)
    if problem:
        raise InputError(f"{in_flag_terms(problem, ('max_seq_length',))} (the papers use 32).")


def check_objectives(model_cls, config_kwargs: dict, enc_config, cached_minibatch_size: int | None,
                     typed: set[str] = frozenset()) -> None:
    """Build the method's config (which builds its losses) as the model will, without loading any weights, and run
    the method's own early checks (:meth:`~hf_cse.models.CSEPreTrainedModel.check_before_loading`). ``typed``: the
    settings the user chose; one that acts only with a setting this run has otherwise (the needs of the method's
    config fields and of the main loss's hyperparameters, :func:`~hf_cse.cli.flags_in_use.check_needs`) would do
    nothing and is refused, and so is a ``--dcl_*`` flag without the DCL objective."""
    from ..losses import get_loss_class, loss_defaults

    check_off_dropout(model_cls, config_kwargs, typed)  # before the config refuses it in the library's terms
    # before the config refuses some (lora_alpha without lora_r) in the library's terms, not naming a --config file
    check_needs(typed, field_needs(model_cls.config_class),
                run_value(config_kwargs.get, vars(model_cls.config_class())), config_kwargs)
    config = model_cls.config_class(encoder_config=enc_config, **config_kwargs)
    main = config.objectives[0]
    check_needs(typed, get_loss_class(main["loss"]).hyperparameter_needs,
                run_value(main["hyperparameters"].get, loss_defaults(main["loss"])), main["hyperparameters"])
    check_dcl_settings(typed, config.objectives)
    model_cls.check_before_loading(config)
    if config.lora_r:
        from ..models.lora import check_targets_match

        check_targets_match(config)
    if config.freeze_embeddings:
        from ..models.frozen_embeddings import check_freezable

        check_freezable(config)
    if config.do_mlm:
        from ..models.mlm import check_mlm_architecture

        check_mlm_architecture(enc_config)
    if cached_minibatch_size:
        from ..cached import check_cached_compatible

        check_cached_compatible(config, cached_minibatch_size)


def check_dropout_views(model_cls, config_kwargs: dict, enc_config, pairs: bool) -> None:
    """Two dropout views of a sentence through an encoder without dropout are identical: nothing would be learned."""
    from ..models.encoder_dropout import identical_views_problem

    problem = None if pairs else identical_views_problem(model_cls, enc_config, config_kwargs.get("dropout"))
    if problem:
        raise InputError(f"{problem}. Add --dropout 0.1 (LLM2Vec's SimCSE uses 0.3), or train on pairs "
                         "(--pair_column).")


def check_eval_data(training_args, senteval_data_dir: str | None, eval_source: str, preset: str | None,
                    own_eval_data: bool = False, pairs_name: str | None = None) -> None:
    """The dev sets the trainer will score during training are read now (they are small and cached).
    ``own_eval_data``: the user's own pairs (--eval_file, named ``pairs_name``) are scored, so STS-B dev is not
    required, and without --senteval_data_dir (or --eval_source hub) it is neither scored (the trainer's evaluator,
    :func:`hf_cse.evaluation.evaluators.training_evaluator`) nor looked for; ``--metric_for_best_model`` must name one
    of the scores (:func:`hf_cse.best_metric.check_best_metric`); own pairs scored only before and after training
    are said in one warning."""
    if eval_source not in ("local", "hub"):
        raise InputError(f"--eval_source {eval_source!r}: use local (with --senteval_data_dir) or hub.")
    scores_sts = senteval_data_dir is not None or eval_source == "hub"
    # a metric nobody chose the command replaced already (default_best_metric): this one was chosen
    check_best_metric(training_args, dev_scores(scores_sts, pairs_name if own_eval_data else None), filled_in=False)
    evaluates = _value(training_args.eval_strategy) != "no"
    if own_eval_data and not evaluates:
        logger.warning("--eval_file/--eval_dataset_name with --eval_strategy no: scored before the first step and "
                       "after the last only; --eval_strategy steps or epoch scores them during training too.")
    if evaluates and not scores_sts and not own_eval_data:
        source = f"--preset {preset}" if preset else "--eval_strategy"
        raise InputError(
            f"{source} evaluates on STS-B dev during training (--eval_strategy {_value(training_args.eval_strategy)}), "
            "but no --senteval_data_dir was given: pass --senteval_data_dir SentEval/data/downstream (or "
            "--eval_source hub), --eval_file with your own scored pairs, or --eval_strategy no "
            "--load_best_model_at_end false to train without evaluation."
        )
    if not scores_sts:  # no STS dev data is scored: none is looked for in the default folders
        return
    from ..evaluation import dev_metrics, load_sts  # imported here: the evaluation stack is slow to import
    from ..evaluation.rowcheck import SentEvalDataError, in_training_terms

    for task in inspect.signature(dev_metrics).parameters["tasks"].default:  # what ContrastiveTrainer.evaluate scores
        try:
            load_sts(task, senteval_data_dir, "dev", eval_source)
        except SentEvalDataError as err:  # its fix names --eval_source, this command's flag
            raise in_training_terms(err) from err
        except ConnectionError as err:  # --eval_source hub without network or with HF_HUB_OFFLINE=1
            raise InputError(f"--eval_source hub: cannot read {task} dev from the Hub ({err}). Use "
                             "--senteval_data_dir with local SentEval data, or go online.") from err


def default_best_metric(training_args, chosen: set[str], preset: str | None) -> str | None:
    """Where the user chose no ``--metric_for_best_model`` (neither typed nor in a --config file, ``chosen``), one
    nobody typed that the run does not log is replaced by the run's dev score (STS-B dev's where it is scored, else the
    user's own pairs'), by the library's rule (:func:`hf_cse.best_metric.unchosen_metric_instead`, the trainer's
    too): transformers' ``loss`` with --load_best_model_at_end, which no contrastive run logs, and a preset's STS dev
    score in a run that scores the user's pairs and no STS dev data. ``greater_is_better`` follows, unless chosen.
    Made here, before the trainer is built, so that the checks of the flags see it. Returns the log line that says
    so, else None (a metric the user chose is checked as typed, :func:`check_eval_data`)."""
    metric = training_args.metric_for_best_model
    chosen_by = "" if "metric_for_best_model" in chosen else (
        metric_chosen_by(training_args) or (f"{PRESET} {preset}" if preset else ""))
    selector = checkpoint_selector(training_args)
    instead = unchosen_metric_instead(metric, chosen_by, dev_scores_of(training_args), bool(selector))
    if instead is None:
        return None
    training_args.metric_for_best_model = instead
    if "greater_is_better" not in chosen:
        training_args.greater_is_better = True  # a correlation (transformers set False for its 'loss')
    return unchosen_metric_said(metric, chosen_by, instead, term=lambda name: f"--{name}", selector=selector)


def check_typed_best_metric(values, typed: set[str]) -> None:
    """A typed --metric_for_best_model that the run's dev data will not log, refused from the flags alone, before the
    training stack is imported (:func:`check_eval_data` checks it again with the arguments)."""
    if "metric_for_best_model" in typed:
        check_best_metric(values, dev_scores_of(values), filled_in=False)


def check_pair_training(method: str, loss: str, pair_column: str | None, negative_column: str | None,
                        hard_negative_weight: float | None = None) -> None:
    """Refuse, before any model is loaded, pair options that cannot train (:func:`~.train_facts.check_pair_flags`,
    on the registries' methods and losses)."""
    from ..models import get_method

    if pair_column:
        get_method(method)  # one not registered: in its own words
    check_pair_flags(pair_facts(), method, loss, pair_column, negative_column, hard_negative_weight)


def check_resume_fits(checkpoint: str | None, model_cls, config_kwargs: dict, enc_config, training_args) -> None:
    """A checkpoint to resume from holds the weights of the model these flags build (the method, the encoder's
    architecture and sizes, LoRA rank and targets, the MLM head), read from its config.json alone; otherwise the
    Trainer fails with a state-dict error thousands of characters long. Refused too: another ``max_steps`` than
    its run's where the learning-rate schedule follows the total, and a checkpoint past ``max_steps`` or
    ``num_train_epochs`` (it would be exported as the run of fewer steps asked):
    :func:`~hf_cse.trainer_resume.check_steps_kept`, here before the model loads."""
    import json

    from ..models.lora import target_modules
    from ..trainer_folder import SHAPING_THE_WEIGHTS, check_same_encoder
    from ..trainer_resume import check_steps_kept, saved_steps

    path = Path(checkpoint or "") / "config.json"
    if not checkpoint or not path.is_file():
        return
    where = f"--resume_from_checkpoint {checkpoint}"
    saved = json.loads(path.read_text(encoding="utf-8"))
    now = model_cls.config_class(encoder_config=enc_config, **config_kwargs)
    if saved.get("model_type") != now.model_type:
        raise InputError(f"{where} holds a {saved.get('model_type')} model, not {now.model_type}: resume it with "
                         "its own --method, or start a new run.")
    check_same_encoder(checkpoint, enc_config)
    # the method is its model_type (above), and the LoRA targets are compared as the encoder resolves them (below)
    changed = [f"--{k} {saved[k]!r} then, {getattr(now, k)!r} now" for k in SHAPING_THE_WEIGHTS
               if k not in ("method", "lora_target_modules") and k in saved and saved[k] != getattr(now, k)]
    if not changed and now.lora_r:
        names = lambda t: t if isinstance(t, str) else " ".join(sorted(t))  # noqa: E731
        then = names(target_modules(SimpleNamespace(lora_target_modules=saved.get("lora_target_modules"),
                                                    encoder_config=enc_config)))
        if then != names(target_modules(now)):
            changed.append(f"--lora_target_modules {then} then, {names(target_modules(now))} now")
    if changed:
        raise InputError(f"{where} was trained with other weights ({'; '.join(changed)}): resume with the "
                         "checkpoint's settings, or start a new run.")
    check_steps_kept(checkpoint, *(saved_steps(checkpoint) or (None, 0)), training_args.max_steps, training_args)
