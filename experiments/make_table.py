#!/usr/bin/env python
"""Turn experiments/results/<regime>/*.json into experiments/RESULTS.md and experiments/align_uniform_<regime>.png.

    python experiments/make_table.py

One table per regime of experiments/regimes.json (general, domain, cls), each led by the untrained encoder: with its
own pooling (mean + Normalize) in every table, and through its raw [CLS] too where the methods use [CLS]. Rows:
methods (experiments/order.json), mean ± sample standard deviation over seeds (one seed shows no spread). The average
is over the regime's tasks and labelled with them (hf_cse.evaluation.average_label: "STS Avg." is the papers' 7-task
average, "Avg (STS-B, SICK-R)" one over those two). Under each table, every method against the untrained
encoder and against SimCSE at the same seed, grouped by sign and by SimCSE's own seed-to-seed std (the noise).
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # hf_cse from this checkout
from hf_cse.evaluation.data import TABLE_NAMES  # noqa: E402
from hf_cse.evaluation.results import EvalResults, average_label  # noqa: E402

REGIMES = json.loads((HERE / "regimes.json").read_text())
ANCHORS = {"untrained_own": "untrained, own pooling (mean + Normalize)",
           "untrained_cls": "untrained, raw [CLS] (the methods' pooling here)"}
#: the untrained encoder scored at each embedding dimension (run.py, for configs with ``truncate_dims``): the anchor
#: of the table by dimension only
DIMS_ANCHOR = "untrained_own_dims"
#: how a method compares with a reference row, in the order listed under the table
GROUPS = (ABOVE, ABOVE_WITHIN_NOISE, MIXED, BELOW_WITHIN_NOISE, BELOW) = (
    "above by more than the noise at every seed", "above at every seed, within the noise", "no consistent direction",
    "below at every seed, within the noise", "below by more than the noise at every seed")


def fmt(values: list[float]) -> str:
    if not values:
        return "–"
    mean = statistics.fmean(values)
    return f"{mean:.2f} ± {statistics.stdev(values):.2f}" if len(values) > 1 else f"{mean:.2f}"


def average(cell: dict, tasks: list[str]) -> float | None:
    """The mean over the regime's tasks (None unless every one was scored)."""
    values = [cell["results"].score(t) for t in tasks]
    return statistics.fmean(values) if all(isinstance(v, (int, float)) for v in values) else None


def trained_where(cell: dict) -> str:
    """Where and in what precision a cell ran, from its record (the untrained rows: where they were scored), else
    from its regime's ``unrecorded_device`` / ``unrecorded_precision`` (regimes.json: cells run before records held
    them)."""
    device = cell.get("device") or cell.get("unrecorded_device")
    device = "not recorded" if not device else "CPU" if device == "cpu" else device.removeprefix("NVIDIA ")
    precision = ((cell.get("train") or {}).get("precision") or cell.get("precision")
                 or cell.get("unrecorded_precision"))
    if not cell.get("train"):
        return f"{device}, fp32 (scored only)"
    if precision in (None, "auto"):
        return f"{device}, precision not recorded"
    return f"{device}, {precision.split()[0]}"


def group_of(deltas: list[float], noise: float) -> str:
    if min(deltas) > noise:
        return ABOVE
    if min(deltas) > 0:
        return ABOVE_WITHIN_NOISE
    if max(deltas) < -noise:
        return BELOW
    if max(deltas) < 0:
        return BELOW_WITHIN_NOISE
    return MIXED


def comparison(by_method: dict, methods: list[str], tasks: list[str], reference: str, noise: float,
               value=None, key=None) -> list[str]:
    """Each method's average (or ``value(cell)``) against ``reference``: an anchor row (one value) or SimCSE at the
    same seed (``key``: what a cell must share with its reference cell; the seed unless given)."""
    value = value or (lambda cell: average(cell, tasks))
    key = key or (lambda cell: cell["seed"])
    ref = {key(r): value(r) for r in by_method.get(reference, []) if value(r) is not None}
    if not ref:
        return []
    in_reference = {id(r) for r in by_method[reference]}
    groups: dict[str, list[tuple[float, str]]] = defaultdict(list)
    for method in methods:
        if method == reference or method in ANCHORS or method == DIMS_ANCHOR:
            continue
        deltas = [value(r) - ref.get(key(r), ref.get(None)) for r in by_method[method]
                  if id(r) not in in_reference and value(r) is not None and (key(r) in ref or None in ref)]
        if not deltas:
            continue
        mean = statistics.fmean(deltas)
        per_seed = f"; {' / '.join(f'{d:+.2f}' for d in deltas)}" if len(deltas) > 1 else ", 1 seed"
        groups[group_of(deltas, noise)].append((mean, f"{method} ({mean:+.2f}{per_seed})"))
    return [f"- {group}: {', '.join(text for _, text in sorted(groups[group], reverse=True)) or 'none'}"
            for group in GROUPS]


def regime_section(name: str, cells: list[dict], order: list[str],
                   precision_twins: list[dict] = ()) -> tuple[list[str], list[tuple]]:
    regime = REGIMES[name]
    tasks = regime["tasks"]
    avg = average_label(tasks)
    by_method: dict[str, list[dict]] = defaultdict(list)
    twins = [cell for cell in precision_twins if cell["method"] == "simcse"]  # SimCSE's training, for comparisons
    for cell in [*cells, *twins]:
        cell["results"] = EvalResults.from_dict(cell["eval"])  # run_eval's results.json of the cell
        for what in ("device", "precision"):  # what the regime says of cells whose record lacks it
            cell.setdefault(f"unrecorded_{what}", regime.get(f"unrecorded_{what}"))
    for cell in cells:
        by_method[cell["method"]].append(cell)
    # rows scored per dimension get the table by dimension too (the trained ones are also main-table rows)
    dims_rows = {m: runs for m, runs in by_method.items()
                 if m == DIMS_ANCHOR or any(r["results"].dimensions for r in runs)}
    by_method.pop(DIMS_ANCHOR, None)
    methods = [m for m in (*ANCHORS, *order) if m in by_method] + sorted(set(by_method) - set(order) - set(ANCHORS))
    where: dict[str, list[str]] = defaultdict(list)
    for method in methods:
        for label in sorted({trained_where(r) for r in by_method[method] if r.get("train")}):
            where[label].append(method)
    devices = "; ".join(f"{label}: {len(rows)} rows" + (f" ({', '.join(rows)})" if len(rows) <= 8 else "")
                        for label, rows in sorted(where.items(), key=lambda kv: -len(kv[1])))
    lines = [
        f"## {regime['title']}", "",
        f"What: {regime['what']}. Budget: {regime['max_steps']} steps, batch {regime['per_device_train_batch_size']}, "
        f"length {regime['max_seq_length']}, lr {regime['learning_rate']} ({regime['lr_scheduler_type']} decay"
        f"{'; `simcse_lr*` rows change only the learning rate' if any('_lr' in m for m in methods) else ''}), "
        f"STS-B dev every {regime['eval_steps']} steps selects the "
        f"checkpoint; seeds {', '.join(map(str, regime['seeds']))}. Trained on (device, precision, from the "
        f"results records; the 'trained on' column says it per row): {devices or '-'}. "
        f"{avg} = mean of {', '.join(TABLE_NAMES.get(t, t) for t in tasks)} (test, Spearman x 100).", "",
        "| method | seeds | trained on | " + " | ".join(TABLE_NAMES.get(t, t) for t in tasks)
        + f" | {avg} | STS-B dev (sel.) | dev before -> after | align | uniform |",
        "|---|---|---|" + "---|" * (len(tasks) + 5),
    ]
    points = []
    for method in methods:
        runs = by_method[method]
        seeds = len([r for r in runs if r["seed"] is not None])
        row = [f"**{ANCHORS[method]}**" if method in ANCHORS else method, str(seeds) if seeds else "–",
               " / ".join(sorted({trained_where(r) for r in runs}))]
        row += [fmt([r["results"].score(t) for r in runs if r["results"].score(t) is not None]) for t in tasks]
        avgs = [a for a in (average(r, tasks) for r in runs) if a is not None]
        row.append(fmt(avgs))
        row.append(fmt([r["train"]["best_stsb_dev"] for r in runs if r["train"].get("best_stsb_dev") is not None]))
        devs = [r["train"]["dev"] for r in runs if r["train"].get("dev")]
        before, after = (statistics.fmean(d[k] for d in devs) if devs else None for k in ("before", "after"))
        row.append(f"{before:.2f} -> {after:.2f}" if devs else "–")
        aligns = [r["results"].alignment for r in runs if r["results"].alignment is not None]
        unifs = [r["results"].uniformity for r in runs if r["results"].uniformity is not None]
        row += [f"{statistics.fmean(v):.3f}" if v else "–" for v in (aligns, unifs)]
        lines.append("| " + " | ".join(row) + " |")
        if aligns and unifs and avgs:
            points.append((method, statistics.fmean(aligns), statistics.fmean(unifs), statistics.fmean(avgs)))
    simcse = [average(r, tasks) for r in by_method.get("simcse", [])]
    noise = statistics.stdev(simcse) if len(simcse) > 1 else 0.0
    trained = [c for c in cells if c.get("train")]
    hours: dict[str, list[float]] = defaultdict(list)
    for cell in trained:
        hours[trained_where(cell).split(",")[0]].append(cell.get("wall_seconds", 0) / 3600)
    lines += ["", f"{len(trained)} trained cells, {sum(map(sum, hours.values())):.2f} hours of cell wall time ("
              + "; ".join(f"{device}: {len(h)} cells, {sum(h):.2f} h" for device, h in hours.items())
              + "; cells ran side by side, so wall time is not device time). "
              f"The noise scale is SimCSE's own seed-to-seed std of {avg}, {noise:.2f}.", ""]
    for anchor in ANCHORS:
        if anchor in by_method:
            lines += [f"{avg} minus the **{ANCHORS[anchor]}** row ({average(by_method[anchor][0], tasks):.2f}):",
                      *comparison(by_method, methods, tasks, anchor, noise), ""]
    if "simcse" in by_method:
        # SimCSE's training wherever a config repeats it (simcse_dims...): each row is compared with the SimCSE
        # cell of its own seed trained on the same device and precision (the device alone moves the average)
        same = {json.dumps([c.get("config"), c.get("budget")], sort_keys=True) for c in by_method["simcse"]}
        simcse_cells = [c for c in [c for m in methods if m not in ANCHORS for c in by_method[m]] + twins
                        if json.dumps([c.get("config"), c.get("budget")], sort_keys=True) in same]
        named = sorted({c["method"] + (f" ({c['precision']} twins)" if c in twins else "") for c in simcse_cells})
        lines += [f"{avg} minus SimCSE's at the same seed, trained on the same device and precision (the SimCSE "
                  f"training of rows {', '.join(named)}):",
                  *comparison({**by_method, "simcse": simcse_cells}, methods, tasks, "simcse", noise,
                              key=lambda cell: (cell["seed"], trained_where(cell))), ""]
    if dims_rows:
        lines += dimension_section(dims_rows, tasks, avg)
    return lines, points, avg


def dimension_average(cell: dict, dim: str, tasks: list[str]) -> float | None:
    """The mean over the regime's tasks of the embeddings cut to their first ``dim`` coordinates."""
    scores = ((cell["results"].dimensions or {}).get(dim) or {}).get("sts") or {}
    values = [scores.get(t) for t in tasks]
    return statistics.fmean(values) if all(isinstance(v, (int, float)) for v in values) else None


def dimension_section(by_method: dict, tasks: list[str], avg: str) -> list[str]:
    """The table by embedding dimension (run_eval --truncate_dims) and, under it, each trained row against the
    untrained encoder cut the same way, and the Matryoshka rows against the plain SimCSE ones at the same seed."""
    dims = sorted({d for runs in by_method.values() for r in runs for d in (r["results"].dimensions or {})},
                  key=int, reverse=True)
    methods = [DIMS_ANCHOR] * (DIMS_ANCHOR in by_method) + [m for m in by_method if m != DIMS_ANCHOR]
    plain = next((m for m in methods if m != DIMS_ANCHOR and not by_method[m][0]["config"].get("matryoshka_dims")),
                 None)
    label = {DIMS_ANCHOR: f"**{ANCHORS['untrained_own']}**"}
    lines = [f"### {avg} by dimension", "",
             f"The embeddings cut to their first d coordinates (`run_eval.py --truncate_dims`, as "
             f"`SentenceTransformer(folder, truncate_dim=d)` serves them), {avg} at each d; mean ± std over seeds. "
             "Rows with `matryoshka_dims` in their config were trained on every prefix (Matryoshka); the others "
             "are plain training scored the same way.", "",
             "| method | seeds | trained on | " + " | ".join(dims) + " |", "|---|---|---|" + "---|" * len(dims)]
    for method in methods:
        runs = by_method[method]
        seeds = len([r for r in runs if r["seed"] is not None])
        lines.append("| " + " | ".join([label.get(method, method), str(seeds) if seeds else "–",
                                         " / ".join(sorted({trained_where(r) for r in runs}))]
                                        + [fmt([v for r in runs if (v := dimension_average(r, d, tasks)) is not None])
                                           for d in dims]) + " |")
    for d in dims:
        value = (lambda cell, d=d: dimension_average(cell, d, tasks))
        noise_runs = [v for r in by_method.get(plain, []) if (v := value(r)) is not None]
        noise = statistics.stdev(noise_runs) if len(noise_runs) > 1 else 0.0
        lines += ["", f"At {d} dimensions, noise = the {plain} row's seed-to-seed std there ({noise:.2f}).",
                  f"{avg} minus the **untrained encoder cut to {d}** "
                  f"({value(by_method[DIMS_ANCHOR][0]):.2f}):" if DIMS_ANCHOR in by_method else "",
                  *(comparison(by_method, methods, tasks, DIMS_ANCHOR, noise, value)
                    if DIMS_ANCHOR in by_method else [])]
        if plain:
            lines += [f"{avg} minus {plain}'s at the same seed, both cut to {d}:",
                      *comparison(by_method, methods, tasks, plain, noise, value)]
    return [line for line in lines if not line.endswith(": none")] + [""]  # only the groups that have rows


def loss_form_notes() -> list[str]:
    """The configs that pin a loss form other than today's default (``about.loss_form``: the form their rows ran,
    the default of their time), so that the tables say which form each such row trained."""
    forms = {p.stem: json.loads(p.read_text())["about"].get("loss_form")
             for p in sorted((HERE / "configs").glob("*.json"))}
    forms = {name: form for name, form in forms.items() if form}
    if not forms:
        return []
    return ["Rows that ran a loss form other than today's default (their configs pin it, so a rerun trains the same): "
            + "; ".join(f"`{name}`: {form}" for name, form in forms.items()) + ".", ""]


def main() -> None:
    order = json.loads((HERE / "order.json").read_text())
    lines = [
        "# Comparison tables: every method on one small testbed, in three regimes", "",
        "The packaged all-MiniLM-L6-v2 is already trained for sentence similarity (on a billion pairs), so the first "
        "question is whether a method makes it better at all: every table leads with the untrained encoder scored the "
        "same way, and the lists under it say which methods beat it beyond the noise and which do not. "
        "It is NOT a reproduction of the papers' BERT-base numbers (raw masked-LM encoders, 1M sentences). "
        "Made by `python experiments/make_table.py` from `experiments/results/<regime>/`; how each regime was run, "
        "its budget and the command: [README.md](README.md).", "",
        *loss_form_notes(),
    ]
    all_points = {}
    for name in REGIMES:
        cells = [json.loads(p.read_text()) for p in sorted((HERE / "results" / name).glob("*.json"))
                 if p.name != "corpus.json"]
        # bf16 and padding-free / padded twins (benchmarks/README.md) are no rows; SimCSE's precision twins are its
        # training on another precision, which rows trained in that precision are compared with
        twins = [c for c in cells if c.get("precision", "fp32") not in ("fp32", "auto") and not c.get("layout")]
        cells = [c for c in cells if c.get("precision", "fp32") in ("fp32", "auto") and not c.get("layout")]
        if not cells:
            continue
        section, points, avg = regime_section(name, cells, order, twins)
        lines += section
        all_points[name] = points, avg
    if (HERE / "SUPERVISED.md").is_file():  # written by hand from its own runs, not from results/
        lines += ["Supervised training on SICK (anchor, entailment, contradiction) triplets under the [CLS] regime's "
                  "budget: [SUPERVISED.md](SUPERVISED.md).", ""]
    (HERE / "RESULTS.md").write_text("\n".join(lines))
    print("\n".join(lines))
    for name, (points, avg) in all_points.items():
        if points:
            plot(points, HERE / f"align_uniform_{name}.png", REGIMES[name]["title"], avg)


def plot(points, path: Path, title: str, avg_label: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 5.5))
    sc = ax.scatter([p[2] for p in points], [p[1] for p in points], c=[p[3] for p in points], cmap="viridis", s=40)
    for name, align, unif, _ in points:
        ax.annotate(name, (unif, align), fontsize=7, xytext=(3, 3), textcoords="offset points")
    fig.colorbar(sc, label=f"{avg_label} (Spearman x 100)")
    ax.set_xlabel("uniformity (lower is better)")
    ax.set_ylabel("alignment (lower is better)")
    ax.set_title(f"Alignment vs uniformity on STS-B: {title.split(':')[0]}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=130)


if __name__ == "__main__":
    main()
