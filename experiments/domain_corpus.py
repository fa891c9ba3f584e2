#!/usr/bin/env python
"""The unlabeled in-domain corpus of the domain-adaptation regime: the sentences of STS-B train/dev and SICK train,
their scores never read, minus every sentence that also occurs in any test set (STS12-16, STS-B test, SICK-R test).

    python experiments/domain_corpus.py [--out experiments/runs/domain_corpus.txt]

Sentences are compared after casefolding and collapsing whitespace; duplicates are kept once; the order is shuffled
with a fixed seed. The file is built from ../shared/data at run time (never committed); its counts are written to
experiments/results/domain/corpus.json.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from hf_cse.evaluation.data import STS_TASKS, load_sts  # noqa: E402

SOURCES = (("STSBenchmark", "train"), ("STSBenchmark", "dev"), ("SICKRelatedness", "train"))


def _key(sentence: str) -> str:
    return " ".join(sentence.split()).casefold()


def _sentences(task: str, split: str, data_dir: Path) -> list[str]:
    out = []
    for pairs in load_sts(task, data_dir, split).values():
        out += [*pairs.sentences1, *pairs.sentences2]
    return out


def build(data_dir: Path, out: Path, seed: int = 0) -> dict:
    """Write the corpus to ``out``; returns its counts (what was read, dropped as test sentences, deduplicated)."""
    test = {_key(s) for task in STS_TASKS for s in _sentences(task, "test", data_dir)}
    read, kept, seen = 0, [], set()
    dropped_test = dropped_duplicate = 0
    for task, split in SOURCES:
        for sentence in _sentences(task, split, data_dir):
            read += 1
            key = _key(sentence)
            if key in test:
                dropped_test += 1
            elif key in seen:
                dropped_duplicate += 1
            else:
                seen.add(key)
                kept.append(sentence.strip())
    random.Random(seed).shuffle(kept)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(kept) + "\n", encoding="utf-8")
    return {"sources": [f"{task} {split}" for task, split in SOURCES], "sentences_read": read,
            "dropped_in_a_test_set": dropped_test, "dropped_duplicates": dropped_duplicate, "kept": len(kept),
            "test_sentences": len(test), "match": "casefolded, whitespace collapsed"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data_dir", default=str(HERE.parent.parent / "shared" / "data" / "senteval"))
    parser.add_argument("--out", default=str(HERE / "runs" / "domain_corpus.txt"))
    args = parser.parse_args()
    stats = build(Path(args.data_dir), Path(args.out))
    record = HERE / "results" / "domain" / "corpus.json"
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(json.dumps(stats, indent=2) + "\n")
    print(json.dumps(stats, indent=2))


if __name__ == "__main__":
    main()
