"""A command whose Hub access fails for want of a network (no connection, a timeout, transformers' "couldn't
connect" OSError, huggingface_hub's HTTP client errors) ends in one line naming the failure and what to do, not in a
traceback of the HTTP client; so does one whose write ran out of disk space, or whose save's write was refused (a
read-only file system, no permission, a file where a folder goes), saying what was kept; any other exception is still
a bug with its traceback."""

from __future__ import annotations

import errno

import httpx2
import pytest

from hf_cse.cli import run_cli, say_when_stopped
from hf_cse.errors import disk_full, network_failure, saving_files


def _raising(err: BaseException):
    def main():
        raise err
    return main


@pytest.mark.parametrize("err", [
    httpx2.ConnectError("[Errno -2] Name or service not known"),
    OSError("We couldn't connect to 'https://huggingface.co' to load the files, and couldn't find them in the cache"),
    TimeoutError("timed out"),
])
def test_a_network_failure_is_one_line(err, capsys, monkeypatch):
    monkeypatch.delenv("HF_CSE_DEBUG", raising=False)
    assert run_cli(_raising(err), "prog") == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("prog: error: the Hugging Face Hub could not be reached (")
    assert type(err).__name__ in lines[0] and "HF_HUB_OFFLINE=1" in lines[0]


def test_the_line_says_what_the_command_keeps(capsys, monkeypatch):
    monkeypatch.delenv("HF_CSE_DEBUG", raising=False)

    def main():
        say_when_stopped(lambda: "the run's model is saved in out/.")
        # the network failure as the cause of another error
        raise RuntimeError("upload failed") from httpx2.ConnectError("refused")

    assert run_cli(main, "prog") == 1
    assert capsys.readouterr().err.strip().endswith("the run's model is saved in out/.")


@pytest.mark.parametrize("err", [
    OSError(28, "No space left on device"),  # errno ENOSPC
    RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 33536 vs 33424"),  # torch.save's writer
    ValueError("Error while serializing: No space left on device (os error 28)"),  # safetensors' error, as text
])
def test_a_full_disk_is_one_line_saying_what_is_kept(err, capsys, monkeypatch):
    monkeypatch.delenv("HF_CSE_DEBUG", raising=False)

    def main():
        say_when_stopped(lambda: "out/checkpoint-4 is kept: the same command resumes from it.")
        raise RuntimeError("checkpoint save failed") from err

    assert run_cli(main, "prog") == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("prog: error: the disk is full, or a file could not be written "
                                                   f"whole ({type(err).__name__}: ")
    assert lines[0].endswith("Free space, or write to a folder on another disk; out/checkpoint-4 is kept: the same "
                             "command resumes from it.")


@pytest.mark.parametrize("err, fix", [
    (OSError(errno.EROFS, "Read-only file system", "out/checkpoint-6"), "remount its file system read-write"),
    (PermissionError(errno.EACCES, "Permission denied", "out/checkpoint-6"), "writable for you (its permissions)"),
    (FileExistsError(errno.EEXIST, "File exists", "out/checkpoint-6"), "move aside what takes that path"),
    (NotADirectoryError(errno.ENOTDIR, "Not a directory", "out/checkpoint-6/x"), "move aside the file"),
])
def test_a_refused_write_of_a_save_is_one_line_saying_what_is_kept(err, fix, capsys, monkeypatch):
    """Before: a run whose folder turned read-only (or unwritable, or a file where checkpoint-6 goes) ended in a
    23-frame traceback, without saying that checkpoint-4 is kept and the same command resumes from it."""
    monkeypatch.delenv("HF_CSE_DEBUG", raising=False)

    def main():
        say_when_stopped(lambda: "out/checkpoint-4 is kept: the same command resumes from it.")
        with saving_files():
            raise RuntimeError("checkpoint save failed") from err

    assert run_cli(main, "prog") == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"prog: error: the save could not write its files "
                                                   f"({type(err).__name__}: [Errno {err.errno}] {err.strerror}: "
                                                   f"'out/checkpoint-6"), lines
    assert fix in lines[0] and lines[0].endswith("; out/checkpoint-4 is kept: the same command resumes from it.")


def test_a_refused_read_keeps_its_traceback(monkeypatch):
    """The same errno outside a save (reading a file without permission) is not said to be a save's."""
    monkeypatch.delenv("HF_CSE_DEBUG", raising=False)
    with pytest.raises(PermissionError):
        run_cli(_raising(PermissionError(errno.EACCES, "Permission denied", "data/train.txt")), "prog")


def test_other_errors_keep_their_traceback(monkeypatch):
    monkeypatch.delenv("HF_CSE_DEBUG", raising=False)
    with pytest.raises(OSError, match="disk full"):
        run_cli(_raising(OSError("disk full")), "prog")
    with pytest.raises(KeyError):
        run_cli(_raising(KeyError("x")), "prog")
    assert network_failure(ValueError("no")) is None and disk_full(OSError("disk full?")) is None
