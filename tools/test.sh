#!/usr/bin/env bash
# The README's test command: installs what is missing, configures (CUDA when nvcc is present),
# builds everything and runs the test suite. GPU tests report "skipped" on machines without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
build=${ECHELON_BUILD_DIR:-build}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo ${ECHELON_CMAKE_ARGS:-}
cmake --build "$build" -j "$(nproc)"
ctest --test-dir "$build" --output-on-failure -j 1 ${ECHELON_CTEST_ARGS:-}
