// Launchers of cuda/kernels/im2col.cu: same names and arguments as tensor/cpu/im2col.h, plus
// the stream. float only. col2im overwrites x (a gather per pixel, so no atomics are needed),
// or with accumulate adds each pixel's sum to x (x + sum: one add per element).
#pragma once

#include <cuda_runtime.h>

#include <echelon/kernels/conv.h>

namespace echelon::cuda {

template <typename T>
void im2col(const T* x, T* cols, const Conv2dGeometry& g, cudaStream_t stream);

template <typename T>
void col2im(const T* cols, T* x, const Conv2dGeometry& g, cudaStream_t stream,
            bool accumulate = false);

}  // namespace echelon::cuda
