"""Print the names of hf_cse's requirements (with the ``dev`` extra) that are not installed; nothing when all are.
An install whose console scripts are not those of ``setup.cfg`` (installed before they changed) counts as missing
too, so that ``hf-cse-train`` runs what the checkout declares.

Only presence is checked, not versions: ``pip install -e ".[dev]"`` settles versions when anything is missing.
Standard library only, so it runs on a bare Python before anything is installed.
"""

import configparser
import importlib.util
import re
import sys
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SETUP_CFG = ROOT / "setup.cfg"


def installed_elsewhere() -> Path | None:
    """The checkout whose hf_cse the installed one is, where it is not this one (an editable install of another
    clone): the console commands (``hf-cse-train`` ...) run that code, while ``python run_unsup.py`` and the tests
    run this checkout's. None where the installed hf_cse is this checkout's, or none is installed."""
    spec = importlib.util.find_spec("hf_cse")  # this script's folder is scripts/: the installed hf_cse is found
    if spec is None or not spec.origin:
        return None
    folder = Path(spec.origin).resolve().parents[1]
    return None if folder == ROOT else folder


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
    if sys.argv[1:] == ["--elsewhere"]:
        print(installed_elsewhere() or "")
        sys.exit()
    names = missing(*sys.argv[1:])
    if not names and stale_console_scripts():
        names = ["hf_cse (its console scripts changed)"]
    print(" ".join(names))
