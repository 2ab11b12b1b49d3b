#!/usr/bin/env bash
# Data parallelism, 2 replicas of LeNet-5 (mpirun -np 2, one partition each): the gradient sum as
# one bucket after the backward (--bucket-mb 0) vs buckets overlapped with the backward
# (--bucket-mb 0.01: 3 buckets per update, fc3+fc2, fc1, conv; 1 = the default: one bucket,
# started as the backward reaches the first layer). Rounds alternate the settings; each run prints the trainer's images/s (pipeline
# wall time) and, per rank, the all-reduce wait and bucket counts from summary.json. Needs build-cpu
# with MPI (bench/RESULTS.md, "Gradient buckets").
cd "$(dirname "$0")/.."
E=build-cpu/echelon
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
flags=(train --model lenet5 --data synthetic --limit-train "${IMAGES:-8192}" --limit-test 256
       --batch-size 128 --epochs 2 --threads 1 --progress none --pipeline 1 --data-parallel 2)
export OPENBLAS_NUM_THREADS=1
for round in $(seq 1 "${ROUNDS:-3}"); do
  for mb in ${BUCKETS:-0 0.01 1}; do
    out="$dir/r$round-$mb"
    tests/mpi/mpirun.sh 300 2 $E "${flags[@]}" --bucket-mb "$mb" --out "$out" >"$out.log" 2>&1 \
      || { cat "$out.log"; exit 1; }
    python3 - "$out/summary.json" "$round" "$mb" "$(cut -d' ' -f1 /proc/loadavg)" <<'PY'
import json, sys
summary = json.load(open(sys.argv[1]))
pipe = summary["pipeline"]
ranks = pipe["processes"]["ranks"]
waits = " ".join(f'{r["all_reduce_wait_s"]:.3f}' for r in ranks)
backward = " ".join(f'{r["backward_s"]:.2f}' for r in ranks)
print(f'round {sys.argv[2]} bucket-mb {sys.argv[3]:>4}: {pipe["images_per_s"]:7.1f} images/s, '
      f'wall {pipe["wall_s"]:.2f} s, all-reduce wait per rank {waits} s, backward {backward} s, '
      f'{ranks[0]["all_reduce_buckets"] / ranks[0]["batches"]:.0f} buckets per update '
      f'({ranks[0]["all_reduce_buckets_overlapped"]} of {ranks[0]["all_reduce_buckets"]} overlapped), '
      f'load {sys.argv[4]}')
PY
  done
done
