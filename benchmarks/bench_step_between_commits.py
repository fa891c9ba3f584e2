#!/usr/bin/env python
"""The hf_cse CPU training step of two checkouts side by side (did a change slow the CPU path?).

    git worktree add /tmp/before <commit>      # beside ../shared, or with ../shared reachable from it
    python benchmarks/bench_step_between_commits.py /tmp/before . --rounds 4

Each round times ``bench_train_throughput``'s hf_cse trainer (packaged MiniLM, SimCSE / InfoNCE, batch 64, length
32, fp32, 2 threads, 2 warm-up and 6 timed steps) once in a fresh process per checkout, the two interleaved so that
a load change hits both; prints each round's median step and the median over rounds.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

CHILD = """
import argparse, logging, sys, tempfile
sys.path.insert(0, sys.argv[1] + "/benchmarks")
import torch
from bench_train_common import StepTimer, WIKI, load_sentences, summarize
from bench_train_throughput import hf_cse_trainer
torch.set_num_threads(2)
logging.disable(logging.WARNING)
args = argparse.Namespace(batch_size=64, length=32, warmup=2, steps=6, precision="fp32")
with tempfile.TemporaryDirectory() as tmp:
    timer = StepTimer()
    hf_cse_trainer(load_sentences(WIKI, 64 * 8, 0), args, tmp, [timer]).train()
print(summarize(timer.times[2:])["median_s"])
"""


def step_s(repo: Path) -> float:
    out = subprocess.run([sys.executable, "-c", CHILD, str(repo)], cwd=repo, env={"PYTHONPATH": str(repo),
                         "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
                         capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("before", type=Path)
    ap.add_argument("after", type=Path)
    ap.add_argument("--rounds", type=int, default=4)
    args = ap.parse_args()
    times = {"before": [], "after": []}
    for r in range(args.rounds):
        for name in ("before", "after") if r % 2 == 0 else ("after", "before"):
            times[name].append(step_s(getattr(args, name).resolve()))
            print(f"round {r + 1} {name}: {times[name][-1]:.3f} s", flush=True)
    before, after = statistics.median(times["before"]), statistics.median(times["after"])
    print(f"median step: before {before:.3f} s, after {after:.3f} s; after / before = {after / before:.3f}")


if __name__ == "__main__":
    main()
