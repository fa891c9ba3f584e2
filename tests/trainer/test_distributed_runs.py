"""Whole runs under two CPU processes (gloo), as a researcher launches them: a user's own ContrastiveTrainer script
under torchrun (``tests/dist_api_worker.py``) and the training command under ``accelerate launch`` with the shipped
cpu_2proc config. What one process alone cannot show: every process's checkpoint files are on disk before the
checkpoint is marked complete, a refusal on the main process stops every process (none trains on alone, waiting
for the others), and a refusal is printed once for the run, not once per process.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from dist_helpers import API_WORKER, ROOT, _env, accelerate_train_cmd, torchrun_cmd
from helpers import hang_timeout, random_sentences

pytestmark = pytest.mark.slow  # several processes

TIMEOUT = 240  # a hung collective must fail the test, not the CI run (scaled by the load: hang_timeout)


def _run(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=hang_timeout(TIMEOUT), cwd=cwd)


def _api_run(tiny_bert_dir: Path, train: Path, output_dir: Path, out: Path, mode: str) -> list[dict]:
    proc = _launch_api(tiny_bert_dir, train, output_dir, out, mode)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    return [json.loads((out / f"rank{rank}.json").read_text()) for rank in (0, 1)]


def _launch_api(tiny_bert_dir: Path, train: Path, output_dir: Path, out: Path,
                mode: str) -> subprocess.CompletedProcess:
    return _run(torchrun_cmd(API_WORKER, "--model_dir", str(tiny_bert_dir), "--train_file", str(train),
                             "--output_dir", str(output_dir), "--out", str(out), "--mode", mode), out.parent)


@pytest.fixture(scope="module")
def api_run(tiny_bert_dir, tmp_path_factory):
    """The user's script trained once under torchrun: (its folder, the training file, what each process saw)."""
    tmp = tmp_path_factory.mktemp("api")
    train = tmp / "train.txt"
    train.write_text("\n".join(random_sentences(64)) + "\n")
    return tmp / "run", train, _api_run(tiny_bert_dir, train, tmp / "run", tmp / "first", "train")


def test_a_checkpoint_is_marked_complete_only_once_every_process_saved_its_states(api_run):
    """Process 0 writes trainer_state.json, which marks a checkpoint complete; process 1 writes its own RNG states
    into the same folder (here a second late). A run killed in between left a checkpoint that counted as complete
    without process 1's states, and its resumption drew other dropout masks than the run uninterrupted."""
    folder, _, ranks = api_run
    for result in ranks:
        assert "error" not in result, result["error"]
        assert result["complete_when_marked"] == {"checkpoint-2": True, "checkpoint-4": True}
    for checkpoint in ("checkpoint-2", "checkpoint-4"):
        for name in ("rng_state", "log_window_state"):
            assert (folder / checkpoint / f"{name}_1.pth").is_file()


def test_a_run_whose_process_1_is_killed_stops_and_resumes_as_the_run_uninterrupted(api_run, tiny_bert_dir,
                                                                                     tmp_path):
    """Process 1 killed (SIGKILL) mid-run: the launch ends (no process waits for it forever), and the folder resumes
    from its last complete checkpoint to the uninterrupted run's losses."""
    _, train, uninterrupted = api_run
    killed = _launch_api(tiny_bert_dir, train, tmp_path / "run", tmp_path / "killed", "killed")
    assert killed.returncode != 0
    assert not (tmp_path / "run" / "checkpoint-4").exists()
    resumed = _api_run(tiny_bert_dir, train, tmp_path / "run", tmp_path / "resumed", "resume")
    for result in resumed:
        assert "error" not in result, result["error"]
        assert result["losses"] == uninterrupted[0]["losses"]  # steps 1-2 from the checkpoint's log, 3-4 trained
    assert (tmp_path / "run" / "training_info.json").is_file()


def test_a_new_run_into_a_trained_runs_folder_is_refused_by_every_process(api_run, tiny_bert_dir, tmp_path):
    """The folder check ran on process 0 alone: process 1 went on into training by itself and failed in a collective
    once process 0 had gone (``Connection closed by peer``), or would wait in it forever if process 0 lived on."""
    folder, train, _ = api_run
    ranks = _api_run(tiny_bert_dir, train, folder, tmp_path / "again", "again")
    for result in ranks:
        assert result.get("error", "").startswith("OutputFolderError: output_dir"), result
        assert "already holds a trained run" in result["error"]


def test_a_failed_export_after_training_is_raised_by_every_process(api_run, tiny_bert_dir, tmp_path):
    """The export runs on process 0 while the others wait for it: they waited at a barrier process 0 never reached
    once its export failed, and failed there in a collective (``Connection closed by peer``)."""
    _, train, _ = api_run
    ranks = _api_run(tiny_bert_dir, train, tmp_path / "run", tmp_path / "export", "export_fails")
    for result in ranks:
        assert result.get("error") == "CSEError: the export refused (a test's stand-in for a failed export)", result


def test_a_stream_under_two_processes_trains_on_the_global_batches_of_one_process(api_run, tiny_bert_dir, tmp_path):
    """Accelerate's default for a stream under several processes (process 0 reads it and dispatches each global
    batch) split the incomplete last batch of each pass: 2 rows per process (the loader had no drop_last). And it
    joined the per-device batches, each padded to its own longest row: rows of another length in each ended the
    run at the first step (RuntimeError: Sizes of tensors must match)."""
    _, train, _ = api_run
    ranks = _api_run(tiny_bert_dir, train, tmp_path / "run", tmp_path / "stream", "stream")
    for result in ranks:
        assert "error" not in result, result["error"]
        assert [len(rows) for rows in result["rows_per_step"]] == [4, 4, 4, 4]
    single = _run([sys.executable, str(API_WORKER), "--model_dir", str(tiny_bert_dir), "--train_file", str(train),
                   "--output_dir", str(tmp_path / "one"), "--out", str(tmp_path / "single"), "--mode", "stream",
                   "--batch_size", "8"], tmp_path)
    assert single.returncode == 0, (single.stdout + single.stderr)[-3000:]
    alone = json.loads((tmp_path / "single" / "rank0.json").read_text())
    assert "error" not in alone, alone["error"]
    joined = [mine + theirs for mine, theirs in zip(ranks[0]["rows_per_step"], ranks[1]["rows_per_step"])]
    assert joined == alone["rows_per_step"]
    assert all(len({tuple(row) for row in rows}) == 8 for rows in joined)


@pytest.mark.parametrize("problem", ["missing_train_file", "finished_folder", "max_seq_length"])
def test_a_refusal_under_two_processes_is_one_line(problem, api_run, tiny_bert_dir, tmp_path):
    """Every process checks the same flags, files and folder: the refusal was printed by each (two lines, at times
    run together on one). Checked before torch is imported (the train file, the finished run's folder) and after (a
    max_seq_length past the encoder's positions)."""
    finished, train, _ = api_run
    args = {"missing_train_file": ["--train_file", str(tmp_path / "missing.txt")],
            "finished_folder": ["--output_dir", str(finished)],
            "max_seq_length": ["--max_seq_length", "100"]}[problem]
    common = {"--model_name_or_path": str(tiny_bert_dir), "--train_file": str(train), "--output_dir":
              str(tmp_path / "out"), "--max_steps": "2", "--per_device_train_batch_size": "4"}
    for flag in args[::2]:
        common.pop(flag, None)
    _assert_one_error_line(_run(accelerate_train_cmd(*[x for pair in common.items() for x in pair], *args), tmp_path))


def test_a_refusal_is_printed_when_the_main_process_lags(tiny_bert_dir, tmp_path):
    """The other process, which leaves the line to the main one, ended first: the launcher then stopped the main
    process before it printed its line (a lagging main process, here 3 s late), and the run said nothing at all."""
    script = tmp_path / "lagging_main.py"
    script.write_text(f"""import os, runpy, sys, time
if os.environ.get("RANK") == "0":
    time.sleep(3)
sys.argv[0] = {str(ROOT / "run_unsup.py")!r}
runpy.run_path(sys.argv[0], run_name="__main__")
""")
    cmd = accelerate_train_cmd("--model_name_or_path", str(tiny_bert_dir), "--train_file",
                               str(tmp_path / "missing.txt"), "--output_dir", str(tmp_path / "out"))
    cmd[cmd.index("-m", 2):cmd.index("train") + 1] = [str(script)]  # the script in place of -m hf_cse train
    line = _assert_one_error_line(_run(cmd, tmp_path), prog="run_unsup.py")
    assert "missing.txt does not exist" in line


def _assert_one_error_line(proc: subprocess.CompletedProcess, prog: str = "hf-cse-train") -> str:
    log = proc.stdout + proc.stderr
    assert proc.returncode != 0
    # The launcher's "Root Cause" box quotes the main process's line as its traceback (its error file): the
    # same line again, not a second refusal.
    quoted = [line.split("traceback :", 1)[1].strip() for line in log.splitlines()
              if line.strip().startswith("traceback :") and "error:" in line]
    lines = [line for line in log.splitlines() if "error:" in line and not line.strip().startswith("traceback :")]
    assert len(lines) == 1 and lines[0].startswith(f"{prog}: error: "), log[-3000:]
    assert lines[0].count("error:") == 1
    assert quoted in ([], [lines[0]]), log[-3000:]
    assert "[rank1]: Traceback" not in log, log[-3000:]  # nor a traceback of the other process
    return lines[0]


def test_a_folder_in_use_by_another_run_is_one_line_under_two_processes(api_run, tiny_bert_dir, tmp_path):
    """The main process takes the folder's lock after torch has started, while the other waited for it at a barrier:
    the main process's refusal left the other failing there with a gloo traceback (``Connection closed by peer``)."""
    from hf_cse.folder_lock import hold_folder, releases_folder_locks

    _, train, _ = api_run
    out = tmp_path / "busy"
    out.mkdir()

    @releases_folder_locks
    def launch_while_held() -> subprocess.CompletedProcess:
        hold_folder(out)  # a run of this test's own process holds it
        return _run(accelerate_train_cmd("--model_name_or_path", str(tiny_bert_dir), "--train_file", str(train),
                                         "--output_dir", str(out), "--max_steps", "2",
                                         "--per_device_train_batch_size", "4"), tmp_path)

    assert "is in use by another run" in _assert_one_error_line(launch_while_held())
