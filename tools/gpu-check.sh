#!/usr/bin/env bash
# The GPU check for the lent GPU machine (see DESIGN.md "The GPU machine"): probe the machine,
# configure and build the CUDA backend there (binaries built elsewhere may not run), run the GPU
# tests, the parity harness in GPU mode, the GPU benchmarks and a short LeNet-5 training run.
# Without a GPU it prints "no GPU: skipping" and exits 0.
#
# Use (repo root):  tools/fill-deps.sh            # here, once: fills the ignored .deps/
#                   bash tools/gpu-check.sh        # there, with .deps carried; logs in $OUT
# Env: OUT (log folder, default build-gpu/logs), BUILD (default build-gpu), BUDGET_S (default 450:
# steps are skipped once the budget is spent), ECHELON_FAKE_GPU=1 (test the configure/build
# steps on a machine without a GPU; the run steps then skip themselves with exit 77),
# STOP_AFTER=configure (print the table after configuring).
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo" || exit 1
BUILD=${BUILD:-build-gpu}
OUT=${OUT:-$BUILD/logs}
BUDGET_S=${BUDGET_S:-450}
mkdir -p "$OUT"
start=$(date +%s)
declare -a rows=()

has_gpu() {
  [[ ${ECHELON_FAKE_GPU:-0} == 1 ]] && return 0
  command -v nvidia-smi >/dev/null 2>&1 || return 1
  nvidia-smi -L 2>/dev/null | grep -q '^GPU '
}
if ! has_gpu; then
  echo "no GPU: skipping"
  exit 0
fi

# step NAME LOG TIMEOUT_S COMMAND...: runs, times and records one step; never aborts the script.
step() {
  local name=$1 log=$2 limit=$3
  shift 3
  local now status t0
  now=$(date +%s)
  if ((now - start + 10 > BUDGET_S)); then
    rows+=("$(printf '%-14s %-8s %6s  %s' "$name" skipped - "time budget spent")")
    return
  fi
  # A step never runs past the script's budget.
  ((limit > BUDGET_S - (now - start))) && limit=$((BUDGET_S - (now - start)))
  t0=$(date +%s)
  echo "== $name: $*" | tee -a "$OUT/$log"
  timeout --kill-after=10 "$limit" "$@" >>"$OUT/$log" 2>&1
  status=$?
  local verdict=ok
  ((status == 77)) && verdict=skipped
  ((status == 124 || status == 137)) && verdict=timeout
  ((status != 0 && status != 77 && status != 124 && status != 137)) && verdict="rc=$status"
  rows+=("$(printf '%-14s %-8s %5ss  %s' "$name" "$verdict" $(($(date +%s) - t0)) "$OUT/$log")")
  tail -n 3 "$OUT/$log"
}

# ---- where things are ------------------------------------------------------------------------
if [[ -f .deps/gpu-probe.sh ]]; then
  # The probe tees its own copy into its $OUT; keep ours the only one under our $OUT.
  step probe probe.txt 120 env OUT=/tmp bash .deps/gpu-probe.sh
else
  rows+=("$(printf '%-14s %-8s %6s  %s' probe skipped - ".deps/gpu-probe.sh absent: run tools/fill-deps.sh")")
fi

wheel_dir() {  # prints the folder of python package nvidia.$1, if installed
  python3 -c "import nvidia.$1 as m; print(list(m.__path__)[0])" 2>/dev/null
}
cmake_args=(-S . -B "$BUILD" -G Ninja -DECHELON_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90
            -DCMAKE_BUILD_TYPE=Release)
for lib in cudnn nccl; do
  upper=${lib^^}
  var=${upper}_ROOT
  root=${!var:-}
  [[ -z $root ]] && root=$(wheel_dir "$lib")
  if [[ -n $root ]]; then
    cmake_args+=("-D${upper}_ROOT=$root")
    # The wheels ship only libX.so.N; FindCUDNN/FindNCCL accept that name.
    export LD_LIBRARY_PATH="$root/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  fi
done
if [[ -d .deps/include ]]; then
  cmake_args+=("-Ddoctest_DIR=$repo/.deps/lib/cmake/doctest" "-DCLI11_DIR=$repo/.deps/share/cmake/CLI11"
               "-DCMAKE_PREFIX_PATH=$repo/.deps")
fi
# OpenBLAS and zlib may lack their -dev packages there.
[[ -f /usr/include/cblas.h || -d /usr/include/x86_64-linux-gnu/openblas-pthread ]] ||
  cmake_args+=(-DECHELON_BLAS=OFF)
if [[ ! -f /usr/include/zlib.h && -f .deps/include/zlib.h ]]; then
  zlib_so=$(ls /lib/x86_64-linux-gnu/libz.so* /usr/lib/x86_64-linux-gnu/libz.so* 2>/dev/null | head -1)
  [[ -n $zlib_so ]] && cmake_args+=("-DZLIB_INCLUDE_DIR=$repo/.deps/include" "-DZLIB_LIBRARY=$zlib_so")
fi

# ---- build -----------------------------------------------------------------------------------
step configure configure.txt 120 cmake "${cmake_args[@]}"
if [[ ${STOP_AFTER:-} == configure ]]; then
  printf '%s\n' "${rows[@]}"
  exit 0
fi
# Only what the checks run (the CPU tests are CI's job); optional targets only when configured.
step build_tests build.txt 300 cmake --build "$BUILD" -j "$(nproc)" --target echelon_gpu_tests
extra=()
for target in bench_ops echelon_cli; do
  ninja -C "$BUILD" -t targets all 2>/dev/null | grep -q "^$target:" && extra+=("$target")
done
if ((${#extra[@]})); then
  # -k 0: one broken target must not hide the others.
  step build_extra build.txt 200 cmake --build "$BUILD" -j "$(nproc)" --target "${extra[@]}" -- -k 0
fi

# ---- run ---------------------------------------------------------------------------------------
gpu_tests=$BUILD/tests/echelon_gpu_tests
step gpu_tests gpu_tests.txt 150 "$gpu_tests" --test-suite-exclude=parity_gpu --duration=true
step parity_gpu parity.txt 120 "$gpu_tests" --test-suite=parity_gpu --duration=true
if [[ -x $BUILD/bench/bench_ops ]]; then
  step bench_gpu bench.txt 120 "$BUILD/bench/bench_ops" --benchmark_filter='GPU' \
    --benchmark_min_time=0.05 --benchmark_counters_tabular=true
else
  rows+=("$(printf '%-14s %-8s %6s  %s' bench_gpu skipped - "bench_ops not built (libbenchmark absent?)")")
fi
cli=$BUILD/echelon
data_dir=/usr/share/datasets/fashion-mnist
if [[ -x $cli && -d $data_dir ]]; then
  step train_lenet train.txt 150 "$cli" train --model lenet5 --data fashion-mnist --data-dir "$data_dir" \
    --epochs 1 --device cuda:0 --out "$BUILD/run-lenet5"
elif [[ -x $cli ]]; then
  # No dataset on this machine: a synthetic smoke run still exercises the CUDA training step.
  step train_synth train.txt 150 "$cli" train --model lenet5 --data synthetic --limit-train 4096 \
    --limit-test 1024 --epochs 1 --device cuda:0 --out "$BUILD/run-lenet5-synthetic"
  rows+=("$(printf '%-14s %-8s %6s  %s' train_lenet skipped - "$data_dir absent")")
else
  rows+=("$(printf '%-14s %-8s %6s  %s' train_lenet skipped - "echelon binary not built")")
fi

# Pipeline experiment (d): 2 partitions on one GPU, each on its own stream; the trace shows the
# overlap, summary.json's pipeline block the busy/idle split. Sequential beside it as the baseline.
if [[ -x $cli ]]; then
  for schedule in stale sequential; do
    step "pipe_$schedule" "pipeline-$schedule.txt" 90 "$cli" train --model resnet20 --data synthetic \
      --limit-train 4096 --limit-test 512 --epochs 2 --batch-size 128 --device cuda:0 --pipeline 2 \
      --balance auto --schedule "$schedule" --trace "$OUT/pipeline-$schedule-trace.json" \
      --out "$BUILD/run-pipeline-$schedule"
    cp "$BUILD/run-pipeline-$schedule/summary.json" "$OUT/pipeline-$schedule-summary.json" 2>/dev/null
  done
fi

# ---- summary (last) ----------------------------------------------------------------------------
{
  echo
  echo "gpu-check summary ($(($(date +%s) - start)) s total)"
  printf '%-14s %-8s %6s  %s\n' step status time log
  printf '%s\n' "${rows[@]}"
} | tee "$OUT/summary.txt"
