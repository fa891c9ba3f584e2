"""Processes on a CPU: ``accelerate launch --num_processes N`` without a multi-process config is refused in one line
naming the config that works (it would train one process and exit 0), and ContrastiveTrainer's default
``ddp_find_unused_parameters=False`` reaches DDP in a real 2-process run (no DDP warning), while an explicit
``True`` is kept."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from dist_helpers import _env as dist_env
from dist_helpers import _free_port
from helpers import hang_timeout

from hf_cse.checks import InputError
from hf_cse.cli import launch

ROOT = Path(__file__).resolve().parents[2]
CPU_2PROC = ROOT / "hf_cse" / "configs" / "accelerate" / "cpu_2proc.yaml"
DDP_WARNING = "find_unused_parameters=True was specified in DDP constructor"


def _env() -> dict[str, str]:
    """The multi-process tests' environment without a rendezvous of this process's own: the launcher sets it."""
    env = dist_env()
    for name in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE"):
        env.pop(name, None)
    return env


def _train(model_dir: Path, out: Path, *extra: str) -> list[str]:
    return ["-m", "hf_cse", "train", "--model_name_or_path", str(model_dir), "--output_dir", str(out),
            "--max_steps", "2", "--per_device_train_batch_size", "4", "--logging_steps", "1", "--disable_tqdm",
            "true", "--use_cpu", "true", *extra]


def _communicate(proc: subprocess.Popen) -> str:
    try:
        out, _ = proc.communicate(timeout=hang_timeout(300))
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    return out


@pytest.mark.parametrize(("env", "refused"), [
    ({}, False),  # not launched by accelerate
    ({"ACCELERATE_USE_CPU": "True", "ACCELERATE_MIXED_PRECISION": "no"}, False),  # one process asked for
    ({"ACCELERATE_USE_CPU": "True", "ACCELERATE_MIXED_PRECISION": "no", "MASTER_ADDR": "127.0.0.1",
      "MASTER_PORT": "29500"}, True),  # the simple launcher's sign of N > 1
    ({"ACCELERATE_USE_CPU": "False", "ACCELERATE_MIXED_PRECISION": "no", "MASTER_ADDR": "127.0.0.1",
      "MASTER_PORT": "29500", "WORLD_SIZE": "2"}, False),  # torchrun started them (the cpu_2proc config)
    ({"ACCELERATE_USE_CPU": "True", "ACCELERATE_MIXED_PRECISION": "no", "MASTER_ADDR": "10.0.0.1",
      "PMI_SIZE": "4"}, False),  # mpirun started them
])
def test_processes_asked_for_but_not_started_are_refused(env, refused, monkeypatch):
    monkeypatch.setattr(launch, "_parent", lambda name: None)  # the launcher's environment and command line unknown
    if refused:
        with pytest.raises(InputError, match=r"asked for several processes .* config cpu_2proc"):
            launch.check_requested_processes_started(env)
    else:
        launch.check_requested_processes_started(env)


def test_master_addr_of_the_launchers_own_environment_is_not_the_sign(monkeypatch):
    """A cluster that exports MASTER_ADDR for every command: the launcher had it too, so it did not set it."""
    monkeypatch.setattr(launch, "_parent", lambda name: b"PATH=/bin\0MASTER_ADDR=10.0.0.1\0" if name == "environ"
                        else None)
    launch.check_requested_processes_started({"ACCELERATE_USE_CPU": "True", "ACCELERATE_MIXED_PRECISION": "no",
                                              "MASTER_ADDR": "10.0.0.1"})


@pytest.mark.slow
def test_accelerate_launch_num_processes_on_a_cpu_is_refused_in_one_line(tiny_bert_dir, tmp_path):
    out = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "accelerate.commands.launch", "--num_processes", "2", "--main_process_port",
         str(_free_port()), *_train(tiny_bert_dir, out)],
        env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path)
    log = _communicate(proc)
    assert proc.returncode != 0, log[-3000:]
    errors = [line for line in log.splitlines() if line.startswith("hf-cse-train: error:")]
    assert len(errors) == 1, log[-3000:]
    assert "asked for 2 processes but started this one alone" in errors[0]
    assert 'accelerate launch --config_file "$(python -m hf_cse config cpu_2proc)"' in errors[0]
    assert not out.exists()  # refused before any work


@pytest.mark.slow
def test_ddp_gets_find_unused_parameters_false_by_default_and_an_explicit_true(tiny_bert_dir, tmp_path):
    """DDP warns at the first backward when told to search for unused parameters and finds none: the default run
    must not warn (the setting reached DDP), the run given ``--ddp_find_unused_parameters true`` must (kept)."""
    def launch_two(name: str, *extra: str) -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(CPU_2PROC),
             "--main_process_port", str(_free_port()), *_train(tiny_bert_dir, tmp_path / name, *extra)],
            env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path)

    default, explicit = launch_two("default"), launch_two("explicit", "--ddp_find_unused_parameters", "true")
    default_log, explicit_log = _communicate(default), _communicate(explicit)
    assert default.returncode == 0, default_log[-3000:]
    assert explicit.returncode == 0, explicit_log[-3000:]
    for log in (default_log, explicit_log):
        assert "x 2 processes" in log  # really two processes
    assert DDP_WARNING not in default_log
    assert DDP_WARNING in explicit_log


GLOO_PEER_GONE = ("[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer "
                  "[127.0.0.1]:37261. This is typically caused by a remote worker crashing.")


@pytest.mark.parametrize("world_size, one_line", [("2", True), ("1", False)])
def test_a_collective_failing_as_another_process_ended_is_one_line(world_size, one_line, monkeypatch, capsys):
    """Under several processes, one killed (SIGKILL) mid-run: the survivor's collective fails with gloo's "Connection
    closed by peer", which was a traceback; alone (no launch) such an error is a bug and keeps its traceback."""
    from hf_cse.cli import run_cli

    monkeypatch.setenv("WORLD_SIZE", world_size)
    monkeypatch.delenv("HF_CSE_DEBUG", raising=False)

    def step():
        raise RuntimeError(GLOO_PEER_GONE)

    if not one_line:
        with pytest.raises(RuntimeError, match="Connection closed by peer"):
            run_cli(step, "hf-cse-train")
        return
    assert run_cli(step, "hf-cse-train") == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == ["hf-cse-train: error: another process of this run ended (killed, or its own error above); what "
                     "was saved so far is kept."]


@pytest.mark.parametrize("kept", ["out/checkpoint-4 is kept: the same command resumes from it.",
                                  "no checkpoint was complete yet in out: the same command starts the run again."])
def test_another_process_ended_names_what_the_run_keeps(kept, monkeypatch, capsys):
    """It said "the same command resumes from the last complete checkpoint" whether or not one was saved (with none,
    the same command starts over), and named none, where the SIGTERM line names the checkpoint kept."""
    from hf_cse.cli import run_cli, say_when_stopped

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.delenv("HF_CSE_DEBUG", raising=False)

    def step():
        say_when_stopped(lambda: kept)
        raise RuntimeError(GLOO_PEER_GONE)

    assert run_cli(step, "hf-cse-train") == 1
    assert capsys.readouterr().err.strip().splitlines() == [
        f"hf-cse-train: error: another process of this run ended (killed, or its own error above); {kept}"]


def test_an_error_every_process_raises_is_printed_by_the_main_process(monkeypatch, capsys):
    """The other processes wait for the main one to print it (the launcher then stops them); one whose main process
    did not end within the wait prints it itself."""
    import hf_cse.cli as cli
    from hf_cse.errors import CSEError, raised_on_every_process

    monkeypatch.setattr(cli, "OTHER_PROCESS_WAIT_S", 0.0)
    waits = []
    monkeypatch.setattr(cli.time, "sleep", waits.append)

    def refuse():
        raise raised_on_every_process(CSEError("the same on every process"))

    for rank, waited in (("0", []), ("1", [0.0])):
        monkeypatch.setenv("RANK", rank)
        waits.clear()
        assert cli.run_cli(refuse, "hf-cse-train") == 1
        assert capsys.readouterr().err.startswith("hf-cse-train: error: the same on every process")
        assert waits == waited


@pytest.mark.parametrize(("stop", "code"), [("Terminated", 143), ("KeyboardInterrupt", 130)])
def test_a_process_stopped_while_it_waits_for_the_main_processes_line_says_nothing(stop, code, monkeypatch, capsys):
    """The launcher stops the other processes (SIGTERM) once the main one ended with the run's line: they add no
    line of their own (it was "interrupted (Ctrl-C) while starting", a Ctrl-C that never came)."""
    import hf_cse.cli as cli
    from hf_cse.cli.stop_signals import Terminated
    from hf_cse.errors import CSEError, raised_on_every_process

    signal = {"Terminated": Terminated, "KeyboardInterrupt": KeyboardInterrupt}[stop]

    def stopped(seconds):
        raise signal()

    monkeypatch.setattr(cli.time, "sleep", stopped)
    monkeypatch.setenv("RANK", "1")

    def refuse():
        raise raised_on_every_process(CSEError("the same on every process"))

    try:
        assert cli.run_cli(refuse, "hf-cse-train") == code
    except KeyboardInterrupt:  # as it was: out to the start's handler, which claimed a Ctrl-C (and here ends pytest)
        pytest.fail("the stop while waiting was not handled")
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(("rank", "stop", "code", "line"), [
    ("0", "KeyboardInterrupt", 130, "hf-cse-train: interrupted (Ctrl-C) while starting; nothing was done.\n"),
    ("0", "Terminated", 143, "hf-cse-train: stopped (SIGTERM, from a launcher, a job scheduler or kill) while "
                             "starting; nothing was done.\n"),
    ("1", "KeyboardInterrupt", 130, ""),  # Ctrl-C reaches every process: the main one says it
    ("1", "Terminated", 143, ""),  # the launcher stops the others once one failed: that one's line is the run's
])
def test_a_command_stopped_while_it_starts_says_which_signal_on_the_main_process(rank, stop, code, line,
                                                                                  monkeypatch, capsys):
    from hf_cse.cli import entry_points
    from hf_cse.cli.stop_signals import Terminated

    signal = {"Terminated": Terminated, "KeyboardInterrupt": KeyboardInterrupt}[stop]

    def stopped(command, argv, prog):
        raise signal()

    monkeypatch.setattr(entry_points, "_run_command", stopped)
    monkeypatch.setenv("RANK", rank)
    assert entry_points.train(["--max_steps", "1"]) == code
    assert capsys.readouterr().err == line


def test_a_process_other_than_the_main_one_stopped_by_sigterm_says_nothing(monkeypatch, capsys):
    """The launcher's SIGTERM reaches the other processes once the main one failed (with its line) or was stopped
    itself (saying so): the run's line is the main process's, whatever the other was doing."""
    import hf_cse.cli as cli
    from hf_cse.cli.stop_signals import Terminated

    def stopped():
        raise Terminated()

    monkeypatch.setenv("RANK", "1")
    assert cli.run_cli(stopped, "prog") == 143
    assert capsys.readouterr().err == ""
    monkeypatch.setenv("RANK", "0")
    assert cli.run_cli(stopped, "prog") == 143
    assert capsys.readouterr().err.startswith("prog: stopped (SIGTERM")


@pytest.mark.slow
def test_a_refusal_in_a_two_process_launch_is_one_line(tiny_bert_dir, tmp_path):
    """Every process refuses the file; the main process says so, and the other, stopped by the launcher, adds no
    false "interrupted (Ctrl-C)" line."""
    from dist_helpers import accelerate_train_cmd

    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"a good line\n" * 20 + b"bad \xff line\n")
    proc = subprocess.Popen(accelerate_train_cmd("--model_name_or_path", str(tiny_bert_dir), "--train_file", str(bad),
                                                 "--max_steps", "2", "--output_dir", str(tmp_path / "run")),
                            env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path)
    log = _communicate(proc)
    assert proc.returncode != 0, log[-3000:]
    lines = [line for line in log.splitlines() if line.startswith("hf-cse-train:")]
    assert len(lines) == 1 and "line 21 is not valid UTF-8" in lines[0], log[-3000:]
    assert "Ctrl-C" not in log


ONE_PROCESS_REFUSALS = {
    "run_eval.py": "run_eval.py evaluates in one process: start it with `python run_eval.py ...`, not accelerate "
                   "launch (or torchrun) with 2 processes.",
    "hf-cse-export": "hf-cse-export exports in one process: start it with `hf-cse-export ...`, not accelerate launch "
                     "(or torchrun) with 2 processes.",
}


@pytest.mark.parametrize("early", [True, False])  # the start's check (before torch), and the command's own main
@pytest.mark.parametrize("prog", sorted(ONE_PROCESS_REFUSALS))
def test_evaluation_and_export_launched_as_several_processes_are_refused_before_writing(prog, early, tiny_bert_dir,
                                                                                        tmp_path, monkeypatch,
                                                                                        capsys):
    """Each process evaluated (exported) the whole into the same folder, and one found its sibling holding it as
    "another run" while the launcher stopped the other mid-task."""
    from hf_cse.cli import entry_points
    from hf_cse.cli import evaluate as eval_cli
    from hf_cse.cli import export as export_cli

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    out = tmp_path / "out"
    if prog == "run_eval.py":
        argv = ["--model_name_or_path", str(tiny_bert_dir), "--tasks", "none", "--eval_file", str(tmp_path / "p.tsv"),
                "--output_dir", str(out)]
        run = entry_points.evaluate if early else eval_cli.main
    else:
        argv = [str(tiny_bert_dir), str(out)]
        run = entry_points.export if early else export_cli.main
    assert run(argv, prog=prog) == 1
    assert capsys.readouterr().err == f"{prog}: error: {ONE_PROCESS_REFUSALS[prog]} (HF_CSE_DEBUG=1 shows the " \
                                      "traceback)\n"
    assert not out.exists()
    monkeypatch.setenv("WORLD_SIZE", "1")  # one process of its own: not refused for that
    monkeypatch.setattr(eval_cli, "evaluate_models", lambda argv: 0)
    monkeypatch.setattr(export_cli, "export_from_args", lambda argv: 0)
    assert (eval_cli.main if prog == "run_eval.py" else export_cli.main)(argv, prog=prog) == 0


@pytest.mark.slow
def test_run_eval_launched_as_two_processes_is_one_line_and_writes_nothing(tiny_bert_dir, tmp_path):
    out = tmp_path / "eval"
    proc = subprocess.Popen(
        [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(CPU_2PROC), "--main_process_port",
         str(_free_port()), str(ROOT / "run_eval.py"), "--model_name_or_path", str(tiny_bert_dir), "--tasks", "sts",
         "--output_dir", str(out)],
        env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path)
    log = _communicate(proc)
    assert proc.returncode != 0, log[-3000:]
    lines = [line for line in log.splitlines() if line.startswith("run_eval.py:")]
    assert lines == [f"run_eval.py: error: {ONE_PROCESS_REFUSALS['run_eval.py']} (HF_CSE_DEBUG=1 shows the "
                     "traceback)"], log[-3000:]
    assert not out.exists()


LEAVING_SCRIPT = """
import atexit, sys, threading, time
import torch.distributed as dist
from hf_cse.cli import run_cli
if sys.argv[1] == "group":
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:" + sys.argv[2], rank=0, world_size=1)
atexit.register(lambda: print("exit handler ran", flush=True))
threading.Thread(target=lambda: (time.sleep(0.3), print("thread finished", flush=True))).start()
class Finalized:
    def __del__(self):
        print("finalized", flush=True)
marker = Finalized()
sys.stdout.write("unflushed output")
code = run_cli(lambda: 3, "prog")
print("returned", code)
sys.exit(code)
"""


@pytest.mark.slow
@pytest.mark.parametrize("group", ["group", "none"])
def test_a_process_of_a_launch_leaves_without_the_interpreters_finalization(group, tmp_path):
    """gloo's worker threads can abort a finishing process in the interpreter's finalization (pytorch#190489), so a
    command's process in a process group ends in run_cli: exit code kept, exit handlers run, threads joined, output
    flushed, no finalization (no __del__ of module objects, nothing after run_cli); without a group run_cli returns."""
    done = subprocess.run([sys.executable, "-c", LEAVING_SCRIPT, group, str(_free_port())], env=dist_env(),
                          capture_output=True, text=True, timeout=hang_timeout(120), cwd=tmp_path)
    assert done.returncode == 3, done.stderr[-2000:]
    out = done.stdout
    assert out.startswith("unflushed output") and "thread finished" in out and "exit handler ran" in out
    assert out.index("thread finished") < out.index("exit handler ran")  # threads first, as Python's own exit
    if group == "group":
        assert "returned" not in out and "finalized" not in out
    else:
        assert "returned 3" in out and "finalized" in out


@pytest.mark.parametrize("flag", ["--help", "-h", "--help_all"])
def test_a_launch_of_several_prints_the_help_once(flag, monkeypatch, capsys):
    """Each process of `accelerate launch ... run_unsup.py --help` printed the whole help (twice 222 lines, mixed)."""
    from hf_cse.cli import entry_points

    monkeypatch.setenv("RANK", "1")
    assert entry_points.run_command("train", [flag]) == 0
    assert capsys.readouterr() == ("", "")
    monkeypatch.setenv("RANK", "0")
    with pytest.raises(SystemExit) as end:
        entry_points.run_command("train", [flag])
    assert end.value.code == 0 and "usage:" in capsys.readouterr().out


#: a launcher's stand-in: starts a process as torchrun does (TORCHELASTIC_RUN_ID) that asks to end with it, prints
#: that process's id once it asked, and waits
_LAUNCHER = """
# WHO
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import sys, time; from hf_cse.cli.launch import end_with_the_launcher;"
                          " print(end_with_the_launcher(), flush=True); time.sleep(120)"],
                         env={**os.environ, "TORCHELASTIC_RUN_ID": "test"}, stdout=subprocess.PIPE, text=True)
print(child.pid, child.stdout.readline().strip(), flush=True)
time.sleep(120)
"""


def _ended(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return True
    return "\nState:\tZ" in state  # ended, not yet reaped by whoever took it over


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's parent-death signal")
def test_a_process_torchrun_started_ends_when_its_launcher_is_killed_outright():
    """kill -9 of `accelerate launch` left both training processes running detached, writing checkpoints and a
    finished run into the folder: they now get SIGTERM, and stop as a scheduler's SIGTERM stops them."""
    import signal
    import time

    script = _LAUNCHER.replace("WHO", "torchrun's stand-in: its command line names it, as a launcher's does")
    launcher = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=_env(),
                                cwd=ROOT)
    try:
        pid, asked = launcher.stdout.readline().split()
        assert asked == "True"
        assert not _ended(int(pid))
        launcher.send_signal(signal.SIGKILL)
        launcher.wait(timeout=30)
        deadline = time.monotonic() + hang_timeout(30)
        while not _ended(int(pid)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _ended(int(pid)), "the started process outlived its launcher"
    finally:
        launcher.kill()


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's parent-death signal")
def test_a_process_started_by_a_worker_inherits_no_end_with_the_launcher():
    """A command a training process starts inherits TORCHELASTIC_RUN_ID: it is no process of the launcher's, so it
    neither asks to end with its parent (a thread of the parent that started it ending would stop it) nor writes
    the worker's error file."""
    plain = _LAUNCHER.replace("WHO", "a training script")
    script = subprocess.Popen([sys.executable, "-c", plain], stdout=subprocess.PIPE, text=True, env=_env(), cwd=ROOT)
    try:
        pid, asked = script.stdout.readline().split()
        assert asked == "False"
        os.kill(int(pid), 9)
    finally:
        script.kill()
