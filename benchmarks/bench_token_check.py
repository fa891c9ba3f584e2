#!/usr/bin/env python
"""The up-front check of a tokenized Arrow data set against the encoder (``hf_cse.data_checks.token_extent``: the
longest row and the lowest and highest token id, by pyarrow reductions) against its peer, the same three numbers read
row by row in Python (what a check that turns rows into Python lists costs), on one data set of ``--rows`` rows of 7
to 32 token ids, saved to disk and memory-mapped back as a user's ``load_from_disk`` data set is.

    python benchmarks/bench_token_check.py                      # 1,000,000 rows; ~1 min to build, then seconds
    python benchmarks/bench_token_check.py --rows 200000 --rounds 5

Prints the median of ``--rounds`` timings of each, their ratio, and checks that both give the same numbers.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path


def _python_extent(dataset) -> tuple[int, int, int]:
    longest, lowest, highest = 0, None, None
    for batch in dataset.iter(batch_size=10_000):
        for ids in batch["input_ids"]:
            longest = max(longest, len(ids))
            low, high = min(ids), max(ids)
            lowest = low if lowest is None else min(lowest, low)
            highest = high if highest is None else max(highest, high)
    return longest, lowest, highest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    import datasets
    import numpy as np

    from hf_cse.data_checks import token_extent

    rng = np.random.default_rng(0)
    lengths = rng.integers(7, 33, size=args.rows)
    ids = rng.integers(1000, 30_000, size=int(lengths.sum()), dtype=np.int32)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    rows = [ids[offsets[i]:offsets[i + 1]].tolist() for i in range(args.rows)]
    with tempfile.TemporaryDirectory() as folder:
        datasets.Dataset.from_dict({"input_ids": rows}).save_to_disk(str(Path(folder) / "ds"))
        del rows
        dataset = datasets.load_from_disk(str(Path(folder) / "ds"))  # memory-mapped from disk
        timings: dict[str, list[float]] = {"pyarrow (hf_cse)": [], "python rows (peer)": []}
        answers = {}
        for _ in range(args.rounds):  # interleaved, so that both see the same page cache and load
            for name, check in (("pyarrow (hf_cse)", lambda: token_extent(dataset.data.table, ["input_ids"])),
                                ("python rows (peer)", lambda: _python_extent(dataset))):
                start = time.perf_counter()
                answers[name] = tuple(check())
                timings[name].append(time.perf_counter() - start)
    assert len(set(answers.values())) == 1, answers
    hf_cse_s, peer_s = (statistics.median(timings[name]) for name in timings)
    print(f"rows {args.rows:,}; longest, lowest id, highest id: {answers['pyarrow (hf_cse)']}")
    for name, values in timings.items():
        print(f"{name:20s} median {statistics.median(values) * 1000:9.1f} ms  (rounds: "
              f"{', '.join(f'{v * 1000:.1f}' for v in values)})")
    print(f"peer / hf_cse: {peer_s / hf_cse_s:.0f}x")


if __name__ == "__main__":
    main()
