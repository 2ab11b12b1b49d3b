#include <echelon/tensor/storage.h>

#include <mutex>
#include <vector>

#include <echelon/base/error.h>

#if ECHELON_WITH_CUDA
#include <echelon/cuda/allocator.h>
#include <echelon/cuda/stream.h>
#endif

namespace echelon {
namespace {

#if ECHELON_WITH_CUDA
class PinnedAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes) override { return nbytes ? cuda::pinned_malloc(nbytes) : nullptr; }
  void deallocate(void* ptr, size_t) override {
    if (ptr) cuda::pinned_free(ptr);
  }
  Device device() const override { return Device::cpu(); }
};

class CudaAllocator final : public Allocator {
 public:
  explicit CudaAllocator(int index) : index_(index) {}
  void* allocate(size_t nbytes) override {
    if (nbytes == 0) return nullptr;
    return cuda::device_malloc(index_, nbytes, cuda::current_stream(index_));
  }
  // The dying tensor's last kernels may be queued on the freeing thread's stream, which need not
  // be the stream the block came from (a loader batch freed by the trainer): the allocator then
  // holds the block back until that stream's work is done.
  void deallocate(void* ptr, size_t) override {
    if (ptr) cuda::device_free(index_, ptr, cuda::current_stream(index_));
  }
  Device device() const override { return Device::cuda(index_); }

 private:
  int index_;
};
#endif

}  // namespace

Allocator* pinned_allocator() {
#if ECHELON_WITH_CUDA
  static PinnedAllocator allocator;
  return &allocator;
#else
  ECH_FAIL("pinned_allocator: Echelon was built without CUDA, so there is no pinned memory");
#endif
}

Allocator* cuda_allocator(int index) {
#if ECHELON_WITH_CUDA
  const int count = cuda::device_count();
  ECH_CHECK(index >= 0 && index < count, "cuda_allocator: device cuda:", index, " does not exist (",
            count, " CUDA device(s) visible)");
  // One allocator object per device, created on first use and never freed (tensors in static
  // objects may release memory during exit).
  // The vector is never freed either: destroyed at exit, it left its allocators unreachable
  // (LeakSanitizer in the emulation build).
  static std::mutex mutex;
  static auto* allocators = new std::vector<Allocator*>();
  std::lock_guard<std::mutex> lock(mutex);
  if (allocators->empty()) allocators->resize(static_cast<size_t>(count), nullptr);
  if (!(*allocators)[index]) (*allocators)[index] = new CudaAllocator(index);
  return (*allocators)[index];
#else
  ECH_FAIL("cuda_allocator: cannot allocate on cuda:", index, ": Echelon was built without CUDA");
#endif
}

Allocator* allocator_for(Device device, bool pinned) {
  if (device.is_cuda()) return cuda_allocator(device.index);
  return pinned ? pinned_allocator() : cpu_allocator();
}

Storage::Storage(size_t nbytes, Allocator* allocator, bool pinned)
    : nbytes_(nbytes), allocator_(allocator), pinned_(pinned) {
  ECH_CHECK(allocator != nullptr, "Storage: null allocator");
  data_ = allocator_->allocate(nbytes);
}

Storage::~Storage() {
  if (data_) allocator_->deallocate(data_, nbytes_);
}

}  // namespace echelon
