"""Training curves (run_unsup.py), the model card's link to them, and run_eval's comparison plot."""

import json

import pytest
from helpers import random_sentences, scored_pairs_file, train_args

from hf_cse.cli import export as export_cli
from hf_cse.cli import train as train_cli
from hf_cse.evaluation.figures import plot_task_comparison
from hf_cse.evaluation.results import EvalResults
from hf_cse.plots import curve_panels, plot_training_curves
from hf_cse.run_files import CURVES_FILE


def _png_shape(path):
    from matplotlib.image import imread

    return imread(path).shape




@pytest.mark.slow
def test_run_unsup_writes_curves_and_the_card_links_them(tiny_bert_dir, tmp_path):
    train = tmp_path / "train.txt"
    train.write_text("\n".join(random_sentences(48)) + "\n")
    out = tmp_path / "out"
    dev = scored_pairs_file(tmp_path / "dev.tsv", 20, 5, seed=11)
    train_cli.train_from_args(["--model_name_or_path", str(tiny_bert_dir), "--train_file", str(train), "--max_steps",
                    "6",
                    "--per_device_train_batch_size", "8", "--logging_steps", "1", "--output_dir", str(out),
                    "--use_cpu", "--disable_tqdm", "true", "--eval_file", str(dev),
                    "--eval_strategy", "steps", "--eval_steps", "3"])
    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    panels = curve_panels(history)
    assert set(panels["loss terms"]) == {"loss", "contrastive_loss"}
    assert set(panels["cosine of positive / negative pairs"]) == {"pos_cos", "neg_cos"}
    assert {"gd_active", "hardest_weight"} <= set(panels["gradient diagnostics"])
    assert panels["dev metrics (evaluation)"] == ["eval_custom_spearman"]
    height, width, _ = _png_shape(out / CURVES_FILE)
    assert height > 400 and width > 800
    export = out / "sentence-transformers"
    assert (export / CURVES_FILE).read_bytes() == (out / CURVES_FILE).read_bytes()
    card = (export / "README.md").read_text()
    assert f"]({CURVES_FILE})" in card and "### Training curves" in card
    # hf-cse-export of the run folder: its card linked the image, which stayed behind
    assert export_cli.main([str(out), str(tmp_path / "exported")]) == 0
    assert (tmp_path / "exported" / CURVES_FILE).read_bytes() == (out / CURVES_FILE).read_bytes()
    assert f"]({CURVES_FILE})" in (tmp_path / "exported" / "README.md").read_text()
    (out / CURVES_FILE).unlink()  # gone: no link to a missing image
    assert export_cli.main([str(out), str(tmp_path / "without")]) == 0
    assert CURVES_FILE not in (tmp_path / "without" / "README.md").read_text()


@pytest.mark.slow
def test_a_run_shorter_than_the_logging_interval_says_it_wrote_no_curves(tiny_bert_dir, tmp_path, caplog):
    out = tmp_path / "out"
    with caplog.at_level("INFO"):
        train_cli.train_from_args(train_args(tiny_bert_dir, tmp_path, out, "--logging_steps", "5"))
    assert not (out / CURVES_FILE).exists()
    assert "training_curves" not in json.loads((out / "training_info.json").read_text())
    assert "training curves: none written (nothing was logged: the run is shorter than logging_steps=5)" \
        in caplog.text


def test_no_curves_without_logged_values(tmp_path):
    assert curve_panels([{"step": 1, "learning_rate": 1e-3}]) == {}
    assert plot_training_curves([], tmp_path / "c.png") is None and not (tmp_path / "c.png").exists()


def test_comparison_plot_has_a_group_per_task(tmp_path):
    results = [{"model": "a/simcse", "STSBenchmark": 80.0, "MR": 75.0, "mteb": {"STS22": 60.0}},
               {"model": "b/diffcse", "STSBenchmark": 82.0, "own_data": {"mine_spearman": 70.0, "pairs": 20}}]
    path = plot_task_comparison([EvalResults.from_dict(r) for r in results], tmp_path / "cmp.png")
    assert _png_shape(path)[0] > 300
    assert plot_task_comparison([EvalResults(model="x")], tmp_path / "none.png") is None


@pytest.mark.parametrize("with_curves", [True, False])
def test_model_card_links_curves_only_when_recorded(with_curves):
    from hf_cse.model_card.sections import training_curves_section

    text = training_curves_section({"training_curves": CURVES_FILE} if with_curves else {})
    assert (f"]({CURVES_FILE})" in text) is with_curves
