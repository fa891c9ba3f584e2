#!/usr/bin/env python
"""Turn experiments/results/*.json into experiments/RESULTS.md and experiments/align_uniform.png.

    python experiments/make_table.py

Rows: methods (config order), mean ± sample standard deviation over seeds (± 0 shown as "±0.00" only
when there are >= 2 seeds; one seed shows no spread). Columns as the papers' Table 1.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
STS = ["STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark", "SICKRelatedness", "avg"]
HEAD = ["STS12", "STS13", "STS14", "STS15", "STS16", "STS-B", "SICK-R", "Avg."]


def geometry(scores: dict) -> tuple[float | None, float | None]:
    """Alignment and uniformity from a run_eval results.json, wherever run_eval put them."""
    flat = {}

    def walk(d, prefix=""):
        for k, v in d.items():
            if isinstance(v, dict):
                walk(v, f"{prefix}{k}.")
            elif isinstance(v, (int, float)):
                flat[f"{prefix}{k}".lower()] = v

    walk(scores)
    align = next((v for k, v in flat.items() if k.endswith("alignment") or k.endswith("align")), None)
    unif = next((v for k, v in flat.items() if k.endswith("uniformity") or k.endswith("uniform")), None)
    return align, unif


def fmt(values: list[float]) -> str:
    if not values:
        return "–"
    mean = statistics.fmean(values)
    return f"{mean:.2f} ± {statistics.stdev(values):.2f}" if len(values) > 1 else f"{mean:.2f}"


def main() -> None:
    order = json.loads((HERE / "order.json").read_text())
    cells = [json.loads(p.read_text()) for p in sorted((HERE / "results").glob("*.json"))]
    # bf16 twins (run.py --precision bf16) are compared in benchmarks/README.md, not in this fp32 table
    cells = [c for c in cells if c.get("precision", "fp32") == "fp32"]
    by_method: dict[str, list[dict]] = defaultdict(list)
    for cell in cells:
        by_method[cell["method"]].append(cell)
    order = ["pretrained", *order]
    methods = [m for m in order if m in by_method] + sorted(set(by_method) - set(order))
    budget = json.loads((HERE / "budget.json").read_text())

    lines = [
        "# Comparison table: every method on one small testbed",
        "",
        f"Encoder {budget['encoder']} ([CLS] + training-time head, `cls_before_pooler` at test); "
        f"{budget['max_steps']} steps, batch {budget['per_device_train_batch_size']}, length "
        f"{budget['max_seq_length']}, lr {budget['learning_rate']} linear decay, STS-B dev every "
        f"{budget['eval_steps']} steps selects the checkpoint; corpus `../shared/data/unsup/wiki_sentences.txt`. "
        "STS: Spearman x 100 on the test sets, 'all' aggregation for STS12-16; mean ± sample std over seeds. "
        "Made by `python experiments/make_table.py` from `experiments/results/`.",
        "",
        "| method | seeds | " + " | ".join(HEAD) + " | STS-B dev (sel.) | align | uniform |",
        "|---|---|" + "---|" * (len(HEAD) + 3),
    ]
    points = []
    for method in methods:
        runs = by_method[method]
        seeds = len([r for r in runs if r["seed"] is not None])
        row = [method, str(seeds) if seeds else "–"]
        for key in STS:
            row.append(fmt([r["eval"][key] for r in runs if key in r["eval"]]))
        row.append(fmt([r["train"]["best_stsb_dev"] for r in runs if r["train"].get("best_stsb_dev") is not None]))
        geo = [geometry(r["eval"]) for r in runs]
        aligns = [a for a, _ in geo if a is not None]
        unifs = [u for _, u in geo if u is not None]
        row += [f"{statistics.fmean(v):.3f}" if v else "–" for v in (aligns, unifs)]
        lines.append("| " + " | ".join(row) + " |")
        if aligns and unifs:
            points.append((method, statistics.fmean(aligns), statistics.fmean(unifs),
                           statistics.fmean(r["eval"]["avg"] for r in runs)))
    total_cpu = sum(c.get("cpu_seconds", 0) for c in cells)
    lines += ["", f"{len(cells)} cells, {total_cpu / 3600:.1f} CPU hours in all.", ""]
    lines += comparison_with_simcse(by_method, methods)
    lines += [
        "",
        "**What this table is:** every method under one identical, tiny budget (a 6-layer 384-d encoder that was",
        "already trained for sentence similarity, 100 optimizer steps = 6,400 sentences of an 80k-sentence",
        "Wikipedia stand-in corpus, CPU). **What it is not:** the papers' setting (BERT/RoBERTa base or large,",
        "1M sentences, a full epoch, GPU, the paper's own learning rates). Differences of a few tenths of a point",
        "are within seed noise at this budget; a method that loses here may still win in its paper's setting.",
        "DiffCSE rows use the corpus-unigram generator (no masked-LM weights can be downloaded here), not the",
        "paper's DistilBERT generator.",
        "",
    ]
    trained = [c for c in cells if c.get("train")]
    fast = sum(bool(c["train"].get("fast_dropout")) for c in trained)
    if 0 < fast < len(trained):
        lines += [f"Dropout: {len(trained) - fast} cells ran with torch's dropout (before hf_cse's fast CPU dropout),",
                  f"{fast} with the fast CPU dropout (the same Bernoulli(0.1) masks from another random stream).", ""]
    if (HERE / "SUPERVISED.md").is_file():  # written by hand from its own runs, not from results/
        lines += ["Supervised training on SICK (anchor, entailment, contradiction) triplets under the same budget, "
                  "next to these SimCSE cells: [SUPERVISED.md](SUPERVISED.md).", ""]
    (HERE / "RESULTS.md").write_text("\n".join(lines))
    print("\n".join(lines))
    if points:
        plot(points, HERE / "align_uniform.png")


#: how a method compares with SimCSE, in the order listed under the table
GROUPS = (ABOVE, ABOVE_WITHIN_NOISE, MIXED, BELOW_WITHIN_NOISE, BELOW) = (
    "above by more than the noise at every seed", "above at every seed, within the noise", "no consistent direction",
    "below at every seed, within the noise", "below by more than the noise at every seed")


def comparison_with_simcse(by_method: dict, methods: list[str]) -> list[str]:
    """Each method's STS average against SimCSE's at the same seed (same data order), grouped by the sign of
    the difference at every seed and by whether it exceeds SimCSE's own seed-to-seed std (the noise scale)."""
    if "simcse" not in by_method:
        return []
    simcse = {r["seed"]: r["eval"]["avg"] for r in by_method["simcse"]}
    noise = statistics.stdev(simcse.values()) if len(simcse) > 1 else 0.0
    groups: dict[str, list[tuple[float, str]]] = defaultdict(list)
    for method in methods:
        if method in ("simcse", "pretrained"):
            continue
        deltas = [r["eval"]["avg"] - simcse[r["seed"]] for r in by_method[method] if r["seed"] in simcse]
        if not deltas:
            continue
        mean = statistics.fmean(deltas)
        if min(deltas) > noise:
            group = ABOVE
        elif min(deltas) > 0:
            group = ABOVE_WITHIN_NOISE
        elif max(deltas) < -noise:
            group = BELOW
        elif max(deltas) < 0:
            group = BELOW_WITHIN_NOISE
        else:
            group = MIXED
        per_seed = f"; {' / '.join(f'{d:+.2f}' for d in deltas)}" if len(deltas) > 1 else ", 1 seed"
        groups[group].append((mean, f"{method} ({mean:+.2f}{per_seed})"))
    return [
        f"STS average minus SimCSE's at the same seed (mean; per seed {' / '.join(map(str, sorted(simcse)))}); "
        f"the noise scale is SimCSE's own seed-to-seed std, {noise:.2f}:",
        *(f"- {group}: {', '.join(text for _, text in sorted(groups[group], reverse=True)) or 'none'}"
          for group in GROUPS),
    ]


def plot(points, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 5.5))
    sc = ax.scatter([p[2] for p in points], [p[1] for p in points], c=[p[3] for p in points], cmap="viridis", s=40)
    for name, align, unif, _ in points:
        ax.annotate(name, (unif, align), fontsize=7, xytext=(3, 3), textcoords="offset points")
    fig.colorbar(sc, label="STS avg (Spearman x 100)")
    ax.set_xlabel("uniformity (lower is better)")
    ax.set_ylabel("alignment (lower is better)")
    ax.set_title("Alignment vs uniformity on STS-B (mean over seeds)")
    fig.tight_layout()
    fig.savefig(path, dpi=130)


if __name__ == "__main__":
    main()
