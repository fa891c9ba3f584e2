"""scripts/setup_env.sh picks the torch build as the README says: without a GPU the CPU build from the PyTorch CPU
index, the default index (with a warning) when that index cannot be reached, the default (CUDA) build with an NVIDIA
GPU; nothing when torch imports. Run with a stand-in python (records its pip calls) and a stand-in nvidia-smi."""

import os
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # bash subprocesses

ROOT = Path(__file__).resolve().parents[1]

# -c "import torch": exit $TORCH_IMPORTS; -c "<the index probe>": exit $INDEX_REACHABLE; -m pip ...: record the
# arguments; scripts/missing_requirements.py: nothing missing
FAKE_PYTHON = """#!/usr/bin/env bash
case "$1 $2" in
  "-c import torch") exit "$TORCH_IMPORTS" ;;
  "-m pip") shift 2; echo "$*" >> "$PIP_CALLS"; exit 0 ;;
esac
if [ "$1" = "-c" ]; then exit "$INDEX_REACHABLE"; fi
exit 0
"""


def _setup(tmp_path, torch_imports: bool, gpu: bool, index_reachable: bool) -> tuple[str, list[str]]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    python = bin_dir / "python"
    python.write_text(FAKE_PYTHON)
    python.chmod(0o755)
    if gpu:
        smi = bin_dir / "nvidia-smi"
        smi.write_text("#!/usr/bin/env bash\necho 'GPU 0: NVIDIA H100'\n")
        smi.chmod(0o755)
    calls = tmp_path / "pip_calls"
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "PYTHON": str(python), "PIP_CALLS": str(calls),
           "TORCH_IMPORTS": "0" if torch_imports else "1", "INDEX_REACHABLE": "0" if index_reachable else "1",
           "HOME": os.environ.get("HOME", "/tmp")}
    out = subprocess.run(["bash", "-c", f'source "{ROOT}/scripts/setup_env.sh"'], env=env, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout, calls.read_text().splitlines() if calls.exists() else []


def test_no_gpu_installs_the_cpu_build_from_the_pytorch_cpu_index(tmp_path):
    said, pip = _setup(tmp_path, torch_imports=False, gpu=False, index_reachable=True)
    assert pip == ["install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu"]
    assert "no GPU found; installing the CPU build" in said


def test_unreachable_cpu_index_falls_back_to_the_default_index_with_a_warning(tmp_path):
    said, pip = _setup(tmp_path, torch_imports=False, gpu=False, index_reachable=False)
    assert pip == ["install torch==2.13.0"]
    assert "WARNING: https://download.pytorch.org/whl/cpu cannot be reached" in said and "CUDA build" in said


def test_a_gpu_gets_the_default_build(tmp_path):
    said, pip = _setup(tmp_path, torch_imports=False, gpu=True, index_reachable=True)
    assert pip == ["install torch==2.13.0"]
    assert "NVIDIA GPU is present" in said


def test_an_importable_torch_is_kept(tmp_path):
    said, pip = _setup(tmp_path, torch_imports=True, gpu=False, index_reachable=True)
    assert pip == [] and said == ""


def test_console_scripts_installed_before_setup_cfg_changed_them_count_as_missing(monkeypatch):
    """An editable install made before setup.cfg's console scripts changed keeps the old ones: setup_env.sh then
    reinstalls, so that hf-cse-train runs what the checkout declares."""
    import importlib.util
    from importlib import metadata

    spec = importlib.util.spec_from_file_location("missing_requirements", ROOT / "scripts" / "missing_requirements.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)

    def installed(scripts):
        entry_points = [metadata.EntryPoint(name, target, "console_scripts") for name, target in scripts.items()]
        return type("Dist", (), {"entry_points": entry_points})()

    import configparser

    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    declared = {n.strip(): t.strip() for n, _, t in (line.partition("=") for line in
                config.get("options.entry_points", "console_scripts").splitlines() if "=" in line)}
    monkeypatch.setattr(script.metadata, "distribution", lambda name: installed(declared))
    assert not script.stale_console_scripts()
    older = {**declared, "hf-cse-train": "hf_cse.cli.train:main"}
    monkeypatch.setattr(script.metadata, "distribution", lambda name: installed(older))
    assert script.stale_console_scripts()


def test_an_hf_cse_installed_from_another_checkout_is_named(monkeypatch, tmp_path):
    """A clone beside an editable install of another checkout: its commands (hf-cse-train) ran the other checkout's
    code, and setup_env.sh said nothing; now it names that checkout (installing nothing: the other would lose them)."""
    import importlib.util
    from types import SimpleNamespace

    spec = importlib.util.spec_from_file_location("missing_requirements", ROOT / "scripts" / "missing_requirements.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    other = tmp_path / "other_clone"
    (other / "hf_cse").mkdir(parents=True)
    found = {"hf_cse": SimpleNamespace(origin=str(other / "hf_cse" / "__init__.py"))}
    monkeypatch.setattr(script.importlib.util, "find_spec", lambda name: found.get(name))
    assert script.installed_elsewhere() == other.resolve()
    found["hf_cse"] = SimpleNamespace(origin=str(ROOT / "hf_cse" / "__init__.py"))  # this checkout's own install
    assert script.installed_elsewhere() is None
    found.clear()  # not installed: reported as missing instead
    assert script.installed_elsewhere() is None
