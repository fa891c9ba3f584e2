"""An export loads, and loads again after sentence-transformers saves a copy of it, with every weight its encoder's
architecture has: no load report of missing or unexpected weights, no randomly initialised pooler written, the same
embeddings (hf_cse.export.modules.fill_unused_pooler)."""

from __future__ import annotations

import logging
from contextlib import contextmanager

import pytest
import torch
from safetensors.torch import load_file
from sentence_transformers import SentenceTransformer
from transformers import AutoModel
from transformers.utils import logging as hf_logging

from hf_cse.export import to_sentence_transformer
from hf_cse.models import SimCSEModel


@contextmanager
def transformers_warnings():
    """The warnings transformers logs inside (its load reports among them), as text."""
    records: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())

    handler, verbosity = Collect(level=logging.WARNING), hf_logging.get_verbosity()
    hf_logging.set_verbosity_warning()
    logging.getLogger("transformers").addHandler(handler)
    try:
        yield records
    finally:
        logging.getLogger("transformers").removeHandler(handler)
        hf_logging.set_verbosity(verbosity)


def pooler_tensors(folder):
    return {k: v for k, v in load_file(str(folder / "model.safetensors")).items() if "pooler" in k}


@pytest.mark.parametrize("kind", ["bert", "roberta", "distilbert"])
def test_an_export_and_a_copy_sentence_transformers_saves_load_every_weight(kind, request, tmp_path, sentences):
    folder = request.getfixturevalue(f"tiny_{kind}_dir")
    out = to_sentence_transformer(SimCSEModel.from_encoder(str(folder)), tmp_path / "st", tokenizer=str(folder))
    with transformers_warnings() as loading_export:
        st = SentenceTransformer(str(out), device="cpu")
    want = st.encode(sentences, convert_to_tensor=True)
    st.save(str(tmp_path / "copy"))
    with transformers_warnings() as loading_copy:
        copy = SentenceTransformer(str(tmp_path / "copy"), device="cpu")
        plain = AutoModel.from_pretrained(str(out))  # transformers alone builds what the folder holds, too
    warned = loading_export + loading_copy
    assert not [m for m in warned if "REPORT" in m or "MISSING" in m or "UNEXPECTED" in m], warned
    got = copy.encode(sentences, convert_to_tensor=True)
    assert torch.nn.functional.cosine_similarity(got, want).min().item() > 1 - 1e-6
    copy.save(str(tmp_path / "copy2"))  # what a load of the copy holds is what a save of it writes

    shipped = pooler_tensors(out)
    assert sorted(shipped) == sorted(n for n, _ in plain.named_parameters() if "pooler" in n)
    if kind == "distilbert":  # no pooler layer in its architecture: nothing added
        assert shipped == {}
        return
    # BERT / RoBERTa: the layer hf_cse trained without holds fixed values (identity, zeros), not random ones
    assert sorted(shipped) == ["pooler.dense.bias", "pooler.dense.weight"]
    torch.testing.assert_close(shipped["pooler.dense.weight"], torch.eye(32))
    torch.testing.assert_close(shipped["pooler.dense.bias"], torch.zeros(32))
    for again in (tmp_path / "copy", tmp_path / "copy2"):
        assert pooler_tensors(again).keys() == shipped.keys()
        for name, value in pooler_tensors(again).items():
            assert torch.equal(value, shipped[name]), (again.name, name)
    card = (out / "README.md").read_text()
    assert "**Pooler layer**" in card and "identity" in card

