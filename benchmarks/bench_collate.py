#!/usr/bin/env python
"""The host's share of a training step: fetching a batch of rows from the tokenized training set and collating it
(the work a GPU waits on when the host is slower than its step; issue 37): the rows fetched with their texts (as
tokenized for the no-duplicates sampler) and without (what the trainer's loader fetches); hf_cse's two-view
collator -- with each batch's own random draws (``hf_cse.collator_rng``), as the trainer calls it -- beside
transformers' ``DataCollatorWithPadding`` (the peer: one view, no draws) on the same rows, in the same run.

    python benchmarks/bench_collate.py                       # batch 64 of the shared Wikipedia sentences, length 32
    python benchmarks/bench_collate.py --batch-size 512 --rounds 5

Rows: the packaged MiniLM's tokenizer over the first 20,000 shared sentences (the stand-in corpus when absent),
random batches; each round times every step over the same 50 batches, the steps interleaved (30 rounds: the
machine's speed jumps between two levels now and then); prints the median over rounds of the mean time a batch (ms).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--batches", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--rows", type=int, default=20_000)
    args = ap.parse_args(argv)

    import datasets
    from bench_train_common import WIKI, load_sentences, minilm_path
    from transformers import AutoTokenizer, DataCollatorWithPadding

    from hf_cse.collator_rng import CollatorDraws
    from hf_cse.data import TwoViewCollator, tokenize_dataset

    datasets.disable_progress_bars()
    tokenizer = AutoTokenizer.from_pretrained(minilm_path())
    with_text = tokenize_dataset(datasets.Dataset.from_dict({"text": load_sentences(WIKI, args.rows, 0)}), tokenizer,
                                 32, keep_text=True)  # as hf-cse-train tokenizes for the no-duplicates sampler
    rows = with_text.remove_columns(["text"])  # what the trainer's loader fetches from it (hf_cse.trainer_batches)
    rng = random.Random(0)
    batches = [rng.sample(range(len(rows)), args.batch_size) for _ in range(args.batches)]
    run_args = argparse.Namespace(seed=42, dataloader_num_workers=0, dataloader_persistent_workers=False)
    collators = {"hf_cse two views, keyed draws": CollatorDraws().track(TwoViewCollator(tokenizer), run_args),
                 "transformers DataCollatorWithPadding": DataCollatorWithPadding(tokenizer)}
    fetched = [rows.__getitems__(b) for b in batches]
    times: dict[str, list[float]] = {"fetch rows with their texts": [], "fetch token rows": [],
                                     **{name: [] for name in collators}}
    for _ in range(args.rounds):
        start = time.perf_counter()
        [with_text.__getitems__(b) for b in batches]
        times["fetch rows with their texts"].append((time.perf_counter() - start) / len(batches))
        start = time.perf_counter()
        fetched = [rows.__getitems__(b) for b in batches]
        times["fetch token rows"].append((time.perf_counter() - start) / len(batches))
        for name, collate in collators.items():
            start = time.perf_counter()
            for features in fetched:
                collate(features)
            times[name].append((time.perf_counter() - start) / len(batches))
    result = {"batch_size": args.batch_size, "rows": len(rows), "batches": len(batches), "rounds": args.rounds,
              "ms_per_batch": {name: 1e3 * statistics.median(t) for name, t in times.items()}}
    peer = result["ms_per_batch"]["transformers DataCollatorWithPadding"]
    result["hf_cse / peer"] = result["ms_per_batch"]["hf_cse two views, keyed draws"] / peer
    print(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
