"""How :class:`hf_cse.evaluation.encoder.SentenceEncoder` moves its batches: the texts de-duplicated and sorted
longest first, the copies of their embeddings to the host, and :class:`PreparedSentences`, sentences tokenized and
padded once.

On a GPU each copy to the host waits for every batch queued before it, so embeddings stay on the device until
:data:`HOST_COPY_BYTES` of them gathered: the host keeps queuing batches while the GPU encodes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..data import with_prompt

#: embeddings kept on the device before one copy to the host: on a GPU each copy waits for every queued batch, so
#: copying per batch would stop the host from queuing the next batch while the GPU encodes this one
HOST_COPY_BYTES = 256 * 2**20


def sorted_texts(sentences: list[str], prompt: str | None, lower: bool, tokenizer, max_length: int,
                 edit: Callable[[str], str] | None = None):
    """The de-duplicated texts (``edit``, then ``prompt`` and lower-casing applied), each sentence's row among them,
    the texts' order longest first (a memory problem shows up at once), and their tokens (None without a
    ``tokenizer``)."""
    unique: dict[str, int] = {}
    inverse = np.fromiter((unique.setdefault(s, len(unique)) for s in sentences), dtype=np.int64)
    texts = with_prompt([edit(t) for t in unique] if edit else list(unique), prompt)
    if lower:
        texts = [t.lower() for t in texts]
    tokens = tokenizer(texts, truncation=True, max_length=max_length) if tokenizer else None
    if tokens is not None:
        lengths = np.fromiter((len(ids) for ids in tokens["input_ids"]), dtype=np.int64)
    else:
        lengths = np.fromiter((len(t) for t in texts), dtype=np.int64)
    return texts, inverse, np.argsort(-lengths, kind="stable"), tokens


def batch_indices(order: np.ndarray, batch_size: int):
    """The rows of each batch, ``batch_size`` at a time in ``order``."""
    return (order[start : start + batch_size] for start in range(0, len(order), batch_size))


def embed_batches(batches: Iterable[tuple[np.ndarray, dict[str, Any]]], encode_batch: Callable, device: torch.device,
                  n_texts: int, progress) -> np.ndarray:
    """float32 ``(n_texts, H)`` embeddings of ``(row indices, features)`` batches, each encoded by ``encode_batch``
    on ``device``; ``progress`` wraps the batches (a tqdm bar). The caller sets the model's mode and precision."""
    out: np.ndarray | None = None
    pending: list[tuple[np.ndarray, torch.Tensor]] = []  # (rows, embeddings still on the device)
    for idx, feats in progress(batches):
        # pinned batches (a GPU's) are copied without waiting for the GPU
        feats = {k: (v.to(device, non_blocking=v.is_pinned()) if isinstance(v, torch.Tensor) else v)
                 for k, v in feats.items()}
        emb = encode_batch(feats).float()
        # a slice of a larger storage (the CLS row of the hidden states) would keep all of it alive
        compact = emb.untyped_storage().nbytes() == emb.numel() * emb.element_size()
        pending.append((idx, emb if compact else emb.clone()))
        if sum(emb.numel() for _, emb in pending) * 4 >= HOST_COPY_BYTES:
            out = copy_to_host(pending, out, n_texts)
    return copy_to_host(pending, out, n_texts)


def copy_to_host(pending: list[tuple[np.ndarray, torch.Tensor]], out: np.ndarray | None, n_texts: int) -> np.ndarray:
    """The ``pending`` embeddings written into their rows of ``out`` (made at the first copy) in one copy; empties
    ``pending``."""
    if not pending:
        return out
    host = torch.cat([emb for _, emb in pending]).cpu().numpy()
    if out is None:
        out = np.empty((n_texts, host.shape[1]), dtype=np.float32)
    out[np.concatenate([idx for idx, _ in pending])] = host
    pending.clear()
    return out


@dataclass(frozen=True)
class PreparedSentences:
    """Sentences tokenized and padded once by :meth:`SentenceEncoder.prepare`, and the tokenization they fit."""

    sentences: tuple[str, ...]
    inverse: np.ndarray
    n_texts: int
    batches: list
    tokenization: tuple

    def fits(self, encoder, sentences: Sequence[str] | None = None) -> bool:
        """Whether ``encoder`` (a :class:`SentenceEncoder`) tokenizes as the encoder that prepared these (the same
        tokenizer object, length limit, prompt, lower-casing, text edit, batch size), and, given ``sentences``, whether
        they are these sentences."""
        source, *settings = self.tokenization
        mine, *now = encoder.tokenization_settings(self.tokenization[-1])
        if source() is None or source() is not mine() or settings != now:
            return False
        return sentences is None or tuple(sentences) == self.sentences
