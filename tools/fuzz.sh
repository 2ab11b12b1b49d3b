#!/usr/bin/env bash
# Fuzz campaigns over the parsers (tests/fuzz, docs/fuzzing.md).
#
#   tools/fuzz.sh [--minutes N] [--jobs J] [TARGET...]   run each target N minutes (default 1),
#                                                        J targets at a time (default nproc)
#   tools/fuzz.sh --coverage [TARGET...]                 line coverage of each parser's sources
#   tools/fuzz.sh --list                                 the targets
#
# Builds the libFuzzer binaries with clang-14 in build-asan (the same configuration as CI's
# AddressSanitizer + UBSan build, plus -DECHELON_FUZZ=ON; FUZZ_BUILD=DIR to change). Each target
# starts from its committed seeds (tests/fuzz/corpus/<target>) and a working corpus kept in
# DIR/fuzz-corpus/<target>, which is merged (minimised) at the end. Findings (crash-*, timeout-*,
# oom-*, leak-*) land in DIR/fuzz-findings/<target>/: add the input to tests/fuzz/corpus/<target>/
# as crash-<what> once the parser is fixed, so the replay test keeps it fixed.
# FUZZ_SEED=N fixes libFuzzer's random seed (CI does, so a run is reproducible and a finding is
# not a coin toss between two CI runs of the same commit; local campaigns keep a fresh seed).
# Prints per target: CPU-seconds, execs, execs/s, corpus size, new inputs, coverage, findings.
# Exits 1 when any target has a finding.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
export CCACHE_BASEDIR=$PWD CCACHE_NOHASHDIR=true

all_targets=(idx cifar10 image safetensors json resume cli spec diff_jpeg diff_png diff_gzip)
minutes=1
jobs=$(nproc)
mode=fuzz
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --minutes) minutes=$2; shift 2 ;;
    --seconds) minutes=$(awk "BEGIN{print $2/60}"); shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --coverage) mode=coverage; shift ;;
    --list) printf '%s\n' "${all_targets[@]}"; exit 0 ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
[ ${#targets[@]} -gt 0 ] || targets=("${all_targets[@]}")
for t in "${targets[@]}"; do
  [[ " ${all_targets[*]} " == *" $t "* ]] || { echo "fuzz.sh: unknown target $t" >&2; exit 2; }
done

# The parser sources each target exercises (line coverage is reported on these).
declare -A sources=(
  [idx]="data/io.cpp data/datasets.cpp"
  [cifar10]="data/datasets.cpp"
  [image]="data/image_codec.cpp"
  [safetensors]="tensor/safetensors.cpp app/checkpoint.cpp"
  [json]="base/json.cpp"
  [resume]="app/cli/command.cpp app/options.cpp"
  [cli]="app/cli/command.cpp app/options.cpp"
  [spec]="parallel/partition.cpp tensor/device.cpp parallel/schedule.cpp tensor/dtype.cpp"
  [diff_jpeg]="data/image_codec.cpp data/jpeg_decode.cpp"
  [diff_png]="data/image_codec.cpp"
  [diff_gzip]="data/io.cpp"
)
declare -A dicts=([idx]=idx [diff_gzip]=idx [safetensors]=safetensors [json]=json [resume]=json
                  [cli]=cli [image]=png [diff_png]=png [diff_jpeg]=jpeg)

build=${FUZZ_BUILD:-build-asan}
cov_build=${FUZZ_COV_BUILD:-build-fuzz-cov}

if [ "$mode" = coverage ]; then
  command -v llvm-cov-14 >/dev/null || { echo "fuzz.sh: llvm-cov-14 missing (apt-get install llvm-14)" >&2; exit 2; }
  if [ ! -f "$cov_build/build.ninja" ]; then
    CC=clang-14 CXX=clang++-14 cmake -S . -B "$cov_build" -G Ninja -DCMAKE_BUILD_TYPE=Debug \
      -DECHELON_CUDA=OFF -DECHELON_BENCH=OFF -DECHELON_FUZZ_COVERAGE=ON >/dev/null
  fi
  cmake --build "$cov_build" -j "$jobs" --target echelon_fuzz_replay
  mkdir -p "$cov_build/profiles"
  printf '%-12s %8s %8s %8s  %s\n' target inputs lines covered "line coverage of the parser sources"
  for t in "${targets[@]}"; do
    rm -f "$cov_build/profiles/$t".*
    dirs=("tests/fuzz/corpus/$t")
    [ -d "$build/fuzz-corpus/$t" ] && dirs+=("$build/fuzz-corpus/$t")
    LLVM_PROFILE_FILE="$cov_build/profiles/$t.profraw" \
      "$cov_build/tests/fuzz/echelon_fuzz_replay" "$t" "${dirs[@]}" >/dev/null 2>&1 || true
    llvm-profdata-14 merge -o "$cov_build/profiles/$t.profdata" "$cov_build/profiles/$t.profraw"
    report=$(llvm-cov-14 report "$cov_build/tests/fuzz/echelon_fuzz_replay" \
      -instr-profile="$cov_build/profiles/$t.profdata")
    inputs=$(find "${dirs[@]}" -type f | wc -l)
    # Rows: Filename Regions Missed Cover Functions Missed Executed Lines Missed Cover ...; the
    # file names are relative to the build folder ("../data/io.cpp").
    read -r lines cover per_file < <(echo "$report" | awk -v want="${sources[$t]}" '
      BEGIN { n = split(want, w, " "); for (i = 1; i <= n; i++) keep[w[i]] = 1 }
      { f = $1; sub(/^(\.\.\/)+/, "", f) }
      (f in keep) { total += $8; missed += $9; detail = detail f " " $10 " " }
      END { printf "%d %.1f%% %s\n", total, total ? 100 * (total - missed) / total : 0, detail }')
    printf '%-12s %8s %8s %8s  %s\n' "$t" "$inputs" "$lines" "$cover" "$per_file"
  done
  exit 0
fi

# ---- fuzzing -------------------------------------------------------------------------------------
if [ ! -f "$build/build.ninja" ] || ! grep -q "ECHELON_FUZZ:BOOL=ON" "$build/CMakeCache.txt" 2>/dev/null; then
  CC=clang-14 CXX=clang++-14 cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Debug \
    -DECHELON_CUDA=OFF -DECHELON_BENCH=OFF -DECHELON_SANITIZE=address,undefined -DECHELON_FUZZ=ON >/dev/null
fi
cmake --build "$build" -j "$jobs" --target $(printf 'fuzz_%s ' "${targets[@]}")

seconds=$(awk "BEGIN{s=int($minutes*60+0.5); print (s<1?1:s)}")
logs="$build/fuzz-logs"
mkdir -p "$logs"
run_one() {  # target seconds
  local t=$1 s=$2 build=$3
  local work="$build/fuzz-corpus/$t" findings="$build/fuzz-findings/$t"
  mkdir -p "$work" "$findings"
  local dict=() seed=()
  [ -n "${FUZZ_SEED:-}" ] && seed=(-seed="$FUZZ_SEED")
  [ "${4:--}" != - ] && dict=(-dict="tests/fuzz/dicts/$4.dict")
  # -timeout 2 s per input, 512 MB per allocation, 1 GB RSS (issue 16's budget); the seeds are
  # read, new inputs go to the working corpus.
  ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=0 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  "$build/fuzz/fuzz_$t" -max_total_time="$s" -timeout=2 -rss_limit_mb=1024 -malloc_limit_mb=512 \
    -max_len=65536 -print_final_stats=1 -artifact_prefix="$findings/" "${dict[@]}" "${seed[@]}" \
    "$work" "tests/fuzz/corpus/$t" >"$build/fuzz-logs/$t.log" 2>&1 || true
  # Minimise: keep only inputs that add coverage.
  local merged="$build/fuzz-corpus/$t.merged"
  rm -rf "$merged"; mkdir -p "$merged"
  "$build/fuzz/fuzz_$t" -merge=1 -timeout=2 -rss_limit_mb=1024 -malloc_limit_mb=512 \
    "$merged" "$work" >"$build/fuzz-logs/$t.merge.log" 2>&1 && { rm -rf "$work"; mv "$merged" "$work"; } || rm -rf "$merged"
}
export -f run_one
start=$SECONDS
for t in "${targets[@]}"; do
  printf '%s %s %s %s\n' "$t" "$seconds" "$build" "${dicts[$t]:--}"  # no trailing blank: xargs -L
done | xargs -P "$jobs" -L 1 bash -c 'run_one "$@"' _
wall=$((SECONDS - start))

printf '\n%-12s %8s %10s %8s %8s %6s %8s %8s\n' target cpu_s execs execs/s corpus new cov findings
status=0
for t in "${targets[@]}"; do
  log="$logs/$t.log"
  execs=$(awk '/stat::number_of_executed_units/{print $2}' "$log" | tail -1)
  rate=$(awk '/stat::average_exec_per_sec/{print $2}' "$log" | tail -1)
  new=$(awk '/stat::new_units_added/{print $2}' "$log" | tail -1)
  cov=$( (grep -oE 'cov: [0-9]+' "$log" || true) | tail -1 | awk '{print $2}')
  corpus=$(find "$build/fuzz-corpus/$t" -type f | wc -l)
  found=$(find "$build/fuzz-findings/$t" -type f \( -name 'crash-*' -o -name 'timeout-*' -o -name 'oom-*' -o -name 'leak-*' \) | wc -l)
  if [ "$found" -eq 0 ] && grep -qE 'ERROR: (AddressSanitizer|libFuzzer|LeakSanitizer|UndefinedBehaviorSanitizer)|runtime error:|FUZZ FINDING' "$log"; then
    found=1
  fi
  printf '%-12s %8s %10s %8s %8s %6s %8s %8s\n' "$t" "$seconds" "${execs:-?}" "${rate:-?}" "$corpus" "${new:-?}" "${cov:-?}" "$found"
  if [ "$found" -gt 0 ]; then
    status=1
    grep -m3 -E 'ERROR:|runtime error:|FUZZ FINDING|SUMMARY' "$log" | sed "s/^/  $t: /" || true
  fi
done
echo "wall ${wall}s for ${#targets[@]} targets x ${seconds}s, ${jobs} at a time; logs in $logs, findings in $build/fuzz-findings"
exit $status
