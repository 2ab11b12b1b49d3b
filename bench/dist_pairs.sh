#!/usr/bin/env bash
# Alternating pairs: the 2-partition stale ResNet-20 (3x32x32, batch 64, --split-blocks, cut
# $PPV, default 17) as 2 threads of one process (T) and as 2 mpirun processes (P:<mpirun args,
# '+' for spaces>), each under `perf stat`. One line per run: epoch-2 img/s, the partitions' busy
# CPU s and their sum, per partition "wait+send+body_receive(update) busy" seconds, each
# process's task-clock s, context switches, CPU migrations and page faults (bench/RESULTS.md,
# "dist10 (issue 12)"). Needs a build with MPI, and perf.
#   bench/dist_pairs.sh BIN IMAGES ROUNDS T P:--bind-to+none+--mca+btl+self,vader ...
#   PRIO=-20  run at this scheduler autogroup nice (root), as bench/dist_speed.sh
bin=$1 images=$2 rounds=$3; shift 3
[ -n "${PRIO:-}" ] && echo "$PRIO" >/proc/self/autogroup
export OPENBLAS_NUM_THREADS=1
flags="train --model resnet20 --data synthetic --limit-train $images --limit-test 64 --batch-size 64 --epochs 2 --threads 1 --progress none --overwrite --pipeline 2 --ppv ${PPV:-17} --schedule-pipeline stale --split-blocks"
ev=task-clock,page-faults,context-switches,cpu-migrations
for r in $(seq 1 $rounds); do
 for mode in "$@"; do
  w=$(mktemp -d)
  load=$(cut -d' ' -f1 /proc/loadavg)
  if [ "$mode" = T ]; then
    perf stat -x, -o $w/rank0.perf -e $ev $bin $flags --out $w/p0 >$w/log 2>&1
    sum=$w/p0/summary.json; key=stages
  else
    args=${mode#P:}; args=${args//+/ }
    timeout 300 mpirun --allow-run-as-root --oversubscribe $args -np 2 sh -c "exec perf stat -x, -o $w/rank\$OMPI_COMM_WORLD_RANK.perf -e $ev $bin $flags --out $w/p\$OMPI_COMM_WORLD_RANK" >$w/log 2>&1
    sum=$w/p0/summary.json; key=ranks
  fi
  rate=$(grep -m1 "epoch 2/2" $w/log | grep -o "[0-9]* img/s" | cut -d' ' -f1)
  python3 - "$sum" "$mode" "$rate" "$load" $w/rank*.perf <<'PY'
import json,sys
p=json.load(open(sys.argv[1]))["pipeline"]
rows=p.get("processes",{}).get("ranks") or p["stages"]
st="/".join("%.2f"%r["busy_cpu_s"] for r in rows)
wt="/".join("%.2f+%.2f+%.3f(%.3f) busy %.2f"%(r.get("wait_s",0),r.get("send_s",0),r.get("body_receive_s",0),r.get("update_s",0),r["busy_s"]) for r in rows)
tc=[];cs=[];mg=[];pf=[]
for f in sys.argv[5:]:
    ev={l.split(",")[2]:float(l.split(",")[0]) for l in open(f) if l.count(",")>3}
    tc.append("%.2f"%(ev["task-clock"]/1000)); cs.append("%d"%ev["context-switches"]); mg.append("%d"%ev["cpu-migrations"]); pf.append("%d"%ev["page-faults"])
print("%-28s load %s %4s img/s stagecpu %s sum %.2f wait %s taskclk %s cs %s mig %s pf %s"%(sys.argv[2][:28],sys.argv[4],sys.argv[3],st,sum(r["busy_cpu_s"] for r in rows),wt,"/".join(tc),"/".join(cs),"/".join(mg),"/".join(pf)))
PY
  [ -f $sum ] && rm -rf $w || tail -5 $w/log
 done
done
