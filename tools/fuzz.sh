#!/usr/bin/env bash
# Fuzz campaigns over the parsers (tests/fuzz, docs/fuzzing.md).
#
#   tools/fuzz.sh [--minutes N] [--jobs J] [TARGET...]   run each target N minutes (default 1),
#                                                        J targets at a time (default nproc)
#   tools/fuzz.sh --cpu-minutes N [TARGET...]            run each target until its libFuzzer
#                                                        process has used N CPU-minutes (user+sys,
#                                                        /usr/bin/time), in wall-clock chunks: on
#                                                        shared cores wall time overstates CPU
#   tools/fuzz.sh --coverage [TARGET...]                 line coverage of each target's parser
#                                                        (the functions in tests/fuzz/parsers.txt)
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

all_targets=(idx cifar10 image safetensors json resume cli spec diff_jpeg diff_png diff_gzip env)
minutes=1
jobs=$(nproc)
mode=fuzz
cpu_mode=0
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --minutes) minutes=$2; shift 2 ;;
    --seconds) minutes=$(awk "BEGIN{print $2/60}"); shift 2 ;;
    --cpu-minutes) minutes=$2; cpu_mode=1; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --coverage) mode=coverage; shift ;;
    --list) printf '%s\n' "${all_targets[@]}"; exit 0 ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
[ ${#targets[@]} -gt 0 ] || targets=("${all_targets[@]}")
for t in "${targets[@]}"; do
  [[ " ${all_targets[*]} " == *" $t "* ]] || { echo "fuzz.sh: unknown target $t" >&2; exit 2; }
done

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
  # Two numbers per target: line coverage of the parser (the functions tests/fuzz/parsers.txt lists
  # for it: the bar of docs/fuzzing.md) and, for reference, of the whole files holding them (which
  # also hold writers, pixel loops and other non-parsing code). FUZZ_COV_VERBOSE=1 lists each
  # function's coverage and the missed lines.
  printf '%-12s %7s %7s %7s %8s  %s\n' target inputs lines parser files "parser lines covered per file"
  for t in "${targets[@]}"; do
    rm -f "$cov_build/profiles/$t".*
    dirs=("tests/fuzz/corpus/$t")
    [ -d "$build/fuzz-corpus/$t" ] && dirs+=("$build/fuzz-corpus/$t")
    # One process per input (a profile is written at exit): an input that crashes the replay
    # (a finding) loses only its own profile, and is reported.
    : >"$cov_build/profiles/$t.log"
    while IFS= read -r -d '' input; do
      LLVM_PROFILE_FILE="$cov_build/profiles/$t.%p.profraw" \
        "$cov_build/tests/fuzz/echelon_fuzz_replay" "$t" "$input" >/dev/null 2>>"$cov_build/profiles/$t.log" ||
        echo "fuzz.sh: coverage replay of $t failed on $input (a finding: replay it)" >&2
    done < <(find "${dirs[@]}" -type f -print0 | sort -z)
    llvm-profdata-14 merge -o "$cov_build/profiles/$t.profdata" "$cov_build/profiles/$t".*.profraw
    report=$(llvm-cov-14 report "$cov_build/tests/fuzz/echelon_fuzz_replay" \
      -instr-profile="$cov_build/profiles/$t.profdata")
    inputs=$(find "${dirs[@]}" -type f | wc -l)
    # Whole files. Rows: Filename Regions Missed Cover Functions Missed Executed Lines Missed
    # Cover ...; the names are relative to the build folder ("../data/io.cpp").
    files=$(awk '{print $2}' <(grep -E "^$t " tests/fuzz/parsers.txt) | sort -u | tr '\n' ' ')
    file_cover=$(echo "$report" | awk -v want="$files" '
      BEGIN { n = split(want, w, " "); for (i = 1; i <= n; i++) keep[w[i]] = 1 }
      { f = $1; sub(/^(\.\.\/)+/, "", f) }
      (f in keep) { total += $8; missed += $9 }
      END { printf "%.1f%%\n", total ? 100 * (total - missed) / total : 0 }')
    verbose=(); [ -n "${FUZZ_COV_VERBOSE:-}" ] && verbose=(-v)
    out=$(python3 tools/fuzz-parser-coverage.py "${verbose[@]}" "$cov_build/tests/fuzz/echelon_fuzz_replay" \
      "$cov_build/profiles/$t.profdata" "$t")
    read -r _ lines _ cover per_file <<<"$(echo "$out" | head -1)"
    printf '%-12s %7s %7s %7s %8s  %s\n' "$t" "$inputs" "$lines" "$cover" "$file_cover" "$per_file"
    echo "$out" | tail -n +2
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
run_one() {  # target seconds build dict cpu_mode
  local t=$1 s=$2 build=$3 cpu_mode=$5
  local work="$build/fuzz-corpus/$t" findings="$build/fuzz-findings/$t" log="$build/fuzz-logs/$t.log"
  mkdir -p "$work" "$findings"
  local dict=() seed=()
  [ -n "${FUZZ_SEED:-}" ] && seed=(-seed="$FUZZ_SEED")
  [ "${4:--}" != - ] && dict=(-dict="tests/fuzz/dicts/$4.dict")
  : >"$log"; : >"$build/fuzz-logs/$t.time"
  # -timeout 2 s per input, 512 MB per allocation, 1 GB RSS (issue 16's budget); the seeds are
  # read, new inputs go to the working corpus. CPU time (user+sys) of each run is measured; with
  # --cpu-minutes the target is restarted (keeping its working corpus) until it has used `s`
  # CPU-seconds, or stops at a finding.
  local used=0 left=$s chunk=0
  while :; do
    chunk=$((chunk + 1))
    ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=0 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    /usr/bin/time -a -o "$build/fuzz-logs/$t.time" -f '%e %U %S' \
    "$build/fuzz/fuzz_$t" -max_total_time="$left" -timeout=2 -rss_limit_mb=1024 -malloc_limit_mb=512 \
      -max_len=65536 -print_final_stats=1 -artifact_prefix="$findings/" "${dict[@]}" "${seed[@]}" \
      "$work" "tests/fuzz/corpus/$t" >>"$log" 2>&1 || true
    # libFuzzer's -timeout is wall time: on a loaded machine (a niced campaign on shared cores) an
    # input of 0.3 CPU-seconds can take 2 s. A timeout counts when the input, run again alone,
    # needs more than 2 CPU-seconds (or fails); otherwise it is set aside in unreproduced/.
    local f
    for f in "$findings"/timeout-*; do
      [ -e "$f" ] || continue
      if /usr/bin/time -o "$f.cpu" -f '%U %S' "$build/fuzz/fuzz_$t" -timeout=120 -rss_limit_mb=1024 \
           -malloc_limit_mb=512 "$f" >/dev/null 2>&1 && awk '{exit !($1 + $2 <= 2)}' "$f.cpu"; then
        mkdir -p "$findings/unreproduced"
        echo "fuzz.sh: $(basename "$f") not reproduced: $(awk '{print $1 + $2}' "$f.cpu") CPU-s alone" >>"$log"
        mv "$f" "$f.cpu" "$findings/unreproduced/"
      else
        rm -f "$f.cpu"
      fi
    done
    used=$(awk '{u += $2 + $3} END {printf "%d", u}' "$build/fuzz-logs/$t.time")
    left=$((s - used))
    [ "$cpu_mode" = 1 ] && [ "$left" -gt 0 ] && [ "$chunk" -lt 50 ] || break
    find "$findings" -maxdepth 1 -type f | grep -q . && break
    # A fixed seed would replay the same mutations: the next chunk continues with seed+chunk.
    [ -n "${FUZZ_SEED:-}" ] && seed=(-seed="$((FUZZ_SEED + chunk))")
  done
  # Minimise: keep only inputs that add coverage.
  local merged="$build/fuzz-corpus/$t.merged"
  rm -rf "$merged"; mkdir -p "$merged"
  "$build/fuzz/fuzz_$t" -merge=1 -timeout=2 -rss_limit_mb=1024 -malloc_limit_mb=512 \
    "$merged" "$work" >"$build/fuzz-logs/$t.merge.log" 2>&1 && { rm -rf "$work"; mv "$merged" "$work"; } || rm -rf "$merged"
}
export -f run_one
start=$SECONDS
for t in "${targets[@]}"; do
  printf '%s %s %s %s %s\n' "$t" "$seconds" "$build" "${dicts[$t]:--}" "$cpu_mode"  # no trailing blank: xargs -L
done | xargs -P "$jobs" -L 1 bash -c 'run_one "$@"' _
wall=$((SECONDS - start))

printf '\n%-12s %8s %8s %10s %8s %8s %6s %8s %8s\n' target wall_s cpu_s execs execs/s corpus new cov findings
status=0
for t in "${targets[@]}"; do
  log="$logs/$t.log"
  # Sums over the chunks of a --cpu-minutes run; execs/s is per CPU-second.
  execs=$(awk '/stat::number_of_executed_units/{n += $2} END {print n + 0}' "$log")
  new=$(awk '/stat::new_units_added/{n += $2} END {print n + 0}' "$log")
  read -r twall tcpu < <(awk '{w += $1; c += $2 + $3} END {printf "%d %d\n", w, c}' "$logs/$t.time")
  rate=$(awk -v e="$execs" -v c="$tcpu" 'BEGIN {printf "%d", (c > 0 ? e / c : 0)}')
  cov=$( (grep -oE 'cov: [0-9]+' "$log" || true) | tail -1 | awk '{print $2}')
  corpus=$(find "$build/fuzz-corpus/$t" -type f | wc -l)
  found=$(find "$build/fuzz-findings/$t" -maxdepth 1 -type f \( -name 'crash-*' -o -name 'timeout-*' -o -name 'oom-*' -o -name 'leak-*' \) | wc -l)
  # A timeout always leaves its input (checked above); any other error report counts as well.
  if [ "$found" -eq 0 ] && grep -E 'ERROR: (AddressSanitizer|libFuzzer|LeakSanitizer|UndefinedBehaviorSanitizer)|runtime error:|FUZZ FINDING' "$log" | grep -qv 'libFuzzer: timeout'; then
    found=1
  fi
  unrepro=$( (find "$build/fuzz-findings/$t/unreproduced" -name 'timeout-*' ! -name '*.cpu' 2>/dev/null || true) | wc -l)
  shown=$found; [ "$unrepro" -gt 0 ] && shown="$found (+${unrepro} unreproduced timeouts)"
  printf '%-12s %8s %8s %10s %8s %8s %6s %8s %8s\n' "$t" "$twall" "$tcpu" "${execs:-?}" "${rate:-?}" "$corpus" "${new:-?}" "${cov:-?}" "$shown"
  if [ "$found" -gt 0 ]; then
    status=1
    grep -m3 -E 'ERROR:|runtime error:|FUZZ FINDING|SUMMARY' "$log" | sed "s/^/  $t: /" || true
  fi
done
unit=$([ "$cpu_mode" = 1 ] && echo CPU-s || echo s)
echo "wall ${wall}s for ${#targets[@]} targets x ${seconds} ${unit}, ${jobs} at a time; logs in $logs, findings in $build/fuzz-findings"
exit $status
