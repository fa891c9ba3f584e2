"""Print the names of hf_cse's requirements (with the ``dev`` extra) that are not installed; nothing when all are.
An install whose console scripts are not those of ``setup.cfg`` (installed before they changed) counts as missing
too, so that ``hf-cse-train`` runs what the checkout declares.

Only presence is checked, not versions: ``pip install -e ".[dev]"`` settles versions when anything is missing.
Standard library only, so it runs on a bare Python before anything is installed.
"""

import configparser
import re
import sys
from importlib import metadata
from pathlib import Path

SETUP_CFG = Path(__file__).resolve().parents[1] / "setup.cfg"


def stale_console_scripts() -> bool:
    """Whether the installed hf_cse's console scripts differ from those ``setup.cfg`` declares."""
    config = configparser.ConfigParser()
    config.read(SETUP_CFG)
    declared = config.get("options.entry_points", "console_scripts", fallback="")
    wanted = {name.strip(): target.strip() for name, _, target in
              (line.partition("=") for line in declared.splitlines() if "=" in line)}
    try:
        installed = {e.name: e.value for e in metadata.distribution("hf_cse").entry_points
                     if e.group == "console_scripts"}
    except metadata.PackageNotFoundError:
        return False  # reported as missing
    return installed != wanted


def missing(extra: str = "dev") -> list[str]:
    try:
        requirements = metadata.requires("hf_cse") or []
    except metadata.PackageNotFoundError:
        return ["hf_cse"]
    names = []
    for requirement in requirements:
        spec, _, marker = requirement.partition(";")
        if marker and f'extra == "{extra}"' not in marker.replace("'", '"'):
            continue
        name = re.match(r"[A-Za-z0-9_.\-]+", spec.strip()).group(0)
        try:
            metadata.version(name)
        except metadata.PackageNotFoundError:
            names.append(name)
    return names


if __name__ == "__main__":
    names = missing(*sys.argv[1:])
    if not names and stale_console_scripts():
        names = ["hf_cse (its console scripts changed)"]
    print(" ".join(names))
