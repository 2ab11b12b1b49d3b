// CUDA emulation: what ECH_LAUNCH (cuda/launch.h) expands to. `Launch(name, ..., kernel)(args)`
// converts the arguments to the kernel's parameter types (as <<<>>> does), copies them, checks
// that pointer arguments point into device or pinned memory, and hands the launch to the
// scheduler.
#pragma once

#include <cstddef>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <echelon/cuda/sim/sim.h>

namespace echelon::cudasim {

template <typename... P>
class Launch {
 public:
  Launch(const char* name, const char* file, int line, dim3 grid, dim3 block, size_t smem,
         cudaStream_t stream, void (*kernel)(P...))
      : name_(name),
        file_(file),
        line_(line),
        grid_(grid),
        block_(block),
        smem_(smem),
        stream_(stream),
        kernel_(kernel) {}

  template <typename... A>
  void operator()(A&&... args) const {
    static_assert(sizeof...(A) == sizeof...(P), "wrong number of kernel arguments");
    std::tuple<std::decay_t<P>...> values(std::forward<A>(args)...);
    std::vector<detail::PointerArg> pointers;
    int position = 0;
    std::apply([&](const auto&... v) { (collect(pointers, position++, v), ...); }, values);
    detail::launch(name_, reinterpret_cast<const void*>(kernel_), file_, line_, grid_, block_,
                   smem_, stream_, std::move(pointers),
                   [kernel = kernel_, values] { std::apply(kernel, values); });
  }

 private:
  template <typename T>
  static void collect(std::vector<detail::PointerArg>& out, int position, const T& value) {
    if constexpr (std::is_pointer_v<T>) out.push_back({position, static_cast<const void*>(value)});
  }

  const char* name_;
  const char* file_;
  int line_;
  dim3 grid_, block_;
  size_t smem_;
  cudaStream_t stream_;
  void (*kernel_)(P...);
};

}  // namespace echelon::cudasim
