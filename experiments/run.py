#!/usr/bin/env python
"""Run the missing cells of the comparison table (every method x seed on one small testbed).

    python experiments/run.py                      # every missing cell, in config order, seed by seed
    python experiments/run.py --methods simcse,gs_infonce --seeds 42
    python experiments/run.py --dry_run            # list what would run
    python experiments/run.py --threads 1 & python experiments/run.py --threads 1 --reverse &   # two runners
    python experiments/run.py --methods simcse --precision bf16   # a bf16 twin: results/simcse_bf16__seed42.json

Several runners may share the table: each claims a cell with a lock file (experiments/runs/<cell>.lock, holding
its pid; a lock whose process is gone is taken over) and skips cells whose result appeared meanwhile. On a
2-core machine two 1-thread runners finish more cells per hour than one 2-thread runner.

A cell = one method (experiments/configs/<method>.json) trained with one seed under the shared budget
(experiments/budget.json), the checkpoint selected on STS-B dev, then scored with run_eval.py
(STS 7 tasks test, alignment and uniformity). Each finished cell writes
experiments/results/<method>__seed<seed>.json (``--precision bf16``: <method>_bf16__seed<seed>.json, trained
under bf16 autocast, scored in fp32 so that only the training precision differs); cells with a result on disk
are skipped, so the table can be filled across several sittings. Training runs go to experiments/runs/ (not
committed) and are deleted after scoring unless --keep_runs.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Literal

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SHARED = ROOT.parent / "shared" / "data"
BUDGET = json.loads((HERE / "budget.json").read_text())


Precision = Literal["fp32", "bf16"]
# training flags of a precision variant, explicit whatever run_unsup.py's default; a non-fp32 cell's name gains the
# suffix "_<precision>"
PRECISION_FLAGS: dict[str, list[str]] = {"fp32": ["--precision", "fp32"], "bf16": ["--precision", "bf16"]}


def cell_name(method: str, seed: int, precision: Precision = "fp32") -> str:
    variant = "" if precision == "fp32" else f"_{precision}"
    return f"{method}{variant}__seed{seed}"


def result_path(method: str, seed: int, precision: Precision = "fp32") -> Path:
    return HERE / "results" / f"{cell_name(method, seed, precision)}.json"


def flag_list(args: dict) -> list[str]:
    out = []
    for key, value in args.items():
        out += [f"--{key}", str(value).lower() if isinstance(value, bool) else str(value)]
    return out


def child_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run(cmd: list[str], log: Path) -> None:
    with log.open("a") as fh:
        fh.write("$ " + " ".join(cmd) + "\n")
        fh.flush()
        proc = subprocess.run(cmd, cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        raise RuntimeError(f"command failed ({proc.returncode}); see {log}")


def train_summary(run_dir: Path) -> dict:
    state = json.loads((run_dir / "trainer_state.json").read_text())
    history = state["log_history"]
    train_logs = [h for h in history if "loss" in h]
    evals = [{"step": h["step"], "stsb_dev": h["eval_stsb_spearman"]} for h in history if "eval_stsb_spearman" in h]
    last = train_logs[-1] if train_logs else {}
    final = next((h for h in history if "train_runtime" in h), {})
    diagnostics = ("pos_cos", "neg_cos", "gd_active", "hardest_weight", "ratio")
    return {
        "steps": state["global_step"],
        "train_runtime_s": final.get("train_runtime"),
        "final_logged": {k: v for k, v in last.items() if k not in ("epoch", "step", "learning_rate", "grad_norm")},
        "paradigm_diagnostics_last": {k: last[k] for k in diagnostics if k in last},
        "paradigm_diagnostics_first": {k: train_logs[0][k] for k in diagnostics if train_logs and k in train_logs[0]},
        "dev_evals": evals,
        "best_stsb_dev": state.get("best_metric"),
        "best_checkpoint": Path(state["best_model_checkpoint"]).name if state.get("best_model_checkpoint") else None,
    }


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def claim(name: str) -> Path | None:
    """Take the lock of cell ``name`` (None if a live runner holds it); a dead runner's lock is taken over."""
    lock = HERE / "runs" / f"{name}.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    for _ in range(2):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            holder = lock.read_text().strip()
            if holder.isdigit() and _alive(int(holder)):
                return None
            lock.unlink(missing_ok=True)  # stale (or being written: the retry decides)
            continue
        os.write(fd, str(os.getpid()).encode())
        os.close(fd)
        return lock
    return None


def run_cell(method: str, seed: int, keep_runs: bool, precision: Precision = "fp32") -> dict:
    config = json.loads((HERE / "configs" / f"{method}.json").read_text())
    name = cell_name(method, seed, precision)
    run_dir = HERE / "runs" / name
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    log = run_dir / "log.txt"
    budget = {k: BUDGET[k] for k in ("max_steps", "per_device_train_batch_size", "max_seq_length", "learning_rate",
                                     "lr_scheduler_type", "warmup_steps", "eval_steps", "pooler_type")}
    train_args = {
        **budget,
        **config["args"],
        "seed": seed,
        "train_file": str(SHARED / "unsup" / "wiki_sentences.txt"),
        "senteval_data_dir": str(SHARED / "senteval"),
        "output_dir": str(run_dir),
        "overwrite_output_dir": True,  # run_dir holds this cell's log.txt (kept: run_unsup.py only removes run files)
        "eval_strategy": "steps",
        "save_strategy": "steps",
        "save_steps": BUDGET["eval_steps"],
        "save_total_limit": 1,
        "load_best_model_at_end": True,
        "metric_for_best_model": "stsb_spearman",
        "logging_steps": 10,
        "disable_tqdm": True,
        "report_to": "none",
    }
    twin = result_path(method, seed)
    if precision != "fp32" and twin.is_file() and not json.loads(twin.read_text())["train"].get("fast_dropout"):
        train_args["fast_dropout"] = False  # the fp32 twin ran torch's dropout: same masks, only precision differs
    cpu0, wall0 = child_cpu_seconds(), time.time()
    run([sys.executable, "run_unsup.py", *flag_list(train_args), *PRECISION_FLAGS[precision]], log)
    summary = train_summary(run_dir)
    # torch's dropout (cells before fast dropout existed) or hf_cse's fast CPU dropout: same distribution
    summary["fast_dropout"] = json.loads((run_dir / "config.json").read_text()).get("fast_dropout", False)
    eval_dir = run_dir / "eval"
    run([sys.executable, "run_eval.py", "--model_name_or_path", str(run_dir), "--senteval_data_dir",
         str(SHARED / "senteval"), "--tasks", "sts,geometry", "--output_dir", str(eval_dir), "--disable_tqdm", "true",
         "--precision", "fp32"], log)
    scores = json.loads((eval_dir / "results.json").read_text())
    result = {
        "cell": name,
        "method": method,
        "seed": seed,
        "precision": precision,
        "paper_setting": config["paper"],
        "config": config["args"],
        "budget": BUDGET,
        "train": summary,
        "eval": scores,
        "wall_seconds": round(time.time() - wall0, 1),
        "cpu_seconds": round(child_cpu_seconds() - cpu0, 1),
        "finished": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    if not keep_runs:
        shutil.rmtree(run_dir)
    return result


def run_baseline() -> dict:
    """The untrained encoder scored the same way (raw [CLS] at test), the table's reference row."""
    run_dir = HERE / "runs" / "pretrained"
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    cpu0, wall0 = child_cpu_seconds(), time.time()
    run([sys.executable, "run_eval.py", "--pooler", "cls_before_pooler", "--senteval_data_dir",
         str(SHARED / "senteval"), "--tasks", "sts,geometry", "--output_dir", str(run_dir / "eval"),
         "--disable_tqdm", "true", "--precision", "fp32"], run_dir / "log.txt")
    scores = json.loads((run_dir / "eval" / "results.json").read_text())
    shutil.rmtree(run_dir)
    return {"cell": "pretrained", "method": "pretrained", "seed": None,
            "paper_setting": "no training: the packaged encoder's raw [CLS] (cls_before_pooler)",
            "config": {}, "budget": BUDGET, "train": {}, "eval": scores,
            "wall_seconds": round(time.time() - wall0, 1), "cpu_seconds": round(child_cpu_seconds() - cpu0, 1),
            "finished": datetime.now(timezone.utc).isoformat(timespec="seconds")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--methods", help="comma list (default: every config)")
    parser.add_argument("--seeds", help="comma list (default: budget.json seeds)")
    parser.add_argument("--dry_run", action="store_true")
    parser.add_argument("--keep_runs", action="store_true", help="keep checkpoints in experiments/runs/")
    parser.add_argument("--threads", type=int, help="OMP_NUM_THREADS of the training/eval processes")
    parser.add_argument("--reverse", action="store_true", help="methods in reverse order, seed by seed (a 2nd runner)")
    parser.add_argument("--precision", choices=list(PRECISION_FLAGS), default="fp32",
                        help="training precision; bf16 cells are written beside the fp32 ones as <method>_bf16")
    args = parser.parse_args()
    if args.threads:  # inherited by every training / evaluation process
        os.environ["OMP_NUM_THREADS"] = str(args.threads)
    all_methods = [json.loads(p.read_text())["name"] for p in sorted((HERE / "configs").glob("*.json"))]
    order = json.loads((HERE / "order.json").read_text()) if (HERE / "order.json").is_file() else all_methods
    methods = args.methods.split(",") if args.methods else [m for m in order if m in all_methods]
    unknown = sorted(set(methods) - set(all_methods))
    if unknown:
        sys.exit(f"unknown method(s) {unknown}; configs: {', '.join(all_methods)}")
    seeds = [int(s) for s in args.seeds.split(",")] if args.seeds else BUDGET["seeds"]
    if not (SHARED / "senteval").is_dir():
        sys.exit(f"evaluation data not found at {SHARED / 'senteval'}")
    (HERE / "results").mkdir(exist_ok=True)
    if args.reverse:
        methods = methods[::-1]
    precision = args.precision
    todo = [(m, s) for s in seeds for m in methods if not result_path(m, s, precision).is_file()]
    print(f"{len(todo)} missing cell(s): {', '.join(cell_name(m, s, precision) for m, s in todo) or '-'}",
          flush=True)
    if args.dry_run:
        return
    baseline = HERE / "results" / "pretrained.json"
    if not baseline.is_file():
        print(f"[{datetime.now():%H:%M:%S}] pretrained (no training) ...", flush=True)
        baseline.write_text(json.dumps(run_baseline(), indent=2) + "\n")
    for method, seed in todo:
        out = result_path(method, seed, precision)
        lock = None if out.is_file() else claim(cell_name(method, seed, precision))
        if lock is None:  # finished or being run by another runner meanwhile
            continue
        start = time.time()
        print(f"[{datetime.now():%H:%M:%S}] {cell_name(method, seed, precision)} ...", flush=True)
        try:
            result = run_cell(method, seed, args.keep_runs, precision)
        except RuntimeError as err:
            print(f"  FAILED: {err}", flush=True)
            continue
        finally:
            lock.unlink(missing_ok=True)
        out.write_text(json.dumps(result, indent=2) + "\n")
        avg = result["eval"].get("avg")
        print(f"  done in {time.time() - start:.0f} s, STS avg {avg}", flush=True)


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    main()
