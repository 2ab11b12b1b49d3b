// Per-thread scratch buffers of the fast CPU path: they grow to the largest request and stay, so
// a training step's kernels allocate nothing once the first step has run.
#pragma once

#include <cstddef>
#include <vector>

namespace echelon::cpu::fast {

// A buffer of at least `count` T for slot `slot` (0..3) of the calling thread. Contents are
// undefined; the pointer stays valid until the same thread asks the same slot for more.
template <typename T>
T* scratch(int slot, size_t count) {
  thread_local std::vector<T> buffers[4];
  std::vector<T>& buffer = buffers[slot];
  if (buffer.size() < count) buffer.resize(count);
  return buffer.data();
}

}  // namespace echelon::cpu::fast
