#!/usr/bin/env python
"""(anchor, entailment, contradiction) triplets from the SICK train split, for the supervised demonstration.

    python experiments/sick_triplets.py /tmp/sick_triplets.tsv

SICK gives premise / hypothesis pairs (``sentence_A``, ``sentence_B``) with an entailment judgment. A row is
written for every ENTAILMENT pair (A entails B: anchor A, positive B) whose anchor also has a CONTRADICTION
partner (the hard negative; contradiction is symmetric, so pairs labelled either way round count). Entailment is
directional and taken only as labelled. Anchors with several contradiction partners use them in turn.

The file is generated at run time from ../shared/data/senteval/SICK (never copied into the project). Note that
SICK-R's test set is drawn from the same corpus: most of its sentences also occur in the train split.
"""

from __future__ import annotations

import argparse
import csv
from collections import defaultdict
from pathlib import Path

SICK = Path(__file__).resolve().parents[2] / "shared" / "data" / "senteval" / "SICK"


def sick_triplets(sick_dir: Path = SICK) -> list[tuple[str, str, str]]:
    """The triplets of ``SICK_train.txt``, in file order of their entailment pairs."""
    with (sick_dir / "SICK_train.txt").open(encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh, delimiter="\t"))
    entails: list[tuple[str, str]] = []
    contradicts: dict[str, list[str]] = defaultdict(list)
    for row in rows:
        a, b, label = row["sentence_A"].strip(), row["sentence_B"].strip(), row["entailment_judgment"]
        if label == "ENTAILMENT":
            entails.append((a, b))
        elif label == "CONTRADICTION":
            contradicts[a].append(b)
            contradicts[b].append(a)
    used: dict[str, int] = defaultdict(int)
    triplets = []
    for anchor, positive in entails:
        negatives = contradicts.get(anchor)
        if negatives:
            triplets.append((anchor, positive, negatives[used[anchor] % len(negatives)]))
            used[anchor] += 1
    return triplets


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", help="TSV file to write (columns anchor, entailment, contradiction)")
    parser.add_argument("--sick_dir", default=str(SICK), help="folder holding SICK_train.txt")
    args = parser.parse_args()
    out = Path(args.out)
    if out.exists():
        raise SystemExit(f"{out} exists; give a new path (an existing file is never overwritten).")
    triplets = sick_triplets(Path(args.sick_dir))
    with out.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh, delimiter="\t")
        writer.writerow(["anchor", "entailment", "contradiction"])
        writer.writerows(triplets)
    print(f"wrote {len(triplets)} triplets to {out}")


if __name__ == "__main__":
    main()
