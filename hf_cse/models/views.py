"""The layout of a training batch: each input tensor ``(N, views, L)``, the views of each sentence (two dropout
views; anchor, positive[, negative])."""

from __future__ import annotations

import torch

from ..errors import CSEError


def check_training_batch(input_ids: torch.Tensor, collator: str) -> None:
    """A model's forward trains on views of each sentence; sentences to embed (a sentence-transformers model made
    from the run's own folder sends them) are refused with the way to embed them."""
    if input_ids.dim() == 3:
        return
    embed = (" To embed sentences, load the run's sentence-transformers export (SentenceTransformer('<output_dir>/"
             "sentence-transformers'); a folder save_model wrote: export it first, "
             "hf_cse.export.to_sentence_transformer(FOLDER, OUT) or hf-cse-export FOLDER OUT) or call the model's "
             "sentence_embedding." if input_ids.dim() == 2 else "")
    raise CSEError(f"training batches must have input_ids of shape (batch, views, length); got "
                   f"{tuple(input_ids.shape)}: use {collator}.{embed}")


def first_view(*tensors: torch.Tensor | None) -> tuple[torch.Tensor | None, ...]:
    """The first view ``(N, L)`` of each batch tensor (None stays None): the sentences themselves, for a pass of
    their own (dropout off, the momentum encoder)."""
    return tuple(None if t is None else t[:, 0] for t in tensors)
