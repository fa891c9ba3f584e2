"""The package's shape, read from its source with ``ast`` (nothing imported): the library never imports the command
line (``hf_cse.cli``), and no modules import each other in a loop, function-level imports included."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "hf_cse"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, modules: set[str]) -> set[str]:
    """The hf_cse modules ``path`` imports anywhere in its body (``from . import x`` counts as module ``x`` when
    that is a module, else as the package)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                found.add(f"{target}.{alias.name}" if f"{target}.{alias.name}" in modules else target)
    return {m for m in found if m in modules and m != name}


def import_graph() -> dict[str, set[str]]:
    files = [p for p in PACKAGE.rglob("*.py")]
    modules = {module_name(p) for p in files}
    return {module_name(p): imports_of(p, modules) for p in files}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_import_graph_is_read():
    graph = import_graph()
    assert "hf_cse.cli.train" in graph and "hf_cse.trainer" in graph["hf_cse.cli.train"]
    assert "hf_cse.checks" in graph["hf_cse.cli.preflight"]


def test_the_library_never_imports_the_command_line():
    graph = import_graph()
    # __main__ modules (python -m hf_cse, python -m hf_cse.export) are entry points: command line, not library
    library = {m for m in graph if not (m.startswith("hf_cse.cli") or m.endswith("__main__"))}
    offenders = {m: sorted(t for t in graph[m] if t.startswith("hf_cse.cli")) for m in library}
    assert not {m: t for m, t in offenders.items() if t}


def test_no_import_cycles():
    assert cycles(import_graph()) == []


def test_a_loop_is_found():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


TESTS = Path(__file__).resolve().parent
#: tests/ folders that are not a part of hf_cse: checks of the benchmark and experiment scripts, data the tests read
NOT_PACKAGE_PARTS = {"bench": PACKAGE.parent / "benchmarks", "fixtures": None}


def test_test_folders_mirror_the_package_and_file_names_are_unique():
    """Each tests/ folder is named after the part of hf_cse it tests (a subpackage, or a module for the trainer and
    the data), so a change's tests are found where its code is; the files at tests/ itself are about the whole
    package. File names are unique across folders: pytest imports test files by their name (no __init__.py)."""
    folders = sorted(p for p in TESTS.iterdir() if p.is_dir() and not p.name.startswith((".", "__")))
    assert folders, "no test folders"
    for folder in folders:
        if folder.name in NOT_PACKAGE_PARTS:
            target = NOT_PACKAGE_PARTS[folder.name]
            assert target is None or target.is_dir(), folder
            continue
        part = PACKAGE / folder.name
        assert part.is_dir() or part.with_suffix(".py").is_file(), f"tests/{folder.name}/ names no part of hf_cse"
    names = [p.name for p in TESTS.rglob("test_*.py") if "fixtures" not in p.parts]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
