"""What :class:`hf_cse.trainer.ContrastiveTrainer` is given, sorted out before anything is built: ``Trainer.__init__``'s
arguments by name, those the contrastive trainer cannot honour, and its own copy of the training arguments.

The trainer adjusts the arguments it runs with (the columns the collator reads kept, activation checkpointing moved
into the encoder, incomplete batches dropped, ...): it does so on its copy, ``trainer.args``, which is also what the
run records and saves. The ``args`` a caller passed are left as given, so one object can serve several trainers.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
from typing import Any

from .errors import CSEError


def given_arguments(args: tuple, kwargs: dict[str, Any]) -> dict[str, Any]:
    """``Trainer.__init__``'s arguments by name, positional ones included (model, args, data_collator, ...), with
    ``args`` the trainer's own copy of the training arguments (:func:`own_copy`; default:
    ``ContrastiveTrainingArguments("tmp_trainer")``, as transformers' Trainer defaults to ``tmp_trainer``). Refused
    in one line: what the contrastive trainer cannot honour (:func:`refuse_unsupported_arguments`)."""
    from transformers import Trainer

    given = inspect.signature(Trainer.__init__).bind(None, *args, **kwargs).arguments
    given.pop("self")
    refuse_unsupported_arguments(given)
    from .training_args import ContrastiveTrainingArguments

    given["args"] = own_copy(given.get("args") or ContrastiveTrainingArguments(output_dir="tmp_trainer"))
    return given


def refuse_unsupported_arguments(given: dict[str, Any]) -> None:
    """``Trainer.__init__``'s arguments the contrastive trainer cannot honour, refused before anything is built:
    an ``eval_dataset`` (the evaluator holds its own data) and ``model_init`` (the method's collator, kept columns
    and generator are chosen from the model given; transformers' failure came at the first step, blaming the
    data)."""
    if given.get("eval_dataset") is not None:
        raise CSEError("ContrastiveTrainer evaluates sentence embeddings, not a loss on an eval_dataset: pass "
                       "evaluator= (e.g. a sentence-transformers EmbeddingSimilarityEvaluator) or "
                       "senteval_data_dir= instead of eval_dataset=.")
    if given.get("model_init") is not None:
        raise CSEError("ContrastiveTrainer takes model= (a built hf_cse method model), not model_init=, so "
                       "hyperparameter_search is not supported: build the model, e.g. "
                       "SimCSEModel.from_encoder(name_or_path), and pass model=, one trainer a trial.")


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

