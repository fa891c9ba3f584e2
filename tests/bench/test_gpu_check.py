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
    for part in ("throughput", "compile"):
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
    for part in ("attention", "scale", "engines"):  # measured before; only with --parts
        assert not (dry_run / f"{part}.json").exists(), part
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
    assert summary["ratios"]["cached b512 / plain b512"] > 0 and summary["ratios"]["graph step / eager, b64"] > 0
    runs = {r["name"]: r for r in read("throughput.json")["runs"]}
    assert {r["optimizer_step"] for r in runs.values() if r["framework"] == "hf_cse"} == {"eager"}  # a CPU
    compiled = {r["name"]: r for r in read("compile.json")["runs"]}  # the attention variants, compiled
    assert compiled["hf_cse b64 torch.compile + graph step, SDPA (the matmul rule off)"]["matmul_attention"] is False
    assert compiled["hf_cse b1024 torch.compile + graph step, eager attention"]["attention_in_use"] == "eager"
    assert all(r["profile"] for r in compiled.values())
    by_name = {r["name"]: r for r in plan["compile512"]}  # the compiled 512s: only with --parts compile512
    assert by_name["hf_cse b512 cached64 torch.compile + graph step"]["cached_minibatch_size"] == 64 // 8
    assert set(summary["targets"]) == {
        "b64 step, fraction of the bf16 peak", "b1024 step, fraction of the bf16 peak",
        "b64 step compiled, fraction of the bf16 peak", "b1024 step compiled, fraction of the bf16 peak",
        "cached b512 / plain b512", "cached b512 / plain b512, both compiled", "hf_cse / st, b64",
        "recipe, minutes (projected)"}  # the dry run's recipe is shortened: its full time projected
    assert summary["targets"]["recipe, minutes (projected)"]["value"] > 0
    # the profiled run: its window's time by kind (on a CPU: top-level operators), summarised
    profile = runs["hf_cse b64"]["profile"]
    assert profile["status"] == "ok" and profile["steps"] == 1 and profile["kernels_per_step"] > 0
    assert 0 < profile["device_busy_fraction"] <= 1 and profile["by_kind_ms_per_step"] and profile["busiest"]
    # the host's pace against the window's, and where the device waited (the summary's profile line says both)
    assert 0 < profile["host_ms_per_step"] <= profile["window_ms_per_step"] and len(profile["host_step_ends_ms"]) == 1
    assert profile["idle"]["between_kernels_ms"] >= 0
    profile_line = next(line for line in (dry_run / "summary.md").read_text().splitlines()
                        if line.startswith("Profile of hf_cse b64 (throughput): device busy"))
    assert "host " in profile_line and "before its first kernel" in profile_line
    assert runs["st b64"]["profile"] is False  # asdict(run): not profiled
    # the scripted part: the shortened recipe with its fast options (compiled on the CPU too), checked and summarised
    assert summary["parts"]["recipe"]["status"] == "ok" and "recipe" in summary["scripted"]
    recipe = read("recipe.json")
    assert recipe["run"]["fast"] and recipe["run"]["torch_compile"] and recipe["run"]["save_strategy"] == "best"
    assert "--per_device_eval_batch_size 512" in recipe["command"] and "--save_strategy best" in recipe["command"]
    assert recipe["status"] == "ok" and [w["to_step"] for w in recipe["run"]["windows"]] == [2, 4]
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


def test_profile_kinds_and_busy_time():
    """Kernel names fall into the kinds the summary adds up; the busy time counts overlapping kernels once."""
    from gpu_profile import _union_us, kind_of

    assert kind_of("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64") == "gemm"
    assert kind_of("nvjet_hsh_128x256_64x4_2x1_v_bz_coopA_NTT") == "gemm"
    assert kind_of("triton_tem_fused_addmm_gelu_0") == "gemm"  # a compiled GEMM template
    assert kind_of("triton_per_fused_native_layer_norm_native_dropout_3") == "fused by torch.compile (triton)"
    assert kind_of("pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128>>") == "attention"
    assert kind_of("fmha_cutlassB_bf16_aligned_64x64_k64_sm80") == "attention"  # not a GEMM for its "cutlass"
    assert kind_of("void at::native::multi_tensor_apply_kernel<FusedAdamMathFunctor>") == "optimizer and clipping"
    assert kind_of("void at::native::vectorized_elementwise_kernel<4, GeluCUDAKernelImpl>") == (
        "elementwise and reductions (aten)")
    assert kind_of("Memcpy HtoD (Pageable -> Device)") == "copies and fills"
    assert kind_of("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float, false>(int, "
                   "float, float const*)") == "elementwise and reductions (aten)"  # not clipping's norm
    assert kind_of("void at::native::(anonymous namespace)::GammaBetaBackwardCUDAKernelTemplate<float, float, 32u>"
                   ) == "elementwise and reductions (aten)"
    assert kind_of("something_new") == "other"
    assert _union_us([(0, 10), (5, 12), (20, 25), (21, 22)]) == 17
    assert _union_us([]) == 0


def test_pack_keeps_the_summary_beside_one_archive_of_the_rest(tmp_path):
    """--pack: a device that returns at most 8 files gets the summary and one archive holding every other file."""
    import tarfile

    from gpu_check import pack

    names = ["summary.json", "summary.md", "peak.json", "compile.json", "compile.log", "plan.json"]
    for name in names:
        (tmp_path / name).write_text(name)
    archive = pack(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.tar.gz", "summary.json", "summary.md"]
    with tarfile.open(archive) as tar:
        assert sorted(tar.getnames()) == sorted(names[2:])
        assert tar.extractfile("compile.log").read() == b"compile.log"


def test_run_switches_set_hf_cse_rules_for_the_run_only():
    """A variant's switches (padding-free on the GPU, the matmul attention rule off, the optimizer uncaptured) hold
    inside the run and are put back after it, even when it fails."""
    from gpu_check_plan import Run
    from gpu_check_runs import run_switches

    from hf_cse import trainer_steps
    from hf_cse.models import fast_dropout, padding_free

    def rules():
        return (fast_dropout.COMPILED_MATMUL_ATTENTION_MAX_KEYS, padding_free.DEVICE_TYPES,
                trainer_steps.why_not_captured)

    before = rules()
    assert before[0] > 0 and "cuda" not in before[1]
    variant = Run("variant", "hf_cse", 8, 0, 1, padding_free=True, matmul_attention=False, optimizer_graph=False)
    with pytest.raises(RuntimeError, match="inside"):
        with run_switches(variant):
            assert fast_dropout.COMPILED_MATMUL_ATTENTION_MAX_KEYS == 0
            assert "cuda" in padding_free.DEVICE_TYPES
            assert trainer_steps.why_not_captured(None) == "turned off by gpu_check"
            raise RuntimeError("inside")
    assert rules() == before
    with run_switches(Run("default", "hf_cse", 8, 0, 1)):
        assert rules() == before

def test_idle_gaps_say_where_the_device_waited():
    """The device's idle time in a profiled window: before its first kernel, the gaps between kernels (largest
    first, overlapping kernels merged), and after the last."""
    from gpu_profile import idle_gaps

    got = idle_gaps([(300.0, 500.0), (450.0, 700.0), (900.0, 1000.0), (1010.0, 1100.0)], window_us=1500.0, top=2)
    assert got["before_first_kernel_ms"] == pytest.approx(0.3)
    assert got["after_last_kernel_ms"] == pytest.approx(0.4)
    assert got["between_kernels_ms"] == pytest.approx(0.21)  # 700->900 and 1000->1010; 450 overlaps 300-500
    assert got["gaps_over_100us"] == 1
    assert got["largest"] == [{"us": 200.0, "at_ms": 0.7}, {"us": 10.0, "at_ms": 1.0}]
    assert idle_gaps([], 10.0) == {}
