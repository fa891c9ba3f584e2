"""A process killed inside mteb (SIGKILL, out of memory) left its hidden staging folder in mteb_results_dir for
good; the next evaluation into that folder on the same machine removes it (its results never reached the folder),
and leaves the staging folders of running processes, of other machines and of unknown form alone."""

from __future__ import annotations

import logging
import os

from hf_cse.evaluation import mteb_staging
from hf_cse.evaluation.mteb_staging import STAGING_PREFIX, make_staging_folder

GONE = 99_999_999  # above any pid_max (at most 2**22): no process has it


def test_the_next_evaluation_removes_only_a_killed_processs_staging_folder(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(mteb_staging.socket, "gethostname", lambda: "node-7")
    killed = tmp_path / f"{STAGING_PREFIX}node_7-{GONE}-abc123"
    running = tmp_path / f"{STAGING_PREFIX}node_7-{os.getpid()}-def456"
    other_machine = tmp_path / f"{STAGING_PREFIX}node_8-{GONE}-ghi789"
    unknown_form = tmp_path / f"{STAGING_PREFIX}{GONE}-jkl012"  # no machine named: whose it is cannot be told
    for folder in (killed, running, other_machine, unknown_form):
        (folder / "results" / "me__m" / "local").mkdir(parents=True)
        (folder / "results" / "me__m" / "local" / "STSBenchmark.json").write_text("{}")
    a_file = tmp_path / f"{STAGING_PREFIX}node_7-{GONE}-file"  # not a folder: nobody's staging
    a_file.write_text("mine")
    with caplog.at_level(logging.INFO, logger="hf_cse.evaluation.mteb_staging"):
        new = make_staging_folder(tmp_path)
    assert not killed.exists()
    assert all(p.is_dir() for p in (running, other_machine, unknown_form)) and a_file.read_text() == "mine"
    assert new.is_dir() and new.name.startswith(f"{STAGING_PREFIX}node_7-{os.getpid()}-") and not any(new.iterdir())
    assert [r.getMessage() for r in caplog.records] == [
        f"removed {killed.name}, the staging folder of an MTEB evaluation killed before it finished (process {GONE}): "
        f"its results never reached {tmp_path}"]
    make_staging_folder(tmp_path)  # this process's own folder is a running process's
    assert new.is_dir()
