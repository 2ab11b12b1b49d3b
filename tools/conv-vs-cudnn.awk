# Issue #10's P3 conv goal (ours >= 70% of cuDNN's speed on every conv shape of the four nets),
# read from exp_gpu_kernels' convolution table (bench/exp_gpu_kernels.cpp, conv_rows): per
# precision, how many rows (layer x direction) take at most 1/0.7 of cuDNN's time, against its
# heuristic's algorithm and against its benchmarked pick ("cuDNN bm"), and the row furthest from
# the heuristic's. One line, for tools/gpu-check.sh's conv_vs_cudnn row:
#   fp32 40/57 (bm 35/57), worst vgg16 128x512x2x2 w512x512x3x3 bwd-w 2.10x; tf32 ...
# Without cuDNN columns (a build without cuDNN) or without the table it prints nothing.
# Usage: awk -f tools/conv-vs-cudnn.awk kernels.txt
BEGIN { goal = 1 / 0.7 }
/^== convolution, batch/ { on = 1; next }
/^==/ { on = 0 }
!on { next }
# The column header ends "calls  (fp32; us per call)".
$1 == "net" && $2 == "x" {
  precision = $(NF - 3)
  gsub(/[(;]/, "", precision)
  if (!(precision in rows)) order[++precisions] = precision
  next
}
# net x w s n dir implicit im2col cuDNN bm implTF cuDNNTF impl/cuDNN impl/bm impl/im2col calls
$1 ~ /^[a-z]+[0-9]+$/ && NF >= 16 && $13 != "-" {
  ++rows[precision]
  if ($13 + 0 <= goal) ++met[precision]
  if ($14 + 0 <= goal) ++met_bm[precision]
  if ($13 + 0 > worst[precision]) {
    worst[precision] = $13 + 0
    worst_row[precision] = $1 " " $2 " w" $3 ($4 == 1 ? "" : " s" $4) " " $6
  }
}
END {
  for (i = 1; i <= precisions; ++i) {
    p = order[i]
    if (!rows[p]) continue
    printf "%s%s %d/%d (bm %d/%d), worst %s %.2fx", sep, p, met[p], rows[p], met_bm[p], rows[p],
           worst_row[p], worst[p]
    sep = "; "
  }
}
