#!/usr/bin/env python
"""Write the commands' parser descriptions into the package (hf_cse/cli/parsers/<command>.json), so that `--help`
and the refusals of the command line answer at once from a fresh install's first start on
(hf_cse/cli/parser_cache.py). Run it after changing anything in hf_cse/ and commit the files with the change:
tests/cli/test_shipped_parsers.py fails while they are out of date.

    python scripts/write_parser_descriptions.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's hf_cse, wherever it is installed

from hf_cse.cli.entry_points import ship_parsers  # noqa: E402

if __name__ == "__main__":
    for path in ship_parsers():
        print(f"wrote {path.relative_to(Path(__file__).resolve().parents[1])}")
