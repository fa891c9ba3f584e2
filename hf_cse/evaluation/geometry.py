"""Embedding geometry on STS-B: alignment / uniformity (Wang & Isola) and DiffCSE's retrieval test.

Definitions (alignment and uniformity as Wang & Isola, DiffCSE App. C; retrieval as DiffCSE Sec. 6.2):

* alignment  = E_{(x, x+)} ||f(x) - f(x+)||^2 (alpha = 2) over STS-B pairs with gold score > 4;
* uniformity = log E_{x, y} exp(-2 ||f(x) - f(y)||^2) (t = 2) over the distinct STS-B sentences
  (every unordered pair of different sentences, as ``torch.pdist``);
  both on l2-normalised embeddings of the **test** split (DiffCSE Table 11), lower is better for both;
* retrieval: the corpus is every row of the STS-B test set (1379 pairs x 2 = 2758 rows, duplicates kept);
  each pair with gold score 5.0 gives two queries (each sentence retrieves the other: 194 queries);
  the query's own row is excluded; Recall@k = share of queries whose partner row is among the k most
  cosine-similar rows. Ties are broken in the partner's favour (rank = 1 + number of rows strictly
  more similar), which only matters for exact duplicates.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..errors import CSEError
from .data import Source, load_sts
from .sts import encode_function


def _normalise(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    norm = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.maximum(norm, 1e-12)


def alignment(x: np.ndarray, y: np.ndarray, alpha: float = 2.0) -> float:
    """Mean ||x_i - y_i||^alpha of l2-normalised positive pairs (rows of x and y)."""
    x, y = _normalise(x), _normalise(y)
    return float(np.mean(np.linalg.norm(x - y, axis=1) ** alpha))


def uniformity(x: np.ndarray, t: float = 2.0) -> float:
    """log of the mean exp(-t ||x_i - x_j||^2) over all pairs i < j of l2-normalised rows."""
    x = _normalise(x)
    n = len(x)
    if n < 2:
        raise CSEError("uniformity needs at least two embeddings.")
    sq = np.clip(2.0 - 2.0 * (x @ x.T), 0.0, None)  # squared distances of unit vectors
    iu = np.triu_indices(n, k=1)
    vals = -t * sq[iu]
    m = vals.max()
    return float(m + np.log(np.mean(np.exp(vals - m))))


def retrieval_recall(
    emb: np.ndarray, queries: Sequence[int], targets: Sequence[int], ks: Sequence[int] = (1, 5, 10)
) -> dict[str, float]:
    """Recall@k x 100 for queries ``emb[queries[i]]`` looking for row ``targets[i]`` among all rows of
    ``emb`` except the query row itself (cosine similarity; ties counted in the target's favour)."""
    e = _normalise(emb)
    q = np.asarray(queries, dtype=np.int64)
    t = np.asarray(targets, dtype=np.int64)
    sims = e[q] @ e.T
    sims[np.arange(len(q)), q] = -np.inf  # never retrieve the query row
    target_sim = sims[np.arange(len(q)), t]
    rank = 1 + (sims > target_sim[:, None]).sum(1)
    out = {f"R@{k}": float(100.0 * np.mean(rank <= k)) for k in ks}
    out["n_queries"] = int(len(q))
    return out


def retrieval_queries(scores: np.ndarray, n_pairs: int, gold: float = 5.0) -> tuple[np.ndarray, np.ndarray]:
    """Query/target rows for a corpus laid out as ``[sentences1..., sentences2...]``: both directions of
    every pair whose gold score equals ``gold``."""
    pairs = np.flatnonzero(np.isclose(np.asarray(scores, dtype=np.float64), gold))
    queries = np.concatenate([pairs, pairs + n_pairs])
    targets = np.concatenate([pairs + n_pairs, pairs])
    return queries, targets


def stsb_embeddings(encoder, data_dir, source, split):
    """STS-B ``split``'s pairs, its sentences (both columns, in order) and their embeddings by ``encoder``."""
    pairs = load_sts("STSBenchmark", data_dir, split, source)[split]
    corpus = list(pairs.sentences1) + list(pairs.sentences2)
    return pairs, corpus, encode_function(encoder)(corpus)


def evaluate_geometry(
    encoder, data_dir=None, source: Source = "local", split: str = "test", threshold: float = 4.0, _cache=None
) -> dict:
    """``{"alignment", "uniformity", "n_pairs", "n_sentences"}`` on STS-B (see the module docstring)."""
    pairs, corpus, emb = _cache or stsb_embeddings(encoder, data_dir, source, split)
    n = len(pairs)
    pos = np.flatnonzero(pairs.scores > threshold)
    first_row: dict[str, int] = {}
    for i, s in enumerate(corpus):
        first_row.setdefault(s, i)
    uniq = np.fromiter(first_row.values(), dtype=np.int64)
    return {
        "alignment": alignment(emb[pos], emb[pos + n]),
        "uniformity": uniformity(emb[uniq]),
        "n_pairs": int(len(pos)),
        "n_sentences": int(len(uniq)),
        "split": split,
    }


def evaluate_retrieval(
    encoder, data_dir=None, source: Source = "local", split: str = "test", ks=(1, 5, 10), _cache=None
) -> dict:
    """DiffCSE's STS-B retrieval: ``{"R@1", "R@5", "R@10", "n_queries", "corpus_size"}`` (x 100)."""
    pairs, corpus, emb = _cache or stsb_embeddings(encoder, data_dir, source, split)
    queries, targets = retrieval_queries(pairs.scores, len(pairs))
    out = retrieval_recall(emb, queries, targets, ks)
    out["corpus_size"] = int(len(corpus))
    return out

