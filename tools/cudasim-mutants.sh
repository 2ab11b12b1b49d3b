#!/usr/bin/env bash
# Proves that the CUDA emulation bites: plants one bug at a time in a COPY of cuda/kernels/*.cu
# (and the *.cuh they include by a quoted path, e.g. "gemm_tile.cuh", which resolves in the copy),
# rebuilds only the GPU test binary of an emulation build pointed at that copy
# (-DECHELON_CUDASIM_KERNELS=DIR), and runs it under the `cudasim` orders until one fails. A
# mutant that passes every order "survived": the script prints a table and exits 1.
#
#   tools/cudasim-mutants.sh [BUILD_DIR]     (default build-sim; an existing emulation build is
#                                             reused: only the .cu objects recompile, and the
#                                             folder is pointed back at cuda/kernels on exit;
#                                             its binary is the last mutant's until rebuilt)
#   CUDASIM_MUTANTS=matmul-tile-index,...    run only these mutants
#   CUDASIM_MUTANTS_KEEP=1                   keep the work folder (kernel copies) for a look
#   CUDASIM_MUTANTS_BASELINE_PASSED=1        skip the unmutated run (the caller just ran it)
#   CUDASIM_MUTANTS_JOBS=N                   N workers at once (default 1): the emulator runs on
#                                             one core. Worker k > 0 builds in BUILD_DIR-mutantsK,
#                                             configured like BUILD_DIR (ccache hands its objects
#                                             back in seconds), with its own copy of the kernels;
#                                             mutant i goes to worker i % N.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
build=${1:-build-sim}
jobs=${CUDASIM_MUTANTS_JOBS:-1}
[[ $jobs =~ ^[1-9][0-9]*$ ]] || { echo "CUDASIM_MUTANTS_JOBS must be a positive integer" >&2; exit 2; }
builds=("$build")
for ((k = 1; k < jobs; ++k)); do builds+=("$build-mutants$k"); done
work=$(mktemp -d "${TMPDIR:-/tmp}/cudasim-mutants.XXXXXX")
restore() {
  for b in "${builds[@]}"; do
    [ -f "$b/CMakeCache.txt" ] || continue
    cmake -S "$root" -B "$b" -DECHELON_CUDASIM_KERNELS="$root/cuda/kernels" >/dev/null || true
  done
  [ "${CUDASIM_MUTANTS_KEEP:-0}" = 1 ] || rm -rf "$work"
}
trap restore EXIT
trap 'exit 130' INT TERM  # so that EXIT runs the restore
for ((k = 0; k < jobs; ++k)); do
  mkdir -p "$work/kernels$k"
  cp cuda/kernels/*.cu cuda/kernels/*.cuh "$work/kernels$k/"
done
export OPENBLAS_NUM_THREADS=1

# name | file | original text | mutated text [| doctest filters] (python string literals, exact
# match required; the texts cannot contain '|', the separator). The optional filters (doctest
# arguments, space-separated, e.g. -ts=conv_gpu -tc=*gather?tiles*) select the cases run first
# under every order: for mutants of code that only opt-in or late tests reach (the deep ring,
# async-K, the conv gather tiles, the tuner's pick), which the whole binary reaches after 90 s.
mutants=(
  "reduce-missing-barrier|reduce.cu|'  if (lane == 0) partial[warp] = v;\n  __syncthreads();\n'|'  if (lane == 0) partial[warp] = v;\n'"
  "reduce-shared-reuse-race|reduce.cu|'  __syncthreads();  // partial[] is reused by the next row\n'|''"
  "reduce-wrong-shuffle-mask|reduce.cu|'v = combine(op, v, __shfl_down_sync(kFullMask, v, offset));'|'v = combine(op, v, __shfl_down_sync(0x0000ffffu, v, offset));'"
  "reduce-grid-stride|reduce.cu|'for (int64_t o = blockIdx.x; o < outer; o += gridDim.x) {\n    float acc'|'for (int64_t o = blockIdx.x; o < outer; o += 2 * gridDim.x) {\n    float acc'"
  "matmul-tile-index|fma_tile.cuh|'&b_tile[k][g * T::kCols * kVec + thread_col * kVec]'|'&b_tile[k][g * T::kCols * kVec + thread_row * kVec]'"
  "matmul-tail-off-by-one|matmul.cu|'n >= g.N) return;'|'n >= g.N - 1) return;'"
  "matmul-batch-reduce-group|matmul.cu|'b += batches_before,'|'b += batches_before / 2,'"
  "conv-groups-order|sum_groups.cu|'for (int w = 0; w < kSumWarps; ++w) sum'|'for (int w = 1; w < kSumWarps; ++w) sum'|-ts=conv_gpu"
  "conv-groups-reuse-race|sum_groups.cu|'    __syncthreads();  // sums[] is reused by the next 32 columns\n'|''|-ts=conv_gpu"
  "loss-unit-grad-target|loss.cu|'unit_grad[at + j] = unit_gradient(log_prob, t == j, inv_n);'|'unit_grad[at + j] = unit_gradient(log_prob, t == j + 1, inv_n);'|-ts=graph_gpu -tc=cross_entropy*"
  "sgd-list-search|optim.cu|'if (list.first_block[mid] <= b)'|'if (list.first_block[mid] < b)'|-ts=nn_gpu -tc=sgd_steps*"
  "loss-stats-warp-hits|loss.cu|'if (w > 0) hits += warp_hits[w];'|'if (w > 1) hits += warp_hits[w];'|-ts=nn_gpu -tc=cross_entropy?counts*"
  "conv-split-group-offset|conv_operands.cuh|'    out += static_cast<int64_t>(blockIdx.z) * g.M * g.N;  // the group\'s partial (z = 0: out)\n'|''|-ts=conv_gpu -tc=split-K?forward*"
  "sum-split-bias-channel|sum_groups.cu|'bias[by_channels.mod(by_plane.div(static_cast<int>(i)))]'|'bias[by_channels.mod(static_cast<int>(i))]'|-ts=conv_gpu -tc=split-K?forward*"
  "sum-split-relu|sum_groups.cu|'if (relu) sum = sum > 0.0f ? sum : 0.0f;'|''|-ts=conv_gpu -tc=split-K?forward*"
  "sum-split-accumulate|sum_groups.cu|'out[i] = accumulate ? out[i] + sum : sum;'|'out[i] = sum;'|-ts=conv_gpu -tc=split-K?forward*"
  "sum-split-last-group|sum_groups.cu|'for (int g = 0; g < groups; ++g) sum'|'for (int g = 0; g < groups - 1; ++g) sum'|-ts=conv_gpu -tc=split-K?forward*"
  "conv-output-split-fill|conv_gemm.cu|'normalise_groups(s, tile, ceil_div(kFillBlocks, tiles)).first;\n}\n'|'normalise_groups(s, tile, ceil_div(kFillBlocks, 2 * tiles)).first;\n}\n'|-ts=conv_gpu -tc=split-K?forward*"
  "conv-direct-stage-race|conv_direct.cu|'    __syncthreads();\n    if (p.bias_strands > 0)'|'    if (p.bias_strands > 0)'|-ts=conv_gpu -tc=the?direct*"
  "conv-direct-bias-strands|conv_direct.cu|'total += smem[strand * p.o + threadIdx.x];'|'total += smem[strand + threadIdx.x];'|-ts=conv_gpu -tc=the?direct*"
  "conv-direct-bias-stride|conv_direct.cu|'acc += staged[q * kOutPerItem];'|'acc += staged[q];'|-ts=conv_gpu -tc=the?direct*"
  "sum-groups-tail|sum_groups.cu|'float* const dst = i < head ? out + i : tail + (i - head);'|'float* const dst = i < head ? out + i : tail + (i - head) / 2;'|-ts=conv_gpu -tc=the?direct*"
  "conv-direct-row-carry|conv_direct.cu|'p.stride_h * p.x_pitch - p.out_w * p.stride_w;'|'p.stride_h * p.x_pitch - p.out_w;'|-ts=conv_gpu -tc=the?direct*"
  "conv-direct-split-sum|conv_direct.cu|'for (int offset = p.splits / 2; offset > 0;'|'for (int offset = p.splits / 4; offset > 0;'|-ts=conv_gpu -tc=the?direct*"
  "conv-direct-quad-window|conv_direct.cu|'fmaf(g[k], v[px + j], acc[k][j]);'|'fmaf(g[k], v[j], acc[k][j]);'|-ts=conv_gpu -tc=the?direct*"
  "conv-direct-quad-carry|conv_direct.cu|'const int quad_carry = p.stride_h * p.x_pitch - p.g_width;'|'const int quad_carry = p.stride_h * p.x_pitch - p.out_w;'|-ts=conv_gpu -tc=the?direct*"
  "conv-direct-x-row-pitch|conv_direct.cu|'ki * p.dilation_h * p.x_pitch;'|'ki * p.dilation_h * p.x_width;'|-ts=conv_gpu -tc=the?direct*"
  "conv-direct-x-stage-pitch|conv_direct.cu|'x_band[c * p.x_plane + i * p.x_pitch + j]'|'x_band[c * p.x_plane + i * p.x_width + j]'|-ts=conv_gpu -tc=the?direct*"
  "conv-direct-item-group|conv_direct.cu|'const int item = static_cast<int>(blockIdx.y) * p.items + local;'|'const int item = local;'|-ts=conv_gpu -tc=the?direct*"
  "conv-direct-left-padding|conv_direct.cu|'static_cast<unsigned>(iw) < static_cast<unsigned>(p.w);'|'iw < p.w;'|-ts=conv_gpu -tc=the?direct*"
  "conv-direct-walk-carry|conv_direct.cu|'col -= by_width.divisor(), ++row;'|'col -= by_width.divisor(), row += 2;'|-ts=conv_gpu -tc=the?direct*"
  "conv-direct-quad-padding|conv_direct.cu|'const bool inside = o < p.o && r < rows && col < p.out_w;'|'const bool inside = o < p.o && r < rows;'|-ts=conv_gpu -tc=the?direct*"
  "optim-list-block-offset|optim.cu|'const int64_t begin = (b - list.first_block[t]) * kListChunk;'|'const int64_t begin = b * kListChunk;'|-ts=nn_gpu -tc=sgd_steps*"
  "matmul-epilogue-bias|matmul.cu|'const float bias = g.row_bias ? g.row_bias[m] : 0.0f;'|'const float bias = g.row_bias && m > 0 ? g.row_bias[m] : 0.0f;'"
  "matmul-shared-race|gemm_tile.cuh|'    __syncthreads();  // everyone\'s slice s is in stage cur; nobody reads slice s - 1\'s stage\n'|''"
  "gemm-async-missing-wait|gemm_tile.cuh|'    if (async) __pipeline_wait_prior(kStages - 2);  // this thread\'s copies of slice s landed\n'|''"
  "mma-deep-wait-too-few|gemm_tile.cuh|'if (async) __pipeline_wait_prior(kStages - 2);'|'if (async) __pipeline_wait_prior(kStages == 4 ? kStages - 1 : kStages - 2);'|-ts=tf32_gpu"
  "mma-async-k-zero-fill|gemm_tile.cuh|'cp_async<kVec * sizeof(float)>(&rows[d][k], p, n * sizeof(float));'|'cp_async<kVec * sizeof(float)>(&rows[d][k], p, (n + (n % kVec != 0)) * sizeof(float));'|-ts=tf32_gpu"
  "mma-async-k-a-row-offset|mma_tile.cuh|'return k_rows<T::kM>(a_tile)[m][kk];'|'return k_rows<T::kM>(a_tile)[m - m % 16][kk];'|-ts=tf32_gpu"
  "mma-deep-no-opt-in|matmul.cu|'if constexpr (dynamic_shared > 0) opt_in_dynamic_shared'|'if constexpr (dynamic_shared == 1) opt_in_dynamic_shared'|-ts=tf32_gpu"
  "gemm-async-wrong-stage|gemm_tile.cuh|'if (async) issue(s + kStages - 1, cur == 0 ? kStages - 1 : cur - 1);'|'if (async) issue(s + kStages - 1, cur);'"
  "gemm-vector-piece-index|gemm_tile.cuh|'k_fast ? c / (K / kVec) : c % (D / kVec) * kVec;'|'k_fast ? c / (K / kVec) : c % (D / kVec);'"
  "norm-divergent-barrier|norm.cu|'  __syncthreads();  // the second reduction reuses temp'|'  if (threadIdx.x == 0) __syncthreads();'"
  "norm-missing-reuse-barrier|norm.cu|'  __syncthreads();  // the second reduction reuses temp'|''"
  "im2col-missing-bounds-check|im2col.cu|'h >= 0 && h < g.h && w >= 0 && w < g.w'|'h >= 0 && h < g.h && w >= 0'"
  "elementwise-vector-tail|elementwise.cu|'for (int64_t i = n_vec * kVec + grid_start(); i < n;'|'for (int64_t i = n_vec * kVec + 1 + grid_start(); i < n;'"
  "norm-skip-last-chunk|norm.cu|'for (int k = lane; k < chunks; k += kWarp)\n    merge_stats'|'for (int k = lane; k < chunks - 1; k += kWarp)\n    merge_stats'"
  "norm-missing-stats-barrier|norm.cu|'cc.chunks, stats);\n  __syncthreads();'|'cc.chunks, stats);'"
  "reduce-columns-reuse-race|reduce.cu|'    __syncthreads();  // shared[] is reused by the next tile\n'|''"
  "reduce-column-chunk-skip|reduce.cu|'for (int64_t k = 1; k < chunks; k += kBatch) {'|'for (int64_t k = 2; k < chunks; k += kBatch) {'"
  "matmul-tf32-missing-syncwarp|mma_tile.cuh|'        __syncwarp();  // the lanes read each other\'s stored elements\n'|''"
  "matmul-tf32-unrounded-b|mma_tile.cuh|'{tf32(low_k.x, round_b), tf32(low_k.y, round_b),'|'{low_k.x, low_k.y,'"
  "mma-tf32-staged-unrounded|gemm_tile.cuh|'    return tf32_for_mma(v);'|'    return v;'"
  "mma-tf32-staged-nan|gemm_tile.cuh|'  if (!(std::fabs(v) < INFINITY)) return v;'|''|-ts=tf32_gpu"
  "mma-tf32-async-unrounded|mma_tile.cuh|'return load == Load::Scalar'|'return load != Load::AsyncK'"
  "mma-common-element-k|gemm_tile.cuh|'d = first / K + j * (kThreads / K), k = first % K;'|'d = first / K + j * (kThreads / K), k = (first + j) % K;'|-ts=conv_gpu"
  "mma-large-a-fragment-offset|mma_tile.cuh|'&a_tile[k][warp_m * kWarpM + i * kFrag]'|'&a_tile[k][warp_m * kWarpM]'"
  "mma-tf32-a-fragment-offset|mma_tile.cuh|'const int m = warp_m * kWarpM + i * kFrag + half * 8 + g;'|'const int m = warp_m * kWarpM + half * 8 + g;'|-ts=tf32_gpu"
  "mma-tf32-a-register-order|mma_tile.cuh|'a[i][half][0] = tf32(a_at(m, k + t), round_a);'|'a[i][half][0] = tf32(a_at(m, k + t + 4), round_a);'|-ts=tf32_gpu"
  "mma-tf32-b-pair-order|mma_tile.cuh|'tf32(low_k.y, round_b), tf32(high_k.x, round_b),'|'tf32(high_k.x, round_b), tf32(low_k.y, round_b),'|-ts=tf32_gpu"
  "mma-tf32-b-rows-pair|mma_tile.cuh|'k_rows<T::kN>(b_tile)[n + 8][kk]'|'k_rows<T::kN>(b_tile)[n + 1][kk]'|-ts=tf32_gpu"
  "mma-tf32-store-layout|mma_tile.cuh|'float2{sums[half][c], sums[half][c + 2]}'|'float2{sums[half][c + 2], sums[half][c]}'|-ts=tf32_gpu"
  "mma-tf32-b-rows-store|mma_tile.cuh|'row[g] = sums[half][c], row[g + 8] = sums[half][c + 2];'|'row[g] = sums[half][c], row[g + 8] = sums[half][c ^ 1];'|-ts=tf32_gpu"
  "mma-large-k-step|mma_tile.cuh|'multiply_step<ARows, BRows>(a_tile, b_tile, step * kMmaK, round_a, round_b);'|'multiply_step<ARows, BRows>(a_tile, b_tile, 0, round_a, round_b);'"
  "mma-large-epilogue-rows|mma_tile.cuh|'store(m0 + warp_m * kWarpM + i * kFrag + row, n,'|'store(m0 + warp_m * kWarpM + row, n,'"
  "mma-epilogue-lane-column|mma_tile.cuh|'f * kFrag + lane % kFrag;'|'f * kFrag + lane % 8;'"
  "bf16-pad-4-elements|gemm_tile.cuh|'kPad = 16 / static_cast<int>(sizeof(E));'|'kPad = 4;'"
  "matmul-bf16-slice-k0|matmul.cu|'const int64_t k0 = slice * T::kK;'|'const int64_t k0 = slice * 8;'"
  "conv-bf16-slice-k0|conv_gemm.cu|'f(ops, (first + s) * T::kK);'|'f(ops, (first + s) * 8);'"
  "bf16-staging-truncates|gemm_tile.cuh|'return __float2bfloat16_rn(v);'|'return __nv_bfloat16{static_cast<unsigned short>(__builtin_bit_cast(unsigned, v) >> 16)};'"
  "softmax-short-warp-sum|reduce.cu|'offset > 0; offset /= 2) v += __shfl_xor_sync'|'offset > 1; offset /= 2) v += __shfl_xor_sync'"
  "channels-vec-lane|channels.cuh|'return k == 0 ? v.x : (k == 1 ? v.y : (k == 2 ? v.z : v.w));'|'return k == 0 ? v.x : (k == 1 ? v.y : (k == 2 ? v.z : v.z));'"
  "channels-unroll-live|channels.cuh|'      live[k] = w.i < end;'|'      live[k] = k < kChannelUnroll - 1 && w.i < end;'"
  "channels-vec-condition|channels.cuh|'  if (a.spatial % kChannelVec != 0) return false;\n'|''"
  "norm-warp-tree-short|norm.cu|'offset > 0; offset /= 2) {\n    const double other_count'|'offset > 1; offset /= 2) {\n    const double other_count'"
  "norm-vec-masked-skip|norm.cu|'if (relu_out) V::store(masked, at[k], dy[k]);'|'if (relu_out && W == 1) V::store(masked, at[k], dy[k]);'"
  "conv-bias-finish-tree|conv.cu|'for (int offset = kWarp / 2; offset > 0; offset /= 2)\n      total +='|'for (int offset = kWarp / 4; offset > 0; offset /= 2)\n      total +='"
  "conv-bias-vec-masked-skip|conv.cu|'if (relu_out) V::store(masked, at[k], g[k]);'|'if (relu_out && W == 1) V::store(masked, at[k], g[k]);'"
  "pool-2x2-argmax|pool.cu|'take(r1.w, top + a.w + 3, best_b, at_b);'|'take(r1.w, top + a.w + 2, best_b, at_b);'"
  "pool-2x2-odd-h-plane|pool.cu|'x + plane * a.h * a.w + top'|'x + plane * 2 * a.out_h * a.w + top'"
  "reduce-columns-vec-lane|reduce.cu|'acc[l] = combine(op, acc[l], lane_of(v[k], l));'|'acc[l] = combine(op, acc[l], lane_of(v[k], 0));'"
  "reduce-columns-unroll-step|reduce.cu|'r += kColumnRows * kUnroll) {'|'r += kColumnRows * (kUnroll + 1)) {'"
  "reduce-row-warp-step|reduce.cu|'u += kWarp * kUnroll) {'|'u += kWarp * (kUnroll - 1)) {'"
  "columns-mask-select|reduce.cu|'set_lane(v[k], l, lane_of(m, l) > 0.0f ? lane_of(v[k], l) : 0.0f);'|'set_lane(v[k], l, lane_of(m, l) >= 0.0f ? lane_of(v[k], l) : 0.0f);'"
  "row-bias-always-relu|elementwise.cu|'            features, relu);'|'            features, true);'"
  "stats-warp-row-step|reduce.cu|'for (int64_t row = warp; row < n; row += kRowBlock / kWarp) {'|'for (int64_t row = warp; row < n; row += kRowBlock / kWarp + 1) {'"
  "stats-wrong-lane-counts|reduce.cu|'if (lane == 0 && best.index == targets[row]) ++hits;'|'if (lane == 1 && best.index == targets[row]) ++hits;'"
  "stats-guard-reset|reduce.cu|'*guard = *guard + 0.0f * *loss;'|'*guard = 0.0f * *loss;'"
  "reduce-row-vec-condition|reduce.cu|'std::is_same_v<T, float> && inner % kVec == 0 &&'|'std::is_same_v<T, float> &&'"
  "fma-warp-lane-column|fma_tile.cuh|'col = warp / kWarpsM * kWarpN + lane / kLanesM * kVec;'|'col = warp / kWarpsM * kWarpN + lane % kLanesM * kVec;'"
  "fma-warp-next-fragment|fma_tile.cuh|'load(a_tile[k + 1], b_tile[k + 1],'|'load(a_tile[k], b_tile[k + 1],'"
  "fma-warp-store-transposed|fma_tile.cuh|'n0 + col_of(j), acc[i][j]);'|'n0 + col_of(j), acc[j][i]);'"
  "gemm-constant-staging-flag|gemm_tile.cuh|'f(Staging{a, kVectorK, a_k, true});'|'f(Staging{a, kVectorK, a_k, false});'"
  "gemm-tile-narrow-b-loads|gemm_tile.cuh|'  using BPart = Part<T::kN, T::kK, T::kConstantStaging, kCommon>;\n'|'  using BPart = Part<T::kM, T::kK, T::kConstantStaging, kCommon>;\n'"
  "conv-implicit-pad-bound|conv_operands.cuh|'h >= 0 && h < g.h && w >= 0 && w < g.w ?'|'h >= 0 && h < g.h && w >= 0 ?'"
  "conv-implicit-stride-gather|conv_operands.cuh|'rw != 0) return 0.0f;'|'rw != 0 && false) return 0.0f;'"
  "conv-implicit-dilation-gather|conv_operands.cuh|'g.pad_h - ki * g.dilation_h;'|'g.pad_h - ki;'"
  "conv-implicit-splitk-last-slice|conv_gemm.cu|'min(k_slices, first + per_group) - first'|'min(k_slices - 1, first + per_group) - first'"
  "conv-implicit-store-channels|conv_operands.cuh|'const int column = image * g.o * g.plane + position;'|'const int column = image * g.c * g.plane + position;'"
  "conv-implicit-bias-epilogue|conv_operands.cuh|'v + (bias ? bias[m] : 0.0f)'|'v + (bias && m > 0 ? bias[m] : 0.0f)'"
  "conv-implicit-data-weight-index|conv_operands.cuh|'return (o * g.c + m) * g.taps + tap;'|'return (o * g.c + m) * g.taps;'"
  "conv-bounds-32-bit|conv_operands.cuh|'return static_cast<uint32_t>(i) < static_cast<uint32_t>(bound);'|'return static_cast<uint32_t>(i) <= static_cast<uint32_t>(bound);'"
  "conv-phase-store-col-stride|conv_operands.cuh|'j * g.col_stride;'|'j;'|-ts=conv_gpu -tc=phases*"
  "conv-phase-tap-class|conv_phases.cu|'p.k0h = static_cast<int>((rh + a.pad_h) % a.stride_h);'|'p.k0h = static_cast<int>(rh % a.stride_h);'|-ts=conv_gpu -tc=phases*"
  "conv-fastdiv-row-split|conv_operands.cuh|'by_kernel_w.divmod(t, ki, kj);'|'by_kernel_w.divmod(t, kj, ki);'"
  "conv-table-mask-right-edge|conv_operands.cuh|'if (h >= 0 && h < g.h && w >= 0 && w < g.w) mask'|'if (h >= 0 && h < g.h && w >= 0) mask'|-ts=conv_gpu"
  "conv-table-grad-in-dilation|conv_operands.cuh|'kj * (g.dilation_w / g.stride_w),'|'kj,'|-ts=conv_gpu"
  "conv-table-bytes-rounding|conv_operands.cuh|'static_cast<size_t>((k + slice - 1) / slice * slice) * sizeof'|'static_cast<size_t>(k) * sizeof'|-ts=conv_gpu"
  "conv-columns-right-edge|conv_operands.cuh|'static_cast<unsigned>(w0 + e.dw) < static_cast<unsigned>(g.w);'|'true;'|-ts=conv_gpu"
  "conv-columns-row-dilation|conv_operands.cuh|'const int dh = ki * g.dilation_h, dw'|'const int dh = ki, dw'|-ts=conv_gpu"
  "conv-columns-k-tail|conv_operands.cuh|'const bool inside = below(k_wide, g.K) &&'|'const bool inside ='|-ts=conv_gpu"
  "conv-gather-pad-bound|conv_operands.cuh|'const bool inside = h >= 0 && h < g.h && w >= 0 && w < g.w;'|'const bool inside = h >= 0 && h < g.h && w >= 0;'|-ts=conv_gpu -tc=*gather?tiles*"
  "conv-gather-no-zero-fill|gemm_tile.cuh|'p, inside ? sizeof(float) : 0);'|'p, sizeof(float));'|-ts=conv_gpu -tc=*gather?tiles*"
  "conv-gather-wait-too-few|gemm_tile.cuh|'if (async) __pipeline_wait_prior(kStages - 2);'|'if (async) __pipeline_wait_prior(async_gather<T>() ? kStages - 1 : kStages - 2);'|-ts=conv_gpu -tc=*gather?tiles*"
  "conv-tune-slowest-pick|conv_tune.cu|'if (times[i] < times[best]) best = i;'|'if (times[i] > times[best]) best = i;'|-ts=conv_tune_gpu -tc=scripted*"
  "loss-one-block-row-sum|loss.cu|'offset > 0; offset /= 2)\n      sum +='|'offset > 1; offset /= 2)\n      sum +='|-ts=nn_gpu -tc=cross_entropy*"
  "loss-one-block-warp-total|loss.cu|'total += warp_loss[w];'|'total = warp_loss[w];'|-ts=nn_gpu -tc=cross_entropy*"
  "loss-rows-first-bad-bound|loss.cu|'target[i] >= classes) && first_bad'|'target[i] > classes) && first_bad'|-ts=nn_gpu -tc=cross_entropy*"
  "pool-gather-relu-mask|pool.cu|'relu_out[o] > 0.0f)) acc'|'relu_out[o] >= 0.0f)) acc'"
  "pool-gather-covering-bound|pool.cu|'o <= out_row + ow1; ++o)'|'o < out_row + ow1; ++o)'"
  "conv-accumulate-store-overwrites|conv_operands.cuh|'dst = mode == StoreMode::Add ? dst + v : v;'|'dst = v;'|-ts=conv_gpu -tc=accumulate*"
  "conv-phases-accumulate-zeroes|conv_phases.cu|'if (tapless && !accumulate)'|'if (tapless)'|-ts=conv_gpu -tc=accumulate*"
  "col2im-accumulate-overwrites|im2col.cu|'x[i] = accumulate ? x[i] + sum : sum;'|'x[i] = sum;'|-ts=conv_gpu -tc=accumulate*"
"window-flip-columns|conv_window.cu|'x = v[px * S + (Flip ? KW - 1 - kj : kj)];'|'x = v[px * S + kj];'|-ts=conv_window_gpu"
  "window-segment-halo|conv_window.cu|'const int base = (n - n0) * image_rows + (a - a0) * kRowStride;'|'const int base = (n - n0) * r.rows + (a - a0) * kRowStride;'|-ts=conv_window_gpu"
  "window-stride-pixels|conv_window.cu|'x = v[px * S + (Flip ? KW - 1 - kj : kj)];'|'x = v[px + (Flip ? KW - 1 - kj : kj)];'|-ts=conv_window_gpu"
  "window-chunk-race|conv_window.cu|'    __syncthreads();  // every thread is done with the previous chunk\n'|''|-ts=conv_window_gpu"
  "window-accumulate-overwrites|conv_window.cu|'dst[ow] = accumulate ? dst[ow] + acc[px][o] : acc[px][o];'|'dst[ow] = acc[px][o];'|-ts=conv_window_gpu"
  "window-half-parity|conv_window.cu|'if ((px + P - kj) % 2 != 0) continue;'|'if ((px - kj) % 2 != 0) continue;'|-ts=conv_window_gpu"
  "window-phase-taps|conv_window.cu|'const int ki = r.first_ki + p.ki_step * tap;'|'const int ki = p.ki_step * tap;'|-ts=conv_window_gpu"
  "window-phase-rows|conv_window.cu|'const int oh = r.first_row + p.row_step * a;'|'const int oh = r.first_row + a;'|-ts=conv_window_gpu"
  "window-stage-row-step|conv_window.cu|'if (s >= needed) s -= needed, ++cl;'|'if (s >= needed) s -= needed, cl += 2;'|-ts=conv_window_gpu"
  "window-stage-pass-rows|conv_window.cu|'const int first = warp * p.rows_per_pass + sub;'|'const int first = warp + sub;'|-ts=conv_window_gpu"
  "window-stage-wide-rows|conv_window.cu|'for (int q = quad; q < p.quads(); q += p.row_lanes) {'|'for (int q = quad; q < p.quads() && q < 32; q += p.row_lanes) {'|-ts=conv_window_gpu"
  "window-stage-weight-chunk|conv_window.cu|'oc * p.w_out + c0 * p.w_in : 0'|'oc * p.w_out : 0'|-ts=conv_window_gpu"
  "window-stage-weight-contiguous|conv_window.cu|'} else if (p.w_in == p.taps()) {'|'} else if (p.w_in >= p.taps()) {'|-ts=conv_window_gpu"
  "shortcut-pad-channel-offset|shape.cu|'const int k = static_cast<int>(at - image * out_c) - pad;'|'const int k = static_cast<int>(at - image * out_c);'"
  "shortcut-backward-stride-columns|shape.cu|'p % stride == 0 && q % stride == 0 ?'|'p % stride == 0 ?'"
  "arg-best-tie-last|arg_best.cuh|'return a.index <= b.index ? a : b;'|'return a.index >= b.index ? a : b;'"
  "arg-best-nan-smallest|arg_best.cuh|'if (a_nan != b_nan) return a_nan ? a : b;'|'if (a_nan != b_nan) return a_nan ? b : a;'"
  "staged-tf32-unrounded|staged_rounding.cuh|'stage(std::integral_constant<Rounding, Rounding::Tf32>{});'|'stage(std::integral_constant<Rounding, Rounding::None>{});'"
  "staged-bf16-unrounded|staged_rounding.cuh|'if (rounding == Rounding::Bf16) return __bfloat162float(__float2bfloat16_rn(v));'|'if (rounding == Rounding::Bf16) return v;'"
  "philox-uniform-counter|random.cu|'out[i] = static_cast<T>(philox_uniform(state, static_cast<uint64_t>(i)));'|'out[i] = static_cast<T>(philox_uniform(state, static_cast<uint64_t>(i + 1)));'"
)
# The orders and grid caps of the ctest entries (tests/cudasim/CMakeLists.txt), and like them
# with ECHELON_CUDASIM_ABORT=1: a mutant's first fault ends its run. Reverse with a
# grid cap first: it catches the races and grid-stride bugs that forward misses, and every
# plain logic bug as well, so most mutants need one run instead of two.
orders=("reverse 7" "forward 0" "random:1 0" "random:2 3")

# configure_worker K: points worker K's build at its kernel copy and builds the unmutated binary.
configure_worker() {
  local k=$1 dir=${builds[$1]} args=() v
  if [ "$k" -gt 0 ]; then  # the same compiler, build type and sanitizers as BUILD_DIR
    for v in CMAKE_CXX_COMPILER CMAKE_BUILD_TYPE ECHELON_SANITIZE; do
      args+=("-D$v=$(sed -n "s/^$v:[A-Z]*=//p" "$build/CMakeCache.txt")")
    done
  fi
  [ -f "$dir/CMakeCache.txt" ] || args+=(-G Ninja -DECHELON_BENCH=OFF)
  echo "== configure $dir (kernels from $work/kernels$k)"
  cmake -S "$root" -B "$dir" "${args[@]}" -DECHELON_CUDA_SIM=ON \
        -DECHELON_CUDASIM_KERNELS="$work/kernels$k" >/dev/null
  local t0=$SECONDS
  cmake --build "$dir" --target echelon_gpu_tests -- -j"$(nproc)" >/dev/null
  echo "   $dir: the unmutated binary built in $((SECONDS - t0))s"
}
start=$SECONDS
configure_worker 0  # first: the others copy its settings
for ((k = 1; k < jobs; ++k)); do configure_worker "$k"; done

# run_orders BUILD LOG [FAMILY [FILTERS]]: prints "order" of the first failing run of BUILD's
# binary (its output in LOG), or nothing. With FILTERS (doctest arguments; default
# -ts=parity_gpu when FAMILY is set), those cases run first under every order, the parity cases
# narrowed to kernel family FAMILY if one is given (seconds: the whole binary reaches the
# bandwidth families' cases only after ~90 s), then, if none failed, the whole binary.
run_orders() {
  local dir=$1 log=$2 family=${3:-} filters=${4:-} args entry order cap
  [ -z "$family" ] || filters=${filters:--ts=parity_gpu}
  read -ra args <<<"$filters"  # no globbing of the doctest wildcards
  if [ -n "$filters" ]; then
    for entry in "${orders[@]}"; do
      read -r order cap <<<"$entry"
      if ! env ${family:+ECHELON_PARITY_FILTER=$family} ECHELON_CUDASIM_ABORT=1 \
           ECHELON_CUDASIM_ORDER=$order ECHELON_CUDASIM_GRID_CAP=$cap timeout 300 \
           "$dir/tests/echelon_gpu_tests" \
           "${args[@]}" -aa=1 >"$log" 2>&1; then
        echo "$order ($filters${family:+ $family})"
        return
      fi
    done
  fi
  for entry in "${orders[@]}"; do
    read -r order cap <<<"$entry"
    if ! ECHELON_CUDASIM_ABORT=1 ECHELON_CUDASIM_ORDER=$order ECHELON_CUDASIM_GRID_CAP=$cap \
         timeout 300 "$dir/tests/echelon_gpu_tests" -aa=1 >"$log" 2>&1; then
      echo "$order"
      return
    fi
  done
}
# The parity family a mutant's file is checked by first (tests/support/parity.h: the family is
# the kernel file); none for the GEMM files, whose mutants the whole binary catches in seconds.
family_of() {
  case $1 in
    reduce.cu | norm.cu | pool.cu | conv.cu | elementwise.cu | loss.cu | shape.cu) echo "${1%.cu}" ;;
    channels.cuh) echo norm ;;
  esac
}

# The unmutated kernels must pass, or every "caught" below means nothing. CI has just run these
# same orders on this build (ctest -L cudasim) and says so with CUDASIM_MUTANTS_BASELINE_PASSED=1.
if [ "${CUDASIM_MUTANTS_BASELINE_PASSED:-0}" != 1 ] &&
   [ -n "$(run_orders "$build" "$work/run0.log")" ]; then
  echo "cudasim-mutants: the unmutated kernels fail; fix that first:"
  tail -20 "$work/run0.log"
  exit 1
fi

# try_mutant K I: plants mutant I in worker K's kernels, rebuilds, runs; prints its table line.
try_mutant() {
  local k=$1 dir=${builds[$1]} kernels=$work/kernels$1 log=$work/run$1.log
  local name file before after filters verdict why failed t0=$SECONDS
  IFS='|' read -r name file before after filters <<<"${mutants[$2]}"
  python3 - "$kernels/$file" "$name" "$file" "$before" "$after" <<'PLANT'
import ast, sys
path, name, file = sys.argv[1:4]
before, after = ast.literal_eval(sys.argv[4]), ast.literal_eval(sys.argv[5])
text = open(path).read()
if text.count(before) != 1:
    sys.exit("mutant %s: the original text occurs %d times in %s (update the mutant)"
             % (name, text.count(before), file))
open(path, "w").write(text.replace(before, after))
PLANT
  if ! cmake --build "$dir" --target echelon_gpu_tests >"$work/build$k.log" 2>&1; then
    verdict="caught" why="does not compile"
  else
    failed=$(run_orders "$dir" "$log" "$(family_of "$file")" "$filters")
    if [ -n "$failed" ]; then
      verdict="caught"
      # The emulator's diagnosis, else the first parity case that failed, else doctest's line.
      why=$(grep -m1 -oE 'cudasim: kernel [a-z_0-9]+|cudasim: [^(]{0,60}' "$log" ||
            grep -m1 -oE 'logged: [^ ]+ \[[a-z/]+\]' "$log" ||
            grep -m1 -oE 'ERROR: .{0,60}|CRASHED.{0,40}' "$log" || echo "timeout")
      why="$failed: $(echo "$why" | sed 's/^ *//')"
    else
      verdict="SURVIVED" why="passes every order"
    fi
  fi
  cp "$root/cuda/kernels/$file" "$kernels/$file"
  printf '%-30s %-17s %-10s %s (%ds)\n' "$name" "$file" "$verdict" "$why" $((SECONDS - t0))
}

# The mutants CUDASIM_MUTANTS selects; worker K takes every jobs-th from the K-th, and writes
# the table line of mutant I to lines/I.
selected=()
for i in "${!mutants[@]}"; do
  name=${mutants[$i]%%|*}
  if [ -z "${CUDASIM_MUTANTS:-}" ] || [[ ",$CUDASIM_MUTANTS," == *",$name,"* ]]; then
    selected+=("$i")
  fi
done
mkdir -p "$work/lines"
pids=()
for ((k = 0; k < jobs; ++k)); do
  (
    for ((j = k; j < ${#selected[@]}; j += jobs)); do
      i=${selected[$j]}
      try_mutant "$k" "$i" >"$work/lines/$i"
      cat "$work/lines/$i"
    done
  ) &
  pids+=($!)
done
worker_failed=0
for pid in "${pids[@]}"; do wait "$pid" || worker_failed=1; done

echo
printf '%-30s %-17s %-10s %s\n' mutant file verdict 'first failing order / why'
survivors=0 missing=0
for i in "${selected[@]}"; do
  if [ -s "$work/lines/$i" ]; then
    cat "$work/lines/$i"
    if grep -q ' SURVIVED ' "$work/lines/$i"; then survivors=$((survivors + 1)); fi
  else
    echo "${mutants[$i]%%|*}: no result (its worker stopped)"
    missing=$((missing + 1))
  fi
done
echo "cudasim-mutants: $survivors survivor(s), $missing without a result, $((SECONDS - start))s"
[ "$survivors" -eq 0 ] && [ "$missing" -eq 0 ] && [ "$worker_failed" -eq 0 ]
