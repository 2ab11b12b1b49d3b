#!/usr/bin/env bash
# One short `echelon train` on the emulated cuda:0 and the same run on the CPU: both must complete
# with finite losses, and the CUDA run's train/test losses must equal the CPU run's to 1e-3
# (same seed, same data order, same Philox init; only float rounding differs).
#   train_check.sh ECHELON_BINARY OUT_DIR TRAIN_ARGS...
# $CUDA_ARGS (optional) goes to the CUDA run only, e.g. "--devices cuda:0,cuda:1"; $TOLERANCE
# (default 1e-3) is the relative bound, wider for a TF32 or bf16 run ("--precision tf32|bf16"),
# whose precision config.json must record.
set -euo pipefail
bin=$1 out=$2
shift 2
rm -rf "$out"
"$bin" train "$@" --device cpu --out "$out/cpu"
# shellcheck disable=SC2086  # CUDA_ARGS is a list of words
"$bin" train "$@" --device cuda:0 ${CUDA_ARGS:-} --out "$out/cuda"
value() { grep -oE "\"$2\": [-0-9.eE+a-z]+" "$out/$1/summary.json" | head -1 | awk '{print $2}'; }
grep -q '"device": "cuda:0"' "$out/cuda/summary.json"
grep -q '"completed": true' "$out/cuda/summary.json"
if [[ "${CUDA_ARGS:-}" =~ --precision\ ([a-z0-9]+) ]]; then
  grep -q "\"precision\": \"${BASH_REMATCH[1]}\"" "$out/cuda/config.json"
  grep -q "\"precision\": \"${BASH_REMATCH[1]}\"" "$out/cuda/summary.json"
fi
for key in final_train_loss final_test_loss; do
  cpu=$(value cpu "$key") cuda=$(value cuda "$key")
  echo "$key: cpu $cpu, cuda:0 (emulated) $cuda"
  awk -v a="$cpu" -v b="$cuda" -v tol="${TOLERANCE:-1e-3}" 'BEGIN { d = a - b; if (d < 0) d = -d;
    exit !(a == a && b == b && d <= tol * (a < 0 ? -a : a) + 1e-5) }' ||
    { echo "train_check: $key differs beyond ${TOLERANCE:-1e-3}"; exit 1; }
done
