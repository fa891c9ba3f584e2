#!/usr/bin/env python
"""Rewrite experiments configs of the old format into the run-description format that run.py passes to
``run_unsup.py --config`` (hf_cse/cli/run_config.py), in place; files already converted are left as they are.

    python experiments/convert_configs.py                       # every experiments/configs/*.json
    python experiments/convert_configs.py experiments/configs/new_method.json

Old: ``{"name": N, "paper": P, "regimes": [...], "truncate_dims": D, "budget": {...}, "args": {...}}`` (``name`` = the
file's name). New: ``{"about": {"paper": P, "regimes": [...], "truncate_dims": D}, **budget, **args}``: the settings
by flag name, the budget's (e.g. ``learning_rate``) among them, which win over the regime's as before; ``about`` is
for the reader and run.py.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def converted(old: dict, path: Path) -> dict:
    if old.get("name", path.stem) != path.stem:
        sys.exit(f"{path}: its name {old['name']!r} is not its file name; rename the file to {old['name']}.json first")
    clash = sorted(set(old.get("budget", {})) & set(old["args"]))
    if clash:
        sys.exit(f"{path}: {clash} both in budget and args; keep one")
    about = {"paper": old["paper"], **{k: old[k] for k in ("regimes", "truncate_dims") if k in old}}
    return {"about": about, **old.get("budget", {}), **old["args"]}


def main(paths: list[str]) -> None:
    for path in map(Path, paths or sorted((HERE / "configs").glob("*.json"))):
        config = json.loads(path.read_text())
        if "args" not in config:
            continue
        path.write_text(json.dumps(converted(config, path), indent=2) + "\n")
        print(f"converted {path}")


if __name__ == "__main__":
    main(sys.argv[1:])
