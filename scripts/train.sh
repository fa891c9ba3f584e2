#!/usr/bin/env bash
# The main job on a fresh machine: install what is missing, then train on the embedded defaults
# (the packaged all-MiniLM-L6-v2 on the demo corpus, GS-InfoNCE). Any arguments replace the default
# `--loss gs_infonce` and go to run_unsup.py, e.g. `scripts/train.sh --loss infonce --max_steps 10`.
set -euo pipefail
source "$(dirname "$0")/setup_env.sh"
if [ $# -eq 0 ]; then set -- --loss gs_infonce; fi
exec "$PYTHON" -m accelerate.commands.launch "$ROOT/run_unsup.py" "$@"
