#!/usr/bin/env bash
# A 2-partition pipeline with one partition per (emulated) GPU, `--devices cuda:0,cuda:1`: trains
# like the CPU run (train_check.sh), and summary.json says where each partition ran and how the
# activations crossed: "cuda-peer" with peer access, "cuda-peer-staged" with ECHELON_CUDASIM_PEER=0.
#   devices_check.sh ECHELON_BINARY OUT_DIR EXPECTED_LINK TRAIN_ARGS...
set -euo pipefail
bin=$1 out=$2 link=$3
shift 3
here=$(dirname "$0")
CUDA_ARGS="--devices cuda:0,cuda:1" "$here/train_check.sh" "$bin" "$out" "$@"
summary=$out/cuda/summary.json
tr -d ' \n' <"$summary" | grep -q '"devices":\["cuda:0","cuda:1"\]' ||
  { echo "devices_check: summary.json does not list cuda:0, cuda:1"; exit 1; }
tr -d ' \n' <"$summary" | grep -q "\"links\":\[\"$link\"\]" ||
  { echo "devices_check: the link is not $link"; grep -A3 links "$summary"; exit 1; }
echo "devices_check: partitions on cuda:0 and cuda:1, link $link"
