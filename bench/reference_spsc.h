// The textbook fastest single-producer single-consumer queue, the peer the Echelon SpscRing is
// measured against (bench_ring, exp_ring_pair): two indices on separate cache lines, each side's
// cached copy of the other side's index beside its own, acquire/release only; no close, no
// parking. Same separation as SpscRing (echelon::data::kFalseSharingRange: 128 bytes, since Zen 4
// and Intel prefetch lines in adjacent pairs), the same slot storage (a heap array), and a
// one-compare full test like SpscRing's (the limit instead of `tail - head > mask`), so the two
// differ only in what SpscRing adds for parking.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <optional>

#include <echelon/data/ring.h>

namespace echelon::bench {

template <typename T>
class ReferenceSpsc {
 public:
  explicit ReferenceSpsc(size_t capacity)
      : capacity_(capacity), mask_(capacity - 1), slots_(std::make_unique<T[]>(capacity)) {}
  bool try_push(const T& value) {
    const size_t tail = tail_.load(std::memory_order_relaxed);
    if (tail == push_limit_) [[unlikely]] {
      push_limit_ = head_.load(std::memory_order_acquire) + capacity_;
      if (tail == push_limit_) return false;
    }
    slots_[tail & mask_] = value;
    tail_.store(tail + 1, std::memory_order_release);
    return true;
  }
  std::optional<T> try_pop() {
    const size_t head = head_.load(std::memory_order_relaxed);
    if (head == cached_tail_) [[unlikely]] {
      cached_tail_ = tail_.load(std::memory_order_acquire);
      if (head == cached_tail_) return std::nullopt;
    }
    std::optional<T> value(slots_[head & mask_]);
    head_.store(head + 1, std::memory_order_release);
    return value;
  }

 private:
  static constexpr size_t kLine = echelon::data::kFalseSharingRange;
  const size_t capacity_;
  const size_t mask_;
  std::unique_ptr<T[]> slots_;
  alignas(kLine) std::atomic<size_t> head_{0};
  size_t cached_tail_ = 0;
  alignas(kLine) std::atomic<size_t> tail_{0};
  size_t push_limit_ = capacity_;
  char pad_[kLine - 2 * sizeof(size_t)];  // the next object does not share the producer's lines
};

}  // namespace echelon::bench
