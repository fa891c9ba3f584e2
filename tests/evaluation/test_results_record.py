"""The typed results record: results.json's layout both ways, and averages labelled with the tasks they are over
(results.md, the printout, the model card, the experiment tables)."""

from __future__ import annotations

import importlib.util
import json
import math

import pytest
from eval_helpers import REPO, FakeEncoder, write_toy_senteval

from hf_cse.cli import evaluate as eval_cli
from hf_cse.evaluation import EvalResults, average_label, evaluate, summary_text, write_report
from hf_cse.evaluation import data as D
from hf_cse.evaluation.report import markdown_report
from hf_cse.files import weights_fingerprint
from hf_cse.model_card import evaluation_section, read_eval_results
from hf_cse.writing import json_safe

# results.json of one model in the layout run_eval.py writes (keys in its order), every kind of entry present
TODAY = {
    "model": "out/simcse", "STS12": 68.4, "STS13": 82.37, "STS14": 74.28, "STS15": 80.91, "STS16": 78.56,
    "STSBenchmark": 76.85, "SICKRelatedness": 72.23, "avg": 76.23, "alignment": 0.2134, "uniformity": -2.31,
    "R@1": 41.2, "R@5": 70.1, "R@10": 80.4, "MR": 81.18, "CR": 86.46, "SUBJ": 94.45, "MPQA": 88.88, "SST2": 85.5,
    "TREC": 89.8, "MRPC": 74.43, "transfer_avg": 85.81,
    "details": {"sts": {"STS12": {"subsets": {"MSRpar": {"spearman": 60.1, "pearson": 61.0, "n": 750}},
                                  "all": 68.4, "wmean": 68.4, "mean": 68.4}},
                "mteb": {"STS22": {"main_score": 0.61}}},
    "settings": {"model": "out/simcse", "pooler": "cls_before_pooler", "mode": "test", "sts_aggregation": "all"},
    "timing": {"sts_seconds": 9.5},
    "own_data": {"mine_spearman": 70.25, "pairs": 20, "source": "mine.csv"},
    "mteb": {"STS22": 61.0},
}


def test_todays_layout_reads_back_with_the_same_scores_and_writes_the_same_json():
    record = EvalResults.from_dict(json.loads(json.dumps(TODAY)))
    assert record.sts["STS12"] == 68.4 and record.sts_avg == 76.23 and record.transfer["SST2"] == 85.5
    assert record.transfer_avg == 85.81 and record.retrieval == {"R@1": 41.2, "R@5": 70.1, "R@10": 80.4}
    assert (record.alignment, record.uniformity) == (0.2134, -2.31)
    assert record.own_data_scores() == {"mine": 70.25} and record.mteb == {"STS22": 61.0}
    assert list(record.to_dict()) == list(TODAY) and record.to_dict() == TODAY
    assert EvalResults.from_dict(record.to_dict()) == record


def test_a_results_json_written_by_an_earlier_run_eval_reads_back():
    """A cell of experiments/results holds the results.json that run_eval.py wrote at the time, as it wrote it."""
    cell = json.loads((REPO / "experiments" / "results" / "domain" / "simcse__seed42.json").read_text())
    saved = cell["eval"]
    record = EvalResults.from_dict(saved)
    assert record.sts == {t: saved[t] for t in ("STSBenchmark", "SICKRelatedness")}
    assert record.sts_avg == saved["avg"] and record.alignment == saved["alignment"]
    assert record.model == saved["model"] and record.details == saved["details"]
    assert json_safe(record.to_dict()) == saved and list(record.to_dict()) == list(saved)


def test_unknown_keys_are_kept_and_a_bad_score_fails_in_one_line():
    record = EvalResults.from_dict({"model": "m", "STSBenchmark": 80.0, "note": "kept", "steps": 3})
    assert record.extra == {"note": "kept", "steps": 3} and record.to_dict()["note"] == "kept"
    with pytest.raises(ValueError, match="'STS12' must be a number, got 'high'") as err:
        EvalResults.from_dict({"STS12": "high"})
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="several models"):
        EvalResults.from_dict({"models": [TODAY]})


def test_an_undefined_average_stays_one_that_was_taken(tmp_path):
    """NaN (e.g. constant embeddings) is written as null; read back it is still an average that was taken."""
    record = EvalResults(model="m", sts={"STSBenchmark": None}, sts_avg=math.nan)
    path = write_report([record], tmp_path)["results.json"]
    saved = json.loads(path.read_text())
    assert saved["avg"] is None
    back = EvalResults.from_dict(saved)
    assert math.isnan(back.sts_avg) and json_safe(back.to_dict()) == saved


def test_the_runner_builds_the_record_in_todays_layout(tmp_path):
    root = write_toy_senteval(tmp_path / "se")
    partials = []
    record, extras = evaluate(FakeEncoder(), "sts,geometry,retrieval,MR,CR", root, mode="fast",
                              on_progress=lambda p: partials.append(json_safe(p.to_dict())))
    expected = ["model", *D.STS_TASKS, "avg", "alignment", "uniformity", "R@1", "R@5", "R@10", "MR", "CR",
                "transfer_avg", "details", "settings", "timing"]
    assert list(record.to_dict()) == expected
    assert record.sts_avg == pytest.approx(sum(record.sts.values()) / 7)
    assert record.transfer_avg == pytest.approx((record.transfer["MR"] + record.transfer["CR"]) / 2)
    assert record.sts_avg_label == "STS Avg." and record.transfer_avg_label == "Avg (MR, CR)"
    assert partials[0]["unfinished_tasks"] == ["geometry", "retrieval", "MR", "CR"] and "avg" in partials[0]
    assert partials[-2]["unfinished_tasks"] == ["CR"] and "transfer_avg" not in partials[-2]
    assert "unfinished_tasks" not in record.to_dict() and len(extras["stsb_cosine"]) > 0


def test_a_relative_senteval_folder_is_recorded_as_the_folder_it_names(tmp_path, monkeypatch):
    """results.json's settings (the library's and run_eval's command) recorded senteval_data_dir as given."""
    write_toy_senteval(tmp_path / "se")
    monkeypatch.chdir(tmp_path)
    folder = str((tmp_path / "se").resolve())
    record, _ = evaluate(FakeEncoder(), "STSB", "se", mode="fast")
    assert record.settings["senteval_data_dir"] == folder
    (args,) = eval_cli.argument_parser().parse_args_into_dataclasses(
        args=["--senteval_data_dir", "se", "--tasks", "STSB", "--output_dir", "ev"])
    assert args.senteval_data_dir == args.result_settings()["senteval_data_dir"] == folder


@pytest.mark.parametrize("tasks, label", [
    (D.STS_TASKS, "STS Avg."),
    (("STSBenchmark", "SICKRelatedness"), "Avg (STS-B, SICK-R)"),
    (("STSBenchmark",), "Avg (STS-B)"),
    (D.TRANSFER_TASKS, "Transfer Avg."),
    (("MR", "SST2"), "Avg (MR, SST)"),
    (("CR", "MRPC", "TREC"), "Avg (CR, TREC, MRPC)"),  # the tables' order, however the tasks ran
    (("SICKRelatedness", "STS12"), "Avg (STS12, SICK-R)"),
])
def test_average_labels(tasks, label):
    assert average_label(tasks) == label


def _record(sts_tasks, transfer_tasks=(), model="out/m"):
    sts = {t: 70.0 + i for i, t in enumerate(sts_tasks)}
    transfer = {t: 80.0 + i for i, t in enumerate(transfer_tasks)}
    return EvalResults(model=model, sts=sts, sts_avg=sum(sts.values()) / len(sts) if sts else None,
                       transfer=transfer, transfer_avg=sum(transfer.values()) / len(transfer) if transfer else None,
                       settings={"mode": "test"})


def test_results_md_and_the_printout_label_the_averages():
    full, two = _record(D.STS_TASKS, D.TRANSFER_TASKS), _record(("STSBenchmark", "SICKRelatedness"), ("MR", "CR"))
    md = markdown_report([full])
    assert "| STS-B | SICK-R | STS Avg. |" in md and "| MRPC | Transfer Avg. |" in md and "| Avg |" not in md
    md = markdown_report([two])
    assert "| SICK-R | Avg (STS-B, SICK-R) |" in md and "| MRPC | Avg (MR, CR) |" in md and "STS Avg." not in md
    md = markdown_report([full, _record(("STSBenchmark", "SICKRelatedness"), model="out/other")])
    assert "| Avg (see below) |" in md and "Averages: m: STS Avg.; other: Avg (STS-B, SICK-R)." in md
    text = summary_text(full)
    assert text.splitlines()[0].endswith("STS Avg.") and "Transfer Avg." in text
    text = summary_text(two)
    assert text.splitlines()[0].endswith("Avg (STS-B, SICK-R)") and text.splitlines()[2].endswith("Avg (MR, CR)")
    assert f"{two.sts_avg:.2f}" in text


def test_a_transfer_table_says_which_classifier_and_split_scored_it():
    """results.md's heading was "Transfer (accuracy x 100)" whatever the mode: the fast 5-fold classifier's figures
    read as the papers' (only settings.mode in results.json told them apart)."""
    record = _record((), ("CR", "MRPC"))
    assert "## Transfer (accuracy x 100; test accuracy, the papers' 10-fold classifier)" in markdown_report([record])
    record.settings = {"mode": "fast"}
    assert "## Transfer (accuracy x 100; test accuracy, the fast 5-fold classifier (SimCSE's fasttest), not the " \
           "papers')" in markdown_report([record])


def test_models_that_share_a_folder_name_get_distinct_labels_in_results_md():
    """Two runs' checkpoint-500 (or their sentence-transformers exports) side by side: each row says which it is."""
    runs = [_record(("STSBenchmark",), model=m) for m in ("out/run1/checkpoint-500", "/x/out/run2/checkpoint-500",
                                                        "run1/sentence-transformers", "run2/sentence-transformers",
                                                        "a/model", "b/a/model", "bert-base-uncased")]
    md = markdown_report(runs[:2])
    assert "| run1/checkpoint-500 | - | - | - | - | - |" in md and "| run2/checkpoint-500 | - |" in md
    assert "## Settings: run2/checkpoint-500" in md
    twice = [_record(("STSBenchmark", "SICKRelatedness"), model="out/m"), _record(("STSBenchmark",), model="out/m")]
    assert "Averages: m (1): Avg (STS-B, SICK-R); m (2): Avg (STS-B)." in markdown_report(twice)

    from hf_cse.evaluation.results import model_labels  # what the plots' legends use too

    assert model_labels(runs) == ["run1/checkpoint-500", "run2/checkpoint-500", "run1/sentence-transformers",
                                  "run2/sentence-transformers", "a/model", "b/a/model", "bert-base-uncased"]
    assert model_labels(twice) == ["m (1)", "m (2)"]


def test_the_printout_lists_geometry_own_data_and_mteb():
    text = summary_text(EvalResults.from_dict(TODAY), "mine")
    for line in ("alignment: 0.2134", "R@10: 80.40", "mine_spearman: 70.25", "MTEB STS22: 61.00"):
        assert line in text.splitlines(), line


def test_retrieval_and_geometry_have_the_same_decimals_in_the_printout_results_md_and_the_model_card():
    """R@k printed 4 decimals (41.2346) where results.md wrote 2 (41.23) and the card 4 significant digits (41.23,
    but 5.123): scores x 100 have two decimals everywhere, as the STS and transfer tables; alignment and uniformity
    four."""
    record = EvalResults.from_dict({**TODAY, "R@1": 41.234567, "R@5": 5.123456, "R@10": 100.0,
                                    "alignment": 0.213456, "uniformity": -2.3})
    expected = {"alignment": "0.2135", "uniformity": "-2.3000", "R@1": "41.23", "R@5": "5.12", "R@10": "100.00"}
    printed = dict(line.split(": ") for line in summary_text(record).splitlines() if line.split(": ")[0] in expected)
    md = markdown_report([record]).split("## Geometry and retrieval (STS-B test)")[1].strip().splitlines()
    assert md[0] == "| model | alignment | uniformity | R@1 | R@5 | R@10 |"
    in_md = dict(zip(expected, md[2].strip("| ").split(" | ")[1:]))
    card = evaluation_section(record, "CLS")
    in_card = {key: line.split(" | ")[1].rstrip(" |") for line in card.splitlines() for key in expected
               if line.startswith(f"| `{key}` |")}
    assert printed == in_md == in_card == expected


def test_the_model_card_reads_a_results_file_and_labels_its_averages(tmp_path):
    path = tmp_path / "results.json"
    path.write_text(json.dumps(_record(("STSBenchmark", "SICKRelatedness")).to_dict()))
    section = evaluation_section(read_eval_results(path), "CLS")
    assert "| STS-B | SICK-R | Avg (STS-B, SICK-R) |" in section
    assert "| STS Avg. |" in evaluation_section(read_eval_results(TODAY), "CLS")


def test_the_experiment_tables_label_the_average():
    spec = importlib.util.spec_from_file_location("make_table", REPO / "experiments" / "make_table.py")
    make_table = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make_table)
    cells = [{"method": "simcse", "seed": 42, "train": {}, "eval": _record(("STSBenchmark", "SICKRelatedness"))
              .to_dict()}]
    lines, _, label = make_table.regime_section("domain", cells, ["simcse"])
    assert label == "Avg (STS-B, SICK-R)"
    assert any(line.startswith("| method | seeds | trained on | STS-B | SICK-R | Avg (STS-B, SICK-R) |")
               for line in lines)


def test_the_weights_recorded_are_those_loading_the_folder_reads(tmp_path):
    """settings' model_weights (hf_cse.files.weights_fingerprint): an hf_cse model's or a plain encoder's own
    weight files (a run folder's: not its checkpoints' or its export's, which its modules.json names); a
    sentence-transformers folder's those of its modules (a Dense layer's too); nothing for a Hub id or a folder
    without weights. A weight file changed is a fingerprint changed."""
    run = tmp_path / "run"
    for name in ("model.safetensors", "checkpoint-5/model.safetensors", "sentence-transformers/model.safetensors",
                 "model_v1_backup.safetensors"):  # a file of the user's, merely named like weights
        (run / name).parent.mkdir(parents=True, exist_ok=True)
        (run / name).write_bytes(name.encode())
    (run / "config.json").write_text(json.dumps({"model_type": "hf_cse_simcse"}))
    (run / "modules.json").write_text(json.dumps([{"path": "sentence-transformers"}]))
    assert list(weights_fingerprint(run)) == ["model.safetensors"]
    st = run / "sentence-transformers"
    (st / "2_Dense").mkdir()
    (st / "2_Dense" / "model.safetensors").write_bytes(b"dense")
    (st / "config.json").write_text(json.dumps({"model_type": "bert"}))
    (st / "modules.json").write_text(json.dumps([{"path": ""}, {"path": "1_Pooling"}, {"path": "2_Dense"},
                                                 {"path": "../checkpoint-5"}]))  # never outside the folder
    before = weights_fingerprint(st)
    assert list(before) == ["2_Dense/model.safetensors", "model.safetensors"]
    (st / "2_Dense" / "model.safetensors").write_bytes(b"dense, retrained")
    after = weights_fingerprint(st)
    assert after != before and after["model.safetensors"] == before["model.safetensors"]
    (st / "modules.json").unlink()  # a plain encoder folder: its own files
    assert list(weights_fingerprint(st)) == ["model.safetensors"]
    assert weights_fingerprint(tmp_path / "empty") is None and weights_fingerprint("org/model") is None
    (tmp_path / "empty").mkdir()
    assert weights_fingerprint(tmp_path / "empty") is None
    old = EvalResults.from_dict({"model": "out/m", "STSBenchmark": 70.0, "settings": {"pooler": "avg"}})
    assert "model_weights" not in old.settings  # results.json of an older run_eval: read as before
