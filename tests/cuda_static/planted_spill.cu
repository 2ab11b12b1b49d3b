// Planted for tools/cuda-resources.py's own test (ctest cuda_static_planted): 32 values stay live
// across a loop while -maxrregcount=24 (tests/CMakeLists.txt; sm_90 allows no fewer) leaves room
// for fewer, so ptxas must spill them to local memory, and the checker must say so. Never linked.
__global__ void planted_spill_kernel(const float* x, float* y, int rounds) {
  float v[32];
#pragma unroll
  for (int i = 0; i < 32; ++i) v[i] = x[threadIdx.x + i * blockDim.x];
  for (int r = 0; r < rounds; ++r) {
#pragma unroll
    for (int i = 0; i < 32; ++i) v[i] = v[i] * v[(i + 1) % 32] + 1.0f;
  }
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < 32; ++i) sum += v[i];
  y[threadIdx.x] = sum;
}

// No spill: the checker's baseline in the same object.
__global__ void planted_clean_kernel(const float* x, float* y) {
  y[threadIdx.x] = 2.0f * x[threadIdx.x];
}
