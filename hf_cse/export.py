"""Export hf_cse models as standard sentence-transformers folders, with a model card, and push them to the Hub.

    python -m hf_cse.export outputs/simcse-infonce outputs/simcse-st --eval_results results.json
    hf-cse-export outputs/simcse-infonce outputs/simcse-st --push_to_hub me/simcse-minilm

What the export holds (written with sentence-transformers' own modules, so loading needs no custom code and
no ``trust_remote_code``):

* ``Transformer``: the trained encoder (``model.encoder``) and its tokenizer; ``max_seq_length`` is the encoder's
  limit (``max_position_embeddings`` minus RoBERTa's position offset, capped at 512), not the training length 32.
* ``Pooling``: what the method uses at test time (``config.test_pooler``): ``cls_before_pooler``/``cls`` -> CLS
  token, ``avg`` -> mean over tokens. ``avg_first_last``/``avg_top2`` mix layers and are refused (ExportError).
* ``Dense``: the projection head, only when the test embedding uses it (``mlp_only_train=False``) or with
  ``keep_projector=True``: SimCSE's MLP = Dense + tanh, seed 002's linear head = Dense, DiffCSE's BatchNorm head =
  two Dense modules with the (eval-mode) BatchNorm statistics folded in (exact).
* Nothing else: DiffCSE's discriminator/generator and other training-only parts are not exported.
* ``README.md``: the model card (:mod:`hf_cse.model_card`) and ``hf_cse_config.json`` (the full hf_cse config, for
  provenance).

The export is checked before it is committed: the folder is reloaded with ``SentenceTransformer`` and its vectors
compared with the model's own ``sentence_embedding``. It is written into a temporary folder beside the target and
renamed into place, so a failure leaves nothing behind; a non-empty target needs ``overwrite=True``.

Hub: :func:`push_export` uploads such a folder (``run_unsup.py --push_to_hub`` does it after training). The raw
hf_cse checkpoint can also be pushed with ``model.push_to_hub(repo)``; loading it back needs ``import hf_cse``
before ``AutoModel.from_pretrained(repo)`` (the classes are registered locally, not shipped as remote code: the
method modules import each other, which ``trust_remote_code`` folders cannot hold).
"""

from __future__ import annotations

import inspect
import json
import logging
import os
import shutil
import sys
import tempfile
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .model_card import read_eval_results, render_model_card, resolve_base_model
from .models.modes import eval_mode
from .plots import CURVES_FILE

logger = logging.getLogger(__name__)

TRAINING_INFO_FILE = "training_info.json"  # written by run_unsup.py next to the checkpoint; read by the CLI
HF_CSE_CONFIG_FILE = "hf_cse_config.json"
MAX_EXPORT_LENGTH = 512
# hf_cse test pooler -> sentence-transformers Pooling mode
ST_POOLING = {"cls_before_pooler": "cls", "cls": "cls", "avg": "mean"}
_POSITION_OFFSET = {"roberta": 2, "xlm-roberta": 2, "camembert": 2, "longformer": 2, "mpnet": 2}
# sentences the export is checked on (different lengths, so padding is exercised)
PROBE_SENTENCES = (
    "A man is playing a guitar.",
    "The quick brown fox jumps over the lazy dog near the river bank on a sunny afternoon.",
    "Two dogs run.",
    "Contrastive learning pulls two dropout views of the same sentence together.",
)


class ExportError(ValueError):
    """A model that cannot be exported as asked; the message says why and what to do instead."""


class HubPushError(RuntimeError):
    """A push to the Hugging Face Hub failed; the message says what to do."""


# --------------------------------------------------------------------------------------------- loading
def _load_model(model_or_path):
    """An hf_cse model object, loaded from a folder / Hub id when a path is given."""
    from .models import CSEPreTrainedModel, is_cse_checkpoint

    if isinstance(model_or_path, CSEPreTrainedModel):
        return model_or_path
    if isinstance(model_or_path, nn.Module):
        raise ExportError(
            f"to_sentence_transformer needs an hf_cse model (CSEPreTrainedModel), got {type(model_or_path).__name__}. "
            "A plain encoder can be packaged with sentence-transformers directly."
        )
    path = Path(str(model_or_path)).expanduser()
    if path.exists() and not is_cse_checkpoint(path):
        raise ExportError(
            f"{path} is not an hf_cse checkpoint (its config.json is missing or its model_type does not start with "
            "'hf_cse'). Give the output_dir of run_unsup.py or a folder saved with model.save_pretrained()."
        )
    from transformers import AutoModel

    model = AutoModel.from_pretrained(str(path) if path.exists() else str(model_or_path))
    if not isinstance(model, CSEPreTrainedModel):
        raise ExportError(f"{model_or_path} loaded as {type(model).__name__}, not an hf_cse model.")
    return model


def _model_tokenizer(model_or_path, model) -> tuple[Any, str | None, list[str]]:
    """The tokenizer saved with the checkpoint, else the base encoder's: ``(tokenizer, its name, errors)``."""
    from transformers import AutoTokenizer

    candidates = [model_or_path] if isinstance(model_or_path, (str, Path)) else []
    candidates += [model.config.base_encoder, getattr(model.encoder.config, "_name_or_path", None)]
    errors = []
    for name in dict.fromkeys(str(c) for c in candidates if c):
        try:
            return AutoTokenizer.from_pretrained(name), name, errors
        except (OSError, ValueError) as err:
            errors.append(f"{name}: {type(err).__name__}")
    return None, None, errors


def _load_tokenizer(tokenizer, model_or_path, model):
    """The tokenizer: the one given (an object, or a folder / Hub id that must load: no silent fall-back), else the
    checkpoint's, else the base encoder's; checked against the encoder (:func:`check_tokenizer_fits`)."""
    from transformers import AutoTokenizer

    if tokenizer is None:
        tok, _, errors = _model_tokenizer(model_or_path, model)
        if tok is None:
            raise ExportError(
                f"no tokenizer found for the export (tried {', '.join(errors) or 'nothing'}). Pass tokenizer= "
                "(an object or a folder/Hub id), e.g. the encoder the model was trained from."
            )
        check_tokenizer_fits(tok, model.encoder)
        return tok
    if not isinstance(tokenizer, (str, Path)):
        check_tokenizer_fits(tokenizer, model.encoder)
        return tokenizer
    try:
        tok = AutoTokenizer.from_pretrained(str(tokenizer))
    except (OSError, ValueError) as err:
        raise ExportError(f"tokenizer {tokenizer} could not be loaded ({type(err).__name__}: {err}); give a folder "
                          "holding a saved tokenizer or a Hub id, or leave it out to use the checkpoint's.") from err
    reference, reference_name, _ = _model_tokenizer(model_or_path, model)
    check_tokenizer_fits(tok, model.encoder, reference, reference_name)
    return tok


def check_tokenizer_fits(tokenizer, encoder, reference=None, reference_name: str | None = None) -> None:
    """Refuse a tokenizer made for another model (its ids would read the wrong embedding rows, silently): more tokens
    than the encoder's embedding matrix has rows, a padding / begin / end id other than the encoder config's, or
    (with ``reference``, the tokenizer saved with the model) another token -> id mapping."""
    rows = encoder.get_input_embeddings().num_embeddings
    fix = "use the tokenizer the model was trained with (leave the tokenizer out to take the checkpoint's)"
    if len(tokenizer) > rows:
        raise ExportError(f"the tokenizer has {len(tokenizer)} tokens but the encoder's embedding matrix only {rows} "
                          f"rows, so it belongs to another model; {fix}.")
    for attr in ("pad_token_id", "bos_token_id", "eos_token_id"):
        want, got = getattr(encoder.config, attr, None), getattr(tokenizer, attr, None)
        if isinstance(want, int) and isinstance(got, int) and want != got:
            raise ExportError(f"the tokenizer's {attr} is {got} but the encoder's config says {want}, so it belongs "
                              f"to another model; {fix}.")
    if reference is None:
        return
    vocab, expected = tokenizer.get_vocab(), reference.get_vocab()
    moved = sorted((t for t, i in expected.items() if vocab.get(t) != i), key=expected.get)  # added tokens are fine
    if moved:
        raise ExportError(f"the tokenizer's vocabulary differs from the one the model was saved with "
                          f"({reference_name}): {len(moved)} of its {len(expected)} tokens are missing or have another "
                          f"id (e.g. {moved[0]!r}: {vocab.get(moved[0])} instead of {expected[moved[0]]}); {fix}.")


def encoder_max_length(encoder_config, cap: int | None = MAX_EXPORT_LENGTH) -> int | None:
    """Longest input the encoder takes: ``max_position_embeddings`` minus the position offset of RoBERTa-style
    models (positions start after the padding index), capped at ``cap`` (512 for the export; ``None``: no cap, and
    ``None`` returned when the config names no position limit)."""
    cfg = encoder_config if isinstance(encoder_config, Mapping) else encoder_config.to_dict()
    max_pos = cfg.get("max_position_embeddings")
    if not isinstance(max_pos, int) or max_pos <= 0:
        return cap
    offset = _POSITION_OFFSET.get(cfg.get("model_type", ""), 0)
    return max(1, max_pos - offset if cap is None else min(max_pos - offset, cap))


# --------------------------------------------------------------------------------------------- modules
def _fold_batchnorm(linear: nn.Linear, bn: nn.BatchNorm1d) -> tuple[torch.Tensor, torch.Tensor]:
    """Weight and bias of ``bn(linear(x))`` with ``bn`` in eval mode, as one affine map (exact)."""
    if bn.running_mean is None or bn.running_var is None:
        raise ExportError("the BatchNorm projector has no running statistics (track_running_stats=False); "
                          "it cannot be exported as fixed Dense layers. Export without --keep_projector.")
    w = linear.weight.detach().double()
    b = linear.bias.detach().double() if linear.bias is not None else torch.zeros(w.shape[0], dtype=torch.float64)
    scale = 1.0 / torch.sqrt(bn.running_var.detach().double() + bn.eps)
    shift = -bn.running_mean.detach().double() * scale
    if bn.affine:
        gamma, beta = bn.weight.detach().double(), bn.bias.detach().double()
        scale, shift = scale * gamma, shift * gamma + beta
    return (w * scale[:, None]).float().cpu(), (b * scale + shift).float().cpu()


def projector_to_dense(projector: nn.Module) -> list[nn.Module]:
    """The projection head as sentence-transformers ``Dense`` modules (same function in eval mode)."""
    from sentence_transformers.sentence_transformer.modules import Dense

    from .models.heads import BatchNormProjector, LinearProjector, MLPProjector

    def dense(weight, bias, activation):
        return Dense(weight.shape[1], weight.shape[0], bias=True, activation_function=activation,
                     init_weight=weight.detach().float().cpu().clone(), init_bias=bias.detach().float().cpu().clone())

    if isinstance(projector, MLPProjector):  # SimCSE: tanh(W x + b)
        return [dense(projector.dense.weight, projector.dense.bias, nn.Tanh())]
    if isinstance(projector, LinearProjector):  # seed 002: W x + b
        return [dense(projector.dense.weight, projector.dense.bias, nn.Identity())]
    if isinstance(projector, BatchNormProjector):  # DiffCSE: Linear-BN-ReLU-Linear-BN, BN folded
        lin1, bn1, _, lin2, bn2 = projector.net
        w1, b1 = _fold_batchnorm(lin1, bn1)
        w2, b2 = _fold_batchnorm(lin2, bn2)
        return [dense(w1, b1, nn.ReLU()), dense(w2, b2, nn.Identity())]
    raise ExportError(f"no sentence-transformers equivalent for projector {type(projector).__name__}; "
                      "export without keep_projector.")


def _takes_pooling_flag(encoder: nn.Module) -> bool:
    return "add_pooling_layer" in inspect.signature(type(encoder).__init__).parameters


def _describe(config, pooling_mode: str, dense_modules: list, keep_projector: bool) -> dict[str, str]:
    if pooling_mode == "cls":
        pooling = "CLS token of the last layer (hf_cse `cls_before_pooler`)"
    else:
        pooling = "mean of the last layer over non-padding tokens (hf_cse `avg`)"
    if dense_modules:
        pooling += f", then the trained `{config.projector}` projection head"
        why = "kept on request (keep_projector)" if keep_projector and config.mlp_only_train else "used at test time"
        projector = f"`{config.projector}` head as {len(dense_modules)} Dense module(s), {why}"
    elif config.projector == "none":
        projector = "none (the method has no head)"
    else:
        projector = f"none: the training-only `{config.projector}` head was dropped (mlp_only_train)"
    return {"pooling_description": pooling, "projector_description": projector}


# --------------------------------------------------------------------------------------------- writing
def _first_missing_ancestor(path: Path) -> Path | None:
    missing = None
    for parent in [path, *path.parents]:
        if parent.exists():
            break
        missing = parent
    return missing


def _check_target(out_dir: Path, overwrite: bool) -> None:
    if out_dir.exists() and not out_dir.is_dir():
        raise FileExistsError(f"{out_dir} exists and is a file; choose a folder path for the export.")
    if out_dir.is_dir() and any(out_dir.iterdir()) and not overwrite:
        raise FileExistsError(
            f"{out_dir} is not empty; pass overwrite=True (--overwrite) to replace it, or choose another folder."
        )


@contextmanager
def _atomic_output_dir(out_dir: Path, overwrite: bool) -> Iterator[Path]:
    """Yield a temporary folder beside ``out_dir``; on success it replaces ``out_dir``, on failure it is removed."""
    _check_target(out_dir, overwrite)
    created = _first_missing_ancestor(out_dir.parent)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.partial-", dir=out_dir.parent))
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o777 & ~umask)  # mkdtemp makes 0700 folders; an export is a normal folder
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if created is not None:  # remove the parents this call created, if still empty
            for parent in [out_dir.parent, *out_dir.parent.parents]:
                try:
                    parent.rmdir()
                except OSError:
                    break
                if parent == created:
                    break
        raise
    old = None
    if out_dir.exists():
        old = out_dir.with_name(f".{out_dir.name}.old-{uuid.uuid4().hex[:8]}")
        out_dir.rename(old)
    try:
        tmp.rename(out_dir)
    except BaseException:
        if old is not None:
            old.rename(out_dir)
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)



def reference_embeddings(model, tokenizer, sentences, pooling_mode: str, with_projector: bool, max_length: int):
    """What the export must reproduce: hf_cse's own test embedding (CPU float32)."""
    batch = tokenizer(list(sentences), padding=True, truncation=True, max_length=max_length, return_tensors="pt")
    device = next(model.parameters()).device
    inputs = {k: v.to(device) for k, v in batch.items() if k in ("input_ids", "attention_mask", "token_type_ids")}
    pooler = "cls_before_pooler" if pooling_mode == "cls" else "avg"
    with eval_mode(model), torch.no_grad():
        emb = model.sentence_embedding(**inputs, pooler=pooler)
        if with_projector:
            emb = model.projector(emb)
    return emb.float().cpu()


def _verify(folder: Path, model, tokenizer, pooling_mode: str, with_projector: bool, max_length: int) -> None:
    """Reload the written folder with sentence-transformers and compare with the model's own embeddings."""
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(folder), device="cpu")
    got = st.encode(list(PROBE_SENTENCES), convert_to_tensor=True, show_progress_bar=False).float().cpu()
    want = reference_embeddings(model, tokenizer, PROBE_SENTENCES, pooling_mode, with_projector, max_length)
    if got.shape != want.shape:
        raise ExportError(f"export check failed: sentence-transformers gives shape {tuple(got.shape)}, the model "
                          f"{tuple(want.shape)}. This is a bug in hf_cse.export.")
    cos = torch.nn.functional.cosine_similarity(got, want, dim=-1).min().item()
    tol = 1e-4 if next(model.parameters()).dtype == torch.float32 else 2e-2
    if cos < 1 - tol:
        raise ExportError(f"export check failed: sentence-transformers vectors differ from the model's (min cosine "
                          f"{cos:.6f}). This is a bug in hf_cse.export; nothing was written.")


def _write_modules(folder: Path, encoder, tokenizer, pooling_mode: str, dense: list, max_seq_length: int) -> int:
    """Save Transformer + Pooling (+ Dense) as a sentence-transformers model in ``folder``; returns the
    Transformer's dimension. The encoder goes through a staging folder because sentence-transformers builds its
    Transformer module from a path."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer

    staging = folder / ".encoder"
    encoder.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    model_kwargs = {"add_pooling_layer": False} if _takes_pooling_flag(encoder) else {}
    transformer = Transformer(str(staging), max_seq_length=max_seq_length, model_kwargs=model_kwargs)
    dim = transformer.get_embedding_dimension()
    st = SentenceTransformer(modules=[transformer, Pooling(dim, pooling_mode=pooling_mode), *dense], device="cpu",
                             similarity_fn_name="cosine")
    st.save(str(folder), create_model_card=False)
    del st, transformer
    shutil.rmtree(staging)
    if model_kwargs:  # sentence-transformers does not save model_kwargs; without this the encoder would reload
        # with a randomly initialised (unused) BERT pooler and print a missing-weights report
        st_config = folder / "sentence_bert_config.json"
        data = json.loads(st_config.read_text())
        data["model_kwargs"] = model_kwargs
        st_config.write_text(json.dumps(data, indent=4) + "\n")
    return dim


def public_config_dict(config) -> dict[str, Any]:
    """The hf_cse config for publishing: local paths (base encoder, generator...) become Hub ids or folder names."""

    def public(value):
        if isinstance(value, str) and len(value) > 1 and Path(value).is_absolute():
            return resolve_base_model(value) or Path(value).name
        return value

    data = {k: public(v) for k, v in config.to_dict().items()}
    if isinstance(data.get("encoder_config"), dict):
        data["encoder_config"] = {k: public(v) for k, v in data["encoder_config"].items()}
    return data


def _same_or_inside(path: Path, folder: Path) -> bool:
    path, folder = path.resolve(), folder.resolve()
    return path == folder or folder in path.parents


def to_sentence_transformer(
    model_or_path,
    out_dir,
    tokenizer=None,
    keep_projector: bool = False,
    max_seq_length: int | None = None,
    overwrite: bool = False,
    eval_results: Mapping[str, Any] | str | Path | None = None,
    training_info: Mapping[str, Any] | None = None,
    *,
    repo_id: str | None = None,
    verify: bool = True,
) -> Path:
    """Write an hf_cse model as a sentence-transformers folder with a model card; returns the folder.

    Args:
        model_or_path: an hf_cse model, or a folder / Hub id of a saved one.
        out_dir: the folder to create (must be empty or absent unless ``overwrite``).
        tokenizer: tokenizer object or name; default: the checkpoint's, else the base encoder's.
        keep_projector: also keep a training-only projection head (the export then gives SimCSE's ``cls``
            embedding, MLP included). Heads used at test time (``mlp_only_train=False``) are always kept.
        max_seq_length: truncation length of the export; default: the encoder's limit (see module doc).
        overwrite: replace a non-empty ``out_dir``.
        eval_results: ``run_eval.py``'s ``results.json`` (path or dict), shown in the card and its metadata.
        training_info: what the run recorded (see :func:`training_info_from_run`), shown in the card.
        repo_id: Hub repo the card's usage snippet names (default: ``out_dir``).
        verify: reload the export and compare with the model before committing it.
    """
    out_dir = Path(out_dir).expanduser()
    _check_target(out_dir, overwrite)  # fail before loading anything
    if isinstance(model_or_path, (str, Path)) and Path(model_or_path).expanduser().exists():
        if _same_or_inside(Path(model_or_path).expanduser(), out_dir):
            raise ExportError(f"out_dir {out_dir} holds the checkpoint {model_or_path}; exporting there would "
                              "replace it. Choose another folder, e.g. <checkpoint>/sentence-transformers.")
    model = _load_model(model_or_path)
    tokenizer = _load_tokenizer(tokenizer, model_or_path, model)
    config = model.config
    test_pooler = config.test_pooler
    if test_pooler not in ST_POOLING:
        raise ExportError(
            f"this model's test-time pooler is {test_pooler!r}, which mixes several layers and has no plain "
            "sentence-transformers Pooling equivalent. Train with --pooler_type cls or avg to export it, or use "
            "the hf_cse checkpoint directly (hf_cse.evaluation accepts it)."
        )
    pooling_mode = ST_POOLING[test_pooler]
    uses_projector = test_pooler == "cls" and model.projector is not None  # the test embedding goes through it
    if keep_projector and model.projector is None:
        raise ExportError("keep_projector=True, but this model has no projection head (projector='none'); "
                          "drop keep_projector.")
    with_projector = uses_projector or keep_projector
    limit = encoder_max_length(model.encoder.config)
    if max_seq_length is None:
        max_seq_length = limit
    elif not 0 < int(max_seq_length) <= limit:
        raise ExportError(f"max_seq_length must be in [1, {limit}] (the encoder's limit), got {max_seq_length}.")
    eval_results = read_eval_results(eval_results)  # fail on a bad results file before any work

    with _atomic_output_dir(out_dir, overwrite) as tmp:
        dense = projector_to_dense(model.projector) if with_projector else []
        dim = _write_modules(tmp, model.encoder, tokenizer, pooling_mode, dense, int(max_seq_length))
        (tmp / HF_CSE_CONFIG_FILE).write_text(json.dumps(public_config_dict(config), indent=2, sort_keys=True) + "\n")
        if verify:
            _verify(tmp, model, tokenizer, pooling_mode, with_projector, int(max_seq_length))
        export = {
            "embedding_dimension": dense[-1].out_features if dense else dim,
            "max_seq_length": int(max_seq_length),
            "modules": [f"Transformer({type(model.encoder).__name__}, max_seq_length={int(max_seq_length)})",
                        f"Pooling(pooling_mode={pooling_mode!r})"]
                       + [f"Dense({d.in_features} -> {d.out_features}, {type(d.activation_function).__name__})"
                          for d in dense],
            **_describe(config, pooling_mode, dense, keep_projector),
            "limitations_extra": (
                "* **Projection head kept**: these embeddings include the training-time head; the papers report "
                "unsupervised results without it (`cls_before_pooler`)."
                if keep_projector and not uses_projector else ""
            ),
        }
        card = render_model_card(config, model_id=repo_id or str(out_dir), export=export,
                                 eval_results=eval_results, training_info=training_info,
                                 title=repo_id.split("/")[-1] if repo_id else None)
        (tmp / "README.md").write_text(card, encoding="utf-8")
    logger.info("exported %s model to %s (sentence-transformers)", getattr(config, "method", "hf_cse"), out_dir)
    return out_dir


# --------------------------------------------------------------------------------------------- training info
def _json_safe(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def training_info_from_run(training_args=None, data: Mapping[str, Any] | None = None,
                           train_metrics: Mapping[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    """The ``training_info`` dict of a run (JSON-safe): ``TrainingArguments.to_dict()`` without secrets, data set
    facts, final training metrics, world size, plus any ``extra`` keys (e.g. ``preset``)."""
    info: dict[str, Any] = {}
    if training_args is not None:
        args = training_args.to_dict() if hasattr(training_args, "to_dict") else dict(training_args)
        info["training_args"] = {k: v for k, v in args.items() if not k.endswith("token")}
        info["world_size"] = int(getattr(training_args, "world_size", 1) or 1)
    if data:
        info["data"] = dict(data)
    if train_metrics:
        info["train_metrics"] = dict(train_metrics)
    info.update({k: v for k, v in extra.items() if v is not None})
    return _json_safe(info)


def read_training_info(folder) -> dict[str, Any] | None:
    """The ``training_info.json`` run_unsup.py left in a checkpoint folder, if any."""
    path = Path(folder) / TRAINING_INFO_FILE
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


# --------------------------------------------------------------------------------------------- hub
def _set_card_model_id(readme: Path, repo_id: str) -> None:
    """Point the card's usage snippet and model-index at the Hub repo."""
    import re

    if not readme.is_file():
        return
    text = readme.read_text(encoding="utf-8")
    new = re.sub(r'SentenceTransformer\("[^"\n]*"\)', f'SentenceTransformer("{repo_id}")', text)
    new = re.sub(r"(?m)^(model-index:\n- name: ).*$", lambda m: m.group(1) + repo_id, new, count=1)
    if new != text:
        readme.write_text(new, encoding="utf-8")


def push_export(out_dir, repo_id: str, token: str | None = None, private: bool = False,
                commit_message: str = "Add sentence-transformers model exported by hf_cse") -> str:
    """Upload an exported folder to the Hub repo ``repo_id`` (created if needed); returns the repo URL."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError, LocalTokenNotFoundError, OfflineModeIsEnabled

    out = Path(out_dir)
    if not (out / "modules.json").is_file():
        raise ExportError(f"{out} is not a sentence-transformers export (no modules.json); create it with "
                          "hf_cse.export.to_sentence_transformer first.")
    login_hint = ("log in with `huggingface-cli login` (or `hf auth login`) or set the HF_TOKEN environment variable "
                  f"to a token with write access to {repo_id}")
    _set_card_model_id(out / "README.md", repo_id)
    api = HfApi()
    try:
        url = api.create_repo(repo_id, token=token, private=private, exist_ok=True)
        repo = getattr(url, "repo_id", None) or repo_id
        api.upload_folder(repo_id=repo, folder_path=str(out), repo_type="model", token=token,
                          commit_message=commit_message)
    except OfflineModeIsEnabled as err:
        raise HubPushError(
            f"cannot push to {repo_id}: Hugging Face Hub offline mode is on (HF_HUB_OFFLINE=1). Unset HF_HUB_OFFLINE "
            f"and retry, or upload the folder later with `hf upload {repo_id} {out}`."
        ) from err
    except LocalTokenNotFoundError as err:
        raise HubPushError(f"cannot push to {repo_id}: not logged in to the Hugging Face Hub; {login_hint}.") from err
    except HfHubHTTPError as err:
        status = getattr(getattr(err, "response", None), "status_code", None)
        if status in (401, 403):
            raise HubPushError(f"cannot push to {repo_id}: the Hub refused the credentials (HTTP {status}); "
                               f"{login_hint}.") from err
        raise HubPushError(f"cannot push to {repo_id}: the Hub answered HTTP {status} ({err}).") from err
    except ValueError as err:  # huggingface_hub's HFValidationError: malformed repo id
        raise HubPushError(f"cannot push to {repo_id!r}: {err}. Use a repo id like 'username/model-name'.") from err
    except OSError as err:  # connection problems
        raise HubPushError(f"cannot push to {repo_id}: {type(err).__name__}: {err}. Check the network connection "
                           f"and retry, or upload later with `hf upload {repo_id} {out}`.") from err
    return f"https://huggingface.co/{repo}"


# --------------------------------------------------------------------------------------------- run_unsup.py
def take_over_hub_push(training_args) -> str | None:
    """For ``--push_to_hub``: the Hub repo gets the sentence-transformers export (see :func:`export_after_training`),
    not the Trainer's raw checkpoints, so the Trainer's own pushing is switched off. Returns the repo id (default:
    the output folder's name, as the Trainer would) after checking, before training, that a push can work."""
    if not getattr(training_args, "push_to_hub", False):
        return None
    from huggingface_hub import constants, get_token

    repo_id = training_args.hub_model_id or Path(training_args.output_dir).absolute().name
    if constants.HF_HUB_OFFLINE:
        raise HubPushError(f"--push_to_hub {repo_id}: Hugging Face Hub offline mode is on (HF_HUB_OFFLINE=1); unset it "
                           "or drop --push_to_hub (push later with `hf-cse-export OUTPUT_DIR OUT --push_to_hub REPO`).")
    if not (training_args.hub_token or get_token()):
        raise HubPushError(f"--push_to_hub {repo_id}: not logged in to the Hugging Face Hub; log in with "
                           "`huggingface-cli login` (or `hf auth login`), set HF_TOKEN, or pass --hub_token.")
    training_args.push_to_hub = False
    return repo_id


def export_after_training(model, tokenizer, training_args, data_args=None, num_sentences: int | None = None,
                          train_metrics: Mapping[str, Any] | None = None, hub_repo: str | None = None,
                          **extra: Any) -> Path | None:
    """run_unsup.py's last step: record ``training_info.json`` beside the checkpoint, export to
    ``<output_dir>/sentence-transformers`` and push it when ``hub_repo`` is set (from :func:`take_over_hub_push`).

    A model whose pooler cannot be exported only logs a warning (the checkpoint is saved) unless a push was asked;
    an export already in the folder is then removed, so it cannot pass for this run's. ``training_info.json`` is
    replaced atomically (written beside, then renamed), never left half-written.
    """
    data = {}
    if data_args is not None:
        fields = vars(data_args)
        train_file = fields.get("train_file")
        data = {
            "source": Path(train_file).name if train_file else fields.get("dataset_name") or "hf_cse demo corpus",
            "dataset_name": fields.get("dataset_name"),
            "dataset_config_name": fields.get("dataset_config_name"),
            "num_sentences": num_sentences,
            "max_seq_length": fields.get("max_seq_length"),
            "max_train_samples": fields.get("max_train_samples"),
        }
        if fields.get("pair_column"):  # pair / triplet data: the columns that were the views, and rows not sentences
            kind = "triplets" if fields.get("negative_column") else "pairs"
            data["pair_data"] = {"kind": kind, "anchor": fields.get("text_column") or "text",
                                 "positive": fields["pair_column"], "hard_negative": fields.get("negative_column")}
            data["num_rows"], data["num_sentences"] = data.pop("num_sentences", None), None
        data = {k: v for k, v in data.items() if v is not None}
    info = training_info_from_run(training_args, data=data, train_metrics=train_metrics, **extra)
    output_dir = Path(training_args.output_dir)
    curves = output_dir / CURVES_FILE  # written by run_unsup.py; the card links the copy beside it
    if curves.is_file():
        info["training_curves"] = CURVES_FILE
    partial = output_dir / f".{TRAINING_INFO_FILE}.partial"
    partial.write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    os.replace(partial, output_dir / TRAINING_INFO_FILE)
    export_dir = output_dir / "sentence-transformers"
    try:
        out = to_sentence_transformer(model, export_dir, tokenizer=tokenizer,
                                      overwrite=True, training_info=info, repo_id=hub_repo)
    except ExportError as err:
        if hub_repo:
            raise
        if export_dir.is_dir():  # an earlier run's export must not sit beside this run's model
            shutil.rmtree(export_dir)
            logger.warning("removed the earlier export %s: it does not hold this run's model", export_dir)
        logger.warning("no sentence-transformers export: %s", err)
        return None
    logger.info("sentence-transformers export with model card: %s", out)
    if curves.is_file():
        shutil.copy2(curves, out / CURVES_FILE)
    if hub_repo:
        url = push_export(out, hub_repo, token=training_args.hub_token, private=bool(training_args.hub_private_repo))
        logger.info("pushed the sentence-transformers export to %s", url)
    return out


# --------------------------------------------------------------------------------------------- CLI
def main(argv: list[str] | None = None) -> int:
    """``hf-cse-export`` / ``python -m hf_cse.export`` (the command line lives in :mod:`hf_cse.export_cli`)."""
    from .export_cli import main as cli_main

    return cli_main(argv)


if __name__ == "__main__":
    sys.exit(main())
