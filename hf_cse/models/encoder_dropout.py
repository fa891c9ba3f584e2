"""The wrapped encoder's dropout, under whatever names its architecture's config gives it: the method config's
``dropout`` override sets all of them, and the two dropout views of a sentence (SimCSE's positives) are refused
where the encoder has no dropout at all -- they would be identical, the loss ~0 from the first step and nothing
learned (Llama-style decoders and ModernBERT ship with dropout 0; LLM2Vec's SimCSE stage sets it, 0.3).

Each architecture reads its own names: BERT ``hidden_dropout_prob`` / ``attention_probs_dropout_prob``, DistilBERT
and OPT ``dropout`` / ``attention_dropout``, GPT-2 ``resid_pdrop`` / ``embd_pdrop`` / ``attn_pdrop``, Llama and its
kin ``attention_dropout``, ModernBERT ``attention_dropout`` / ``mlp_dropout`` / ``embedding_dropout``. Other
architectures: every numeric config field named ``*dropout*`` or ``*pdrop*`` that is not a task head's
(:data:`HEAD_FIELDS`)."""

from __future__ import annotations

import logging
from typing import Any

from ..errors import CSEError

logger = logging.getLogger(__name__)

_BERT = ("hidden_dropout_prob", "attention_probs_dropout_prob")
_LLAMA = ("attention_dropout",)
#: the encoder's dropout fields per model type (the others: :func:`dropout_fields`'s search)
DROPOUT_FIELDS: dict[str, tuple[str, ...]] = {
    **dict.fromkeys(("bert", "roberta", "xlm-roberta", "electra", "mpnet", "camembert", "deberta-v2"), _BERT),
    **dict.fromkeys(("distilbert", "opt"), ("dropout", "attention_dropout")),
    "gpt2": ("resid_pdrop", "embd_pdrop", "attn_pdrop"),
    "phi3": ("resid_pdrop", "embd_pdrop", "attention_dropout"),
    **dict.fromkeys(("llama", "mistral", "mixtral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text"), _LLAMA),
    "modernbert": ("attention_dropout", "mlp_dropout", "embedding_dropout"),
}
#: parts of the names of dropout fields that belong to task heads (classifiers, QA, summaries), not the encoder
HEAD_FIELDS = ("classif", "qa_", "summary", "pooler")


def _is_rate(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def dropout_fields(encoder_config) -> tuple[str, ...]:
    """The names of the encoder's dropout rates in its config (empty: it has none)."""
    known = DROPOUT_FIELDS.get(getattr(encoder_config, "model_type", ""))
    if known is not None:
        return tuple(name for name in known if hasattr(encoder_config, name))
    return tuple(name for name, value in encoder_config.to_dict().items()
                 if ("dropout" in name or "pdrop" in name) and _is_rate(value)
                 and not any(part in name for part in HEAD_FIELDS))


def set_dropout(encoder_config, rate: float) -> None:
    """Set every dropout rate of the encoder's config to ``rate`` (in place)."""
    for name in dropout_fields(encoder_config):
        setattr(encoder_config, name, rate)


def encoder_dropout(encoder_config) -> dict[str, float]:
    """The encoder's dropout rates by config field."""
    return {name: float(getattr(encoder_config, name)) for name in dropout_fields(encoder_config)
            if _is_rate(getattr(encoder_config, name, None))}


def identical_views_problem(method, encoder_config, dropout: float | None) -> str | None:
    """Why training ``method`` (a method model class) on plain sentences would learn nothing: its two views of a
    sentence differ only by dropout, and the encoder (``encoder_config``, with the ``dropout`` override when not
    None) has none. In the library's terms, without the fix's spelling (the caller adds it); None when fine, and
    where ``dropout`` 0 was asked for (a deterministic check of the training step: :func:`check_views_differ` says
    it)."""
    if not getattr(method, "views_differ_by_dropout", True) or dropout is not None:
        return None
    if any(rate > 0 for rate in encoder_dropout(encoder_config).values()):
        return None
    rates = encoder_dropout(encoder_config)
    said = ", ".join(f"{name} {rate:g}" for name, rate in rates.items()) or "no dropout field in its config"
    name = method.method_name() if hasattr(method, "method_name") else method.__name__
    return (f"{name} trains on two dropout views of each sentence, but the {encoder_config.model_type!r} encoder has "
            f"no dropout ({said}): the views would be identical and nothing would be learned")


def check_views_differ(model) -> None:
    """:func:`identical_views_problem` of a method model about to train on sentences, refused naming the field."""
    config = model.config
    problem = identical_views_problem(type(model), config.encoder_config, config.dropout)
    if problem:
        raise CSEError(f"{problem}. Set the method config's dropout, e.g. dropout=0.1 (LLM2Vec's SimCSE uses 0.3).")
    if config.dropout == 0 and getattr(type(model), "views_differ_by_dropout", True):
        logger.warning("dropout=0 as asked: %s's two views of a sentence are identical, so it learns nothing but what "
                       "its other terms teach (a deterministic check of the step; train with dropout > 0)",
                       model.method_name() if hasattr(model, "method_name") else type(model).__name__)
