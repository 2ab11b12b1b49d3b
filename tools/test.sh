#!/usr/bin/env bash
# The README's test command: installs what is missing, configures (CUDA when nvcc is present),
# builds everything and runs the test suite. GPU tests report "skipped" on machines without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
build=${ECHELON_BUILD_DIR:-build}
# ECHELON_TESTS=ON explicitly: a cached OFF from another configure must not turn this into a
# run of zero tests.
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DECHELON_TESTS=ON \
      ${ECHELON_CMAKE_ARGS:-}
cmake --build "$build" -j "$(nproc)"
ctest --test-dir "$build" --output-on-failure --no-tests=error -j 1 ${ECHELON_CTEST_ARGS:-}
