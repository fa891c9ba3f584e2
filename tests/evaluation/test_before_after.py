"""The run's last line, dev score before and after training (hf_cse.evaluation.before_after), on either scale a dev
metric comes in: hf_cse's Spearman x 100, or a sentence-transformers evaluator's score in [-1, 1]; and in either
direction: lower is better for a metric of one's own chosen with greater_is_better=False."""

from __future__ import annotations

import logging

from hf_cse.evaluation.before_after import DevChange, log_dev_change
from hf_cse.model_card.results import dev_change_line


def test_a_score_in_minus_one_to_one_keeps_its_change_visible_and_its_noise_on_its_scale(caplog):
    """A sentence-transformers evaluator's 0.43 -> 0.44 was printed "+0.00", and a loss of 0.3 (30 points) was not
    called worse: the noise of 0.5 was read on the x 100 scale."""
    small = DevChange("sts-dev_spearman_cosine", 0.4312, 0.4401, kept_step=4)
    assert small.line() == ("dev: before 0.4312 -> after 0.4401 (sts-dev_spearman_cosine, +0.0089); saved the "
                            "trained model of step 4")
    points = DevChange("stsb_spearman", 76.123, 78.456)
    assert points.line() == "dev: before 76.12 -> after 78.46 (stsb_spearman, +2.33)"
    assert DevChange("m", 0.8, 0.5).worse and not DevChange("m", 0.8, 0.797).worse
    assert DevChange("m", 80.0, 79.0).worse and not DevChange("m", 80.0, 79.7).worse
    with caplog.at_level(logging.WARNING):
        log_dev_change(logging.getLogger("t"), DevChange("m", 0.8, 0.5, kept_step=3))
    assert caplog.records[-1].getMessage().endswith("WORSE than the untrained encoder by more than 0.005; try a lower "
                                                    "learning_rate or fewer steps, or keep the encoder as it was")


def test_a_lower_is_better_metric_is_compared_and_described_the_way_it_was_chosen():
    """greater_is_better=False with one's own metric (a loss): a fall is a gain, the untrained encoder beats only a
    higher score, and the record and the model card say so; a correlation's record is as before."""
    loss = DevChange("distance", 1.0, 0.4, kept_step=2, greater_is_better=False)
    assert loss.better(0.4, 1.0) and not loss.better(1.0, 0.4) and not loss.better(float("nan"), 1.0)
    assert not loss.worse and DevChange("distance", 0.4, 1.0, greater_is_better=False).worse
    assert loss.as_dict()["greater_is_better"] is False and "greater_is_better" not in DevChange("m", 1, 2).as_dict()
    assert "(-0.60: better than the encoder it started from)" in dev_change_line(loss.as_dict())
    assert "(-0.60: worse than the encoder it started from)" in dev_change_line(DevChange("m", 1.0, 0.4).as_dict())
    # a run trained from Python too: the card names no script
    assert dev_change_line(DevChange("m", 1.0, 0.4).as_dict()).startswith("During training, the dev metric `m` went")
