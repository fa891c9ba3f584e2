"""The trainer's dev evaluation tokenizes its sentences once: from the second evaluation on only the forward passes
run (``SentenceEncoder.prepare`` / ``encode_prepared``, kept by the dev evaluators), with the same scores; new weights
still give new scores, and another tokenization prepares the sentences again."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from eval_helpers import make_tiny_bert, write_toy_senteval
from helpers import collator, tiny_args, tiny_train_dataset
from transformers import AutoTokenizer

import hf_cse.evaluation.encoder as encoder_module
from hf_cse.evaluation.encoder import SentenceEncoder
from hf_cse.evaluation.evaluators import PairsEvaluator, STSDevEvaluator
from hf_cse.models import SimCSEModel
from hf_cse.trainer import ContrastiveTrainer


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return make_tiny_bert(tmp_path_factory.mktemp("tiny_bert_once"))


@pytest.fixture
def counted(monkeypatch, tiny_dir):
    """Counts of the tokenizer's calls (tokenizing and padding) on the tiny BERT's tokenizer class, and of the
    encoder's padding."""
    cls = type(AutoTokenizer.from_pretrained(tiny_dir))
    calls = {"tokenize": 0, "pad": 0}
    tokenize, pad = cls.__call__, cls.pad

    def counting_tokenize(self, *args, **kwargs):
        calls["tokenize"] += 1
        return tokenize(self, *args, **kwargs)

    def counting_pad(self, *args, **kwargs):
        calls["pad"] += 1
        return pad(self, *args, **kwargs)

    def counting_pad_rows(tokenizer, features):  # the encoder's padding (hf_cse.padding.pad_token_rows)
        calls["pad"] += 1
        return pad_rows(tokenizer, features)

    pad_rows = encoder_module.pad_token_rows
    monkeypatch.setattr(cls, "__call__", counting_tokenize)
    monkeypatch.setattr(cls, "pad", counting_pad)
    monkeypatch.setattr(encoder_module, "pad_token_rows", counting_pad_rows)
    return calls


def test_the_dev_evaluators_second_call_does_not_tokenize_again(tiny_dir, tmp_path, counted,
                                                               fresh_evaluation_data_cache):
    """As the trainer calls it: a new encoder around the same model and tokenizer at every evaluation."""
    senteval = write_toy_senteval(tmp_path / "senteval")
    tok = AutoTokenizer.from_pretrained(tiny_dir)
    model = SimCSEModel.from_encoder(str(tiny_dir))
    evaluator = STSDevEvaluator(str(senteval))
    first = evaluator(SentenceEncoder(model, tok, show_progress_bar=False))
    assert counted["tokenize"] == 2 and counted["pad"] >= 2  # STS-B and SICK-R dev: one tokenizer call each
    done = dict(counted)
    assert evaluator(SentenceEncoder(model, tok, show_progress_bar=False)) == first
    assert counted == done  # neither tokenized nor padded again


@pytest.mark.slow
def test_the_trainers_second_evaluation_does_not_tokenize_again(tiny_dir, sentences, tmp_path, counted,
                                                                fresh_evaluation_data_cache):
    senteval = write_toy_senteval(tmp_path / "senteval")
    ds, tok = tiny_train_dataset(tiny_dir, sentences, tmp_path)
    torch.manual_seed(0)
    trainer = ContrastiveTrainer(model=SimCSEModel.from_encoder(str(tiny_dir)), args=tiny_args(tmp_path / "out"),
                                 train_dataset=ds, data_collator=collator(tok), processing_class=tok,
                                 senteval_data_dir=str(senteval))
    counted.update(tokenize=0, pad=0)  # the training data's tokenizing above
    first = trainer.evaluate()
    assert counted["tokenize"] == 2 and counted["pad"] >= 2  # STS-B and SICK-R dev: one tokenizer call each
    done = dict(counted)
    second = trainer.evaluate()
    assert counted == done  # neither tokenized nor padded again
    assert second["eval_stsb_spearman"] == first["eval_stsb_spearman"]
    assert second["eval_sickr_spearman"] == first["eval_sickr_spearman"]
    with torch.no_grad():  # new weights: the kept tokens are encoded afresh, not old embeddings returned
        for p in trainer.model.encoder.parameters():
            p.add_(torch.randn_like(p) * 0.5)
    third = trainer.evaluate()
    assert counted == done and third["eval_stsb_spearman"] != first["eval_stsb_spearman"]
    plain = STSDevEvaluator(str(senteval))  # a fresh evaluator, which tokenizes: the same scores
    fresh = plain(SentenceEncoder(trainer.model, tok, show_progress_bar=False))
    assert fresh["stsb_spearman"] == pytest.approx(third["eval_stsb_spearman"], abs=1e-9)


def test_prepared_sentences_encode_as_encode_does(tiny_dir):
    tok = AutoTokenizer.from_pretrained(tiny_dir)
    model = SimCSEModel.from_encoder(str(tiny_dir))
    sents = ["the dog runs in the park", "a man plays", "the dog runs in the park", "blue", "what is the old river"]
    encoder = SentenceEncoder(model, tok, batch_size=2, show_progress_bar=False)
    prepared = encoder.prepare(sents)
    np.testing.assert_array_equal(encoder.encode_prepared(prepared), encoder.encode(sents))
    assert prepared.fits(SentenceEncoder(model, tok, batch_size=2), sents)
    assert not prepared.fits(SentenceEncoder(model, tok, batch_size=2), sents[:-1])  # other sentences
    other = SentenceEncoder(model, tok, batch_size=2, max_length=4)  # another tokenization: refused
    assert not prepared.fits(other)
    with pytest.raises(ValueError, match="prepare them again"):
        other.encode_prepared(prepared)
    other_tokenizer = SentenceEncoder(model, AutoTokenizer.from_pretrained(tiny_dir), batch_size=2)
    assert not prepared.fits(other_tokenizer)  # the same files, another tokenizer object: not assumed equal


def test_an_evaluator_prepares_again_when_the_tokenization_changes(tiny_dir, counted):
    tok = AutoTokenizer.from_pretrained(tiny_dir)
    model = SimCSEModel.from_encoder(str(tiny_dir))
    from hf_cse.evaluation.data import STSPairs

    pairs = STSPairs(("a man plays", "the dog runs", "blue"), ("a woman plays", "the cat runs", "red"),
                     np.array([4.0, 3.0, 1.0]))
    evaluator = PairsEvaluator(pairs, "mine")
    full = evaluator(SentenceEncoder(model, tok, show_progress_bar=False))
    evaluator(SentenceEncoder(model, tok, show_progress_bar=False))
    assert counted["tokenize"] == 1
    short = evaluator(SentenceEncoder(model, tok, max_length=3, show_progress_bar=False))
    assert counted["tokenize"] == 2  # cut at 3 tokens: tokenized again
    reference = PairsEvaluator(pairs, "mine")(SentenceEncoder(model, tok, max_length=3, show_progress_bar=False))
    assert short == reference and set(full) == {"mine_spearman"}
