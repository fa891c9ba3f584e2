"""The tool after ``pip install``: the wheel built from the repository holds the command line (hf-cse-train,
hf-cse-eval, hf-cse-export, ``python -m hf_cse``), the commands' parser descriptions and the accelerate configs, and,
installed into an isolated virtual environment, answers ``--help`` on its first start without importing torch, and
trains two steps and scores the result from a folder outside the repository."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest
from helpers import random_sentences, scored_pairs_file

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]


def _run(cmd, cwd, env, timeout=600) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{cmd}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The wheel (built without network: no build isolation) installed into a fresh venv. The venv sees this
    machine's packages (torch, transformers, ...) but hf_cse only from the wheel: it is installed into the venv's
    own site-packages, which comes first."""
    tmp = tmp_path_factory.mktemp("wheel")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1", OMP_NUM_THREADS="1",
               CUDA_VISIBLE_DEVICES="", PIP_DISABLE_PIP_VERSION_CHECK="1")
    # built from a copy of the files git sees: a checkout's build/ folder can hold modules removed since, which
    # setuptools would put in the wheel
    source = tmp / "source"
    listed = _run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO, env=env).stdout
    for name in filter(None, listed.split("\0")):
        if (REPO / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, source / name)
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", tmp / "dist",
          source], cwd=tmp, env=env)
    (wheel,) = (tmp / "dist").glob("hf_cse-*.whl")
    venv.EnvBuilder(system_site_packages=True, with_pip=True).create(tmp / "venv")  # ensurepip: no download
    python = tmp / "venv" / "bin" / "python"
    _run([python, "-m", "pip", "install", "--no-deps", "--no-index", "-q", wheel], cwd=tmp, env=env)
    elsewhere = tmp / "elsewhere"
    elsewhere.mkdir()
    return wheel, python, elsewhere, env


def test_wheel_holds_the_command_line_and_the_accelerate_configs(installed):
    wheel = installed[0]
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        entry_points = next(zf.read(n).decode() for n in names if n.endswith("entry_points.txt"))
    for module in ("hf_cse/__main__.py", "hf_cse/cli/train.py", "hf_cse/cli/evaluate.py", "hf_cse/cli/export.py",
                   "hf_cse/configs/accelerate/fsdp.yaml", "hf_cse/configs/accelerate/multi_gpu.yaml",
                   "hf_cse/cli/parsers/train.json", "hf_cse/cli/parsers/eval.json", "hf_cse/cli/parsers/export.json"):
        assert module in names, module
    for script, target in (("hf-cse-train", "hf_cse.cli.entry_points:train"),
                           ("hf-cse-eval", "hf_cse.cli.entry_points:evaluate"),
                           ("hf-cse-export", "hf_cse.cli.entry_points:export")):
        assert f"{script} = {target}" in entry_points, entry_points


def test_a_fresh_install_answers_help_from_its_shipped_parser_descriptions(installed, tmp_path):
    from hf_cse.cli import parser_cache

    if parser_cache.shipped_parser("train") is None:
        pytest.skip("the shipped parser descriptions were made with another Python, transformers or torch")
    _, python, elsewhere, env = installed
    env = {**env, "HF_CSE_CACHE": str(tmp_path / "empty_cache"), "COLUMNS": "100"}
    probe = ("import runpy, sys; sys.argv = ['hf_cse', 'train', '--help']\n"
             "try:\n    runpy.run_module('hf_cse', run_name='__main__', alter_sys=True)\n"
             "except SystemExit:\n    pass\n"
             "print('imported torch:', 'torch' in sys.modules, 'from', sys.modules['hf_cse'].__file__)")
    out = _run([python, "-c", probe], cwd=elsewhere, env=env).stdout
    assert "--learning_rate" in out and "imported torch: False from " + str(python.parents[1]) in out, out[-500:]
    assert not (tmp_path / "empty_cache").exists()  # nothing had to be written down


def test_installed_package_trains_and_scores_from_outside_the_repository(installed, tiny_bert_dir):
    wheel, python, elsewhere, env = installed
    bin_dir = python.parent
    where = _run([python, "-c", "import hf_cse; print(hf_cse.__file__)"], elsewhere, env).stdout.strip()
    assert Path(where).is_relative_to(python.parents[1]), f"hf_cse imported from {where}, not the venv"
    config = Path(_run([python, "-m", "hf_cse", "config", "fsdp"], elsewhere, env).stdout.strip())
    assert config.is_file() and config.is_relative_to(python.parents[1])

    # the console scripts, as pip writes them: they run the venv's python with the installed package
    (elsewhere / "train.txt").write_text("\n".join(random_sentences(40)) + "\n")
    proc = _run([bin_dir / "hf-cse-train", "--model_name_or_path", tiny_bert_dir, "--train_file", "train.txt",
                 "--output_dir", "run", "--max_steps", "2", "--per_device_train_batch_size", "8",
                 "--max_seq_length", "16", "--disable_tqdm", "true", "--use_cpu", "true"], elsewhere, env)
    assert "Traceback" not in proc.stderr
    state = (elsewhere / "run" / "trainer_state.json").read_text()
    assert '"global_step": 2' in state
    assert (elsewhere / "run" / "sentence-transformers" / "modules.json").is_file()

    scored_pairs_file(elsewhere / "dev.tsv", 12, 4, seed=3)
    _run([bin_dir / "hf-cse-eval", "--model_name_or_path", "run", "--tasks", "none", "--eval_file", "dev.tsv",
          "--output_dir", "scores", "--disable_tqdm"], elsewhere, env)
    assert (elsewhere / "scores" / "results.json").is_file()
    # python -m hf_cse export: the same command as hf-cse-export
    _run([python, "-m", "hf_cse", "export", "run", "exported"], elsewhere, env)
    assert (elsewhere / "exported" / "modules.json").is_file()
