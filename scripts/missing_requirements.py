"""Print the names of hf_cse's requirements (with the ``dev`` extra) that are not installed; nothing when all are.

Only presence is checked, not versions: ``pip install -e ".[dev]"`` settles versions when anything is missing.
Standard library only, so it runs on a bare Python before anything is installed.
"""

import re
import sys
from importlib import metadata


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
    print(" ".join(missing(*sys.argv[1:])))
