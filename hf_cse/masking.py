"""BERT's masking of tokens (80 % [MASK], 10 % a random token, 10 % kept; Devlin et al., NAACL 2019, Sec. 3.1),
shared by SimCSE's auxiliary masked-LM objective (:class:`MaskedLMCollator`, :mod:`hf_cse.models.mlm`) and
DiffCSE's ``replace`` edit (:mod:`hf_cse.models.diffcse.edits`). Special tokens ([CLS], [SEP], padding...) are
never masked.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from transformers import PreTrainedTokenizerBase

from .errors import CSEError


def special_tokens_mask(input_ids: torch.Tensor, tokenizer: PreTrainedTokenizerBase) -> torch.Tensor:
    """Boolean mask of the tokenizer's special ids (incl. padding) -- positions that are never edited."""
    special = torch.tensor(sorted(set(tokenizer.all_special_ids)), dtype=input_ids.dtype)
    return torch.isin(input_ids, special)


def mask_tokens(
    input_ids: torch.Tensor,
    tokenizer: PreTrainedTokenizerBase,
    masking_ratio: float,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """BERT's 80/10/10 masking of ``input_ids`` (any shape), independently per position; a new tensor.

    As SimCSE/DiffCSE's ``mask_tokens`` (DiffCSE ``train.py:512-545``); the random tokens come from the whole
    vocabulary as in BERT.
    """
    return masked_lm_inputs(input_ids, tokenizer, masking_ratio, generator)[0]


def masked_lm_inputs(
    input_ids: torch.Tensor,
    tokenizer: PreTrainedTokenizerBase,
    masking_ratio: float,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`mask_tokens` and the masked-LM labels: the original token at every selected position, -100
    elsewhere (SimCSE's ``train.py`` ``mask_tokens``, which draws in the same order)."""
    ids = input_ids.clone()
    probs = torch.full(ids.shape, float(masking_ratio))
    probs.masked_fill_(special_tokens_mask(ids, tokenizer), 0.0)
    selected = torch.bernoulli(probs, generator=generator).bool()
    labels = input_ids.masked_fill(~selected, -100)
    to_mask = torch.bernoulli(torch.full(ids.shape, 0.8), generator=generator).bool() & selected
    ids[to_mask] = tokenizer.mask_token_id
    to_random = torch.bernoulli(torch.full(ids.shape, 0.5), generator=generator).bool() & selected & ~to_mask
    ids[to_random] = torch.randint(len(tokenizer), ids.shape, dtype=ids.dtype, generator=generator)[to_random]
    return ids, labels


def with_masked_lm(collator, tokenizer: PreTrainedTokenizerBase, config):
    """``collator``, wrapped in :class:`MaskedLMCollator` when the model's config asks for the MLM objective."""
    if not getattr(config, "do_mlm", False):
        return collator
    return MaskedLMCollator(collator, tokenizer, config.mlm_probability)


@dataclass
class MaskedLMCollator:
    """Wraps a two-view / pair collator for SimCSE's auxiliary MLM objective (:mod:`hf_cse.models.mlm`): adds
    ``mlm_input_ids`` and ``mlm_labels`` of the shape of ``input_ids`` ``(B, views, L)``, every row masked on its
    own (the authors mask the flattened ``B * views`` rows)."""

    collator: Any
    tokenizer: PreTrainedTokenizerBase
    mlm_probability: float = 0.15

    def __post_init__(self):
        if self.tokenizer.mask_token_id is None:
            raise CSEError(f"the tokenizer ({type(self.tokenizer).__name__}) has no mask token; the MLM objective "
                           "(do_mlm) needs one.")

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        batch = self.collator(features)
        batch["mlm_input_ids"], batch["mlm_labels"] = masked_lm_inputs(batch["input_ids"], self.tokenizer,
                                                                       self.mlm_probability)
        return batch
