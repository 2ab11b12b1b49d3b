// Naive CPU twins of cuda/kernels/reduce.cu: one output at a time, double accumulation.
#include <echelon/tensor/cpu/reduce.h>

#include <cmath>
#include <limits>
#include <vector>

#include <echelon/base/error.h>

namespace echelon::cpu {

template <typename T>
void reduce(ReduceOp op, const T* x, StridedIndexer x_ix, T* out, int64_t outer, int64_t inner) {
  for (int64_t o = 0; o < outer; ++o) {
    double acc = 0.0;
    if (op == ReduceOp::Max) acc = -std::numeric_limits<double>::infinity();
    if (op == ReduceOp::Min) acc = std::numeric_limits<double>::infinity();
    for (int64_t r = 0; r < inner; ++r) {
      const double v = x[strided_offset(x_ix, o * inner + r)];
      switch (op) {
        case ReduceOp::Sum:
        case ReduceOp::Mean:
          acc += v;
          break;
        case ReduceOp::Max:
          acc = (std::isnan(v) || v > acc) ? v : acc;
          break;
        case ReduceOp::Min:
          acc = (std::isnan(v) || v < acc) ? v : acc;
          break;
      }
      if (std::isnan(acc) && (op == ReduceOp::Max || op == ReduceOp::Min)) break;
    }
    if (op == ReduceOp::Mean) acc /= static_cast<double>(inner);
    out[o] = static_cast<T>(acc);
  }
}

template <typename T>
void argmax(const T* x, StridedIndexer x_ix, int64_t* out, int64_t outer, int64_t inner) {
  for (int64_t o = 0; o < outer; ++o) {
    int64_t best = 0;
    T best_value = x[strided_offset(x_ix, o * inner)];
    for (int64_t r = 1; r < inner && !std::isnan(best_value); ++r) {
      const T v = x[strided_offset(x_ix, o * inner + r)];
      if (std::isnan(v) || v > best_value) {
        best = r;
        best_value = v;
      }
    }
    out[o] = best;
  }
}

template <typename T>
void step_statistics(const T* logits, const int64_t* targets, int64_t n, int64_t classes,
                     const T* loss, T* guard, T* correct) {
  StridedIndexer row_ix;  // one contiguous row
  row_ix.rank = 1;
  row_ix.sizes[0] = classes;
  row_ix.strides[0] = 1;
  int64_t hits = 0;
  for (int64_t row = 0; row < n; ++row) {
    int64_t best = 0;
    argmax(logits + row * classes, row_ix, &best, 1, classes);
    hits += best == targets[row] ? 1 : 0;
  }
  *correct = static_cast<T>(hits);
  *guard = *guard + T(0) * *loss;
}

namespace {
// Index of element (o, d, i) in a contiguous (outer, dim_size, inner) buffer.
inline int64_t at(int64_t o, int64_t d, int64_t i, int64_t dim_size, int64_t inner) {
  return (o * dim_size + d) * inner + i;
}

template <typename T>
void softmax_impl(const T* x, T* y, int64_t outer, int64_t dim_size, int64_t inner, bool log) {
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      double max_value = -std::numeric_limits<double>::infinity();
      for (int64_t d = 0; d < dim_size; ++d)
        max_value = std::max<double>(max_value, x[at(o, d, i, dim_size, inner)]);
      double total = 0.0;
      for (int64_t d = 0; d < dim_size; ++d)
        total += std::exp(static_cast<double>(x[at(o, d, i, dim_size, inner)]) - max_value);
      const double log_total = std::log(total);
      for (int64_t d = 0; d < dim_size; ++d) {
        const double shifted = static_cast<double>(x[at(o, d, i, dim_size, inner)]) - max_value;
        y[at(o, d, i, dim_size, inner)] =
            static_cast<T>(log ? shifted - log_total : std::exp(shifted) / total);
      }
    }
  }
}
}  // namespace

template <typename T>
void softmax(const T* x, T* y, int64_t outer, int64_t dim_size, int64_t inner) {
  softmax_impl(x, y, outer, dim_size, inner, /*log=*/false);
}

template <typename T>
void log_softmax(const T* x, T* y, int64_t outer, int64_t dim_size, int64_t inner) {
  softmax_impl(x, y, outer, dim_size, inner, /*log=*/true);
}

template <typename T>
void softmax_backward(const T* grad_out, const T* y, T* grad_in, int64_t outer, int64_t dim_size,
                      int64_t inner) {
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      double dot = 0.0;
      for (int64_t d = 0; d < dim_size; ++d) {
        const int64_t k = at(o, d, i, dim_size, inner);
        dot += static_cast<double>(grad_out[k]) * y[k];
      }
      for (int64_t d = 0; d < dim_size; ++d) {
        const int64_t k = at(o, d, i, dim_size, inner);
        grad_in[k] = static_cast<T>(y[k] * (grad_out[k] - dot));
      }
    }
  }
}

template <typename T>
void log_softmax_backward(const T* grad_out, const T* y, T* grad_in, int64_t outer,
                          int64_t dim_size, int64_t inner) {
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      double total = 0.0;
      for (int64_t d = 0; d < dim_size; ++d) total += grad_out[at(o, d, i, dim_size, inner)];
      for (int64_t d = 0; d < dim_size; ++d) {
        const int64_t k = at(o, d, i, dim_size, inner);
        grad_in[k] = static_cast<T>(grad_out[k] - std::exp(static_cast<double>(y[k])) * total);
      }
    }
  }
}

// T names a type below, and a type cannot be parenthesised.
// NOLINTBEGIN(bugprone-macro-parentheses)
#define ECH_REDUCE_TWINS(T)                                                                       \
  template void reduce<T>(ReduceOp, const T*, StridedIndexer, T*, int64_t, int64_t);              \
  template void argmax<T>(const T*, StridedIndexer, int64_t*, int64_t, int64_t);                  \
  template void step_statistics<T>(const T*, const int64_t*, int64_t, int64_t, const T*, T*, T*); \
  template void softmax<T>(const T*, T*, int64_t, int64_t, int64_t);                              \
  template void log_softmax<T>(const T*, T*, int64_t, int64_t, int64_t);                          \
  template void softmax_backward<T>(const T*, const T*, T*, int64_t, int64_t, int64_t);           \
  template void log_softmax_backward<T>(const T*, const T*, T*, int64_t, int64_t, int64_t);
ECH_REDUCE_TWINS(float)
ECH_REDUCE_TWINS(double)
// NOLINTEND(bugprone-macro-parentheses)

}  // namespace echelon::cpu
