"""What ``SentenceTransformer.encode`` does to finished embeddings, in numpy (no torch: the ONNX encoder runs without
it): keep the leading ``truncate_dim`` values, then L2-normalise with ``normalize_embeddings`` -- in that order, so a
truncated vector is a unit vector again."""

from __future__ import annotations

import numpy as np


def unit_rows(emb: np.ndarray) -> np.ndarray:
    """``emb`` with each row divided by its L2 norm (an all-zero row stays zero, as torch's ``normalize`` keeps it)."""
    return emb / np.maximum(np.linalg.norm(emb, axis=1, keepdims=True), 1e-12)


def truncated_and_normalized(emb: np.ndarray, truncate_dim: int | None, normalize_embeddings: bool) -> np.ndarray:
    """``emb`` (sentences x width) cut to its first ``truncate_dim`` values (None or 0: whole), then
    :func:`unit_rows` where ``normalize_embeddings``; contiguous."""
    if truncate_dim:
        emb = emb[:, :truncate_dim]
    if normalize_embeddings:
        emb = unit_rows(emb)
    return np.ascontiguousarray(emb)
