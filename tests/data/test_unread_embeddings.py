"""A tokenizer far smaller than the model's embedding matrix (hf_cse.tokenizer_match.warn_unread_embeddings): another
model's tokenizer whose ids fit the matrix reads the wrong rows with no error, in training and scoring alike; a
warning names the counts, while a matrix padded by a few rows (as models pad theirs for speed) says nothing."""

from __future__ import annotations

import logging

import datasets
import pytest
from helpers import random_sentences, tiny_args
from tiny_models import tiny_tokenizer
from transformers import BertConfig, BertModel

from hf_cse.evaluation.encoder import SentenceEncoder
from hf_cse.models import SimCSEModel
from hf_cse.tokenizer_match import UNREAD_ROWS
from hf_cse.trainer import ContrastiveTrainer


def model_with_extra_rows(folder, extra: int):
    """A tiny BERT whose embedding matrix has ``extra`` rows beyond its (saved) tokenizer's tokens."""
    tokenizer = tiny_tokenizer(folder)
    config = BertConfig(vocab_size=len(tokenizer) + extra, hidden_size=16, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=32, max_position_embeddings=64)
    BertModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder, len(tokenizer)


def unread_warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "rows are never read" in r.getMessage()]


@pytest.mark.parametrize("extra,warned", [(UNREAD_ROWS, False), (UNREAD_ROWS + 1, True)])
def test_scoring_warns_only_past_the_padding_models_give_their_matrix(tmp_path, caplog, extra, warned):
    folder, tokens = model_with_extra_rows(tmp_path / "model", extra)
    with caplog.at_level(logging.WARNING, logger="hf_cse.tokenizer_match"):
        SentenceEncoder.from_pretrained(str(folder), device="cpu", show_progress_bar=False)
    expected = [f"{folder}: its tokenizer has {tokens} tokens but the model embeds {tokens + extra}, so {extra} rows "
                "are never read: the sign of another model's tokenizer, whose ids would read the wrong rows without "
                "an error. If it is not the model's own, save the model's tokenizer beside its weights."]
    assert unread_warnings(caplog) == (expected if warned else [])


def test_training_warns_of_a_tokenizer_far_smaller_than_the_matrix(tmp_path, caplog):
    folder, tokens = model_with_extra_rows(tmp_path / "model", 4 * UNREAD_ROWS)
    data = datasets.Dataset.from_dict({"text": random_sentences(16)})
    with caplog.at_level(logging.WARNING, logger="hf_cse.tokenizer_match"):
        ContrastiveTrainer(model=SimCSEModel.from_encoder(str(folder)), args=tiny_args(tmp_path / "out"),
                           train_dataset=data, processing_class=tiny_tokenizer(tmp_path / "tok"))
    assert len(unread_warnings(caplog)) == 1
    assert f"its tokenizer has {tokens} tokens but the model embeds {tokens + 4 * UNREAD_ROWS}" in \
        unread_warnings(caplog)[0]


def test_the_encoders_own_tokenizer_trains_without_the_warning(tiny_bert_dir, tmp_path, caplog):
    from transformers import AutoTokenizer

    data = datasets.Dataset.from_dict({"text": random_sentences(16)})
    with caplog.at_level(logging.WARNING, logger="hf_cse.tokenizer_match"):
        ContrastiveTrainer(model=SimCSEModel.from_encoder(str(tiny_bert_dir)), args=tiny_args(tmp_path / "out"),
                           train_dataset=data, processing_class=AutoTokenizer.from_pretrained(tiny_bert_dir))
    assert unread_warnings(caplog) == []
