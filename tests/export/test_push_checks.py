"""A push to the Hub is refused before training where the export it pushes cannot be made."""

from __future__ import annotations

import huggingface_hub
import pytest
from huggingface_hub import constants

from hf_cse import hub_reach
from hf_cse.export import ExportError
from hf_cse.models import SimCSEModel


@pytest.fixture
def hub_reachable(monkeypatch):
    monkeypatch.setattr(hub_reach, "hub_unreachable", lambda: None)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub, "get_token", lambda: "hf_fake")


@pytest.mark.slow  # reads the encoder (~0.7 s)
def test_run_unsup_refuses_a_push_of_a_pooler_the_export_cannot_express_before_training(
        tiny_bert_dir, tmp_path, hub_reachable, monkeypatch, capsys):
    """--pooler_type avg_first_last --push_to_hub trained the whole run, then failed at the export."""
    from helpers import train_args

    from hf_cse.cli.train import main

    monkeypatch.setattr("hf_cse.cli.train.load_train_dataset", lambda *a, **k: pytest.fail("training started"))
    argv = train_args(tiny_bert_dir, tmp_path, tmp_path / "out", "--pooler_type", "avg_first_last",
                      "--push_to_hub", "--hub_model_id", "someone/run")
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "--push_to_hub someone/run pushes the sentence-transformers export" in err
    assert "'avg_first_last', which mixes several layers" in err and "train with --pooler_type cls, avg or max" in err
    assert not (tmp_path / "out" / "config.json").exists()


@pytest.mark.slow  # builds a model and its data (~0.7 s)
def test_a_python_trainer_refuses_it_when_built(tiny_bert_dir, tmp_path, hub_reachable, sentences):
    from helpers import tiny_args, tiny_train_dataset

    from hf_cse.trainer import ContrastiveTrainer

    ds, tok = tiny_train_dataset(tiny_bert_dir, sentences, tmp_path)
    model = SimCSEModel.from_encoder(str(tiny_bert_dir), pooler_type="avg_first_last")
    with pytest.raises(ExportError, match=r"^push_to_hub someone/run pushes .*'avg_first_last'.*pooler_type cls"):
        ContrastiveTrainer(model=model, train_dataset=ds, processing_class=tok,
                           args=tiny_args(tmp_path / "out", push_to_hub=True, hub_model_id="someone/run"))
