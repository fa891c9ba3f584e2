#!/usr/bin/env python
"""How long the commands take to answer what needs no model (``--help``, ``config``, the refusals of bad flags and
paths), in two checkouts side by side (issue 38: "commands that answer at once").

    git worktree add /tmp/before <commit>          # or any other checkout, e.g. the main one
    python benchmarks/bench_cli_start.py --before /tmp/before --runs 3

Each command runs in a fresh process (``subprocess`` wall time, 1 torch thread, offline), the checkouts
interleaved run by run so that a load change hits both; the table shows the median of ``--runs`` runs per
checkout and before / after. The console scripts (``hf-cse-train`` ...) run as pip's wrappers do: the function
each checkout's ``setup.cfg`` names for them, with ``sys.argv[0]`` set to the script's name.

For each command each checkout gets a cache folder of its own (``HF_CSE_CACHE``: the parsers
``hf_cse.cli.parser_cache`` writes down), empty at first: its first start, a fresh install's (answered from the parser
descriptions shipped in ``hf_cse/cli/parsers`` where the checkout has valid ones), is timed apart ("first start"),
the median is over the later ones ("later"). Each command's exit code is checked to agree between
the checkouts, and "same answer" says whether the output is the same text.
"""

from __future__ import annotations

import argparse
import configparser
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
MISSING = "/nonexistent/hf_cse_bench"  # a path that names nothing


def console_script(checkout: Path, name: str) -> list[str]:
    """The command line of console script ``name`` as pip's wrapper runs it, from the checkout's setup.cfg."""
    cfg = configparser.ConfigParser()
    cfg.read(checkout / "setup.cfg")
    targets = dict(line.split(" = ") for line in cfg["options.entry_points"]["console_scripts"].split("\n") if line)
    module, function = targets[name].split(":")
    code = f"import sys; from {module} import {function}; sys.argv[0] = {name!r}; sys.exit({function}())"
    return [sys.executable, "-c", code]


def commands(checkout: Path, notes: Path) -> dict[str, list[str]]:
    """What is timed: label -> command line in ``checkout``."""
    py = [sys.executable]
    train, evaluate = [*py, str(checkout / "run_unsup.py")], [*py, str(checkout / "run_eval.py")]
    return {
        "python -m hf_cse --help": [*py, "-m", "hf_cse", "--help"],
        "python -m hf_cse config cpu_2proc": [*py, "-m", "hf_cse", "config", "cpu_2proc"],
        "run_unsup.py --help": [*train, "--help"],
        "run_eval.py --help": [*evaluate, "--help"],
        "hf-cse-train --help": [*console_script(checkout, "hf-cse-train"), "--help"],
        "hf-cse-eval --help": [*console_script(checkout, "hf-cse-eval"), "--help"],
        "hf-cse-export --help": [*console_script(checkout, "hf-cse-export"), "--help"],
        "python -m hf_cse train --help": [*py, "-m", "hf_cse", "train", "--help"],
        "run_unsup.py --train_file MISSING": [*train, "--train_file", f"{MISSING}.txt"],
        "run_unsup.py --lerning_rate 1e-5 (typo)": [*train, "--lerning_rate", "1e-5"],
        "run_unsup.py --max_seq_length abc": [*train, "--max_seq_length", "abc"],
        "run_unsup.py --output_dir ''": [*train, "--output_dir", ""],
        "run_unsup.py --preset simcse_bert --learning_rate 0": [*train, "--preset", "simcse_bert",
                                                                "--learning_rate", "0"],
        "hf-cse-train --model_name_or_path MISSING": [*console_script(checkout, "hf-cse-train"),
                                                      "--model_name_or_path", MISSING],
        "run_eval.py --model_name_or_path MISSING": [*evaluate, "--model_name_or_path", MISSING],
        "hf-cse-export MISSING out": [*console_script(checkout, "hf-cse-export"), MISSING, "out"],
        "run_unsup.py --output_dir (holds notes.txt)": [*train, "--output_dir", str(notes)],
        "run_unsup.py --output_dir (a finished run)": [*train, "--output_dir", str(notes.parent / "finished_run")],
    }


def run(command: list[str], checkout: Path, cache: Path, cwd: Path) -> tuple[float, int, str]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/tmp"),
           "PYTHONPATH": str(checkout), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "HF_CSE_CACHE": str(cache), "COLUMNS": "100"}
    start = time.perf_counter()
    proc = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    return seconds, proc.returncode, (proc.stdout + proc.stderr).replace(str(checkout), "<checkout>")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", type=Path, required=True, help="the checkout to compare with (e.g. main's)")
    ap.add_argument("--after", type=Path, default=HERE, help="the checkout measured (default: this one)")
    ap.add_argument("--runs", type=int, default=3, help="timed runs per command and checkout")
    ap.add_argument("--only", help="time only the commands whose label holds this text")
    ap.add_argument("--json", type=Path, help="also write the timings here")
    args = ap.parse_args()
    before, after = args.before.resolve(), args.after.resolve()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        notes = tmp / "notes_folder"  # a folder holding a file no run writes: refused by both, but when?
        notes.mkdir()
        (notes / "notes.txt").write_text("mine\n")
        finished = tmp / "finished_run"  # what a finished run leaves (its last file: training_info.json)
        finished.mkdir()
        for name in ("training_info.json", "config.json", "hf_cse_run.json"):
            (finished / name).write_text("{}\n")
        labels = commands(after, notes)
        cmds = {"before": commands(before, notes), "after": labels}
        checkouts = {"before": before, "after": after}
        rows, record = [], {}
        for label in labels:
            if args.only and args.only not in label:
                continue
            # each checkout's cache empty for this command: its first start, as after an install
            caches = {name: tmp / f"cache-{name}-{len(rows)}" for name in checkouts}
            firsts = {name: run(cmds[name][label], checkouts[name], caches[name], tmp) for name in checkouts}
            times, codes = {"before": [], "after": []}, {(name, rc) for name, (_, rc, _) in firsts.items()}
            outputs = {name: {out} for name, (_, _, out) in firsts.items()}
            for r in range(args.runs):
                for name in ("before", "after") if r % 2 == 0 else ("after", "before"):
                    seconds, rc, out = run(cmds[name][label], checkouts[name], caches[name], tmp)
                    times[name].append(seconds)
                    codes.add((name, rc))
                    outputs[name].add(out)
            rc_before = {rc for name, rc in codes if name == "before"}
            rc_after = {rc for name, rc in codes if name == "after"}
            b, a = statistics.median(times["before"]), statistics.median(times["after"])
            fb, fa = firsts["before"][0], firsts["after"][0]
            same = len(outputs["before"] | outputs["after"]) == 1
            rows.append([label, f"{fb:.2f}", f"{fa:.2f}", f"{fb / fa:.1f}x", f"{b:.2f}", f"{a:.2f}", f"{b / a:.1f}x",
                         ",".join(map(str, sorted(rc_before | rc_after))), "yes" if same else "no"])
            record[label] = {"before_first_start_s": fb, "after_first_start_s": fa, "before_s": times["before"],
                             "after_s": times["after"], "exit_codes": sorted(rc_before | rc_after),
                             "same_answer": same}
            if rc_before != rc_after:
                print(f"!! {label}: exit code {sorted(rc_before)} before, {sorted(rc_after)} after", flush=True)
            print(" | ".join(rows[-1]), flush=True)
    headers = ["command", "before, first start s", "after, first start s", "first start before / after",
               "before, later s", "after, later s", "later before / after", "exit", "same answer"]
    print()
    print("| " + " | ".join(headers) + " |")
    print("|" + " --- |" * len(headers))
    for row in rows:
        print("| " + " | ".join(f"`{c}`" if i == 0 else c for i, c in enumerate(row)) + " |")
    print(f"\nlater = median of {args.runs} runs per checkout; before = {before}, after = {after}; "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; load average {os.getloadavg()[0]:.1f}")
    if args.json:
        args.json.write_text(json.dumps({"runs": args.runs, "before": str(before), "after": str(after),
                                         "commands": record}, indent=2) + "\n")


if __name__ == "__main__":
    main()
