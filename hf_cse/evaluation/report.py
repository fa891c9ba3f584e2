"""Writing results: ``results.json``, ``results.md``, the PNG plots (:mod:`.figures`) and the printout.

Every reader takes :class:`EvalResults` records; averages carry their labels (the papers' 7-task "STS Avg." /
"Transfer Avg." only when all seven tasks ran, otherwise named by their tasks: :func:`.results.average_label`).
Every file is written to a temporary name and renamed into place, so an interrupted write never leaves a
half-written ``results.json``; :func:`report_files` lists what an earlier evaluation left in a folder. While an
evaluation runs, the arrays of each model's STS-B plot are kept beside its results (``plot_data``,
:func:`read_plot_data`), so that finishing it after a stop draws the plot of a task finished before without encoding
it again.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Sequence

import numpy as np

from ..writing import json_safe, replace_atomically, write_json_atomic, write_text_atomic
from .data import STS_TASKS, TABLE_NAMES, TRANSFER_TASKS
from .dimensions import dimension_rows
from .figures import plot_alignment_uniformity, plot_cosine_buckets, plot_score_by_dimension, plot_task_comparison
from .mteb_tasks import MTEB_FOLDER_MARK
from .results import GEOMETRY_KEYS, RETRIEVAL_KEYS, EvalResults, model_labels, score_text, short_name
from .sts import format_sts_table
from .transfer import TRANSFER_MODE_WORDS, format_transfer_table


def report_files(folder) -> list[Path]:
    """The files and per-model folders a :func:`write_report` call left in ``folder`` (empty when none)."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    names = ("results.json", "results.md", "align_uniform.png", "task_comparison.png", "score_by_dimension.png")
    found = [folder / n for n in names if (folder / n).is_file()]
    found += [folder / "mteb"] if (folder / "mteb" / MTEB_FOLDER_MARK).is_file() else []
    found += sorted(folder.glob("stsb_cosine_buckets*.png")) + sorted(folder.glob(f".{BUCKET_PLOT}*.npz"))
    found += sorted(folder.glob(".*.partial-*"))
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


def remove_unfinished_writes(folder) -> None:
    """Delete the partial files of the writes a killed evaluation left unfinished (:func:`hf_cse.writing.partial_path`)
    in ``folder`` and its per-model folders."""
    folder = Path(folder)
    for path in [*folder.glob(".*.partial-*"), *folder.glob("model_*/.*.partial-*")]:
        path.unlink(missing_ok=True)


#: the STS-B plot's name (``_<i>`` after it for each of several models); its arrays: ``.<name>.npz`` while it runs
BUCKET_PLOT = "stsb_cosine_buckets"
_PLOT_ARRAYS = ("stsb_cosine", "stsb_gold")


def _bucket_name(index: int, combined: bool) -> str:
    return f"{BUCKET_PLOT}_{index}" if combined else BUCKET_PLOT


def _plot_data_path(folder, index: int, combined: bool) -> Path:
    return Path(folder) / f".{_bucket_name(index, combined)}.npz"


def read_plot_data(folder, index: int, combined: bool) -> dict:
    """The plot arrays of model ``index`` that :func:`write_report` kept (``plot_data``) in ``folder``: the ``extras``
    of that model's evaluation; empty when there are none (or they cannot be read)."""
    path = _plot_data_path(folder, index, combined)
    try:
        with np.load(path) as data:
            return {name: data[name] for name in _PLOT_ARRAYS}
    except (OSError, ValueError, KeyError):
        return {}


def remove_plot_data(folder) -> None:
    """Delete the plot arrays :func:`write_report` kept in ``folder`` (once the evaluation has finished)."""
    for path in Path(folder).glob(f".{BUCKET_PLOT}*.npz"):
        path.unlink(missing_ok=True)


def model_folder(output_dir, index: int, name: str, several: bool) -> Path:
    """Where one model's own files go: ``output_dir`` itself for one model, a sub-folder each when ``several``
    models are evaluated (also while only the first ones are done)."""
    if not several:
        return Path(output_dir)
    return Path(output_dir) / f"model_{index}_{short_name(name).replace('/', '_')}"


# --------------------------------------------------------------------------------------------- markdown
def _fmt(v) -> str:
    return "-" if v is None else f"{v:.2f}"


def _md_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def _avg_header(labels: dict[str, str]) -> tuple[str, list[str]]:
    """The average column's header from ``{model: its average's label}``, and a note under the table when the
    models' averages are over different tasks."""
    if len(set(labels.values())) == 1:
        return next(iter(labels.values())), []
    return "Avg (see below)", ["Averages: " + "; ".join(f"{n}: {lab}" for n, lab in labels.items()) + ".", ""]


def markdown_report(results: Sequence[EvalResults]) -> str:
    """Markdown tables of one or several models' results (papers' column order; labelled averages)."""
    out = ["# hf_cse evaluation", ""]
    names = model_labels(results)
    for n, r in zip(names, results):
        if r.unfinished_tasks:  # written while the evaluation runs; kept as is if it was interrupted
            out += [f"**{n}: not finished**: no results yet for {', '.join(r.unfinished_tasks)}.", ""]
    if any(r.sts for r in results):
        settings = results[0].settings or {}
        agg, mode = settings.get("sts_aggregation", "all"), settings.get("mode", "test")
        out += [
            f"## STS (Spearman x 100; STS12-16 '{agg}', STS-B/SICK-R {mode if mode == 'dev' else 'test'})",
            "",
        ]
        avg, notes = _avg_header({n: r.sts_avg_label for n, r in zip(names, results) if r.sts})
        header = ["model"] + [TABLE_NAMES[t] for t in STS_TASKS] + [avg]
        rows = [[n] + [_fmt(r.sts.get(t)) for t in STS_TASKS] + [_fmt(r.sts_avg)] for n, r in zip(names, results)]
        out += [_md_table(header, rows), "", *notes]
    if any(r.transfer for r in results):
        mode = (results[0].settings or {}).get("mode", "test")
        out += [f"## Transfer (accuracy x 100; {TRANSFER_MODE_WORDS.get(mode, mode)})", ""]
        avg, notes = _avg_header({n: r.transfer_avg_label for n, r in zip(names, results) if r.transfer})
        header = ["model"] + [TABLE_NAMES[t] for t in TRANSFER_TASKS] + [avg]
        rows = [[n] + [_fmt(r.transfer.get(t)) for t in TRANSFER_TASKS] + [_fmt(r.transfer_avg)]
                for n, r in zip(names, results)]
        out += [_md_table(header, rows), "", *notes]
    if any(r.alignment is not None or r.retrieval for r in results):
        out += ["## Geometry and retrieval (STS-B test)", ""]
        header = ["model", *GEOMETRY_KEYS, *RETRIEVAL_KEYS]
        rows = [[n, *(score_text(k, v) for k, v in _geometry_and_retrieval(r).items())] for n, r in zip(names, results)]
        out += [_md_table(header, rows), ""]
    out += _own_and_mteb_sections(names, results)
    out += _dimension_sections(names, results)
    for n, r in zip(names, results):
        sts_details = (r.details or {}).get("sts", {})
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
            json.dumps(json_safe(r.settings or {}), indent=2),
            "```",
            "",
        ]
    return "\n".join(out)


def _own_and_mteb_sections(names: Sequence[str], results: Sequence[EvalResults]) -> list[str]:
    """Tables of the user's own pairs (``eval_file``) and of MTEB tasks (``tasks`` ``mteb:...``)."""
    out: list[str] = []
    own = [(n, r.own_data) for n, r in zip(names, results) if r.own_data is not None]
    if own:
        out += ["## Your data (Spearman x 100 of cosine)", ""]
        rows = [[n, str(d.get("source")), str(d.get("pairs")), _fmt(v)]
                for n, d in own for k, v in d.items() if k.endswith("_spearman")]
        out += [_md_table(["model", "pairs from", "pairs", "Spearman"], rows), ""]
    tasks = list(dict.fromkeys(t for r in results for t in r.mteb or {}))
    if tasks:
        out += ["## MTEB (main score x 100; MTEB's own result files are in mteb/)", ""]
        rows = [[n] + [_fmt((r.mteb or {}).get(t)) for t in tasks] for n, r in zip(names, results)]
        out += [_md_table(["model"] + tasks, rows), ""]
    return out


def _dimension_sections(names: Sequence[str], results: Sequence[EvalResults]) -> list[str]:
    """One table per model evaluated with ``truncate_dims``: a row per dimension (the full embedding first)."""
    out: list[str] = []
    for n, r in zip(names, results):
        if not r.dimensions:
            continue
        full = {"sts": r.sts, "avg": r.sts_avg, "mteb": r.mteb}
        rows = dimension_rows((r.settings or {}).get("embedding_dim"), full, r.dimensions)
        columns = list(dict.fromkeys(c for _, cols in rows for c in cols))
        header = ["dimension"] + [r.sts_avg_label if c == "avg" else TABLE_NAMES.get(c, c) for c in columns]
        out += [f"## Score by embedding dimension: {n} (first d coordinates, as truncate_dim=d)", "",
                _md_table(header, [[label] + [_fmt(cols.get(c)) for c in columns] for label, cols in rows]), ""]
    return out


def _geometry_and_retrieval(r: EvalResults) -> dict[str, float | None]:
    """Alignment, uniformity, R@1, R@5, R@10 (None where not measured), in the order results.md and the printout show
    them."""
    return {"alignment": r.alignment, "uniformity": r.uniformity, **{k: r.retrieval.get(k) for k in RETRIEVAL_KEYS}}


# --------------------------------------------------------------------------------------------- printout
def summary_text(results: EvalResults, eval_name: str | None = None) -> str:
    """What ``run_eval.py`` prints for one model: the STS and transfer tables (labelled averages), geometry and
    retrieval, the user's own pairs (``<eval_name>_spearman``; every such score when ``eval_name`` is None), MTEB and
    the scores by embedding dimension (``truncate_dims``)."""
    lines = []
    if results.sts_avg is not None:
        lines.append(format_sts_table(results.to_dict()))
    if results.transfer_avg is not None:
        lines.append(format_transfer_table(results.to_dict()))
    lines += [f"{key}: {score_text(key, value)}" for key, value in _geometry_and_retrieval(results).items()
              if value is not None]
    own = {k: v for k, v in (results.own_data or {}).items()
           if k == f"{eval_name}_spearman" or eval_name is None and k.endswith("_spearman")}
    lines += [f"{key}: {value:.2f}" for key, value in own.items()]
    lines += [f"MTEB {task}: {score:.2f}" for task, score in (results.mteb or {}).items()]
    if results.dimensions:
        lines.append(_dimension_text(results))
    return "\n".join(lines)


def _dimension_text(r: EvalResults) -> str:
    """results.md's score-by-dimension table of one model as text: a row per dimension, the full size first."""
    rows = dimension_rows((r.settings or {}).get("embedding_dim"), {"sts": r.sts, "avg": r.sts_avg, "mteb": r.mteb},
                          r.dimensions or {})
    columns = list(dict.fromkeys(c for _, cols in rows for c in cols))
    header = [r.sts_avg_label if c == "avg" else TABLE_NAMES.get(c, c) for c in columns]
    first = max(9, *(len(label) for label, _ in rows))
    widths = [max(7, len(h)) for h in header]
    lines = ["dimension".ljust(first) + " " + " ".join(h.rjust(w) for h, w in zip(header, widths))]
    lines += [label.ljust(first) + " " + " ".join(_fmt(cols.get(c)).rjust(w) for c, w in zip(columns, widths))
              for label, cols in rows]
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------- all
def write_report(
    results: Sequence[EvalResults],
    output_dir,
    extras: Sequence[dict] | None = None,
    combined: bool | None = None,
    plots: bool = True,
    plot_data: bool = False,
) -> dict[str, Path]:
    """Write results.json, results.md and the plots into ``output_dir``; several models also get one
    sub-folder each. ``extras[i]`` may hold ``{"stsb_cosine": ..., "stsb_gold": ...}`` for the bucket plot.
    ``combined``: the several-models layout (``{"models": [...]}``), default when ``results`` has more than one;
    pass it to keep that layout while only the first models are done. ``plots=False`` writes the text files only
    (the quick update after each task). ``plot_data``: also keep the plots' arrays beside the results (hidden; read
    back by :func:`read_plot_data`), for an evaluation that may be stopped and finished later. Returns the written
    paths (the arrays not among them)."""
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    written: dict[str, Path] = {"results.json": out / "results.json"}  # listed first, written last (below)
    extras = list(extras or [])
    extras += [{}] * (len(results) - len(extras))
    if combined is None:
        combined = len(results) > 1
    # results.json last: until it is replaced, the folder's record is the previous (partial) one, so a kill while
    # the rest is written leaves results the same command finishes, never a finished record beside stale files
    record = results[0].to_dict() if not combined else {"models": [r.to_dict() for r in results]}
    if combined:
        for i, r in enumerate(results):
            sub = model_folder(out, i, r.model or str(i), several=True)
            written[f"model_{i}/results.json"] = write_json_atomic(sub / "results.json", r.to_dict())
    written["results.md"] = write_text_atomic(out / "results.md", markdown_report(results))
    if plots:
        _write_plots(results, extras, out, combined, written)
    for i, ex in enumerate(extras[:len(results)] if plot_data else []):
        if ex.get("stsb_cosine") is not None:
            arrays = {name: np.asarray(ex[name]) for name in _PLOT_ARRAYS}
            replace_atomically(_plot_data_path(out, i, combined), lambda partial: _save_arrays(partial, arrays))
    write_json_atomic(out / "results.json", record)
    return written


def _save_arrays(path: Path, arrays: dict) -> None:
    with open(path, "wb") as f:  # a file object: np.savez would add ".npz" to the partial file's name
        np.savez(f, **arrays)


def _write_plots(results: Sequence[EvalResults], extras: list[dict], out: Path, combined: bool,
                 written: dict[str, Path]) -> None:
    if len(results) > 1:
        comparison = plot_task_comparison(results, out / "task_comparison.png")
        if comparison is not None:
            written["task_comparison.png"] = comparison
    if any(r.dimensions for r in results):
        written["score_by_dimension.png"] = plot_score_by_dimension(results, out / "score_by_dimension.png")
    if any(r.alignment is not None for r in results):
        written["align_uniform.png"] = plot_alignment_uniformity(results, out / "align_uniform.png")
    for i, (label, ex) in enumerate(zip(model_labels(results), extras)):
        if ex.get("stsb_cosine") is not None:
            fname = f"{_bucket_name(i, combined)}.png"
            written[fname] = plot_cosine_buckets(ex["stsb_cosine"], ex["stsb_gold"], out / fname, title=label)
