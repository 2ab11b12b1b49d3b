#!/usr/bin/env bash
# The README's test command: installs what is missing, configures (CUDA when nvcc is present),
# builds everything and runs the test suite. GPU tests report "skipped" on machines without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
# Optional peer for the interop test (tests/torch_interop.sh loads a checkpoint into PyTorch): Debian's
# python3-torch when it can be installed; the test reports "skipped" otherwise, and we say why here.
if ! python3 -c 'import torch' >/dev/null 2>&1; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  install_torch() {
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
      python3-torch >/dev/null 2>&1
  }
  install_torch || { $sudo apt-get update -qq >/dev/null 2>&1 && install_torch; } || true
  python3 -c 'import torch' >/dev/null 2>&1 ||
    echo "echelon: python3-torch could not be installed: the PyTorch interop test will be skipped"
fi
build=${ECHELON_BUILD_DIR:-build}
# ECHELON_TESTS=ON explicitly: a cached OFF from another configure must not turn this into a
# run of zero tests.
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DECHELON_TESTS=ON \
      ${ECHELON_CMAKE_ARGS:-}
cmake --build "$build" -j "$(nproc)"
ctest --test-dir "$build" --output-on-failure --no-tests=error -j 1 ${ECHELON_CTEST_ARGS:-}
