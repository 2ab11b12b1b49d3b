#!/usr/bin/env bash
# `echelon train --cuda-graph` on the emulated cuda:0: the run with the captured, replayed step
# must give exactly the losses of the same run without it (same kernels on the same values), and
# the flag on the CPU must stop with an error naming it.
#   cuda_graph_check.sh ECHELON_BINARY OUT_DIR TRAIN_ARGS...
set -euo pipefail
bin=$1 out=$2
shift 2
rm -rf "$out"
"$bin" train "$@" --device cuda:0 --out "$out/eager"
"$bin" train "$@" --device cuda:0 --cuda-graph --out "$out/graph"
value() { grep -oE "\"$2\": [-0-9.eE+a-z]+" "$out/$1/summary.json" | head -1 | awk '{print $2}'; }
grep -q '"completed": true' "$out/graph/summary.json"
for key in final_train_loss final_test_loss final_test_acc; do
  eager=$(value eager "$key") graph=$(value graph "$key")
  echo "$key: eager $eager, --cuda-graph $graph"
  [ -n "$eager" ] && [ "$eager" = "$graph" ] || { echo "cuda_graph_check: $key differs"; exit 1; }
done
if "$bin" train "$@" --device cpu --cuda-graph --out "$out/cpu" 2>"$out/cpu.err"; then
  echo "cuda_graph_check: --cuda-graph on the CPU did not fail"
  exit 1
fi
grep -q -- "--cuda-graph needs a CUDA device" "$out/cpu.err" ||
  { echo "cuda_graph_check: unexpected error:"; cat "$out/cpu.err"; exit 1; }
echo "cuda_graph_check: ok"
