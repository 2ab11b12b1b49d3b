// CUDA emulation: cub::BlockReduce, as the kernels use it. Same contract as CUB: every thread of
// the block calls Sum/Reduce, the aggregate is valid in thread 0 only, and TempStorage may be
// reused only after a __syncthreads(). The emulation keeps those edges sharp: other threads get
// their own input back, and the slots are written before the one internal barrier and read
// after it, so a missing barrier before reuse shows up as a wrong sum in some thread order.
#pragma once

#include <string>

#include <echelon/cuda/sim/device.h>

namespace cub {

enum BlockReduceAlgorithm {
  BLOCK_REDUCE_RAKING,
  BLOCK_REDUCE_WARP_REDUCTIONS,
  BLOCK_REDUCE_RAKING_COMMUTATIVE_ONLY
};

struct Sum {
  template <typename T>
  T operator()(const T& a, const T& b) const {
    return a + b;
  }
};

template <typename T, int BLOCK_DIM_X,
          BlockReduceAlgorithm ALGORITHM = BLOCK_REDUCE_WARP_REDUCTIONS, int BLOCK_DIM_Y = 1,
          int BLOCK_DIM_Z = 1>
class BlockReduce {
  static constexpr int kThreads = BLOCK_DIM_X * BLOCK_DIM_Y * BLOCK_DIM_Z;

 public:
  struct TempStorage {
    T slots[kThreads];
  };

  explicit BlockReduce(TempStorage& temp) : temp_(temp) {
    const dim3 b = blockDim;
    if (static_cast<int>(b.x) != BLOCK_DIM_X || static_cast<int>(b.y) != BLOCK_DIM_Y ||
        static_cast<int>(b.z) != BLOCK_DIM_Z)
      echelon::cudasim::detail::device_error("cub::BlockReduce<T, " + std::to_string(BLOCK_DIM_X) +
                                             "> used in a block of (" + std::to_string(b.x) + "," +
                                             std::to_string(b.y) + "," + std::to_string(b.z) +
                                             ") threads");
  }

  T Sum(T input) { return Reduce(input, cub::Sum()); }

  template <typename ReductionOp>
  T Reduce(T input, ReductionOp op) {
    return Reduce(input, op, kThreads);
  }

  // Only the first num_valid threads' inputs count.
  template <typename ReductionOp>
  T Reduce(T input, ReductionOp op, int num_valid) {
    const uint3 t = threadIdx;
    const int tid = static_cast<int>(t.x + BLOCK_DIM_X * (t.y + BLOCK_DIM_Y * t.z));
    temp_.slots[tid] = input;
    __syncthreads();
    if (tid != 0) return input;
    T acc = temp_.slots[0];
    for (int i = 1; i < num_valid && i < kThreads; ++i) acc = op(acc, temp_.slots[i]);
    return acc;
  }

 private:
  TempStorage& temp_;
};

}  // namespace cub
