#!/usr/bin/env bash
# Issue #10 P1/P2 on a lent GPU, in one device call (session 22): build with tools/gpu-check.sh,
# run the parity and bf16 suites, then the train-step rates: Echelon (echelon train, synthetic
# resident data, epoch-2 img/s; eager and --cuda-graph; fp32 and tf32) beside PyTorch
# (bench/torch_gpu_step.py: eager fp32/tf32, compiled fp32 for lenet5/resnet20). Table last.
# Use (repository root, after tools/fill-deps.sh):
#   run(command="bash bench/gpu_step_peers.sh", carry=[".deps"], timeout_s=400)   (~250 s)
set -uo pipefail
export OUT=${OUT:-/tmp/out}
t0=$(date +%s)
OUT=/tmp/gcout BUDGET_S=200 STOP_AFTER=build bash tools/gpu-check.sh > $OUT/build.log 2>&1
tail -8 $OUT/build.log
E=build-gpu/echelon
for s in parity_gpu bf16_gpu; do
  timeout 60 build-gpu/tests/echelon_gpu_tests --test-suite=$s > $OUT/suite_$s.log 2>&1
  echo "suite $s rc=$? $(grep -a 'test cases' $OUT/suite_$s.log)"
done
grep -a "FAIL" $OUT/suite_parity_gpu.log | head -5
py=python3; [ -x /opt/torch/.venv/bin/python3 ] && py=/opt/torch/.venv/bin/python3
: > $OUT/table.txt
for m in lenet5 resnet20 alexnet vgg16; do
  n=12800; [ $m = vgg16 ] && n=5120; [ $m = alexnet ] && n=7680
  for v in "fp32" "fp32 --cuda-graph" "tf32" "tf32 --cuda-graph"; do
    set -- $v
    r=$(timeout 60 $E train --model $m --data synthetic --limit-train $n --limit-test 128 \
        --batch-size 128 --epochs 2 --device cuda:0 --resident-data --precision $1 ${2:-} \
        --progress none --log-every 0 --overwrite --out /tmp/r 2>&1 | tee -a $OUT/echelon.log |
        grep -a "^epoch 2/2" | grep -o "[0-9]* img/s")
    echo "echelon $m $v: ${r:-failed}" | tee -a $OUT/table.txt
  done
  for v in "" "--tf32"; do
    r=$(timeout 60 $py bench/torch_gpu_step.py $m 128 30 $v 2>&1 | tee -a $OUT/torch.log | grep -a RESULT)
    echo "torch $m eager ${v:-fp32}: ${r:-failed}" | tee -a $OUT/table.txt
  done
done
for m in lenet5 resnet20; do
  [ $(( $(date +%s) - t0 )) -gt 300 ] && { echo "torch compiled $m: skipped (time)" >> $OUT/table.txt; continue; }
  r=$(timeout 90 $py bench/torch_gpu_step.py $m 128 30 --compile 2>&1 | tee -a $OUT/torch.log | grep -a RESULT)
  echo "torch $m compiled fp32: ${r:-failed}" | tee -a $OUT/table.txt
done
echo "== total $(( $(date +%s) - t0 )) s"
cat $OUT/table.txt
