"""Measure the numbers README.md and CONTRIBUTING.md quote, with the date and the machine, so that a doc's number
is a measurement anyone can repeat rather than a memory:

* the number of tests in the fast lane (``-m "not slow"``) and in the whole suite, counted by
  ``pytest --collect-only -q`` (collected, not run);
* the main job's wall time (``accelerate launch run_unsup.py --loss gs_infonce``, the README's command, into a
  temporary ``--output_dir``), on this machine, with the machine's CPU, core count and load;
* what the main job does to the model: its sentence-transformers export and the untrained embedded encoder (its own
  pooling) scored by ``run_eval.py --tasks STSBenchmark,SICKRelatedness`` on ``../shared/data/senteval`` (test sets),
  where that folder is beside the checkout.

    python scripts/measure_docs.py                  # all of it (the main job and its scores take minutes on 2 cores)
    python scripts/measure_docs.py --no-main-job    # the test counts only (seconds)

Prints one Markdown line per number; README/CONTRIBUTING quote them with the date.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAIN_JOB = ["-m", "accelerate.commands.launch", "run_unsup.py", "--loss", "gs_infonce"]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    return env


def count_tests(marker: str | None) -> int:
    """Tests pytest collects from tests/ (with ``-m marker``), without running any."""
    cmd = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "tests"]
    if marker:
        cmd += ["-m", marker]
    out = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True)
    found = re.search(r"(\d+)(?:/\d+)? tests? collected", out.stdout)
    if out.returncode != 0 or not found:
        raise SystemExit("measure_docs.py: pytest could not collect the tests:\n"
                         f"{out.stdout[-2000:]}{out.stderr[-2000:]}")
    return int(found.group(1))


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


SENTEVAL = ROOT.parent / "shared" / "data" / "senteval"
SCORED_TASKS = ("STSBenchmark", "SICKRelatedness")


def _run(cmd: list[str], what: str) -> None:
    out = subprocess.run([sys.executable, *cmd], cwd=ROOT, env=_env(), capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"measure_docs.py: {what} failed:\n{out.stdout[-2000:]}{out.stderr[-3000:]}")


def test_scores(model: str, output_dir: Path) -> dict[str, float]:
    """Spearman x 100 of ``model`` on the test sets of :data:`SCORED_TASKS` (``run_eval.py``'s results.json)."""
    import json

    _run(["run_eval.py", "--model_name_or_path", model, "--senteval_data_dir", str(SENTEVAL), "--tasks",
          ",".join(SCORED_TASKS), "--output_dir", str(output_dir), "--disable_tqdm", "true"], f"scoring {model}")
    scores = json.loads((output_dir / "results.json").read_text())  # Spearman x 100 under each task's name
    return {task: float(scores[task]) for task in SCORED_TASKS}


def main_job(score: bool) -> tuple[float, float, dict[str, dict[str, float]]]:
    """Wall and CPU seconds (user + system of the launched processes) of the main job into a temporary folder, and
    with ``score`` the test scores of its export and of the untrained encoder (``"trained"``, ``"untrained"``)."""
    with tempfile.TemporaryDirectory(prefix="hf_cse_main_job_") as tmp:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        _run([*MAIN_JOB, "--output_dir", str(Path(tmp) / "out")], "the main job")
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        scores = {}
        if score:
            from hf_cse.encoders import default_encoder

            scores = {"untrained": test_scores(default_encoder(), Path(tmp) / "eval_untrained"),
                      "trained": test_scores(str(Path(tmp) / "out" / "sentence-transformers"),
                                             Path(tmp) / "eval_trained")}
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, scores


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--no-main-job", action="store_true", help="count the tests only")
    args = parser.parse_args(argv)
    today = datetime.datetime.now(datetime.timezone.utc).date().isoformat()
    machine = f"{cpu_name()}, {os.cpu_count()} cores"
    fast, whole = count_tests("not slow"), count_tests(None)
    print(f"- {today}: fast lane (`-m \"not slow\"`): {fast:,} tests; whole suite: {whole:,} tests "
          f"(collected by `pytest --collect-only`; {whole - fast:,} marked slow)")
    if not args.no_main_job:
        load = os.getloadavg()[0]
        wall, cpu, scores = main_job(score=SENTEVAL.is_dir())
        print(f"- {today}: the main job (`accelerate launch run_unsup.py --loss gs_infonce`, dependencies installed): "
              f"{wall:.0f} s wall, {cpu:.0f} s CPU, on {machine} at a load of {load:.1f} when it started")
        if scores:
            before, after = scores["untrained"], scores["trained"]
            changes = ", ".join(f"{task} {before[task]:.2f} -> {after[task]:.2f}" for task in SCORED_TASKS)
            print(f"- {today}: test Spearman x 100, the untrained encoder (its own pooling) -> the main job's export "
                  f"(`run_eval.py --tasks {','.join(SCORED_TASKS)}`): {changes}")


if __name__ == "__main__":
    main()
