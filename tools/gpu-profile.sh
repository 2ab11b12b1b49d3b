#!/usr/bin/env bash
# Hardware counters of our SGEMM and convolution kernels beside cuBLAS's and cuDNN's (issue #10):
# bench/exp_gpu_profile (one call of each subject, split by marker kernels) under Nsight Compute,
# then tools/ncu-table.py's table. exp_gpu_kernels says how fast each kernel is; this says why
# (occupancy, waves, bank conflicts, coalescing, tensor-pipe use, the top warp stalls).
#
# Run it on the GPU machine after tools/gpu-check.sh, which configures and builds $BUILD (this
# script builds the driver there if it is missing), in the same call so the build is warm:
#   device tool: run(command="BUDGET_S=420 bash tools/gpu-check.sh; bash tools/gpu-profile.sh",
#                    carry=[".deps"], timeout_s=600)
# One ncu process per group (a step, the SGEMMs, the fp32 convs, the TF32 convs), each time-boxed, so a
# slow group costs only itself. Metrics come from a list (METRICS below); should this ncu refuse
# one by name, the group is profiled again with the core list.
# What comes back in $OUT: profile.txt (the tables) and profile.tar.gz (the .ncu-rep reports,
# raw CSVs, subject lists and logs).
# Env: BUDGET_S (default 150), BUILD (default build-gpu), OUT (default $BUILD/out), NCU (the ncu
#      to use; default: PATH, the CUDA toolkit, /opt/nvidia/nsight-compute), PROFILE_GROUPS
#      (default "step sgemm conv-fp32 conv-tf32"; step: every kernel of one training step of
#      LeNet-5 (ours and with cuDNN's convolutions) and ResNet-20, batch 128, with the core
#      metrics only, and the step's kernels summed by name), ECHELON_FAKE_GPU=1 (run without a
#      GPU: what ctest's gpu_profile_fake does with a stand-in ncu, tests/gpu_profile/fake-ncu.sh).
# Without a GPU (and without ECHELON_FAKE_GPU=1) it prints "no GPU: skipping" and exits 0.
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo" || exit 1
BUILD=${BUILD:-build-gpu}
OUT=${OUT:-$BUILD/out}
BUDGET_S=${BUDGET_S:-150}
PROFILE_GROUPS=${PROFILE_GROUPS:-step sgemm conv-fp32 conv-tf32}
start=$SECONDS

if [[ ${ECHELON_FAKE_GPU:-0} != 1 ]] && ! nvidia-smi -L 2>/dev/null | grep '^GPU ' >/dev/null; then
  echo "no GPU: skipping"
  exit 0
fi
mkdir -p "$OUT" || exit 1
ncu=${NCU:-}
if [[ -z $ncu ]]; then
  ncu=$(command -v ncu || true)
  [[ -z $ncu && -x /usr/local/cuda/bin/ncu ]] && ncu=/usr/local/cuda/bin/ncu
  [[ -z $ncu ]] && ncu=$(ls -d /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | sort -V | tail -1)
fi
if [[ -z $ncu || ! -x $ncu ]]; then
  echo "gpu-profile: no ncu (Nsight Compute) found: set NCU" | tee -a "$OUT/profile.txt"
  exit 1
fi
driver=$BUILD/bench/exp_gpu_profile
work=$BUILD/gpu-profile
rm -rf "$work" && mkdir -p "$work" || exit 1
if [[ ! -x $driver ]]; then
  timeout 120 cmake --build "$BUILD" --target exp_gpu_profile >"$work/build.log" 2>&1 ||
    { echo "gpu-profile: building exp_gpu_profile failed:"; tail -20 "$work/build.log"; exit 1; }
fi

# Each one read by tools/ncu-table.py; the core list is what every ncu since 2020 names alike.
core=gpu__time_duration.sum,launch__registers_per_thread,launch__waves_per_multiprocessor
core+=,launch__shared_mem_per_block_static,launch__shared_mem_per_block_dynamic
core+=,sm__throughput.avg.pct_of_peak_sustained_elapsed
core+=,dram__throughput.avg.pct_of_peak_sustained_elapsed
core+=,sm__warps_active.avg.pct_of_peak_sustained_active
METRICS=$core,smsp__issue_active.avg.pct_of_peak_sustained_active
METRICS+=,sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active
METRICS+=,smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.ratio
for op in ld st; do
  METRICS+=,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_$op.sum
  METRICS+=,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_$op.sum
done
for stall in long_scoreboard short_scoreboard barrier mio_throttle math_pipe_throttle wait \
             not_selected lg_throttle no_instruction dispatch_stall; do
  METRICS+=,smsp__average_warps_issue_stalled_${stall}_per_issue_active.ratio
done

# profile GROUP LIMIT METRICS: one ncu run of the driver's GROUP subjects; returns ncu's status.
profile() {
  local group=$1 limit=$2 metrics=$3 args=()
  case $group in
    step) args=(--groups step) ;;
    sgemm) args=(--groups sgemm) ;;
    conv-fp32) args=(--groups conv --conv-precisions fp32) ;;
    conv-tf32) args=(--groups conv --conv-precisions tf32) ;;
    *) echo "gpu-profile: unknown group $group"; return 2 ;;
  esac
  # --clock-control none: the card's clocks as we find them (the device README's rule).
  timeout --kill-after=5 "$limit" "$ncu" --clock-control none --profile-from-start off \
    --metrics "$metrics" -f -o "$work/$group" \
    "$driver" "${args[@]}" --subjects-out "$work/$group-subjects.txt" >"$work/$group.log" 2>&1
}

status=0
: >"$OUT/profile.txt"
set -- $PROFILE_GROUPS
while (($#)); do
  group=$1
  shift
  left=$((BUDGET_S - (SECONDS - start) - 10))  # 10 s kept for the tables and the archive
  limit=$((left / ($# + 1)))  # this group's share of what is left
  if ((limit < 15)); then
    echo "== $group: skipped, the time budget is spent" | tee -a "$OUT/profile.txt"
    status=1
    continue
  fi
  t0=$SECONDS
  # A step is dozens to hundreds of kernels: the core list (fewer replay passes each).
  metrics=$METRICS
  [[ $group == step ]] && metrics=$core
  profile "$group" "$limit" "$metrics"
  rc=$?
  if ((rc != 0 && rc != 124 && rc != 137)) && grep -qi 'metric' "$work/$group.log"; then
    note="refused a metric; profiled again with the core metrics"
    mv "$work/$group.log" "$work/$group-refused.log"
    profile "$group" "$limit" "$core"
    rc=$?
  else
    note=""
  fi
  echo "== $group: ncu status $rc in $((SECONDS - t0)) s${note:+; $note}" | tee -a "$OUT/profile.txt"
  if ((rc != 0)); then
    status=1
    tail -5 "$work/$group.log" | tee -a "$OUT/profile.txt"
  fi
  if [[ -f $work/$group.ncu-rep ]]; then
    csv=$work/$group-raw.csv
    "$ncu" --import "$work/$group.ncu-rep" --csv --page raw --print-units base \
      >"$csv" 2>"$work/$group-import.log"
    if ! grep -q '"Kernel Name"' "$csv"; then  # the details page: a row per metric
      csv=$work/$group-details.csv
      "$ncu" --import "$work/$group.ncu-rep" --csv --page details --print-units base \
        >"$csv" 2>>"$work/$group-import.log"
    fi
    python3 tools/ncu-table.py "$work/$group-subjects.txt" "$csv" \
      >>"$OUT/profile.txt" 2>&1 || status=1
  fi
done
tar -czf "$OUT/profile.tar.gz" -C "$BUILD" gpu-profile 2>/dev/null
cat "$OUT/profile.txt"
echo "gpu-profile: $((SECONDS - start)) s of a ${BUDGET_S} s budget; status $status (profile.txt, profile.tar.gz in $OUT)"
exit "$status"
