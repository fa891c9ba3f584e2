#!/usr/bin/env bash
# The tests on a fresh machine: install what is missing, then run the test suite. Arguments go to pytest
# (e.g. `scripts/test.sh -x -k export`, or `scripts/test.sh tests/export/test_export.py` for one file only); pytest runs from
# the repository root, so without test paths it runs setup.cfg's testpaths (tests/).
set -euo pipefail
source "$(dirname "$0")/setup_env.sh"
cd "$ROOT"
exec "$PYTHON" -m pytest -q "$@"
