"""Evaluation results and training records an export refuses, in one line before the model is loaded: results
measured at another truncation length than the export's, those of an evaluation stopped before it finished, and
files that are not of the kind asked for."""

from __future__ import annotations

import json
import shutil

import pytest
from transformers import AutoTokenizer

from hf_cse.export import ExportError, to_sentence_transformer
from hf_cse.models import SimCSEModel


@pytest.fixture
def ckpt(tiny_bert_dir, tmp_path):
    folder = tmp_path / "ckpt"
    SimCSEModel.from_encoder(str(tiny_bert_dir)).save_pretrained(folder)
    AutoTokenizer.from_pretrained(str(tiny_bert_dir)).save_pretrained(folder)
    return folder


def cli_error(capsys, *argv) -> str:
    from hf_cse.cli.export import main

    assert main([str(a) for a in argv]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("hf-cse-export: error: ") and "\n" not in err and "Traceback" not in err
    return err


def no_loading(monkeypatch):
    import hf_cse.export.sentence_transformers as export

    monkeypatch.setattr(export, "load_model", lambda *a: pytest.fail("the model was loaded"))


def test_results_measured_at_another_length_are_refused_before_loading(ckpt, tmp_path, capsys, monkeypatch):
    """run_eval.py --max_seq_length 8 scores another embedding than the export's (64 tokens, the tiny encoder's
    limit): refused naming both lengths and the fix; the export's own length is taken."""
    monkeypatch.chdir(tmp_path)
    results = tmp_path / "results.json"
    results.write_text(json.dumps({"model": "ckpt", "STSBenchmark": 35.4, "settings": {"max_length": 8}}))
    no_loading(monkeypatch)
    err = cli_error(capsys, "ckpt", "st", "--eval_results", results)
    assert "were measured with max_length 8, but the export truncates at --max_seq_length 64" in err
    assert "run_eval.py with --max_seq_length 64, export with --max_seq_length 8" in err
    err = cli_error(capsys, "ckpt", "st", "--eval_results", results, "--max_seq_length", "16")
    assert "max_length 8, but the export truncates at --max_seq_length 16" in err
    with pytest.raises(ExportError, match="max_length 8, but the export truncates at max_seq_length 64"):
        to_sentence_transformer("ckpt", "st", eval_results=results)
    assert not (tmp_path / "st").exists()


@pytest.mark.slow  # an export
def test_results_measured_at_the_exports_length_are_taken(ckpt, tmp_path, capsys, monkeypatch):
    from hf_cse.cli.export import main

    monkeypatch.chdir(tmp_path)
    results = tmp_path / "results.json"
    results.write_text(json.dumps({"model": "ckpt", "STSBenchmark": 35.4, "settings": {"max_length": 8}}))
    assert main(["ckpt", "st", "--eval_results", str(results), "--max_seq_length", "8"]) == 0, \
        capsys.readouterr().err
    assert "35.40" in (tmp_path / "st" / "README.md").read_text()
    shutil.rmtree(tmp_path / "st")


def test_results_of_an_evaluation_stopped_before_it_finished_are_refused_before_loading(ckpt, tmp_path, capsys,
                                                                                           monkeypatch):
    """A results.json run_eval.py left when it was stopped (its unfinished_tasks) was exported as it was: the card
    showed the tasks it finished as the model's evaluation. Refused naming the tasks and the fix; results stopped
    while their plots were drawn hold every score and are taken."""
    from hf_cse.evaluation.results import EvalResults
    from hf_cse.model_card import ModelCardError, read_eval_results

    monkeypatch.chdir(tmp_path)
    results = tmp_path / "results.json"
    results.write_text(json.dumps({"model": "ckpt", "STSBenchmark": 35.4,
                                   "unfinished_tasks": ["SICKRelatedness", "MR", "plots"]}))
    no_loading(monkeypatch)
    err = cli_error(capsys, "ckpt", "st", "--eval_results", results)
    assert (f"{results} holds an evaluation stopped before it finished (no results yet for SICKRelatedness, MR): run "
            "the run_eval.py command that wrote it again, with the same settings and output folder, to finish it, "
            "and give its results.json then; or leave --eval_results out.") in err
    with pytest.raises(ModelCardError, match=r"^eval_results holds an evaluation stopped before it finished \(no "
                                             r"results yet for SICKRelatedness, MR\)"):
        to_sentence_transformer("ckpt", "st", eval_results=EvalResults.from_dict(json.loads(results.read_text())))
    assert not (tmp_path / "st").exists()
    results.write_text(json.dumps({"model": "ckpt", "STSBenchmark": 35.4, "unfinished_tasks": ["plots"]}))
    assert read_eval_results(results).score("STSBenchmark") == 35.4
