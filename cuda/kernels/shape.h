// Launchers of cuda/kernels/shape.cu: same names and arguments as tensor/cpu/shape.h (read the
// shape contracts there), plus the stream. T: float, plus int64_t for index_select.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include <echelon/kernels/augment.h>

namespace echelon::cuda {

template <typename T>
void index_select(const T* x, const int64_t* index, T* out, int64_t outer, int64_t dim_size,
                  int64_t inner, int64_t num_index, cudaStream_t stream);

template <typename T>
void gather(const T* x, const int64_t* index, T* out, int64_t outer, int64_t dim_size,
            int64_t inner, int64_t index_size, cudaStream_t stream);

template <typename T>
void one_hot(const int64_t* labels, T* out, int64_t n, int64_t num_classes, cudaStream_t stream);

// count, first_bad: device int64 scalars; the launcher zeroes count before counting. When
// several indices are bad, first_bad holds any one of them (the error names one).
void count_out_of_range(const int64_t* index, int64_t n, int64_t size, int64_t* count,
                        int64_t* first_bad, cudaStream_t stream);

void pad_channels_subsample(const float* x, float* y, int64_t n, int64_t c, int64_t h, int64_t w,
                            int64_t pad, int64_t stride, cudaStream_t stream);
void pad_channels_subsample_backward(const float* g, float* gx, int64_t n, int64_t c, int64_t h,
                                     int64_t w, int64_t pad, int64_t stride, cudaStream_t stream);

// Resident-data batch assembly (kernels/augment.h); images, plan and out in device memory.
void augment_gather(const AugmentGatherArgs& a, const uint8_t* images, const int32_t* plan,
                    float* out, cudaStream_t stream);

}  // namespace echelon::cuda
