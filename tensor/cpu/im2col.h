// Naive CPU twins of cuda/kernels/im2col.cu. T is float or double. Geometry and index layout
// are documented on Conv2dGeometry (kernels/conv.h).
#pragma once

#include <echelon/kernels/conv.h>

namespace echelon::cpu {

// x (n, C, H, W) contiguous -> cols (n, C*KH*KW, OH*OW) contiguous; padding reads as 0.
template <typename T>
void im2col(const T* x, T* cols, const Conv2dGeometry& g);

// cols (n, C*KH*KW, OH*OW) -> x (n, C, H, W): x is overwritten with the sum of every column
// entry that reads each pixel (the adjoint of im2col).
template <typename T>
void col2im(const T* cols, T* x, const Conv2dGeometry& g);

}  // namespace echelon::cpu
