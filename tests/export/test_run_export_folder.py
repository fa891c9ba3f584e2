"""A run's own export folder (<run>/sentence-transformers), which the run folder serves (its modules.json points
there): only the run's final model is exported there, and a re-export (another head) re-points the run folder, so
SentenceTransformer(<run>) gives the export's embeddings; the run's record and curves stay on its card; its
evaluation results are the run's own for an export that writes the same weights."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import saved_run, scored_pairs_file
from sentence_transformers import SentenceTransformer
from tiny_models import make_tiny_encoder

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


def test_results_of_the_runs_own_export_are_taken_for_an_export_of_the_same_weights(finished_run, tmp_path, capsys,
                                                                                   monkeypatch):
    """The README's workflow, run_eval.py on <run>/sentence-transformers then hf-cse-export <run> --eval_results, was
    refused: "results of <run>/sentence-transformers, not of the exported model". Taken where the weights they
    recorded are those the export writes, with their MTEB and own-pairs scores on the card; refused for an export
    of another head (--keep_projector) and for another model's export, and nothing is left behind."""
    from hf_cse.cli import evaluate as eval_cli
    from hf_cse.cli.export import main
    from hf_cse.evaluation.mteb_tasks import LocalSTSTask

    pairs = scored_pairs_file(tmp_path / "pairs.tsv", 15, 4, seed=7)
    monkeypatch.setattr(eval_cli, "get_mteb_tasks", lambda names: [LocalSTSTask.from_file(pairs, name=n)
                                                                   for n in names])

    def run_eval(model, out):
        argv = ["--model_name_or_path", str(model), "--tasks", "mteb:SentEvalSTSB", "--eval_file", str(pairs),
                "--output_dir", str(out), "--disable_tqdm", "true", "--device", "cpu"]
        assert eval_cli.main(argv) == 0, capsys.readouterr().err
        return out / "results.json"

    results = run_eval(finished_run / "sentence-transformers", tmp_path / "ev")
    assert main([str(finished_run), str(tmp_path / "st"), "--eval_results", str(results)]) == 0, \
        capsys.readouterr().err
    card, recorded = (tmp_path / "st" / "README.md").read_text(), json.loads(results.read_text())
    assert f"| SentEvalSTSB | `cosine_spearman` | scored pairs of the user's own under MTEB's task definition (not " \
           f"MTEB's data) | {recorded['mteb']['SentEvalSTSB']:.2f} |" in card
    assert f"| `custom` | file `pairs.tsv` | 15 | {recorded['own_data']['custom_spearman']:.2f} |" in card

    capsys.readouterr()
    assert main([str(finished_run), str(tmp_path / "st2"), "--keep_projector", "--eval_results", str(results)]) == 1
    assert (f"--eval_results holds the results of {finished_run / 'sentence-transformers'}, whose weights are not the "
            f"ones this export writes for {finished_run} (another model, or another head kept)") in \
        capsys.readouterr().err
    encoder = make_tiny_encoder(tmp_path / "encoder", seed=1)  # another model: the same shapes, other weights
    other = saved_run(encoder, tmp_path / "other", "checkpoint-1", {})
    to_sentence_transformer(str(other), other / "sentence-transformers")
    others = run_eval(other / "sentence-transformers", tmp_path / "ev-other")
    with pytest.raises(ExportError, match="holds the results of .*other/sentence-transformers, whose weights are not"):
        to_sentence_transformer(str(finished_run), tmp_path / "st2", eval_results=others)
    assert not (tmp_path / "st2").exists() and not list(tmp_path.glob(".st2*"))
