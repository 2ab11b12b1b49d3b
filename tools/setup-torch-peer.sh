#!/usr/bin/env bash
# Installs PyPI's current PyTorch (CPU wheels) into a virtual environment, the second PyTorch peer
# of bench/exp_train_throughput (Debian's python3-torch is the first). Run only when wanted: it
# downloads ~200 MB from PyTorch's CPU index, or, where that host is unreachable, PyPI's default
# wheel (with its CUDA libraries: ~3 GB download, 5.3 GB installed; it runs on the CPU all the
# same). The benchmark finds the venv at $ECHELON_TORCH_VENV (default below).
#   bash tools/setup-torch-peer.sh [VENV_DIR]
set -euo pipefail
venv="${1:-${ECHELON_TORCH_VENV:-$HOME/.cache/echelon/torch-venv}}"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
"$venv/bin/pip" install --upgrade pip >/dev/null
"$venv/bin/pip" install --retries 1 --timeout 20 torch numpy --index-url https://download.pytorch.org/whl/cpu ||
  "$venv/bin/pip" install torch numpy
"$venv/bin/python" -c 'import torch; print("torch", torch.__version__, "in", "'"$venv"'")'
