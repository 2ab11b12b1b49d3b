// Parity cases of the neural-network families (conv, pool, norm, loss, optim): every forward and
// backward kernel, on odd sizes (N=3, C=5, H=11, W=9 style) with stride, padding and dilation.
// Convolution cases run once per ConvImpl (ours; cuDNN when built with it) — on CPU the impl is
// ignored, so both compare against the same twin. Backward cases build their saved tensors
// (argmax, batch statistics, LRN scale, log-probs) with the forward op on the same device.
#include "tests/support/parity.h"
#include "tests/support/setting_scope.h"

#if ECHELON_WITH_CUDA
#include <echelon/cuda/kernels/conv.h>
#endif

namespace echelon::parity {
namespace {

InputSpec f32(Shape shape, double lo = -1.0, double hi = 1.0, Layout layout = Layout::Contiguous) {
  return InputSpec{std::move(shape), kFloat32, lo, hi, layout, {}};
}
InputSpec labels(int64_t n, int64_t classes) {
  return InputSpec{{n}, kInt64, 0.0, static_cast<double>(classes), Layout::Contiguous, {}};
}

// Sets the process-wide conv implementation for one run and restores it.
class ConvImplScope {
 public:
  explicit ConvImplScope(ops::ConvImpl impl) : previous_(ops::conv_impl()) {
    ops::set_conv_impl(impl);
  }
  ~ConvImplScope() { ops::set_conv_impl(previous_); }
  ConvImplScope(const ConvImplScope&) = delete;
  ConvImplScope& operator=(const ConvImplScope&) = delete;

 private:
  ops::ConvImpl previous_;
};

struct ConvCase {
  std::string name;
  Shape x, w;
  Conv2dGeometry p;  // the window; its kernel is w's (KH, KW)
};

void conv_cases() {
  const Conv2dGeometry dilated = window_s2_p1_d2();
  Conv2dGeometry same;
  same.kernel_h = same.kernel_w = 3;
  same.pad_h = same.pad_w = 1;
  Conv2dGeometry rect;
  rect.kernel_h = 5, rect.kernel_w = 3;
  rect.stride_h = 3, rect.stride_w = 1, rect.pad_h = 2, rect.pad_w = 0;
  Conv2dGeometry s3_d3;  // stride 3, dilation 3: the grad input's gather table (conv_gemm.cu)
  s3_d3.kernel_h = s3_d3.kernel_w = 3;
  s3_d3.stride_h = s3_d3.stride_w = s3_d3.dilation_h = s3_d3.dilation_w = 3;
  s3_d3.pad_h = 2, s3_d3.pad_w = 1;
  Conv2dGeometry down;  // ResNet's downsampling 3x3 at stride 2: the grad input by phases
  down.kernel_h = down.kernel_w = 3;
  down.stride_h = down.stride_w = 2;
  down.pad_h = down.pad_w = 1;
  const ConvCase geometries[] = {
      {"s2_p1_d2", {3, 5, 11, 9}, {7, 5, 3, 3}, dilated},
      {"3x3_same", {2, 17, 13, 15}, {33, 17, 3, 3}, same},  // 33 output channels: no tile multiple
      {"5x3_rect", {3, 3, 19, 10}, {6, 3, 5, 3}, rect},
      {"1x1_c6", {5, 6, 13, 11}, {6, 6, 1, 1}, Conv2dGeometry{}},  // LeNet-like channel count
      {"s3_p2_d3_c16", {2, 16, 14, 13}, {17, 16, 3, 3}, s3_d3},    // 16 / 17 rows: tile edges
      {"s2_p1_c9", {3, 9, 13, 11}, {10, 9, 3, 3}, down},           // odd sizes: uneven phases
  };
  std::vector<std::pair<std::string, ops::ConvImpl>> impls = {{"ours", ops::ConvImpl::Ours}};
#if ECHELON_WITH_CUDNN
  impls.push_back({"cudnn", ops::ConvImpl::Cudnn});
#endif
  const Tolerance tol{1e-4, 1e-4};
  // Init-captures ([impl = impl]): clang 14 cannot capture a structured binding directly.
  for (const auto& [impl_name, impl] : impls)
    for (const ConvCase& g : geometries) {
      const std::string suffix = "/" + impl_name + "/" + g.name;
      const auto p = g.p;
      const int64_t out_channels = g.w[0];
      add({"conv2d" + suffix,
           "conv",
           {f32(g.x), f32(g.w), f32({out_channels})},
           [impl = impl, p](const auto& in) {
             ConvImplScope scope(impl);
             return ops::conv2d(in[0], in[1], in[2], p);
           },
           tol});
      const Conv2dGeometry geo = p.for_input(g.x[0], g.x[1], g.x[2], g.x[3], out_channels);
      const Shape y_shape = {geo.n, geo.o, geo.out_h, geo.out_w};
      const std::vector<InputSpec> backward_inputs = {f32(y_shape), f32(g.x), f32(g.w)};
      add({"conv2d_backward_input" + suffix, "conv", backward_inputs,
           [impl = impl, p](const auto& in) {
             ConvImplScope scope(impl);
             return ops::conv2d_backward(in[0], in[1], in[2], false, true, p).input;
           },
           tol});
      // The input gradient added into a running sum (input_sum, the autograd engine's sum at a
      // ResNet block's input): on CUDA added by the convolution itself (ours: in the implicit
      // GEMM's store, the phases' or col2im's; cuDNN: beta = 1); the reference composes the twins.
      std::vector<InputSpec> sum_inputs = backward_inputs;
      sum_inputs.push_back(f32(g.x));
      add({"conv2d_backward_input_sum" + suffix, "conv", sum_inputs,
           [impl = impl, p](const auto& in) {
             ConvImplScope scope(impl);
             const Tensor sum = in[3].clone();
             return ops::conv2d_backward(in[0], in[1], in[2], false, true, p, true, sum).input;
           },
           tol});
      add({"conv2d_backward_weight" + suffix, "conv", backward_inputs,
           [impl = impl, p](const auto& in) {
             ConvImplScope scope(impl);
             return ops::conv2d_backward(in[0], in[1], in[2], false, false, p).weight;
           },
           Tolerance{5e-4, 1e-4}});
      add({"conv2d_backward_bias" + suffix, "conv", backward_inputs,
           [impl = impl, p](const auto& in) {
             ConvImplScope scope(impl);
             return ops::conv2d_backward(in[0], in[1], in[2], true, false, p).bias;
           },
           Tolerance{5e-4, 1e-4}});
      // The fused convolution + ReLU (CUDA: the clamp in the implicit GEMM's store, the mask in
      // the bias gradient's pass; the naive reference composes): y_pre ([-1, 1]) through a ReLU
      // is the saved output, exact on both sides, so its zeros mask the same elements.
      add({"conv2d_relu" + suffix,
           "conv",
           {f32(g.x), f32(g.w), f32({out_channels})},
           [impl = impl, p](const auto& in) {
             ConvImplScope scope(impl);
             return ops::conv2d(in[0], in[1], in[2], p, /*relu=*/true);
           },
           tol});
      // inputs: grad_out, x, w, y_pre (relu_out = ReLU(y_pre)), [input_sum]
      std::vector<InputSpec> relu_inputs = backward_inputs;
      relu_inputs.push_back(f32(y_shape));
      const auto relu_backward = [impl = impl, p](const std::vector<Tensor>& in, bool sum) {
        ConvImplScope scope(impl);
        return ops::conv2d_backward(in[0], in[1], in[2], true, true, p, true,
                                    sum ? in[4].clone() : Tensor(), ops::relu(in[3]));
      };
      add({"conv2d_relu_backward_input" + suffix, "conv", relu_inputs,
           [relu_backward](const auto& in) { return relu_backward(in, false).input; }, tol});
      add({"conv2d_relu_backward_weight" + suffix, "conv", relu_inputs,
           [relu_backward](const auto& in) { return relu_backward(in, false).weight; },
           Tolerance{5e-4, 1e-4}});
      add({"conv2d_relu_backward_bias" + suffix, "conv", relu_inputs,
           [relu_backward](const auto& in) { return relu_backward(in, false).bias; },
           Tolerance{5e-4, 1e-4}});
      relu_inputs.push_back(f32(g.x));
      add({"conv2d_relu_backward_input_sum" + suffix, "conv", relu_inputs,
           [relu_backward](const auto& in) { return relu_backward(in, true).input; }, tol});
    }
#if ECHELON_WITH_CUDA
  // Our columns path (cuda::ConvAlgorithm::Im2colGemm; the cases above take the default implicit
  // GEMM): its SGEMM's epilogue adds the bias and, for conv2d_relu, clamps at zero; its col2im
  // adds the input gradient into input_sum.
  for (const ConvCase& g : geometries) {
    const auto p = g.p;
    const Conv2dGeometry geo = p.for_input(g.x[0], g.x[1], g.x[2], g.x[3], g.w[0]);
    add({"conv2d_backward_input_sum/ours_im2col/" + g.name,
         "conv",
         {f32({geo.n, geo.o, geo.out_h, geo.out_w}), f32(g.x), f32(g.w), f32(g.x)},
         [p](const auto& in) {
           ConvImplScope scope(ops::ConvImpl::Ours);
           const test::SettingScope<cuda::ConvAlgorithm> columns(
               cuda::conv_algorithm, cuda::set_conv_algorithm, cuda::ConvAlgorithm::Im2colGemm);
           const Tensor sum = in[3].clone();
           return ops::conv2d_backward(in[0], in[1], in[2], false, true, p, true, sum).input;
         },
         tol});
    for (const bool relu : {false, true}) {
      add({std::string(relu ? "conv2d_relu" : "conv2d") + "/ours_im2col/" + g.name,
           "conv",
           {f32(g.x), f32(g.w), f32({g.w[0]})},
           [p, relu](const auto& in) {
             ConvImplScope scope(ops::ConvImpl::Ours);
             const test::SettingScope<cuda::ConvAlgorithm> columns(
                 cuda::conv_algorithm, cuda::set_conv_algorithm, cuda::ConvAlgorithm::Im2colGemm);
             return ops::conv2d(in[0], in[1], in[2], p, relu);
           },
           tol});
    }
  }
#endif
  // A non-contiguous input: the dispatch must materialise it before the kernels read it.
  add({"conv2d/ours/transposed_input",
       "conv",
       {f32({3, 5, 9, 11}, -1.0, 1.0, Layout::Transposed), f32({4, 5, 3, 3}), f32({4})},
       [dilated](const auto& in) {
         ConvImplScope scope(ops::ConvImpl::Ours);
         return ops::conv2d(in[0], in[1], in[2], dilated);
       },
       tol});
}

void pool_cases() {
  Pool2dGeometry floor2;  // 2x2 stride 2
  Pool2dGeometry ceil3;
  ceil3.kernel_h = ceil3.kernel_w = 3, ceil3.stride_h = ceil3.stride_w = 2;
  ceil3.pad_h = ceil3.pad_w = 1, ceil3.ceil_mode = true;
  Pool2dGeometry rect = ceil3;
  rect.kernel_w = 2, rect.pad_w = 0, rect.count_include_pad = false;
  const std::pair<std::string, Pool2dGeometry> params[] = {
      {"2x2", floor2}, {"3x3_s2_p1_ceil", ceil3}, {"3x2_ceil_exclude_pad", rect}};
  const Shape x = {3, 5, 11, 9};
  const Tolerance tol{1e-6, 1e-5};
  for (const auto& named : params) {  // not a structured binding: the lambdas capture p
    const auto& name = named.first;
    const auto p = named.second;
    // Registration runs before main: the shape comes from the geometry, not from a tensor.
    const Pool2dGeometry geo = p.for_input(x[0], x[1], x[2], x[3]);
    const Shape y = {geo.n, geo.c, geo.out_h, geo.out_w};
    add({"max_pool2d/" + name,
         "pool",
         {f32(x)},
         [p](const auto& in) { return ops::max_pool2d(in[0], p, nullptr); },
         tol});
    add({"max_pool2d_argmax/" + name,
         "pool",
         {f32(x)},
         [p](const auto& in) {
           Tensor argmax;
           ops::max_pool2d(in[0], p, &argmax);
           return argmax;
         },
         Tolerance{0, 0}});
    add({"max_pool2d_backward/" + name,
         "pool",
         {f32(y), f32(x)},
         [p](const auto& in) {
           Tensor argmax;
           ops::max_pool2d(in[1], p, &argmax);
           return ops::max_pool2d_backward(in[0], argmax, in[1].shape());
         },
         tol});
    // With the window: CUDA's gather. The tolerance is the CPU mode's (float32 vs the float64
    // twin); CUDA equals the twin bit for bit (tests/gpu/nn_gpu_test.cpp).
    add({"max_pool2d_backward_gather/" + name,
         "pool",
         {f32(y), f32(x)},
         [p](const auto& in) {
           Tensor argmax;
           ops::max_pool2d(in[1], p, &argmax);
           return ops::max_pool2d_backward(in[0], argmax, in[1].shape(), p);
         },
         tol});
    // And ReLU's mask: argmax of the fused forward, its y (zeros where a window is <= 0) times a
    // sign in [-1, 1), so that the mask sees positives, zeros (+0 and -0) and negatives.
    add({"max_pool2d_backward_gather_relu/" + name,
         "pool",
         {f32(y), f32(x), f32(y)},
         [p](const auto& in) {
           Tensor argmax;
           const Tensor pooled = ops::max_pool2d(in[1], p, &argmax, /*relu_first=*/true);
           return ops::max_pool2d_backward(in[0], argmax, in[1].shape(), p,
                                           ops::mul(pooled, in[2]));
         },
         tol});
    // The fused ReLU + max pooling (CUDA; the CPU reference composes them): ties at 0 pick the
    // window's first, like the composition.
    add({"max_pool2d_relu_first/" + name,
         "pool",
         {f32(x)},
         [p](const auto& in) { return ops::max_pool2d(in[0], p, nullptr, /*relu_first=*/true); },
         tol});
    add({"max_pool2d_relu_first_argmax/" + name,
         "pool",
         {f32(x)},
         [p](const auto& in) {
           Tensor argmax;
           ops::max_pool2d(in[0], p, &argmax, /*relu_first=*/true);
           return argmax;
         },
         tol});
    add({"avg_pool2d/" + name,
         "pool",
         {f32(x)},
         [p](const auto& in) { return ops::avg_pool2d(in[0], p); },
         tol});
    add({"avg_pool2d_backward/" + name,
         "pool",
         {f32(y)},
         [p, x](const auto& in) { return ops::avg_pool2d_backward(in[0], x, p); },
         tol});
  }
}

void norm_cases() {
  // 13 channels of 4 * 63 values: several chunks per channel in the emulation's 2-D grid
  // (cuda/kernels/channels.cuh), a spatial size the block stride is not a multiple of.
  const Shape x4 = {3, 5, 11, 9}, x2 = {37, 5}, x13 = {4, 13, 7, 9};
  const Tolerance tol{1e-5, 1e-4};
  for (const Shape& x : {x4, x2, x13}) {
    const int64_t c = x[1];
    const std::string rank = x.size() == 4 ? (c == 5 ? "/nchw" : "/nchw_c13") : "/nc";
    const InputSpec gamma = f32({c}, 0.5, 1.5), beta = f32({c}), mean = f32({c}),
                    var = f32({c}, 0.5, 1.5);
    // inputs: x (shifted so |mean| is not tiny), gamma, beta, running_mean, running_var
    const std::vector<InputSpec> train_inputs = {f32(x, -1.0, 3.0), gamma, beta, mean, var};
    add({"batch_norm_train" + rank, "norm", train_inputs,
         [](const auto& in) {
           Tensor rm = in[3].clone(), rv = in[4].clone();
           return ops::batch_norm_train(in[0], in[1], in[2], rm, rv, 0.1, 1e-5).out;
         },
         tol});
    add({"batch_norm_train_running_var" + rank, "norm", train_inputs,
         [](const auto& in) {
           Tensor rm = in[3].clone(), rv = in[4].clone();
           ops::batch_norm_train(in[0], in[1], in[2], rm, rv, 0.1, 1e-5);
           return rv;
         },
         tol});
    add({"batch_norm_eval" + rank, "norm", train_inputs,
         [](const auto& in) {
           return ops::batch_norm_eval(in[0], in[1], in[2], in[3], in[4], 1e-5);
         },
         tol});
    const std::vector<InputSpec> backward_inputs = {f32(x), f32(x, -1.0, 3.0), gamma, beta};
    const auto bn_backward = [](const std::vector<Tensor>& in) {
      Tensor rm, rv;  // untracked running statistics
      const auto fwd = ops::batch_norm_train(in[1], in[2], in[3], rm, rv, 0.1, 1e-5);
      return ops::batch_norm_backward(in[0], in[1], in[2], fwd.save_mean, fwd.save_invstd);
    };
    add({"batch_norm_backward_input" + rank, "norm", backward_inputs,
         [bn_backward](const auto& in) { return bn_backward(in).input; }, Tolerance{1e-4, 1e-4}});
    add({"batch_norm_backward_gamma" + rank, "norm", backward_inputs,
         [bn_backward](const auto& in) { return bn_backward(in).gamma; }, Tolerance{1e-4, 1e-4}});
    add({"batch_norm_backward_beta" + rank, "norm", backward_inputs,
         [bn_backward](const auto& in) { return bn_backward(in).beta; }, Tolerance{1e-4, 1e-4}});
    // The fused epilogues (CUDA kernels; the CPU reference is the naive ops composed):
    // ReLU(bn(x)) and ReLU(bn(x) + residual), and their backward with the mask inside.
    add({"batch_norm_train_relu" + rank, "norm", train_inputs,
         [](const auto& in) {
           Tensor rm = in[3].clone(), rv = in[4].clone();
           return ops::batch_norm_train(in[0], in[1], in[2], rm, rv, 0.1, 1e-5, /*relu=*/true).out;
         },
         tol});
    // inputs: x, gamma, beta, residual
    const std::vector<InputSpec> residual_inputs = {f32(x, -1.0, 3.0), gamma, beta, f32(x)};
    add({"batch_norm_train_add_relu" + rank, "norm", residual_inputs,
         [](const auto& in) {
           Tensor rm, rv;
           return ops::batch_norm_train(in[0], in[1], in[2], rm, rv, 0.1, 1e-5, true, in[3]).out;
         },
         tol});
    // inputs: grad_out, x, gamma, beta, residual
    const std::vector<InputSpec> relu_backward_inputs = {f32(x), f32(x, -1.0, 3.0), gamma, beta,
                                                         f32(x)};
    const auto bn_relu_backward = [](const std::vector<Tensor>& in) {
      Tensor rm, rv;
      const auto fwd = ops::batch_norm_train(in[1], in[2], in[3], rm, rv, 0.1, 1e-5, true, in[4]);
      return ops::batch_norm_backward(in[0], in[1], in[2], fwd.save_mean, fwd.save_invstd,
                                      /*relu_out=*/fwd.out, /*want_masked=*/true);
    };
    add({"batch_norm_backward_relu_input" + rank, "norm", relu_backward_inputs,
         [bn_relu_backward](const auto& in) { return bn_relu_backward(in).input; },
         Tolerance{1e-4, 1e-4}});
    add({"batch_norm_backward_relu_gamma" + rank, "norm", relu_backward_inputs,
         [bn_relu_backward](const auto& in) { return bn_relu_backward(in).gamma; },
         Tolerance{1e-4, 1e-4}});
    add({"batch_norm_backward_relu_beta" + rank, "norm", relu_backward_inputs,
         [bn_relu_backward](const auto& in) { return bn_relu_backward(in).beta; },
         Tolerance{1e-4, 1e-4}});
    add({"batch_norm_backward_relu_masked" + rank, "norm", relu_backward_inputs,
         [bn_relu_backward](const auto& in) { return bn_relu_backward(in).masked; },
         Tolerance{0, 0}});
  }
  const Shape lx = {3, 7, 5, 9};
  for (int64_t size : {3, 4}) {
    const std::string name = "/size" + std::to_string(size);
    add({"lrn" + name,
         "norm",
         {f32(lx, -2.0, 2.0)},
         [size](const auto& in) { return ops::lrn(in[0], size, 1e-2, 0.75, 1.5, nullptr); },
         tol});
    add({"lrn_backward" + name,
         "norm",
         {f32(lx), f32(lx, -2.0, 2.0)},
         [size](const auto& in) {
           Tensor scale;
           const Tensor y = ops::lrn(in[1], size, 1e-2, 0.75, 1.5, &scale);
           return ops::lrn_backward(in[0], in[1], y, scale, size, 1e-2, 0.75, 1.5);
         },
         tol});
  }
  // The input only names the device; the mask is a function of (seed, offset, index).
  OpCase dropout{"dropout_mask/p0.3",
                 "norm",
                 {f32({3, 5, 11, 9})},
                 [](const auto& in) {
                   Generator gen(20240611);
                   gen.set_state(20240611, 5);
                   return ops::dropout_mask({3, 5, 11, 9}, 0.3, gen, in[0].device());
                 },
                 Tolerance{0, 0}};
  dropout.float64_twin = false;
  add(dropout);
}

void loss_and_optim_cases() {
  const Tolerance tol{1e-5, 1e-4};
  for (const auto& [n, classes] : {std::pair<int64_t, int64_t>{37, 10}, {5, 1001}}) {
    const std::string name = "/" + std::to_string(n) + "x" + std::to_string(classes);
    add({"cross_entropy" + name,
         "loss",
         {f32({n, classes}, -4.0, 4.0), labels(n, classes)},
         [](const auto& in) { return ops::cross_entropy(in[0], in[1], nullptr); },
         tol});
    add({"cross_entropy_log_probs" + name,
         "loss",
         {f32({n, classes}, -4.0, 4.0), labels(n, classes)},
         [](const auto& in) {
           Tensor log_probs;
           ops::cross_entropy(in[0], in[1], &log_probs);
           return log_probs;
         },
         tol});
    add({"cross_entropy_backward" + name,
         "loss",
         {f32({1}, 0.5, 2.0), f32({n, classes}, -4.0, 4.0), labels(n, classes)},
         [](const auto& in) {
           Tensor log_probs;
           ops::cross_entropy(in[1], in[2], &log_probs);
           return ops::cross_entropy_backward(in[0], log_probs, in[2]);
         },
         Tolerance{1e-6, 1e-4}});
  }
  // Two steps (the first initialises the momentum buffer), returning the parameter.
  const std::pair<std::string, SGDOptions> variants[] = {
      {"plain", {.lr = 0.05}},
      {"momentum_dampening_wd",
       {.lr = 0.05, .momentum = 0.9, .dampening = 0.1, .weight_decay = 5e-4}},
      {"nesterov", {.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-3, .nesterov = true}}};
  for (const auto& variant : variants) {
    const SGDOptions options = variant.second;
    add({"sgd_step/" + variant.first,
         "optim",
         {f32({1031}), f32({1031}), f32({1031})},
         [options](const auto& in) {
           Tensor param = in[0].clone(),
                  buf = Tensor::empty(param.shape(), param.dtype(), param.device());
           ops::sgd_step_(param, in[1], buf, options, /*first_step=*/true);
           ops::sgd_step_(param, in[2], buf, options, /*first_step=*/false);
           return param;
         },
         Tolerance{1e-6, 1e-5}});
  }
  // A list of parameters in one call (on a GPU, one sgd_steps launch): three sizes, two steps.
  add({"sgd_steps/list",
       "optim",
       {f32({1031}), f32({1031}), f32({1031}), f32({2049}), f32({2049}), f32({2049}), f32({5}),
        f32({5}), f32({5})},
       [](const auto& in) {
         const SGDOptions options{.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-3};
         std::vector<Tensor> params, buffers, first, second;
         for (size_t k = 0; k < in.size(); k += 3) {
           params.push_back(in[k].clone());
           buffers.push_back(Tensor::empty(in[k].shape(), in[k].dtype(), in[k].device()));
           first.push_back(in[k + 1]), second.push_back(in[k + 2]);
         }
         ops::sgd_steps_(params, first, buffers, options, /*first_step=*/true);
         ops::sgd_steps_(params, second, buffers, options, /*first_step=*/false);
         return ops::concat(params, 0);
       },
       Tolerance{1e-6, 1e-5}});
  // The moving average (--ema) after two Nesterov steps, beside the parameter it follows.
  add({"sgd_step/nesterov_ema",
       "optim",
       {f32({1031}), f32({1031}), f32({1031}), f32({1031})},
       [](const auto& in) {
         const SGDOptions options{
             .lr = 0.05, .momentum = 0.9, .weight_decay = 1e-3, .nesterov = true, .ema_decay = 0.9};
         Tensor param = in[0].clone(), ema = in[3].clone(),
                buf = Tensor::empty(param.shape(), param.dtype(), param.device());
         ops::sgd_step_(param, in[1], buf, options, /*first_step=*/true, Tensor(), Tensor(), ema);
         ops::sgd_step_(param, in[2], buf, options, /*first_step=*/false, Tensor(), Tensor(), ema);
         return ops::concat({param, ema}, 0);
       },
       Tolerance{1e-6, 1e-5}});
}

}  // namespace

static const Registrar nn_cases([] {
  conv_cases();
  pool_cases();
  norm_cases();
  loss_and_optim_cases();
});

}  // namespace echelon::parity
