"""Poolers: how a sentence vector is read off an encoder's hidden states (SimCSE's names).

* ``cls`` / ``cls_before_pooler``: the last layer's first token. They differ only in what the
  *model* does afterwards: with ``cls`` an hf_cse model applies its trained MLP at test time,
  ``cls_before_pooler`` returns the raw [CLS] vector (what the papers report for unsup models).
* ``avg``: mean of the last layer over non-padding tokens.
* ``avg_first_last``: mean of (first layer + last layer) / 2. "First layer" is ``hidden_states[1]``
  as in SimCSE's ``models.py``; the DiffCSE / ImSimCSE / GS forks use ``hidden_states[0]`` (the
  embedding output) -- pass ``first_layer=0`` for those.
* ``avg_top2``: mean of the last two layers.
* ``last``: the last layer at each row's last non-padding token (found from the attention mask, so left and right
  padding both work): the usual pooling of decoder (LLM) embedders, whose last token has seen the whole sentence.
"""

from __future__ import annotations

import torch

POOLERS = ("cls", "cls_before_pooler", "avg", "avg_first_last", "avg_top2", "last")


def check_pooler(pooler: str) -> str:
    if pooler not in POOLERS:
        raise ValueError(f"Unknown pooler {pooler!r}. Valid poolers: {', '.join(POOLERS)}.")
    return pooler


def applies_projector(pooler: str) -> bool:
    """What the test-time pooler ``"cls"`` means, decided here only: the pooled [CLS] vector goes through the
    model's trained head (an hf_cse projector; a plain encoder's own pooler layer, ``pooler_output``). Every other
    pooler (``cls_before_pooler`` included) returns the encoder's vector as it is."""
    return check_pooler(pooler) == "cls"


def needs_hidden_states(pooler: str) -> bool:
    """Whether the pooler reads layers other than the last (the encoder must output hidden states)."""
    return check_pooler(pooler) in ("avg_first_last", "avg_top2")


def _masked_mean(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * mask).sum(1) / mask.sum(1).clamp_min(1.0)


def pool(
    pooler: str,
    attention_mask: torch.Tensor,
    last_hidden_state: torch.Tensor,
    hidden_states: tuple[torch.Tensor, ...] | None = None,
    first_layer: int = 1,
) -> torch.Tensor:
    """Reduce ``(B, L, H)`` hidden states to ``(B, H)`` sentence vectors."""
    check_pooler(pooler)
    if pooler in ("cls", "cls_before_pooler"):
        return last_hidden_state[:, 0]
    if pooler == "avg":
        return _masked_mean(last_hidden_state, attention_mask)
    if pooler == "last":  # position of the last 1 in each mask row: L - 1 - (index of the first 1 from the right)
        last = attention_mask.shape[1] - 1 - attention_mask.flip(1).int().argmax(1)
        return last_hidden_state[torch.arange(last_hidden_state.shape[0], device=last.device), last]
    if hidden_states is None:
        raise ValueError(f"pooler {pooler!r} needs the encoder's hidden_states (output_hidden_states=True).")
    if pooler == "avg_first_last":
        return _masked_mean((hidden_states[first_layer] + hidden_states[-1]) / 2.0, attention_mask)
    return _masked_mean((hidden_states[-2] + hidden_states[-1]) / 2.0, attention_mask)
