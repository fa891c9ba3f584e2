"""The card of a run's checkpoint-<step> export shows only what is true of that checkpoint: not the run's final dev
outcome, final training metrics or curves; the settings it records itself where no record is given."""

from __future__ import annotations

import json
import shutil

import pytest
from helpers import saved_run

from hf_cse.export.training_info import for_checkpoint

RUN_INFO = {"data": {"source": "mine.txt", "num_sentences": 321}, "training_args": {"learning_rate": 0.003},
            "train_metrics": {"train_loss": 0.123456}, "training_curves": "training_curves.png",
            "dev": {"metric": "stsb_spearman", "before": 41.35, "after": 37.43, "delta": -3.92, "kept_step": 0}}


@pytest.fixture
def run_with_checkpoint(tiny_bert_dir, tmp_path):
    run = saved_run(tiny_bert_dir, tmp_path / "run", "checkpoint-3", RUN_INFO)
    (run / "checkpoint-3" / "hf_cse_settings.json").write_text(json.dumps({"learning_rate": 0.003, "seed": 7}))
    return run


def test_a_checkpoint_keeps_only_the_runs_data_and_settings(run_with_checkpoint):
    run = run_with_checkpoint
    assert for_checkpoint(RUN_INFO, run) == RUN_INFO  # the run's final model: all of it
    kept = for_checkpoint(RUN_INFO, run / "checkpoint-3")
    assert not {"dev", "train_metrics", "training_curves"} & kept.keys()
    assert kept["data"] == RUN_INFO["data"] and kept["training_args"] == RUN_INFO["training_args"]
    assert kept["checkpoint"].startswith("step 3 of its run")
    own = for_checkpoint(None, run / "checkpoint-3")  # no record given: the checkpoint's own settings
    assert own["training_args"] == {"learning_rate": 0.003, "seed": 7}


@pytest.mark.slow  # two exports
def test_a_checkpoints_card_does_not_describe_the_runs_final_model(run_with_checkpoint, tmp_path, capsys):
    from hf_cse.cli.export import main

    run = run_with_checkpoint
    out = tmp_path / "st"
    assert main([str(run / "checkpoint-3"), str(out), "--training_info", str(run / "training_info.json")]) == 0, \
        capsys.readouterr().err
    card = (out / "README.md").read_text()
    assert "Training did not beat" not in card and "41.35" not in card and "37.43" not in card
    assert "0.123456" not in card and "0.1235" not in card and "training_curves.png" not in card
    assert not (out / "training_curves.png").exists()
    assert "| Training sentences | 321 |" in card and "step 3 of its run" in card
    shutil.rmtree(out)
    assert main([str(run / "checkpoint-3"), str(out)]) == 0, capsys.readouterr().err  # its own settings
    card = (out / "README.md").read_text()
    assert "Training arguments were not recorded" not in card and "| `seed` | 7 |" in card
