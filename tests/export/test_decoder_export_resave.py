"""A bidirectional decoder's export (LLM2Vec's setting, hf_cse.models.loading) embeds a batch without padding as the
hf_cse model does, and so do the copies sentence-transformers saves of it and of a copy: its config.json's
``is_causal: false`` is what every load follows (transformers 5.24 passes it to SDPA ahead of the attention modules'
own flags), not ``model_kwargs``, which a copy loses. Where transformers would not follow it (simulated here: SDPA
that reads the modules' flags alone), the export pins eager attention, its card says what a copy needs, and hf_cse's
own loader of a copy still attends both ways."""

from __future__ import annotations

import json

import pytest
import torch
from sentence_transformers import SentenceTransformer
from transformers import AutoTokenizer
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from hf_cse.evaluation import SentenceEncoder
from hf_cse.export import to_sentence_transformer
from hf_cse.export.errors import ExportError
from hf_cse.export.verify import verify_export
from hf_cse.models import SimCSEModel


def bidirectional_llama(tiny_llama_dir):
    return SimCSEModel.from_encoder(str(tiny_llama_dir), pooler_type="last", bidirectional=True).eval()


def unpadded_batches(tokenizer, sentences):
    """One sentence alone, and the largest group of sentences of one token length: batches without padding."""
    by_length: dict[int, list[str]] = {}
    for s in sentences:
        by_length.setdefault(len(tokenizer(s)["input_ids"]), []).append(s)
    same = max(by_length.values(), key=len)
    assert len(same) > 1, by_length  # the sentences give a batch of several without padding
    return [sentences[:1], same]


def own_embeddings(model, tokenizer, batch):
    enc = tokenizer(batch, padding=True, return_tensors="pt")
    assert bool(enc["attention_mask"].all())
    with torch.no_grad():
        return model.sentence_embedding(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"],
                                        pooler="last", projector=False)


def min_cos(got, want):
    return torch.nn.functional.cosine_similarity(torch.as_tensor(got).float(), want.float(), dim=-1).min().item()


@pytest.fixture
def sdpa_following_module_flags(monkeypatch):
    """SDPA as a transformers that does not pass ``config.is_causal`` to attention calls would run it: the attention
    module's own ``is_causal`` flag decides when a batch has no padding (the mask builders then return no mask)."""
    sdpa = ALL_ATTENTION_FUNCTIONS["sdpa"]

    def flags_only(module, *args, **kwargs):
        kwargs.pop("is_causal", None)
        return sdpa(module, *args, **kwargs)

    monkeypatch.setitem(ALL_ATTENTION_FUNCTIONS, "sdpa", flags_only)


def test_a_bidirectional_export_and_copies_of_copies_embed_unpadded_batches_as_hf_cse(tiny_llama_dir, tmp_path,
                                                                                      sentences):
    model = bidirectional_llama(tiny_llama_dir)
    tok = AutoTokenizer.from_pretrained(tiny_llama_dir)
    out = to_sentence_transformer(model, tmp_path / "st", tokenizer=str(tiny_llama_dir))
    # nothing that a copy would lose: config.json's is_causal is the one setting
    assert "model_kwargs" not in json.loads((out / "sentence_bert_config.json").read_text())
    assert json.loads((out / "config.json").read_text())["is_causal"] is False
    assert "**Attention**" not in (out / "README.md").read_text()
    st = SentenceTransformer(str(out), device="cpu")
    st.save(str(tmp_path / "copy"))
    copy = SentenceTransformer(str(tmp_path / "copy"), device="cpu")
    copy.save(str(tmp_path / "copy2"))
    copy2 = SentenceTransformer(str(tmp_path / "copy2"), device="cpu")
    for name, loaded in (("export", st), ("copy", copy), ("copy of the copy", copy2)):
        assert loaded[0].auto_model.config._attn_implementation == "sdpa", name  # the flag-following path
        assert loaded[0].auto_model.config.is_causal is False, name
        for batch in unpadded_batches(tok, sentences):
            cos = min_cos(loaded.encode(batch, convert_to_tensor=True), own_embeddings(model, tok, batch))
            assert cos > 1 - 1e-5, (name, batch, cos)
    # the check sees causal attention: the same weights loaded causally embed differently
    config = tmp_path / "copy2" / "config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "is_causal": True}))
    causal = SentenceTransformer(str(tmp_path / "copy2"), device="cpu")
    batch = sentences[:1]
    assert min_cos(causal.encode(batch, convert_to_tensor=True), own_embeddings(model, tok, batch)) < 0.999


def test_where_sdpa_follows_the_module_flags_the_export_pins_eager_and_hf_cse_loads_copies_bidirectionally(
        tiny_llama_dir, tmp_path, sentences, sdpa_following_module_flags):
    model = bidirectional_llama(tiny_llama_dir)
    tok = AutoTokenizer.from_pretrained(tiny_llama_dir)
    out = to_sentence_transformer(model, tmp_path / "st", tokenizer=str(tiny_llama_dir))
    st_config = json.loads((out / "sentence_bert_config.json").read_text())
    assert st_config["model_kwargs"] == {"attn_implementation": "eager"}
    card = (out / "README.md").read_text()
    assert "**Attention**" in card and 'model_kwargs={"attn_implementation": "eager"}' in card
    st = SentenceTransformer(str(out), device="cpu")
    batch = sentences[:1]
    want = own_embeddings(model, tok, batch)
    assert min_cos(st.encode(batch, convert_to_tensor=True), want) > 1 - 1e-5
    st.save(str(tmp_path / "copy"))
    # the limitation the card names: a plain load of the copy has lost model_kwargs and attends causally here
    plain = SentenceTransformer(str(tmp_path / "copy"), device="cpu")
    assert min_cos(plain.encode(batch, convert_to_tensor=True), want) < 0.999
    pinned = SentenceTransformer(str(tmp_path / "copy"), device="cpu", model_kwargs={"attn_implementation": "eager"})
    assert min_cos(pinned.encode(batch, convert_to_tensor=True), want) > 1 - 1e-5
    ours = SentenceEncoder.from_pretrained(str(tmp_path / "copy"), device="cpu", show_progress_bar=False)
    for batch in unpadded_batches(tok, sentences):
        assert min_cos(ours.encode(batch), own_embeddings(model, tok, batch)) > 1 - 1e-5, batch
    # and the export check itself looks at a batch without padding: the unpinned copy is refused
    with pytest.raises(ExportError, match="differ from the model's"):
        verify_export(tmp_path / "copy", model, tok, "lasttoken", False, 64)
