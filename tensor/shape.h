// Shapes and strides (in elements). Negative dims count from the end, as in PyTorch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace echelon {

using Shape = std::vector<int64_t>;
using Strides = std::vector<int64_t>;

int64_t shape_numel(const Shape& shape);
Strides contiguous_strides(const Shape& shape);
// Maps dim in [-rank, rank) to [0, rank); throws naming `op` when out of range.
int64_t wrap_dim(int64_t dim, int64_t rank, const char* op);
// NumPy broadcasting of two shapes; throws naming `op` and both shapes when incompatible.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);
std::string shape_str(const Shape& shape);  // "[2, 3, 4]"

}  // namespace echelon
