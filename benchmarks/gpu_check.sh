#!/usr/bin/env bash
# GPU checks in one command (benchmarks/gpu_check.py has the details):
#   benchmarks/gpu_check.sh --out gpu_results            # NVIDIA GPU: the default parts, at most ~10 min
#   benchmarks/gpu_check.sh --out /tmp/plan --dry-run    # CPU: builds and runs everything on a tiny encoder
# Python: $PYTHON, else python3 on PATH. Extra packages installed to a folder (pip install --target) go in
# PYTHONPATH as usual; the repository root is prepended here, so hf_cse needs no install.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-python3}"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
problem="$("$PY" - <<'PYEOF'
import importlib.util
need = ["torch", "transformers", "sentence_transformers", "accelerate", "datasets", "pytest", "safetensors"]
missing = [n for n in need if importlib.util.find_spec(n) is None]
if missing:
    print("lacks " + ", ".join(missing))
else:
    try:
        import hf_cse  # noqa: F401
    except Exception as exc:
        import transformers
        print(f"cannot import hf_cse with transformers {transformers.__version__} ({type(exc).__name__}: {exc}); "
              "hf_cse needs transformers >= 5.20")
PYEOF
)"
if [ -n "$problem" ]; then
    echo "gpu_check: $PY $problem. Install the wheels to a folder (pip install --no-deps --target /tmp/site ...)" \
         "and export PYTHONPATH=/tmp/site, or set PYTHON=/path/to/python3." >&2
    exit 2
fi
cd "$ROOT"
exec "$PY" benchmarks/gpu_check.py "$@"
