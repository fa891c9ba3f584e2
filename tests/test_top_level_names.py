"""The Python API at the top level: ``hf_cse.ContrastiveTrainer``, its arguments and every method's model class
resolve (loaded on first use, PEP 562), and ``import hf_cse`` itself stays light: no torch, no trainer."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

import hf_cse

INIT = Path(__file__).resolve().parents[1] / "hf_cse" / "__init__.py"
#: what the package docstring and README's Python API show at the top level
API = ("ContrastiveTrainer", "ContrastiveTrainingArguments", "SimCSEModel", "ImSimCSEModel", "DiffCSEModel",
       "PromptBERTModel", "ESimCSEModel", "METHODS", "get_method", "losses", "models")


def test_the_trainer_its_arguments_and_every_method_model_are_top_level_names():
    from hf_cse.models import METHODS
    from hf_cse.trainer import ContrastiveTrainer
    from hf_cse.training_args import ContrastiveTrainingArguments

    assert set(API) <= set(hf_cse.__all__) and set(API) <= set(dir(hf_cse))
    for name in hf_cse.__all__:
        assert getattr(hf_cse, name) is not None, name
    assert hf_cse.ContrastiveTrainer is ContrastiveTrainer
    assert hf_cse.ContrastiveTrainingArguments is ContrastiveTrainingArguments
    for cls in METHODS.values():  # the package's, and a method added since: no line in hf_cse/__init__.py
        assert getattr(hf_cse, cls.__name__) is cls
    for name in API:
        assert f"``{name}" in hf_cse.__doc__, name
    with pytest.raises(AttributeError, match="module 'hf_cse' has no attribute 'Trainer'"):
        hf_cse.Trainer  # noqa: B018
    with pytest.raises(AttributeError, match="module 'hf_cse' has no attribute 'BertModel'"):
        hf_cse.BertModel  # noqa: B018  (a model class, of no method)


def test_the_package_imports_only_the_standard_library_when_imported():
    """Read from its syntax tree: the names are imported where they are first used, not by ``import hf_cse``."""
    top = [node for node in ast.parse(INIT.read_text(encoding="utf-8")).body
           if isinstance(node, (ast.Import, ast.ImportFrom))]
    imported = {alias.name for node in top if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module for node in top if isinstance(node, ast.ImportFrom)}
    assert imported <= {"__future__", "importlib"}


@pytest.mark.slow  # a fresh interpreter
def test_import_hf_cse_loads_no_torch_until_a_name_is_used():
    code = ("import json, sys; import hf_cse; heavy = ('torch', 'transformers', 'hf_cse.trainer', 'hf_cse.models');"
            "before = [m for m in heavy if m in sys.modules]; hf_cse.ContrastiveTrainer;"
            "print(json.dumps([before, [m for m in heavy if m in sys.modules]]))")
    root = str(INIT.parents[1])
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root, check=True,
                         env={"PYTHONPATH": root, "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"})
    before, after = json.loads(out.stdout.splitlines()[-1])
    assert before == [] and {"torch", "hf_cse.trainer"} <= set(after)
