"""The fast lane (`pytest -m "not slow"`): the `slow` marker is registered in setup.cfg, and every test that starts
a subprocess (`subprocess.run` / `Popen` / `sys.executable`, in the test itself, in a function or fixture of its
module it reaches, or in a tests/ helper it imports) is marked slow, module-wide or on the test itself.

Read from the test files' syntax trees (not by collecting them), so the check runs the same alone or in the suite."""

from __future__ import annotations

import ast
import configparser
from pathlib import Path

TESTS = Path(__file__).resolve().parent
SUBPROCESS_CALLS = {"run", "Popen", "call", "check_call", "check_output"}


def _starts_a_subprocess_itself(node: ast.AST, from_subprocess: set[str]) -> bool:
    """`subprocess.run(...)`-like attributes, `sys.executable`, or a name imported from subprocess (`Popen`)."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name):
            if (sub.value.id, sub.attr) == ("sys", "executable"):
                return True
            if sub.value.id == "subprocess" and sub.attr in SUBPROCESS_CALLS:
                return True
        if isinstance(sub, ast.Name) and sub.id in from_subprocess:
            return True
    return False


def _is_fixture(fn: ast.FunctionDef) -> bool:
    return any("fixture" in ast.unparse(d) for d in fn.decorator_list)


def _mentions_slow(nodes) -> bool:
    """`pytest.mark.slow` anywhere in these expressions (a decorator, a `pytest.param(..., marks=...)`, a list)."""
    return any(isinstance(sub, ast.Attribute) and sub.attr == "slow" and ast.unparse(sub.value).endswith("mark")
               for node in nodes for sub in ast.walk(node))


class Module:
    """One tests/ file: its top-level functions (and test-class methods), fixtures, imports and slow marks."""

    def __init__(self, name: str, source: str):
        tree = ast.parse(source)
        self.name = name
        self.functions: dict[str, ast.FunctionDef] = {}
        self.fixtures: set[str] = set()
        self.tests: dict[str, tuple[ast.FunctionDef, list[ast.expr]]] = {}  # test id -> (def, class decorators)
        self.imported: dict[str, tuple[str, str]] = {}  # local name -> (module, name there)
        self.from_subprocess: set[str] = set()
        self.module_slow = False
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and node.module:
                for alias in node.names:
                    if node.module == "subprocess":
                        self.from_subprocess.add(alias.asname or alias.name)
                    else:
                        self.imported[alias.asname or alias.name] = (node.module, alias.name)
            elif isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "pytestmark" for t in node.targets):
                self.module_slow = _mentions_slow([node.value])
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.functions[node.name] = node
                if _is_fixture(node):
                    self.fixtures.add(node.name)
                elif node.name.startswith("test"):
                    self.tests[node.name] = (node, [])
            elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name.startswith("test"):
                        self.functions[f"{node.name}::{item.name}"] = item
                        self.tests[f"{node.name}::{item.name}"] = (item, node.decorator_list)
        self.references = {name: _references(fn) for name, fn in self.functions.items()}


def _references(fn: ast.FunctionDef) -> set[str]:
    """The names a function reads (calls, callbacks) and the fixtures it asks for by parameter."""
    names = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name)}
    return names | {a.arg for a in fn.args.args + fn.args.kwonlyargs}


def _subprocess_starters(modules: dict[str, Module]) -> set[tuple[str, str]]:
    """(module, function) pairs that start a subprocess, directly or through what they reach (to a fixed point)."""
    conftest = modules.get("conftest")
    starters = {(m.name, f) for m in modules.values() for f, fn in m.functions.items()
                if _starts_a_subprocess_itself(fn, m.from_subprocess)}
    changed = True
    while changed:
        changed = False
        for m in modules.values():
            for f in m.functions:
                if (m.name, f) in starters:
                    continue
                for ref in m.references[f] - {f}:
                    if ref in m.functions:
                        target = (m.name, ref)
                    elif ref in m.imported and m.imported[ref][0] in modules:  # a tests/ helper
                        target = m.imported[ref]
                    elif conftest is not None and ref in conftest.fixtures:
                        target = ("conftest", ref)
                    else:
                        continue
                    if target in starters:
                        starters.add((m.name, f))
                        changed = True
                        break
    return starters


def unmarked_subprocess_tests(sources: dict[str, str]) -> tuple[list[str], list[str]]:
    """(tests that start a subprocess, those of them not marked slow), as `module.py::test` ids."""
    modules = {name: Module(name, src) for name, src in sources.items()}
    starters = _subprocess_starters(modules)
    starting, unmarked = [], []
    for m in modules.values():
        for test_id, (fn, class_decorators) in m.tests.items():
            if (m.name, test_id) not in starters:
                continue
            starting.append(f"{m.name}.py::{test_id}")
            if not (m.module_slow or _mentions_slow(class_decorators) or _mentions_slow(fn.decorator_list)):
                unmarked.append(f"{m.name}.py::{test_id}")
    return sorted(starting), sorted(unmarked)


def test_the_slow_marker_is_registered_in_setup_cfg():
    config = configparser.ConfigParser()
    config.read(TESTS.parent / "setup.cfg")
    markers = [line.split(":")[0].strip() for line in config["tool:pytest"]["markers"].strip().splitlines()]
    assert "slow" in markers and "cuda" in markers, markers


def test_every_test_that_starts_a_subprocess_is_marked_slow():
    sources = {p.stem: p.read_text() for p in sorted(TESTS.rglob("*.py")) if "fixtures" not in p.parts}
    starting, unmarked = unmarked_subprocess_tests(sources)
    # the check sees through helpers and fixtures: the distributed comparison starts its launches in a fixture
    assert "test_distributed.py::test_two_processes_equal_one_process" in starting, starting
    assert unmarked == [], f"start a subprocess but are not marked @pytest.mark.slow: {unmarked}"


def test_the_check_finds_an_unmarked_subprocess_through_a_fixture_and_a_helper():
    helper = "import subprocess\n\ndef launch():\n    return subprocess.Popen(['true'])\n"
    module = '''
import sys

import pytest
from fake_helper import launch


@pytest.fixture
def proc():
    return launch()


def _python():
    return [sys.executable, "-c", "pass"]


def test_fixture(proc):
    pass


def test_helper():
    _python()


@pytest.mark.slow
def test_marked(proc):
    pass


@pytest.mark.parametrize("x", [1, pytest.param(2, marks=pytest.mark.slow)])
def test_some_params_marked(x):
    _python()


def test_pure():
    assert 1 + 1 == 2
'''
    starting, unmarked = unmarked_subprocess_tests({"fake_helper": helper, "test_fake": module})
    assert starting == ["test_fake.py::test_fixture", "test_fake.py::test_helper", "test_fake.py::test_marked",
                        "test_fake.py::test_some_params_marked"]
    assert unmarked == ["test_fake.py::test_fixture", "test_fake.py::test_helper"]
    marked = unmarked_subprocess_tests({"test_fake": "import pytest\n\npytestmark = pytest.mark.slow\n" + module})
    assert marked[1] == []
