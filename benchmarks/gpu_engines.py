#!/usr/bin/env python
"""The distributed engines on one GPU (gpu_check part ``engines``; issue 37, must-have 4):

    python benchmarks/gpu_engines.py --out DIR --encoder PATH [--budget-s 150]   # a GPU
    python benchmarks/gpu_engines.py --out DIR --dry-run                         # any machine: tiny encoder

``accelerate launch`` with the shipped configs (``python -m hf_cse config fsdp | deepspeed_zero2 |
deepspeed_zero3``, one process) trains ``run_unsup.py`` 50 steps of the encoder given (gpu_check's random BERT-base),
bf16, batch 64, length 32, ``--dropout 0`` (so that every engine computes the same function and the losses compare),
logging every step, a checkpoint at step 25 and 50; the plain single-process ``python run_unsup.py`` run is the
reference. Per engine, checked:

* losses: each step's logged loss equals the plain run's within ``LOSS_RTOL`` (bf16 noise, see there);
* resume: relaunched from its step-25 checkpoint (``--resume_from_checkpoint``) into a new folder, steps 26-50 log
  the uninterrupted run's losses within ``RESUME_RTOL`` (the same engine and precision: only kernel nondeterminism);
* export: the run's ``sentence-transformers`` folder loads with ``SentenceTransformer`` and embeds sentences as the
  hf_cse model saved beside it does (the gathered whole model, not one process's shards), and as the plain run's
  export does within bf16 training noise.

An engine whose package is missing (DeepSpeed) is recorded as skipped with the reason; a launch that would start
past ``--budget-s`` is skipped and recorded. The DeepSpeed configs carry no ``optimizer`` section: the Trainer's
torch AdamW is used (no DeepSpeed op to compile). Dry run (CPU): every check on a tiny encoder (bf16 as well);
the sharded launches go through ``tests/sharded_on_cpu.py``, which makes accelerate take its GPU branch on the CPU
(gloo) and lifts hf_cse's refusal of FSDP / DeepSpeed there (where accelerate would silently train plain DDP), so
the engines really shard. ``engines.json`` holds every launch (command, status, the log's last lines on
failure) and each engine's checks. Exit status 0 when nothing that ran failed.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from gpu_check_plan import BERT_BASE, TINY, benchmark_sentences, corpus_lines, make_encoder  # noqa: E402

ROOT = HERE.parent
ENGINES = ("plain", "fsdp", "deepspeed_zero2", "deepspeed_zero3")
#: bf16 keeps 8 significant bits (a relative rounding of up to 2^-9 per value); every engine runs bf16 as autocast
#: over fp32 weights (DeepSpeed's torch_autocast, hf_cse.sharding), but sums in its own order, and SimCSE's
#: temperature 0.05 multiplies a cosine's error by 20 in the logits. A wrong gradient (scaled by the world size, a
#: missing all-reduce, a lost optimizer state) or DeepSpeed's bf16 model (3.37 against 2.01 at step 4 on an H100)
#: moves the curve by more.
LOSS_RTOL = 0.05
#: the same engine and precision, resumed: only nondeterministic GPU kernels (atomics in the backward) differ
RESUME_RTOL = 0.01
EXPORT_MIN_COS = 0.9999  # the export against the hf_cse model saved beside it: the same weights, fp32
PLAIN_MIN_COS = 0.99  # the export against the plain run's export: bf16 training noise over 50 steps
SHARDED_ON_CPU = ROOT / "tests" / "sharded_on_cpu.py"
#: a Python exception's last line ("ValueError: ...", "torch.OutOfMemoryError: ..."), as a failed launch prints it
ERROR_LINE = re.compile(r"^\s*(\[rank\d+\]:\s*)?[\w.]*(Error|Exception)\b.*:")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def engine_missing(engine: str) -> str | None:
    if engine.startswith("deepspeed") and importlib.util.find_spec("deepspeed") is None:
        return "deepspeed is not installed (pip install deepspeed; carried as a wheel to the GPU machine)"
    return None


def launch_command(engine: str, flags: list[str], on_cpu: bool = False) -> list[str]:
    """The plain run, or ``accelerate launch`` with the shipped config; ``on_cpu``: the sharded engines through
    ``tests/sharded_on_cpu.py`` (the dry run)."""
    script = str(ROOT / "run_unsup.py")
    if engine == "plain":
        return [sys.executable, script, *flags]
    from hf_cse.cli.commands import accelerate_configs  # the shipped configs, as `python -m hf_cse config NAME`

    return [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(accelerate_configs()[engine]),
            "--num_processes", "1", "--main_process_port", str(_free_port()),
            str(SHARDED_ON_CPU) if on_cpu else script, *flags]


def train_flags(encoder: Path, train: Path, out: Path, steps: int, batch: int, cuda: bool,
                resume_from: Path | None = None) -> list[str]:
    return ["--model_name_or_path", str(encoder), "--train_file", str(train), "--output_dir", str(out),
            "--method", "simcse", "--loss", "infonce", "--dropout", "0", "--max_steps", str(steps),
            "--per_device_train_batch_size", str(batch), "--max_seq_length", "32", "--learning_rate", "3e-5",
            "--precision", "bf16", "--logging_steps", "1", "--save_strategy", "steps",
            "--save_steps", str(steps // 2), "--seed", "42", "--disable_tqdm", "true",
            *(["--resume_from_checkpoint", str(resume_from)] if resume_from else []),
            *([] if cuda else ["--use_cpu"])]


def logged_losses(out: Path) -> dict[int, float]:
    state = json.loads((out / "trainer_state.json").read_text())
    return {h["step"]: h["loss"] for h in state["log_history"] if "loss" in h and "step" in h}


def compare(losses: dict[int, float], reference: dict[int, float], rtol: float, steps=None) -> dict:
    steps = sorted(steps if steps is not None else reference)
    missing = [s for s in steps if s not in losses or s not in reference]
    rel = [abs(losses[s] - reference[s]) / max(1.0, abs(reference[s])) for s in steps if s not in missing]
    worst = max(rel, default=float("nan"))
    return {"steps": len(steps), "missing_steps": missing, "max_rel_diff": worst, "rtol": rtol,
            "ok": not missing and bool(rel) and worst <= rtol}


def export_check(out: Path, sentences: list[str], device: str, plain_embeddings=None) -> tuple[dict, object]:
    import numpy as np
    from sentence_transformers import SentenceTransformer

    from hf_cse.evaluation.encoder import SentenceEncoder

    st = SentenceTransformer(str(out / "sentence-transformers"), device=device)
    exported = st.encode(sentences, batch_size=64, convert_to_numpy=True)
    model = SentenceEncoder.from_pretrained(str(out), device=device, max_length=st.max_seq_length,
                                            show_progress_bar=False).encode(sentences)

    def min_cos(a, b):
        a, b = a / np.linalg.norm(a, axis=1, keepdims=True), b / np.linalg.norm(b, axis=1, keepdims=True)
        return float((a * b).sum(axis=1).min())

    res = {"min_cos_export_vs_model": min_cos(exported, model), "export_min_cos": EXPORT_MIN_COS}
    res["ok"] = res["min_cos_export_vs_model"] >= EXPORT_MIN_COS
    if plain_embeddings is not None:
        res["min_cos_vs_plain_export"] = min_cos(exported, plain_embeddings)
        res["plain_min_cos"] = PLAIN_MIN_COS
        res["ok"] = res["ok"] and res["min_cos_vs_plain_export"] >= PLAIN_MIN_COS
    return res, exported


class Launcher:
    """Runs the launches one after another under the part's budget, each recorded in ``runs``."""

    def __init__(self, tmp: Path, budget_s: float, record, on_cpu: bool = False):
        self.tmp, self.budget_s, self.record, self.on_cpu = tmp, budget_s, record, on_cpu
        self.start = time.perf_counter()
        self.runs: list[dict] = []
        self.walls: list[float] = []

    def __call__(self, engine: str, phase: str, flags: list[str]) -> dict:
        cmd = launch_command(engine, flags, self.on_cpu)
        run = {"engine": engine, "phase": phase, "command": " ".join(cmd[1:])}
        expected = max(self.walls, default=0.0)  # the longest launch so far: startup dominates every launch
        if time.perf_counter() - self.start + expected > self.budget_s:
            run["status"] = f"skipped: would pass --budget-s {self.budget_s:.0f} (a launch took up to {expected:.0f} s)"
            return self._add(run)
        log = self.tmp / f"{engine}-{phase}.log"
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
               "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
               "TOKENIZERS_PARALLELISM": "false"}
        t0 = time.perf_counter()
        left = max(30.0, self.budget_s - (t0 - self.start) + 60)  # a hung launch cannot hold the part forever
        with open(log, "w") as fh:
            try:
                rc = subprocess.run(cmd, cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT, env=env,
                                    timeout=left).returncode
            except subprocess.TimeoutExpired:
                rc = None
        run["wall_s"] = time.perf_counter() - t0
        self.walls.append(run["wall_s"])
        text = log.read_text(errors="replace")
        if rc == 0:
            run["status"] = "ok"
        else:
            run["status"] = "timeout" if rc is None else f"failed (exit {rc})"
            run["log_tail"] = text.splitlines()[-25:]
            # the launcher's own traceback fills the tail (H100, 2026-11-26): keep the child's error lines too
            run["error_lines"] = [line for line in text.splitlines()
                                  if "error:" in line or ERROR_LINE.match(line)][:20]
        return self._add(run)

    def _add(self, run: dict) -> dict:
        self.runs.append(run)
        self.record("runs", self.runs)
        print(f"[engines] {run['engine']} {run['phase']}: {run['status']}"
              + (f" ({run['wall_s']:.0f} s)" if "wall_s" in run else ""), flush=True)
        return run


def check_configs() -> dict:
    """Each shipped config loads as accelerate reads it and names its engine."""
    from accelerate.commands.config.config_args import load_config_from_file

    from hf_cse.cli.commands import accelerate_configs

    out = {}
    for engine in ENGINES[1:]:
        try:
            config = load_config_from_file(str(accelerate_configs()[engine]))
            kind = str(getattr(config.distributed_type, "value", config.distributed_type))
            want = "FSDP" if engine == "fsdp" else "DEEPSPEED"
            stage = (config.deepspeed_config or {}).get("zero_stage") if want == "DEEPSPEED" else None
            ok = kind == want and (stage is None or stage == int(engine[-1]))
            # no DeepSpeed optimizer (its FusedAdam / CPUAdam are ops to compile): no "optimizer" section in a
            # DeepSpeed JSON and no optimizer offload, so the Trainer hands DeepSpeed its torch AdamW
            ds = config.deepspeed_config or {}
            file = ds.get("deepspeed_config_file")
            ds_optimizer = bool(file) and "optimizer" in json.loads(Path(file).read_text())
            offload = ds.get("offload_optimizer_device", "none") not in (None, "none")
            out[engine] = {"distributed_type": kind, "zero_stage": stage, "ok": ok and not ds_optimizer and not offload,
                           "optimizer": "DeepSpeed's" if ds_optimizer or offload else "the Trainer's torch AdamW"}
        except Exception as exc:
            out[engine] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    return out


def run_engines(args, record) -> bool:
    import torch

    cuda = torch.cuda.is_available() and not args.dry_run
    device = "cuda" if cuda else "cpu"
    steps, batch = args.steps, args.batch_size
    configs = check_configs()
    record("configs", configs)
    with tempfile.TemporaryDirectory(prefix="gpu_engines_", dir=args.work_dir) as tmp:
        tmp = Path(tmp)
        encoder = args.encoder or make_encoder(tmp / "encoder", TINY if args.dry_run else BERT_BASE)
        train = tmp / "train.txt"  # every row fills the 32 tokens; one epoch is exactly the run's steps
        train.write_text("\n".join(benchmark_sentences(steps * batch, seed=3)) + "\n", encoding="utf-8")
        probe = [" ".join(line.split()[:12]) for line in corpus_lines()[:64]]
        launch = Launcher(tmp, args.budget_s, record, on_cpu=not cuda)
        results: dict[str, dict] = {}
        full: dict[str, Path] = {}
        # every engine's uninterrupted run first (the loss comparison), then the resumes
        for engine in args.engines:
            if why := engine_missing(engine):
                results[engine] = {"status": f"skipped: {why}"}
                continue
            if not configs.get(engine, {"ok": True})["ok"]:
                results[engine] = {"status": "failed: its accelerate config", "config": configs[engine]}
                continue
            out = tmp / engine / "full"
            run = launch(engine, "full", train_flags(encoder, train, out, steps, batch, cuda))
            results[engine] = {"status": run["status"]}
            if run["status"] == "ok":
                full[engine] = out
                results[engine]["losses"] = logged_losses(out)
                shutil.rmtree(out / f"checkpoint-{steps}", ignore_errors=True)  # GBs; the resume needs the middle one
        for engine in args.engines:
            if engine not in full:
                continue
            out = tmp / engine / "resumed"
            checkpoint = full[engine] / f"checkpoint-{steps // 2}"
            run = launch(engine, "resume", train_flags(encoder, train, out, steps, batch, cuda, checkpoint))
            res = results[engine]
            if run["status"] == "ok":
                res["resume"] = compare(logged_losses(out), res["losses"], RESUME_RTOL,
                                        range(steps // 2 + 1, steps + 1))
            elif run["status"].startswith("skipped"):  # the budget: not run, so neither passed nor failed
                res["resume"] = {"status": run["status"]}
            else:
                res["resume"] = {"ok": False, "status": run["status"]}
            shutil.rmtree(out, ignore_errors=True)
            shutil.rmtree(checkpoint, ignore_errors=True)
        plain = results.get("plain", {}).get("losses")
        plain_embeddings = None
        for engine in args.engines:
            if engine not in full:
                continue
            res = results[engine]
            if engine != "plain":
                res["losses_vs_plain"] = compare(res["losses"], plain, LOSS_RTOL) if plain else {
                    "ok": False, "why": "no plain run to compare with"}
            try:
                res["export"], embeddings = export_check(full[engine], probe, device, plain_embeddings)
                if engine == "plain":
                    plain_embeddings = embeddings
            except Exception as exc:
                res["export"] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:1000]}
            shutil.rmtree(full[engine], ignore_errors=True)
            checks = {k: v for k, v in res.items() if isinstance(v, dict) and "ok" in v}
            failed = [k for k, v in checks.items() if not v["ok"]]
            skipped = [k for k, v in res.items() if isinstance(v, dict) and str(v.get("status", "")).startswith(
                "skipped")]
            res["status"] = ("failed: " + ", ".join(failed) if failed
                             else "ok" + (f" ({', '.join(skipped)} skipped by the budget)" if skipped else ""))
            record("engines", results)
        record("engines", results)
    fine = ("ok", "skipped:")  # a missing package, a launch the budget left out
    return all(r["status"].startswith(fine) for r in results.values()) and all(
        run["status"].startswith(fine) for run in launch.runs)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="folder for engines.json (created)")
    ap.add_argument("--encoder", type=Path, help="encoder folder (default: a random BERT-base, tiny with --dry-run)")
    ap.add_argument("--dry-run", action="store_true", help="CPU, tiny encoder, 6 steps of 8")
    ap.add_argument("--steps", type=int, help="training steps, an even number (default 50; dry run 6)")
    ap.add_argument("--batch-size", type=int, help="default 64 (dry run 8)")
    ap.add_argument("--engines", default=",".join(ENGINES), help=f"comma-separated subset of {','.join(ENGINES)}")
    ap.add_argument("--budget-s", type=float, default=150.0, help="no launch starts that would end past this")
    ap.add_argument("--work-dir", type=Path, help="where the runs' temporary folder goes (checkpoints: GBs)")
    args = ap.parse_args(argv)
    pick = lambda given, dry, full: given if given is not None else dry if args.dry_run else full  # noqa: E731
    args.steps = pick(args.steps, 6, 50)
    args.batch_size = pick(args.batch_size, 8, 64)
    if args.batch_size < 2:
        ap.error(f"--batch-size {args.batch_size}: at least 2 (in-batch negatives).")
    args.engines = [e for e in args.engines.split(",") if e]
    if unknown := sorted(set(args.engines) - set(ENGINES)):
        ap.error(f"unknown engine(s) {', '.join(unknown)}: choose from {', '.join(ENGINES)}.")
    if args.steps < 2 or args.steps % 2:
        ap.error(f"--steps {args.steps}: an even number >= 2 (the resume starts from the middle checkpoint).")
    if args.encoder and not (args.encoder / "config.json").is_file():
        ap.error(f"--encoder {args.encoder}: no config.json there.")
    import torch

    if not args.dry_run and not torch.cuda.is_available():
        ap.error("no CUDA GPU is visible to torch: on a CPU-only machine run with --dry-run.")
    from gpu_check import device_info

    args.out.mkdir(parents=True, exist_ok=True)
    payload = {"part": "engines", "dry_run": args.dry_run, "device": device_info(),
               "started": time.strftime("%H:%M:%S"),
               "settings": {"steps": args.steps, "batch_size": args.batch_size, "length": 32, "dropout": 0.0,
                            "precision": "bf16", "processes": 1,
                            "loss_rtol": LOSS_RTOL, "resume_rtol": RESUME_RTOL,
                            "tolerance_why": "relative to max(1, |loss|); see LOSS_RTOL in gpu_engines.py"}}
    path = args.out / "engines.json"

    def record(key, value):
        payload[key] = value
        path.write_text(json.dumps(payload, indent=2, default=str) + "\n")

    t0 = time.perf_counter()
    try:
        ok = run_engines(args, record)
        record("status", "ok" if ok else "failed")
    except Exception as exc:
        record("status", f"error: {type(exc).__name__}: {exc}"[:2000])
        raise
    finally:
        record("part_wall_s", time.perf_counter() - t0)
    for engine, res in payload.get("engines", {}).items():
        print(f"[engines] {engine}: {res['status']}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
