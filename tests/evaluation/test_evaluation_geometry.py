"""Alignment / uniformity against closed forms; retrieval recall on hand-built cases; STS-B protocol."""

from __future__ import annotations

import numpy as np
import pytest
from eval_helpers import FakeEncoder, write_toy_senteval

from hf_cse.evaluation import data as D
from hf_cse.evaluation.geometry import (
    alignment,
    evaluate_geometry,
    evaluate_retrieval,
    retrieval_queries,
    retrieval_recall,
    uniformity,
)


def test_alignment_closed_form():
    # unit vectors at angle theta: ||x - y||^2 = 2 - 2 cos(theta); scaling must not matter (normalised)
    thetas = np.array([0.0, np.pi / 3, np.pi / 2, np.pi])
    x = np.stack([np.ones(4), np.zeros(4)], 1) * 5.0
    y = np.stack([np.cos(thetas), np.sin(thetas)], 1) * 0.3
    assert alignment(x, y) == pytest.approx(np.mean(2 - 2 * np.cos(thetas)), abs=1e-12)
    assert alignment(x, y, alpha=1.0) == pytest.approx(np.mean(np.sqrt(2 - 2 * np.cos(thetas))), abs=1e-12)


def test_uniformity_closed_form():
    # the 4 vertices of a square on the circle: 4 pairs at squared distance 2, 2 pairs at 4
    x = np.array([[1.0, 0], [0, 1], [-1, 0], [0, -1]]) * 2.0
    expected = np.log((4 * np.exp(-2 * 2) + 2 * np.exp(-2 * 4)) / 6)
    assert uniformity(x) == pytest.approx(expected, abs=1e-12)
    # all identical points: every distance 0 -> log(1) = 0 (the worst possible value)
    assert uniformity(np.ones((5, 3))) == pytest.approx(0.0, abs=1e-12)
    # matches the reference torch code (pdist().pow(2).mul(-t).exp().mean().log()) on random data
    import torch

    rng = np.random.default_rng(0)
    z = rng.normal(size=(50, 16))
    zt = torch.nn.functional.normalize(torch.tensor(z), dim=1)
    ref = torch.pdist(zt).pow(2).mul(-2).exp().mean().log().item()
    assert uniformity(z) == pytest.approx(ref, abs=1e-9)


def test_retrieval_recall_hand_case():
    emb = np.array(
        [
            [1.0, 0.0, 0.0],  # 0: query, its target is row 3
            [0.9, 0.1, 0.0],  # 1: closer to 0 than 3 is
            [0.0, 1.0, 0.0],  # 2: query, target row 4 is its nearest neighbour
            [0.7, 0.7, 0.1],  # 3
            [0.0, 0.95, 0.1],  # 4
            [0.0, 0.0, 1.0],  # 5: query, target row 0 is far away
        ]
    )
    out = retrieval_recall(emb, [0, 2, 5], [3, 4, 0], ks=(1, 2, 5))
    # ranks: query 0 -> row 1 first, target 2nd; query 2 -> target 1st; query 5 -> rows 3, 4 before the
    # target, rows 1, 2 tie with it at cosine 0 (ties go to the target): 3rd
    assert out["R@1"] == pytest.approx(100 / 3)
    assert out["R@2"] == pytest.approx(200 / 3)
    assert out["R@5"] == pytest.approx(100.0)
    assert out["n_queries"] == 3
    # a duplicate of the query in another row is a competitor (it is kept in the corpus) ...
    same = retrieval_recall(np.array([[1.0, 0], [1.0, 0], [0, 1.0]]), [0], [2], ks=(1,))
    assert same["R@1"] == 0.0
    # ... but the query's own row is never retrieved
    assert retrieval_recall(np.array([[1.0, 0], [0.2, 1.0], [0, 1.0]]), [0], [1], ks=(1,))["R@1"] == 100.0


def test_retrieval_queries_both_directions():
    scores = np.array([5.0, 4.8, 5.0, 1.0])
    q, t = retrieval_queries(scores, 4)
    assert sorted(zip(q.tolist(), t.tolist())) == [(0, 4), (2, 6), (4, 0), (6, 2)]


def test_stsb_protocol_on_toy_data(tmp_path):
    D.clear_cache()
    root = write_toy_senteval(tmp_path / "se")
    pairs = D.load_sts("STSBenchmark", root, "test")["test"]
    enc = FakeEncoder()
    ret = evaluate_retrieval(enc, root)
    n5 = int(np.sum(pairs.scores == 5.0))
    assert ret["n_queries"] == 2 * n5 and ret["corpus_size"] == 2 * len(pairs)
    # the toy gold-5 pair 0 has identical sentences: they must find each other at rank 1
    assert ret["R@1"] >= 100 / ret["n_queries"]

    geo = evaluate_geometry(enc, root)
    pos = pairs.scores > 4
    x = np.stack([enc.vector(s) for s in np.array(pairs.sentences1)[pos]])
    y = np.stack([enc.vector(s) for s in np.array(pairs.sentences2)[pos]])
    assert geo["alignment"] == pytest.approx(alignment(x, y), abs=1e-9)
    uniq = list(dict.fromkeys(pairs.sentences1 + pairs.sentences2))
    assert geo["n_sentences"] == len(uniq) < 2 * len(pairs)
    assert geo["uniformity"] == pytest.approx(uniformity(np.stack([enc.vector(s) for s in uniq])), abs=1e-9)
