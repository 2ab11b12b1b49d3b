#!/usr/bin/env bash
# The experiment drivers (bench/exp_*.cpp) answer --help and refuse bad arguments with one
# "NAME: error:" line and exit status 2, rather than running with defaults or printing NaN.
# Usage: tests/bench_drivers.sh BENCH_DIR DRIVER...
set -uo pipefail
dir=$1; shift
failures=0
expect() {  # status pattern command...
  local want=$1 pattern=$2; shift 2
  local out status
  out=$("$@" 2>&1); status=$?
  if [ "$status" != "$want" ] || ! grep -q -- "$pattern" <<<"$out"; then
    echo "FAIL: $* -> exit $status (want $want), output:"; echo "$out" | head -5
    failures=$((failures + 1))
  fi
}
for name in "$@"; do
  expect 0 "Usage" "$dir/$name" --help
  expect 2 "$name: error:" "$dir/$name" --no-such-flag
done
# Values out of range or malformed name the option.
for name in "$@"; do
  case $name in
    exp_echo) expect 2 "steps" "$dir/$name" 0; expect 2 "batch_ms" "$dir/$name" 10 abc ;;
    exp_echo_accuracy) expect 2 "target" "$dir/$name" 1 1:batch --target 2 ;;
    exp_decode) expect 2 "images" "$dir/$name" 0; expect 2 "dir" "$dir/$name" 10 /no/such/dir ;;
    exp_gpu_kernels) expect 2 "repeats" "$dir/$name" --repeats 0 ;;
    exp_gpu_profile)
      expect 2 "layers" "$dir/$name" --layers 19
      expect 2 "groups" "$dir/$name" --groups sgemm,frob ;;
    exp_loader_fuse) expect 2 "images" "$dir/$name" --images 0 ;;
    exp_train_throughput) expect 2 "rounds" "$dir/$name" --rounds 0 ;;
    exp_pipeline)
      expect 2 "repeat" "$dir/$name" --repeat 0
      expect 2 "schedules" "$dir/$name" --schedules stale,frob ;;
  esac
done
echo "bench drivers: $failures failure(s)"
[ "$failures" = 0 ]
