"""Configuration of every hf_cse method model: everything that defines a trained model lives here,
so ``from_pretrained`` rebuilds it exactly."""

from __future__ import annotations

from dataclasses import field
from typing import Any

from transformers import AutoConfig, PretrainedConfig

from .heads import PROJECTORS
from .pooling import check_pooler

# Config keys of the wrapped encoder that carry dropout, per architecture family.
_DROPOUT_KEYS = {
    "distilbert": ("dropout", "attention_dropout"),
    "default": ("hidden_dropout_prob", "attention_probs_dropout_prob"),
}


def is_decoder_only(encoder_config: dict) -> bool:
    """Whether the encoder attends causally (GPT-2, Llama...): a causal-LM family with no masked-LM head, or a
    config flagged ``is_decoder``."""
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_MASKED_LM_MAPPING_NAMES,
    )

    model_type = encoder_config.get("model_type")
    if encoder_config.get("is_decoder"):
        return True
    return model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES and model_type not in MODEL_FOR_MASKED_LM_MAPPING_NAMES


class CSEConfig(PretrainedConfig):
    r"""Shared configuration of hf_cse models.

    Args:
        encoder_config: ``to_dict()`` of the wrapped encoder's config (BERT, RoBERTa, DistilBERT, MiniLM...).
        pooler_type: how the training embedding is read off the encoder (see ``hf_cse.models.pooling``).
        projector: training-time head on the pooled vector: ``"mlp"`` (SimCSE Linear+tanh), ``"linear"``
            (seed 002, N(0, 6e-3) init), ``"batchnorm"`` (DiffCSE App. A), ``"none"``.
        mlp_only_train: use the projector in training only; test embeddings are the raw pooled vector
            (SimCSE's ``--mlp_only_train``; what the five papers report for unsupervised models).
        loss: registry name of the contrastive loss (``hf_cse.losses.available_losses()``).
        loss_kwargs: its hyperparameters.
        dropout: if set, overrides the encoder's hidden and attention dropout (GS-InfoNCE's code uses
            0.2 for BERT; the papers otherwise keep the encoder's 0.1).
        off_dropout: ImSimCSE off-dropout sampling: a third encoder pass with dropout off gives
            ``z_nodropout`` for the negatives of ``off_dropout_infonce`` (seed 003 §3).
        off_dropout_grad: let gradients flow through that pass (the authors' code: yes).
        dcl_weight: weight lambda of the dimension-wise contrastive loss (seed 003 §4.3); 0 disables it.
        dcl_temperature, dcl_normalization: its tau_DCL and normalisation (see the ``dcl`` loss).
        fast_dropout: draw the encoder's CPU dropout masks 16 random bits per element instead of torch's
            per-element ``bernoulli_`` (same distribution up to p +- 7.7e-6; ~1.2x faster CPU training steps;
            no effect on CUDA). See ``hf_cse.models.fast_dropout``.
    """

    model_type = "hf_cse"
    method = "base"

    # Fields (transformers >= 5 configs are dataclasses: subclasses only change defaults).
    encoder_config: dict = field(default_factory=dict)
    pooler_type: str = "cls"
    projector: str = "mlp"
    mlp_only_train: bool = True
    loss: str = "infonce"
    loss_kwargs: dict = field(default_factory=dict)
    dropout: float | None = None
    off_dropout: bool = False
    off_dropout_grad: bool = True
    dcl_weight: float = 0.0
    dcl_temperature: float = 5.0
    dcl_normalization: str = "code"
    base_encoder: str | None = None
    fast_dropout: bool = True

    def __post_init__(self, **kwargs):
        kwargs.pop("method", None)  # written by to_dict for readers of config.json; the class decides
        super().__post_init__(**kwargs)
        self.encoder_config = dict(self.encoder_config or {})
        self.loss_kwargs = dict(self.loss_kwargs or {})
        check_pooler(self.pooler_type)
        if self.projector not in PROJECTORS:
            raise ValueError(f"Unknown projector {self.projector!r}. Valid projectors: {', '.join(PROJECTORS)}.")
        if self.dropout is not None and not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}.")
        if self.dcl_weight < 0:
            raise ValueError(f"dcl_weight must be >= 0, got {self.dcl_weight}.")
        if self.pooler_type in ("cls", "cls_before_pooler") and is_decoder_only(self.encoder_config):
            raise ValueError(
                f"pooler {self.pooler_type!r} reads the first token, which a causal (decoder-only) encoder "
                f"such as {self.encoder_config.get('model_type')!r} computes without seeing the rest of the "
                "sentence. Use --pooler_type avg."
            )

    def check_objectives(self) -> None:
        """Raise the loss's own ``ValueError`` if ``loss`` / ``loss_kwargs`` / DCL / off-dropout do not make a
        valid objective. Called by ``from_encoder`` (before any weights load), not at construction: a saved
        model must still load for inference where its (possibly user-registered) loss is unavailable."""
        from ..objectives import build_objectives  # objectives imports this module

        build_objectives(self)

    @property
    def hidden_size(self) -> int:  # type: ignore[override]
        """The encoder's output size, under whatever name its config uses (``dim``, GPT-2's ``n_embd``...)."""
        enc = self.encoder_config
        if "model_type" not in enc:  # not built by from_encoder: read the common names
            return int(enc.get("hidden_size", enc.get("dim", 0)))
        return int(self.build_encoder_config().hidden_size)

    @property
    def test_pooler(self) -> str:
        """The pooler used for evaluation and export: raw [CLS] for unsup CLS models with mlp_only_train."""
        if self.pooler_type == "cls" and (self.mlp_only_train or self.projector == "none"):
            return "cls_before_pooler"
        return self.pooler_type

    def build_encoder_config(self) -> PretrainedConfig:
        """The wrapped encoder's config, with the dropout override applied."""
        if "model_type" not in self.encoder_config:
            raise ValueError("encoder_config has no model_type; build the model with from_encoder(...).")
        enc = dict(self.encoder_config)
        model_type = enc.pop("model_type")
        cfg = AutoConfig.for_model(model_type, **enc)
        if self.dropout is not None:
            for key in _DROPOUT_KEYS.get(model_type, _DROPOUT_KEYS["default"]):
                setattr(cfg, key, self.dropout)
        return cfg

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        out["method"] = self.method
        return out
