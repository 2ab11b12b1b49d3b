// Parity cases of the bf16 compute path (ops::set_float32_precision(Precision::Bf16)): on CUDA the
// op runs with its GEMMs on bf16 operands (our tensor-core kernels: matmul, and conv forward,
// backward-data and backward-weight), fp32 accumulation and fp32 tensors; its CPU reference is the
// same op on inputs rounded to bf16 (kernels/bf16.h), which is what the kernels multiply: the
// GEMM operands are the tensors' own values or padding zeros. Odd sizes, tile tails and
// non-contiguous views, as the fp32 cases. On the CPU (float32 vs float64 mode) both sides round.
// The GEMM cases are family "bf16", not "matmul": the harness runs this family on our kernels
// (MatmulImpl::Ours), never through cuBLAS, whose FAST_16BF down-conversion does not round as the
// twin does (4 cases failed on the H200 under Auto, session 22; bf16_gpu_test.cpp bounds cuBLAS
// at bf16 accuracy instead).
#include "tests/support/parity.h"

namespace echelon::parity {
namespace {

InputSpec f32(Shape shape, Layout layout = Layout::Contiguous) {
  return InputSpec{std::move(shape), kFloat32, -1.0, 1.0, layout, {}};
}

// On CUDA: `op` under Precision::Bf16. On the CPU: `op` with its first `operands` inputs (the
// GEMM operands; not a bias, which the epilogue adds in fp32) rounded to bf16.
RunFn bf16(RunFn op, size_t operands = 2) {
  return [op = std::move(op), operands](const std::vector<Tensor>& in) {
    if (!in[0].device().is_cuda()) {
      std::vector<Tensor> r = in;
      for (size_t i = 0; i < operands; ++i) r[i] = rounded_as(in[i], Precision::Bf16);
      return op(r);
    }
    ops::set_float32_precision(Precision::Bf16);
    try {
      Tensor out = op(in);
      ops::set_float32_precision(Precision::Fp32);
      return out;
    } catch (...) {
      ops::set_float32_precision(Precision::Fp32);
      throw;
    }
  };
}

const Registrar bf16_cases([] {
  // Only the summation order separates the kernels (fp32) from the twin (double).
  const Tolerance tol{1e-4, 1e-4}, wide{5e-4, 1e-4};
  add({"bf16/matmul/nn",
       "bf16",
       {f32({67, 45}), f32({45, 131})},
       bf16([](const auto& in) { return ops::matmul(in[0], in[1]); }),
       tol});
  add({"bf16/matmul/tt_multi_tile",
       "bf16",
       {f32({129, 37}), f32({131, 129})},
       bf16([](const auto& in) { return ops::matmul(in[0], in[1], true, true); }),
       tol});
  add({"bf16/matmul/transposed_view",
       "bf16",
       {f32({37, 29}, Layout::Transposed), f32({29, 41})},
       bf16([](const auto& in) { return ops::matmul(in[0], in[1]); }),
       tol});
  add({"bf16/bmm/strided",
       "bf16",
       {f32({3, 33, 17}), f32({3, 17, 29}, Layout::Strided)},
       bf16([](const auto& in) { return ops::bmm(in[0], in[1]); }),
       tol});
  // M, N >= 128: the 128x128 tensor-core tile (2 x 2 tiles; K = 77 and 45: tails of the 32-deep
  // k-slices), plain and batched with a strided operand.
  add({"bf16/matmul/large_tile",
       "bf16",
       {f32({200, 77}), f32({77, 131})},
       bf16([](const auto& in) { return ops::matmul(in[0], in[1]); }),
       tol});
  add({"bf16/bmm/large_tile_strided",
       "bf16",
       {f32({2, 130, 45}), f32({2, 45, 140}, Layout::Strided)},
       bf16([](const auto& in) { return ops::bmm(in[0], in[1]); }),
       tol});
  // Conv: dilation, stride and padding, 7 output channels (the narrow tile), K = 5*3*3 = 45 (k
  // slices of 16 with a tail of 13); the weight gradient's K (3*6*5 = 90) splits over groups.
  const Conv2dGeometry p = window_s2_p1_d2();
  const Conv2dGeometry geo = p.for_input(3, 5, 11, 9, 7);
  const Shape y_shape = {geo.n, geo.o, geo.out_h, geo.out_w};
  add({"bf16/conv2d/s2_p1_d2",
       "conv",
       {f32({3, 5, 11, 9}), f32({7, 5, 3, 3}), f32({7})},
       bf16([p](const auto& in) { return ops::conv2d(in[0], in[1], in[2], p); }),
       tol});
  add({"bf16/conv2d/transposed_input",
       "conv",
       {f32({3, 5, 11, 9}, Layout::Transposed), f32({7, 5, 3, 3}), f32({7})},
       bf16([p](const auto& in) { return ops::conv2d(in[0], in[1], in[2], p); }),
       tol});
  add({"bf16/conv2d_backward_input/s2_p1_d2",
       "conv",
       {f32(y_shape), f32({3, 5, 11, 9}), f32({7, 5, 3, 3})},
       bf16(
           [p](const auto& in) {
             return ops::conv2d_backward(in[0], in[1], in[2], false, true, p).input;
           },
           3),
       tol});
  add({"bf16/conv2d_backward_weight/s2_p1_d2",
       "conv",
       {f32(y_shape, Layout::Strided), f32({3, 5, 11, 9}), f32({7, 5, 3, 3})},
       bf16(
           [p](const auto& in) {
             return ops::conv2d_backward(in[0], in[1], in[2], false, false, p).weight;
           },
           3),
       wide});

  // bfloat16 storage (DType::BFloat16): a cast there and back gives the same bits on both
  // backends (kernels/cast.h), from strided and broadcast sources and into a strided destination.
  const Tolerance exact{0.0, 0.0};
  const auto round_trip = [](const Tensor& x) {
    return ops::cast(ops::cast(x, kBFloat16), x.dtype());
  };
  add({"bf16_storage/round_trip/transposed",
       "elementwise",
       {f32({37, 29}, Layout::Transposed)},
       [round_trip](const auto& in) { return round_trip(in[0]); },
       exact});
  add({"bf16_storage/round_trip/broadcast",
       "elementwise",
       {InputSpec{{1, 29}, kFloat32, -3e38, 3e38, Layout::Broadcast, {17, 29}}},
       [round_trip](const auto& in) { return round_trip(in[0]); },
       exact});
  add({"bf16_storage/into_transposed_view",
       "elementwise",
       {f32({23, 31})},
       [](const auto& in) {
         Tensor h = Tensor::empty({31, 23}, kBFloat16, in[0].device());
         Tensor view = h.transpose(0, 1);
         ops::copy_(view, in[0]);
         return ops::cast(h.contiguous(), in[0].dtype());  // bfloat16 -> bfloat16, then back
       },
       exact});

  // bfloat16 compute (relu, relu's backward, add: float math, each result rounded to nearest
  // even as it is stored): the inputs cast to bfloat16 on the device, the op on bfloat16
  // tensors and views of them, the result cast back. Exact: both backends store the same bits.
  const auto h = [](const Tensor& x) { return ops::cast(x, kBFloat16); };
  const auto back = [](const Tensor& y, const Tensor& like) { return ops::cast(y, like.dtype()); };
  add({"bf16_compute/relu/odd",
       "elementwise",
       {f32({3, 5, 7, 11})},
       [h, back](const auto& in) { return back(ops::relu(h(in[0])), in[0]); },
       exact});
  add({"bf16_compute/relu/transposed_view",
       "elementwise",
       {f32({29, 37})},
       [h, back](const auto& in) { return back(ops::relu(h(in[0]).transpose(0, 1)), in[0]); },
       exact});
  add({"bf16_compute/relu_backward/strided_views",
       "elementwise",
       {f32({13, 41}), f32({13, 41})},
       [h, back](const auto& in) {
         const Tensor g = h(in[0]).narrow(1, 1, 39), x = h(in[1]).narrow(1, 2, 39);
         return back(ops::unary_backward(UnaryOp::Relu, g, x, ops::relu(x)), in[0]);
       },
       exact});
  add({"bf16_compute/add/odd",
       "elementwise",
       {f32({1155}), f32({1155})},
       [h, back](const auto& in) { return back(ops::add(h(in[0]), h(in[1])), in[0]); },
       exact});
  add({"bf16_compute/add/broadcast_row",
       "elementwise",
       {f32({17, 29}), f32({29})},
       [h, back](const auto& in) { return back(ops::add(h(in[0]), h(in[1])), in[0]); },
       exact});
  add({"bf16_compute/add/transposed_and_strided",
       "elementwise",
       {f32({29, 37}), f32({37, 59})},
       [h, back](const auto& in) {
         const Tensor a = h(in[0]).transpose(0, 1), b = h(in[1]).narrow(1, 3, 29);  // (37, 29)
         return back(ops::add(a, b), in[0]);
       },
       exact});
});

}  // namespace
}  // namespace echelon::parity
