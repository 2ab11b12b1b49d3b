// One call of each kernel worth a hardware-counter look, for Nsight Compute (issue #10;
// tools/gpu-profile.sh runs it under `ncu` and tools/ncu-table.py prints the table): our SGEMM
// (fp32; TF32 with the 2- and 4-stage rings and async-K; bf16) beside cuBLAS at one size, and
// our implicit-GEMM convolution (TF32 also with the 4-stage gather tiles) beside cuDNN on a few
// conv layers of the four nets, each direction, fp32 and TF32. exp_gpu_kernels says how fast each
// is; this says why. The step group profiles one training step of a model (forward, loss,
// backward, SGD; batch 128, synthetic data, the sync-free step of a --cuda-graph run, eager): every
// kernel of the step with its time, which says where a launch-bound step (LeNet-5's) goes.
//
// Every subject runs once as a warm-up (plans, handles, allocations, opt-ins), then once more
// between cudaProfilerStart and cudaProfilerStop right after a marker kernel (exp of one float,
// which no subject launches; the subject's inputs are made before), so `ncu --profile-from-start
// off` records exactly the subjects' kernels and the markers split them by subject. --subjects-out
// writes the subjects' names, one a line, in that order.
//   exp_gpu_profile [--groups sgemm,conv,step] [--size N] [--layers I,J,...]
//                   [--conv-precisions fp32,tf32,bf16] [--step-models lenet5,resnet20]
//                   [--subjects-out FILE] [--list] [--quick]
// --list prints the subjects (and the layer indices) and runs nothing: it works without a GPU.
// Without a GPU (or a CUDA build) and without --list it says so and exits 0.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <echelon/parallel/engine.h>
#include <echelon/parallel/model_bench.h>
#include <echelon/tensor/ops.h>

#include "bench/driver_args.h"
#include "bench/gpu_kernels_common.h"

#if ECHELON_WITH_CUDA
#include <cuda_profiler_api.h>

#include <echelon/cuda/check.h>
#include <echelon/cuda/kernels/conv.h>
#include <echelon/cuda/kernels/conv_gemm.h>
#include <echelon/cuda/kernels/matmul.h>
#include <echelon/cuda/stream.h>
#endif

using namespace echelon;
using gpu_kernels::ConvShape;

namespace {

enum class Kind { Sgemm, Conv, Step };
enum class Peer { Ours, Library };  // Library: cuBLAS / cuDNN
const char* const kDirections[] = {"fwd", "bwd-data", "bwd-w"};
constexpr int64_t kStepBatch = 128;  // the step group's batch (issue #10's P1 batch); --quick: 2

#if ECHELON_WITH_CUDNN
constexpr bool kWithCudnn = true;
#else
constexpr bool kWithCudnn = false;
#endif

// What one subject runs; its name says the same to the reader of the table.
struct Subject {
  Kind kind;
  Precision precision;
  Peer peer;
  int stages = 2;          // SGEMM TF32 only: cuda::set_mma_stages
  bool async_k = false;    // SGEMM TF32 only: cuda::set_mma_async_k
  bool gather = false;     // conv TF32 only: cuda::set_conv_async_gather, at `stages`
  size_t layer = 0;        // conv: index into gpu_kernels::net_conv_shapes
  int direction = 0;       // conv: kDirections
  std::string model = {};  // step: the model zoo's name
  int64_t batch = 0;       // step: images per step
  std::string name = {};
};

const char* precision_name(Precision p) {
  return p == Precision::Fp32 ? "fp32" : p == Precision::Tf32 ? "tf32" : "bf16";
}

std::string dims(const Shape& shape) {
  std::string out;
  for (const int64_t d : shape) out += (out.empty() ? "" : "x") + std::to_string(d);
  return out;
}

// "resnet20 128x16x32x32 w16x16x3x3", then " s2" for a stride-2 layer
std::string layer_name(const ConvShape& c) {
  return std::string(c.net) + " " + dims(c.x) + " w" + dims(c.w) +
         (c.stride == 1 ? "" : " s" + std::to_string(c.stride));
}

std::vector<Subject> make_subjects(const std::vector<std::string>& groups, int64_t size,
                                   const std::vector<size_t>& layers,
                                   const std::vector<Precision>& conv_precisions,
                                   const std::vector<ConvShape>& shapes,
                                   const std::vector<std::string>& step_models,
                                   int64_t step_batch) {
  std::vector<Subject> subjects;
  const auto wants = [&](const char* group) {
    return std::find(groups.begin(), groups.end(), group) != groups.end();
  };
  const auto gemm = [&](Precision p, Peer peer, int stages, bool async_k, const char* variant) {
    Subject s{Kind::Sgemm, p, peer, stages, async_k};
    s.name = std::string("sgemm ") + precision_name(p) + " " + std::to_string(size) + "^3 nn " +
             (peer == Peer::Ours ? std::string("ours") + variant : "cuBLAS");
    subjects.push_back(s);
  };
  if (wants("sgemm")) {
    gemm(Precision::Fp32, Peer::Ours, 2, false, "");
    gemm(Precision::Fp32, Peer::Library, 2, false, "");
    gemm(Precision::Tf32, Peer::Ours, 2, false, " (2 stages)");
    gemm(Precision::Tf32, Peer::Ours, 4, false, " (4 stages)");
    gemm(Precision::Tf32, Peer::Ours, 2, true, " (async-K, 2 stages)");
    gemm(Precision::Tf32, Peer::Ours, 4, true, " (async-K, 4 stages)");
    gemm(Precision::Tf32, Peer::Library, 2, false, "");
    gemm(Precision::Bf16, Peer::Ours, 2, false, "");
    gemm(Precision::Bf16, Peer::Library, 2, false, "");
  }
  if (wants("conv"))
    for (const Precision p : conv_precisions)
      for (const size_t layer : layers)
        for (int d = 0; d < 3; ++d) {
          const std::string title = std::string("conv ") + precision_name(p) + " " +
                                    layer_name(shapes[layer]) + " " + kDirections[d] + " ";
          const auto conv = [&](Peer peer, bool gather, const char* variant) {
            Subject s{Kind::Conv, p, peer, gather ? 4 : 2, false, gather, layer, d};
            s.name = title + variant;
            subjects.push_back(s);
          };
          conv(Peer::Ours, false, "ours");
          // The gather tiles (every operand by cp.async, 4 stages): TF32 only.
          if (p == Precision::Tf32) conv(Peer::Ours, true, "ours (gather, 4 stages)");
          if (kWithCudnn) conv(Peer::Library, false, "cuDNN");
        }
  if (wants("step"))
    for (const std::string& model : step_models)
      for (const Peer peer : {Peer::Ours, Peer::Library}) {
        // cuDNN's step for LeNet-5 only: a deep model's step is hundreds of kernels a profile.
        if (peer == Peer::Library && (!kWithCudnn || model != "lenet5")) continue;
        Subject s{Kind::Step, Precision::Fp32, peer};
        s.model = model;
        s.batch = step_batch;
        s.name = "step " + model + " b" + std::to_string(step_batch) + " fp32 " +
                 (peer == Peer::Ours ? "ours" : "cuDNN conv");
        subjects.push_back(s);
      }
  return subjects;
}

#if ECHELON_WITH_CUDA
using gpu_kernels::random_cuda;

// The process-wide switches a subject runs under, set for its lifetime, then the defaults again.
class SubjectSwitches {
 public:
  explicit SubjectSwitches(const Subject& s) {
    ops::set_float32_precision(s.precision);
    const bool ours = s.peer == Peer::Ours;
    if (s.kind == Kind::Step) {
      ops::set_conv_impl(ours ? ops::ConvImpl::Ours : ops::ConvImpl::Cudnn);
    } else if (s.kind == Kind::Sgemm) {
      ops::set_matmul_impl(ours ? ops::MatmulImpl::Ours : ops::MatmulImpl::Blas);
      cuda::set_mma_stages(s.stages);
      cuda::set_mma_async_k(s.async_k);
    } else {
      ops::set_conv_impl(ours ? ops::ConvImpl::Ours : ops::ConvImpl::Cudnn);
      cuda::set_conv_algorithm(cuda::ConvAlgorithm::ImplicitGemm);
      cuda::set_conv_async_gather(s.gather);
      cuda::set_mma_stages(s.stages);
    }
  }
  ~SubjectSwitches() {
    ops::set_float32_precision(Precision::Fp32);
    ops::set_matmul_impl(ops::MatmulImpl::Auto);
    cuda::set_mma_stages(2);
    cuda::set_mma_async_k(false);
    cuda::set_conv_async_gather(false);
    ops::set_conv_impl(ops::ConvImpl::Ours);
  }
  SubjectSwitches(const SubjectSwitches&) = delete;
  SubjectSwitches& operator=(const SubjectSwitches&) = delete;
};

// The subject's call, its inputs made here (their kernels are not the subject's).
std::function<void()> prepare(const Subject& s, const Tensor& a, const Tensor& b,
                              const std::vector<ConvShape>& shapes) {
  if (s.kind == Kind::Sgemm) return [a, b] { ops::matmul(a, b, false, false); };
  if (s.kind == Kind::Step) {
    parallel::ModelInput input;
    input.model = s.model;
    input.batch_size = s.batch;
    input.validate();
    std::shared_ptr<parallel::StepEngine> engine = parallel::make_single_device_engine(
        input.make_model(), parallel::bench_sgd_options(), Device::cuda(0));
    engine->defer_step_stats(1 << 20);  // no loss read per step, as a --cuda-graph run
    const data::Batch batch = input.make_batches(Device::cuda(0), 1)[0];
    // Past the first steps' one-off work (the momentum buffers, the SGD lists by first step).
    for (int i = 0; i < 2; ++i) engine->train_step(batch);
    return [engine, batch] { engine->train_step(batch); };
  }
  const ConvShape& shape = shapes[s.layer];
  const Conv2dGeometry g = shape.window();
  const Tensor x = random_cuda(shape.x, 10), w = random_cuda(shape.w, 11);
  const Tensor bias = random_cuda({shape.w[0]}, 12);
  if (s.direction == 0) return [=] { ops::conv2d(x, w, bias, g); };
  const Tensor gy = random_cuda(ops::conv2d(x, w, bias, g).shape(), 13);
  const bool data = s.direction == 1;
  return [=] { ops::conv2d_backward(gy, x, w, false, data, g, !data); };
}

// Runs `body` inside the profiler's range, then waits for it.
void in_profiled_range(const std::function<void()>& body) {
  const cudaStream_t stream = cuda::current_stream(0);
  ECH_CUDA_CHECK(cudaProfilerStart());
  body();
  ECH_CUDA_CHECK(cudaStreamSynchronize(stream));
  ECH_CUDA_CHECK(cudaProfilerStop());
}

void profile(const std::vector<Subject>& subjects, int64_t size,
             const std::vector<ConvShape>& shapes) {
  const cudaStream_t stream = cuda::current_stream(0);
  const Tensor a = random_cuda({size, size}, 8), b = random_cuda({size, size}, 9);
  const Tensor one = random_cuda({1}, 1);
  const auto marker = [&] { ops::exp(one); };
  for (const Subject& s : subjects) {
    const SubjectSwitches switches(s);
    const std::function<void()> call = prepare(s, a, b, shapes);
    call();  // warm-up: allocations, handles, plans, dynamic shared memory opt-ins
    ECH_CUDA_CHECK(cudaStreamSynchronize(stream));
    in_profiled_range([&] {
      marker();
      call();
    });
    std::printf("profiled: %s\n", s.name.c_str());
  }
  in_profiled_range(marker);  // closes the last subject
}
#endif

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> groups = {"sgemm", "conv"}, precisions = {"fp32", "tf32"};
  std::vector<std::string> step_models = {"lenet5", "resnet20"};
  // ResNet-20's 16- and 64-channel layers, VGG-16's 64-, 256- and 2x2 512-channel ones
  std::vector<size_t> layers = {3, 7, 11, 15, 18};
  int64_t size = 4096;
  std::string subjects_out;
  bool list = false, quick = false;
  std::vector<ConvShape> shapes = gpu_kernels::net_conv_shapes(128);  // --quick: batch 2
  CLI::App app{"One call of each SGEMM and conv kernel (ours and the library's), for ncu",
               "exp_gpu_profile"};
  app.option_defaults()->always_capture_default();
  app.add_option("--groups", groups, "Which kernels")
      ->delimiter(',')
      ->check(CLI::IsMember({"sgemm", "conv", "step"}));
  app.add_option("--size", size, "SGEMM M = N = K")->check(CLI::Range(16, 16384));
  app.add_option("--layers", layers, "Conv layers by index (--list shows them)")
      ->delimiter(',')
      ->check(CLI::Range(size_t{0}, shapes.size() - 1));
  app.add_option("--conv-precisions", precisions, "Conv precisions")
      ->delimiter(',')
      ->check(CLI::IsMember({"fp32", "tf32", "bf16"}));
  app.add_option("--step-models", step_models, "The step group's models")
      ->delimiter(',')
      ->check(CLI::IsMember({"lenet5", "resnet20", "resnet56", "alexnet", "vgg16"}));
  app.add_option("--subjects-out", subjects_out, "Write the subjects' names here, one a line");
  app.add_flag("--list", list, "Print the subjects and the layer table; run nothing");
  app.add_flag("--quick", quick, "Batch 2 and SGEMM size 128: a smoke test");
  echelon::bench::parse_args_or_exit(app, argc, argv);
  if (quick) {
    size = 128;
    for (ConvShape& shape : shapes) shape.x[0] = 2;
  }
  std::vector<Precision> conv_precisions;
  for (const std::string& p : precisions)
    conv_precisions.push_back(p == "fp32"   ? Precision::Fp32
                              : p == "tf32" ? Precision::Tf32
                                            : Precision::Bf16);
  const std::vector<Subject> subjects = make_subjects(groups, size, layers, conv_precisions, shapes,
                                                      step_models, quick ? 2 : kStepBatch);
  if (list) {
    for (size_t i = 0; i < shapes.size(); ++i)
      std::printf("layer %2zu: %s (%d of the net's layers)\n", i, layer_name(shapes[i]).c_str(),
                  shapes[i].count);
    for (const Subject& s : subjects) std::printf("%s\n", s.name.c_str());
    return 0;
  }
  if (!subjects_out.empty()) {
    std::ofstream out(subjects_out);
    for (const Subject& s : subjects) out << s.name << "\n";
    if (!out) {
      std::fprintf(stderr, "exp_gpu_profile: cannot write %s\n", subjects_out.c_str());
      return 1;
    }
  }
#if ECHELON_WITH_CUDA
  if (cuda::device_count() == 0) {
    std::printf("exp_gpu_profile: no GPU: nothing run\n");
    return 0;
  }
  try {
    profile(subjects, size, shapes);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "exp_gpu_profile: %s\n", e.what());
    return 1;
  }
#else
  std::printf("exp_gpu_profile: built without CUDA: nothing run\n");
#endif
  return 0;
}
