#!/usr/bin/env python
"""Peak memory of a streamed run (``--streaming``) does not grow with the corpus; an in-memory run's does.

The corpus is built in a temporary folder by repeating ``../shared/data/unsup/wiki_sentences.txt`` (80k lines,
11 MB) R times, each copy's lines prefixed with a marker ``[r]`` so that no two lines are equal. For each size
``run_unsup.py`` trains the packaged all-MiniLM-L6-v2 for a few steps in a child process (its own ``datasets``
cache in the temporary folder), and the child's peak resident memory (``ru_maxrss``) is read:

    python benchmarks/bench_streaming.py                  # 1x and 8x, streamed and in memory
    python benchmarks/bench_streaming.py --repeats 1 16 --modes streamed
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_train_common import RESULTS, ROOT, WIKI


def build_corpus(folder: Path, repeats: int) -> Path:
    lines = [s.strip() for s in WIKI.read_text(encoding="utf-8").splitlines() if s.strip()]
    path = folder / f"wiki_x{repeats}.txt"
    with path.open("w", encoding="utf-8") as fh:
        for r in range(repeats):
            fh.writelines(f"[{r}] {s}\n" for s in lines)
    return path


def peak_rss_mib(cmd: list[str], env: dict[str, str]) -> tuple[float, float, int]:
    """Run ``cmd`` in a fresh wrapper process; its child's peak RSS (MiB), wall seconds and exit code."""
    wrapper = ("import resource, subprocess, sys; rc = subprocess.run(sys.argv[1:]).returncode; "
               "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, rc)")
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", wrapper, *cmd], env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    kib, rc = out.stdout.strip().splitlines()[-1].split()
    if int(rc) != 0:
        print(out.stderr[-3000:], file=sys.stderr)
    return int(kib) / 1024, seconds, int(rc)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--modes", nargs="+", default=["streamed", "in memory"], choices=["streamed", "in memory"])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--no_save", action="store_true")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        env = {**os.environ, "HF_DATASETS_CACHE": str(tmp / "cache"), "HF_HUB_OFFLINE": "1",
               "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}
        for repeats in args.repeats:
            corpus = build_corpus(tmp, repeats)
            for mode in args.modes:
                out = tmp / f"out_{repeats}_{mode.replace(' ', '_')}"
                cmd = [sys.executable, str(ROOT / "run_unsup.py"), "--train_file", str(corpus), "--max_steps",
                       str(args.steps), "--per_device_train_batch_size", str(args.batch_size), "--output_dir",
                       str(out), "--use_cpu", "--disable_tqdm", "true", "--logging_steps", str(args.steps)]
                if mode == "streamed":
                    cmd.append("--streaming")
                mib, seconds, rc = peak_rss_mib(cmd, env)
                rows.append({"corpus": f"wiki x{repeats}", "lines": 80035 * repeats,
                             "MB": round(corpus.stat().st_size / 1e6, 1), "mode": mode,
                             "peak_rss_mib": round(mib), "seconds": round(seconds), "exit": rc})
                print(rows[-1], flush=True)
    print("| corpus | lines | file (MB) | mode | peak RSS (MiB) | wall (s) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['corpus']} | {r['lines']:,} | {r['MB']} | {r['mode']} | {r['peak_rss_mib']} | {r['seconds']} |")
    if not args.no_save:
        (RESULTS / "streaming.json").write_text(json.dumps({"steps": args.steps, "batch_size": args.batch_size,
                                                            "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
