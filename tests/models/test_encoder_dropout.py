"""The method config's dropout sets the dropout of every architecture (each under its config's own names), and
two dropout views through an encoder without dropout -- identical, nothing to learn -- are refused before
training, in the library and on the command line."""

from __future__ import annotations

import logging

import pytest
import torch
from helpers import random_sentences, tiny_args
from tiny_models import make_tiny_llama
from transformers import AutoConfig, AutoModel, AutoTokenizer

from hf_cse.checks import InputError
from hf_cse.cli import train as train_cli
from hf_cse.errors import CSEError
from hf_cse.models import ESimCSEModel, SimCSEModel
from hf_cse.models.config import CSEConfig
from hf_cse.models.encoder_dropout import dropout_fields, encoder_dropout
from hf_cse.trainer import ContrastiveTrainer

_SIZES = dict(vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
              max_position_embeddings=64, pad_token_id=0)


def _no_dropout_config(model_type: str):
    """A tiny config of ``model_type`` with every dropout rate 0 (as Llama-3 and ModernBERT ship)."""
    if model_type == "gpt2":
        cfg = AutoConfig.for_model("gpt2", vocab_size=100, n_embd=32, n_layer=2, n_head=4, n_positions=64)
    elif model_type == "distilbert":
        cfg = AutoConfig.for_model("distilbert", vocab_size=100, dim=32, n_layers=2, n_heads=4, hidden_dim=64)
    elif model_type == "opt":
        cfg = AutoConfig.for_model("opt", vocab_size=100, hidden_size=32, ffn_dim=64, num_hidden_layers=2,
                                   num_attention_heads=4, word_embed_proj_dim=32, max_position_embeddings=64)
    else:
        cfg = AutoConfig.for_model(model_type, **_SIZES)
    for name, value in cfg.to_dict().items():
        if ("dropout" in name or "pdrop" in name) and isinstance(value, float):
            setattr(cfg, name, 0.0)
    return cfg


@pytest.mark.parametrize("model_type", ["bert", "distilbert", "gpt2", "llama", "opt", "modernbert", "bloom"])
def test_dropout_makes_two_training_passes_differ_on_every_architecture(model_type):
    cfg = _no_dropout_config(model_type)
    ids = torch.randint(3, 100, (2, 9))
    outputs = {}
    for dropout in (None, 0.3):
        torch.manual_seed(0)
        config = CSEConfig(encoder_config=cfg, dropout=dropout, pooler_type="avg")
        encoder = AutoModel.from_config(config.build_encoder_config())
        encoder.train()
        outputs[dropout] = [encoder(input_ids=ids).last_hidden_state for _ in range(2)]
    torch.testing.assert_close(*outputs[None])  # no dropout: the two passes are one
    assert not torch.allclose(*outputs[0.3])  # the override reached the architecture's own dropout
    built = CSEConfig(encoder_config=cfg, dropout=0.3, pooler_type="avg").build_encoder_config()
    assert encoder_dropout(built) and set(encoder_dropout(built).values()) == {0.3}
    assert set(encoder_dropout(cfg).values()) == {0.0}  # the method config keeps the encoder's own values


def test_task_head_dropouts_are_not_the_encoders():
    assert "classifier_dropout" not in dropout_fields(AutoConfig.for_model("modernbert"))
    assert "summary_first_dropout" not in dropout_fields(AutoConfig.for_model("gpt2"))
    assert "qa_dropout" not in dropout_fields(AutoConfig.for_model("distilbert"))


@pytest.fixture(scope="module")
def llama_without_dropout(tmp_path_factory):
    return make_tiny_llama(tmp_path_factory.mktemp("llama_no_dropout"), attention_dropout=0.0)


def _sentence_rows(folder):
    from datasets import Dataset

    return Dataset.from_dict({"text": random_sentences(16)}), AutoTokenizer.from_pretrained(folder)


@pytest.mark.slow
def test_two_dropout_views_without_dropout_are_refused_before_training(llama_without_dropout, tmp_path,
                                                                       caplog):
    model = SimCSEModel.from_encoder(str(llama_without_dropout), pooler_type="last")
    data, tok = _sentence_rows(llama_without_dropout)
    with pytest.raises(CSEError, match=r"no dropout \(attention_dropout 0\).*dropout=0\.1") as err:
        ContrastiveTrainer(model=model, args=tiny_args(tmp_path / "out"), train_dataset=data, processing_class=tok)
    assert "--" not in str(err.value)
    model = SimCSEModel.from_encoder(str(llama_without_dropout), pooler_type="last", dropout=0.1)
    ContrastiveTrainer(model=model, args=tiny_args(tmp_path / "out2"), train_dataset=data, processing_class=tok)
    # views that differ by their text need no dropout
    model = ESimCSEModel.from_encoder(str(llama_without_dropout), pooler_type="last")
    ContrastiveTrainer(model=model, args=tiny_args(tmp_path / "out3"), train_dataset=data, processing_class=tok)
    # dropout 0 asked for (a deterministic check of the step, as benchmarks/gpu_engines.py runs): said, not refused
    model = SimCSEModel.from_encoder(str(llama_without_dropout), pooler_type="last", dropout=0.0)
    with caplog.at_level(logging.WARNING, logger="hf_cse.models.encoder_dropout"):
        ContrastiveTrainer(model=model, args=tiny_args(tmp_path / "out4"), train_dataset=data, processing_class=tok)
    assert "dropout=0 as asked: simcse's two views of a sentence are identical" in caplog.text


def test_command_line_refuses_identical_views_before_loading(llama_without_dropout, tmp_path, monkeypatch):
    def no_loading(*args, **kwargs):
        raise AssertionError("the model was loaded before the refusal")

    monkeypatch.setattr(SimCSEModel, "from_encoder", no_loading)
    train = tmp_path / "train.txt"
    train.write_text("\n".join(random_sentences(20)) + "\n")
    with pytest.raises(InputError, match="--dropout 0.1"):
        train_cli.train_from_args(["--model_name_or_path", str(llama_without_dropout), "--train_file", str(train),
                                   "--pooler_type", "last", "--output_dir", str(tmp_path / "out"), "--use_cpu"])


def test_dropout_on_an_encoder_without_dropout_fields_is_refused():
    from transformers import MambaConfig

    with pytest.raises(CSEError, match="no dropout rate it could set"):
        CSEConfig(encoder_config=MambaConfig(vocab_size=100, hidden_size=16, num_hidden_layers=1), dropout=0.1)
