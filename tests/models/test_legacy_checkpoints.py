"""Checkpoints saved by the code of November 2026 (tests/fixtures/legacy, made by make_legacy_checkpoints.py: config
fields loss / loss_kwargs / dcl_* and a plain-dict encoder_config) still load with today's code, give the same
embeddings and ask for the same objectives."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModel, AutoTokenizer

from hf_cse.models import DiffCSEModel, ImSimCSEModel, SimCSEModel
from hf_cse.objectives import ObjectiveSpec, objective_specs

LEGACY = Path(__file__).parents[1] / "fixtures" / "legacy"

CASES = {
    "simcse_gs_dcl": (SimCSEModel, [
        ObjectiveSpec("contrastive", "gs_infonce", 1.0, {"temperature": 0.07, "num_noise": 8}),
        ObjectiveSpec("dcl", "dcl", 0.2, {"temperature": 4.0, "normalization": "paper"}),
    ]),
    "imsimcse": (ImSimCSEModel, [
        ObjectiveSpec("contrastive", "off_dropout_infonce", 1.0, {"temperature": 0.05, "m": 0.9}),
        ObjectiveSpec("dcl", "dcl", 0.1, {"temperature": 5.0, "normalization": "code"}),
    ]),
    "diffcse": (DiffCSEModel, [ObjectiveSpec("contrastive", "infonce", 1.0, {"temperature": 0.05})]),
}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("load", ["auto", "class"])
def test_legacy_checkpoint_loads_with_the_same_embeddings_and_objectives(name, load):
    cls, expected_specs = CASES[name]
    folder = LEGACY / name
    model = AutoModel.from_pretrained(folder) if load == "auto" else cls.from_pretrained(folder)
    assert type(model) is cls
    model.eval()
    saved = json.loads((folder / "embeddings.json").read_text())
    tok = AutoTokenizer.from_pretrained(folder)
    batch = tok(saved["sentences"], padding=True, return_tensors="pt")
    with torch.no_grad():
        emb = model.sentence_embedding(batch["input_ids"], batch["attention_mask"], batch.get("token_type_ids"))
    # float32 forward of the same weights on the same inputs; 1e-5 absorbs a different reduction order (threads)
    torch.testing.assert_close(emb, torch.tensor(saved["embeddings"]), atol=1e-5, rtol=1e-5)
    assert objective_specs(model.config) == expected_specs
    if name == "simcse_gs_dcl":
        assert model.config.dropout == 0.15 and model.config.pooler_type == "avg"
        assert model.encoder.config.hidden_dropout_prob == 0.15  # the dropout override still applies
