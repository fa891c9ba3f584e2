# Sourced by scripts/train.sh and scripts/test.sh: installs only what is missing, so a second call is instant.
# torch first, and only when it is not importable (a torch you installed yourself is kept):
# - no NVIDIA GPU (no working `nvidia-smi`): the CPU build of $TORCH_PIN from the PyTorch project's CPU wheel index
#   (about 200 MB; a bare `torch` from the default index is, on Linux x86, the CUDA build with GBs of CUDA wheels);
#   if that index cannot be reached, $TORCH_PIN from pip's default index/configuration, with a warning that this
#   may be the CUDA build;
# - an NVIDIA GPU: $TORCH_PIN from pip's default index (the CUDA build).
# Then `pip install -e ".[dev]"` when the project or one of its requirements is absent.
PYTHON=${PYTHON:-python}
TORCH_PIN="torch==2.13.0"
TORCH_CPU_INDEX="https://download.pytorch.org/whl/cpu"
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

if ! "$PYTHON" -c "import torch" 2>/dev/null; then
    if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
        echo "setup: torch is not importable and an NVIDIA GPU is present; installing $TORCH_PIN (CUDA build)"
        "$PYTHON" -m pip install "$TORCH_PIN"
    elif "$PYTHON" -c "import sys, urllib.request; urllib.request.urlopen(sys.argv[1] + '/torch/', timeout=15)" \
            "$TORCH_CPU_INDEX" 2>/dev/null; then
        echo "setup: torch is not importable and no GPU found; installing the CPU build of $TORCH_PIN from $TORCH_CPU_INDEX"
        "$PYTHON" -m pip install "$TORCH_PIN" --index-url "$TORCH_CPU_INDEX"
    else
        echo "setup: WARNING: $TORCH_CPU_INDEX cannot be reached; installing $TORCH_PIN from pip's default index," \
             "which on Linux x86 may be the multi-GB CUDA build (install a CPU torch yourself first to avoid it)"
        "$PYTHON" -m pip install "$TORCH_PIN"
    fi
fi
missing=$("$PYTHON" "$ROOT/scripts/missing_requirements.py")
if [ -n "$missing" ]; then
    echo "setup: missing $missing; installing the project (pip install -e \".[dev]\")"
    "$PYTHON" -m pip install -e "$ROOT[dev]"
fi
elsewhere=$("$PYTHON" "$ROOT/scripts/missing_requirements.py" --elsewhere)
if [ -n "$elsewhere" ]; then  # kept: reinstalling would take the commands away from the other checkout
    echo "setup: note: the installed hf_cse is the checkout in $elsewhere; hf-cse-train and the other commands run" \
         "that code (python run_unsup.py and the tests run this one's); pip install -e \"$ROOT\" to switch"
fi
