#!/usr/bin/env bash
# The tests on a fresh machine: install what is missing, then run the test suite. Arguments go to pytest
# (e.g. `scripts/test.sh -x -k export`).
set -euo pipefail
source "$(dirname "$0")/setup_env.sh"
exec "$PYTHON" -m pytest -q "$ROOT/tests" "$@"
