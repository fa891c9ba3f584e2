#!/usr/bin/env bash
# The main job on a fresh machine: install what is missing, then train on the embedded defaults
# (the packaged all-MiniLM-L6-v2 on the demo corpus, GS-InfoNCE). Any arguments replace the default
# `--loss gs_infonce` and go to run_unsup.py, e.g. `scripts/train.sh --loss infonce --max_steps 10`.
set -euo pipefail
source "$(dirname "$0")/setup_env.sh"
if [ $# -eq 0 ]; then set -- --loss gs_infonce; fi
# Without a config of the user's (`accelerate config`), accelerate fills in these four values and prints a block
# saying so ("`--num_processes` was set to a value of `0`", ...): give them, as it would set them for one process
# (hf_cse chooses the precision itself, --precision). A user's own config is left to decide.
# --quiet: a run that stops with hf_cse's one-line error ends there, not in the launcher's own traceback of the
# failed subprocess (exit status 1).
LAUNCH=(--quiet)
if [ ! -f "${HF_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/huggingface}/accelerate/default_config.yaml" ]; then
    LAUNCH+=(--num_processes 1 --num_machines 1 --mixed_precision no --dynamo_backend no)
fi
exec "$PYTHON" -m accelerate.commands.launch "${LAUNCH[@]}" "$ROOT/run_unsup.py" "$@"
