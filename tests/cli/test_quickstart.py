"""The README's quick start is two commands, and they are the ones that exist: scripts/train.sh runs the main
job, scripts/test.sh the tests, .ci/run calls the test command; both install only what is missing."""

import importlib.util
import os
import re
import subprocess
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _quick_start_commands() -> list[str]:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    return [line.split("#", 1)[0].strip() for line in block.splitlines() if line.split("#", 1)[0].strip()]


def test_readme_quick_start_names_the_two_scripts_that_exist():
    commands = _quick_start_commands()
    assert commands == ["scripts/train.sh", "scripts/test.sh"]
    for command in commands:
        script = ROOT / command
        assert script.is_file() and os.access(script, os.X_OK), command
        assert "source \"$(dirname \"$0\")/setup_env.sh\"" in script.read_text()


def test_train_script_runs_the_main_job_and_test_script_the_tests():
    train = (ROOT / "scripts" / "train.sh").read_text()
    test = (ROOT / "scripts" / "test.sh").read_text()
    assert "set -- --loss gs_infonce" in train
    assert re.search(r'accelerate\.commands\.launch \S* ?"\$ROOT/run_unsup\.py"', train)
    # pytest from the repository root: no test path runs setup.cfg's testpaths (the whole suite), a path runs alone
    assert 'cd "$ROOT"' in test and '-m pytest -q "$@"' in test
    assert re.search(r"^testpaths = tests$", (ROOT / "setup.cfg").read_text(), re.M)


@pytest.mark.slow
def test_a_mistake_in_the_main_job_ends_in_its_one_line_not_the_launchers_traceback(tmp_path):
    """accelerate's launcher re-raises a failed single-process run as its own CalledProcessError traceback unless
    --quiet: the user's last line would be that traceback instead of hf_cse's error."""
    done = subprocess.run(["bash", str(ROOT / "scripts" / "train.sh"), "--loss", "infonc", "--output_dir",
                           str(tmp_path / "out")], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "HF_HOME": str(tmp_path / "hf")})  # no accelerate config of the user's
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1].startswith("run_unsup.py: error: Unknown loss 'infonc'"), done.stderr
    assert "Traceback" not in done.stderr and "CalledProcessError" not in done.stderr
    assert not (tmp_path / "out").exists()


def test_ci_calls_the_readme_test_command():
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert "scripts/test.sh" in ci and "ruff check ." in ci
    assert (ROOT / "README.md").read_text().count("scripts/test.sh") >= 2  # quick start and the Tests section


def test_setup_installs_torch_only_when_missing_then_the_project_with_dev():
    setup = (ROOT / "scripts" / "setup_env.sh").read_text()
    assert re.search(r'if ! "\$PYTHON" -c "import torch"', setup) and 'TORCH_PIN="torch==2.13.0"' in setup
    assert '-m pip install -e "$ROOT[dev]"' in setup


def _missing_requirements_module():
    spec = importlib.util.spec_from_file_location("missing_requirements", ROOT / "scripts" / "missing_requirements.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_missing_requirements_lists_absent_packages_of_the_dev_extra(monkeypatch):
    module = _missing_requirements_module()
    requires = ["torch>=2.2", "surely-not-installed-pkg>=1", 'pytest>=8; extra == "dev"',
                'absent-dev-tool; extra == "dev"', 'absent-docs-tool; extra == "docs"']
    monkeypatch.setattr(metadata, "requires", lambda name: requires)
    assert module.missing("dev") == ["surely-not-installed-pkg", "absent-dev-tool"]


def test_missing_requirements_names_the_project_when_it_is_not_installed(monkeypatch):
    module = _missing_requirements_module()

    def not_installed(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "requires", not_installed)
    assert module.missing() == ["hf_cse"]
