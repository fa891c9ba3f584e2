"""Padding a batch of token rows into tensors: the collators' and the dev encoder's, in the training loop's critical
path (a GPU waits on it when the host is slower than its step)."""

from __future__ import annotations

import copy
from itertools import chain
from typing import Any

import torch
from transformers import PreTrainedTokenizerBase
from transformers.utils import logging as hf_logging

from .encoders import positions_count_padding, takes_token_type_ids
from .files import DataError
from .seams import with_own_backend

logger = hf_logging.get_logger(__name__)


def pad_where_positions_allow(tokenizer: PreTrainedTokenizerBase, encoder_config: Any) -> None:
    """A left-padding tokenizer pads on the right for an encoder whose learned positions count the padding
    (:func:`hf_cse.encoders.positions_count_padding`, GPT-2, BERT): else a sentence's embedding would depend on the
    length of the others in its batch. Changed on the training tokenizer, which the checkpoints and the export save;
    said once in the log. Every pooler reads the real tokens from the attention mask, on either side."""
    if not _left_padding_counts(tokenizer, encoder_config):
        return
    tokenizer.padding_side = "right"
    if hasattr(tokenizer, "init_kwargs"):  # what save_pretrained writes
        tokenizer.init_kwargs["padding_side"] = "right"
    logger.warning("the tokenizer pads on the left, but the %r encoder numbers its learned positions from the start "
                   "of the padded row (a sentence's embedding would depend on its batch): padding on the right",
                   _model_type(encoder_config))


def _left_padding_counts(tokenizer: PreTrainedTokenizerBase, encoder_config: Any) -> bool:
    """Whether ``tokenizer`` pads on the left for an encoder whose learned positions count that padding."""
    return getattr(tokenizer, "padding_side", None) == "left" and positions_count_padding(encoder_config)


def padding_where_positions_allow(tokenizer: PreTrainedTokenizerBase, encoder_config: Any):
    """``tokenizer``, or where :func:`pad_where_positions_allow` would change it, a copy of it so changed: a model is
    scored with a tokenizer the caller keeps as it was."""
    if not _left_padding_counts(tokenizer, encoder_config):
        return tokenizer
    copied = _own_copy(tokenizer)
    pad_where_positions_allow(copied, encoder_config)
    return copied


def without_unread_segment_ids(tokenizer: PreTrainedTokenizerBase, encoder_config: Any):
    """``tokenizer``, or a copy that makes no ``token_type_ids`` where the encoder has no segment embeddings
    (:func:`hf_cse.encoders.takes_token_type_ids`) but the tokenizer makes them (a BERT-style tokenizer beside
    GPT-2): sentence-transformers hands every input the tokenizer makes to the encoder, and GPT-2 adds the embedding
    of token 0 to every position for segment ids of 0, while hf_cse leaves them out."""
    names = list(getattr(tokenizer, "model_input_names", []))
    if "token_type_ids" not in names or takes_token_type_ids(encoder_config):
        return tokenizer
    copied = _own_copy(tokenizer)
    copied.model_input_names = [name for name in names if name != "token_type_ids"]
    copied.init_kwargs["model_input_names"] = copied.model_input_names
    return copied


def check_can_pad(tokenizer: PreTrainedTokenizerBase) -> None:
    """Refuse a tokenizer with neither a padding nor an end-of-text token (:func:`ensure_pad_token` has nothing to pad
    batches with); cheap, so checked as soon as the tokenizer loads, before any weights."""
    if tokenizer.pad_token is None and tokenizer.eos_token is None:
        raise DataError(f"the tokenizer ({type(tokenizer).__name__}) has neither a padding nor an end-of-text token "
                       "to pad batches with: give it one and save it with the model (tokenizer.pad_token = "
                       "tokenizer.unk_token, or another token of its vocabulary; "
                       "tokenizer.save_pretrained(model_folder)).")


def ensure_pad_token(tokenizer: PreTrainedTokenizerBase) -> None:
    """Causal-LM tokenizers (GPT-2, Llama...) have no padding token. Padded positions are masked out of attention and
    pooling, so the end-of-text token serves as one (the usual choice); said once in the log. Changes ``tokenizer``
    (training's, which the checkpoints save); :func:`with_pad_token` leaves the caller's as it is."""
    if tokenizer.pad_token is not None:
        return
    check_can_pad(tokenizer)
    tokenizer.pad_token = tokenizer.eos_token
    logger.warning("the tokenizer has no padding token: padding with its end-of-text token %r (masked out)",
                   tokenizer.eos_token)


def with_pad_token(tokenizer: PreTrainedTokenizerBase):
    """``tokenizer``, or where it has no padding token, a copy of it that pads with its end-of-text token as training
    does (:func:`ensure_pad_token`): a model is scored with the padding it trained with, and the caller's tokenizer
    is kept as it was."""
    if tokenizer.pad_token is not None:
        return tokenizer
    check_can_pad(tokenizer)
    copied = _own_copy(tokenizer)
    ensure_pad_token(copied)
    return copied


def _own_copy(tokenizer: PreTrainedTokenizerBase):
    """A copy of ``tokenizer`` whose settings change without the caller's: its own ``init_kwargs`` (what
    save_pretrained writes) and backend (a fast tokenizer's padding and truncation are set on it at each call)."""
    copied = copy.copy(tokenizer)
    copied.init_kwargs = dict(getattr(tokenizer, "init_kwargs", {}))
    with_own_backend(copied)
    return copied


def _model_type(encoder_config: Any) -> str:
    return str(getattr(encoder_config, "model_type", None) or dict(encoder_config or {}).get("model_type", ""))


def pad_token_rows(tokenizer: PreTrainedTokenizerBase,
                   features: list[dict[str, Any]] | dict[str, list]) -> dict[str, torch.Tensor]:
    """``tokenizer.pad(features, padding=True, return_tensors="pt")``, the same tensors, without its Python work per
    row (0.66 -> 0.24 ms a batch of 64 on a CPU, in the training loop's critical path). ``features``: rows (dicts) or
    columns (a dict of lists of rows). Rows of plain lists of ints in ``input_ids`` / ``attention_mask`` /
    ``token_type_ids`` take the fast path; anything else goes to the tokenizer."""
    if isinstance(features, dict):
        columns = {k: list(v) if isinstance(v, (list, tuple)) else v for k, v in features.items()}
    elif isinstance(features, list) and features and isinstance(features[0], dict):
        columns = {k: [f.get(k) for f in features] for k in features[0]}
    else:
        columns = {}
    keys = list(columns)
    pads = {"input_ids": tokenizer.pad_token_id, "attention_mask": 0, "token_type_ids": tokenizer.pad_token_type_id}
    if ("input_ids" not in keys or any(pads.get(k) is None for k in keys)  # a column it does not pad, no pad id
            or tokenizer.padding_side not in ("right", "left")
            or ("attention_mask" not in keys and "attention_mask" in tokenizer.model_input_names)
            or not all(type(rows) is list and all(type(row) is list for row in rows) for rows in columns.values())):
        return tokenizer.pad(features, padding=True, return_tensors="pt")  # its output, or its error
    widths = [len(row) for row in columns["input_ids"]]
    if 0 in widths or any(list(map(len, rows)) != widths for rows in columns.values()):
        return tokenizer.pad(features, padding=True, return_tensors="pt")
    lengths = torch.tensor(widths)
    positions = torch.arange(max(widths))
    filled = (positions < lengths[:, None]) if tokenizer.padding_side == "right" else (
        positions >= (max(widths) - lengths)[:, None])
    out = {}
    for key, rows in columns.items():
        constant = rows[0][0]
        if all(min(row) == constant == max(row) for row in rows):  # a mask of ones, segment ids of zeros: no copy
            out[key] = torch.where(filled, constant, pads[key])
        else:
            out[key] = torch.full(filled.shape, pads[key], dtype=torch.long)
            out[key][filled] = torch.tensor(list(chain.from_iterable(rows)), dtype=torch.long)
    return out
