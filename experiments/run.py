#!/usr/bin/env python
"""Run the missing cells of the comparison tables: every method x seed in each regime of experiments/regimes.json.

    python experiments/run.py --regime general                 # every missing cell of a regime
    python experiments/run.py --regime domain --methods simcse,gs_infonce --seeds 42
    python experiments/run.py --regime general --dry_run       # list what would run
    python experiments/run.py --regime general --workers 12 --stop_after 480   # a GPU: cells side by side
    python experiments/run.py --regime cls --precision bf16 --methods simcse  # a bf16 twin (simcse_bf16__seed42)
    python experiments/run.py --regime general --methods simcse --seeds 42 --layout padded   # simcse_padded__seed42

Regimes (experiments/regimes.json): ``general`` (Wikipedia sentences, seven STS tasks) and ``domain`` (the sentences
of STS-B train/dev and SICK train as unlabeled text, minus every test sentence; STS-B and SICK-R test) train the
packaged encoder with its own pooling (mean + Normalize); ``cls`` trains it through its [CLS] token (the papers'
pooling for raw BERT). A cell = one method (experiments/configs/<method>.json: a run description, the settings by
flag name that run_unsup.py reads with --config, plus ``about``: the paper and the regimes it runs in; a budget
setting given there, e.g. the learning rate, wins over the regime's) trained with one seed, the checkpoint selected
on STS-B dev, then scored with run_eval.py (the regime's tasks, alignment and uniformity). Each finished cell writes
experiments/results/<regime>/<method>__seed<seed>.json; cells with a result on disk are skipped. The untrained
encoder is scored first, with its own pooling (``untrained_own``) and, in the cls regime, through its raw [CLS]
(``untrained_cls``): the anchor rows of every table.

Several runners may share a regime: each claims a cell with a lock file (experiments/runs/<regime>/<cell>.lock,
holding its pid; a lock whose process is gone is taken over). ``--workers N`` runs N cells at once (on a GPU the
cells are bound by Python, not by the GPU); ``--stop_after S`` starts no cell after S seconds. Training runs go to
experiments/runs/ (not committed) and are deleted after scoring unless --keep_runs.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path
from typing import Literal

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SHARED = ROOT.parent / "shared" / "data"
REGIMES = json.loads((HERE / "regimes.json").read_text())
#: the regime's settings that are run_unsup.py flags
BUDGET_FLAGS = ("max_steps", "per_device_train_batch_size", "max_seq_length", "learning_rate", "lr_scheduler_type",
                "warmup_steps", "eval_steps")

Precision = Literal["auto", "fp32", "bf16"]


def cell_name(method: str, seed: int, precision: Precision = "auto", layout: str | None = None) -> str:
    variant = "" if precision in ("auto", "fp32") else f"_{precision}"
    variant += f"_{layout}" if layout else ""
    return f"{method}{variant}__seed{seed}"


def result_path(regime: str, name: str) -> Path:
    return HERE / "results" / regime / f"{name}.json"


def flag_list(args: dict) -> list[str]:
    out = []
    for key, value in args.items():
        out += [f"--{key}", str(value).lower() if isinstance(value, bool) else str(value)]
    return out


def child_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run(cmd: list[str], log: Path, threads: int | None) -> None:
    env = {**os.environ, **({"OMP_NUM_THREADS": str(threads)} if threads else {})}
    with log.open("a") as fh:
        fh.write("$ " + " ".join(cmd) + "\n")
        fh.flush()
        proc = subprocess.run(cmd, cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT, env=env)
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
    info_file = run_dir / "training_info.json"
    info = json.loads(info_file.read_text()) if info_file.is_file() else {}
    return {
        "steps": state["global_step"],
        "train_runtime_s": final.get("train_runtime"),
        "final_logged": {k: v for k, v in last.items() if k not in ("epoch", "step", "learning_rate", "grad_norm")},
        "paradigm_diagnostics_last": {k: last[k] for k in diagnostics if k in last},
        "paradigm_diagnostics_first": {k: train_logs[0][k] for k in diagnostics if train_logs and k in train_logs[0]},
        "dev_evals": evals,
        "best_stsb_dev": state.get("best_metric"),
        "best_checkpoint": Path(state["best_model_checkpoint"]).name if state.get("best_model_checkpoint") else None,
        "dev": info.get("dev"),
        "precision": info.get("precision"),
    }


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def claim(regime: str, name: str) -> Path | None:
    """Take the lock of cell ``name`` (None if a live runner holds it); a dead runner's lock is taken over."""
    lock = HERE / "runs" / regime / f"{name}.lock"
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


def train_corpus(regime: dict) -> Path:
    if regime["corpus"] == "wiki":
        return SHARED / "unsup" / "wiki_sentences.txt"
    path = HERE / "runs" / "domain_corpus.txt"
    if not path.is_file():
        from domain_corpus import build

        record = HERE / "results" / "domain" / "corpus.json"
        record.parent.mkdir(parents=True, exist_ok=True)
        record.write_text(json.dumps(build(SHARED / "senteval", path), indent=2) + "\n")
    return path


def device_name() -> str:
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"


def encoder_flags(encoder: str | None) -> list[str]:
    return ["--model_name_or_path", encoder] if encoder else []


def evaluate(model: str, regime: dict, out_dir: Path, log: Path, threads: int | None, *extra: str) -> dict:
    run([sys.executable, "run_eval.py", "--model_name_or_path", model, "--senteval_data_dir", str(SHARED / "senteval"),
         "--tasks", ",".join(regime["tasks"]) + ",geometry", "--output_dir", str(out_dir), "--disable_tqdm", "true",
         "--precision", "fp32", *extra], log, threads)
    return json.loads((out_dir / "results.json").read_text())


def load_config(method: str) -> dict:
    """experiments/configs/<method>.json, a run description (hf_cse/cli/run_config.py) with ``about`` for the
    reader and run.py (the paper's setting, the regimes it runs in, the dimensions it is scored at)."""
    path = HERE / "configs" / f"{method}.json"
    config = json.loads(path.read_text())
    if "args" in config:
        sys.exit(f"{path} is in the old format (name, paper, args); convert it: python experiments/convert_configs.py")
    return config


def dims_flags(about: dict) -> list[str]:
    """run_eval's ``--truncate_dims`` where the config asks for scores per embedding dimension."""
    return ["--truncate_dims", str(about["truncate_dims"])] if about.get("truncate_dims") else []


def train_command(regime_name: str, method: str, seed: int, precision: Precision, encoder: str | None,
                  layout: str | None, run_dir: Path) -> tuple[list[str], dict]:
    """The run_unsup.py command of a cell (its config by --config), and its budget (the regime's, changed where the
    config sets it)."""
    regime = REGIMES[regime_name]
    settings = {k: v for k, v in load_config(method).items() if k != "about"}
    budget = {k: settings.get(k, regime[k]) for k in BUDGET_FLAGS}  # the config's setting wins over the regime's
    train_args = {  # on the command line, over the config's settings (--config): the config's win over the regime's
        **{k: v for k, v in budget.items() if k not in settings},
        **({"pooler_type": "cls"} if regime["pooling"] == "cls" and "pooler_type" not in settings else {}),
        "seed": seed,
        "train_file": str(train_corpus(regime)),
        "senteval_data_dir": str(SHARED / "senteval"),
        "output_dir": str(run_dir),
        "overwrite_output_dir": True,  # run_dir holds this cell's log.txt (kept: run_unsup.py only removes run files)
        "eval_strategy": "steps",
        "save_strategy": "steps",
        "save_steps": budget["eval_steps"],
        "save_total_limit": 1,
        "load_best_model_at_end": True,
        "metric_for_best_model": "stsb_spearman",
        "logging_steps": 10,
        "disable_tqdm": True,
        "report_to": "none",
        "precision": precision,
        **({"padding_free": layout == "padding_free"} if layout else {}),
    }
    return [sys.executable, "run_unsup.py", "--config", str(HERE / "configs" / f"{method}.json"),
            *encoder_flags(encoder), *flag_list(train_args)], budget


def run_cell(regime_name: str, method: str, seed: int, keep_runs: bool, precision: Precision, encoder: str | None,
             threads: int | None, layout: str | None = None) -> dict:
    regime = REGIMES[regime_name]
    config = load_config(method)
    about, settings = config["about"], {k: v for k, v in config.items() if k != "about"}
    name = cell_name(method, seed, precision, layout)
    run_dir = HERE / "runs" / regime_name / name
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    log = run_dir / "log.txt"
    command, budget = train_command(regime_name, method, seed, precision, encoder, layout, run_dir)
    cpu0, wall0 = child_cpu_seconds(), time.time()
    run(command, log, threads)
    summary = train_summary(run_dir)
    summary["fast_dropout"] = json.loads((run_dir / "config.json").read_text()).get("fast_dropout", False)
    scores = evaluate(str(run_dir), regime, run_dir / "eval", log, threads, *dims_flags(about))
    result = {
        "cell": name, "regime": regime_name, "method": method, "seed": seed, "precision": precision,
        **({"layout": layout} if layout else {}),
        "paper_setting": about["paper"],
        "config": {k: v for k, v in settings.items() if k not in BUDGET_FLAGS}, "budget": budget, "train": summary,
        **({"truncate_dims": about["truncate_dims"]} if about.get("truncate_dims") else {}),
        "eval": scores, "device": device_name(), "wall_seconds": round(time.time() - wall0, 1),
        "cpu_seconds": round(child_cpu_seconds() - cpu0, 1),
        "finished": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    if not keep_runs:
        shutil.rmtree(run_dir)
    return result

#: the untrained encoder's anchor rows: with its own pooling (every regime), through raw [CLS] (cls regime), and with
#: its own pooling scored at each embedding dimension (a regime whose configs ask for ``truncate_dims``)
BASELINES = {"untrained_own": ((), "no training: the packaged encoder with its own pooling (mean + Normalize)"),
             "untrained_cls": (("--pooler", "cls_before_pooler"),
                               "no training: the packaged encoder's raw [CLS] (cls_before_pooler)"),
             "untrained_own_dims": ((), "no training: the packaged encoder with its own pooling (mean + Normalize), "
                                        "scored at each embedding dimension")}


def baseline_dims(methods: list[str]) -> str | None:
    """The dimensions the untrained encoder is scored at: every dimension some config of ``methods`` asks for."""
    dims = {int(d) for m in methods for d in str(load_config(m)["about"].get("truncate_dims") or "").split(",")
            if d}
    return ",".join(map(str, sorted(dims, reverse=True))) or None


def run_baseline(regime_name: str, name: str, encoder: str | None, threads: int | None,
                 truncate_dims: str | None = None) -> dict:
    flags, setting = BASELINES[name]
    dims = {"truncate_dims": truncate_dims} if truncate_dims else {}
    run_dir = HERE / "runs" / regime_name / name
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    cpu0, wall0 = child_cpu_seconds(), time.time()
    from hf_cse.encoders import default_encoder

    model = encoder or default_encoder()
    scores = evaluate(model, REGIMES[regime_name], run_dir / "eval", run_dir / "log.txt", threads, *flags,
                      *dims_flags(dims))
    shutil.rmtree(run_dir)
    return {"cell": name, "regime": regime_name, "method": name, "seed": None, "paper_setting": setting,
            "config": {}, "budget": {}, "train": {}, "eval": scores, **dims, "device": device_name(),
            "precision": "fp32", "wall_seconds": round(time.time() - wall0, 1),
            "cpu_seconds": round(child_cpu_seconds() - cpu0, 1),
            "finished": datetime.now(timezone.utc).isoformat(timespec="seconds")}


def methods_of(regime: str) -> list[str]:
    """The configs that run in ``regime`` (a config without ``regimes`` runs in all), in order.json's order."""
    configs = {p.stem: load_config(p.stem) for p in (HERE / "configs").glob("*.json")}
    order = json.loads((HERE / "order.json").read_text())
    names = [m for m in order if m in configs] + sorted(set(configs) - set(order))
    return [m for m in names if regime in configs[m]["about"].get("regimes", REGIMES)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--regime", choices=list(REGIMES), required=True)
    parser.add_argument("--methods", help="comma list (default: every config of the regime)")
    parser.add_argument("--seeds", help="comma list (default: the regime's seeds)")
    parser.add_argument("--dry_run", action="store_true")
    parser.add_argument("--keep_runs", action="store_true", help="keep checkpoints in experiments/runs/")
    parser.add_argument("--threads", type=int, help="OMP_NUM_THREADS of the training/eval processes")
    parser.add_argument("--workers", type=int, default=1, help="cells run at once")
    parser.add_argument("--stop_after", type=float, help="start no cell after this many seconds")
    parser.add_argument("--reverse", action="store_true", help="methods in reverse order, seed by seed (a 2nd runner)")
    parser.add_argument("--encoder", help="encoder folder (default: the packaged all-MiniLM-L6-v2)")
    parser.add_argument("--precision", choices=["auto", "fp32", "bf16"], default="auto",
                        help="training precision (auto: bf16 where the device computes it natively); a bf16 cell "
                             "is named <method>_bf16")
    parser.add_argument("--layout", choices=["padding_free", "padded"],
                        help="a twin cell trained with --padding_free true / false, named <method>_<layout>, kept "
                             "out of the tables (benchmarks/README.md compares the two)")
    args = parser.parse_args()
    start = time.time()
    available = methods_of(args.regime)
    methods = args.methods.split(",") if args.methods else available
    unknown = sorted(set(methods) - set(available))
    if unknown:
        sys.exit(f"unknown method(s) {unknown} for regime {args.regime}; configs: {', '.join(available)}")
    seeds = [int(s) for s in args.seeds.split(",")] if args.seeds else REGIMES[args.regime]["seeds"]
    if not (SHARED / "senteval").is_dir():
        sys.exit(f"evaluation data not found at {SHARED / 'senteval'}")
    (HERE / "results" / args.regime).mkdir(parents=True, exist_ok=True)
    if args.reverse:
        methods = methods[::-1]
    todo = [(m, s) for s in seeds for m in methods
            if not result_path(args.regime, cell_name(m, s, args.precision, args.layout)).is_file()]
    print(f"{len(todo)} missing cell(s): "
          f"{', '.join(cell_name(m, s, args.precision, args.layout) for m, s in todo) or '-'}",
          flush=True)
    dims = baseline_dims(methods)
    baselines = (["untrained_own"] + (["untrained_cls"] if REGIMES[args.regime]["pooling"] == "cls" else [])
                 + (["untrained_own_dims"] if dims else []))
    if args.dry_run:
        missing = [b for b in baselines if not result_path(args.regime, b).is_file()]
        print(f"untrained row(s) to score first: {', '.join(missing) or '-'}"
              + (f" (dimensions {dims})" if "untrained_own_dims" in missing else ""))
        for method, seed in todo:
            run_dir = HERE / "runs" / args.regime / cell_name(method, seed, args.precision, args.layout)
            command, _ = train_command(args.regime, method, seed, args.precision, args.encoder, args.layout, run_dir)
            print(f"{cell_name(method, seed, args.precision, args.layout)}: {' '.join(command[1:])}"
                  + (f"\n  then run_eval.py {' '.join(dims_flags(load_config(method)))}"
                     if dims_flags(load_config(method)) else ""))
        return
    for name in baselines:
        if not result_path(args.regime, name).is_file():
            print(f"[{datetime.now():%H:%M:%S}] {name} (no training) ...", flush=True)
            result = run_baseline(args.regime, name, args.encoder, args.threads,
                                  dims if name == "untrained_own_dims" else None)
            result_path(args.regime, name).write_text(json.dumps(result, indent=2) + "\n")
    print_lock = threading.Lock()

    def one(cell: tuple[str, int]) -> None:
        method, seed = cell
        name = cell_name(method, seed, args.precision, args.layout)
        out = result_path(args.regime, name)
        if args.stop_after is not None and time.time() - start > args.stop_after:
            return
        lock = None if out.is_file() else claim(args.regime, name)
        if lock is None:  # finished or being run by another runner meanwhile
            return
        begun = time.time()
        with print_lock:
            print(f"[{datetime.now():%H:%M:%S}] {args.regime}/{name} ...", flush=True)
        try:
            result = run_cell(args.regime, method, seed, args.keep_runs, args.precision, args.encoder, args.threads,
                              args.layout)
        except RuntimeError as err:
            with print_lock:
                print(f"  {name} FAILED: {err}", flush=True)
            return
        finally:
            lock.unlink(missing_ok=True)
        out.write_text(json.dumps(result, indent=2) + "\n")
        with print_lock:
            print(f"  {name} done in {time.time() - begun:.0f} s", flush=True)

    with ThreadPoolExecutor(max_workers=max(1, args.workers)) as pool:
        list(pool.map(one, todo))


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sys.path[:0] = [str(HERE), str(ROOT)]  # domain_corpus, and hf_cse from this checkout
    main()
