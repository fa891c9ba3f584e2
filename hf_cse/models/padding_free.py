"""Padding-free encoder forward: the linear layers see only the real tokens of a batch.

Why: a batch of raw sentences padded to its longest row is 15-20 % padding (18.6 % of the tokens of a SimCSE
batch of Wikipedia sentences at length 32, ``benchmarks/README.md``), and every Q/K/V/output/feed-forward matrix
product, LayerNorm, GELU and dropout computes on those positions for nothing. Here the batch's real tokens are
packed into one row ``(1, T)`` (``T`` = the number of real tokens) before the embeddings; every layer's linear
work runs on the ``T`` tokens, and only the attention itself (a small share at sentence lengths) puts them back
into the padded ``(B, heads, L, d)`` layout, runs the encoder's SDPA attention with the padding mask, and packs
its output again. The last hidden state (and, for poolers that need them, every layer's) comes back in the padded
layout with zeros at the padding, so poolers and losses are unchanged.

The result is the padded forward's: the same tokens, the same absolute positions (the ids the encoder would have
computed for the padded batch, gathered) and the same attention; only the matrix products' row counts change, so
fp32 results agree to rounding (``tests/models/test_padding_free.py`` checks every supported architecture, gradients
included). It applies where that was checked: the encoder families of :data:`POSITION_STYLES` under hf_cse's SDPA
attention (the default), outside ``torch.compile`` (a packed row's length changes every batch, which would
recompile), on CPU (on a GPU, finding the real tokens, ``nonzero``, waits for the device once per forward, and a
GPU step at sentence lengths is bound by the host, ~5 % of the GEMM peak: ``benchmarks/README.md``, section 6;
forced on an H200 it changed the step by x0.92-1.10 at batch 64 and 1024 with 29 % padding, within the noise:
section 12). Anything else runs padded. ``CSEConfig(padding_free=False)`` / ``padding_free false`` turns it off.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Literal

import torch
from torch import nn

from ..encoders import takes_token_type_ids
from ..seams import attention_implementation, set_attention_implementation

PACKED_ROWS_KWARG = "hf_cse_rows"

# How each architecture numbers the positions of a padded batch, which the packed row must reproduce:
# "from_zero": 0, 1, ... along the padded row (BERT's default position_ids, padding or not);
# "after_padding_idx": padding_idx + 1, ... over the non-padding ids (RoBERTa's create_position_ids_from_input_ids).
PositionStyle = Literal["from_zero", "after_padding_idx"]
POSITION_STYLES: dict[str, PositionStyle] = {
    "bert": "from_zero",
    "albert": "from_zero",
    "distilbert": "from_zero",
    "electra": "from_zero",
    "ernie": "from_zero",
    "nomic_bert": "from_zero",
    "roc_bert": "from_zero",
    "roberta": "after_padding_idx",
    "camembert": "after_padding_idx",
    "data2vec-text": "after_padding_idx",
    "xlm-roberta": "after_padding_idx",
    "xlm-roberta-xl": "after_padding_idx",
}
#: devices it runs on: a GPU's packed index is a host sync per forward, and no gain was measured there (module
#: docstring); benchmarks/gpu_check.py widens it to measure that
DEVICE_TYPES: tuple[str, ...] = ("cpu",)
# transformers' SDPA attention taking packed rows, for an encoder without the fast dropout (whose own attention,
# hf_cse.models.fast_dropout's, takes them too)
PACKED_SDPA = "hf_cse_packed_sdpa"


@dataclass
class PackedRows:
    """Where the real tokens of a padded ``(B, L)`` batch sit: ``index`` into the flattened batch, in row order."""

    batch: int
    length: int
    index: torch.Tensor
    attention_mask: torch.Tensor  # (B, 1, 1, L) bool, True = attend: SDPA's padding mask

    @classmethod
    def from_mask(cls, attention_mask: torch.Tensor) -> "PackedRows":
        batch, length = attention_mask.shape
        index = attention_mask.reshape(-1).nonzero().squeeze(1)
        return cls(batch, length, index, attention_mask.bool()[:, None, None, :])

    def pack(self, padded: torch.Tensor) -> torch.Tensor:
        """``(B, L, ...)`` -> ``(1, T, ...)``."""
        return padded.reshape(self.batch * self.length, *padded.shape[2:]).index_select(0, self.index).unsqueeze(0)

    def unpack(self, packed: torch.Tensor) -> torch.Tensor:
        """``(1, T, ...)`` -> ``(B, L, ...)``, zeros at the padding."""
        flat = packed[0]
        out = flat.new_zeros(self.batch * self.length, *flat.shape[1:]).index_copy(0, self.index, flat)
        return out.view(self.batch, self.length, *flat.shape[1:])

    def heads_to_padded(self, packed: torch.Tensor) -> torch.Tensor:
        """Attention input ``(1, heads, T, d)`` -> ``(B, heads, L, d)``."""
        return self.unpack(packed.transpose(1, 2)).transpose(1, 2)


def with_packed_rows(attention: Callable) -> Callable:
    """A transformers attention function that also runs on packed rows: given ``hf_cse_rows``, the query, key and
    value ``(1, heads, T, d)`` go back to the padded layout, ``attention`` runs with the padding mask, and its
    output ``(B, L, heads, d)`` is packed again to ``(1, T, heads, d)``."""

    def packed_attention(module, query, key, value, attention_mask, *args, **kwargs):
        rows: PackedRows | None = kwargs.pop(PACKED_ROWS_KWARG, None)
        if rows is None:
            return attention(module, query, key, value, attention_mask, *args, **kwargs)
        out, weights = attention(module, rows.heads_to_padded(query), rows.heads_to_padded(key),
                                 rows.heads_to_padded(value), rows.attention_mask, *args, **kwargs)
        return rows.pack(out), weights

    packed_attention.__doc__ = attention.__doc__
    packed_attention.takes_packed_rows = True
    return packed_attention


def unsupported_reason(encoder: nn.Module, device_type: str = "cpu") -> str | None:
    """Why ``encoder`` cannot run padding-free on ``device_type``, or None when it can."""
    if device_type not in DEVICE_TYPES:
        return (f"runs on CPU only: on {device_type} the packed index is a host sync per batch, and a GPU step at "
                "sentence lengths is bound by the host, not by its matrix products")
    config = getattr(encoder, "config", None)
    model_type = getattr(config, "model_type", None)
    if model_type not in POSITION_STYLES:
        return f"model type {model_type!r} is not one whose packed forward was checked"
    if getattr(config, "is_decoder", False):
        return "a decoder's causal attention"
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    attention = attention_implementation(config)
    if not getattr(ALL_ATTENTION_FUNCTIONS.get(attention), "takes_packed_rows", False):
        return f"attention {attention!r} (padding-free runs under sdpa)"
    return None


def _position_ids(encoder_config: Any, input_ids: torch.Tensor) -> torch.Tensor:
    """The position ids the encoder computes for the padded batch by itself."""
    if POSITION_STYLES[encoder_config.model_type] == "after_padding_idx":
        real = input_ids.ne(encoder_config.pad_token_id).long()
        return real.cumsum(1) * real + encoder_config.pad_token_id
    return torch.arange(input_ids.shape[1], device=input_ids.device).expand_as(input_ids)


@dataclass
class PaddedOutput:
    """The padded forward's outputs that poolers read: ``(B, L, H)`` tensors with zeros at the padding."""

    last_hidden_state: torch.Tensor
    hidden_states: tuple[torch.Tensor, ...] | None = None


def packed_forward(encoder: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                   token_type_ids: torch.Tensor | None = None, output_hidden_states: bool = False) -> PaddedOutput:
    """``encoder(input_ids, attention_mask, ...)`` computed on the real tokens only (see the module docstring);
    ``encoder`` must pass :func:`unsupported_reason`."""
    rows = PackedRows.from_mask(attention_mask)
    config = encoder.config
    kwargs = {
        "input_ids": rows.pack(input_ids),
        "position_ids": rows.pack(_position_ids(config, input_ids)),
        PACKED_ROWS_KWARG: rows,
    }
    if takes_token_type_ids(config):  # given always: the encoder's zero buffer is only as long as its positions
        kwargs["token_type_ids"] = rows.pack(torch.zeros_like(input_ids) if token_type_ids is None else token_type_ids)
    out = encoder(**kwargs, output_hidden_states=output_hidden_states, return_dict=True)
    hidden_states = None
    if output_hidden_states:
        hidden_states = tuple(rows.unpack(h) for h in out.hidden_states)
    return PaddedOutput(rows.unpack(out.last_hidden_state), hidden_states)


def register_sdpa_attention(name: str, attention: Callable) -> None:
    """Register ``attention`` (SDPA or a variant of it), made to take packed rows, as transformers attention
    ``name`` with SDPA's mask."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    if name not in AttentionInterface().valid_keys():
        AttentionInterface.register(name, with_packed_rows(attention))
        ALL_MASK_ATTENTION_FUNCTIONS.register(name, sdpa_mask)


def install_packed_attention(encoder: nn.Module) -> None:
    """Route an SDPA encoder's attention through one that takes packed rows (hf_cse's fast-dropout attention
    already does). Idempotent."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    config = getattr(encoder, "config", None)
    if attention_implementation(config) == "sdpa":
        register_sdpa_attention(PACKED_SDPA, sdpa_attention_forward)
        set_attention_implementation(config, PACKED_SDPA)


def describe_padding_free(encoder: nn.Module, enabled: bool, why_off: str = "padding_free false",
                          device_type: str = "cpu") -> str:
    """The log line's words: whether the encoder runs padding-free on ``device_type``, and why not (``why_off``:
    why it was not asked for)."""
    if not enabled:
        return f"off ({why_off})"
    reason = unsupported_reason(encoder, device_type)
    return "on (linear layers on the real tokens only)" if reason is None else f"off: {reason}"
