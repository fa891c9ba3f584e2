"""Method models: one ``PreTrainedModel`` subclass per method, sharing :class:`CSEConfig`.

Importing this package registers every config/model with ``AutoConfig`` / ``AutoModel``, so
``AutoModel.from_pretrained(folder)`` reloads any saved hf_cse model.
"""

from __future__ import annotations

from transformers import AutoConfig, AutoModel

from .base import CSEOutput, CSEPreTrainedModel
from .config import CSEConfig
from .diffcse import DiffCSEConfig, DiffCSEModel
from .imsimcse import ImSimCSEConfig, ImSimCSEModel
from .pooling import POOLERS, pool
from .simcse import SimCSEConfig, SimCSEModel

METHODS: dict[str, type[CSEPreTrainedModel]] = {
    "simcse": SimCSEModel,
    "imsimcse": ImSimCSEModel,
    "diffcse": DiffCSEModel,
}


def _register(config_cls: type[CSEConfig], model_cls: type[CSEPreTrainedModel]) -> None:
    AutoConfig.register(config_cls.model_type, config_cls, exist_ok=True)
    AutoModel.register(config_cls, model_cls, exist_ok=True)


for _model_cls in METHODS.values():
    _register(_model_cls.config_class, _model_cls)


def get_method(name: str) -> type[CSEPreTrainedModel]:
    if name not in METHODS:
        raise ValueError(f"Unknown method {name!r}. Available methods: {', '.join(sorted(METHODS))}.")
    return METHODS[name]


def is_cse_checkpoint(path) -> bool:
    """Whether a folder holds a saved hf_cse model (its config.json model_type starts with 'hf_cse')."""
    import json
    from pathlib import Path

    cfg = Path(path) / "config.json"
    if not cfg.is_file():
        return False
    return str(json.loads(cfg.read_text()).get("model_type", "")).startswith("hf_cse")


__all__ = [
    "CSEConfig",
    "CSEOutput",
    "CSEPreTrainedModel",
    "DiffCSEConfig",
    "DiffCSEModel",
    "ImSimCSEConfig",
    "ImSimCSEModel",
    "METHODS",
    "POOLERS",
    "SimCSEConfig",
    "SimCSEModel",
    "get_method",
    "is_cse_checkpoint",
    "pool",
]
