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

    @property
    def hidden_size(self) -> int:  # type: ignore[override]
        enc = self.encoder_config
        return int(enc.get("hidden_size", enc.get("dim", 0)))

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
