"""A run's own export folder (<run>/sentence-transformers), which the run folder serves (its modules.json points
there): only the run's final model is exported there, and a re-export (another head) re-points the run folder, so
SentenceTransformer(<run>) gives the export's embeddings; the run's record and curves stay on its card."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import saved_run
from sentence_transformers import SentenceTransformer

from hf_cse.export import ExportError, to_sentence_transformer
from hf_cse.export.folders import point_run_folder_at_export

pytestmark = pytest.mark.slow  # exports and loads


@pytest.fixture
def finished_run(tiny_bert_dir, tmp_path):
    info = {"data": {"source": "mine.txt", "num_sentences": 321}, "training_curves": "training_curves.png"}
    run = saved_run(tiny_bert_dir, tmp_path / "run", "checkpoint-2", info)
    out = to_sentence_transformer(str(run), run / "sentence-transformers", training_info=info)
    point_run_folder_at_export(run, out)
    return run


def test_a_checkpoint_of_the_run_is_refused_in_the_runs_export_folder(finished_run, capsys):
    from hf_cse.cli.export import main

    run, out = finished_run, finished_run / "sentence-transformers"
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    with pytest.raises(ExportError, match="is the export the training run .* serves .* is not that run's final model"):
        to_sentence_transformer(str(run / "checkpoint-2"), out, overwrite=True)
    assert main([str(run / "checkpoint-2"), str(out), "--overwrite"]) == 1
    assert "is not that run's final model" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before


def test_a_re_export_of_the_run_re_points_the_run_folder_and_keeps_its_record(finished_run, capsys):
    from hf_cse.cli.export import main

    run, out = finished_run, finished_run / "sentence-transformers"
    assert main([str(run), str(out), "--overwrite", "--keep_projector"]) == 0, capsys.readouterr().err
    assert [m["path"] for m in json.loads((run / "modules.json").read_text())][-1].startswith(
        "sentence-transformers/2_Dense")
    sentences = ["a cat sat", "the dog ran far"]
    served = SentenceTransformer(str(run), device="cpu").encode(sentences)
    exported = SentenceTransformer(str(out), device="cpu").encode(sentences)
    assert np.allclose(served, exported, atol=1e-6)
    card = (out / "README.md").read_text()
    assert "| Training sentences | 321 |" in card and (out / "training_curves.png").is_file()
