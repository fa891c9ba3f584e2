"""benchmarks/gpu_check.sh: the dry run builds and runs everything the GPU check would (tiny encoder, 1 step, the
cuda tests collected) on a CPU; the model-FLOP count it divides by matches the encoder's own matrices.

One dry run for the module (about a minute on a loaded 2-core machine); no timing is asserted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import hang_timeout
from transformers import BertConfig, BertModel

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_limit_common import step_flops  # noqa: E402


def _gpu_check(out: Path, *flags: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHON": sys.executable, "CUDA_VISIBLE_DEVICES": ""}  # a CPU plan check, even on a GPU
    return subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_check.sh"), "--out", str(out), *flags],
                          capture_output=True, text=True, env=env, timeout=hang_timeout(900))


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu_check") / "results"
    proc = _gpu_check(out, "--dry-run")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out


@pytest.mark.slow
def test_dry_run_runs_every_part(dry_run):
    read = lambda name: json.loads((dry_run / name).read_text())  # noqa: E731
    tests = read("tests.json")
    cuda_tests = subprocess.run([sys.executable, "-m", "pytest", "-q", "--collect-only", "-m", "cuda",
                                 "tests/trainer/test_cuda.py"], cwd=ROOT, capture_output=True, text=True).stdout
    assert tests["status"] == "ok" and f"{tests['collected']} tests collected" in cuda_tests  # every cuda test
    plan = read("plan.json")
    for part in ("throughput", "scale", "compile"):
        runs = read(f"{part}.json")["runs"]
        assert [r["name"] for r in runs] == [r["name"] for r in plan[part]]
        for run in runs:
            if run["torch_compile"]:  # built, not compiled (minutes on a CPU)
                assert run["status"] == "constructed (not run)"
            else:
                assert run["status"] == "ok", run
                assert run["step_s"] > 0 and run["window_steps"] == run["steps"] == 1
                assert (run.get("model_flops", 0) > 0) == (run["text"] == "full"), run
            if run["framework"] == "hf_cse" and not run["torch_compile"]:  # which step ran, and why
                reason = "turned off" if run["cuda_graphs"] == "off" else "the step runs on cpu"
                assert run["graph_step"]["on"] is False and reason in run["graph_step"]["reason"], run
    assert not (dry_run / "attention.json").exists()  # measured before; only with --parts
    graphs = {r["name"]: r["cuda_graphs"] for r in read("throughput.json")["runs"]}
    assert graphs["hf_cse b64"] == "auto" and graphs["hf_cse b64 eager"] == "off"
    cached = [r for r in read("throughput.json")["runs"] if r["cached_minibatch_size"]]
    assert {r["framework"] for r in cached} == {"hf_cse", "sentence_transformers"}
    assert all(r["hardware_flops"] > r["model_flops"] for r in cached)  # the cached mode's extra forward
    assert read("throughput.json")["padding"]["full"]["padding_fraction"] == 0.0  # every row fills the length
    assert all(r["torch_compile"] and r["cuda_graphs"] == "auto" for r in read("compile.json")["runs"])
    peak = read("peak.json")
    assert set(peak["gemm"]) == {"bf16", "fp32"} and peak["gemm"]["bf16"]["peak_tflops"] > 0
    summary = read("summary.json")
    assert summary["dry_run"] and summary["ratios"]["hf_cse / st, b64"] > 0
    assert summary["ratios"]["cached b512 / plain b512"] > 0 and summary["ratios"]["graph step / eager, b1024"] > 0
    # the graph step with its optimizer stepped eagerly, the step before hf_cse/optimizer_graph.py (on a CPU both eager)
    runs = {r["name"]: r for r in read("throughput.json")["runs"]}
    assert runs["hf_cse b64 eager optimizer"]["optimizer_graph"] is False and runs["hf_cse b64"]["optimizer_graph"]
    assert {r["optimizer_step"] for r in runs.values() if r["framework"] == "hf_cse"} == {"eager"}
    assert summary["ratios"]["optimizer graph / eager optimizer, b64"] > 0
    assert set(summary["targets"]) == {"b64 step, fraction of the bf16 peak", "b1024 step, fraction of the bf16 peak",
                                       "cached b512 / plain b512", "hf_cse / st, b64"}
    for part in ("recipe", "engines"):  # the scripted parts: their own JSON, summarised
        assert summary["parts"][part]["status"] == "ok", part
        assert part in summary["scripted"]
    assert "| throughput | hf_cse b64 | eager |" in (dry_run / "summary.md").read_text()


@pytest.mark.slow
def test_refuses_a_folder_with_results(dry_run):
    proc = _gpu_check(dry_run, "--dry-run")
    assert proc.returncode == 2 and "is not empty" in proc.stderr and "--overwrite" in proc.stderr


def test_step_flops_match_the_encoders_matrices():
    """6 FLOPs per token per weight of every matrix product in the layers, plus attention's two products."""
    config = BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=3, num_attention_heads=2,
                        intermediate_size=48)
    model = BertModel(config, add_pooling_layer=False)
    weights = sum(m.weight.numel() for m in model.encoder.modules() if isinstance(m, torch.nn.Linear))
    rows, length = 6, 10
    lengths = [10, 7, 3, 10, 5, 1]
    got = step_flops(config, rows, length, lengths, projector_layers=0)
    attention = 3 * 4 * 32 * 3  # backward twice the forward, 2 products of 2*n*n*h per row, per layer
    assert got["padded"] == 6 * weights * rows * length + attention * rows * length**2
    assert got["real"] == 6 * weights * sum(lengths) + attention * sum(n * n for n in lengths)
    assert got["padding_fraction"] == pytest.approx(1 - 36 / 60)
    assert got["hardware_padded"] == got["padded"]
    cached = step_flops(config, rows, length, projector_layers=0, recomputed_forward=True)
    assert cached["hardware_padded"] == pytest.approx(got["padded"] * 4 / 3)
