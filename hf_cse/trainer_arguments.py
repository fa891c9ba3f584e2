"""What :class:`hf_cse.trainer.ContrastiveTrainer` is given, sorted out before anything is built: ``Trainer.__init__``'s
arguments by name (a keyword neither it nor the contrastive trainer takes is refused in one line that says where that
option belongs), those the contrastive trainer cannot honour, and its own copy of the training arguments.

The trainer adjusts the arguments it runs with (the columns the collator reads kept, activation checkpointing moved
into the encoder, incomplete batches dropped, ...): it does so on its copy, ``trainer.args``, which is also what the
run records and saves. The ``args`` a caller passed are left as given, so one object can serve several trainers.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import logging
from typing import Any

from .best_metric import FILLED_IN
from .errors import CSEError, closest_name

logger = logging.getLogger("hf_cse.trainer")

#: the contrastive trainer's own keyword arguments, beside transformers' ``Trainer``'s
TRAINER_KEYWORDS = ("senteval_data_dir", "eval_source", "evaluator", "eval_pairs", "cached_minibatch_size",
                    "no_duplicates_in_batch", "stream_shuffle_buffer", "cuda_graphs",
                    "trust_remote_code")


#: why ``use_liger_kernel`` is refused (transformers' Trainer applies Liger's kernels by the model's type)
LIGER_WHY = ("Liger patches a model whose type it knows (llama, qwen2, ...), and an hf_cse model (type hf_cse_*) "
             "wraps its encoder: it would patch nothing")
LIGER_REFUSAL = f"use_liger_kernel: {LIGER_WHY}. Leave use_liger_kernel off."


class TrainerArgumentError(CSEError, TypeError):
    """An argument :class:`~hf_cse.trainer.ContrastiveTrainer` does not take; a ``TypeError`` too, as Python's own
    refusal of an unknown keyword is."""


def given_arguments(args: tuple, kwargs: dict[str, Any]) -> dict[str, Any]:
    """``Trainer.__init__``'s arguments by name, positional ones included (model, args, data_collator, ...), with
    ``args`` the trainer's own copy of the training arguments (:func:`own_copy`; default:
    ``ContrastiveTrainingArguments("tmp_trainer")``, as transformers' Trainer defaults to ``tmp_trainer``). Refused
    in one line: a keyword that is no argument of either trainer (:func:`unknown_keyword`), and what the contrastive
    trainer cannot honour (:func:`refuse_unsupported_arguments`)."""
    from transformers import Trainer

    signature = inspect.signature(Trainer.__init__)
    for name in kwargs:
        if name not in signature.parameters:
            raise unknown_keyword(name, kwargs[name])
    try:
        given = signature.bind(None, *args, **kwargs).arguments
    except TypeError as err:  # too many positional arguments, or one given twice
        raise TrainerArgumentError(f"ContrastiveTrainer: {err}; pass its arguments by name (model=, args=, "
                                   "train_dataset=, processing_class=).") from None
    given.pop("self")
    refuse_unsupported_arguments(given)
    from .training_args import ContrastiveTrainingArguments

    given["args"] = own_copy(given.get("args") or ContrastiveTrainingArguments(output_dir="tmp_trainer"))
    if getattr(given["args"], "use_liger_kernel", False):
        raise CSEError(LIGER_REFUSAL, fields=("use_liger_kernel",))
    say_plain_arguments(given["args"])
    return given


def unknown_keyword(name: str, value: Any) -> TrainerArgumentError:
    """The refusal of a keyword argument neither trainer takes, with where the option belongs: a field of
    :class:`~hf_cse.training_args.ContrastiveTrainingArguments` (``max_seq_length``, ``precision``, ``eval_file``,
    ``learning_rate``: one home each, the arguments), ``processing_class`` for the tokenizer (transformers' Trainer
    renamed it), or the closest name the trainer takes."""
    from transformers import Trainer, TrainingArguments

    from .training_args import ContrastiveTrainingArguments

    fields = {f.name for f in dataclasses.fields(ContrastiveTrainingArguments) if f.init}
    if name == "tokenizer":
        return TrainerArgumentError("ContrastiveTrainer takes the tokenizer as processing_class= (transformers' "
                                    "Trainer renamed tokenizer=): pass processing_class=tokenizer.")
    if name in fields:
        plain = {f.name for f in dataclasses.fields(TrainingArguments)}
        return TrainerArgumentError(
            f"{name} is a field of the training arguments, not a keyword argument of ContrastiveTrainer: pass "
            f"args=ContrastiveTrainingArguments({'' if name == 'output_dir' else 'output_dir, '}{name}={value!r:.40})"
            f"{'' if name in plain else f' (plain TrainingArguments have no {name})'}.")
    taken = [p for p in inspect.signature(Trainer.__init__).parameters if p != "self"] + list(TRAINER_KEYWORDS)
    close = closest_name(name, [*taken, *fields])
    hint = f" (did you mean {close}?)" if close else ""
    return TrainerArgumentError(f"ContrastiveTrainer has no keyword argument {name}{hint}: it takes transformers "
                                f"Trainer's ({', '.join(taken[:-len(TRAINER_KEYWORDS)])}) and its own "
                                f"({', '.join(TRAINER_KEYWORDS)}); every other option is a field of "
                                "ContrastiveTrainingArguments, passed as args=.")


def refuse_unsupported_arguments(given: dict[str, Any]) -> None:
    """``Trainer.__init__``'s arguments the contrastive trainer cannot honour, refused before anything is built:
    an ``eval_dataset`` (the evaluator holds its own data), ``model_init`` (the method's collator, kept columns
    and generator are chosen from the model given; transformers' failure came at the first step, blaming the
    data), ``compute_loss_func``, ``compute_metrics`` and ``preprocess_logits_for_metrics`` (never called: the loss
    is the objectives', the dev score the evaluator's); no ``model`` at all."""
    if given.get("eval_dataset") is not None:
        raise CSEError("ContrastiveTrainer evaluates sentence embeddings, not a loss on an eval_dataset: pass "
                       "evaluator= (e.g. a sentence-transformers EmbeddingSimilarityEvaluator) or "
                       "senteval_data_dir= instead of eval_dataset=.")
    if given.get("model_init") is not None:
        raise CSEError("ContrastiveTrainer takes model= (a built hf_cse method model), not model_init=, so "
                       "hyperparameter_search is not supported: build the model, e.g. "
                       "SimCSEModel.from_encoder(name_or_path), and pass model=, one trainer a trial.")
    if given.get("compute_loss_func") is not None:  # compute_loss is the method's: it would never be called
        raise CSEError("ContrastiveTrainer computes the loss its model's objectives name, never compute_loss_func=: "
                       "register your loss (hf_cse.losses.register_loss on a ContrastiveLoss subclass) and name it in "
                       "the model's objectives, e.g. SimCSEModel.from_encoder(name, objectives=[{\"loss\": "
                       "\"my_loss\"}]).")
    for name in ("compute_metrics", "preprocess_logits_for_metrics"):
        if given.get(name) is not None:  # evaluate() scores embeddings: there are no logits to hand them
            raise CSEError(f"ContrastiveTrainer scores sentence embeddings, so {name}= would never be called: pass "
                           "evaluator= (a function of a hf_cse.evaluation.SentenceEncoder returning a dict of "
                           "metrics, or a sentence-transformers evaluator).")
    if given.get("model") is None:  # (the checks of the method against the run read it)
        raise CSEError("ContrastiveTrainer needs model= (a built hf_cse method model), e.g. "
                       "SimCSEModel.from_encoder(name_or_path).")


def own_copy(training_args):
    """The trainer's own copy of ``training_args``, which it adjusts and records while the caller's object is left as
    given. A shallow copy, as ``__post_init__`` left it (``dataclasses.replace`` would run ``__post_init__`` again,
    which is not idempotent: DeepSpeed's config is made anew and registered globally): what the arguments set up for
    the process (the device, the distributed state, DeepSpeed's config) is shared, as it is the process's; the
    option values that are containers (``accelerator_config``, ``fsdp_config``, ``lr_scheduler_kwargs``,
    ``report_to``, ...) are copied, as the trainers write into some of them."""
    copied = copy.copy(training_args)
    for field in dataclasses.fields(training_args):
        value = getattr(training_args, field.name, None)
        if isinstance(value, (dict, list, set)) or (dataclasses.is_dataclass(value) and not isinstance(value, type)):
            setattr(copied, field.name, copy.deepcopy(value))
    return copied


def say_plain_arguments(training_args) -> None:
    """Plain ``TrainingArguments`` have no ``precision``: the run computes in what ``bf16`` / ``fp16`` say (fp32 when
    neither is set; under ``accelerate launch``, its ``mixed_precision``), where ``ContrastiveTrainingArguments``'
    default ``precision="auto"`` would pick bf16 on a device that computes it natively. Said in one log line (a
    warning where auto would choose otherwise); the cut of the sentences the trainer tokenizes is said where it
    tokenizes (:func:`hf_cse.trainer_dataset.tokenized_here`)."""
    from .precision import default_device_type, resolve, trains_plain_fp32

    if not trains_plain_fp32(training_args):
        return
    auto, why = resolve("auto", default_device_type(training_args.use_cpu))
    logger.log(logging.INFO if auto == "fp32" else logging.WARNING,
               "precision: fp32 (plain TrainingArguments: bf16=True / fp16=True choose another); "
               "ContrastiveTrainingArguments' precision='auto' would run %s here (%s)", auto, why)


def select_unchosen_metric(training_args, scores: dict[str, bool]) -> None:
    """A ``metric_for_best_model`` nobody chose (transformers' ``loss`` where ``load_best_model_at_end`` names none, a
    preset's STS dev score in a run that scores none) which the run would not log gives way to its first dev score
    (``scores``: :func:`hf_cse.evaluation.evaluators.known_dev_scores`, in order, each with whether it is higher the
    better), as the command line's does (:func:`hf_cse.best_metric.unchosen_metric_instead`); said in one log
    line, and set in the trainer's own copy of the arguments, ``greater_is_better`` with it unless the caller gave
    it (transformers set False for ``loss``). One the caller gave is kept, and checked as given."""
    from .best_metric import checkpoint_selector, metric_chosen_by, unchosen_metric_instead, unchosen_metric_said

    metric, chosen_by = training_args.metric_for_best_model, metric_chosen_by(training_args)
    selector = checkpoint_selector(training_args)
    instead = unchosen_metric_instead(metric, chosen_by, list(scores), bool(selector))
    if instead is None:
        return
    scored = "your own pairs" if instead.endswith("_spearman") else "the evaluator's scores"
    logger.info("%s", unchosen_metric_said(metric, chosen_by, instead, scored, selector=selector))
    filled_in = getattr(training_args, "filled_in", None)
    if filled_in is None:  # plain TrainingArguments: this copy says what it was given by whom too
        filled_in = training_args.filled_in = {"metric_for_best_model": chosen_by, "greater_is_better": FILLED_IN}
    training_args.metric_for_best_model = instead
    if "greater_is_better" in filled_in:
        training_args.greater_is_better = scores[instead]
