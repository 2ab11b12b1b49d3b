#!/usr/bin/env bash
# Issue #10, one device call (session 22's third): cuDNN as the whole-model yardstick for P1/P2
# (echelon train --conv-impl ours | cudnn, fp32 / tf32, --cuda-graph, resident synthetic data,
# epoch-2 img/s), and where a ResNet-20 / VGG-16 step's time goes (bench model --per-layer).
# Use (repository root, after tools/fill-deps.sh):
#   run(command="bash bench/gpu_conv_yardstick.sh", carry=[".deps"], timeout_s=180)   (~80 s)
set -uo pipefail
export OUT=${OUT:-/tmp/out}
t0=$(date +%s)
OUT=/tmp/gcout BUDGET_S=150 STOP_AFTER=build bash tools/gpu-check.sh > $OUT/build.log 2>&1
tail -4 $OUT/build.log
E=build-gpu/echelon
: > $OUT/table.txt
for m in resnet20 vgg16 alexnet lenet5; do
  n=12800; [ $m = vgg16 ] && n=5120
  for v in "fp32 ours" "fp32 cudnn" "tf32 cudnn"; do
    set -- $v
    r=$(timeout 40 $E train --model $m --data synthetic --limit-train $n --limit-test 128 \
        --batch-size 128 --epochs 2 --device cuda:0 --resident-data --cuda-graph --precision $1 \
        --conv-impl $2 --progress none --log-every 0 --overwrite --out /tmp/r 2>&1 |
        tee -a $OUT/echelon.log | grep -a "^epoch 2/2" | grep -o "[0-9]* img/s")
    echo "echelon $m $v graph: ${r:-failed}" | tee -a $OUT/table.txt
  done
done
for m in resnet20 vgg16; do
  [ $(( $(date +%s) - t0 )) -gt 150 ] && break
  timeout 40 $E bench model $m --device cuda:0 --batch-size 128 --per-layer --warmup 2 \
    --repeats 10 > $OUT/layers_$m.txt 2>&1
  echo "== bench model $m --per-layer (rc $?)"; head -60 $OUT/layers_$m.txt
done
echo "== total $(( $(date +%s) - t0 )) s"
cat $OUT/table.txt
