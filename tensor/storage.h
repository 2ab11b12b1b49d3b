// Reference-counted byte buffers and the allocators that make them. A Storage knows which
// allocator freed-to-be its bytes; views share one Storage.
#pragma once

#include <cstddef>
#include <memory>

#include <echelon/tensor/device.h>

namespace echelon {

class Allocator {
 public:
  virtual ~Allocator() = default;
  // Returns nbytes of memory (nbytes may be 0: a valid, unique, non-null pointer or nullptr).
  // Throws echelon::Error when memory is exhausted, naming the size and the allocator's state.
  virtual void* allocate(size_t nbytes) = 0;
  virtual void deallocate(void* ptr, size_t nbytes) = 0;
  virtual Device device() const = 0;
};

// 64-byte aligned host memory (one cache line, one AVX-512 vector), cached for reuse
// (tensor/cpu_cache.h).
Allocator* cpu_allocator();
// Page-locked host memory for asynchronous host<->device copies. Throws in a CPU-only build.
Allocator* pinned_allocator();
// The caching allocator of CUDA device `index` (see cuda/allocator.h). Throws in a CPU-only build.
Allocator* cuda_allocator(int index);
// The allocator a fresh tensor on `device` uses.
Allocator* allocator_for(Device device, bool pinned = false);

class Storage {
 public:
  Storage(size_t nbytes, Allocator* allocator, bool pinned = false);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return allocator_->device(); }
  bool pinned() const { return pinned_; }
  Allocator* allocator() const { return allocator_; }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Allocator* allocator_;
  bool pinned_;
};

}  // namespace echelon
