#!/usr/bin/env bash
# clang-tidy (checks in .clang-tidy) over the library and the CLI, using a CPU-only build's
# compile_commands.json; exits 1 on any warning. usage: tools/tidy.sh BUILD_DIR
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
run-clang-tidy-14 -p "$build" -quiet -j "$(nproc)" \
  "$PWD/(base|kernels|tensor|autograd|layers|data|parallel|app)/.*\.cpp$" >"$log" 2>&1 || true
warnings=$(grep -c "warning:" "$log" || true)
errors=$(grep -c "error:" "$log" || true)
if [ "$warnings" -ne 0 ] || [ "$errors" -ne 0 ]; then
  grep -E -A3 "(warning|error):" "$log" | head -200
  echo "clang-tidy: $warnings warnings, $errors errors"
  exit 1
fi
echo "clang-tidy: 0 warnings ($(grep -c '^clang-tidy' "$log" || echo '?') files)"
