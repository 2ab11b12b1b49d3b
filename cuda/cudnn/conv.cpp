// cuDNN convolution with a plan cache. Why: building four descriptors and asking cuDNN's
// heuristic for every call costs tens of microseconds of host time per layer and step, as much as
// a small convolution itself. A plan, keyed by (device, direction, shapes, window, dtype,
// deterministic policy), holds the descriptors (one convolution descriptor per math type, so that
// nothing is mutated once built) and the algorithm that first ran: later calls enqueue it
// directly. The first call of a key tries cuDNN's heuristic candidates in order until one runs
// (FP32 FMA math first, tensor-op math first under TF32; deterministic ones only under a
// deterministic policy); if the cached
// algorithm later fails (its workspace no longer fits), the candidates are tried again. A
// benchmark policy (AlgoPolicy::benchmark) times the eligible candidates on the first call instead
// and keeps the fastest (benchmark_picks() lists them). The input gradient can accumulate into
// autograd's gradient sum (beta = 1; timed on a scratch gradient, so the sum is added to once).
// Workspace comes from the caching allocator: the block freed after one call returns to its
// stream's bin and the next call of that plan gets it back without a cudaMalloc. Freeing right
// after the enqueue is safe: the allocator reuses a block only on the same stream.
#if ECHELON_WITH_CUDNN
#include <echelon/cuda/cudnn/conv.h>

#include <algorithm>
#include <array>
#include <compare>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <echelon/cuda/allocator.h>
#include <echelon/cuda/cudnn/handle.h>
#include <echelon/cuda/kernels/conv_gemm.h>
#include <echelon/cuda/stream.h>

namespace echelon::cudnn {

namespace {

int as_int(int64_t v) {
  ECH_CHECK(v >= 0 && v <= 0x7fffffff, "conv2d (cudnn): size ", v, " exceeds cuDNN's int range");
  return static_cast<int>(v);
}

constexpr cudnnMathType_t kMathTypes[] = {CUDNN_FMA_MATH, CUDNN_DEFAULT_MATH, CUDNN_TENSOR_OP_MATH};
constexpr int kMathRanks = 3;

// Order of preference among math types under Precision::Fp32: plain FP32 FMA kernels match the
// CPU twin; default math may use TF32 tensor cores on Hopper (~1e-3 relative); explicit tensor-op
// math last. Precision::Tf32 walks the ranks backwards, and so does Precision::Bf16: cuDNN's
// fp32 convolutions have no bf16 compute mode (cudnnMathType_t in cudnn_graph.h offers DEFAULT,
// TENSOR_OP, TENSOR_OP_ALLOW_CONVERSION and FMA; bf16 convolutions need CUDNN_DATA_BFLOAT16
// tensors), so the closest yardstick is tensor-op math, which rounds fp32 inputs to TF32.
// ALLOW_CONVERSION (inputs rounded to half precision, fp16, not bf16) is never used.
int math_rank(cudnnMathType_t math) {
  for (int rank = 0; rank < kMathRanks; ++rank)
    if (kMathTypes[rank] == math) return rank;
  return -1;
}
constexpr const char* kMathNames[kMathRanks] = {"FMA", "default", "tensor-op"};

// Benchmark policies: timed runs per candidate (after a warm-up), and how much slower than the
// best so far a candidate's first timed run may be before it is not run again (as conv_tune.cu).
constexpr int kTimedRuns = 3;
constexpr double kClearlySlower = 2.0;

// The descriptors of one convolution: x, y, w, the bias (1, O, 1, 1), and one convolution
// descriptor per math type. Immutable once built, so cached plans are shared between threads.
struct Descriptors {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr, bias = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv[kMathRanks] = {};

  explicit Descriptors(const Conv2dGeometry& a) {
    ECH_CUDNN_CHECK(cudnnCreateTensorDescriptor(&x));
    ECH_CUDNN_CHECK(cudnnCreateTensorDescriptor(&y));
    ECH_CUDNN_CHECK(cudnnCreateTensorDescriptor(&bias));
    ECH_CUDNN_CHECK(cudnnCreateFilterDescriptor(&w));
    ECH_CUDNN_CHECK(cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, as_int(a.n),
                                               as_int(a.c), as_int(a.h), as_int(a.w)));
    ECH_CUDNN_CHECK(cudnnSetTensor4dDescriptor(y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, as_int(a.n),
                                               as_int(a.o), as_int(a.out_h), as_int(a.out_w)));
    ECH_CUDNN_CHECK(cudnnSetTensor4dDescriptor(bias, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1,
                                               as_int(a.o), 1, 1));
    ECH_CUDNN_CHECK(cudnnSetFilter4dDescriptor(w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, as_int(a.o),
                                               as_int(a.c), as_int(a.kernel_h),
                                               as_int(a.kernel_w)));
    for (int rank = 0; rank < kMathRanks; ++rank) {
      ECH_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&conv[rank]));
      ECH_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(
          conv[rank], as_int(a.pad_h), as_int(a.pad_w), as_int(a.stride_h), as_int(a.stride_w),
          as_int(a.dilation_h), as_int(a.dilation_w), CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
      ECH_CUDNN_CHECK(cudnnSetConvolutionMathType(conv[rank], kMathTypes[rank]));
    }
  }
  ~Descriptors() {
    for (cudnnConvolutionDescriptor_t c : conv)
      if (c) cudnnDestroyConvolutionDescriptor(c);
    cudnnDestroyFilterDescriptor(w);
    cudnnDestroyTensorDescriptor(bias);
    cudnnDestroyTensorDescriptor(y);
    cudnnDestroyTensorDescriptor(x);
  }
  Descriptors(const Descriptors&) = delete;
  Descriptors& operator=(const Descriptors&) = delete;
};

enum class Direction : int { Forward, BackwardData, BackwardFilter, BackwardBias };

// The algorithm's enumerator in cudnn_ops.h, without its prefix.
std::string algo_name(Direction direction, int algo) {
  static constexpr const char* kForward[] = {
      "IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT", "FFT", "FFT_TILING",
      "WINOGRAD",      "WINOGRAD_NONFUSED"};
  static constexpr const char* kData[] = {"ALGO_0",     "ALGO_1",   "FFT",
                                          "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"};
  static constexpr const char* kFilter[] = {
      "ALGO_0", "ALGO_1", "FFT", "ALGO_3", "WINOGRAD", "WINOGRAD_NONFUSED", "FFT_TILING"};
  const auto pick = [&](const auto& names) -> std::string {
    return algo >= 0 && algo < static_cast<int>(std::size(names)) ? names[algo]
                                                                  : "algo " + std::to_string(algo);
  };
  switch (direction) {
    case Direction::Forward:
      return pick(kForward);
    case Direction::BackwardData:
      return pick(kData);
    default:
      return pick(kFilter);
  }
}

cuda::ConvPass pass_of(Direction direction) {
  switch (direction) {
    case Direction::Forward:
      return cuda::ConvPass::Forward;
    case Direction::BackwardData:
      return cuda::ConvPass::BackwardData;
    default:
      return cuda::ConvPass::BackwardWeight;
  }
}

// Everything a convolution's result depends on, besides the data.
struct PlanKey {
  int device;
  Direction direction;
  bool deterministic;
  bool benchmark;  // in effect: AlgoPolicy::benchmark and not deterministic
  Precision precision;
  cudnnDataType_t dtype;
  std::array<int64_t, 15> geometry;
  auto operator<=>(const PlanKey&) const = default;
};

PlanKey make_key(int device, Direction direction, const Conv2dGeometry& a, AlgoPolicy policy) {
  return PlanKey{device,
                 direction,
                 policy.deterministic,
                 policy.benchmark && !policy.deterministic,
                 policy.precision,
                 CUDNN_DATA_FLOAT,
                 {a.n, a.c, a.h, a.w, a.o, a.kernel_h, a.kernel_w, a.stride_h, a.stride_w, a.pad_h,
                  a.pad_w, a.dilation_h, a.dilation_w, a.out_h, a.out_w}};
}

struct Choice {
  bool valid = false;
  int algo = 0;
  size_t memory = 0;
  int rank = 0;  // math rank: which convolution descriptor
};

// A cached plan: the descriptors and the algorithm that ran. Plans live until the process
// exits (a training run has a few dozen shapes).
struct Plan {
  Plan(const PlanKey& k, const Conv2dGeometry& a) : key(k), geometry(a), d(a) {}
  PlanKey key;
  Conv2dGeometry geometry;
  Descriptors d;
  std::mutex choosing;  // guards `choice`; held while one thread runs the candidate loop
  Choice choice;        // the algorithm that ran (valid once one did)
};

Plan& plan_for(const PlanKey& key, const Conv2dGeometry& a) {
  static std::mutex mutex;
  static std::map<PlanKey, std::unique_ptr<Plan>> plans;
  std::lock_guard lock(mutex);
  std::unique_ptr<Plan>& plan = plans[key];
  if (!plan) plan = std::make_unique<Plan>(key, a);
  return *plan;
}

// Scratch memory from the caching allocator, returned on scope exit.
class Workspace {
 public:
  Workspace(int device, size_t nbytes, cudaStream_t stream) : device_(device) {
    if (nbytes > 0) ptr_ = cuda::device_malloc(device, nbytes, stream);
  }
  ~Workspace() {
    if (ptr_) cuda::device_free(device_, ptr_);
  }
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  void* get() const { return ptr_; }

 private:
  int device_;
  void* ptr_ = nullptr;
};

Choice current_choice(Plan& plan) {
  std::lock_guard lock(plan.choosing);
  return plan.choice;
}

void after_success(const char* kind) {
  if (cuda::sync_launches())
    cuda::sync_after_launch(str("conv2d ", kind, " (cudnn)").c_str(), __FILE__, __LINE__);
}

// Runs the plan's remembered algorithm; false when its workspace no longer fits or cuDNN refuses.
template <typename Run>
bool run_choice(const Plan& plan, const Choice& c, int device, cudaStream_t stream, Run run) {
  std::optional<Workspace> ws;
  try {
    ws.emplace(device, c.memory, stream);
  } catch (const Error&) {
    return false;
  }
  return run(c.algo, plan.d.conv[c.rank], ws->get(), c.memory) == CUDNN_STATUS_SUCCESS;
}

struct BenchmarkLog {
  std::mutex mutex;
  std::vector<BenchmarkPick> picks;
};

BenchmarkLog& benchmark_log() {
  static auto* log = new BenchmarkLog;
  return *log;
}

std::string describe(const Plan& plan, const Choice& c) {
  return str(algo_name(plan.key.direction, c.algo), ", ", kMathNames[c.rank], " math");
}

// The benchmark policy's choice: every eligible candidate (AlgoPolicy::benchmark), in the order
// run_plan would try them, timed on the call's buffers; the fastest (the first of equal times, so
// the heuristic's choice, timed first, wins ties), recorded in benchmark_log(). Nothing when no
// candidate ran (the caller then walks the heuristic's list as without the policy).
template <typename Perf, typename Run>
std::optional<Choice> fastest_candidate(const Plan& plan, const std::vector<Perf>& results,
                                        int device, cudaStream_t stream, Run run) {
  struct Refused {};  // its workspace does not fit, or cuDNN does not take it
  // One timing at a time: partitions tuning side by side would disturb each other's timings.
  static std::mutex timing;
  std::lock_guard one_at_a_time(timing);
  const bool fp32 = plan.key.precision == Precision::Fp32;
  std::vector<Choice> timed;
  std::vector<double> ms;
  for (int i = 0; i < (fp32 ? 1 : kMathRanks); ++i) {
    const int rank = fp32 ? 0 : kMathRanks - 1 - i;
    for (const auto& perf : results) {
      if (perf.status != CUDNN_STATUS_SUCCESS || math_rank(perf.mathType) != rank) continue;
      const Choice candidate{true, static_cast<int>(perf.algo), perf.memory, rank};
      const double best = ms.empty() ? std::numeric_limits<double>::infinity()
                                     : *std::min_element(ms.begin(), ms.end());
      try {
        ms.push_back(cuda::fastest_run_ms(stream, kTimedRuns, kClearlySlower * best, [&] {
          if (!run_choice(plan, candidate, device, stream, run)) throw Refused{};
        }));
        timed.push_back(candidate);
      } catch (const Refused&) {
      }
    }
  }
  if (timed.empty()) return std::nullopt;
  const size_t fastest = static_cast<size_t>(std::min_element(ms.begin(), ms.end()) - ms.begin());
  BenchmarkPick pick;
  pick.device = device;
  pick.direction = cuda::name(pass_of(plan.key.direction));
  pick.precision = plan.key.precision;
  pick.geometry = plan.geometry;
  pick.pick = describe(plan, timed[fastest]);
  pick.heuristic = describe(plan, timed.front());
  pick.ms = ms[fastest];
  pick.heuristic_ms = ms.front();
  pick.candidates = static_cast<int>(timed.size());
  BenchmarkLog& log = benchmark_log();
  std::lock_guard lock(log.mutex);
  log.picks.push_back(std::move(pick));
  return timed[fastest];
}

// Runs the plan's algorithm when one was chosen; otherwise tries cuDNN's heuristic candidates
// (`query(conv)`, already in predicted-speed order) by math rank: the first whose workspace the
// allocator can provide and whose call cuDNN accepts wins and is remembered. Under a
// deterministic policy only CUDNN_DETERMINISTIC candidates are eligible (the policy is part of
// the key, so a remembered choice obeys it). `run(algo, conv, workspace, bytes)` enqueues the
// convolution and returns cuDNN's status; the benchmark policy times `time_run` (the same
// convolution, on outputs it may overwrite again and again).
template <typename Query, typename Run, typename TimeRun>
void run_plan(Plan& plan, AlgoPolicy policy, int device, cudaStream_t stream, const char* kind,
              Query query, Run run, TimeRun time_run) {
  const Choice known = current_choice(plan);
  if (known.valid && run_choice(plan, known, device, stream, run)) return after_success(kind);
  std::lock_guard lock(plan.choosing);
  const bool tf32 = policy.precision != Precision::Fp32;  // Tf32 or Bf16: tensor-op math first
  const auto results = query(plan.d.conv[tf32 ? kMathRanks - 1 : 0]);
  // A benchmark policy times the candidates, outside capture (nothing may synchronise there).
  if (plan.key.benchmark && !cuda::stream_capturing(stream))
    if (const std::optional<Choice> pick =
            fastest_candidate(plan, results, device, stream, time_run))
      if (run_choice(plan, *pick, device, stream, run)) {  // the output by the pick itself
        plan.choice = *pick;
        return after_success(kind);
      }
  std::string tried;
  int eligible = 0;
  for (int i = 0; i < kMathRanks; ++i) {
    const int rank = tf32 ? kMathRanks - 1 - i : i;
    for (const auto& perf : results) {
      if (perf.status != CUDNN_STATUS_SUCCESS || math_rank(perf.mathType) != rank) continue;
      if (policy.deterministic && perf.determinism != CUDNN_DETERMINISTIC) continue;
      ++eligible;
      const Choice candidate{true, static_cast<int>(perf.algo), perf.memory, rank};
      if (run_choice(plan, candidate, device, stream, run)) {
        plan.choice = candidate;
        return after_success(kind);
      }
      tried += str(" algo ", candidate.algo, " (", perf.memory, " bytes of workspace);");
    }
  }
  ECH_FAIL("conv2d (cudnn): no usable ", kind, " algorithm among ", results.size(),
           " heuristic candidates (", eligible, " eligible",
           policy.deterministic ? ", deterministic only" : "", ")",
           tried.empty() ? std::string() : str(": refused or out of memory:", tried),
           policy.deterministic ? "; our kernels (ConvImpl::Ours) are deterministic" : "");
}

// Those that overwrite their output: timed as they run.
template <typename Query, typename Run>
void run_plan(Plan& plan, AlgoPolicy policy, int device, cudaStream_t stream, const char* kind,
              Query query, Run run) {
  run_plan(plan, policy, device, stream, kind, query, run, run);
}

// cuDNN's candidates for one direction: cudnnGet*AlgorithmMaxCount then the *_v7 query.
template <typename Perf, typename MaxCount, typename Get>
std::vector<Perf> candidates(MaxCount max_count_fn, Get get) {
  int max_count = 0;
  ECH_CUDNN_CHECK(max_count_fn(&max_count));
  std::vector<Perf> perf(static_cast<size_t>(max_count));
  int count = 0;
  ECH_CUDNN_CHECK(get(max_count, &count, perf.data()));
  perf.resize(static_cast<size_t>(count));
  return perf;
}

}  // namespace

std::vector<BenchmarkPick> benchmark_picks() {
  BenchmarkLog& log = benchmark_log();
  std::lock_guard lock(log.mutex);
  return log.picks;
}

void conv2d_forward(const Conv2dGeometry& a, const float* x, const float* w, const float* bias,
                    float* y, int device, cudaStream_t stream, AlgoPolicy policy) {
  cuda::DeviceGuard guard(device);
  cudnnHandle_t handle = cuda::cudnn_handle(device, stream);
  Plan& plan = plan_for(make_key(device, Direction::Forward, a, policy), a);
  const Descriptors& d = plan.d;
  const float one = 1.0f, zero = 0.0f;
  run_plan(
      plan, policy, device, stream, "forward",
      [&](cudnnConvolutionDescriptor_t conv) {
        return candidates<cudnnConvolutionFwdAlgoPerf_t>(
            [&](int* n) { return cudnnGetConvolutionForwardAlgorithmMaxCount(handle, n); },
            [&](int max, int* n, cudnnConvolutionFwdAlgoPerf_t* p) {
              return cudnnGetConvolutionForwardAlgorithm_v7(handle, d.x, d.w, conv, d.y, max, n, p);
            });
      },
      [&](int algo, cudnnConvolutionDescriptor_t conv, void* ws, size_t bytes) {
        return cudnnConvolutionForward(handle, &one, d.x, x, d.w, w, conv,
                                       static_cast<cudnnConvolutionFwdAlgo_t>(algo), ws, bytes,
                                       &zero, d.y, y);
      });
  if (bias) ECH_CUDNN_CHECK(cudnnAddTensor(handle, &one, d.bias, bias, &one, d.y, y));
}

void conv2d_backward_input(const Conv2dGeometry& a, const float* grad_out, const float* w,
                           float* grad_in, int device, cudaStream_t stream, AlgoPolicy policy,
                           bool accumulate) {
  cuda::DeviceGuard guard(device);
  cudnnHandle_t handle = cuda::cudnn_handle(device, stream);
  Plan& plan = plan_for(make_key(device, Direction::BackwardData, a, policy), a);
  const Descriptors& d = plan.d;
  const float one = 1.0f, zero = 0.0f;
  // grad_in = 1 * the gradient + beta * grad_in: beta 1 accumulates (cuDNN's blend).
  const auto data = [&](float* out, const float* beta) {
    return [&, out, beta](int algo, cudnnConvolutionDescriptor_t conv, void* ws, size_t bytes) {
      return cudnnConvolutionBackwardData(handle, &one, d.w, w, d.y, grad_out, conv,
                                          static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), ws,
                                          bytes, beta, d.x, out);
    };
  };
  // The benchmark policy runs each candidate several times: accumulating, they would add into
  // the sum again and again, so they are timed overwriting a scratch gradient instead.
  std::optional<Workspace> scratch;
  const auto time_run = [&](int algo, cudnnConvolutionDescriptor_t conv, void* ws, size_t bytes) {
    if (accumulate && !scratch)
      scratch.emplace(device, static_cast<size_t>(a.n * a.c * a.h * a.w) * sizeof(float), stream);
    float* out = accumulate ? static_cast<float*>(scratch->get()) : grad_in;
    return data(out, &zero)(algo, conv, ws, bytes);
  };
  run_plan(
      plan, policy, device, stream, "backward-data",
      [&](cudnnConvolutionDescriptor_t conv) {
        return candidates<cudnnConvolutionBwdDataAlgoPerf_t>(
            [&](int* n) { return cudnnGetConvolutionBackwardDataAlgorithmMaxCount(handle, n); },
            [&](int max, int* n, cudnnConvolutionBwdDataAlgoPerf_t* p) {
              return cudnnGetConvolutionBackwardDataAlgorithm_v7(handle, d.w, d.y, conv, d.x, max,
                                                                 n, p);
            });
      },
      data(grad_in, accumulate ? &one : &zero), time_run);
}

void conv2d_backward_weight(const Conv2dGeometry& a, const float* grad_out, const float* x,
                            float* grad_w, int device, cudaStream_t stream, AlgoPolicy policy) {
  cuda::DeviceGuard guard(device);
  cudnnHandle_t handle = cuda::cudnn_handle(device, stream);
  Plan& plan = plan_for(make_key(device, Direction::BackwardFilter, a, policy), a);
  const Descriptors& d = plan.d;
  const float one = 1.0f, zero = 0.0f;
  run_plan(
      plan, policy, device, stream, "backward-filter",
      [&](cudnnConvolutionDescriptor_t conv) {
        return candidates<cudnnConvolutionBwdFilterAlgoPerf_t>(
            [&](int* n) { return cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(handle, n); },
            [&](int max, int* n, cudnnConvolutionBwdFilterAlgoPerf_t* p) {
              return cudnnGetConvolutionBackwardFilterAlgorithm_v7(handle, d.x, d.y, conv, d.w, max,
                                                                   n, p);
            });
      },
      [&](int algo, cudnnConvolutionDescriptor_t conv, void* ws, size_t bytes) {
        return cudnnConvolutionBackwardFilter(handle, &one, d.x, x, d.y, grad_out, conv,
                                              static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo),
                                              ws, bytes, &zero, d.w, grad_w);
      });
}

void conv2d_backward_bias(const Conv2dGeometry& a, const float* grad_out, float* grad_bias,
                          int device, cudaStream_t stream) {
  cuda::DeviceGuard guard(device);
  cudnnHandle_t handle = cuda::cudnn_handle(device, stream);
  // The descriptors only: a fixed reduction has no algorithm to choose.
  const Descriptors& d = plan_for(make_key(device, Direction::BackwardBias, a, {}), a).d;
  const float one = 1.0f, zero = 0.0f;
  ECH_CUDNN_CHECK(
      cudnnConvolutionBackwardBias(handle, &one, d.y, grad_out, &zero, d.bias, grad_bias));
}

}  // namespace echelon::cudnn
#endif  // ECHELON_WITH_CUDNN
