"""The README's commands run as written, so the README cannot drift from the code.

Convention (visible in README.md): every ```bash block is preceded by an HTML comment saying what this test does
with it, ``<!-- readme-test: run; writes: PATH ... -->`` (run it; the paths, relative to the repository root,
must exist afterwards) or ``<!-- readme-test: skip: REASON -->`` (GPU, Hub download, the whole suite, ...). A
```python block marked ``run`` runs too; unmarked python blocks are left to their own tests
(tests/trainer/test_python_api.py).
The blocks marked ``run`` run in README order (a later one may use an earlier one's output) with bash, from a copy
of the repository's files (tracked and untracked, not ignored) beside a link to ``../shared``, so the repository
stays clean.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers import hang_timeout

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
MARKER = re.compile(r"<!-- readme-test: (?:(run)(?:; writes: (.+?))?|skip: (.+?)) -->")
FENCE = re.compile(r"^( *)```(\w*)\s*$")


@dataclass
class Block:
    line: int  # 1-based line of the opening fence
    language: str
    code: str
    marker: str | None  # "run", "skip" or None
    writes: tuple[str, ...] = ()
    reason: str = ""


def readme_blocks(text: str) -> list[Block]:
    """Every fenced block of ``text`` with the marker comment on the nearest non-empty line above it."""
    lines, blocks, i = text.splitlines(), [], 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        indent, language = opening.groups()
        end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == "```")
        code = "\n".join(line[len(indent):] for line in lines[i + 1:end])
        above = next((lines[j].strip() for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        found = MARKER.fullmatch(above)
        block = Block(i + 1, language, code, None)
        if found:
            run, writes, reason = found.groups()
            block.marker = "run" if run else "skip"
            block.writes = tuple((writes or "").split())
            block.reason = reason or ""
        blocks.append(block)
        i = end + 1
    return blocks


BLOCKS = readme_blocks((ROOT / "README.md").read_text(encoding="utf-8"))
TO_RUN = [b for b in BLOCKS if b.marker == "run"]


def test_every_bash_block_says_whether_it_runs():
    unmarked = [b.line for b in BLOCKS if b.language == "bash" and b.marker is None]
    assert not unmarked, f"README.md lines {unmarked}: a ```bash block without <!-- readme-test: run|skip: ... -->"
    assert all(b.reason.strip() for b in BLOCKS if b.marker == "skip")
    assert all(b.language in ("bash", "python") for b in TO_RUN)
    assert any(b.language == "bash" for b in TO_RUN)  # the main job at least


def test_markers_are_read():
    text = ("<!-- readme-test: run; writes: a/b c -->\n```bash\necho hi\n```\n\n<!-- readme-test: skip: GPU -->\n\n"
            "  ```bash\n  nvidia-smi\n  ```\n```python\nx = 1\n```\n")
    run, skip, plain = readme_blocks(text)
    assert (run.marker, run.writes, run.code) == ("run", ("a/b", "c"), "echo hi")
    assert (skip.marker, skip.reason, skip.code, skip.line) == ("skip", "GPU", "nvidia-smi", 8)
    assert plain.marker is None and plain.language == "python"


def _copy_of_the_repository(dest: Path) -> Path:
    """``dest/repo``: the files a clone with this checkout's changes holds, beside ``dest/shared`` (a link)."""
    repo = dest / "repo"
    (dest / "shared").symlink_to(SHARED)
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True)
    if listed.returncode != 0:  # not a git checkout (an unpacked archive): everything but what runs write
        shutil.copytree(ROOT, repo, ignore=shutil.ignore_patterns("outputs", "__pycache__", ".pytest_cache"))
        return repo
    for name in filter(None, listed.stdout.decode().split("\0")):
        src = ROOT / name
        if src.is_file():  # a deleted tracked file is still listed
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, repo / name)
    return repo


def _status() -> str:
    """The repository's files as git sees them, ignored ones included ("" outside a git checkout)."""
    return subprocess.run(["git", "status", "--porcelain", "--ignored", "--untracked-files=all"], cwd=ROOT,
                          capture_output=True, text=True).stdout


@pytest.mark.slow
@pytest.mark.skipif(not (SHARED / "data").is_dir(), reason="the README's evaluation reads ../shared/data")
def test_readme_blocks_marked_run_run_and_write_what_they_promise(tmp_path):
    before = _status()
    repo = _copy_of_the_repository(tmp_path)
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1",
               TOKENIZERS_PARALLELISM="false", PYTHONPATH=str(repo))
    for block in TO_RUN:
        cmd = ["bash", "-euo", "pipefail", "-c", block.code] if block.language == "bash" else \
            [sys.executable, "-c", block.code]
        try:
            done = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True,
                                  timeout=hang_timeout(600))
        except subprocess.TimeoutExpired:
            pytest.fail(f"README.md line {block.line}: still running after {hang_timeout(600):.0f} s")
        assert done.returncode == 0, f"README.md line {block.line} exited {done.returncode}:\n{done.stderr[-3000:]}"
        missing = [path for path in block.writes if not (repo / path).exists()]
        assert not missing, f"README.md line {block.line} did not write {missing}"
    assert _status() == before  # the repository itself is untouched: nothing written there, ignored files included
