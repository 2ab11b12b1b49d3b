#!/usr/bin/env bash
# The GPU check: one call on a machine with an NVIDIA GPU (the lent H200) that builds the CUDA
# backend there and runs what a first GPU window must answer, within BUDGET_S seconds, writing
# everything under $OUT and printing a table last. See DESIGN.md "The GPU machine".
#
# Steps, in order of priority (each time-boxed; one that no longer fits the budget is skipped
# with a row that says so; a failed step never stops the script):
#   probe      what the machine has: GPU and driver, nvcc, cmake, ninja, g++, and where cuBLAS,
#              cuDNN and NCCL (library and headers) and compute-sanitizer are: a *_ROOT variable,
#              the CUDA toolkit, system folders, or NVIDIA's Python wheels (site-packages/nvidia/
#              ...). Printed and kept in probe.txt. .deps/gpu-probe.sh (a tiny nvcc program that
#              links all three) runs in the background meanwhile.
#   configure  cmake, CUDA arch 90, Release, with what the probe found (a wheel's libX.so.N is
#              passed by full path, its headers with -isystem; header-only deps from .deps/).
#   build      echelon_gpu_tests; then the echelon CLI and bench_ops when configured.
#   resources  tools/cuda-resources.py: every kernel's registers, local memory (spills), shared
#              memory and sm_90 occupancy, read from the built objects (resources.txt; also
#              appended to kernels.txt, so the timings and the registers sit side by side).
#   blocking   every doctest suite of echelon_gpu_tests as its own process (a crash in one does
#              not hide the others), with CUDA_LAUNCH_BLOCKING=1 so a fault is reported by the
#              launch that caused it.
#              Among them nccl_gpu: the one-rank NCCL smoke check (communicator without bootstrap,
#              all-reduce, send/recv to itself), compiled when CMake found NCCL.
#   async      every suite again with asynchronous launches, as in real use (the stream and
#              allocator tests need real concurrency). A failed suite is run once more with
#              ECHELON_SYNC_LAUNCHES=1, which waits after every launch and names the failing op.
#   memcheck,  compute-sanitizer --tool memcheck, then --tool racecheck, on the parity suite:
#   racecheck  every case in one process; if that run crashes, fails or times out, one process
#              per kernel family (ECHELON_PARITY_FILTER), shared-memory families first, until the
#              tool's time box is spent. The row names the kernels blamed; a row says so when
#              compute-sanitizer is absent.
#   train      LeNet-5 on cuda:0 (Fashion-MNIST when present, else synthetic data), one run
#              with --conv-impl cudnn --deterministic, one each with --precision tf32 and bf16
#              (tensor-core compute, fp32 storage), and one with
#              --cuda-graph (the captured, replayed step; its summary.json next to the eager
#              run's), and one with --resident-data. A failure reruns with ECHELON_SYNC_LAUNCHES=1.
#   p0         issue #10's P0: LeNet-5 to 90% Fashion-MNIST test accuracy, wall clock, Echelon
#              (--resident-data --cuda-graph) beside PyTorch eager and compiled, same recipe.
#   p12        issue #10's P1/P2: train-step img/s at batch 128 of the four nets, ours and cuDNN
#              (echelon train --resident-data --cuda-graph) beside PyTorch eager (compiled for
#              LeNet-5 and ResNet-20), bench/torch_gpu_step.py; each row gives the ratios.
#              ResNet-20 and VGG-16 also run ours and cuDNN with --autotune (our conv autotuner;
#              for cuDNN, its algorithms timed like PyTorch's cudnn.benchmark; the picks in each
#              run's summary.json): a row gives tuned / heuristic img/s.
#   pipeline   a 2-partition pipeline on one GPU with --balance auto, stale and sequential
#              schedules, with Chrome traces; and --devices cuda:0,cuda:0 (per-partition placement).
#   bench      bench_ops' GPU cases, when Google Benchmark was found.
#   (kernels, run right after the test suites: bench/exp_gpu_kernels, every kernel family against
#              its peer in one process: GB/s vs a D2D copy, our SGEMM vs cuBLAS at 1k-4k, our conv
#              vs cuDNN on every distinct conv layer of the four nets; the conv_vs_cudnn row
#              counts the conv rows that meet P3 (tools/conv-vs-cudnn.awk).)
#   (kernels_ab, after p12: the same driver's A/B rows, each switch of our kernels off vs on per
#              layer, and (--autotune-ab) the heuristic's kernels vs the autotuned ones with the
#              picks. Both tables, and resources.txt, are also $OUT/kernels.txt.)
# What comes back in $OUT (the device tool returns at most 8 files): summary.txt (the table),
# failures.txt (the tail of every failed step's log), probe.txt, kernels.txt, resources.txt,
# logs.tar.gz (every log, trace and run summary). Exit status 0 when every step that ran passed, 1 otherwise.
#
# Hardware counters (ncu) of the SGEMM and conv kernels: tools/gpu-profile.sh, in the same call
# after this script (it reuses $BUILD): "BUDGET_S=420 bash tools/gpu-check.sh; bash
# tools/gpu-profile.sh" with timeout_s=600.
#
# Use (repository root):
#   here, once:  tools/fill-deps.sh     # fills the ignored .deps/ (doctest, CLI11, stb and zlib
#                                       # headers, gpu-probe.sh); .deps travels with `carry`
#   device tool: run(command="bash tools/gpu-check.sh", carry=[".deps"], timeout_s=540)
#                BUDGET_S=300 bash tools/gpu-check.sh   (a shorter window; steps are dropped
#                from the end of the list above)
# Env: BUDGET_S (default 480: 8 minutes), BUILD (default build-gpu), OUT (default $BUILD/out),
#      CUDNN_ROOT / NCCL_ROOT / CUBLAS_ROOT (override where a library is taken from),
#      NVIDIA_SITE (extra ':'-separated folders searched like site-packages), PREFER_WHEELS=1
#      (search the wheels before the toolkit and system folders),
#      STOP_AFTER=probe|configure|build (print the table after that step), SKIP='REGEX' (steps
#      whose whole name matches are skipped, e.g. SKIP='p0_torch_.*|train_.*' for a short rerun
#      of the kernels after a change), SKIP_CONFIGURE=1
#      (reuse an already configured BUILD as it is),
#      ECHELON_FAKE_GPU=1 (run the script's logic on a machine without a GPU: the test binary
#      then exits 77 and its rows read "skipped"; the CLI runs fail; ctest's gpu_check_probe
#      runs the probe that way), T_BUILD, T_SUITE, T_SANITIZER, T_FAMILY, T_TRAIN, ... (the
#      time boxes below).
# Without a GPU (and without ECHELON_FAKE_GPU=1) it prints "no GPU: skipping" and exits 0.
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo" || exit 1
BUILD=${BUILD:-build-gpu}
OUT=${OUT:-$BUILD/out}
BUDGET_S=${BUDGET_S:-480}  # 450 until session 25; +30 s for the autotune rows (kernels, p12)
LOGS=$BUILD/gpu-check-logs
RESERVE_S=15  # kept back for packing the logs and printing the table

# Time boxes (seconds; each may be overridden from the environment). The budget caps each in turn;
# the sum is more than the budget on purpose: whatever runs fast leaves room for the later steps.
T_CONFIGURE=${T_CONFIGURE:-90}
T_BUILD=${T_BUILD:-240}
T_SUITE=${T_SUITE:-90}  # one suite, one pass
T_TRAIN=${T_TRAIN:-60}  # one training run
T_SANITIZER=${T_SANITIZER:-75}  # one compute-sanitizer tool, all families
T_FAMILY=${T_FAMILY:-60}  # one family under a sanitizer
T_PIPELINE=${T_PIPELINE:-45}
T_BENCH=${T_BENCH:-40}
# exp_gpu_kernels, split in two steps since session 46 (estimates: never timed on a GPU at 19 conv
# layers): the tables (bandwidth, SGEMM vs cuBLAS, conv vs cuDNN: 19 layers x 3 directions x 4
# impls x fp32/tf32/bf16, ~700 graph-timed cells) right after the test suites, and the A/B rows
# after P0-P2 (+60 s for --autotune-ab at 13 layers, so ~90 at 19; +10 for --mma-stages-ab, +12
# for --mma-async-k-ab, +15 for --direct-ab, +5 for --phases-ab, +8 for --window-ab; the FMA-core
# and tensor-core-tile rows ~60 at 13 layers).
T_KERNELS=${T_KERNELS:-150}
T_KERNELS_AB=${T_KERNELS_AB:-300}
# Families whose kernels use shared memory or warp shuffles come first under the sanitizers.
FAMILY_ORDER=(reduce matmul norm loss conv pool im2col shape elementwise optim random)

has_gpu() {
  [[ ${ECHELON_FAKE_GPU:-0} == 1 ]] && return 0
  command -v nvidia-smi >/dev/null 2>&1 || return 1
  nvidia-smi -L 2>/dev/null | grep '^GPU ' >/dev/null  # not -q: see SIGPIPE below
}
if ! has_gpu; then
  echo "no GPU: skipping"
  exit 0
fi

mkdir -p "$BUILD" "$OUT" || exit 1
rm -rf "$LOGS" && mkdir -p "$LOGS" || exit 1
start=$SECONDS
declare -a rows=() failed_logs=()
any_failed=0

left() { echo $((BUDGET_S - RESERVE_S - (SECONDS - start))); }
row() {  # row NAME STATUS SECONDS NOTE
  rows+=("$(printf '%-28s %-8s %5s  %s' "$1" "$2" "$3" "$4")")
  printf '[%4ds] %-28s %-8s %5s  %s\n' $((SECONDS - start)) "$1" "$2" "$3" "$4"
}
log_name() { echo "$LOGS/${1//[^A-Za-z0-9._-]/_}.txt"; }

# step NAME LIMIT_S COMMAND...: runs one command with its log in $LOGS/NAME.txt, time-boxed by
# LIMIT_S and by what is left of the budget; records a row. Sets step_rc (77: skipped by the
# program; 124: timed out; 200: not run). Never aborts the script.
step_rc=0
step() {
  local name=$1 limit=$2
  shift 2
  local log remaining t0 verdict note
  log=$(log_name "$name")
  remaining=$(left)
  if [[ -n ${SKIP:-} && $name =~ ^(${SKIP})$ ]]; then
    row "$name" skipped - "SKIP"
    step_rc=200
    return
  fi
  if ((remaining < 10)); then
    row "$name" skipped - "time budget spent"
    step_rc=200
    return
  fi
  ((limit > remaining)) && limit=$remaining
  t0=$SECONDS
  printf '$ %s\n' "$*" >"$log"
  timeout --kill-after=5 "$limit" "$@" >>"$log" 2>&1
  step_rc=$?
  note=${log#"$BUILD"/}
  # doctest's last line says how many cases passed; keep it in the row.
  local summary
  summary=$(grep -a '^\[doctest\] test cases:' "$log" | tail -1 | sed 's/^\[doctest\] test cases: *//')
  [[ -n $summary ]] && note="$summary"
  case $step_rc in
    0) verdict=ok ;;
    77) verdict=skipped note="no usable CUDA device" ;;
    124 | 137) verdict=timeout note="after ${limit}s; $note" ;;
    *)
      verdict="rc=$step_rc"
      # The failing line itself (doctest's summary is not it); the whole log is in failures.txt.
      [[ -z $summary ]] && note=$(grep -av '^\s*$' "$log" | tail -1 | cut -c1-90)
      ;;
  esac
  if ((step_rc != 0 && step_rc != 77)); then
    any_failed=1
    failed_logs+=("$log")
  fi
  row "$name" "$verdict" $((SECONDS - t0)) "$note"
}

# ---- probe: what is where ------------------------------------------------------------------------
source "$repo/tools/gpu-check-probe.sh"

# The shared probe (a tiny nvcc program linking cuBLAS, cuDNN and NCCL as the wheels lay them out)
# runs beside the build; its row is added at the end.
probe_pid=""
if [[ -f .deps/gpu-probe.sh ]]; then
  mkdir -p "$LOGS/gpu-probe"
  (OUT=$LOGS/gpu-probe timeout 150 bash .deps/gpu-probe.sh >"$LOGS/gpu-probe.txt" 2>&1) &
  probe_pid=$!
fi

finish() {
  local status=ok
  if [[ -n $probe_pid ]]; then
    if kill -0 "$probe_pid" 2>/dev/null; then
      kill "$probe_pid" 2>/dev/null
      status=stopped
    fi
    wait "$probe_pid" 2>/dev/null
    row gpu-probe.sh "$status" - "$(grep -aE 'kernel ok|cudnnCreate|nccl [0-9]' "$LOGS/gpu-probe.txt" 2>/dev/null | tr '\n' ';' | cut -c1-70)"
  else
    row gpu-probe.sh skipped - ".deps/gpu-probe.sh absent: run tools/fill-deps.sh"
  fi
  {
    for log in "${failed_logs[@]}"; do
      printf '\n===== %s (last 60 lines)\n' "${log#"$BUILD"/}"
      tail -n 60 "$log"
    done
  } >"$OUT/failures.txt"
  [[ -s $OUT/failures.txt ]] || echo "no step failed" >"$OUT/failures.txt"
  tar -czf "$OUT/logs.tar.gz" -C "$BUILD" "$(basename "$LOGS")" 2>/dev/null
  {
    echo
    echo "gpu-check summary: $((SECONDS - start)) s of a ${BUDGET_S} s budget; logs in $OUT (logs.tar.gz, failures.txt)"
    printf '%-28s %-8s %5s  %s\n' step status secs note
    printf '%s\n' "${rows[@]}"
  } | tee "$OUT/summary.txt"
  exit "$any_failed"
}

# Stopped from outside (the device call's limit): still pack what there is.
trap 'row interrupted - - "signal: packing the logs"; any_failed=1; finish' TERM INT

[[ ${STOP_AFTER:-} == probe ]] && finish
if [[ -z $nvcc ]]; then
  row configure skipped - "no nvcc"
  any_failed=1
  finish
fi

# ---- build ---------------------------------------------------------------------------------------
if [[ ${SKIP_CONFIGURE:-0} == 1 && -f $BUILD/CMakeCache.txt ]]; then
  row configure skipped - "SKIP_CONFIGURE=1: $BUILD as configured before"
else
  step configure "$T_CONFIGURE" cmake "${cmake_args[@]}"
  ((step_rc != 0)) && finish
fi
[[ ${STOP_AFTER:-} == configure ]] && finish
step build "$T_BUILD" cmake --build "$BUILD" -j "$(nproc)" --target echelon_gpu_tests
((step_rc != 0)) && finish
extra=()
# Not `ninja ... | grep -q`: under pipefail, grep's early exit fails the pipeline (SIGPIPE).
targets=$(ninja -C "$BUILD" -t targets all 2>/dev/null)
for target in echelon_cli bench_ops exp_gpu_kernels exp_gpu_profile; do
  [[ $'\n'$targets == *$'\n'"$target:"* ]] && extra+=("$target")
done
# -k 0: one broken target must not hide the others.
((${#extra[@]})) && step build_extra "$T_BUILD" cmake --build "$BUILD" -j "$(nproc)" --target "${extra[@]}" -- -k 0
[[ ${STOP_AFTER:-} == build ]] && finish

# ---- static resources of every kernel: registers, local memory, sm_90 occupancy (no GPU needed) ----
step resources 30 python3 tools/cuda-resources.py "$BUILD"
cp "$(log_name resources)" "$OUT/resources.txt" 2>/dev/null

# ---- the GPU test binary, one suite per process ----------------------------------------------------
gpu_tests=$BUILD/tests/echelon_gpu_tests
mapfile -t suites < <("$gpu_tests" --list-test-suites 2>/dev/null |
                      grep -av -e '^\[doctest\]' -e '^===' | awk 'NF {print $1}')
if ((${#suites[@]} == 0)); then
  row suites rc=1 - "echelon_gpu_tests --list-test-suites listed nothing"
  any_failed=1
  finish
fi
# The parity suite is the longest: last in each pass, so a time-out there costs only itself.
ordered=()
for s in "${suites[@]}"; do [[ $s != parity_gpu ]] && ordered+=("$s"); done
for s in "${suites[@]}"; do [[ $s == parity_gpu ]] && ordered+=("$s"); done

for s in "${ordered[@]}"; do
  step "blocking:$s" "$T_SUITE" env CUDA_LAUNCH_BLOCKING=1 "$gpu_tests" --test-suite="$s" --duration=true
done
for s in "${ordered[@]}"; do
  step "async:$s" "$T_SUITE" "$gpu_tests" --test-suite="$s" --duration=true
  if ((step_rc != 0 && step_rc != 77 && step_rc != 124 && step_rc != 200)); then
    step "async:$s+sync" "$T_SUITE" env ECHELON_SYNC_LAUNCHES=1 "$gpu_tests" --test-suite="$s" --duration=true
  fi
done

# ---- kernels against their peers (issue #10, P3): ratios to a D2D copy, cuBLAS, cuDNN --------------
if [[ -x $BUILD/bench/exp_gpu_kernels ]]; then
  # The conv rows cover every distinct conv layer of the four nets (net_conv_shapes reads them
  # from the model zoo: 19 since session 46, ResNet-20's stride-2 layers and VGG-16's channel
  # doublings included; 13 before).
  step kernels "$T_KERNELS" "$BUILD/bench/exp_gpu_kernels" --repeats 7
  # P3's conv goal in the table: per precision, the conv rows (every distinct layer of the four
  # nets x 3 directions) where ours reaches 70% of cuDNN's speed, and the worst row.
  conv_p3=$(awk -f tools/conv-vs-cudnn.awk "$(log_name kernels)" 2>/dev/null)
  [[ -z $conv_p3 ]] || row conv_vs_cudnn - - ">= 70% of cuDNN: $conv_p3"
  # The max pooling's backward by gather (plain, and with the ReLU mask fused): of copy, and the
  # speed-up over the scatter (plain) / the ReLU backward + scatter (masked).
  pool_bwd=$(awk '/^max_pool2d.* backward 2x2/ {
                    printf "%s%s %s of copy, %s", sep, ($1 ~ /ReLU/ ? "masked" : "plain"),
                           $(NF - 5), $(NF - 2); sep = "; " }' "$(log_name kernels)" 2>/dev/null)
  [[ -z $pool_bwd ]] || row pool_backward_gather - - "$pool_bwd"
else
  row kernels skipped - "exp_gpu_kernels not built"
fi

# ---- compute-sanitizer on the parity suite ---------------------------------------------------------
# The whole suite in one process first (cheapest: one context, one instrumentation); when that run
# does not finish cleanly (crash, test failure, time-out), one process per kernel family, so a
# crash hides nothing and the families are told apart.
mapfile -t all_families < <("$gpu_tests" --parity-list 2>/dev/null | awk 'NF {print $1}' | sort -u)
families=()
for f in "${FAMILY_ORDER[@]}"; do
  [[ " ${all_families[*]} " == *" $f "* ]] && families+=("$f")
done
for f in "${all_families[@]}"; do
  [[ " ${families[*]} " == *" $f "* ]] || families+=("$f")
done
# sanitizer_run TOOL FAMILY LIMIT LOG: one compute-sanitizer process over the parity suite
# (FAMILY empty: every case); returns its status (86: the tool found hazards).
sanitizer_run() {
  printf '$ ECHELON_PARITY_FILTER=%s %s --tool %s ... (limit %ss)\n' "$2" "$sanitizer" "$1" "$3" >"$4"
  ECHELON_PARITY_FILTER=$2 timeout --kill-after=5 "$3" "$sanitizer" --tool "$1" \
    --error-exitcode 86 --print-limit 30 "$gpu_tests" --test-suite=parity_gpu >>"$4" 2>&1
}
# kernels_in LOG: the kernels compute-sanitizer blamed, for the row.
kernels_in() {
  grep -aoE '^=========  +at [A-Za-z_][A-Za-z0-9_:]*' "$1" | awk '{print $NF}' | sort -u | head -4 |
    tr '\n' ' '
}
# sanitize TOOL: see above; each tool gets T_SANITIZER seconds for the per-family runs.
sanitize() {
  local tool=$1 t0=$SECONDS fam rc budget limit log clean=() bad=() failed=() not_run=()
  if [[ -z $sanitizer ]]; then
    row "$tool" skipped - "compute-sanitizer not found (see probe.txt)"
    return
  fi
  limit=$(left)
  ((limit > T_SANITIZER)) && limit=$T_SANITIZER
  if ((limit < 10)); then
    row "$tool" skipped - "time budget spent"
    return
  fi
  log=$(log_name "$tool-all")
  sanitizer_run "$tool" "" "$limit" "$log"
  rc=$?
  case $rc in
    0)
      row "$tool" ok $((SECONDS - t0)) "every parity case, one process: no hazard"
      return
      ;;
    86)
      any_failed=1
      failed_logs+=("$log")
      row "$tool" errors $((SECONDS - t0)) "HAZARDS in: $(kernels_in "$log")(${log#"$BUILD"/})"
      return
      ;;
    124 | 137) row "$tool-all" timeout $((SECONDS - t0)) "after ${limit}s; per family next" ;;
    *) row "$tool-all" "rc=$rc" $((SECONDS - t0)) "per family next" && failed_logs+=("$log") ;;
  esac
  t0=$SECONDS
  for fam in "${families[@]}"; do
    budget=$((T_SANITIZER - (SECONDS - t0)))
    limit=$(left)
    ((budget < limit)) && limit=$budget
    ((limit > T_FAMILY)) && limit=$T_FAMILY
    if ((limit < 10)); then
      not_run+=("$fam")
      continue
    fi
    log=$(log_name "$tool-$fam")
    sanitizer_run "$tool" "$fam" "$limit" "$log"
    rc=$?
    case $rc in
      0) clean+=("$fam") ;;
      86) bad+=("$fam:$(kernels_in "$log")") failed_logs+=("$log") ;;
      124 | 137) not_run+=("$fam(timeout)") ;;
      *) failed+=("$fam(rc=$rc)") failed_logs+=("$log") ;;
    esac
  done
  local verdict=ok note
  note="clean: ${clean[*]:-none}"
  ((${#bad[@]})) && note+="; HAZARDS: ${bad[*]}" && verdict=errors
  ((${#failed[@]})) && note+="; failed: ${failed[*]}" && verdict=errors
  ((${#not_run[@]})) && note+="; not run: ${not_run[*]}"
  ((${#clean[@]} == 0 && ${#bad[@]} == 0 && ${#failed[@]} == 0)) && verdict=skipped
  [[ $verdict == errors ]] && any_failed=1
  row "$tool" "$verdict" $((SECONDS - t0)) "$note"
}
sanitize memcheck
sanitize racecheck

# ---- training smoke runs ---------------------------------------------------------------------------
cli=$BUILD/echelon
# train NAME ARGS...: one `echelon train` on cuda:0; a failure reruns with ECHELON_SYNC_LAUNCHES=1.
train() {
  local name=$1
  shift
  step "$name" "$T_TRAIN" "$cli" train --device cuda:0 --progress lines --out "$LOGS/run-$name" "$@"
  if ((step_rc != 0 && step_rc != 124 && step_rc != 200)); then
    rm -rf "$LOGS/run-$name"
    step "$name+sync" "$T_TRAIN" env ECHELON_SYNC_LAUNCHES=1 "$cli" train --device cuda:0 \
      --progress lines --out "$LOGS/run-$name-sync" "$@"
  fi
}
if [[ -x $cli ]]; then
  if [[ -d $data_dir ]]; then
    data=(--data fashion-mnist --data-dir "$data_dir" --limit-train 8192 --limit-test 2000)
  else
    data=(--data synthetic --limit-train 4096 --limit-test 1024)
  fi
  train train_lenet5 --model lenet5 "${data[@]}" --epochs 1
  train train_cudnn_det --model lenet5 "${data[@]}" --epochs 1 --conv-impl cudnn --deterministic
  train train_tf32 --model lenet5 "${data[@]}" --epochs 1 --precision tf32
  train train_bf16 --model lenet5 "${data[@]}" --epochs 1 --precision bf16
  # Same recipe as train_lenet5: compare img/s and losses in the two runs' summary.json.
  train train_cuda_graph --model lenet5 "${data[@]}" --epochs 1 --cuda-graph
  # Same recipe again, batches gathered on the device (--resident-data): the same losses.
  train train_resident --model lenet5 "${data[@]}" --epochs 1 --resident-data
else
  row train skipped - "echelon CLI not built"
fi

# ---- issue #10's P0: LeNet-5 to 90% Fashion-MNIST test accuracy, wall clock ---------------------
# From the start of the run (CUDA start-up, data loading and every evaluation included), Echelon
# (--resident-data --cuda-graph) and PyTorch eager and compiled (bench/torch_time_to_accuracy.py)
# with the same recipe (docs/data.md, "Resident data and time to accuracy"). Real data only.
# The p0_time_to_90_b256 row runs a batch-256 recipe, Echelon and PyTorch eager. On the CPU, seeds
# 0-7 reached 90% at epoch 4.25 on average with it and at 4.0 with batch 128 (bench/RESULTS.md,
# session 31: `bash bench/p0_epochs_cpu.sh --batch256`), so it is the faster recipe on the GPU
# if a step of 256 images costs under ~1.9 steps of 128 (LeNet-5's is launch-bound); this row
# measures that.
p0_recipe=(--batch-size 128 --lr 0.05 --momentum 0.9 --nesterov --epochs 5 --warmup-epochs 0.5 --ema 0.99)
p0_recipe_b256=(--batch-size 256 --lr 0.1 --momentum 0.9 --nesterov --epochs 6 --warmup-epochs 1 --ema 0.98)
# step() records its row in this shell, so the runs are not inside $(...); the notes are read after.
p0_echelon() {  # p0_echelon STEP RECIPE...
  local name=$1
  shift
  step "$name" "$T_TRAIN" "$cli" train --model lenet5 --data fashion-mnist --data-dir "$data_dir" \
    --device cuda:0 --resident-data --cuda-graph --lr-schedule cosine --target-accuracy 0.9 \
    "$@" --progress none --log-every 0
}
p0_echelon_note() {  # "reached ...", the last epoch's rate, where the start-up went ("startup")
  local log
  log=$(log_name "$1")
  echo "$(grep -a '^reached' "$log" | sed 's/ from the start.*//')," \
    "$(grep -a '^epoch' "$log" | tail -1 | grep -o '[0-9]* img/s')" \
    "($(grep -a '^start-up' "$log" | head -1))"
}
p0_torch() {  # p0_torch STEP RECIPE...
  local name=$1
  shift
  step "$name" "$T_TRAIN" python3 bench/torch_time_to_accuracy.py --data-dir "$data_dir" \
    --device cuda --target 0.9 "$@"
}
p0_torch_note() { grep -a '^RESULT' "$(log_name "$1")" | cut -c8-; }
if [[ -x $cli && -d $data_dir ]]; then
  p0_echelon p0_echelon "${p0_recipe[@]}"
  p0_torch p0_torch_eager "${p0_recipe[@]}"
  p0_torch p0_torch_compiled "${p0_recipe[@]}" --compile
  row p0_time_to_90 - - "$(p0_echelon_note p0_echelon) | $(p0_torch_note p0_torch_eager) | $(p0_torch_note p0_torch_compiled)"
  p0_echelon p0_echelon_b256 "${p0_recipe_b256[@]}"
  p0_torch p0_torch_eager_b256 "${p0_recipe_b256[@]}"
  row p0_time_to_90_b256 - - "$(p0_echelon_note p0_echelon_b256) | $(p0_torch_note p0_torch_eager_b256)"
else
  row p0_time_to_90 skipped - "needs the echelon CLI and Fashion-MNIST (tools/fill-deps.sh)"
fi

# ---- issue #10's P1/P2: train-step img/s at batch 128, beside PyTorch on this GPU -------------------
# Echelon: `echelon train` on resident synthetic data with --cuda-graph, the epoch-2 rate, with our
# convolutions and with cuDNN's (the yardstick). PyTorch: bench/torch_gpu_step.py, eager fp32, and
# compiled for LeNet-5 and ResNet-20 (last: torch.compile takes ~45 s a model). The row gives each
# rate and ours / eager. bench/gpu_step_peers.sh adds tf32 and the eager-vs-graph split.
p12_rate() { grep -a '^epoch 2/2' "$(log_name "$1")" 2>/dev/null | grep -o '[0-9]* img/s' | cut -d' ' -f1; }
p12_torch() { grep -a '^RESULT' "$(log_name "$1")" 2>/dev/null | grep -o 'img/s=[0-9]*' | cut -d= -f2; }
p12_ratio() {
  if [[ -n $1 && -n $2 ]]; then awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2fx", a / b}'; else echo "?"; fi
}
if [[ -x $cli ]]; then
  for model in lenet5 resnet20 alexnet vgg16; do
    images=12800
    [[ $model == vgg16 ]] && images=5120
    for impl in ours cudnn; do
      step "p12_${model}_$impl" "$T_TRAIN" "$cli" train --model "$model" --data synthetic \
        --limit-train "$images" --limit-test 128 --batch-size 128 --epochs 2 --device cuda:0 \
        --resident-data --cuda-graph --conv-impl "$impl" --progress none --log-every 0 \
        --overwrite --out "$LOGS/run-p12"
    done
    step "p12_${model}_torch_eager" "$T_TRAIN" python3 bench/torch_gpu_step.py "$model" 128 30
    ours=$(p12_rate "p12_${model}_ours") cudnn=$(p12_rate "p12_${model}_cudnn")
    eager=$(p12_torch "p12_${model}_torch_eager")
    row "p12_$model" - - "img/s: ours ${ours:-?}, cudnn ${cudnn:-?}, torch eager ${eager:-?}; ours/eager $(p12_ratio "$ours" "$eager"), cudnn/eager $(p12_ratio "$cudnn" "$eager")"
    # Ours and cuDNN with --autotune (the first eager step tunes each conv shape, the graph replays
    # the picks; for cuDNN the algorithms are timed as PyTorch's cudnn.benchmark does); their
    # summary.json files list the picks (conv_autotune) in logs.tar.gz.
    if [[ $model == resnet20 || $model == vgg16 ]]; then
      for impl in ours cudnn; do
        step "p12_${model}_${impl}_autotune" "$T_TRAIN" "$cli" train --model "$model" \
          --data synthetic --limit-train "$images" --limit-test 128 --batch-size 128 --epochs 2 \
          --device cuda:0 --resident-data --cuda-graph --conv-impl "$impl" --autotune \
          --progress none --log-every 0 --overwrite --out "$LOGS/run-p12-autotune-$impl-$model"
      done
      tuned=$(p12_rate "p12_${model}_ours_autotune") cudnn_tuned=$(p12_rate "p12_${model}_cudnn_autotune")
      row "p12_${model}_autotune" - - "img/s: ours autotuned ${tuned:-?} (heuristic ${ours:-?}), cudnn benchmark ${cudnn_tuned:-?} (heuristic ${cudnn:-?}); ours tuned/heuristic $(p12_ratio "$tuned" "$ours"), ours tuned/cudnn benchmark $(p12_ratio "$tuned" "$cudnn_tuned"), cudnn benchmark/eager $(p12_ratio "$cudnn_tuned" "$eager")"
    fi
  done
  for model in lenet5 resnet20; do
    step "p12_${model}_torch_compiled" "$T_TRAIN" python3 bench/torch_gpu_step.py "$model" 128 30 \
      --compile
    compiled=$(p12_torch "p12_${model}_torch_compiled") ours=$(p12_rate "p12_${model}_ours")
    row "p12_${model}_compiled" - - "torch compiled ${compiled:-?} img/s; ours/compiled $(p12_ratio "$ours" "$compiled")"
  done
else
  row p12 skipped - "echelon CLI not built"
fi

# ---- the kernels' A/B rows: each switch of our kernels off vs on, per layer ------------------------
# After P0-P2, so that the table's P rows come first; the budget left decides how many A/B rows
# run (exp_gpu_kernels prints a section at a time: a timeout keeps the sections before it).
if [[ -x $BUILD/bench/exp_gpu_kernels ]]; then
  # --fma-ab / --mma-tile-ab: the 128x128 tiles' new cores beside the old ones, per conv layer
  # (the SGEMM rows always print both); the A/B of session 24's unmeasured kernels.
  # --autotune-ab: each layer's passes with the heuristic's kernels vs the autotuned ones
  # (cuda/kernels/conv_tune.h), fp32, TF32 and bf16, and the tuner's picks.
  # --mma-stages-ab: the TF32 SGEMM's 128x128 ring at 2 vs 4 stages (cp.async 1 vs 3 slices
  # ahead; cuda::set_mma_stages): 5 rows (1k-4k NN, 2k TN and NN ld+1) of 2 timings, ~10 s with
  # the warm-ups.
  # --mma-async-k-ab: the TF32 SGEMM's k-contiguous operands by float4 registers vs by cp.async
  # into [m][k] rows (cuda::set_mma_async_k): 6 rows (1k-4k NN at 4 stages; 2k NN, NT at 2; 2k NT
  # at 4) of 2 timings, ~12 s estimated from the line above (not measured). The conv's side
  # (--conv-async-k-ab: every TF32 layer x 3 passes x 2 depths x 2) is too long for this step; the
  # autotuner above times its async-K candidates (ConvConfig::async_k) anyway.
  # --direct-ab: the weight gradient of the layers cuda/kernels/conv_direct.cu takes (LeNet-5's
  # two, ResNet-20's 3-, 16- and 32-channel ones and its stride-2 ones, the 3-channel first layers
  # of AlexNet and VGG-16), implicit GEMM vs direct, fp32/TF32/bf16: ~10 layers x 3 x 2 timings.
  # --phases-ab: the input gradient of ResNet's two 3x3 stride-2 layers, one implicit GEMM vs one
  # per phase (cuda/kernels/conv_phases.cu), fp32/TF32/bf16: 2 layers x 3 x 2 timings.
  # --window-ab: the forward and input gradient of the layers cuda/kernels/conv_window.cu takes
  # (the four nets' layers up to 512 channels, ResNet's stride-2 ones included), the heuristic's
  # choice with the window off (GEMM, phases, columns) vs window, fp32.
  step kernels_ab "$T_KERNELS_AB" "$BUILD/bench/exp_gpu_kernels" --repeats 7 --ab-only --fma-ab \
    --mma-tile-ab --mma-stages-ab --mma-async-k-ab --autotune-ab --direct-ab --phases-ab --window-ab
  # The direct weight gradient's first timing, in the table: GEMM time / direct time per layer
  # (> 1: the direct kernel, the heuristic's choice there, is faster), fp32.
  direct_ab=$(awk '/^== weight gradient: implicit GEMM \/ direct \(fp32/ { on = 1; next }
                   /^==/ { on = 0 }
                   on && NF > 3 && !/\+ bias:/ {
                     printf "%s%s %s %s %s", sep, $1, $2, $3, $NF; sep = "; " }' \
                "$(log_name kernels_ab)" 2>/dev/null)
  [[ -z $direct_ab ]] || row direct_wgrad_fp32 - - "GEMM / direct: $direct_ab"
  # With the bias gradient (session 35): the weight gradient then conv.cu's two bias kernels,
  # against the direct kernel summing the bias too (> 1: the fused one is faster), fp32.
  direct_bias=$(awk '/^== weight gradient: implicit GEMM \/ direct \(fp32/ { on = 1; next }
                     /^==/ { on = 0 }
                     on && /\+ bias:/ { printf "%s%s %s %s", sep, $1, $3, $NF; sep = "; " }' \
                  "$(log_name kernels_ab)" 2>/dev/null)
  [[ -z $direct_bias ]] || row direct_bias_fp32 - - "separate / with the bias: $direct_bias"
  # The phased input gradient's first timing: single GEMM time / phases time per layer, fp32.
  phases_ab=$(awk '/^== strided input gradient: single GEMM \/ phases \(fp32/ { on = 1; next }
                   /^==/ { on = 0 }
                   on && NF > 3 { printf "%s%s %s %s %s", sep, $2, $3, $4, $NF; sep = "; " }' \
                "$(log_name kernels_ab)" 2>/dev/null)
  [[ -z $phases_ab ]] || row dgrad_phases_fp32 - - "single GEMM / phases: $phases_ab"
  # The window kernel (sessions 36-37): GEMM time / window time per layer and direction (> 1: the
  # window kernel is faster; the heuristic takes it up to 64 channels of the pass, the autotuner
  # may above), fp32.
  window_ab=$(awk '/^== forward and input gradient: GEMM \/ window/ { on = 1; next }
                   /^==/ { on = 0 }
                   on && NF > 3 { printf "%s%s %s %s", sep, $1, $2, $3; sep = "; "
                                  for (i = 5; i <= NF; ++i)
                                    if ($i ~ /^\(/) printf " %s %s", $(i - 4), $i }' \
                "$(log_name kernels_ab)" 2>/dev/null)
  [[ -z $window_ab ]] || row window_fp32 - - "GEMM / window: $window_ab"
fi
# Every kernel timing, with each kernel's registers and occupancy below them, in one file.
cat "$(log_name kernels)" "$(log_name kernels_ab)" "$(log_name resources)" >"$OUT/kernels.txt" 2>/dev/null

# ---- pipeline on one GPU: 2 partitions, --balance auto -------------------------------------------
# Each partition on its own stream; the trace shows the overlap, summary.json's pipeline block the
# busy/idle split. Sequential beside it as the baseline.
if [[ -x $cli ]]; then
  for schedule in stale sequential; do
    step "pipeline_$schedule" "$T_PIPELINE" "$cli" train --model resnet20 --data synthetic \
      --limit-train 2048 --limit-test 512 --epochs 1 --batch-size 128 --device cuda:0 \
      --pipeline 2 --balance auto --schedule-pipeline "$schedule" --progress lines \
      --trace "$LOGS/pipeline-$schedule-trace.json" --out "$LOGS/run-pipeline-$schedule"
  done
  # --devices with both partitions on the one GPU: the per-partition placement path (peer access is
  # only enabled between distinct GPUs; with >= 2 GPUs, give cuda:0,cuda:1 by hand).
  step pipeline_devices "$T_PIPELINE" "$cli" train --model lenet5 --data synthetic \
    --limit-train 2048 --limit-test 512 --epochs 1 --pipeline 2 --devices cuda:0,cuda:0 \
    --progress lines --out "$LOGS/run-pipeline-devices"
fi

# ---- benchmarks ---------------------------------------------------------------------------------
if [[ -x $BUILD/bench/bench_ops ]]; then
  step bench_gpu "$T_BENCH" "$BUILD/bench/bench_ops" --benchmark_filter='GPU' \
    --benchmark_min_time=0.05 --benchmark_counters_tabular=true
else
  row bench_gpu skipped - "bench_ops not built (Google Benchmark absent)"
fi

finish
