"""No path deletes what a run did not write, and one run owns a folder at a time (hf_cse.folder_lock): empty path
flags refused by every entry point, the export's --overwrite keeping files no export writes, real processes racing
for one folder, a stale lock of a killed process taken over."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import scored_pairs_file, train_args

from hf_cse.checks import InputError
from hf_cse.cli import evaluate as eval_cli
from hf_cse.cli import train as train_cli
from hf_cse.cli.export import main as export_main
from hf_cse.export import to_sentence_transformer
from hf_cse.folder_lock import FolderBusyError, hold_folder, lock_file, releases_folder_locks
from hf_cse.models import SimCSEModel

ROOT = Path(__file__).resolve().parents[2]


def _env():
    env = {k: v for k, v in os.environ.items() if k not in ("HF_CSE_DEBUG", "HF_CSE_TEST_KILL_AT")}
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1", OMP_NUM_THREADS="1",
               CUDA_VISIBLE_DEVICES="", TOKENIZERS_PARALLELISM="false", PYTHONPATH=str(ROOT))
    return env


# ------------------------------------------------------------------------------------------------ empty paths
@pytest.mark.parametrize("flag", ["--output_dir", "--train_file", "--model_name_or_path", "--senteval_data_dir",
                                  "--eval_file", "--resume_from_checkpoint"])
@pytest.mark.parametrize("value", ["", "  "])
def test_run_unsup_refuses_an_empty_path_before_touching_the_current_folder(flag, value, tiny_bert_dir, tmp_path,
                                                                            monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "config.json").write_text("{}")  # a file whose name a run writes: --overwrite_output_dir removed it
    (tmp_path / "runs").mkdir()
    args = train_args(tiny_bert_dir, tmp_path, tmp_path / "out", "--overwrite_output_dir")
    with pytest.raises(InputError, match=f"{flag} is empty.*Give a path"):
        train_cli.train_from_args([*args, flag, value])
    assert (tmp_path / "config.json").read_text() == "{}" and (tmp_path / "runs").is_dir()


@pytest.mark.parametrize("flag", ["--output_dir", "--model_name_or_path", "--eval_file", "--senteval_data_dir"])
def test_run_eval_refuses_an_empty_path(flag, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "results.json").write_text("{}")
    assert eval_cli.main(["--tasks", "sts", "--overwrite_output_dir", flag, " "]) == 1
    assert f"{flag} is empty" in capsys.readouterr().err
    assert (tmp_path / "results.json").read_text() == "{}"


@pytest.mark.parametrize("position", [0, 1, 2])
def test_export_refuses_an_empty_path(position, tiny_bert_dir, tmp_path, capsys):
    args = [str(tiny_bert_dir), str(tmp_path / "st"), "--tokenizer", str(tiny_bert_dir), "--overwrite"]
    args[[0, 1, 3][position]] = ""
    assert export_main(args) == 1
    assert "is empty" in capsys.readouterr().err and not (tmp_path / "st").exists()


def test_export_overwrite_replaces_only_what_an_export_writes(tiny_bert_dir, tmp_path):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    out = tmp_path / "st"
    to_sentence_transformer(SimCSEModel.from_encoder(str(tiny_bert_dir), mlp_only_train=True), out, tokenizer=tok)
    (out / "notes.txt").write_text("mine")
    (out / "other_model").mkdir()
    (out / "other_model" / "model.safetensors").write_text("another model")
    assert not (out / "2_Dense").exists()
    model = SimCSEModel.from_encoder(str(tiny_bert_dir), mlp_only_train=False)  # another export: a Dense module
    to_sentence_transformer(model, out, tokenizer=tok, overwrite=True)
    assert (out / "notes.txt").read_text() == "mine"
    assert (out / "other_model" / "model.safetensors").read_text() == "another model"
    assert (out / "2_Dense").is_dir() and '"mlp_only_train": false' in (out / "hf_cse_config.json").read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["st"]  # no temp, backup or lock file left
    run = tmp_path / "run"  # a training run's folder: an export would mix with it, even with overwrite
    SimCSEModel.from_encoder(str(tiny_bert_dir)).save_pretrained(run)
    with pytest.raises(FileExistsError, match="holds an hf_cse model"):
        to_sentence_transformer(model, run, tokenizer=tok, overwrite=True)


# ------------------------------------------------------------------------------------------------ folder lock
def test_a_held_folder_is_refused_and_released_on_return_and_on_error(tmp_path):
    out = tmp_path / "out"

    @releases_folder_locks
    def run(fail: bool):
        hold_folder(out)
        with pytest.raises(FolderBusyError, match="in use by another run \\(process"):
            hold_folder(tmp_path / "." / "out")  # the same folder by another spelling
        if fail:
            raise RuntimeError("boom")

    run(False)
    assert not lock_file(out).exists()
    with pytest.raises(RuntimeError):
        run(True)
    assert not lock_file(out).exists()
    run(False)


# A run refused after it claimed a new --output_dir (a checkpoint that cannot resume) left that folder behind, empty.
def test_a_command_refused_leaves_no_folder_it_made_but_keeps_what_it_found_or_wrote(tmp_path):
    @releases_folder_locks
    def command(out: Path, write: bool):
        hold_folder(out)
        out.mkdir(parents=True, exist_ok=True)  # as claim_output_dir makes it ready
        if write:
            (out / "hf_cse_run.json").write_text("{}")
        raise InputError("refused")

    made = tmp_path / "new" / "out"
    with pytest.raises(InputError):
        command(made, write=False)
    assert not (tmp_path / "new").exists()  # the folder and the parent made for it
    found = tmp_path / "found"
    found.mkdir()
    with pytest.raises(InputError):
        command(found, write=False)
    assert found.is_dir()  # there before: kept, empty or not
    with pytest.raises(InputError):
        command(tmp_path / "written", write=True)
    assert (tmp_path / "written" / "hf_cse_run.json").is_file()  # something written: kept


HOLDER = """
import sys, time
from hf_cse.folder_lock import hold_folder
hold_folder(sys.argv[1])
print("held", flush=True)
time.sleep(600)
"""


@pytest.mark.slow
def test_a_folder_held_by_another_process_is_refused_and_its_stale_lock_taken_over(tmp_path, caplog):
    out = tmp_path / "eval"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(out)], env=_env(), stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        pairs = scored_pairs_file(tmp_path / "pairs.tsv", 8, 3, seed=0)
        proc = subprocess.run([sys.executable, "run_eval.py", "--tasks", "none", "--eval_file", str(pairs),
                               "--output_dir", str(out)], cwd=ROOT, env=_env(), capture_output=True, text=True,
                              timeout=600)
        assert proc.returncode == 1, proc.stderr
        errors = [line for line in proc.stderr.splitlines() if "error" in line]
        assert len(errors) == 1 and f"process {holder.pid} on" in errors[0] and "in use by another run" in errors[0]
    finally:
        holder.send_signal(signal.SIGKILL)  # no clean-up: the lock file stays, held by nobody
        holder.wait()
    assert lock_file(out).exists()

    @releases_folder_locks
    def take():
        hold_folder(out)

    with caplog.at_level("WARNING", logger="hf_cse.folder_lock"):
        take()
    assert f"stale lock {lock_file(out)} of process {holder.pid}" in caplog.text
    assert not lock_file(out).exists()


@pytest.mark.slow
def test_two_training_runs_racing_for_one_folder_leave_one_run(tiny_bert_dir, tmp_path):
    """Before: both exited 0 and the folder mixed one run's record with the other's weights."""
    out = tmp_path / "out"
    launches = [subprocess.Popen([sys.executable, "run_unsup.py",
                                  *train_args(tiny_bert_dir, tmp_path, out, "--loss", loss, "--max_steps", "3")],
                                 cwd=ROOT, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                for loss in ("infonce", "gs_infonce")]
    time.sleep(0)
    results = [(p.wait(timeout=600), p.stderr.read()) for p in launches]
    assert sorted(code for code, _ in results) == [0, 1], results
    loser = next(err for code, err in results if code == 1)
    assert "in use by another run" in loser or "already holds a finished run" in loser, loser
    winner = ("infonce", "gs_infonce")[[code for code, _ in results].index(0)]
    import json

    record = json.loads((out / "hf_cse_run.json").read_text())
    config = json.loads((out / "config.json").read_text())
    assert record["objectives"][0]["loss"] == config["objectives"][0]["loss"] == winner
    assert winner in (out / "sentence-transformers" / "README.md").read_text()
    assert not lock_file(out).exists()


def test_a_writable_folder_in_a_read_only_parent_is_told_where_its_lock_goes(tmp_path, monkeypatch):
    """A volume mounted on a read-only root: the folder is writable, the lock beside it is not; the refusal named
    "a folder you can write to", which the folder was. It now says where the lock lives and offers a folder inside."""
    from hf_cse import folder_lock

    out = tmp_path / "mounted"
    out.mkdir()
    lock, real_open = lock_file(out), os.open

    def read_only_parent(path, *args, **kwargs):
        if Path(path).parent == tmp_path:  # the locks beside the folders
            raise OSError(30, "Read-only file system")
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(folder_lock.os, "open", read_only_parent)
    with pytest.raises(InputError) as refused:
        hold_folder(out, "--output_dir")
    assert str(refused.value) == (
        f"--output_dir {out}: cannot create its lock file {lock} (Read-only file system); the lock lives beside the "
        f"folder, in {tmp_path}: give a folder inside it instead (e.g. {out.resolve() / 'run1'}).")
    with pytest.raises(InputError, match="; choose a folder you can write to.$"):  # no folder to go inside
        hold_folder(tmp_path / "not-made", "--output_dir")
