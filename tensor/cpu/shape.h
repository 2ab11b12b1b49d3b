// Naive CPU twins of cuda/kernels/shape.cu: indexing ops. (permute, transpose and concat are
// strided copies: they use copy_cast from elementwise.h.) T: float or double, plus int64_t for
// index_select. Index values are validated by the dispatch layer (an out-of-range index throws
// there, naming it); kernels assume 0 <= index < size.
#pragma once

#include <cstdint>

#include <echelon/kernels/augment.h>

namespace echelon::cpu {

// x contiguous viewed as (outer, dim_size, inner); index int64 (num_index);
// out (outer, num_index, inner) = x[:, index[k], :].
template <typename T>
void index_select(const T* x, const int64_t* index, T* out, int64_t outer, int64_t dim_size,
                  int64_t inner, int64_t num_index);

// x contiguous viewed as (outer, dim_size, inner); index and out (outer, index_size, inner):
// out[o, k, i] = x[o, index[o, k, i], i]. (x and index agree on every dim but the gathered one.)
template <typename T>
void gather(const T* x, const int64_t* index, T* out, int64_t outer, int64_t dim_size,
            int64_t inner, int64_t index_size);

// labels int64 (n) -> out (n, num_classes): 1 at [i, labels[i]], 0 elsewhere.
template <typename T>
void one_hot(const int64_t* labels, T* out, int64_t n, int64_t num_classes);

// Number of index[i] (i < n) outside [0, size); *first_bad = the first such value (unchanged
// when none). Both outputs point at one int64 in the same memory as index.
void count_out_of_range(const int64_t* index, int64_t n, int64_t size, int64_t* count,
                        int64_t* first_bad);

// ResNet's option-A shortcut: x (n, c, h, w) -> y (n, c + 2 * pad, oh, ow), oh = ceil(h /
// stride), ow = ceil(w / stride): y[i, pad + k, a, b] = x[i, k, stride * a, stride * b], and
// zeros in the pad channels on either side.
template <typename T>
void pad_channels_subsample(const T* x, T* y, int64_t n, int64_t c, int64_t h, int64_t w,
                            int64_t pad, int64_t stride);
// Its adjoint: g (n, c + 2 * pad, oh, ow) -> gx (n, c, h, w): gx[i, k, p, q] = g[i, pad + k,
// p / stride, q / stride] where stride divides p and q, else 0.
template <typename T>
void pad_channels_subsample_backward(const T* g, T* gx, int64_t n, int64_t c, int64_t h, int64_t w,
                                     int64_t pad, int64_t stride);

// images uint8 (examples, C, H, W), plan int32 (batch, kPlanColumns) -> out float (batch, C, H,
// W): the padding-crop, flip and normalisation of kernels/augment.h. Plan values are in range
// (checked by the dispatch layer).
void augment_gather(const AugmentGatherArgs& a, const uint8_t* images, const int32_t* plan,
                    float* out);

}  // namespace echelon::cpu
