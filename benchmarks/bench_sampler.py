#!/usr/bin/env python
"""Cost of the no-duplicates batch sampler (hf_cse/sampler.py): time to key the rows and to plan one epoch, and
the rows it defers and leaves out, on the shared Wikipedia sentences as they are (no repeats), repeated 4x (every
text 4 times), and with a quarter of the rows copies of 100 frequent lines.

    python benchmarks/bench_sampler.py            # batch 64 x 1 process and 64 x 8 processes
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hf_cse.sampler import NoDuplicatesBatchSampler, text_key  # noqa: E402

CORPUS = ROOT.parent / "shared" / "data" / "unsup" / "wiki_sentences.txt"


def corpora(lines: list[str]) -> dict[str, list[str]]:
    rng = random.Random(0)
    frequent = lines[:100]
    skewed = list(lines) + [rng.choice(frequent) for _ in range(len(lines) // 3)]
    return {"wiki as is": list(lines), "wiki x4 (every text 4 times)": lines * 4,
            "wiki + 25% copies of 100 lines": skewed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--no_save", action="store_true")
    args = parser.parse_args()
    lines = [s.strip() for s in CORPUS.read_text(encoding="utf-8").splitlines() if s.strip()]
    rows = []
    for name, texts in corpora(lines).items():
        start = time.perf_counter()
        keys = [text_key(t) for t in texts]
        key_s = time.perf_counter() - start
        for world in (1, 8):
            sampler = NoDuplicatesBatchSampler(keys, args.batch, world, seed=0)
            plan = sampler.plan()
            rows.append({"corpus": name, "rows": len(texts), "global_batch": args.batch * world,
                         "key_seconds": round(key_s, 2), "plan_seconds": round(plan.seconds, 2),
                         "deferred": plan.deferred, "dropped": plan.dropped,
                         "batches": len(plan.batches) // world})
    print("| corpus | rows | global batch | keying (s) | plan per epoch (s) | deferred | left out | batches |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['corpus']} | {r['rows']:,} | {r['global_batch']} | {r['key_seconds']} | {r['plan_seconds']} | "
              f"{r['deferred']:,} | {r['dropped']:,} | {r['batches']:,} |")
    if not args.no_save:
        out = ROOT / "benchmarks" / "results" / "sampler.json"
        out.write_text(json.dumps({"batch": args.batch, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
