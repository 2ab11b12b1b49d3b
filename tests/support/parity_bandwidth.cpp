// Parity cases of the bandwidth kernels' vector and unrolled paths (issue #10, P3; session 23):
// each path against the naive CPU twin, and the fallback beside it. The kernels choose:
// - reduce columns (cuda/kernels/reduce.cu): float4 per lane when outer % 4 == 0, the row stride
//   % 4 == 0 and x is 16-byte aligned; floats otherwise. Row chunks: the emulation's cap
//   (4 blocks) gives (203, 132) two chunks of ~100 rows, each unrolled step of 4 rows live.
// - reduce rows: a warp per contiguous row of 33..4096 (float4 when inner % 4 == 0 and aligned),
//   the block per row above 4096 or for strided rows.
// - batch norm and the conv bias gradient (norm.cu, conv.cu, channels.cuh): float4 walks when
//   S % 4 == 0 and every pointer is aligned. The emulation's chunking (64 target blocks, >= 24
//   values a chunk) gives C = 1 64 chunks (lanes of the combining warp take 2 each) and C = 70
//   one chunk of 4320 values (every thread's 4 unrolled loads live, threads looping).
// - max_pool2d 2x2 / stride 2 (pool.cu): W % 4 == 0 and x aligned; odd H drops the last row.
// - ResNet's option-A shortcut (shape.cu, pad_channels_subsample and its adjoint): a block per
//   plane, planes smaller and larger than a block, odd sizes, strides 1-3, a strided input.
// "Misaligned" inputs are a flat buffer's view starting one float in (contiguous, not aligned).
#include "tests/support/parity.h"

namespace echelon::parity {
namespace {

InputSpec f32(Shape shape, double lo = -1.0, double hi = 1.0) {
  return InputSpec{std::move(shape), kFloat32, lo, hi, Layout::Contiguous, {}};
}

int64_t numel_of(const Shape& shape) {
  int64_t n = 1;
  for (const int64_t d : shape) n *= d;
  return n;
}

// A flat input of numel + 1 values for a misaligned view of `shape`.
InputSpec flat_for(const Shape& shape, double lo = -1.0, double hi = 1.0) {
  return f32({numel_of(shape) + 1}, lo, hi);
}

// flat (numel + 1) viewed as `shape` from element 1: contiguous, 4 bytes past 16-byte alignment.
Tensor misaligned(const Tensor& flat, const Shape& shape) {
  return flat.narrow(0, 1, numel_of(shape)).view(shape);
}

void reduce_cases() {
  const Tolerance tol{1e-4, 1e-4};
  // Columns: float4 lanes (132 = 4 * 33 outputs, 2 tiles of 128), and the float fallbacks.
  add({"sum/columns_vec",
       "reduce",
       {f32({203, 132})},
       [](const auto& in) { return ops::sum(in[0], {0}); },
       tol});
  add({"amax/columns_vec",
       "reduce",
       {f32({203, 132})},
       [](const auto& in) { return ops::amax(in[0], {0}); },
       Tolerance{0, 0}});
  add({"mean/columns_vec_merged_outer",
       "reduce",
       {f32({75, 4, 36})},
       [](const auto& in) { return ops::mean(in[0], {0}); },
       tol});
  add({"sum/columns_odd",
       "reduce",
       {f32({203, 131})},
       [](const auto& in) { return ops::sum(in[0], {0}); },
       tol});
  add({"sum/columns_row_stride_134",
       "reduce",
       {f32({203, 134})},
       [](const auto& in) { return ops::sum(in[0].narrow(1, 0, 132), {0}); },
       tol});
  const Shape cols = {203, 132};
  add({"sum/columns_misaligned",
       "reduce",
       {flat_for(cols)},
       [cols](const auto& in) { return ops::sum(misaligned(in[0], cols), {0}); },
       tol});
  // Rows: a warp per row (float4, float, misaligned), the 4096 boundary and the block beyond.
  add({"sum/rows_warp_vec",
       "reduce",
       {f32({57, 1000})},
       [](const auto& in) { return ops::sum(in[0], {1}); },
       tol});
  add({"amin/rows_warp_vec",
       "reduce",
       {f32({57, 1000})},
       [](const auto& in) { return ops::reduce(ReduceOp::Min, in[0], {1}); },
       Tolerance{0, 0}});
  add({"mean/rows_warp_odd",
       "reduce",
       {f32({57, 999})},
       [](const auto& in) { return ops::mean(in[0], {1}); },
       tol});
  add({"sum/rows_warp_33",
       "reduce",
       {f32({41, 33})},
       [](const auto& in) { return ops::sum(in[0], {1}); },
       tol});
  const Shape rows = {57, 1000};
  add({"sum/rows_warp_misaligned",
       "reduce",
       {flat_for(rows)},
       [rows](const auto& in) { return ops::sum(misaligned(in[0], rows), {1}); },
       tol});
  add({"amax/rows_warp_4096",
       "reduce",
       {f32({9, 4096})},
       [](const auto& in) { return ops::amax(in[0], {1}); },
       Tolerance{0, 0}});
  add({"sum/rows_block_4100",
       "reduce",
       {f32({5, 4100})},
       [](const auto& in) { return ops::sum(in[0], {1}); },
       tol});
}

void norm_cases() {
  // vec: S % 4 == 0; odd: not. c1: 64 chunks; c70: one chunk of > 4096 values.
  const std::pair<std::string, Shape> shapes[] = {{"vec_c1", {4, 1, 20, 24}},
                                                  {"odd_c1", {4, 1, 21, 23}},
                                                  {"vec_c70", {3, 70, 36, 40}},
                                                  {"odd_c70", {3, 70, 35, 41}}};
  const Tolerance tol{1e-5, 1e-4}, grad_tol{1e-4, 1e-4};
  for (const auto& named : shapes) {
    const std::string name = "/" + named.first;
    const Shape x = named.second;
    const int64_t c = x[1];
    const InputSpec gamma = f32({c}, 0.5, 1.5), beta = f32({c});
    // inputs: x (shifted so |mean| is not tiny), gamma, beta, running_mean, running_var
    add({"batch_norm_train" + name,
         "norm",
         {f32(x, -1.0, 3.0), gamma, beta, f32({c}), f32({c}, 0.5, 1.5)},
         [](const auto& in) {
           Tensor rm = in[3].clone(), rv = in[4].clone();
           const auto fwd = ops::batch_norm_train(in[0], in[1], in[2], rm, rv, 0.1, 1e-5);
           // out, then the statistics: one comparison covers all four
           return ops::concat({fwd.out.flatten(), fwd.save_mean, fwd.save_invstd, rm, rv}, 0);
         },
         tol});
    // inputs: x, gamma, beta, residual
    add({"batch_norm_train_add_relu" + name,
         "norm",
         {f32(x, -1.0, 3.0), gamma, beta, f32(x)},
         [](const auto& in) {
           Tensor rm, rv;
           return ops::batch_norm_train(in[0], in[1], in[2], rm, rv, 0.1, 1e-5, true, in[3]).out;
         },
         tol});
    // inputs: grad_out, x, gamma, beta
    add({"batch_norm_backward" + name,
         "norm",
         {f32(x), f32(x, -1.0, 3.0), gamma, beta},
         [](const auto& in) {
           Tensor rm, rv;
           const auto fwd = ops::batch_norm_train(in[1], in[2], in[3], rm, rv, 0.1, 1e-5);
           const auto g =
               ops::batch_norm_backward(in[0], in[1], in[2], fwd.save_mean, fwd.save_invstd);
           return ops::concat({g.input.flatten(), g.gamma, g.beta}, 0);
         },
         grad_tol});
    // The fused ReLU backward, with and without the masked output (pass 1 writes the masked dy
    // to it, or to scratch, for pass 2). inputs: grad_out, x, gamma, beta, residual
    for (const bool want_masked : {true, false}) {
      add({"batch_norm_backward_relu" + std::string(want_masked ? "_masked" : "") + name,
           "norm",
           {f32(x), f32(x, -1.0, 3.0), gamma, beta, f32(x)},
           [want_masked](const auto& in) {
             Tensor rm, rv;
             const auto fwd =
                 ops::batch_norm_train(in[1], in[2], in[3], rm, rv, 0.1, 1e-5, true, in[4]);
             const auto g = ops::batch_norm_backward(in[0], in[1], in[2], fwd.save_mean,
                                                     fwd.save_invstd, fwd.out, want_masked);
             std::vector<Tensor> parts = {g.input.flatten(), g.gamma, g.beta};
             if (want_masked) parts.push_back(g.masked.flatten());
             return ops::concat(parts, 0);
           },
           grad_tol});
    }
  }
  // Misaligned x (S % 4 == 0): the float walk.
  const Shape x = {3, 5, 8, 12};
  add({"batch_norm_train/misaligned",
       "norm",
       {flat_for(x, -1.0, 3.0), f32({5}, 0.5, 1.5), f32({5})},
       [x](const auto& in) {
         Tensor rm, rv;
         return ops::batch_norm_train(misaligned(in[0], x), in[1], in[2], rm, rv, 0.1, 1e-5).out;
       },
       tol});
  add({"batch_norm_backward_relu/misaligned_grad",
       "norm",
       {flat_for(x), f32(x, -1.0, 3.0), f32({5}, 0.5, 1.5), f32({5})},
       [x](const auto& in) {
         Tensor rm, rv;
         const auto fwd = ops::batch_norm_train(in[1], in[2], in[3], rm, rv, 0.1, 1e-5, true);
         const auto g = ops::batch_norm_backward(misaligned(in[0], x), in[1], in[2], fwd.save_mean,
                                                 fwd.save_invstd, fwd.out, true);
         return ops::concat({g.input.flatten(), g.gamma, g.beta, g.masked.flatten()}, 0);
       },
       grad_tol});
}

void conv_bias_cases() {
  // The bias gradient alone (a 1x1 convolution, no GEMM asked for): grad_out (N, O, H, W).
  const Conv2dGeometry one;
  const std::pair<std::string, Shape> shapes[] = {{"vec_o1", {4, 1, 20, 24}},
                                                  {"odd_o1", {4, 1, 21, 23}},
                                                  {"vec_o70", {3, 70, 36, 40}},
                                                  {"odd_o70", {3, 70, 35, 41}}};
  const Tolerance tol{5e-4, 1e-4};
  for (const auto& named : shapes) {
    const Shape g = named.second;
    const Shape x = {g[0], 2, g[2], g[3]}, w = {g[1], 2, 1, 1};
    add({"conv2d_backward_bias/" + named.first,
         "conv",
         {f32(g), f32(x), f32(w)},
         [one](const auto& in) {
           return ops::conv2d_backward(in[0], in[1], in[2], true, false, one, false).bias;
         },
         tol});
    // relu_out = ReLU(y_pre): the mask inside the bias gradient's pass
    add({"conv2d_relu_backward_bias/" + named.first,
         "conv",
         {f32(g), f32(x), f32(w), f32(g)},
         [one](const auto& in) {
           return ops::conv2d_backward(in[0], in[1], in[2], true, false, one, false, Tensor(),
                                       ops::relu(in[3]))
               .bias;
         },
         tol});
  }
  // The masked gradient the vector pass writes, read by the weight GEMM (L = 240).
  add({"conv2d_relu_backward_weight/1x1_vec",
       "conv",
       {f32({3, 5, 12, 20}), f32({3, 2, 12, 20}), f32({5, 2, 1, 1}), f32({3, 5, 12, 20})},
       [one](const auto& in) {
         return ops::conv2d_backward(in[0], in[1], in[2], true, false, one, true, Tensor(),
                                     ops::relu(in[3]))
             .weight;
       },
       tol});
  const Shape g = {3, 5, 12, 20};
  add({"conv2d_backward_bias/misaligned",
       "conv",
       {flat_for(g), f32({3, 2, 12, 20}), f32({5, 2, 1, 1})},
       [one, g](const auto& in) {
         return ops::conv2d_backward(misaligned(in[0], g), in[1], in[2], true, false, one, false)
             .bias;
       },
       tol});
}

void pool_cases() {
  const Pool2dGeometry two;  // 2x2 stride 2
  Pool2dGeometry ceil2 = two;
  ceil2.ceil_mode = true;  // odd H: a clipped last window row, the generic kernel
  const Tolerance exact{0, 0};
  struct PoolCase {
    std::string name;
    Shape x;
    Pool2dGeometry p;
  };
  const PoolCase pool_shapes[] = {{"2x2_vec", {3, 5, 10, 12}, two},
                                  {"2x2_vec_odd_h", {3, 5, 11, 12}, two},
                                  {"2x2_w10", {3, 5, 10, 10}, two},
                                  {"2x2_ceil_odd_h", {3, 5, 11, 12}, ceil2}};
  for (const PoolCase& pc : pool_shapes) {
    const Pool2dGeometry p = pc.p;
    for (const bool relu_first : {false, true}) {
      const std::string name = pc.name + (relu_first ? "_relu_first" : "");
      // y and argmax (as float) in one comparison, exact: both sides pick the same element.
      add({"max_pool2d_with_argmax/" + name,
           "pool",
           {f32(pc.x)},
           [p, relu_first](const auto& in) {
             Tensor argmax;
             const Tensor y = ops::max_pool2d(in[0], p, &argmax, relu_first);
             return ops::concat({y.flatten(), argmax.to(y.dtype()).flatten()}, 0);
           },
           exact});
    }
  }
  const Shape x = {3, 5, 10, 12};
  add({"max_pool2d_with_argmax/2x2_misaligned",
       "pool",
       {flat_for(x)},
       [two, x](const auto& in) {
         Tensor argmax;
         const Tensor y = ops::max_pool2d(misaligned(in[0], x), two, &argmax);
         return ops::concat({y.flatten(), argmax.to(y.dtype()).flatten()}, 0);
       },
       exact});
}

void shortcut_cases() {
  const Tolerance exact{0, 0};
  add({"pad_channels_subsample/s2_p2_strided_input",
       "shape",
       {f32({3, 5, 14, 9})},
       [](const auto& in) { return ops::pad_channels_subsample(in[0].slice(2, 0, 14, 2), 2, 2); },
       exact});
  add({"pad_channels_subsample/s3_p0_s1_p1",
       "shape",
       {f32({2, 3, 19, 17})},
       [](const auto& in) {
         return ops::concat({ops::pad_channels_subsample(in[0], 0, 3).flatten(),
                             ops::pad_channels_subsample(in[0], 1, 1).flatten()},
                            0);
       },
       exact});
  add({"pad_channels_subsample_backward/s2_p2",
       "shape",
       {f32({3, 9, 4, 5})},
       [](const auto& in) {
         return ops::pad_channels_subsample_backward(in[0], 2, 2, {3, 5, 7, 9});
       },
       exact});
  add({"pad_channels_subsample_backward/s3_p1_large_planes",
       "shape",
       {f32({2, 5, 7, 6})},
       [](const auto& in) {
         return ops::pad_channels_subsample_backward(in[0], 1, 3, {2, 3, 19, 17});
       },
       exact});
}

const Registrar bandwidth_cases([] {
  shortcut_cases();
  reduce_cases();
  norm_cases();
  conv_bias_cases();
  pool_cases();
});

}  // namespace
}  // namespace echelon::parity
