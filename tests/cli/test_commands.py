"""``python -m hf_cse COMMAND``: the dispatcher runs each command's own ``main``, names the program like the console
script, and finds the accelerate configs shipped with the package (in-process; the installed wheel is tested in
test_wheel_install.py)."""

from __future__ import annotations

import sys

import pytest
import yaml

from hf_cse.cli import commands, entry_points, parser_cache


def test_without_a_command_it_prints_the_commands_and_fails(capsys):
    assert commands.main([]) == 2
    out = capsys.readouterr().out
    for name in commands.COMMANDS:
        assert f"  {name} " in out


def test_an_unknown_command_is_one_error_line(capsys):
    assert commands.main(["fit"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("python -m hf_cse: error: unknown command 'fit'; commands: train, eval, export, config")
    assert len(err.strip().splitlines()) == 1  # the error is the last line printed, not the usage screen
    assert commands.main(["trian"]) == 2
    assert "unknown command 'trian'; did you mean train?" in capsys.readouterr().err


@pytest.mark.parametrize("command, module", [("train", "hf_cse.cli.train"), ("eval", "hf_cse.cli.evaluate"),
                                             ("export", "hf_cse.cli.export")])
def test_each_command_runs_its_module_main_under_the_console_script_name(command, module, monkeypatch, tmp_path):
    import argparse
    import importlib

    calls = []
    parser = argparse.ArgumentParser()
    parser.add_argument("--flag")
    monkeypatch.setenv("HF_CSE_CACHE", str(tmp_path))  # no parser description yet: this one is described and checked
    monkeypatch.setattr(parser_cache, "shipped_path", lambda name: tmp_path / "none" / name)
    monkeypatch.setattr(importlib.import_module(module), entry_points.PARSER_BUILDERS[command], lambda: parser)
    monkeypatch.setattr(importlib.import_module(module), "main",
                        lambda argv, prog: calls.append((argv, prog, sys.argv[0])) or 7)
    monkeypatch.setattr(sys, "argv", ["__main__.py"])
    assert commands.main([command, "--flag", "x"]) == 7
    assert calls == [(["--flag", "x"], f"hf-cse-{command}", f"hf-cse-{command}")]


def test_config_lists_the_shipped_accelerate_configs_and_prints_one_path(capsys):
    configs = commands.accelerate_configs()
    assert {"cpu_2proc", "multi_gpu", "multi_node", "fsdp", "deepspeed_zero2", "deepspeed_zero3"} <= set(configs)
    assert commands.main(["config"]) == 0
    assert len(capsys.readouterr().out.strip().splitlines()) == len(configs)
    assert commands.main(["config", "fsdp"]) == 0
    path = capsys.readouterr().out.strip()
    assert path == str(configs["fsdp"]) and yaml.safe_load(open(path))["distributed_type"] == "FSDP"
    assert commands.main(["config", "nope"]) == 2
    assert "no accelerate config 'nope'; shipped: " in capsys.readouterr().err


@pytest.mark.slow  # three interpreters
@pytest.mark.parametrize("module, usage", [("hf_cse.cli.train", "usage: hf-cse-train "),
                                           ("hf_cse.cli.evaluate", "usage: hf-cse-eval "),
                                           ("hf_cse.cli.export", "usage: hf-cse-export ")])
def test_each_command_module_run_with_python_m_runs_the_command(module, usage, tmp_path):
    """``python -m hf_cse.cli.train`` printed nothing and exited 0, even for a run's flags: a job script saw success
    and had no model. It is ``python -m hf_cse train`` now."""
    import subprocess

    shown = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0 and shown.stdout.startswith(usage), shown.stdout[-500:] + shown.stderr[-2000:]
    if module.endswith("export"):
        refused = subprocess.run([sys.executable, "-m", module, str(tmp_path / "none"), str(tmp_path / "out")],
                                 capture_output=True, text=True, timeout=120)
        assert refused.returncode != 0 and "hf-cse-export: error: CHECKPOINT" in refused.stderr
