"""run_eval.py end to end on a tiny random BERT and a toy SentEval folder; argument errors."""

from __future__ import annotations

import json
import sys

import pytest
from eval_helpers import REPO, make_tiny_bert, write_toy_senteval

from hf_cse.evaluation import data as D
from hf_cse.files import content_fingerprint, weights_fingerprint

sys.path.insert(0, str(REPO))
from hf_cse.cli import evaluate as eval_cli  # noqa: E402


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("run_eval")
    return (
        make_tiny_bert(root / "tiny"),
        make_tiny_bert(root / "tiny2", seed=1),
        write_toy_senteval(root / "se"),
    )


@pytest.mark.slow
def test_end_to_end_two_models(setup, tmp_path):
    tiny, tiny2, se = setup
    D.clear_cache()
    out = tmp_path / "out"
    code = eval_cli.main(
        [
            "--model_name_or_path",
            f"{tiny},{tiny2}",
            "--senteval_data_dir",
            str(se),
            "--tasks",
            "all",
            "--mode",
            "fast",
            "--output_dir",
            str(out),
            "--batch_size",
            "16",
            "--disable_tqdm",
        ]
    )
    assert code == 0
    for name in (
        "results.json",
        "results.md",
        "align_uniform.png",
        "stsb_cosine_buckets_0.png",
        "stsb_cosine_buckets_1.png",
    ):
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name
    combined = json.loads((out / "results.json").read_text())
    assert len(combined["models"]) == 2
    res = combined["models"][0]
    for key in list(D.STS_TASKS) + ["avg"] + list(D.TRANSFER_TASKS) + ["transfer_avg"]:
        assert isinstance(res[key], float), key
    for key in ("alignment", "uniformity", "R@1", "R@5", "R@10"):
        assert key in res
    assert res["settings"]["pooler"] == "cls_before_pooler" and res["settings"]["mode"] == "fast"
    assert res["settings"]["sts_aggregation"] == "all"
    assert res["model"] == str(tiny)
    assert combined["models"][0]["avg"] != combined["models"][1]["avg"]  # two different random models
    md = (out / "results.md").read_text()
    assert "| STS12 | STS13 | STS14 | STS15 | STS16 | STS-B | SICK-R | STS Avg. |" in md
    assert "| MR | CR | SUBJ | MPQA | SST | TREC | MRPC | Transfer Avg. |" in md
    sub = sorted(p.name for p in out.iterdir() if p.is_dir())
    assert len(sub) == 2 and all((out / s / "results.json").is_file() for s in sub)


@pytest.mark.slow
def test_single_model_pooler_and_subset(setup, tmp_path):
    tiny, _, se = setup
    D.clear_cache()
    out = tmp_path / "one"
    eval_cli.main(
        [
            "--model_name_or_path",
            str(tiny),
            "--senteval_data_dir",
            str(se),
            "--tasks",
            "STS12,STS-B,sickr,geometry",
            "--pooler",
            "avg",
            "--sts_aggregation",
            "wmean",
            "--output_dir",
            str(out),
            "--disable_tqdm",
        ]
    )
    res = json.loads((out / "results.json").read_text())
    assert set(D.STS_TASKS) & set(res) == {"STS12", "STSBenchmark", "SICKRelatedness"}
    assert res["settings"]["pooler"] == "avg" and res["settings"]["sts_aggregation"] == "wmean"
    assert {"alignment", "uniformity"} <= set(res) and "R@1" not in res
    assert (out / "align_uniform.png").is_file() and (out / "stsb_cosine_buckets.png").is_file()


@pytest.mark.slow
def test_results_record_the_weights_of_each_model_folder(setup, tmp_path):
    """results.json records the weight files of the folder it scored (settings' model_weights), so that an export
    can tell results of weights retrained since; the same record in the per-model results of several models."""
    tiny, tiny2, se = setup
    D.clear_cache()
    out = tmp_path / "weights"
    assert eval_cli.main(["--model_name_or_path", f"{tiny},{tiny2}", "--senteval_data_dir", str(se), "--tasks",
                          "STSB", "--output_dir", str(out), "--disable_tqdm"]) == 0
    entries = json.loads((out / "results.json").read_text())["models"]
    recorded = [entry["settings"]["model_weights"] for entry in entries]
    assert recorded == [weights_fingerprint(tiny), weights_fingerprint(tiny2)]
    assert list(recorded[0]) == ["model.safetensors"] and recorded[0] != recorded[1]  # two random models
    assert recorded[0]["model.safetensors"] == content_fingerprint(tiny / "model.safetensors")
    per_model = [json.loads(p.read_text()) for p in sorted(out.glob("model_*/results.json"))]
    assert [entry["settings"]["model_weights"] for entry in per_model] == recorded
    # and the folder, resolved: a stopped evaluation is finished by the same folder named otherwise
    assert [entry["settings"]["model_folder"] for entry in entries] == [str(tiny.resolve()), str(tiny2.resolve())]


def run_cli(capsys, *args):
    """eval_cli.main in-process; returns (exit code, stderr)."""
    capsys.readouterr()
    try:
        code = eval_cli.main(list(args))
    except SystemExit as exc:
        code = exc.code
    return code, capsys.readouterr().err


def test_bad_inputs(setup, tmp_path, capsys):
    tiny, _, se = setup
    code, err = run_cli(capsys, "--model_name_or_path", str(tiny), "--tasks", "sts,foo")
    assert code != 0
    assert "Unknown task 'foo'. Valid tasks:" in err and "retrieval" in err and "MRPC" in err
    code, err = run_cli(capsys, "--model_name_or_path", str(tiny), "--tasks", "STSBenchmrk")
    assert code != 0 and "Unknown task 'STSBenchmrk' (did you mean 'STSBenchmark'?). Valid tasks:" in err
    code, err = run_cli(
        capsys, "--model_name_or_path", str(tmp_path / "nope"), "--senteval_data_dir", str(se)
    )
    assert code != 0 and "no such folder" in err and str(tmp_path / "nope") in err
    code, err = run_cli(
        capsys,
        "--model_name_or_path",
        str(tiny),
        "--senteval_data_dir",
        str(tmp_path / "none"),
        "--tasks",
        "MR",
        "--output_dir",
        str(tmp_path / "o"),
        "--disable_tqdm",
    )
    assert code != 0 and "get_transfer_data.bash" in err
    code, err = run_cli(capsys, "--model_name_or_path", str(tiny), "--mode", "valid")
    assert code != 0 and "test" in err and "fast" in err


def test_argument_parsing():
    from transformers import HfArgumentParser

    parser = HfArgumentParser(eval_cli.EvalArguments)
    (args,) = parser.parse_args_into_dataclasses(
        args=["--model_name_or_path", "a", "--model_name_or_path", "b,c", "--tasks", "sts,MR,retrieval"]
    )
    assert args.model_name_or_path == ["a", "b", "c"]
    assert args.task_list == list(D.STS_TASKS) + ["MR", "retrieval"]
    (default,) = parser.parse_args_into_dataclasses(args=[])
    assert len(default.model_name_or_path) == 1 and default.pooler is None and default.mode == "test"
    assert (
        default.batch_size == 128 and default.sts_aggregation == "all" and default.mrpc_features == "senteval"
    )
