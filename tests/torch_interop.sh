#!/usr/bin/env bash
# Interop check: trains a small LeNet-5 with echelon, loads its checkpoint into an equivalent
# PyTorch model (tests/load_in_torch.py) and requires the same Fashion-MNIST test accuracy.
# Exits 77 (ctest: skipped) when no Python can import torch or the dataset is absent.
# Use: tests/torch_interop.sh path/to/echelon
set -euo pipefail
echelon=$1
here=$(cd "$(dirname "$0")" && pwd)
data=/usr/share/datasets/fashion-mnist
python=""
for candidate in ${ECHELON_PYTHON:-} python3 /usr/bin/python3; do
  if "$candidate" -c 'import torch' >/dev/null 2>&1; then python=$candidate; break; fi
done
[[ -n $python ]] || { echo "SKIP: no Python with torch (Debian: python3-torch)"; exit 77; }
[[ -d $data ]] || { echo "SKIP: $data absent (Debian: dataset-fashion-mnist)"; exit 77; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$echelon" train --model lenet5 --data fashion-mnist --data-dir "$data" --epochs 1 \
  --limit-train 3000 --progress none --device cpu --out "$out/run"
acc=$("$python" -c 'import json,sys; print(json.load(open(sys.argv[1]))["final_test_acc"])' \
  "$out/run/summary.json")
echo "echelon test accuracy: $acc"
"$python" "$here/load_in_torch.py" "$out/run/checkpoint.safetensors" --data-dir "$data" \
  --limit 0 --expect-acc "$acc"
