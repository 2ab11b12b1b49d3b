#include <echelon/tensor/shape.h>

#include <algorithm>

#include <echelon/base/error.h>

namespace echelon {

namespace {

// a * b, or an error naming the shape when it does not fit int64 (a corrupt file header can ask
// for 2^32 x 2^32 elements; wrapping would give a small, wrong size).
int64_t checked_product(int64_t a, int64_t b, const Shape& shape) {
  int64_t product = 0;
  ECH_CHECK(!__builtin_mul_overflow(a, b, &product), "shape ", shape,
            " has more elements than int64 can count");
  return product;
}

}  // namespace

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n = checked_product(n, s, shape);
  return n;
}

Strides contiguous_strides(const Shape& shape) {
  Strides strides(shape.size());
  int64_t running = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = running;
    running = checked_product(running, std::max<int64_t>(shape[i], 1), shape);
  }
  return strides;
}

int64_t wrap_dim(int64_t dim, int64_t rank, const char* op) {
  // A scalar accepts dim 0 and -1, as in PyTorch.
  const int64_t effective = std::max<int64_t>(rank, 1);
  ECH_CHECK(dim >= -effective && dim < effective, op, ": dim ", dim,
            " is out of range for a tensor of rank ", rank, " (expected [", -effective, ", ",
            effective - 1, "])");
  return dim < 0 ? dim + effective : dim;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  const size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    const int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    const int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    ECH_CHECK(da == db || da == 1 || db == 1, op, ": shapes ", a, " and ", b,
              " cannot be broadcast together (dim ", i, ": ", da, " vs ", db, ")");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

std::string shape_str(const Shape& shape) {
  return str(shape);
}

}  // namespace echelon
