"""A loss of exactly 0 at every step trains nothing and was not said: MET on all-MiniLM-L6-v2 (its margin met by
every pair from the first step) finished with weights equal to the encoder's and a card calling it trained."""

from __future__ import annotations

import json
import logging

import pytest
import torch
from helpers import tiny_args, tiny_train_dataset

from hf_cse.model_card.results import ZERO_LOSS
from hf_cse.models import SimCSEModel
from hf_cse.trainer import ContrastiveTrainer
from hf_cse.zero_loss import ZERO_LOSS_KEY, ZeroLossWatch, trained_nothing


def test_a_zero_loss_is_said_at_the_first_logging_step_and_at_the_end(caplog):
    watch = ZeroLossWatch()
    with caplog.at_level(logging.WARNING, "hf_cse.trainer"):
        watch.on_log({"loss": 0.0}, 5)
        watch.on_log({"loss": 0.0}, 10)  # said once, at the first window
        watch.at_end({"train_loss": 0.0}, [{"loss": 0.0}, {"loss": 0.0}, {"train_loss": 0.0}])
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2 and "up to step 5" in lines[0] and "trained nothing" in lines[1], lines
    caplog.clear()
    watch = ZeroLossWatch()
    with caplog.at_level(logging.WARNING, "hf_cse.trainer"):
        watch.on_log({"loss": 1e-9}, 5)
        watch.on_log({"loss": 0.0}, 10)  # a converged window later on: training did happen
        watch.at_end({"train_loss": 1e-10}, [{"loss": 1e-9}, {"loss": 0.0}])
    assert not caplog.records and not watch.trained_nothing
    assert trained_nothing({"train_loss": 0.0}) and not trained_nothing({"train_loss": 0.3}) and not trained_nothing({})
    # resumed: this training's steps had a loss of 0, the steps before the checkpoint did not
    assert not trained_nothing({"train_loss": 0.0}, [{"loss": 0.2}, {"loss": 0.0}])


@pytest.mark.slow
@pytest.mark.parametrize("margin, inactive", [(-1.995, True), (0.44, False)])
def test_a_run_whose_margin_every_pair_meets_says_it_trained_nothing(tiny_bert_dir, sentences, tmp_path, caplog,
                                                                     margin, inactive):
    """MET's hinge max(0, d_pos - d_neg + m): with m = -1.995 no anchor is active (0.01 <= d <= 2, clamped, so
    d_neg - d_pos >= -1.99; a margin at or below -2 is refused outright), so the gradient is 0."""
    ds, tok = tiny_train_dataset(tiny_bert_dir, sentences, tmp_path / "data", repeat=2)
    model = SimCSEModel.from_encoder(str(tiny_bert_dir), loss="met", loss_kwargs={"margin": margin})
    before = {k: v.clone() for k, v in model.encoder.state_dict().items()}
    out = tmp_path / "out"
    trainer = ContrastiveTrainer(model=model, args=tiny_args(out, max_steps=2), train_dataset=ds,
                                 processing_class=tok)
    with caplog.at_level(logging.WARNING, "hf_cse.trainer"):
        trainer.train()
        trainer.save_run()
    said = [r.getMessage() for r in caplog.records if "exactly 0" in r.getMessage()]
    assert len(said) == (2 if inactive else 0), said
    unchanged = all(torch.equal(before[k], v) for k, v in model.encoder.state_dict().items())
    assert unchanged is inactive
    card = (out / "sentence-transformers" / "README.md").read_text()
    assert (ZERO_LOSS in card) is inactive
    assert json.loads((out / "training_info.json").read_text()).get(ZERO_LOSS_KEY) is (True if inactive else None)
