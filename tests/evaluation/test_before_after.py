"""The run's last line, dev score before and after training (hf_cse.evaluation.before_after), on either scale a dev
metric comes in: hf_cse's Spearman x 100, or a sentence-transformers evaluator's score in [-1, 1]."""

from __future__ import annotations

import logging

from hf_cse.evaluation.before_after import DevChange, log_dev_change


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
