#!/usr/bin/env bash
# The same 2-process run started by mpirun and by `echelon launch --rdzv env` (torchrun-style
# rendezvous through ompi-server), alternating rounds: stale K=2 LeNet-5, 2 epochs of 1024
# synthetic images; prints each run's wall time (start-up included) and its epoch-2 images/s.
# Needs build-cpu with MPI (bench/RESULTS.md, "torchrun-style rendezvous").
cd "$(dirname "$0")/.."
E=build-cpu/echelon
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export OMPI_MCA_btl=self,tcp OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo
flags=(train --model lenet5 --data synthetic --limit-train 1024 --limit-test 128 --batch-size 32
       --epochs 2 --pipeline 2 --threads 1 --progress none)
for round in 1 2 3; do
  for mode in mpirun rdzv; do
    start=$(date +%s.%N)
    if [ $mode = mpirun ]; then
      tests/mpi/mpirun.sh 120 2 $E "${flags[@]}" --out "$out/$mode$round" >"$out/$mode.log" 2>&1
    else
      $E launch --rdzv env --master-port $((29900 + round)) -- "${flags[@]}" \
        --out "$out/$mode$round" >"$out/$mode.log" 2>&1
    fi
    end=$(date +%s.%N)
    speed=$(grep "^epoch 2/2" "$out/$mode.log" | sed 's/.*  \([0-9]*\) img\/s.*/\1/')
    printf "round %d %-6s wall %.2f s  epoch-2 %s img/s\n" $round $mode "$(echo "$end - $start" | bc)" "$speed"
  done
done
uptime
