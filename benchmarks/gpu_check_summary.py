"""The GPU check's summary (``gpu_check.py`` writes it): the headline numbers of every part, issue 37's targets with
their measured values, the ratios between runs, and the same as Markdown."""

from __future__ import annotations

import json
from pathlib import Path

from bench_limit_common import fraction_of_peak
from gpu_check_plan import RUN_PARTS, SCRIPT_PARTS


def host_and_idle(prof: dict) -> str:
    """Where the device waited in a profiled window, and how fast the host got through its steps (near the window's
    step time: bound by the host; well under it: the host ran ahead)."""
    idle, host = prof.get("idle") or {}, prof.get("host_ms_per_step")
    if not idle or host is None:
        return ""
    return (f"; host {host:.2f} ms a step of the window's {prof['window_ms_per_step']:.2f}; device idle "
            f"{idle['before_first_kernel_ms']:.2f} ms before its first kernel, {idle['between_kernels_ms']:.2f} ms "
            f"between kernels ({idle['gaps_over_100us']} gaps over 100 us), {idle['after_last_kernel_ms']:.2f} ms "
            "after the last")


def summarize_results(out: Path, statuses: dict) -> dict:
    """The headline numbers: hf_cse / sentence-transformers, compile on / off, attention, and each step's model
    TFLOP/s as a fraction of the measured bf16 GEMM peak."""
    read = lambda name: json.loads((out / name).read_text()) if (out / name).is_file() else {}  # noqa: E731
    peak = read("peak.json").get("gemm", {}).get("bf16", {}).get("peak_tflops")
    rows = []
    for part in RUN_PARTS:
        by_name: dict[str, list[dict]] = {}
        for run in read(f"{part}.json").get("runs", []):
            by_name.setdefault(run["name"], []).append(run)
        for name, runs in by_name.items():
            ok = [r for r in runs if r.get("status") == "ok"]
            row = {"part": part, "run": name, "status": "ok" if ok else runs[0].get("status")}
            if ok:
                step = sum(r["step_s"] * r["window_steps"] for r in ok) / sum(r["window_steps"] for r in ok)
                row.update(step_ms=step * 1e3, sentences_per_s=ok[0]["batch_size"] / step,
                           attention=ok[0].get("attention_in_use"), warmup_s=ok[0].get("warmup_s"),
                           step_path=("graphs" if ok[0].get("graph_step", {}).get("replays") else "eager")
                           if ok[0]["framework"] == "hf_cse" else "",
                           replay_ms=ok[0].get("graph_step", {}).get("replay_ms"))
                if ok[0].get("model_flops"):
                    row["model_tflops"] = ok[0]["model_flops"] / step / 1e12
                if isinstance(ok[0].get("profile"), dict) and ok[0]["profile"].get("status") == "ok":
                    prof = ok[0]["profile"]
                    row["profile"] = {k: prof.get(k) for k in ("device_busy_fraction", "kernel_ms_per_step",
                                                               "kernels_per_step", "by_kind_ms_per_step",
                                                               "window_ms_per_step", "host_ms_per_step", "idle")}
                if peak and ok[0].get("model_flops"):
                    row["fraction_of_bf16_peak"] = fraction_of_peak(ok[0]["model_flops"], step, peak)[
                        "fraction_of_peak"]
            rows.append(row)
    speed = {(r["part"], r["run"]): r.get("sentences_per_s") for r in rows}
    ratio = lambda a, b: speed[a] / speed[b] if speed.get(a) and speed.get(b) else None  # noqa: E731
    ratios = {
        "hf_cse / st, b64": ratio(("throughput", "hf_cse b64"), ("throughput", "st b64")),
        "hf_cse eager / st, b64": ratio(("throughput", "hf_cse b64 eager"), ("throughput", "st b64")),
        "graph step / eager, b64": ratio(("throughput", "hf_cse b64"), ("throughput", "hf_cse b64 eager")),
        "optimizer graph / eager optimizer, b64": ratio(("throughput", "hf_cse b64"),
                                                        ("throughput", "hf_cse b64 eager optimizer")),
        "graph step / eager, b256": ratio(("scale", "hf_cse b256"), ("scale", "hf_cse b256 eager")),
        "graph step / eager, b1024": ratio(("scale", "hf_cse b1024"), ("scale", "hf_cse b1024 eager")),
        "cached b512 / plain b512": ratio(("throughput", "hf_cse b512 cached64"), ("throughput", "hf_cse b512")),
        "hf_cse / st, b512 cached": ratio(("throughput", "hf_cse b512 cached64"), ("throughput", "st b512 cached64")),
        "compile + graph step / graph step, b64": ratio(("compile", "hf_cse b64 torch.compile + graph step"),
                                                        ("throughput", "hf_cse b64")),
        "compile + graph step / graph step, b1024": ratio(("compile", "hf_cse b1024 torch.compile + graph step"),
                                                          ("scale", "hf_cse b1024")),
        # hf_cse's attention (its matmul rule for short sentences) against SDPA and transformers' eager attention
        **{f"hf_cse's attention / {short}, compiled b{n}": ratio(
            ("compile", f"hf_cse b{n} torch.compile + graph step"),
            ("compile", f"hf_cse b{n} torch.compile + graph step, {variant}"))
           for short, variant in (("SDPA", "SDPA (the matmul rule off)"), ("eager attention", "eager attention"))
           for n in (64, 1024)},
        "compile + graph step / graph step, b512": ratio(("compile512", "hf_cse b512 torch.compile + graph step"),
                                                         ("throughput", "hf_cse b512")),
        "cached b512 / plain b512, both compiled": ratio(
            ("compile512", "hf_cse b512 cached64 torch.compile + graph step"),
            ("compile512", "hf_cse b512 torch.compile + graph step")),
        "reduce-overhead / eager, b64 natural": ratio(("graphs", "hf_cse b64 natural reduce-overhead"),
                                                       ("graphs", "hf_cse b64 natural eager-mode")),
        "reduce-overhead / eager, b256": ratio(("graphs", "hf_cse b256 full reduce-overhead"),
                                               ("graphs", "hf_cse b256 full eager-mode")),
        "padding-free / padded, b64": ratio(("padding", "hf_cse b64 padding-free"), ("padding", "hf_cse b64 padded")),
        "padding-free / padded, b1024": ratio(("padding", "hf_cse b1024 padding-free"),
                                              ("padding", "hf_cse b1024 padded")),
        "eager / sdpa": ratio(("attention", "hf_cse b64 eager"), ("attention", "hf_cse b64 sdpa")),
        "flash_attention_2 / sdpa": ratio(("attention", "hf_cse b64 flash_attention_2"),
                                          ("attention", "hf_cse b64 sdpa"))}
    fraction = {(r["part"], r["run"]): r.get("fraction_of_bf16_peak") for r in rows}
    # issue 37's targets, each with the measured value (None: not measured in this run)
    targets = {name: {"value": value, "target": goal, "met": None if value is None else value >= goal}
               for name, value, goal in (
                   ("b64 step, fraction of the bf16 peak", fraction.get(("throughput", "hf_cse b64")), 0.30),
                   ("b1024 step, fraction of the bf16 peak", fraction.get(("scale", "hf_cse b1024")), 0.45),
                   ("b64 step compiled, fraction of the bf16 peak",
                    fraction.get(("compile", "hf_cse b64 torch.compile + graph step")), 0.30),
                   ("b1024 step compiled, fraction of the bf16 peak",
                    fraction.get(("compile", "hf_cse b1024 torch.compile + graph step")), 0.45),
                   ("cached b512 / plain b512", ratios["cached b512 / plain b512"], 0.70),
                   ("cached b512 / plain b512, both compiled", ratios["cached b512 / plain b512, both compiled"],
                    0.70),
                   ("hf_cse / st, b64", ratios["hf_cse / st, b64"], 4.0))}
    scripted = {part: scripted_headline(read(f"{part}.json")) for part in SCRIPT_PARTS if read(f"{part}.json")}
    recipe = scripted.get("recipe", {})
    minutes = recipe.get("total_min") or recipe.get("projection_min")
    # the one target where less is better: the whole recipe in under 5 minutes (measured, else projected)
    targets["recipe, minutes" + (" (projected)" if minutes and not recipe.get("total_min") else "")] = {
        "value": minutes, "target": 5.0, "met": None if minutes is None else minutes < 5.0, "less_is_better": True}
    return {"parts": statuses, "bf16_peak_tflops": peak, "runs": rows, "ratios": ratios, "targets": targets,
            "scripted": scripted}


def scripted_headline(rec: dict) -> dict:
    """The numbers of a scripted part's JSON (gpu_recipe.py / gpu_engines.py) that the summary shows."""
    if rec.get("part") == "recipe":
        dev, saves, proj = rec.get("dev", {}), rec.get("saves", {}), rec.get("projection") or {}
        return {"status": rec.get("status"), "steps": rec.get("run", {}).get("steps_done"),
                "parts_s": {k: round(v, 1) for k, v in rec.get("parts", {}).items()},
                "dev": {"count": dev.get("count"), "first_s": dev.get("first_s"),
                        "mean_s_after_the_first": dev.get("mean_s_after_the_first"),
                        "tokenized_once": dev.get("tokenized_once")},
                "saves": {"count": saves.get("count"), "mean_s": saves.get("mean_s")},
                "projection_min": proj.get("total_min"),
                "total_min": (rec["parts"]["total_s"] / 60 if rec.get("run", {}).get("steps_done") == 15_625
                              and rec.get("parts", {}).get("total_s") else None),
                "checks_ok": all(
                    (c.get("ok") if isinstance(c, dict) else c) is not False for c in rec.get("checks", {}).values())}
    engines = rec.get("engines", {})
    return {"status": rec.get("status"), "engines": {
        name: {"status": e.get("status"), "losses_vs_plain": e.get("losses_vs_plain"),
               "resume": e["resume"].get("status") if isinstance(e.get("resume"), dict) else e.get("resume"),
               "export_ok": (e.get("export") or {}).get("ok")} for name, e in engines.items()}}


def summary_markdown(summary: dict, env: dict) -> str:
    fmt = lambda v, spec: "" if v is None else format(v, spec)  # noqa: E731
    lines = [f"GPU: {env.get('nvidia_smi') or 'none'}; torch {env['versions'].get('torch')}, transformers "
             f"{env['versions'].get('transformers')}, sentence-transformers "
             f"{env['versions'].get('sentence-transformers')}; {env['date_utc']} UTC.", "",
             (f"Measured bf16 GEMM peak: {summary['bf16_peak_tflops']:.1f} TFLOP/s." if summary["bf16_peak_tflops"]
              else "bf16 GEMM peak: not measured (the peak part did not run)."), "",
             "| part | run | step | attention | step (ms) | fwd+bwd replay (ms) | sentences/s | model TFLOP/s | "
             "of bf16 peak | status |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in summary["runs"]:
        lines.append(f"| {r['part']} | {r['run']} | {r.get('step_path') or ''} | {r.get('attention') or ''} | "
                     f"{fmt(r.get('step_ms'), '.1f')} | {fmt(r.get('replay_ms'), '.1f')} | "
                     f"{fmt(r.get('sentences_per_s'), '.0f')} | {fmt(r.get('model_tflops'), '.1f')} | "
                     f"{fmt(r.get('fraction_of_bf16_peak'), '.1%')} | {r['status']} |")
    if summary.get("dry_run"):
        lines += ["", "Dry run (tiny encoder on the CPU, 1 step): these numbers only show that everything runs."]
    lines += ["", "Targets (issue 37): " + "; ".join(
        f"{k}: {fmt(t['value'], '.3f') or 'not measured'} (target {'< ' if t.get('less_is_better') else ''}"
        f"{t['target']}, "
        f"{'met' if t['met'] else 'not met' if t['met'] is not None else '-'})" for k, t in summary["targets"].items())]
    for r in summary["runs"]:
        if prof := r.get("profile"):
            kinds = ", ".join(f"{k} {v:.2f}" for k, v in prof["by_kind_ms_per_step"].items())
            lines += ["", f"Profile of {r['run']} ({r['part']}): device busy {prof['device_busy_fraction']:.0%} of "
                          f"the window, {prof['kernels_per_step']:.0f} kernels and {prof['kernel_ms_per_step']:.2f} "
                          f"ms of kernel time a step: {kinds} (ms a step)" + host_and_idle(prof)]
    for part, headline in summary.get("scripted", {}).items():
        lines += ["", f"{part}: {json.dumps(headline, default=str)}"]
    lines += ["", "Ratios (sentences/s): " + ", ".join(f"{k} = {v:.3f}" for k, v in summary["ratios"].items() if v),
              "", "Parts: " + ", ".join(f"{k} {v['status']} ({v['wall_s']:.0f} s)"
                                        for k, v in summary["parts"].items())]
    return "\n".join(lines) + "\n"
