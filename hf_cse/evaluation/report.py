"""Writing results: ``results.json``, ``results.md`` and PNG plots (matplotlib, Agg backend).

Plots:

* :func:`plot_alignment_uniformity`: one point per model in the (alignment, uniformity) plane, lower-left
  is better, coloured by the STS average when known (ImSimCSE Fig. 1 / SimCSE Fig. 2 style);
* :func:`plot_cosine_buckets`: distribution of the predicted cosine of STS-B pairs grouped by gold score
  (0-1, 1-2, 2-3, 3-4, 4-5; DiffCSE Fig. 2 style).

Every file is written to a temporary name and renamed into place, so an interrupted write never leaves a
half-written ``results.json``; :func:`report_files` lists what an earlier evaluation left in a folder.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Sequence

import numpy as np

from ..writing import json_safe, replace_atomically, write_json_atomic, write_text_atomic
from .data import STS_TASKS, TABLE_NAMES, TRANSFER_TASKS
from .mteb_tasks import MTEB_FOLDER_MARK

BUCKETS = ((0, 1), (1, 2), (2, 3), (3, 4), (4, 5))


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def report_files(folder) -> list[Path]:
    """The files and per-model folders a :func:`write_report` call left in ``folder`` (empty when none)."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    names = ("results.json", "results.md", "align_uniform.png", "task_comparison.png")
    found = [folder / n for n in names if (folder / n).is_file()]
    found += [folder / "mteb"] if (folder / "mteb" / MTEB_FOLDER_MARK).is_file() else []
    found += sorted(folder.glob("stsb_cosine_buckets*.png")) + sorted(folder.glob(".*.partial-*"))
    found += sorted(d for d in folder.glob("model_*") if d.is_dir() and (d / "results.json").is_file())
    return found


def remove_report_files(folder) -> list[Path]:
    """Delete what :func:`report_files` lists (a per-model folder only when nothing else is in it)."""
    removed = report_files(folder)
    for path in removed:
        if path.name == "mteb":  # MTEB's result files of an earlier run_eval (marked by run_mteb_tasks)
            shutil.rmtree(path)
        elif path.is_dir():
            (path / "results.json").unlink()
            if (path / "mteb" / MTEB_FOLDER_MARK).is_file():
                shutil.rmtree(path / "mteb")
            if not any(path.iterdir()):
                shutil.rmtree(path)
        else:
            path.unlink()
    return removed


def model_folder(output_dir, index: int, name: str, several: bool) -> Path:
    """Where one model's own files go: ``output_dir`` itself for one model, a sub-folder each when ``several``
    models are evaluated (also while only the first ones are done)."""
    if not several:
        return Path(output_dir)
    return Path(output_dir) / f"model_{index}_{short_name(name).replace('/', '_')}"


def short_name(name: str) -> str:
    """A readable label for a model path (last two path parts)."""
    parts = [p for p in str(name).replace("\\", "/").split("/") if p]
    if len(parts) >= 2 and parts[-1] in ("model", "best", "final"):
        return "/".join(parts[-2:])
    return parts[-1] if parts else str(name)


# --------------------------------------------------------------------------------------------- markdown
def _fmt(v, digits=2) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def _md_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def markdown_report(results: Sequence[dict]) -> str:
    """Markdown tables of one or several models' results (papers' column order)."""
    out = ["# hf_cse evaluation", ""]
    names = [short_name(r.get("model", "?")) for r in results]
    for n, r in zip(names, results):
        if r.get("unfinished_tasks"):  # written while the evaluation runs; kept as is if it was interrupted
            out += [f"**{n}: not finished**: no results yet for {', '.join(r['unfinished_tasks'])}.", ""]
    if any(t in r for r in results for t in STS_TASKS):
        agg = results[0].get("settings", {}).get("sts_aggregation", "all")
        mode = results[0].get("settings", {}).get("mode", "test")
        out += [
            f"## STS (Spearman x 100; STS12-16 '{agg}', STS-B/SICK-R {mode if mode == 'dev' else 'test'})",
            "",
        ]
        header = ["model"] + [TABLE_NAMES[t] for t in STS_TASKS] + ["Avg"]
        rows = [
            [n] + [_fmt(r.get(t)) for t in STS_TASKS] + [_fmt(r.get("avg"))] for n, r in zip(names, results)
        ]
        out += [_md_table(header, rows), ""]
    if any(t in r for r in results for t in TRANSFER_TASKS):
        out += ["## Transfer (accuracy x 100)", ""]
        header = ["model", "MR", "CR", "SUBJ", "MPQA", "SST", "TREC", "MRPC", "Avg"]
        rows = [
            [n] + [_fmt(r.get(t)) for t in TRANSFER_TASKS] + [_fmt(r.get("transfer_avg"))]
            for n, r in zip(names, results)
        ]
        out += [_md_table(header, rows), ""]
    if any("alignment" in r or "R@1" in r for r in results):
        out += ["## Geometry and retrieval (STS-B test)", ""]
        header = ["model", "alignment", "uniformity", "R@1", "R@5", "R@10"]
        rows = [
            [n, _fmt(r.get("alignment"), 4), _fmt(r.get("uniformity"), 4)]
            + [_fmt(r.get(k)) for k in ("R@1", "R@5", "R@10")]
            for n, r in zip(names, results)
        ]
        out += [_md_table(header, rows), ""]
    out += _own_and_mteb_sections(names, results)
    for n, r in zip(names, results):
        sts_details = r.get("details", {}).get("sts", {})
        if sts_details:
            out += [f"## STS subsets: {n}", ""]
            rows = []
            for task, d in sts_details.items():
                for sub, v in d["subsets"].items():
                    rows.append([task, sub, str(v["n"]), _fmt(v["spearman"]), _fmt(v["pearson"])])
                if len(d["subsets"]) > 1:
                    total = str(sum(v["n"] for v in d["subsets"].values()))
                    rows += [[task, f"*{agg}*", total, _fmt(d[agg]), ""] for agg in ("all", "wmean", "mean")]
            out += [_md_table(["task", "subset", "pairs", "Spearman", "Pearson"], rows), ""]
        out += [
            f"## Settings: {n}",
            "",
            "```json",
            json.dumps(json_safe(r.get("settings", {})), indent=2),
            "```",
            "",
        ]
    return "\n".join(out)


def _own_and_mteb_sections(names: Sequence[str], results: Sequence[dict]) -> list[str]:
    """Tables of the user's own pairs (``--eval_file``) and of MTEB tasks (``--tasks mteb:...``)."""
    out: list[str] = []
    own = [(n, r["own_data"]) for n, r in zip(names, results) if "own_data" in r]
    if own:
        out += ["## Your data (Spearman x 100 of cosine)", ""]
        rows = [[n, str(d.get("source")), str(d.get("pairs")), _fmt(v)]
                for n, d in own for k, v in d.items() if k.endswith("_spearman")]
        out += [_md_table(["model", "pairs from", "pairs", "Spearman"], rows), ""]
    tasks = list(dict.fromkeys(t for r in results for t in r.get("mteb", {})))
    if tasks:
        out += ["## MTEB (main score x 100; MTEB's own result files are in mteb/)", ""]
        rows = [[n] + [_fmt(r.get("mteb", {}).get(t)) for t in tasks] for n, r in zip(names, results)]
        out += [_md_table(["model"] + tasks, rows), ""]
    return out


# --------------------------------------------------------------------------------------------- plots
def plot_alignment_uniformity(results: Sequence[dict], path, labels: Sequence[str] | None = None, title=None):
    """Scatter of (alignment, uniformity) for several result dicts (those without both are skipped)."""
    plt = _pyplot()
    pts = [(r, lab) for r, lab in zip(results, labels or [short_name(r.get("model", "?")) for r in results])]
    pts = [(r, lab) for r, lab in pts if r.get("alignment") is not None and r.get("uniformity") is not None]
    if not pts:
        raise ValueError("No result has both alignment and uniformity.")
    fig, ax = plt.subplots(figsize=(5.5, 4.5))
    xs = np.array([r["alignment"] for r, _ in pts])
    ys = np.array([r["uniformity"] for r, _ in pts])
    colour = [r.get("avg") for r, _ in pts]
    if all(c is not None for c in colour):
        sc = ax.scatter(xs, ys, c=colour, cmap="viridis", s=70, edgecolors="black", zorder=3)
        fig.colorbar(sc, ax=ax, label="STS avg (Spearman x 100)")
    else:
        ax.scatter(xs, ys, s=70, edgecolors="black", zorder=3)
    for (_, lab), x, y in zip(pts, xs, ys):
        ax.annotate(lab, (x, y), textcoords="offset points", xytext=(6, 4), fontsize=8)
    pad_x = max(0.01, 0.15 * (xs.max() - xs.min()))
    pad_y = max(0.05, 0.15 * (ys.max() - ys.min()))
    ax.set_xlim(xs.min() - pad_x, xs.max() + 2 * pad_x)
    ax.set_ylim(ys.min() - pad_y, ys.max() + pad_y)
    ax.set_xlabel(r"$\ell_{align}$ (lower is better)")
    ax.set_ylabel(r"$\ell_{uniform}$ (lower is better)")
    ax.set_title(title or "Alignment vs uniformity (STS-B)")
    ax.grid(alpha=0.3)
    return _save(fig, plt, path)


def _save(fig, plt, path) -> Path:
    fig.tight_layout()
    try:
        return replace_atomically(path, lambda partial: fig.savefig(partial, dpi=120, format="png"))
    finally:
        plt.close(fig)


def bucket_of(gold: np.ndarray) -> np.ndarray:
    """Index of the gold-score bucket 0-1, 1-2, 2-3, 3-4, 4-5 (5.0 falls in 4-5)."""
    return np.clip(np.floor(np.asarray(gold, dtype=np.float64)), 0, len(BUCKETS) - 1).astype(int)


def plot_cosine_buckets(cosine: np.ndarray, gold: np.ndarray, path, title: str | None = None):
    """Histograms of predicted cosine similarity per gold-score bucket, one row per bucket."""
    plt = _pyplot()
    cosine = np.asarray(cosine, dtype=np.float64)
    buckets = bucket_of(gold)
    lo = min(0.0, float(np.floor(cosine.min() * 10) / 10)) if len(cosine) else 0.0
    bins = np.linspace(lo, 1.0, 41)
    fig, axes = plt.subplots(len(BUCKETS), 1, figsize=(5.5, 6), sharex=True)
    for i, (ax, (a, b)) in enumerate(zip(axes[::-1], BUCKETS)):
        vals = cosine[buckets == i]
        ax.hist(
            vals, bins=bins, color=plt.cm.viridis(i / (len(BUCKETS) - 1)), alpha=0.85, density=len(vals) > 0
        )
        ax.set_ylabel(f"{a}-{b}", rotation=0, labelpad=18, va="center")
        ax.set_yticks([])
        if len(vals):
            ax.axvline(vals.mean(), color="black", lw=1, ls="--")
        ax.text(0.01, 0.75, f"n={len(vals)}", transform=ax.transAxes, fontsize=7)
    axes[-1].set_xlabel("cosine similarity")
    fig.suptitle(title or "STS-B cosine similarity by gold score")
    return _save(fig, plt, path)


# --------------------------------------------------------------------------------------------- all
def write_report(
    results: Sequence[dict],
    output_dir,
    extras: Sequence[dict] | None = None,
    combined: bool | None = None,
    plots: bool = True,
) -> dict[str, Path]:
    """Write results.json, results.md and the plots into ``output_dir``; several models also get one
    sub-folder each. ``extras[i]`` may hold ``{"stsb_cosine": ..., "stsb_gold": ...}`` for the bucket plot.
    ``combined``: the several-models layout (``{"models": [...]}``), default when ``results`` has more than one;
    pass it to keep that layout while only the first models are done. ``plots=False`` writes the text files only
    (the quick update after each task). Returns the written paths."""
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    written: dict[str, Path] = {}
    extras = list(extras or [])
    extras += [{}] * (len(results) - len(extras))
    if combined is None:
        combined = len(results) > 1
    if not combined:
        written["results.json"] = write_json_atomic(out / "results.json", results[0])
    else:
        written["results.json"] = write_json_atomic(out / "results.json", {"models": list(results)})
        for i, r in enumerate(results):
            sub = model_folder(out, i, r.get("model", str(i)), several=True)
            written[f"model_{i}/results.json"] = write_json_atomic(sub / "results.json", r)
    written["results.md"] = write_text_atomic(out / "results.md", markdown_report(results))
    if not plots:
        return written
    if len(results) > 1:
        from ..plots import plot_task_comparison

        comparison = plot_task_comparison(results, out / "task_comparison.png")
        if comparison is not None:
            written["task_comparison.png"] = comparison
    if any(r.get("alignment") is not None for r in results):
        written["align_uniform.png"] = plot_alignment_uniformity(results, out / "align_uniform.png")
    for i, (r, ex) in enumerate(zip(results, extras)):
        if ex.get("stsb_cosine") is not None:
            fname = f"stsb_cosine_buckets_{i}.png" if combined else "stsb_cosine_buckets.png"
            written[fname] = plot_cosine_buckets(
                ex["stsb_cosine"], ex["stsb_gold"], out / fname, title=f"{short_name(r.get('model', ''))}"
            )
    return written
