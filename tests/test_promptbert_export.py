"""A PromptBERT model exported to sentence-transformers: SentenceTransformer(folder, trust_remote_code=True).encode
gives hf_cse's test embeddings (template, [MASK] pooling, template denoising when on), from the folder's own code;
also a decoder with a PromptEOL-style template (no [MASK]: its last token)."""

import json

import pytest
import torch
from helpers import random_sentences
from sentence_transformers import SentenceTransformer
from transformers import AutoTokenizer

from hf_cse.export import to_sentence_transformer
from hf_cse.models import PromptBERTModel

pytestmark = pytest.mark.slow  # exports and reloads a model (1-2 s each)

PROMPTEOL = 'This sentence : "{sentence}" means in one word:"'


def exported_and_own(encoder_dir, tmp_path, **config):
    tok = AutoTokenizer.from_pretrained(encoder_dir)
    model = PromptBERTModel.from_encoder(str(encoder_dir), **config).eval()
    folder = to_sentence_transformer(model, tmp_path / "st", tokenizer=tok)
    sentences = random_sentences(5, seed=7)
    batch = tok(sentences, padding=True, return_tensors="pt")
    with torch.no_grad():
        want = model.sentence_embedding(batch["input_ids"], batch["attention_mask"])
    st = SentenceTransformer(str(folder), device="cpu", trust_remote_code=True)
    return folder, st, st.encode(sentences, convert_to_tensor=True), want


@pytest.mark.parametrize("denoise", [False, True])
def test_export_gives_the_models_embeddings(tiny_bert_dir, tmp_path, denoise):
    folder, st, got, want = exported_and_own(tiny_bert_dir, tmp_path, test_template_denoising=denoise)
    assert torch.allclose(got, want, rtol=0, atol=1e-6)
    assert type(st[0]).__module__.startswith("transformers_modules")  # the folder's copy, not hf_cse's
    assert [m["type"] for m in json.loads((folder / "modules.json").read_text())] == [
        "st_pooling.PromptTransformer", "st_pooling.PromptMaskPooling"]
    card = (folder / "README.md").read_text()
    assert "trust_remote_code=True" in card and "PromptBERT" in card and "2201.04337" in card
    assert ("template denoising" in card.split("| Pooling |")[1].split("\n")[0]) is denoise


def test_without_trust_remote_code_sentence_transformers_refuses(tiny_bert_dir, tmp_path):
    folder, _, _, _ = exported_and_own(tiny_bert_dir, tmp_path)
    with pytest.raises(ValueError, match="trust_remote_code"):
        SentenceTransformer(str(folder), device="cpu")


def test_decoder_with_a_promptEOL_template_exports_its_last_token(tiny_llama_dir, tmp_path):
    _, _, got, want = exported_and_own(tiny_llama_dir, tmp_path, template=PROMPTEOL, template2=PROMPTEOL,
                                       pooler_type="last", test_template_denoising=True)
    assert torch.nn.functional.cosine_similarity(got, want).min() >= 0.9999
