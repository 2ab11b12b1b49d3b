// THE op interface: one declaration per op. Every op dispatches on its inputs' device to a naive
// CPU twin (tensor/cpu/<family>.cpp) or a CUDA launcher (cuda/kernels/<family>.cu) of the same
// name. An op without a CUDA kernel throws "not implemented on cuda" — never a silent fallback.
// These ops do not record autograd history; autograd/functions.h wraps them.
//
// Shape conventions: images are (N, C, H, W); convolution weights are (O, C, KH, KW); class
// scores are (N, classes); labels are int64 (N).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <echelon/base/op_kinds.h>
#include <echelon/kernels/conv.h>
#include <echelon/kernels/pool.h>
#include <echelon/kernels/sgd.h>
#include <echelon/tensor/random.h>
#include <echelon/tensor/tensor.h>

namespace echelon::ops {

// ---- elementwise (family: elementwise) ------------------------------------------------------
Tensor unary(UnaryOp op, const Tensor& x);
Tensor neg(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor relu(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor square(const Tensor& x);
Tensor reciprocal(const Tensor& x);
// grad_in = grad_out * d op(x)/dx. Each op reads what it needs: x (Abs, Log, Sqrt, Relu, Square,
// Reciprocal) or y = op(x) (Exp, Tanh, Sigmoid). Pass both; shapes equal.
Tensor unary_backward(UnaryOp op, const Tensor& grad_out, const Tensor& x, const Tensor& y);

// Broadcasting binary ops (NumPy rules); both inputs must share dtype and device.
Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, const Tensor& b);
// a op s, or s op a when scalar_first (e.g. 1 - x).
Tensor binary_scalar(BinaryOp op, const Tensor& a, double s, bool scalar_first = false);
Tensor add(const Tensor& a, double s);
Tensor mul(const Tensor& a, double s);
Tensor pow(const Tensor& a, double s);
// 1.0 where a == b else 0.0, as float32 (any input dtype; broadcasting).
Tensor eq(const Tensor& a, const Tensor& b);

void fill_(Tensor& t, double value);
Tensor arange(int64_t n, DType dtype = kInt64, Device device = Device::cpu());
Tensor cast(const Tensor& x, DType dtype);
// dst = src, broadcasting src to dst's shape, casting dtype; dst may be a strided view; devices
// may differ (then src is made contiguous on its device first).
void copy_(Tensor& dst, const Tensor& src);
// dst += alpha * src (same shape, dtype, device; dst contiguous). Gradient accumulation.
void axpy_(Tensor& dst, const Tensor& src, double alpha = 1.0);
// A linear layer's bias in place: y (N, F) += bias (F) broadcast over the rows, then with relu
// y = ReLU(y); the same values as add then relu, in one pass (one kernel on CUDA). y contiguous.
void add_row_bias_(Tensor& y, const Tensor& bias, bool relu = false);
// Condition-free clamp used by losses and checks.
Tensor clamp(const Tensor& x, double lo, double hi);
// True when every element is finite (no NaN/Inf).
bool all_finite(const Tensor& x);

// ---- reductions (family: reduce) -------------------------------------------------------------
// dims empty = all dims.
Tensor reduce(ReduceOp op, const Tensor& x, const std::vector<int64_t>& dims = {},
              bool keepdim = false);
Tensor sum(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor amax(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false);  // int64
// A linear layer's ReLU backward and bias gradient: masked (N, F) = grad_out * (relu_out > 0), as
// unary_backward(Relu) gives it, and sums (F) = sum(masked, {0}), bit for bit. One kernel on CUDA
// (the column kernel with the mask applied as it loads); on the CPU those two ops.
struct MaskedColumnSums {
  Tensor masked, sums;
};
MaskedColumnSums relu_backward_column_sums(const Tensor& grad_out, const Tensor& relu_out);
// A training step's statistics, left on the device (parallel::DeferredStats), in one pass (one
// kernel on CUDA): correct (a scalar of logits' dtype) = the number of rows of logits (N, C) whose
// argmax (argmax's: the first index wins a tie, NaN counts as largest) equals targets (N, int64);
// guard (a scalar) += 0 * loss (a scalar): NaN from the first non-finite loss on.
void step_statistics(const Tensor& logits, const Tensor& targets, const Tensor& loss, Tensor& guard,
                     Tensor& correct);
// Sums a broadcast result back down to `shape` (the gradient of broadcasting).
Tensor sum_to(const Tensor& x, const Shape& shape);
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);
Tensor softmax_backward(const Tensor& grad_out, const Tensor& y, int64_t dim);
Tensor log_softmax_backward(const Tensor& grad_out, const Tensor& y, int64_t dim);

// ---- matrix products (family: matmul) --------------------------------------------------------
// Which GEMM runs. On CPU: Naive (the twin) or Blas (OpenBLAS, if built). On CUDA: Ours (the
// tiled SGEMM kernel) or Blas (cuBLAS). Auto = Blas where available, else Naive/Ours.
enum class MatmulImpl : uint8_t { Auto, Naive, Ours, Blas };
void set_matmul_impl(MatmulImpl impl);  // process-wide
MatmulImpl matmul_impl();
// Threads of the fast CPU path (process-wide): its thread pool (tensor/cpu/fast/parallel.h) gets
// `threads`, OpenBLAS one (the pool splits the GEMMs, so only one set of threads runs). 0 from
// cpu_threads() means never set (the pool has 1 thread, OpenBLAS its default); setting 0 changes
// nothing.
void set_cpu_threads(int threads);
int cpu_threads();
// Back to "never set": cpu_threads() reads 0, the pool has 1 thread, OpenBLAS its own count again.
void reset_cpu_threads();
// Which CPU kernels run (process-wide, default Fast): Fast = tensor/cpu/fast (batched im2col +
// BLAS convolution, contiguous vectorised loops, the thread pool) where it covers the op, Naive =
// the naive twins everywhere (the oracle; MatmulImpl::Naive also selects the naive convolution).
enum class CpuKernels : uint8_t { Fast, Naive };
void set_cpu_kernels(CpuKernels kernels);
CpuKernels cpu_kernels();
// (M, K) x (K, N) -> (M, N); trans_a / trans_b read the input as transposed (no copy).
Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false);
// (B, M, K) x (B, K, N) -> (B, M, N).
Tensor bmm(const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false);
// c = alpha * op(a) op(b) + beta * c, in place on a contiguous 2-D c.
void gemm_(Tensor& c, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, double alpha,
           double beta);

// ---- shape and indexing (family: shape) ------------------------------------------------------
Tensor permute(const Tensor& x, const std::vector<int64_t>& dims);  // materialised
Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1);      // materialised
Tensor concat(const std::vector<Tensor>& xs, int64_t dim);
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);  // index int64 (K)
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);        // index int64, x's rank
Tensor one_hot(const Tensor& labels, int64_t num_classes, DType dtype = kFloat32);
// ResNet's option-A shortcut in one pass: x (N, C, H, W) -> (N, C + 2 pad, ceil(H / stride),
// ceil(W / stride)), x's pixels (stride * a, stride * b) in channels [pad, pad + C), zeros in the
// pad channels. float32 / float64 (CUDA: float32).
Tensor pad_channels_subsample(const Tensor& x, int64_t pad, int64_t stride);
// Its adjoint: g (N, C + 2 pad, ceil(H / stride), ceil(W / stride)) -> (N, C, H, W) = x_shape,
// g's channels [pad, pad + C) at the strided pixels, zeros elsewhere.
Tensor pad_channels_subsample_backward(const Tensor& g, int64_t pad, int64_t stride,
                                       const Shape& x_shape);
// Batch assembly from a resident data set (kernels/augment.h): images uint8 (N, C, H, W), plan
// int32 (B, 4) of rows (index, dy, dx, flip) -> float32 (B, C, H, W): each image padded by `pad`,
// cropped at (dy, dx), flipped when flip is 1, then times scale[c] plus shift[c] (one value per
// channel, C <= 4). Plan values (index in [0, N), dy and dx in [0, 2 pad], flip 0 or 1) are
// checked on the host: a CUDA plan is copied back for that (one host synchronisation) unless
// `plan_checked` says it is a copy of a host plan that was checked (data::ResidentData's).
Tensor augment_gather(const Tensor& images, const Tensor& plan, int64_t pad,
                      const std::vector<float>& scale, const std::vector<float>& shift,
                      bool plan_checked = false);

// ---- convolution building blocks (family: im2col) --------------------------------------------
// The window of `g` (kernel, stride, padding, dilation) is the caller's; its shapes are ignored.
// x (N, C, H, W) -> columns (N, C*KH*KW, OH*OW).
Tensor im2col(const Tensor& x, const Conv2dGeometry& g);
// columns (N, C*KH*KW, OH*OW) -> (N, C, H, W), summing overlaps. input_shape = (N, C, H, W).
Tensor col2im(const Tensor& cols, const Conv2dGeometry& g, const Shape& input_shape);

// ---- random (family: random) -----------------------------------------------------------------
Tensor rand(const Shape& shape, Generator& gen, DType dtype = kFloat32,
            Device device = Device::cpu());
Tensor randn(const Shape& shape, Generator& gen, DType dtype = kFloat32,
             Device device = Device::cpu());
// 1 with probability p, else 0.
Tensor bernoulli(const Shape& shape, double p, Generator& gen, DType dtype = kFloat32,
                 Device device = Device::cpu());
Tensor randperm(int64_t n, Generator& gen);  // int64, CPU

// ---- neural-network ops (families: conv, pool, norm, loss, optim) ----------------------------
// Which convolution runs on CUDA: Ours (implicit GEMM, cuda/kernels/conv_gemm.cu; or im2col + our
// GEMM under cuda::set_conv_algorithm) or Cudnn.
// On CPU: im2col + BLAS when built, unless set_matmul_impl(MatmulImpl::Naive) asks for the naive
// direct twin (the op benchmark of parallel/op_bench.h compares the two).
enum class ConvImpl : uint8_t { Ours, Cudnn };
void set_conv_impl(ConvImpl impl);  // process-wide default for conv2d
ConvImpl conv_impl();
// Deterministic algorithms only (process-wide; bitwise-reproducible runs): cuDNN convolutions
// choose among the algorithms cuDNN reports deterministic, and throw when there is none. Our own
// conv kernels are deterministic either way.
void set_deterministic(bool on);
bool deterministic();
// Whether the layer pairs that fuse (batch norm + ReLU, batch norm + residual add + ReLU, ReLU +
// max pooling, convolution + ReLU: autograd/functions.h) run as one kernel on CUDA and on the fast
// CPU path (process-wide, default on; `echelon train --no-fuse`). Off: the ops one after another,
// as the naive twins always do; the same values either way, so the switch measures the fusion.
void set_fused_ops(bool on);
bool fused_ops();
// How float32 matmuls and convolutions may round on CUDA devices (process-wide; base/op_kinds.h):
// Tf32 runs our tensor-core GEMM (twin cpu::gemm_tf32) and lets cuBLAS and cuDNN use TF32
// tensor cores; Bf16 runs it on bf16 operands (twin cpu::gemm_bf16), cuBLAS with
// CUBLAS_COMPUTE_32F_FAST_16BF, and cuDNN as under Tf32 (its fp32 convolutions have no bf16
// mode). Tensors stay fp32 either way. CPU ops always compute in fp32, whatever this says.
void set_float32_precision(Precision precision);
Precision float32_precision();
// Our CUDA convolution's autotuner (cuda/kernels/conv_tune.h; `echelon train --autotune`): the
// first call of each (device, pass, shape, precision) times every kernel configuration and keeps
// the fastest, like cudnn.benchmark; under ConvImpl::Cudnn it times cuDNN's algorithms the same
// way (cudnn::AlgoPolicy::benchmark). Process-wide, off by default (ECHELON_AUTOTUNE=1 turns it
// on); a no-op without CUDA. The picks depend on timings, so the app refuses it with
// --deterministic.
void set_conv_autotune(bool on);
bool conv_autotune();
// What tuning picked, in the order tuned (our kernels' picks, then cuDNN's, named "cuDNN ..."):
// the layer's shape, the pass, the pick and the heuristic's configuration with their times (ms).
struct ConvTuneRow {
  std::string shape, pass, precision, pick, heuristic;
  double tuned_ms = 0, heuristic_ms = 0;
  int candidates = 0;
};
std::vector<ConvTuneRow> conv_tune_picks();
// x (N, C, H, W), weight (O, C, KH, KW), bias (O) or undefined -> (N, O, OH, OW). The window of
// `g` is the caller's, and (KH, KW) must equal its kernel; its shapes are ignored.
// relu: y = ReLU(conv + bias), bit for bit the two ops: CUDA's GEMMs (implicit and columns path)
// clamp in their store; cuDNN and the CPU clamp y in place after (autograd's conv2d_relu; its
// backward passes y as relu_out).
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dGeometry& g,
              bool relu = false);
struct Conv2dGrads {
  Tensor input, weight, bias;  // input undefined unless need_input, weight unless need_weight;
                               // bias undefined if no bias
};
// input_sum (with need_input; may be undefined): a contiguous tensor of x's shape, dtype and device
// that the input's gradient is added to (input_sum + value, in place); .input is then input_sum.
// CUDA (ours in their store, the old add's bits; cuDNN by beta = 1) and the fast CPU path where it
// can (conv2d_backward_input_adds) add in a store pass, else the gradient is computed, then added.
// relu_out (may be undefined): the output of conv2d(..., relu = true); grad_out is then the
// gradient of that output, and the ReLU's backward (grad_out * (relu_out > 0)) runs first, in
// the bias gradient's pass where there is a bias (conv2d_relu_backward_bias: CUDA ours, both CPU
// paths; cuDNN composes), bit-identical to the ReLU's backward then this op.
Conv2dGrads conv2d_backward(const Tensor& grad_out, const Tensor& x, const Tensor& weight,
                            bool has_bias, bool need_input, const Conv2dGeometry& g,
                            bool need_weight = true, const Tensor& input_sum = Tensor(),
                            const Tensor& relu_out = Tensor());

// The window of `g` is the caller's; its shapes are ignored.
// (N, C, H, W) -> (N, C, OH, OW); *argmax receives int64 flat indices into each H*W plane.
// relu_first: max_pool2d(relu(x)), the same y and argmax bit for bit; the fast CPU path and CUDA
// read each element through the ReLU and never store relu(x) (the naive twins compose the ops).
Tensor max_pool2d(const Tensor& x, const Pool2dGeometry& g, Tensor* argmax,
                  bool relu_first = false);
// grad_in of input_shape (N, C, H, W) = grad_out (N, C, OH, OW) summed through argmax (the
// forward's) in output order. Needs no window; on CUDA a zero fill and an atomicAdd scatter, whose
// float sums run in any order where windows share an input.
Tensor max_pool2d_backward(const Tensor& grad_out, const Tensor& argmax, const Shape& input_shape);
// The same gradient knowing the forward's window `g`. Precondition: each argmax index lies in its
// own window (clipped to the image), as max_pool2d produces it. CUDA then gathers per input over
// the windows covering it: one kernel, no zero fill, deterministic and bit-identical to the CPU
// twin even where windows overlap; it does not check the precondition: an index outside its
// window contributes nothing. The CPU paths check it and throw naming the op, the index, its
// output and the window. relu_out (N, C, OH, OW; may be undefined): the y of max_pool2d(x, g,
// &argmax, relu_first = true); grad_out then passes only where y > 0, the gradient of x through
// ReLU and pooling, bit-identical to unary_backward(Relu, grad_out, y, y) then this op.
Tensor max_pool2d_backward(const Tensor& grad_out, const Tensor& argmax, const Shape& input_shape,
                           const Pool2dGeometry& g, const Tensor& relu_out = Tensor());
Tensor avg_pool2d(const Tensor& x, const Pool2dGeometry& g);
Tensor avg_pool2d_backward(const Tensor& grad_out, const Shape& input_shape,
                           const Pool2dGeometry& g);

// Batch normalisation over all dims but 1 (channels): x (N, C) or (N, C, H, W).
struct BatchNormOutput {
  Tensor out, save_mean, save_invstd;  // save_* are (C), for backward
  // (C, 2): each channel's scale and shift, out = ReLU(x * scale + shift). Only from the fast CPU
  // path's fused ReLU without a residual; batch_norm_backward's relu_affine.
  Tensor save_affine;
};
// Training mode: normalises with batch statistics and updates running_mean/var in place
// (running = (1 - momentum) * running + momentum * batch, unbiased variance, as PyTorch).
// relu: out = ReLU(batch norm) in the same pass (fast CPU path and CUDA; the naive twins compose
// the ops; its backward passes out as relu_out).
// residual (x's shape; only with relu): out = ReLU(batch norm + residual), a ResNet block's end.
BatchNormOutput batch_norm_train(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                 Tensor& running_mean, Tensor& running_var, double momentum,
                                 double eps, bool relu = false, const Tensor& residual = Tensor());
Tensor batch_norm_eval(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                       const Tensor& running_mean, const Tensor& running_var, double eps);
struct BatchNormGrads {
  Tensor input, gamma, beta;
  Tensor masked;  // grad_out * (relu_out > 0) when asked for: the residual's gradient
};
// relu_out: the output of batch_norm_train(..., relu = true); grad_out is then the gradient of that
// output, and the ReLU's backward (grad_out * (relu_out > 0)) runs inside (fast CPU and CUDA).
// want_masked (with relu_out): also return that masked gradient, the gradient of the residual.
// relu_affine (with relu_out, without want_masked; may be undefined): batch_norm_train's
// save_affine; the fast CPU path then recomputes the ReLU's mask from x (the same signs as
// relu_out > 0) and reads two streams fewer.
BatchNormGrads batch_norm_backward(const Tensor& grad_out, const Tensor& x, const Tensor& gamma,
                                   const Tensor& save_mean, const Tensor& save_invstd,
                                   const Tensor& relu_out = Tensor(), bool want_masked = false,
                                   const Tensor& relu_affine = Tensor());

// Local response normalisation across channels (AlexNet; PyTorch's formula):
// y = x / (k + alpha/size * sum_{window} x^2)^beta. *scale receives the bracket, for backward.
Tensor lrn(const Tensor& x, int64_t size, double alpha, double beta, double k, Tensor* scale);
Tensor lrn_backward(const Tensor& grad_out, const Tensor& x, const Tensor& y, const Tensor& scale,
                    int64_t size, double alpha, double beta, double k);

// Dropout mask: 0 with probability p, else 1/(1-p); the same mask on CPU and CUDA per state.
Tensor dropout_mask(const Shape& shape, double p, Generator& gen, Device device);

// step_statistics' outputs, which cross_entropy can count too (below).
struct StepStatistics {
  Tensor guard;    // one element of the logits' dtype: += 0 * loss
  Tensor correct;  // one element of the logits' dtype: the rows whose argmax is the target
};
// Cross-entropy fused with log-softmax: logits (N, C), target int64 (N) -> mean loss (scalar);
// *log_probs (N, C) is kept for backward. Targets outside [0, C) throw, naming the index. On
// CUDA where one block takes the batch (cuda::cross_entropy_one_block_fits) the same kernel may
// do more: with unit_grad it also writes *unit_grad (N, C) = cross_entropy_backward(1, ...), bit
// for bit, for autograd to hand on when the backward starts from this loss with the seed 1
// (elsewhere left undefined); with statistics it runs step_statistics(logits, target, loss,
// statistics->guard, statistics->correct) in that kernel (elsewhere by step_statistics: the same
// values either way).
Tensor cross_entropy(const Tensor& logits, const Tensor& target, Tensor* log_probs,
                     Tensor* unit_grad = nullptr, StepStatistics* statistics = nullptr);
// d(mean loss)/d logits = (softmax - one_hot) * grad_loss / N.
Tensor cross_entropy_backward(const Tensor& grad_loss, const Tensor& log_probs,
                              const Tensor& target);

// One SGD update of param in place (PyTorch semantics, see SGDOptions). momentum_buf has param's
// shape and is read and written when momentum != 0 (undefined otherwise); first_step: the
// parameter's first update, where the buffer starts as the gradient. guard: undefined, or a
// float32 scalar on param's device; while it is not finite nothing is updated, decided where the
// update runs (on a GPU without reading the guard back). lr: undefined (options.lr), or a float64
// scalar on param's device holding the rate, read where the update runs (CUDA graph replays).
// ema: undefined, or (options.ema_decay > 0) the parameter's moving average, param's shape, dtype
// and device, contiguous; its elements are updated in the same pass from the new parameter.
void sgd_step_(Tensor& param, const Tensor& grad, Tensor& momentum_buf, const SGDOptions& options,
               bool first_step, const Tensor& guard = Tensor(), const Tensor& lr = Tensor(),
               const Tensor& ema = Tensor());
// sgd_step_ on every parameter of a list: params[i] with grads[i], momentum_bufs[i] (undefined
// when momentum is 0) and emas[i] (empty list: no averages), with the same options, first_step,
// guard and lr. Parameters all on one GPU take one launch for up to 384 (cuda::sgd_steps; a
// training step's parameters are many small tensors: LeNet-5 10, ResNet-110 329), with the same
// bits as sgd_step_ on each; otherwise sgd_step_ runs on each.
void sgd_steps_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                const std::vector<Tensor>& momentum_bufs, const SGDOptions& options,
                bool first_step, const Tensor& guard = Tensor(), const Tensor& lr = Tensor(),
                const std::vector<Tensor>& emas = {});

}  // namespace echelon::ops
