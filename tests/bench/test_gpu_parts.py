"""The GPU check's recipe and engines parts (benchmarks/gpu_recipe.py, benchmarks/gpu_engines.py): their dry runs on
a CPU run everything they would run on a GPU that a CPU can run (the engines really sharded through
tests/sharded_on_cpu.py), and record the rest with its reason; the stand-in
dev sets read as SentEval's; the loss comparison and the budget. No timing is asserted."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import gpu_engines  # noqa: E402
import gpu_recipe  # noqa: E402


def _dry_run(script: str, out: Path, *flags: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1",
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), "--out", str(out), "--dry-run",
                           *flags], capture_output=True, text=True, env=env, timeout=900, cwd=ROOT)


@pytest.mark.slow
def test_recipe_dry_run_times_every_part_and_checks_the_run(tmp_path):
    proc = _dry_run("gpu_recipe.py", tmp_path, "--data", "stand-in")  # as on the GPU machine: no shared data
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rec = json.loads((tmp_path / "recipe.json").read_text())
    assert rec["status"] == "ok" and rec["dry_run"]
    assert "stand-in" in rec["data"]["dev"] and "stand-in" in rec["data"]["training_text"]
    assert rec["run"]["steps_done"] == rec["run"]["steps_requested"] == 8
    assert set(rec["parts"]) == {"startup_s", "steps_s", "dev_evaluations_s", "saves_s", "end_of_training_s",
                                 "after_training_s", "total_s"}
    assert all(v >= 0 for v in rec["parts"].values()) and rec["parts"]["steps_s"] > 0
    startup = rec["startup"]  # its stages add up to the startup
    assert set(startup) == {"to_the_trainer_s", "trainer_construction_s", "to_the_first_step_s"}
    assert sum(startup.values()) == pytest.approx(rec["parts"]["startup_s"], rel=1e-6)
    dev = rec["dev"]
    assert dev["count"] == 1 + 8 // 2 and dev["tokenized_once"]  # at the start, then every 2 steps
    # the kept (best) model was scored at its step: its "after" score is that one, not a second evaluation
    assert [e["phase"] for e in dev["evaluations"]] == ["start"] + ["training"] * 4 and dev["after_training_s"] is None
    assert rec["saves"]["count"] == 4 and [s["step"] for s in rec["saves"]["saves"]] == [2, 4, 6, 8]
    checks = rec["checks"]
    assert checks["best_checkpoint_kept"]["ok"] and checks["dev_tokenized_once"]
    assert checks["evaluations_as_scheduled"] and checks["export_written"]
    kept = checks["best_checkpoint_kept"]
    assert kept["best_model_checkpoint"] in kept["checkpoints_left"]
    proj = rec["projection"]  # a shortened run projects the full recipe, labelled as a projection
    assert "PROJECTION" in proj["label"] and proj["steps"] == 15_625 and proj["evaluations"] == 125
    assert proj["total_s"] > proj["steps_total_s"] > 0
    # a few steps profiled in the middle of the run, and the time of each window between evaluations
    assert rec["profile"]["status"] == "ok" and rec["profile"]["steps"] == 4
    assert [w["to_step"] for w in rec["run"]["windows"]] == [2, 4, 6, 8]
    assert rec["run"]["optimizer_step"] == "eager" and rec["run"]["graph_step"]["on"] is False  # a CPU


@pytest.mark.slow
def test_engines_dry_run_runs_every_check_of_the_engines(tmp_path):
    proc = _dry_run("gpu_engines.py", tmp_path, "--budget-s", "800")  # every launch, DeepSpeed's too where installed
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rec = json.loads((tmp_path / "engines.json").read_text())
    assert rec["status"] == "ok" and set(rec["engines"]) == set(gpu_engines.ENGINES)
    assert all(c["ok"] and c["optimizer"] == "the Trainer's torch AdamW" for c in rec["configs"].values())
    plain = rec["engines"]["plain"]
    assert plain["status"] == "ok" and sorted(map(int, plain["losses"])) == list(range(1, 7))
    assert plain["resume"]["ok"] and plain["resume"]["steps"] == 3  # steps 4-6 relaunched from checkpoint-3
    assert plain["export"]["ok"] and plain["export"]["min_cos_export_vs_model"] >= gpu_engines.EXPORT_MIN_COS
    sharded = ["fsdp"] + (["deepspeed_zero2", "deepspeed_zero3"] if importlib.util.find_spec("deepspeed") else [])
    for engine in sharded:  # really sharded on the CPU (tests/sharded_on_cpu.py), every check passed
        res = rec["engines"][engine]
        assert res["status"] == "ok" and res["losses_vs_plain"]["ok"] and res["losses_vs_plain"]["steps"] == 6
        assert res["resume"]["ok"] and res["export"]["ok"] and res["export"]["min_cos_vs_plain_export"] >= 0.99
    for engine in set(gpu_engines.ENGINES) - {"plain", *sharded}:
        assert rec["engines"][engine]["status"].startswith("skipped: deepspeed is not installed")
    launched = [(r["engine"], r["phase"]) for r in rec["runs"]]
    assert launched[:2] == [("plain", "full"), ("fsdp", "full")] and ("plain", "resume") in launched
    fsdp_command = rec["runs"][1]["command"]
    assert "accelerate.commands.launch" in fsdp_command and "--num_processes 1" in fsdp_command
    assert "sharded_on_cpu.py" in fsdp_command and "fsdp.yaml" in fsdp_command


def test_stand_in_dev_sets_read_as_senteval_data(tmp_path, fresh_evaluation_data_cache):
    from hf_cse.evaluation import load_sts

    root = gpu_recipe.write_stand_in_dev(tmp_path / "senteval")
    stsb = load_sts("STSBenchmark", str(root), "dev")["dev"]
    sick = load_sts("SICKRelatedness", str(root), "dev")["dev"]
    assert len(stsb) == 1500 and len(sick) == 500
    sentences = stsb.sentences1 + stsb.sentences2 + sick.sentences1 + sick.sentences2
    assert len(set(sentences)) == 4000  # distinct, as the real sets nearly are: 4,000 sentences to tokenize
    assert 0 <= stsb.scores.min() and stsb.scores.max() <= 5 and 1 <= sick.scores.min() and sick.scores.max() <= 5


def test_loss_comparison_is_relative_and_needs_every_step():
    reference = {1: 4.0, 2: 3.5, 3: 0.2}
    assert gpu_engines.compare({1: 4.1, 2: 3.45, 3: 0.21}, reference, 0.05)["ok"]
    assert not gpu_engines.compare({1: 4.3, 2: 3.5, 3: 0.2}, reference, 0.05)["ok"]  # 7.5 % off at step 1
    missing = gpu_engines.compare({1: 4.0, 3: 0.2}, reference, 0.05)
    assert not missing["ok"] and missing["missing_steps"] == [2]
    assert gpu_engines.compare({2: 3.5, 3: 0.2}, reference, 0.01, range(2, 4))["ok"]  # a resume's later steps


def test_a_launch_past_the_budget_is_skipped_and_recorded(tmp_path):
    recorded = {}
    launch = gpu_engines.Launcher(tmp_path, budget_s=0.0, record=recorded.__setitem__)
    run = launch("plain", "full", ["--max_steps", "1"])
    assert run["status"].startswith("skipped: would pass --budget-s") and "wall_s" not in run
    assert recorded["runs"] == [run]


@pytest.mark.parametrize("script, flags, message", [
    (gpu_engines, ["--steps", "5"], "an even number"),
    (gpu_engines, ["--engines", "plain,zero9"], "unknown engine(s) zero9"),
    (gpu_recipe, ["--steps", "0"], "must be positive"),
    (gpu_recipe, ["--encoder", "/nonexistent"], "no config.json"),
])
def test_bad_arguments_stop_in_one_line(script, flags, message, tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        script.main(["--out", str(tmp_path / "o"), "--dry-run", *flags])
    assert stop.value.code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "o").exists()  # stopped before writing anything
