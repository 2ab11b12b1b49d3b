#!/usr/bin/env bash
# The README's first command: installs what is missing (apt; sudo only when not root), configures
# (CUDA when nvcc is found), builds the `echelon` tool and trains LeNet-5 on Fashion-MNIST, on the
# GPU when one is usable, else on the CPU. Ends with the test accuracy and where report.html is.
#
#   tools/quickstart.sh                 # 10 epochs
#   EPOCHS=2 tools/quickstart.sh        # quicker
set -euo pipefail
cd "$(dirname "$0")/.."

bash tools/install-deps.sh

build=${ECHELON_BUILD_DIR:-build}
# ECHELON_CUDA=AUTO: the CUDA backend is built when nvcc is found, CPU-only otherwise.
# The same configuration as tools/test.sh, so the two commands share one build folder.
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DECHELON_CUDA=AUTO \
      -DECHELON_TESTS=ON >/dev/null
cmake --build "$build" --target echelon_cli -j "$(nproc)"

out=${OUT:-runs/quickstart-lenet5}
# --device auto picks cuda:0 when a GPU is usable, else the CPU. --overwrite: a rerun of the quick
# start replaces its own earlier run.
"$build/echelon" train --model lenet5 --data fashion-mnist --epochs "${EPOCHS:-10}" \
    --batch-size 64 --lr 0.01 --momentum 0.9 --device auto --out "$out" --overwrite

acc=$(python3 -c "import json,sys; print('%.2f%%' % (100*json.load(open(sys.argv[1]))['final_test_acc']))" \
      "$out/summary.json" 2>/dev/null || grep -o '"final_test_acc": [0-9.]*' "$out/summary.json")
echo "quickstart: LeNet-5 test accuracy $acc; report: $out/report.html"
