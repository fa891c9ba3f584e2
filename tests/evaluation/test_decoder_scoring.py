"""Scoring a plain causal decoder as training does: a tokenizer without a padding token pads with its end-of-text
token (a tokenizer with neither is refused before the weights load, the training command's too), and its default
pooler is its last token, a first-token pooler refused as training refuses it."""

from __future__ import annotations

import json
import logging

import pytest
import torch
from helpers import train_args
from tiny_models import make_tiny_gpt2, make_tiny_llama
from transformers import AutoModel, AutoTokenizer

from hf_cse.cli import evaluate as eval_cli
from hf_cse.cli import train as train_cli
from hf_cse.errors import CSEError
from hf_cse.evaluation.encoder import SentenceEncoder
from hf_cse.models.pooling import pool
from hf_cse.padding import ensure_pad_token

SENTS = ["the dog runs in the park", "a man plays", "what is the old river", "blue"]


@pytest.fixture(scope="module")
def gpt2_nopad_dir(tmp_path_factory):
    return make_tiny_gpt2(tmp_path_factory.mktemp("gpt2_nopad"), pad_token=False)


@pytest.fixture(scope="module")
def llama_neither_dir(tmp_path_factory):
    """The tiny Llama whose tokenizer has neither a padding nor an end-of-text token."""
    folder = make_tiny_llama(tmp_path_factory.mktemp("llama_neither"))
    tok = AutoTokenizer.from_pretrained(folder)
    tok.pad_token = None
    tok.save_pretrained(folder)
    assert AutoTokenizer.from_pretrained(folder).eos_token is None
    return folder


def one_by_one(model, tok, sentences, pooler):
    """Each sentence alone (no padding), pooled by hand."""
    rows = []
    with torch.no_grad():
        for sentence in sentences:
            enc = tok(sentence, return_tensors="pt")
            enc.pop("token_type_ids", None)
            out = model(**enc)
            rows.append(pool(pooler, enc["attention_mask"], out.last_hidden_state)[0])
    return torch.stack(rows).numpy()


def test_a_tokenizer_without_a_pad_token_pads_with_its_end_of_text_token(gpt2_nopad_dir, caplog):
    model, tok = AutoModel.from_pretrained(gpt2_nopad_dir).eval(), AutoTokenizer.from_pretrained(gpt2_nopad_dir)
    assert tok.pad_token is None and tok.eos_token == "[SEP]"
    with caplog.at_level(logging.WARNING):
        encoder = SentenceEncoder(model, tok, pooler="last", batch_size=4, show_progress_bar=False)
    assert "padding with its end-of-text token '[SEP]'" in caplog.text
    got = encoder.encode(SENTS)  # one padded batch
    assert got == pytest.approx(one_by_one(model, tok, SENTS, "last"), abs=1e-5)
    assert tok.pad_token is None  # the caller's tokenizer is left as it was
    trained = AutoTokenizer.from_pretrained(gpt2_nopad_dir)
    ensure_pad_token(trained)  # what training pads with
    assert encoder.tokenizer.pad_token_id == trained.pad_token_id == tok.eos_token_id


def test_a_plain_decoder_pools_its_last_token_by_default(tiny_llama_dir, caplog):
    model, tok = AutoModel.from_pretrained(tiny_llama_dir).eval(), AutoTokenizer.from_pretrained(tiny_llama_dir)
    with caplog.at_level(logging.INFO):
        encoder = SentenceEncoder(model, tok, batch_size=4, show_progress_bar=False)
    assert "pooling: last (a causal decoder's default" in caplog.text
    assert encoder.effective_pooler == "last" and encoder.describe()["pooler"] == "last"
    assert encoder.encode(SENTS) == pytest.approx(one_by_one(model, tok, SENTS, "last"), abs=1e-5)
    for pooler in ("cls", "cls_before_pooler"):  # asked for: refused, as training refuses it
        with pytest.raises(CSEError, match=f"pooler '{pooler}' reads the first token.*Use pooler avg or last") as err:
            SentenceEncoder(model, tok, pooler=pooler)
        assert err.value.fields == ("pooler",)
    model.config.is_causal = False  # a bidirectional decoder's export: its first token has seen the sentence
    assert SentenceEncoder(model, tok).effective_pooler == "cls_before_pooler"
    SentenceEncoder(model, tok, pooler="cls")


def test_neither_pad_nor_end_of_text_token_is_refused_before_the_weights_load(llama_neither_dir, monkeypatch):
    model, tok = AutoModel.from_pretrained(llama_neither_dir), AutoTokenizer.from_pretrained(llama_neither_dir)
    fix = r"neither a padding nor an end-of-text token.*tokenizer\.pad_token = .*tokenizer\.save_pretrained"
    with pytest.raises(CSEError, match=fix):
        SentenceEncoder(model, tok, pooler="last")

    def no_weights(*args, **kwargs):
        raise AssertionError("the weights were loaded")

    monkeypatch.setattr(AutoModel, "from_pretrained", no_weights)
    with pytest.raises(CSEError, match=fix):
        SentenceEncoder.from_pretrained(str(llama_neither_dir), pooler="last", device="cpu")


def test_a_first_token_pooler_is_refused_before_the_weights_load(tiny_llama_dir, monkeypatch):
    monkeypatch.setattr(AutoModel, "from_pretrained", lambda *a, **k: pytest.fail("the weights were loaded"))
    with pytest.raises(CSEError, match="pooler 'cls' reads the first token"):
        SentenceEncoder.from_pretrained(str(tiny_llama_dir), pooler="cls", device="cpu")


def test_the_training_command_refuses_such_a_tokenizer_before_the_weights_load(llama_neither_dir, tmp_path,
                                                                               monkeypatch, capsys):
    from hf_cse.models import CSEPreTrainedModel

    monkeypatch.setattr(CSEPreTrainedModel, "from_encoder",
                        classmethod(lambda cls, *a, **k: pytest.fail("the encoder was loaded")))
    assert train_cli.main(train_args(llama_neither_dir, tmp_path, tmp_path / "run", "--pooler_type", "last")) != 0
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"--model_name_or_path {llama_neither_dir}: the tokenizer" in err
    assert "tokenizer.save_pretrained(model_folder)" in err
    assert not (tmp_path / "run").exists()  # refused before the output folder is made


@pytest.mark.slow  # trains and evaluates end to end
def test_run_eval_gives_the_dev_score_training_gives_the_untrained_decoder(gpt2_nopad_dir, senteval_dir, tmp_path):
    run = tmp_path / "run"
    assert train_cli.main(train_args(gpt2_nopad_dir, tmp_path, run, "--pooler_type", "last",
                                     "--senteval_data_dir", str(senteval_dir))) == 0
    before = json.loads((run / "training_info.json").read_text())["dev"]["before"]
    out = tmp_path / "eval"
    # no --pooler: the decoder's default, the last token, as trained
    assert eval_cli.main(["--model_name_or_path", str(gpt2_nopad_dir), "--tasks", "STSBenchmark", "--mode", "dev",
                          "--senteval_data_dir", str(senteval_dir), "--output_dir", str(out),
                          "--disable_tqdm"]) == 0
    results = json.loads((out / "results.json").read_text())
    assert results["settings"]["pooler"] == "last"
    assert results["STSBenchmark"] == pytest.approx(before, abs=1e-9)


@pytest.mark.parametrize("pad_token, mode, words", [
    (False, "lasttoken", r"tokenizer has no padding token, so no batch of it can be encoded: set it and save the model "
                         r"again \(model.tokenizer.pad_token = '\[SEP\]'; model.save\(folder\)\)"),
    (True, "cls", r"pools the first token \(its Pooling module's cls mode\), which a causal \(decoder-only\) encoder "
                  r"such as 'gpt2' computes without seeing the rest of the sentence")])
def test_a_sentence_transformers_decoder_that_cannot_be_scored_with_its_own_modules_is_one_line(
        tmp_path, pad_token, mode, words):
    """A sentence-transformers folder of a decoder: without a pad token, transformers' traceback at the first batch;
    with first-token pooling, NaN scores and scipy's warning alone. One line each; a pooler of hf_cse's scores it."""
    from sentence_transformers import SentenceTransformer, models

    gpt2 = make_tiny_gpt2(tmp_path / "gpt2", pad_token=pad_token)
    word = models.Transformer(str(gpt2))
    st = SentenceTransformer(modules=[word, models.Pooling(word.get_word_embedding_dimension(), pooling_mode=mode)])
    with pytest.raises(CSEError, match=words) as refused:
        SentenceEncoder(st, show_progress_bar=False)
    assert "\n" not in str(refused.value)
    assert SentenceEncoder(st, pooler="last", show_progress_bar=False).encode(SENTS).shape[0] == len(SENTS)
