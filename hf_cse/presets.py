"""The papers' main settings as named presets, for Python (:func:`from_preset`) and the command line
(:mod:`hf_cse.cli.presets`).

Each preset is a run's settings by name (as a run's ``hf_cse_run.json`` holds them): the method, its loss and the loss's
hyperparameters, the method's config fields and the training arguments. Values are BERT-base settings from each
paper and its authors' scripts (the comments name them); the papers train on wiki1m for one epoch (DiffCSE: two) and
select checkpoints on STS-B dev every 125 steps, so a preset needs dev data (``senteval_data_dir``, or your own scored
pairs, ``eval_file``, which then select)::

    from hf_cse.presets import from_preset
    from hf_cse.trainer import ContrastiveTrainer

    model, args = from_preset("simcse_bert", "bert-base-uncased", "out/simcse", senteval_data_dir="SentEval/data")
    trainer = ContrastiveTrainer(model=model, args=args, train_dataset=sentences, processing_class=tokenizer)
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from .errors import CSEError, closest_name

logger = logging.getLogger(__name__)

#: the method of a run that names none (the command line's default); a run record or model config without one was
#: written by such a run
DEFAULT_METHOD = "simcse"

_COMMON = {
    "max_seq_length": 32,
    "per_device_train_batch_size": 64,
    "learning_rate": 3e-5,
    "num_train_epochs": 1,
    "pooler_type": "cls",
    "mlp_only_train": True,
    "eval_strategy": "steps",
    "eval_steps": 125,
    "save_strategy": "steps",
    "save_steps": 125,
    "save_total_limit": 1,
    "metric_for_best_model": "stsb_spearman",
    "greater_is_better": True,
    "load_best_model_at_end": True,
}

_ESIMCSE = {**_COMMON, "method": "esimcse", "loss": "infonce", "temperature": 0.05, "momentum": 0.995}

PRESETS: dict[str, dict] = {
    # SimCSE unsup BERT-base (SimCSE README, run_unsup_example.sh)
    "simcse_bert": {**_COMMON, "method": "simcse", "loss": "infonce", "temperature": 0.05},
    # GS-InfoNCE (Wu et al., COLING 2022, Sec. 4: M = 3 x batch = 192, batch 64; authors' run.sh: dropout 0.2 for BERT)
    "gs_infonce_bert": {**_COMMON, "method": "simcse", "loss": "gs_infonce", "temperature": 0.05,
                        "num_noise": 192, "lam": 1.0, "noise_std": 1.0, "dropout": 0.2},
    # Focal-InfoNCE (Hou and Li, Findings of EMNLP 2023, Tables 4 and 5: tau 0.07 for BERT-base, m 0.3)
    "focal_infonce_bert": {**_COMMON, "method": "simcse", "loss": "focal_infonce", "temperature": 0.07, "m": 0.3},
    # ImSimCSE (Xu et al., EMNLP 2023, Sec. 5.1: m 0.9, lambda 0.1, tau_DCL 5, lr 3e-5, batch 64)
    "imsimcse_bert": {**_COMMON, "method": "imsimcse", "loss": "off_dropout_infonce", "temperature": 0.05,
                      "m": 0.9, "off_dropout": True, "dcl_weight": 0.1, "dcl_temperature": 5.0},
    # DiffCSE (Chuang et al., NAACL 2022, Table 12 = run_diffcse.sh: lr 7e-6, mask 0.30, lambda 0.005, 2 epochs,
    # batch 64, BatchNorm projector; generator distilbert-base-uncased, a Hub download -- --generator_name_or_path
    # unigram works offline)
    "diffcse_bert": {**_COMMON, "method": "diffcse", "loss": "infonce", "temperature": 0.05, "projector": "batchnorm",
                     "learning_rate": 7e-6, "num_train_epochs": 2, "masking_ratio": 0.30, "lambda_rtd": 0.005,
                     "generator_name_or_path": "distilbert-base-uncased"},
    # DiffCSE RoBERTa-base (Table 12: lr 1e-5, mask 0.20, lambda 0.005; generator distilroberta-base)
    "diffcse_roberta": {**_COMMON, "method": "diffcse", "loss": "infonce", "temperature": 0.05,
                        "projector": "batchnorm", "learning_rate": 1e-5, "num_train_epochs": 2, "masking_ratio": 0.20,
                        "lambda_rtd": 0.005, "generator_name_or_path": "distilroberta-base"},
    # ESimCSE (Wu et al., COLING 2022; the authors' run.sh and logs/*.log: batch 64, momentum 0.995, subword repetition,
    # temperature 0.05, 1 epoch; lr, queue size, repetition rate and dropout per encoder)
    "esimcse_bert_base": {**_ESIMCSE, "learning_rate": 3e-5, "queue_size": 160, "dup_rate": 0.32, "dropout": 0.1},
    "esimcse_roberta_base": {**_ESIMCSE, "learning_rate": 1e-5, "queue_size": 160, "dup_rate": 0.30, "dropout": 0.1},
    "esimcse_bert_large": {**_ESIMCSE, "learning_rate": 1e-5, "queue_size": 160, "dup_rate": 0.32, "dropout": 0.1},
    "esimcse_roberta_large": {**_ESIMCSE, "learning_rate": 1e-5, "queue_size": 128, "dup_rate": 0.28, "dropout": 0.15},
    # Supervised SimCSE BERT-base on NLI triplets (SimCSE's run_sup_example.sh: 4 GPUs x 128 = batch 512, lr 5e-5,
    # 3 epochs, length 32, temperature 0.05, eval every 125 steps, pooler cls WITHOUT --mlp_only_train: the MLP is
    # kept at test time). Give the data's columns: --text_column, --pair_column, --negative_column. The batch is
    # per process: with N processes pass --per_device_train_batch_size 512/N.
    "sup_simcse_bert": {**_COMMON, "method": "simcse", "loss": "infonce", "temperature": 0.05,
                        "per_device_train_batch_size": 512, "learning_rate": 5e-5, "num_train_epochs": 3,
                        "mlp_only_train": False},
    # PromptBERT unsup BERT-base (Jiang et al., EMNLP 2022; authors' run.sh unsup-bert: batch 256, lr 1e-5, 1 epoch,
    # temperature 0.05, --mlp_only_train, sentences cut at 32 tokens = 34 with [CLS]/[SEP]); templates: the
    # method's defaults (hf_cse.models.promptbert)
    "promptbert_bert_base": {**_COMMON, "method": "promptbert", "loss": "infonce", "temperature": 0.05,
                             "per_device_train_batch_size": 256, "learning_rate": 1e-5, "max_seq_length": 34},
    # PromptBERT unsup RoBERTa-base (run.sh unsup-roberta: the same, with its two templates)
    "promptbert_roberta_base": {**_COMMON, "method": "promptbert", "loss": "infonce", "temperature": 0.05,
                                "per_device_train_batch_size": 256, "learning_rate": 1e-5, "max_seq_length": 34,
                                "template": "This sentence : '{sentence} ' means{mask}.",
                                "template2": "The sentence : '{sentence} ' means{mask}."},
    # Gradient paradigm baseline (Li et al., ACL 2024, App. A.3-A.4: batch 128, lr 1e-5, Linear head N(0, 6e-3);
    # m 0.3, tau 0.05, r 1 as §3.2). It trains the authors' code form (sg.w_gd.w_w.w_r), with which the paper's numbers
    # were made: both views anchors, each direction reduced over its active anchors (--symmetric False --reduction
    # anchor_mean is the printed one-directional eq. 5; see the loss's docstring). The embedding layer stays frozen,
    # as the authors' code (custom_param_init) trains every run behind the paper's numbers, though the paper does not
    # say it (hf_cse.models.frozen_embeddings; --freeze_embeddings False trains it too).
    "paradigm_bert": {**_COMMON, "method": "simcse", "loss": "paradigm", "projector": "linear",
                      "per_device_train_batch_size": 128, "learning_rate": 1e-5, "freeze_embeddings": True,
                      "temperature": 0.05, "m": 0.3, "r": 1.0, "symmetric": True, "reduction": "active_entry_mean"},
}



def preset_values(name: str) -> dict[str, Any]:
    """A copy of preset ``name``'s settings; an unknown name is refused with the closest one."""
    if name not in PRESETS:
        close = closest_name(name, PRESETS)
        raise CSEError(f"unknown preset {name!r}; {f'did you mean {close!r}? ' if close else ''}presets: "
                       f"{', '.join(sorted(PRESETS))}")
    return dict(PRESETS[name])


def unused_preset_values(name: str, loss: str, other_methods_fields: set[str]) -> set[str]:
    """The settings of preset ``name`` that ``loss`` and the chosen method do not take (``other_methods_fields``:
    the config fields only other methods have), so that ``focal_infonce_bert`` trained with ``infonce`` drops its
    ``m`` instead of failing on a value nobody chose."""
    from .losses import available_losses, get_loss_class, loss_hyperparameters
    from .losses.base import NO_DROPOUT_INPUT

    values = PRESETS[name]
    every_loss_setting = {k for other in available_losses() for k in loss_hyperparameters(other)}
    unused = {k for k in values if k in every_loss_setting and k not in loss_hyperparameters(loss)}
    unused |= other_methods_fields & values.keys()  # e.g. DiffCSE's fields with method simcse
    if NO_DROPOUT_INPUT not in get_loss_class(loss).extra_inputs:  # off-dropout negatives only feed such losses
        unused |= {"off_dropout"} & values.keys()
    return unused


#: what a preset's pooling in place of a sentence-transformers encoder's own is said with (the papers' presets pool
#: as their BERT-base runs did), completed with the encoder's own pooler_type
REPLACED_OWN = "; the preset pools as its paper's BERT-base runs: pooler_type={!r} keeps the encoder's own"


def from_preset(name: str, model_name_or_path: str, output_dir: str, **overrides: Any):
    """The model and the training arguments of preset ``name`` (:data:`PRESETS`) for the encoder
    ``model_name_or_path``, as ``run_unsup.py --preset NAME`` builds them: ``(model, ContrastiveTrainingArguments)``.
    ``overrides``: any setting of the preset, or any other, by the same names (``method``, ``loss`` and its
    hyperparameters, config fields, ``dcl_weight`` / ``dcl_<hyperparameter>``, training arguments); the preset's
    values that the chosen loss or method does not take are dropped (one log line), unless given here; and with your own
    dev pairs (``eval_file`` / ``eval_dataset_name``; the trainer's ``eval_pairs=``, when the trainer is built) and no
    STS dev data, checkpoints are selected by their score rather than the preset's ``stsb_spearman``, as the command
    line does, unless ``metric_for_best_model`` is given. A preset's pooling in place of a sentence-transformers
    encoder's own (the papers' [CLS] on the default encoder) is said as a warning, naming the ``pooler_type`` that
    keeps the encoder's own."""
    from .best_metric import PRESET, own_pairs_metric, unchosen_metric_said
    from .losses import available_losses, loss_hyperparameters
    from .models import METHODS, get_method
    from .objectives import DCL, objectives_for
    from .training_args import ContrastiveTrainingArguments
    from .training_values import unapplied_intervals

    values = {**preset_values(name), **overrides}
    for unapplied in unapplied_intervals(values, overrides):  # e.g. eval_strategy="no" given: no eval_steps
        del values[unapplied]
    method, loss = values.pop("method"), values.pop("loss")
    model_cls = get_method(method)
    own = {f.name for f in dataclasses.fields(model_cls.config_class)}
    others = {f.name for m in METHODS.values() for f in dataclasses.fields(m.config_class)} - own
    dropped = sorted(unused_preset_values(name, loss, others) - set(overrides))
    if dropped:
        logger.info("preset %s: dropped %s (not taken by loss %s / method %s)", name, ", ".join(dropped), loss, method)
    values = {k: v for k, v in values.items() if k not in dropped}
    arg_names = {f.name for f in dataclasses.fields(ContrastiveTrainingArguments) if f.init}
    known = arg_names | own | others | {f"dcl_{k}" for k in loss_hyperparameters(DCL)} | {"dcl_weight"} | {
        k for other in available_losses() for k in loss_hyperparameters(other)}
    unknown = sorted(set(overrides) - known - {"method", "loss"})
    if unknown:  # a training argument misspelt would be taken for a config field of the method
        close = closest_name(unknown[0], sorted(known))
        raise CSEError(f"from_preset: no setting {unknown[0]!r}" + (f"; did you mean {close!r}?" if close else
                       "; settings are training arguments, the method's config fields and loss hyperparameters."))
    args = ContrastiveTrainingArguments(output_dir=output_dir, **{k: v for k, v in values.items() if k in arg_names})
    # the preset's selection is nobody's choice: the trainer may give it way to the scores its run logs (eval_pairs=)
    args.filled_in.update({k: f"{PRESET} {name}" for k in ("metric_for_best_model", "greater_is_better")
                           if k in PRESETS[name] and k not in overrides})
    args.preset_name, args.preset_method = name, method  # the preset's method, or the one given over it
    own_pairs = None if "metric_for_best_model" in overrides else own_pairs_metric(args)
    if own_pairs:  # the preset's STS-B dev score, never logged where only the caller's pairs are scored
        logger.info("%s", unchosen_metric_said(args.metric_for_best_model, f"{PRESET} {name}", own_pairs,
                                               scoring="these arguments score"))
        args.metric_for_best_model = own_pairs
    hyperparameters = {k: values.pop(k) for k in list(values) if k in loss_hyperparameters(loss) and k not in own}
    dcl = {k[len("dcl_"):]: values.pop(k) for k in list(values) if k.startswith("dcl_") and k != "dcl_weight"}
    config = {k: v for k, v in values.items() if k not in arg_names and k != "dcl_weight"}
    config["objectives"] = objectives_for(model_cls.config_class().objectives, loss, hyperparameters,
                                          values.get("dcl_weight"), dcl)
    if "pooler_type" not in overrides and config.get("pooler_type") is not None:  # the preset's: named as its
        from .models.pooling import describe_pooling, resolve_pooling

        pooling = resolve_pooling(str(model_name_or_path), config["pooler_type"], config.get("normalize"),
                                  given_by=f"preset {name}",
                                  normalize_given_by="the caller" if "normalize" in overrides else None)
        config.update(pooling.config_fields())
        logger.log(logging.WARNING if pooling.replaced_own else logging.INFO, "pooling: %s%s",
                   describe_pooling(pooling, model_cls.own_representation(config)),
                   REPLACED_OWN.format(pooling.replaced_own) if pooling.replaced_own else "")
    return model_cls.from_encoder(model_name_or_path, **config), args


def check_preset_method(model, args) -> None:
    """Arguments of a preset (:func:`from_preset`) given with a model of another method than the one they were made
    for: it would train at the other paper's settings (DiffCSE's learning rate and epochs for an ESimCSE model) without
    a word. ``from_preset(NAME, ..., method=...)`` makes a preset's arguments for another method on purpose, as
    ``--preset NAME --method M`` does on the command line."""
    made_for = getattr(args, "preset_method", "")
    method = getattr(type(model), "method_name", None)
    if not made_for or method is None or method() == made_for:
        return
    name, own = args.preset_name, method()
    presets = sorted(p for p, values in PRESETS.items() if values["method"] == own)
    theirs = f"{own}'s presets: {', '.join(presets)}; or " if presets else ""
    raise CSEError(f"these training arguments are preset {name}'s, made for method {made_for}, and the model is {own}: "
                   f"it would train at {made_for}'s settings. Build both with from_preset ({theirs}from_preset("
                   f"{name!r}, ..., method={own!r}) for these settings with {own}), or pass "
                   "ContrastiveTrainingArguments of your own.")
