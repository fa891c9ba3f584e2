"""The layout of a training batch: each input tensor ``(N, views, L)``, the views of each sentence (two dropout
views; anchor, positive[, negative])."""

from __future__ import annotations

import torch

from ..errors import CSEError


def check_training_batch(input_ids: torch.Tensor, collator: str, training: bool) -> None:
    """A model's forward trains on views of each sentence. Sentences to embed (one view, ``(N, L)``, outside training:
    a sentence-transformers model made from the run's folder or from a folder ``save_model`` wrote sends them) are
    refused with the ways to embed them; flat batches in training (a ``data_collator`` of one's own) with the
    collator to use."""
    if input_ids.dim() == 3:
        return
    if input_ids.dim() == 2 and not training:
        raise CSEError(f"this is an hf_cse training model (its forward takes views of each sentence; got input_ids "
                       f"of shape {tuple(input_ids.shape)}), not a sentence-transformers one: embed sentences with "
                       "hf_cse.evaluation.SentenceEncoder.from_pretrained(FOLDER) or the model's sentence_embedding, "
                       "or export it, hf_cse.export.to_sentence_transformer(FOLDER, OUT) (hf-cse-export FOLDER OUT), "
                       "and load OUT (a finished run's export is '<output_dir>/sentence-transformers').")
    raise CSEError(f"training batches must have input_ids of shape (batch, views, length); got "
                   f"{tuple(input_ids.shape)}: use {collator}, or a data_collator of your own that gives each row's "
                   "views.")


def first_view(*tensors: torch.Tensor | None) -> tuple[torch.Tensor | None, ...]:
    """The first view ``(N, L)`` of each batch tensor (None stays None): the sentences themselves, for a pass of
    their own (dropout off, the momentum encoder)."""
    return tuple(None if t is None else t[:, 0] for t in tensors)
