#!/usr/bin/env bash
# GPU checks in one command (benchmarks/gpu_check.py has the details):
#   benchmarks/gpu_check.sh --out gpu_results            # NVIDIA GPU: cuda tests + throughput, ~4-6 min on an H100
#   benchmarks/gpu_check.sh --out /tmp/plan --dry-run    # CPU: builds and runs everything on a tiny encoder
# Python: $PYTHON, else python3 on PATH. Extra packages installed to a folder (pip install --target) go in
# PYTHONPATH as usual; the repository root is prepended here, so hf_cse needs no install.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-python3}"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
missing="$("$PY" - <<'PYEOF'
import importlib.util
need = ["torch", "transformers", "sentence_transformers", "accelerate", "datasets", "pytest", "safetensors"]
print(" ".join(n for n in need if importlib.util.find_spec(n) is None))
PYEOF
)"
if [ -n "$missing" ]; then
    echo "gpu_check: $PY lacks: $missing. Install them (e.g. pip install --target /tmp/site <wheels>) and" \
         "export PYTHONPATH=/tmp/site, or set PYTHON=/path/to/python3." >&2
    exit 2
fi
cd "$ROOT"
exec "$PY" benchmarks/gpu_check.py "$@"
