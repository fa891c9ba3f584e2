# Sourced by scripts/train.sh and scripts/test.sh: installs only what is missing, so a second call is instant.
# torch first, and only when it is not importable: the CPU wheel pinned here (a bare `torch` requirement would
# pull a multi-GB CUDA build). With a GPU, install your own torch before and it is kept.
PYTHON=${PYTHON:-python}
TORCH_PIN="torch==2.13.0"
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

if ! "$PYTHON" -c "import torch" 2>/dev/null; then
    echo "setup: torch is not importable; installing the CPU wheel $TORCH_PIN"
    "$PYTHON" -m pip install "$TORCH_PIN"
fi
missing=$("$PYTHON" "$ROOT/scripts/missing_requirements.py")
if [ -n "$missing" ]; then
    echo "setup: missing $missing; installing the project (pip install -e \".[dev]\")"
    "$PYTHON" -m pip install -e "$ROOT[dev]"
fi
