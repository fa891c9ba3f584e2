"""Exports that failed after training: LoRA adapters on the embedding layer (peft's Embedding wrapper has no
``num_embeddings``), and a decoder padded with its end-of-text token (hf_cse's choice for a tokenizer without a
padding token) whose config names another pad id."""

from __future__ import annotations

import importlib.util

import pytest
import torch
from sentence_transformers import SentenceTransformer
from tiny_models import make_tiny_gpt2
from transformers import AutoTokenizer

from hf_cse.data import ensure_pad_token
from hf_cse.export import to_sentence_transformer
from hf_cse.models import SimCSEModel

pytestmark = pytest.mark.slow


def _own(model, tok, texts):
    batch = tok(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        return model.sentence_embedding(batch["input_ids"], batch["attention_mask"])


@pytest.mark.skipif(importlib.util.find_spec("peft") is None, reason="peft is not installed")
def test_lora_on_the_embedding_layer_exports_the_merged_encoder(tiny_bert_dir, tmp_path, sentences):
    model = SimCSEModel.from_encoder(str(tiny_bert_dir), pooler_type="avg", lora_r=4,
                                     lora_target_modules=["word_embeddings", "query"]).eval()
    with torch.no_grad():  # trained adapters: B (the embedding's too) away from its zero start
        for name, param in model.named_parameters():
            if "lora_B" in name or "lora_embedding_B" in name:
                param.normal_(std=0.5)
    assert any("lora_embedding_B" in name for name, _ in model.named_parameters())
    out = to_sentence_transformer(model, tmp_path / "st", tokenizer=str(tiny_bert_dir))
    st = SentenceTransformer(str(out), device="cpu")
    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    got = st.encode(sentences[:4], convert_to_tensor=True)
    torch.testing.assert_close(got, _own(model, tok, sentences[:4]), atol=1e-5, rtol=1e-4)


def test_a_decoder_padded_with_its_end_of_text_token_exports(tmp_path, sentences):
    folder = make_tiny_gpt2(tmp_path / "gpt2", pad_token=False, config_pad_token_id=0)
    tok = AutoTokenizer.from_pretrained(folder)
    ensure_pad_token(tok)  # what training does: the end-of-text token pads, not the config's pad id 0
    assert tok.pad_token_id == tok.eos_token_id != 0
    tok.save_pretrained(tmp_path / "trained_tokenizer")
    model = SimCSEModel.from_encoder(str(folder), pooler_type="last").eval()
    out = to_sentence_transformer(model, tmp_path / "st", tokenizer=str(tmp_path / "trained_tokenizer"))
    st = SentenceTransformer(str(out), device="cpu")
    got = st.encode(sentences[:4], convert_to_tensor=True)
    torch.testing.assert_close(got, _own(model, tok, sentences[:4]), atol=1e-5, rtol=1e-4)


def test_a_decoder_beside_a_tokenizer_that_makes_segment_ids_exports(tmp_path, sentences):
    """A BERT-style tokenizer beside GPT-2 makes token_type_ids: hf_cse leaves them out, sentence-transformers handed
    them to GPT2Model, which added the embedding of token 0 to every position -- the export's own check failed ("a
    bug in hf_cse.export") and nothing was written. The export's tokenizer makes no segment ids; the user's is kept."""
    from tiny_models import tiny_tokenizer

    folder = make_tiny_gpt2(tmp_path / "gpt2")
    tok = tiny_tokenizer(tmp_path / "vocab")
    tok.save_pretrained(tmp_path / "bert_style")
    assert "token_type_ids" in tok.model_input_names
    model = SimCSEModel.from_encoder(str(folder), pooler_type="avg").eval()
    out = to_sentence_transformer(model, tmp_path / "st", tokenizer=str(tmp_path / "bert_style"))
    st = SentenceTransformer(str(out), device="cpu")
    assert "token_type_ids" not in st.tokenize(sentences[:2])
    torch.testing.assert_close(st.encode(sentences[:4], convert_to_tensor=True), _own(model, tok, sentences[:4]),
                               atol=1e-5, rtol=1e-4)
    assert "token_type_ids" in AutoTokenizer.from_pretrained(tmp_path / "bert_style").model_input_names
