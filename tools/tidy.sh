#!/usr/bin/env bash
# clang-tidy (checks in .clang-tidy) over the library and the CLI, using a CPU-only build's
# compile_commands.json; exits 1 on any warning. The full log is BUILD_DIR/clang-tidy.log.
# usage: tools/tidy.sh BUILD_DIR
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
log="$build/clang-tidy.log"
# run-clang-tidy colours its output; the log is for reading and grepping.
run-clang-tidy-14 -p "$build" -quiet -j "$(nproc)" \
  "$PWD/(base|kernels|tensor|autograd|layers|data|parallel|app)/.*\.cpp$" 2>&1 |
  sed 's/\x1b\[[0-9;]*m//g' >"$log" || true
warnings=$(grep -c "warning:" "$log" || true)
errors=$(grep -c "error:" "$log" || true)
if [ "$warnings" -ne 0 ] || [ "$errors" -ne 0 ]; then
  grep -E "(warning|error):" "$log" | sort -u | head -100
  echo "clang-tidy: $warnings warnings, $errors errors (log: $log)"
  exit 1
fi
echo "clang-tidy: 0 warnings ($(grep -c '^clang-tidy' "$log" || echo '?') files)"
