// Op throughput: elementwise add in bytes/s and GEMM in FLOP/s, each next to its peer measured
// in the same run (CPU: naive twin vs OpenBLAS; GPU: our SGEMM vs cuBLAS, add vs a D2D memcpy,
// which bounds what a memory-bound kernel can reach). GPU benchmarks are registered only when a
// device exists at run time; they time each iteration with CUDA events (manual time).
//   bench_ops --benchmark_filter=CPU        bench_ops --benchmark_filter=GPU
//   --benchmark_min_time=0.05
#include <benchmark/benchmark.h>

#include <string>

#include <echelon/tensor/cpu/matmul.h>
#include <echelon/tensor/ops.h>

#if ECHELON_WITH_CUDA
#include <echelon/cuda/check.h>
#include <echelon/cuda/stream.h>
#endif

using namespace echelon;

namespace {

Tensor random_tensor(const Shape& shape, uint64_t seed, Device device = Device::cpu()) {
  Generator gen(seed);
  // rand is in [0, 1); shifting keeps values away from zero-heavy patterns.
  return ops::add(ops::rand(shape, gen, kFloat32, device), -0.5);
}

void set_flops(benchmark::State& state, double flops_per_iteration) {
  state.counters["FLOP/s"] =
      benchmark::Counter(flops_per_iteration, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_CPU_Add(benchmark::State& state) {
  const int64_t n = state.range(0);
  const Tensor a = random_tensor({n}, 1), b = random_tensor({n}, 2);
  for (auto _ : state) benchmark::DoNotOptimize(ops::add(a, b));
  state.SetBytesProcessed(state.iterations() * 3 * n * static_cast<int64_t>(sizeof(float)));
}
// Real time: OpenBLAS runs threads of its own, so the main thread's CPU time undercounts.
BENCHMARK(BM_CPU_Add)
    ->Arg(1 << 16)
    ->Arg(1 << 20)
    ->Arg(1 << 24)
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

void run_cpu_matmul(benchmark::State& state, ops::MatmulImpl impl) {
  const int64_t n = state.range(0);
  if (impl == ops::MatmulImpl::Blas && !cpu::blas_available()) {
    state.SkipWithError("built without OpenBLAS");
    return;
  }
  const Tensor a = random_tensor({n, n}, 3), b = random_tensor({n, n}, 4);
  ops::set_matmul_impl(impl);
  for (auto _ : state) benchmark::DoNotOptimize(ops::matmul(a, b));
  ops::set_matmul_impl(ops::MatmulImpl::Auto);
  set_flops(state, 2.0 * n * n * n);
}
void BM_CPU_Matmul_Naive(benchmark::State& state) {
  run_cpu_matmul(state, ops::MatmulImpl::Naive);
}
void BM_CPU_Matmul_Blas(benchmark::State& state) {
  run_cpu_matmul(state, ops::MatmulImpl::Blas);
}
BENCHMARK(BM_CPU_Matmul_Naive)
    ->Arg(127)
    ->Arg(256)
    ->Arg(512)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_CPU_Matmul_Blas)
    ->Arg(127)
    ->Arg(256)
    ->Arg(512)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

#if ECHELON_WITH_CUDA
// Times `body` per iteration with events on the current (default) stream.
template <typename Body>
void time_gpu(benchmark::State& state, Body body) {
  cuda::Event start(true), stop(true);
  body();  // warm-up: allocator cache, cuBLAS handle, module loading
  ECH_CUDA_CHECK(cudaDeviceSynchronize());
  for (auto _ : state) {
    start.record(nullptr);
    body();
    stop.record(nullptr);
    stop.synchronize();
    state.SetIterationTime(start.elapsed_ms(stop) / 1e3);
  }
}

void BM_GPU_Add(benchmark::State& state) {
  const int64_t n = state.range(0);
  const Tensor a = random_tensor({n}, 1, Device::cuda(0)),
               b = random_tensor({n}, 2, Device::cuda(0));
  time_gpu(state, [&] { benchmark::DoNotOptimize(ops::add(a, b)); });
  state.SetBytesProcessed(state.iterations() * 3 * n * static_cast<int64_t>(sizeof(float)));
}

void BM_GPU_MemcpyD2D(benchmark::State& state) {
  const int64_t n = state.range(0);
  const Tensor src = random_tensor({n}, 1, Device::cuda(0));
  const Tensor dst = Tensor::empty({n}, kFloat32, Device::cuda(0));
  time_gpu(state, [&] {
    ECH_CUDA_CHECK(cudaMemcpyAsync(dst.raw_data(), src.raw_data(), src.nbytes(),
                                   cudaMemcpyDeviceToDevice, nullptr));
  });
  // A copy reads and writes n floats; counted like add's 3n so the two rows compare directly,
  // use bytes_per_second * 2/3 for the copy's own traffic.
  state.SetBytesProcessed(state.iterations() * 2 * n * static_cast<int64_t>(sizeof(float)));
}

void run_gpu_matmul(benchmark::State& state, ops::MatmulImpl impl) {
  const int64_t n = state.range(0);
  const Tensor a = random_tensor({n, n}, 3, Device::cuda(0));
  const Tensor b = random_tensor({n, n}, 4, Device::cuda(0));
  ops::set_matmul_impl(impl);
  time_gpu(state, [&] { benchmark::DoNotOptimize(ops::matmul(a, b)); });
  ops::set_matmul_impl(ops::MatmulImpl::Auto);
  set_flops(state, 2.0 * n * n * n);
}
void BM_GPU_Matmul_Ours(benchmark::State& state) {
  run_gpu_matmul(state, ops::MatmulImpl::Ours);
}
void BM_GPU_Matmul_Cublas(benchmark::State& state) {
  run_gpu_matmul(state, ops::MatmulImpl::Blas);
}

void register_gpu_benchmarks() {
  if (cuda_device_count() == 0) return;
  for (auto* b : {benchmark::RegisterBenchmark("BM_GPU_Add", BM_GPU_Add),
                  benchmark::RegisterBenchmark("BM_GPU_MemcpyD2D", BM_GPU_MemcpyD2D)})
    b->Arg(1 << 20)->Arg(1 << 24)->Arg(1 << 26)->UseManualTime()->Unit(benchmark::kMicrosecond);
  for (auto* b : {benchmark::RegisterBenchmark("BM_GPU_Matmul_Ours", BM_GPU_Matmul_Ours),
                  benchmark::RegisterBenchmark("BM_GPU_Matmul_Cublas", BM_GPU_Matmul_Cublas)})
    b->Arg(511)->Arg(1024)->Arg(2048)->Arg(4096)->UseManualTime()->Unit(benchmark::kMicrosecond);
}
#else
void register_gpu_benchmarks() {}
#endif

}  // namespace

int main(int argc, char** argv) {
  register_gpu_benchmarks();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
