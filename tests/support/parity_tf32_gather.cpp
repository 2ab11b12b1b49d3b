// Parity cases of the TF32 convolution on its gather tiles (cuda/kernels/mma_tile.cuh,
// ConvConfig::async_gather: the gathered operands by 4-byte cp.async with zero-fill, every
// operand in a 4-stage cp.async ring): on CUDA the op runs under Precision::Tf32 with
// cuda::set_conv_async_gather(true), the deep ring and the 128x128 tile forced; its CPU reference
// is the same op on inputs rounded to TF32 (kernels/tf32.h), which is what the tensor cores
// multiply. 129 input channels and 131 filters (no multiple of 4: the weights go by 4-byte
// copies too), odd sizes, a 2x3 kernel at stride 2 with padding 1 and dilation 2: the padding's
// zero-filled copies and tile tails in every pass. On the CPU (float32 vs float64 mode) both
// sides round. CUDA builds only (the emulation's included).
#include "tests/support/parity.h"

#if ECHELON_WITH_CUDA
#include <echelon/cuda/kernels/conv_gemm.h>
#include <echelon/cuda/kernels/matmul.h>

namespace echelon::parity {
namespace {

InputSpec f32(Shape shape, Layout layout = Layout::Contiguous) {
  return InputSpec{std::move(shape), kFloat32, -1.0, 1.0, layout, {}};
}

// The switches of the gather tiles for one run on CUDA; restores the defaults.
struct GatherTilesScope {
  GatherTilesScope() {
    ops::set_float32_precision(Precision::Tf32);
    cuda::set_conv_async_gather(true);
    cuda::set_mma_stages(cuda::mma_deep_stages());
    cuda::set_mma_tile(cuda::MmaTile::Large);
  }
  ~GatherTilesScope() {
    cuda::set_mma_tile(cuda::MmaTile::Auto);
    cuda::set_mma_stages(2);
    cuda::set_conv_async_gather(false);
    ops::set_float32_precision(Precision::Fp32);
  }
  GatherTilesScope(const GatherTilesScope&) = delete;
  GatherTilesScope& operator=(const GatherTilesScope&) = delete;
};

// On CUDA: `op` on the gather tiles. On the CPU: `op` with its first `operands` inputs (the
// GEMM operands; not a bias, which the epilogue adds in fp32) rounded to TF32.
RunFn on_gather_tiles(RunFn op, size_t operands = 2) {
  return [op = std::move(op), operands](const std::vector<Tensor>& in) {
    if (!in[0].device().is_cuda()) {
      std::vector<Tensor> r = in;
      for (size_t i = 0; i < operands; ++i) r[i] = rounded_as(in[i], Precision::Tf32);
      return op(r);
    }
    GatherTilesScope scope;
    return op(in);
  };
}

const Registrar tf32_gather_cases([] {
  const Tolerance tol{2e-4, 1e-4}, wide{5e-4, 1e-4};
  Conv2dGeometry p;
  p.stride_h = p.stride_w = 2, p.pad_h = p.pad_w = 1, p.dilation_h = p.dilation_w = 2;
  p.kernel_h = 2, p.kernel_w = 3;
  // Forward: M = 131, N = 2 * 8 * 8 = 128, K = 129 * 6 = 774; grad input: M = 129,
  // N = 2 * 15 * 17 = 510, K = 786; grad weight: M = 131, N = 774, K = 128.
  const Shape x_shape = {2, 129, 15, 17}, w_shape = {131, 129, 2, 3};
  const Conv2dGeometry geo = p.for_input(2, 129, 15, 17, 131);
  const Shape y_shape = {geo.n, geo.o, geo.out_h, geo.out_w};
  add({"tf32_gather/conv2d/s2_p1_d2_2x3",
       "conv",
       {f32(x_shape), f32(w_shape), f32({131})},
       on_gather_tiles([p](const auto& in) { return ops::conv2d(in[0], in[1], in[2], p); }),
       tol});
  add({"tf32_gather/conv2d_backward_input/s2_p1_d2_2x3",
       "conv",
       {f32(y_shape), f32(x_shape), f32(w_shape)},
       on_gather_tiles(
           [p](const auto& in) {
             return ops::conv2d_backward(in[0], in[1], in[2], false, true, p).input;
           },
           3),
       tol});
  add({"tf32_gather/conv2d_backward_weight/s2_p1_d2_2x3",
       "conv",
       {f32(y_shape), f32(x_shape), f32(w_shape)},
       on_gather_tiles(
           [p](const auto& in) {
             return ops::conv2d_backward(in[0], in[1], in[2], false, false, p).weight;
           },
           3),
       wide});
});

}  // namespace
}  // namespace echelon::parity
#endif
