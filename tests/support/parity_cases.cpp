// Parity cases of the basic op families (elementwise, reduce, matmul, shape, im2col, random).
// Sizes are odd and not multiples of any tile (the SGEMM tile is 128x128x8, blocks are 256
// threads); inputs include transposed, strided, offset and broadcast views. Value ranges keep
// each op away from its singularities (log/sqrt/reciprocal/div get positive inputs).
#include <cmath>
#include <limits>

#include "tests/support/parity.h"

namespace echelon::parity {
namespace {

using L = Layout;

InputSpec f32(Shape shape, L layout = L::Contiguous, double lo = -1.0, double hi = 1.0) {
  return InputSpec{std::move(shape), kFloat32, lo, hi, layout, {}};
}
InputSpec positive(Shape shape, L layout = L::Contiguous) {
  return f32(std::move(shape), layout, 0.25, 2.0);
}
InputSpec broadcast(Shape shape, Shape expand_to) {
  return InputSpec{std::move(shape), kFloat32, -1.0, 1.0, L::Broadcast, std::move(expand_to)};
}
InputSpec ints(Shape shape, double lo, double hi, DType dtype = kInt64) {
  return InputSpec{std::move(shape), dtype, lo, hi, L::Contiguous, {}};
}

bool needs_positive(UnaryOp op) {
  return op == UnaryOp::Log || op == UnaryOp::Sqrt || op == UnaryOp::Reciprocal;
}

void elementwise_cases() {
  const UnaryOp unary_ops[] = {UnaryOp::Neg,    UnaryOp::Abs,       UnaryOp::Exp,  UnaryOp::Log,
                               UnaryOp::Sqrt,   UnaryOp::Relu,      UnaryOp::Tanh, UnaryOp::Sigmoid,
                               UnaryOp::Square, UnaryOp::Reciprocal};
  for (const UnaryOp op : unary_ops) {
    const std::string name = echelon::name(op);
    const auto spec = [&](Shape shape, L layout) {
      return needs_positive(op) ? positive(std::move(shape), layout)
                                : f32(std::move(shape), layout);
    };
    const Tolerance tol{1e-6, 2e-6};
    add({name + "/contiguous",
         "elementwise",
         {spec({37, 53}, L::Contiguous)},
         [op](const auto& in) { return ops::unary(op, in[0]); },
         tol});
    add({name + "/transposed",
         "elementwise",
         {spec({19, 33}, L::Transposed)},
         [op](const auto& in) { return ops::unary(op, in[0]); },
         tol});
    add({name + "_backward",
         "elementwise",
         {f32({41, 29}), spec({41, 29}, L::Contiguous)},
         [op](const auto& in) {
           return ops::unary_backward(op, in[0], in[1], ops::unary(op, in[1]));
         },
         Tolerance{1e-5, 1e-5}});
  }
  add({"relu/strided", "elementwise", {f32({5, 7, 31}, L::Strided)}, [](const auto& in) {
         return ops::relu(in[0]);
       }});
  add({"exp/offset", "elementwise", {f32({9, 65}, L::Offset)}, [](const auto& in) {
         return ops::exp(in[0]);
       }});
  add({"neg/broadcast_view", "elementwise", {broadcast({1, 47}, {13, 47})}, [](const auto& in) {
         return ops::neg(in[0]);
       }});

  // The contiguous fast path (cuda/kernels/elementwise.cu): 16-byte vectors plus a scalar tail
  // when every pointer is aligned, scalar otherwise. Offset views start 2 rows in: 2 * 66 floats
  // is 16-byte aligned (vector body, tail of 2), 2 * 33 floats is not (all scalar).
  add({"sigmoid/contiguous_aligned_tail",
       "elementwise",
       {f32({7, 66}, L::Offset)},
       [](const auto& in) { return ops::sigmoid(in[0]); },
       Tolerance{1e-6, 2e-6}});
  add({"add/contiguous_misaligned",
       "elementwise",
       {f32({5, 33}, L::Offset), f32({5, 33})},
       [](const auto& in) { return ops::add(in[0], in[1]); }});
  add({"mul/contiguous_long", "elementwise", {f32({1031, 7}), f32({1031, 7})}, [](const auto& in) {
         return ops::mul(in[0], in[1]);
       }});
  add({"clamp/contiguous_tail",
       "elementwise",
       {f32({3, 67}, L::Contiguous, -2.0, 2.0)},
       [](const auto& in) { return ops::clamp(in[0], -0.5, 0.75); }});
  add({"relu_backward/misaligned",
       "elementwise",
       {f32({4, 33}, L::Offset), f32({6, 33})},
       [](const auto& in) {
         const Tensor x = in[1].narrow(0, 1, 4);  // starts 33 floats in: misaligned
         return ops::unary_backward(UnaryOp::Relu, in[0], x, ops::relu(x));
       }});
  add({"axpy/offset_src",
       "elementwise",
       {f32({9, 65}), f32({9, 65}, L::Offset)},
       [](const auto& in) {
         Tensor dst = in[0].clone();
         ops::axpy_(dst, in[1], -0.625);
         return dst;
       }});

  const BinaryOp binary_ops[] = {BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div,
                                 BinaryOp::Max, BinaryOp::Min, BinaryOp::Pow};
  for (const BinaryOp op : binary_ops) {
    const std::string name = echelon::name(op);
    const bool pow = op == BinaryOp::Pow, div = op == BinaryOp::Div;
    const InputSpec a = pow ? positive({33, 65}) : f32({33, 65});
    InputSpec b = div ? positive({33, 65}) : f32({33, 65});
    if (pow) b = f32({33, 65}, L::Contiguous, -1.5, 1.5);
    const Tolerance tol{1e-6, 1e-5};
    const auto run = [op](const auto& in) { return ops::binary(op, in[0], in[1]); };
    add({name + "/same_shape", "elementwise", {a, b}, run, tol});
    InputSpec row = b;
    row.shape = {1, 65};
    add({name + "/broadcast_row", "elementwise", {a, row}, run, tol});
    InputSpec col3 = b;
    col3.shape = {5, 1};
    InputSpec a3 = a;
    a3.shape = {7, 1, 9};
    add({name + "/broadcast_both", "elementwise", {a3, col3}, run, tol});
    InputSpec at = a;
    at.layout = L::Transposed;
    add({name + "/transposed_lhs", "elementwise", {at, b}, run, tol});
  }
  add({"add_scalar", "elementwise", {f32({27, 39}, L::Strided)}, [](const auto& in) {
         return ops::add(in[0], 0.375);
       }});
  add({"mul_scalar", "elementwise", {f32({101, 3})}, [](const auto& in) {
         return ops::mul(in[0], -1.625);
       }});
  add({"pow_scalar",
       "elementwise",
       {positive({45, 17})},
       [](const auto& in) { return ops::pow(in[0], 2.5); },
       Tolerance{1e-6, 1e-5}});
  add({"rsub_scalar_first", "elementwise", {f32({45, 17}, L::Transposed)}, [](const auto& in) {
         return ops::binary_scalar(BinaryOp::Sub, in[0], 1.0, true);
       }});
  add({"rdiv_scalar_first",
       "elementwise",
       {positive({45, 17})},
       [](const auto& in) { return ops::binary_scalar(BinaryOp::Div, in[0], 3.0, true); },
       Tolerance{1e-6, 1e-5}});
  add({"eq/int64_broadcast",
       "elementwise",
       {ints({23, 31}, 0, 3), ints({1, 31}, 0, 3)},
       [](const auto& in) { return ops::eq(in[0], in[1]); },
       Tolerance{0, 0},
       true,
       false});
  add({"eq/float_self",
       "elementwise",
       {f32({23, 31}, L::Transposed)},
       [](const auto& in) { return ops::eq(in[0], in[0].contiguous()); },
       Tolerance{0, 0}});
  add({"cast/f32_to_int32",
       "elementwise",
       {f32({29, 37}, L::Contiguous, -50.0, 50.0)},
       [](const auto& in) { return ops::cast(in[0], kInt32); },
       Tolerance{0, 0}});
  add({"cast/int64_to_f32",
       "elementwise",
       {ints({29, 37}, -1000, 1000)},
       [](const auto& in) { return ops::cast(in[0], kFloat32); },
       Tolerance{0, 0},
       true,
       false});
  add({"cast/uint8_to_f32",
       "elementwise",
       {ints({3, 17, 19}, 0, 256, kUInt8)},
       [](const auto& in) { return ops::cast(in[0], kFloat32); },
       Tolerance{0, 0},
       true,
       false});
  add({"copy_/into_transposed_view",
       "elementwise",
       {f32({21, 35}), broadcast({1, 35}, {21, 35})},
       [](const auto& in) {
         // dst is a transposed view of a NaN-filled buffer; src broadcasts a row into it.
         Tensor dst =
             Tensor::full({35, 21}, std::nan(""), in[0].dtype(), in[0].device()).transpose(0, 1);
         ops::copy_(dst, in[1]);
         return ops::add(dst, in[0]);
       },
       Tolerance{1e-6, 1e-6}});
  add({"fill_/strided_view",
       "elementwise",
       {f32({13, 41})},
       [](const auto& in) {
         Tensor t = in[0].clone();
         Tensor every_third = t.slice(1, 1, 41, 3);
         ops::fill_(every_third, -0.8125);
         return t;
       },
       Tolerance{0, 0}});
  add({"arange/float",
       "elementwise",
       {f32({1})},
       [](const auto& in) { return ops::arange(1031, in[0].dtype(), in[0].device()); },
       Tolerance{0, 0}});
  add({"arange/int64",
       "elementwise",
       {f32({1})},
       [](const auto& in) { return ops::arange(1031, kInt64, in[0].device()); },
       Tolerance{0, 0}});
  add({"axpy_",
       "elementwise",
       {f32({257, 5}), f32({257, 5})},
       [](const auto& in) {
         Tensor dst = in[0].clone();
         ops::axpy_(dst, in[1], -0.4375);
         return dst;
       },
       Tolerance{1e-6, 1e-6}});
  add({"clamp",
       "elementwise",
       {f32({61, 23}, L::Contiguous, -3.0, 3.0)},
       [](const auto& in) { return ops::clamp(in[0], -1.25, 0.75); },
       Tolerance{0, 0}});
  add({"all_finite/with_inf",
       "elementwise",
       {f32({17, 300})},
       [](const auto& in) {
         Tensor t = in[0].clone();
         const bool clean = ops::all_finite(t);
         Tensor one = t.narrow(0, 11, 1).narrow(1, 250, 1);
         ops::fill_(one, std::numeric_limits<double>::infinity());
         const bool dirty = ops::all_finite(t);
         return Tensor::from_vector<float>({clean ? 1.0f : 0.0f, dirty ? 1.0f : 0.0f}, {2},
                                           in[0].device());
       },
       Tolerance{0, 0},
       true,
       false});
}

void reduce_cases() {
  const Tolerance tol{1e-5, 1e-4};
  add({"sum/all",
       "reduce",
       {f32({17, 129, 5})},
       [](const auto& in) { return ops::sum(in[0]); },
       tol});
  add({"sum/dim1",
       "reduce",
       {f32({17, 129, 5})},
       [](const auto& in) { return ops::sum(in[0], {1}); },
       tol});
  add({"sum/dims02_keepdim",
       "reduce",
       {f32({17, 129, 5}, L::Transposed)},
       [](const auto& in) {
         return ops::sum(in[0], {0, 2}, true);
       },
       tol});
  add({"mean/last_short",
       "reduce",
       {f32({1001, 3})},
       [](const auto& in) { return ops::mean(in[0], {-1}); },
       tol});
  add({"mean/long_row",
       "reduce",
       {f32({3, 5003}, L::Offset)},
       [](const auto& in) { return ops::mean(in[0], {1}); },
       tol});
  add({"amax/dim0",
       "reduce",
       {f32({67, 45}, L::Strided)},
       [](const auto& in) { return ops::amax(in[0], {0}); },
       Tolerance{0, 0}});
  add({"min/dim1",
       "reduce",
       {f32({45, 67})},
       [](const auto& in) { return ops::reduce(ReduceOp::Min, in[0], {1}); },
       Tolerance{0, 0}});
  add({"argmax/dim1",
       "reduce",
       {f32({23, 301})},
       [](const auto& in) { return ops::argmax(in[0], 1); },
       Tolerance{0, 0}});
  add({"argmax/dim0_keepdim",
       "reduce",
       {f32({31, 7}, L::Transposed)},
       [](const auto& in) { return ops::argmax(in[0], 0, true); },
       Tolerance{0, 0}});
  // Column layouts (the reduced dim is not innermost in memory): the column kernel.
  add({"sum/columns_dim0",
       "reduce",
       {f32({301, 67})},
       [](const auto& in) { return ops::sum(in[0], {0}); },
       Tolerance{1e-4, 1e-4}});
  add({"amax/columns_merged_outer",
       "reduce",
       {f32({3, 7, 40})},
       [](const auto& in) { return ops::amax(in[0], {0}); },
       Tolerance{0, 0}});
  add({"mean/columns_transposed", "reduce", {f32({19, 45}, L::Transposed)}, [](const auto& in) {
         return ops::mean(in[0], {1});
       }});
  add({"sum/columns_two_reduced_dims",
       "reduce",
       {f32({6, 5, 35})},
       [](const auto& in) {
         return ops::sum(in[0], {0, 1});
       },
       Tolerance{1e-5, 1e-4}});
  add({"sum_to/broadcast_grad",
       "reduce",
       {f32({9, 13, 7})},
       [](const auto& in) {
         return ops::sum_to(in[0], {13, 1});
       },
       tol});
  for (const int64_t dim : {-1, 1}) {
    const Shape shape = dim == -1 ? Shape{31, 97} : Shape{5, 11, 7};
    const std::string suffix = dim == -1 ? "/last" : "/middle";
    add({"softmax" + suffix,
         "reduce",
         {f32(shape, L::Contiguous, -4.0, 4.0)},
         [dim](const auto& in) { return ops::softmax(in[0], dim); },
         Tolerance{1e-6, 1e-5}});
    add({"log_softmax" + suffix,
         "reduce",
         {f32(shape, L::Contiguous, -4.0, 4.0)},
         [dim](const auto& in) { return ops::log_softmax(in[0], dim); },
         tol});
    add({"softmax_backward" + suffix,
         "reduce",
         {f32(shape), f32(shape, L::Contiguous, -4.0, 4.0)},
         [dim](const auto& in) {
           return ops::softmax_backward(in[0], ops::softmax(in[1], dim), dim);
         },
         Tolerance{1e-6, 1e-5}});
    add({"log_softmax_backward" + suffix,
         "reduce",
         {f32(shape), f32(shape, L::Contiguous, -4.0, 4.0)},
         [dim](const auto& in) {
           return ops::log_softmax_backward(in[0], ops::log_softmax(in[1], dim), dim);
         },
         tol});
  }
}

void matmul_cases() {
  const Tolerance tol{1e-4, 1e-4};
  add({"matmul/nn",
       "matmul",
       {f32({67, 45}), f32({45, 131})},
       [](const auto& in) { return ops::matmul(in[0], in[1]); },
       tol});
  add({"matmul/tn",
       "matmul",
       {f32({45, 67}), f32({45, 131})},
       [](const auto& in) { return ops::matmul(in[0], in[1], true, false); },
       tol});
  add({"matmul/nt",
       "matmul",
       {f32({67, 45}), f32({131, 45})},
       [](const auto& in) { return ops::matmul(in[0], in[1], false, true); },
       tol});
  add({"matmul/tt_multi_tile",
       "matmul",
       {f32({129, 257}), f32({131, 129})},
       [](const auto& in) { return ops::matmul(in[0], in[1], true, true); },
       tol});
  add({"matmul/thin",
       "matmul",
       {f32({1, 300}), f32({300, 7})},
       [](const auto& in) { return ops::matmul(in[0], in[1]); },
       tol});
  add({"matmul/transposed_view",
       "matmul",
       {f32({37, 29}, L::Transposed), f32({29, 41})},
       [](const auto& in) { return ops::matmul(in[0], in[1]); },
       tol});
  add({"bmm/nn",
       "matmul",
       {f32({3, 33, 17}), f32({3, 17, 29})},
       [](const auto& in) { return ops::bmm(in[0], in[1]); },
       tol});
  add({"bmm/nt",
       "matmul",
       {f32({5, 9, 130}), f32({5, 11, 130})},
       [](const auto& in) { return ops::bmm(in[0], in[1], false, true); },
       tol});
  // Operands whose pointer and leading dimension are multiples of 16 bytes take the 16-byte
  // paths of gemm_tile.cuh: cp.async for transposed A and plain B (along m / n), float4 register
  // loads for plain A and transposed B (along k); narrowed views give runs cut by the matrix edge
  // (tails of 1..3) and, offset by one or two floats, misaligned operands (element loads).
  add({"matmul/nn_aligned",
       "matmul",
       {f32({67, 44}), f32({44, 132})},
       [](const auto& in) { return ops::matmul(in[0], in[1]); },
       tol});
  add({"matmul/tn_aligned_tails",
       "matmul",
       {f32({37, 72}), f32({37, 136})},
       [](const auto& in) {
         return ops::matmul(in[0].narrow(1, 0, 70), in[1].narrow(1, 0, 133), true, false);
       },
       tol});
  add({"matmul/nt_aligned_tails",
       "matmul",
       {f32({67, 40}), f32({131, 40})},
       [](const auto& in) {
         return ops::matmul(in[0].narrow(1, 0, 37), in[1].narrow(1, 0, 37), false, true);
       },
       tol});
  add({"matmul/tt_aligned",
       "matmul",
       {f32({36, 68}), f32({52, 36})},
       [](const auto& in) { return ops::matmul(in[0], in[1], true, true); },
       tol});
  add({"matmul/misaligned_views",
       "matmul",
       {f32({20, 48}), f32({40, 68})},
       [](const auto& in) { return ops::matmul(in[0].narrow(1, 1, 40), in[1].narrow(1, 2, 63)); },
       tol});
  add({"matmul/tn_aligned_large_tile",
       "matmul",
       {f32({24, 256}), f32({24, 260})},
       [](const auto& in) { return ops::matmul(in[0], in[1].narrow(1, 0, 257), true, false); },
       tol});
  add({"bmm/nn_aligned",
       "matmul",
       {f32({3, 33, 20}), f32({3, 20, 36})},
       [](const auto& in) { return ops::bmm(in[0], in[1]); },
       tol});
  add({"bmm/tn_aligned_tails",
       "matmul",
       {f32({2, 19, 40}), f32({2, 19, 24})},
       [](const auto& in) {
         return ops::bmm(in[0].narrow(2, 0, 38), in[1].narrow(2, 0, 21), true, false);
       },
       tol});
  add({"gemm_/beta0_nan_c",
       "matmul",
       {f32({53, 19}), f32({19, 71})},
       [](const auto& in) {
         // beta == 0 must not read C: a NaN-filled, guarded C proves it (NaN * 0 is NaN).
         Guarded c = make_guarded({53, 71}, in[0].dtype(), in[0].device());
         ops::gemm_(c.view, in[0], in[1], false, false, 1.5, 0.0);
         c.check("gemm_");
         return c.view;
       },
       tol});
  add({"gemm_/beta_accumulate",
       "matmul",
       {f32({19, 53}), f32({71, 19}), f32({53, 71})},
       [](const auto& in) {
         Tensor c = in[2].clone();
         ops::gemm_(c, in[0], in[1], true, true, -0.75, 0.5);
         return c;
       },
       tol});
}

void shape_cases() {
  const Tolerance exact{0, 0};
  add({"permute/3d",
       "shape",
       {f32({5, 7, 9})},
       [](const auto& in) {
         return ops::permute(in[0], {2, 0, 1});
       },
       exact});
  add({"transpose/strided_input",
       "shape",
       {f32({11, 13, 6}, L::Strided)},
       [](const auto& in) { return ops::transpose(in[0], 0, 2); },
       exact});
  add({"concat/dim1",
       "shape",
       {f32({3, 5, 7}), f32({3, 2, 7}, L::Offset), f32({3, 9, 7})},
       [](const auto& in) {
         return ops::concat({in[0], in[1], in[2]}, 1);
       },
       exact});
  add({"index_select/dim1",
       "shape",
       {f32({7, 23, 5}), ints({31}, 0, 23)},
       [](const auto& in) { return ops::index_select(in[0], 1, in[1]); },
       exact});
  add({"index_select/int64_rows",
       "shape",
       {ints({19, 3}, -100, 100), ints({11}, 0, 19)},
       [](const auto& in) { return ops::index_select(in[0], 0, in[1]); },
       exact,
       true,
       false});
  add({"gather/dim1",
       "shape",
       {f32({9, 17}), ints({9, 6}, 0, 17)},
       [](const auto& in) { return ops::gather(in[0], 1, in[1]); },
       exact});
  add({"one_hot",
       "shape",
       {f32({1}), ints({37}, 0, 11)},
       [](const auto& in) { return ops::one_hot(in[1], 11, in[0].dtype()); },
       exact});
  // --resident-data's batch gather (kernels/augment.h): plan rows (index, dy, dx, flip) drawn from
  // {0, 1}, valid for 5 images and pad 1; every offset is in tests/gpu/loader_gpu_test.cpp.
  add({"augment_gather/odd_sizes",
       "shape",
       {ints({5, 3, 5, 7}, 0, 256, kUInt8), ints({29, 4}, 0, 2, kInt32)},
       [](const auto& in) {
         return ops::augment_gather(in[0], in[1], 1, {0.0137f, 0.021f, 1.0f / 255},
                                    {-0.4f, 0.3f, -2.1f});
       },
       exact});
}

void im2col_cases() {
  const Tolerance tol{1e-6, 1e-5};
  Conv2dGeometry g3;
  g3.kernel_h = g3.kernel_w = 3;
  g3.stride_h = g3.stride_w = 2;
  g3.pad_h = g3.pad_w = 1;
  Conv2dGeometry dilated;
  dilated.kernel_h = 2;
  dilated.kernel_w = 3;
  dilated.stride_h = 1;
  dilated.stride_w = 2;
  dilated.pad_h = 2;
  dilated.pad_w = 0;
  dilated.dilation_h = dilated.dilation_w = 2;
  // Init-captures ([g = g]): clang 14 cannot capture a structured binding directly.
  for (const auto& [suffix, g] : {std::pair{"/k3s2p1", g3}, std::pair{"/dilated", dilated}}) {
    const Shape x_shape{2, 3, 11, 13};
    const Conv2dGeometry s = g.for_input(x_shape[0], x_shape[1], x_shape[2], x_shape[3], 0);
    const int64_t cols_h = s.c * s.kernel_h * s.kernel_w, cols_w = s.out_h * s.out_w;
    add({std::string("im2col") + suffix,
         "im2col",
         {f32(x_shape)},
         [g = g](const auto& in) { return ops::im2col(in[0], g); },
         Tolerance{0, 0}});
    add({std::string("col2im") + suffix,
         "im2col",
         {f32({x_shape[0], cols_h, cols_w})},
         [g = g, x_shape](const auto& in) { return ops::col2im(in[0], g, x_shape); },
         tol});
  }
}

void random_cases() {
  // The input only carries dtype and device; values come from a fixed Philox state.
  add({"rand",
       "random",
       {f32({1})},
       [](const auto& in) {
         Generator gen(20240601);
         return ops::rand({67, 131}, gen, in[0].dtype(), in[0].device());
       },
       Tolerance{0, 0}});
  add({"randn",
       "random",
       {f32({1})},
       [](const auto& in) {
         Generator gen(7);
         gen.set_state(7, 1234567);
         return ops::randn({33, 101}, gen, in[0].dtype(), in[0].device());
       },
       Tolerance{1e-6, 1e-6}});
  add({"bernoulli/p0.3",
       "random",
       {f32({1})},
       [](const auto& in) {
         Generator gen(99);
         return ops::bernoulli({1001, 7}, 0.3, gen, in[0].dtype(), in[0].device());
       },
       Tolerance{0, 0}});
  add({"randperm",
       "random",
       {f32({1})},
       [](const auto&) {
         Generator gen(5);
         return ops::randperm(1009, gen);
       },
       Tolerance{0, 0},
       false,
       false});
}

const Registrar basic_cases([] {
  elementwise_cases();
  reduce_cases();
  matmul_cases();
  shape_cases();
  im2col_cases();
  random_cases();
});

}  // namespace
}  // namespace echelon::parity
