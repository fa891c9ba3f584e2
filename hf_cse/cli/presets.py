"""The papers' main settings as named presets (``run_unsup.py --preset NAME``).

A preset only supplies defaults: any flag given on the command line (or set by a ``--config`` file) wins. A preset is
a run description in the format of ``--config`` (:mod:`hf_cse.cli.run_config`: settings by flag name), checked as
one when it is applied (and every preset by ``tests/cli/test_run_config.py``). Values are BERT-base
settings from each paper and its authors' scripts; the
papers train on wiki1m for one epoch (DiffCSE: two) and select checkpoints on STS-B dev every
125 steps.
"""

from __future__ import annotations

from ..errors import closest_name

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
    # Gradient paradigm baseline (Li et al., ACL 2024, App. A.3: batch 128, lr 1e-5, Linear head N(0, 6e-3); m 0.3,
    # tau 0.05, r 1 as §3.2). It trains the authors' code form (sg.w_gd.w_w.w_r), with which the paper's numbers were
    # made: both views anchors, each direction reduced over its active anchors (--symmetric False --reduction
    # anchor_mean is the printed one-directional eq. 5; see the loss's docstring).
    "paradigm_bert": {**_COMMON, "method": "simcse", "loss": "paradigm", "projector": "linear",
                      "per_device_train_batch_size": 128, "learning_rate": 1e-5,
                      "temperature": 0.05, "m": 0.3, "r": 1.0, "symmetric": True, "reduction": "active_entry_mean"},
}


def drop_unused_preset_values(preset: str | None, typed: set[str], loss: str, other_methods_flags: set[str],
                              *arg_objects) -> list[str]:
    """Unset (``None`` = the default) the preset's values that the chosen loss or method does not take
    (``other_methods_flags``: :func:`hf_cse.cli.arguments.method_only_flags` of the method), unless the user typed
    them (``typed``: the flags given on the command line), so ``--preset focal_infonce_bert --loss infonce`` drops the
    preset's ``m`` instead of failing on a flag nobody gave. Returns the dropped names."""
    if preset is None:
        return []
    from ..losses import available_losses, get_loss_class, loss_hyperparameters
    from ..losses.base import NO_DROPOUT_INPUT

    values = PRESETS[preset]
    every_loss_flag = {name for other in available_losses() for name in loss_hyperparameters(other)}
    unused = {k for k in values if k in every_loss_flag and k not in loss_hyperparameters(loss)}
    unused |= other_methods_flags & values.keys()  # e.g. DiffCSE's fields with --method simcse
    if NO_DROPOUT_INPUT not in get_loss_class(loss).extra_inputs:  # off-dropout negatives only feed such losses
        unused |= {"off_dropout"} & values.keys()
    dropped = sorted(unused - typed)
    for args in arg_objects:
        for name in dropped:
            if hasattr(args, name):
                setattr(args, name, None)
    return dropped


def unknown_preset(name: str) -> str:
    """The refusal of a ``--preset`` that is none of :data:`PRESETS`, with the closest one."""
    close = closest_name(name, PRESETS)
    hint = f"did you mean {close!r}? " if close else ""
    return f"unknown --preset {name!r}; {hint}presets: {', '.join(sorted(PRESETS))}"
