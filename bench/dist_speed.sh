#!/usr/bin/env bash
# 2 single-thread processes (mpirun) vs 2 threads of one process vs ordinary training, stale
# pipeline, same cut. One line per run: the epoch-2 training images/s, wall seconds, CPU seconds
# (user + sys of the whole command) and, for the processes, each rank's CPU seconds. CPU seconds
# do not depend much on the machine's load; "bound" is the speedup the run would reach on two
# idle cores of its own: ordinary CPU / the busiest rank's CPU (each rank is single-threaded
# compute, so it cannot go faster than its own CPU time). "stages" are the partitions' busy
# seconds (wall) and, in brackets, the CPU seconds their threads ran within them (summary.json
# busy_s / busy_cpu_s): wall well above CPU means the partition was preempted, not slow. Every
# epoch ends with a flush (the pipeline fills and drains), so N mini-batches per epoch cap two
# balanced partitions at 2N / (N + 1) of ordinary training, printed as "cap"; "bound" is what the
# run's own split allows: the stages' CPU seconds summed over the largest, times N / (N + 1). For
# the processes, "waits" are each rank's seconds blocked receiving (summary.json wait_s) and, in
# brackets, the part of them spent taking message bodies in once their header had arrived
# (body_receive_s: the transfer, not the wait for the neighbour). Needs a build with MPI
# (bench/RESULTS.md, "Pipeline across processes").
#   MODEL=resnet20   ResNet-20 (batch 64, cut 7) instead of LeNet-5
#   IMAGES=N         training images (default 8192 for LeNet-5, 2048 for ResNet-20: 32 batches)
#   E=path OLD=path  binaries to compare (OLD optional: alternated with E within each round)
#   BTL=vader|tcp    Open MPI's transport between the ranks (default vader: shared memory, what
#                    mpirun picks on one machine; tcp: loopback, as the tests run)
#   ROUNDS=N PPV=..  rounds (default 2) and the cut (default 3 / 7); PPV=auto: --balance auto
#                    (each pipeline run profiles and picks its own cut, printed as "cut N")
#   SPLIT=1          --split-blocks: residual blocks count as four layers, PPV in that numbering
#                    (ResNet-20: block b's steps are layers 3 + 4b .. 6 + 4b; cut 7 is 19)
# The last lines are the medians over the rounds (rate, its ratio to ordinary training, the
# stages' CPU seconds summed, or the whole run's for ordinary training): use ROUNDS >= 3.
#   PRIO=-20         run at this scheduler autogroup nice (needs root): on a machine shared with
#                    other users' work, their processes then mostly fill our idle moments
cd "$(dirname "$0")/.." || exit 1
E=${E:-build-cpu/echelon}
if [ "${MODEL:-lenet5}" = resnet20 ]; then
  batch=64 images=${IMAGES:-2048}
  flags=(train --model resnet20 --data synthetic --limit-train "$images" --limit-test 64
         --batch-size $batch --epochs 2 --threads 1 --progress none --overwrite)
  cut=${PPV:-7}
else
  batch=128 images=${IMAGES:-8192}
  flags=(train --model lenet5 --data synthetic --limit-train "$images" --limit-test 256
         --batch-size $batch --epochs 2 --threads 1 --progress none --overwrite)
  cut=${PPV:-3}
fi
if [ "$cut" = auto ]; then
  pipe=(--pipeline 2 --balance auto --schedule-pipeline stale)
else
  pipe=(--pipeline 2 --ppv "$cut" --schedule-pipeline stale)
fi
[ "${SPLIT:-0}" = 1 ] && pipe+=(--split-blocks)
case ${BTL:-vader} in
  vader) btl=(--mca btl self,vader) ;;
  tcp) btl=(--mca btl self,tcp --mca btl_tcp_if_include lo) ;;
  *) echo "BTL must be vader or tcp, got '$BTL'" >&2; exit 2 ;;
esac
export OPENBLAS_NUM_THREADS=1
if [ -n "${PRIO:-}" ]; then
  echo "$PRIO" >/proc/self/autogroup || { echo "PRIO: cannot set the autogroup nice" >&2; exit 2; }
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# run LABEL BINARY ENGINE [mpirun]: prints "LABEL ENGINE img/s wall cpu [rank cpus]"
run() {
  local label=$1 bin=$2 engine=$3 cmd out
  case $engine in
    ordinary) cmd=("$bin" "${flags[@]}" --out "$work/run") ;;
    threads) cmd=("$bin" "${flags[@]}" "${pipe[@]}" --out "$work/run") ;;
    processes)
      # Each rank times itself, so that the busiest rank's CPU can be read.
      cmd=(timeout 300 mpirun --allow-run-as-root --oversubscribe --bind-to none "${btl[@]}" -np 2
           sh -c "exec /usr/bin/time -f '%U %S' -o $work/rank\$OMPI_COMM_WORLD_RANK $bin \
             ${flags[*]} ${pipe[*]} --out $work/run\$OMPI_COMM_WORLD_RANK") ;;
  esac
  out=$(/usr/bin/time -f "time %e %U %S" "${cmd[@]}" 2>&1)
  local rate wall cpu ranks=""
  rate=$(grep -m1 "epoch 2/2" <<<"$out" | grep -o "[0-9]* img/s" | cut -d' ' -f1)
  read -r wall cpu < <(grep "^time " <<<"$out" | awk '{print $2, $3 + $4}')
  if [ "$engine" = processes ]; then
    ranks=$(for r in 0 1; do awk '{printf " %.2f", $1 + $2}' "$work/rank$r"; done)
  fi
  local summary=$work/run/summary.json stages
  [ "$engine" = processes ] && summary=$work/run0/summary.json
  stages=$(python3 -c '
import json, sys
p = json.load(open(sys.argv[1])).get("pipeline", {})
rows = p.get("processes", {}).get("ranks") or p.get("stages", [])
cpu = [r.get("busy_cpu_s", 0) for r in rows]
line = " ".join("%.2f (%.2f)" % (r["busy_s"], c) for r, c in zip(rows, cpu))
if p.get("ppv"):
    line = "cut %s: %s" % (p["ppv"], line)
if rows and max(cpu) > 0:
    n = int(sys.argv[2])
    line += " bound %.2fx" % (sum(cpu) / max(cpu) * n / (n + 1))
if any("body_receive_s" in r for r in rows):
    line += " waits " + " ".join("%.2f (%.3f)" % (r["wait_s"], r["body_receive_s"]) for r in rows)
print(line)' "$summary" "$steps" 2>/dev/null)
  printf "%-4s %-10s %6s img/s %6.2f s wall %6.2f s cpu%s%s\n" "$label" "$engine" "${rate:-?}" \
    "$wall" "$cpu" "${ranks:+ ranks$ranks}" "${stages:+ stages $stages}" | tee -a "$work/lines"
}

# The medians over the rounds, per binary and engine: images/s (and over the same binary's
# ordinary median) and the stages' CPU seconds summed. One run's rate moves by 10-30% on this VM
# (the host's load, not ours: even the ordinary run's CPU seconds vary so), so compare these.
medians() {
  python3 - "$work/lines" <<'PY'
import re, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) < 3 or not f[2].isdigit():
        continue
    stages = re.findall(r"\(([0-9.]+)\)", line.split(" stages ")[1]) if " stages " in line else []
    cpu = sum(float(c) for c in stages[:2]) if stages else float(f[7])
    runs.setdefault((f[0], f[1]), []).append((int(f[2]), cpu))
for (label, engine), rows in runs.items():
    rate = statistics.median(r for r, _ in rows)
    cpu = statistics.median(c for _, c in rows)
    base = runs.get((label, "ordinary"))
    ratio = " (%.2fx)" % (rate / statistics.median(r for r, _ in base)) if base else ""
    print("%-4s %-10s median of %d: %6.0f img/s%s, %.2f s compute cpu" % (label, engine, len(rows), rate, ratio, cpu))
PY
}

steps=$(((images + batch - 1) / batch))
echo "model ${MODEL:-lenet5}, btl ${BTL:-vader}, cut $cut, $steps batches per epoch," \
  "cap $(awk -v n="$steps" 'BEGIN {printf "%.2fx", 2 * n / (n + 1)}')"
for round in $(seq 1 "${ROUNDS:-2}"); do
  echo "== round $round, load $(cut -d' ' -f1-3 /proc/loadavg)"
  for engine in ordinary threads processes; do
    [ -n "${OLD:-}" ] && run old "$OLD" $engine
    run new "$E" $engine
  done
done
medians
