"""Run folders written by the training script of November 2026 (tests/fixtures/legacy_run, made by
make_legacy_run.py with the code from before the command line moved into hf_cse/cli): today's code resumes the
interrupted one to the same model the old code finished with, refuses to train over the finished one, and
re-exports the finished one to the same sentence-transformers embeddings as its own export."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from hf_cse.checks import InputError
from hf_cse.cli import train as train_cli
from hf_cse.cli.export import main as export_main

pytestmark = pytest.mark.slow

LEGACY_RUN = Path(__file__).parents[1] / "fixtures" / "legacy_run"
SENTENCES = ["a small cat sat on the red book", "the river is fast", "people eat good food in the old city"]


@pytest.fixture
def legacy(tmp_path):
    """The fixture copied to ``tmp_path``, its run records pointing at the copied encoder and corpus (they hold the
    absolute paths of where the fixture was made)."""
    shutil.copytree(LEGACY_RUN, tmp_path / "legacy")
    root = tmp_path / "legacy"
    for record in root.glob("*/hf_cse_run.json"):
        data = json.loads(record.read_text())
        data.update(encoder=str(root / "encoder"), train_file=str(root / "train.txt"))
        record.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    flags = json.loads((root / "flags.json").read_text())
    return root, ["--model_name_or_path", str(root / "encoder"), "--train_file", str(root / "train.txt"), *flags]


def test_an_interrupted_run_of_the_old_script_resumes_to_the_same_model(legacy, caplog):
    root, flags = legacy
    with caplog.at_level("INFO"):
        train_cli.train_from_args([*flags, "--output_dir", str(root / "interrupted")])
    assert any("checkpoint-2" in r.getMessage() for r in caplog.records if "resum" in r.getMessage().lower())
    state = json.loads((root / "interrupted" / "trainer_state.json").read_text())
    assert state["global_step"] == 4
    # the old code trained padded: the resumed steps do too (other dropout-mask shapes would change the model)
    assert json.loads((root / "interrupted" / "config.json").read_text())["padding_free"] is False
    assert any("padding-free: off (the run it resumes" in r.getMessage() for r in caplog.records)
    resumed = load_file(root / "interrupted" / "model.safetensors")
    finished = load_file(root / "finished" / "model.safetensors")
    at_step_2 = load_file(root / "interrupted" / "checkpoint-2" / "model.safetensors")
    assert resumed.keys() == finished.keys()
    # steps 3-4 moved the weights well beyond the tolerance, so the comparison can tell the runs apart
    assert max((finished[k] - at_step_2[k]).abs().max().item() for k in finished) > 1e-5
    for name, weight in finished.items():
        torch.testing.assert_close(resumed[name], weight, rtol=0, atol=5e-6, msg=name)


def test_a_finished_run_of_the_old_script_is_not_trained_over(legacy):
    root, flags = legacy
    with pytest.raises(InputError, match="already holds a finished run.*--overwrite_output_dir"):
        train_cli.train_from_args([*flags, "--output_dir", str(root / "finished")])


def test_a_finished_run_of_the_old_script_re_exports_to_the_same_embeddings(legacy):
    from sentence_transformers import SentenceTransformer

    root, _ = legacy
    assert export_main([str(root / "finished"), str(root / "again")]) == 0
    old = SentenceTransformer(str(root / "finished" / "sentence-transformers"), device="cpu")
    new = SentenceTransformer(str(root / "again"), device="cpu")
    assert [type(m).__name__ for m in new] == [type(m).__name__ for m in old]
    torch.testing.assert_close(new.encode(SENTENCES, convert_to_tensor=True),
                               old.encode(SENTENCES, convert_to_tensor=True), rtol=0, atol=1e-5)
