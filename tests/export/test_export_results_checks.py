"""Evaluation results and training records an export refuses, in one line before the model is loaded: results
measured at another truncation length than the export's, and files that are not of the kind asked for."""

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
