// Lock-free bounded rings that join the pipeline's threads.
//
// SpscRing: one producer thread, one consumer thread. Head (consumer index) and tail (producer
// index) live on separate cache lines, and each side keeps a cached copy of the other side's
// index so it touches the shared line only when the cached value says full/empty. The data path
// uses acquire/release only.
//
// MpmcRing: bounded multi-producer multi-consumer queue after Dmitry Vyukov: every slot carries
// a sequence number that says whether it is ready for the producer or the consumer of a given
// lap, so producers and consumers claim slots with one CAS each and never take a lock.
//
// Both: try_push/try_pop never block. push/pop spin briefly, then park on a futex
// (data/futex.h), so an idle stage costs no CPU. A producer parked on a full ring is woken once
// the ring has drained to half, not by the first pop: when the consumer is the bottleneck (the
// trainer, usually) the producer then wakes once per half ring instead of once per item, and a
// loader thread that wakes takes a core from the training step each time. close() ends the stream:
// consumers drain what is left and then see end-of-stream (pop returns nullopt); MpmcRing's pushes
// fail at once, SpscRing's once the ring is full (see SpscRing). Element types may be move-only.
// Whether anyone sleeps is a Dekker handshake between publisher and sleeper; with asymmetric fences
// (data/asymmetric_fence.h) the publisher's half is a compiler barrier plus one load of a
// rarely-written line, and the sleeper pays a membarrier system call. So a push or pop costs what a
// textbook lock-free ring costs; the data never goes through a lock. A ring that parks often but
// publishes rarely can choose a fence per publish instead (WakeCheck::Fenced) and spare the other
// cores membarrier's interrupts.
#pragma once

#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <optional>
#include <type_traits>
#include <utility>

#include <echelon/base/error.h>
#include <echelon/data/asymmetric_fence.h>
#include <echelon/data/futex.h>

namespace echelon::data {

inline constexpr size_t kCacheLine = 64;
// Lines written by different threads keep this far apart: Zen 4 and recent Intel cores prefetch
// the adjacent line of a 128-byte pair, so two hot lines in one pair still ping-pong.
inline constexpr size_t kFalseSharingRange = 128;

// How a ring's publishers find out whether anyone sleeps (the Dekker check in detail::Parker).
enum class WakeCheck : uint8_t {
  // A compiler barrier per publish; a thread about to park pays a membarrier system call, which
  // interrupts every core running a thread of this process (without membarrier: Fenced). For
  // rings whose items cost nanoseconds: the fast path costs what a textbook ring's costs.
  Asymmetric,
  // A full fence per publish; parking costs a plain fence. For rings with few publishes and
  // frequent parks (the loader's batch rings: one item per batch): a fence is noise there, while
  // each park's membarrier would interrupt the training step's threads on the other cores. Not
  // for busy rings: the fence costs ~25 ns a publish, far more while the other side spins.
  Fenced,
};

namespace detail {

// Rounds a requested capacity up to a power of two (so index -> slot is a mask).
inline size_t ring_capacity(size_t requested, const char* ring) {
  ECH_CHECK(requested >= 1 && requested <= (size_t{1} << 30), ring, ": capacity ", requested,
            " must be in [1, 2^30]");
  asymmetric_fences_enabled();  // fixes the fence mode before the ring's first operation
  return std::bit_ceil(requested);
}

// Sleep/wake handshake for one direction of a ring ("not empty" or "not full").
//
// A sleeper announces itself (sleepers_ += 1), then re-checks the ring; a publisher, after
// publishing, looks at sleepers_ (the Dekker pair, made cheap for the publisher by the
// asymmetric fences). The first publisher that sees an announcement TAKES all of them
// (exchange to 0) and wakes everyone; later publishers see 0 and make no system call. So a burst
// of pushes into a ring whose consumer is still waking up costs one futex wake, not one per push
// (on a loaded machine that wake-up takes milliseconds). An announcement is never withdrawn (a
// decrement could remove another sleeper's announcement and lose its wake-up): a sleeper that finds
// the ring ready leaves a stale count, which costs one spurious wake later, never a lost one.
//
// Without membarrier the publisher needs a real fence before it reads the count. That case is a
// bit in the count (kFencedPublish), so the fast path tests one word either way: with the bit set
// every publish takes the slow path, fences, and reads the count again. The word sits on a line
// written only when someone parks or is woken, so the publisher's read is a cache hit.
class Parker {
 public:
  explicit Parker(WakeCheck check)
      : sleepers_(check == WakeCheck::Asymmetric && asymmetric_fences_enabled() ? 0
                                                                                : kFencedPublish) {}

  // Blocks until ready() is true; ready() is re-checked after announcing the sleep, so a wake
  // between the check and the sleep is never lost.
  template <typename Ready>
  void park_until(Ready&& ready) {
    for (;;) {
      const uint32_t seen = epoch_.load(std::memory_order_acquire);
      // Release: a waker that takes this announcement also sees `seen`, so its epoch increment
      // comes after it and the wait below returns.
      // The count, below kFencedPublish. Then the fence that pairs with the publisher's: one of
      // us sees the other's store.
      const uint32_t before = sleepers_.fetch_add(1, std::memory_order_acq_rel);
      if ((before & kFencedPublish) != 0)
        symmetric_fence_sleeper();  // the publisher fences too (wake_slow)
      else
        asymmetric_fence_heavy();  // the publisher's is a compiler barrier
      if (ready()) return;
      futex_wait(epoch_, seen);
      if (ready()) return;
    }
  }
  // Called after publishing: wakes sleepers, if any.
  void wake() {
    asymmetric_fence_light();
    if (sleepers_.load(std::memory_order_relaxed) != 0) [[unlikely]]
      wake_slow();
  }
  // Like wake(), for sleepers whose ready() asks for more than one change: wakes them only once
  // enough() is true (it must be true whenever their ready() is). A publish that finds sleepers
  // but not enough leaves the announcement for a later publish.
  template <typename Enough>
  void wake_when(Enough&& enough) {
    asymmetric_fence_light();
    if (sleepers_.load(std::memory_order_relaxed) != 0) [[unlikely]]
      if (enough()) wake_slow();
  }
  // close(): wakes everyone, announced or about to announce.
  void wake_all() {
    sleepers_.fetch_and(kFencedPublish, std::memory_order_relaxed);
    epoch_.fetch_add(1, std::memory_order_acq_rel);
    futex_wake_all(epoch_);
  }
  // Announced sleepers not yet woken (may include stale announcements); for tests.
  uint32_t sleepers() const { return sleepers_.load(std::memory_order_relaxed) & ~kFencedPublish; }

 private:
  static constexpr uint32_t kFencedPublish = 0x80000000u;

  // Out of line and cold: inlined, its atomics and system call made the compiler save registers
  // on every push and pop, on the fast path.
  [[gnu::noinline, gnu::cold]] void wake_slow() {
    if ((sleepers_.load(std::memory_order_relaxed) & kFencedPublish) != 0) {
      symmetric_fence();
      if (sleepers_.load(std::memory_order_relaxed) == kFencedPublish) return;  // nobody sleeps
    }
    // Take every announcement (keeping the mode bit); zero: another waker took them.
    if ((sleepers_.fetch_and(kFencedPublish, std::memory_order_acq_rel) & ~kFencedPublish) == 0)
      return;
    epoch_.fetch_add(1, std::memory_order_acq_rel);
    futex_wake_all(epoch_);
  }

  std::atomic<uint32_t> epoch_{0};
  std::atomic<uint32_t> sleepers_{0};
};

// Spin, then park: cheap when the other side is about to act, free when it is idle. No
// sched_yield: on an oversubscribed machine a yield can hand the core away for a whole time
// slice, while a parked thread is woken by the very publish it waits for.
// attempt() returns true when done.
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

template <typename Try, typename Ready>
void blocking(Try&& attempt, Ready&& ready, Parker& parker) {
  constexpr int kSpins = 64;
  for (int i = 0;; ++i) {
    if (attempt()) return;
    if (i < kSpins) {
      cpu_relax();
      continue;
    }
    parker.park_until(ready);  // then try again; park again if another thread won
  }
}

// Raw storage for one element (no default constructor needed, move-only types allowed).
template <typename T>
struct Cell {
  alignas(T) unsigned char bytes[sizeof(T)];
  T* get() { return std::launder(reinterpret_cast<T*>(bytes)); }
};

}  // namespace detail

// SpscRing reads `closed` only where it must wait anyway (push on a full ring, pop on an empty
// one), so a push or pop that succeeds touches only its own line, the cells and the other side's
// sleeper word (a line written only when that side parks). The price: after close(), a push may
// still succeed while the ring has room. The item is then delivered to a consumer that has not yet
// seen end-of-stream, or destroyed with the ring: a `true` from a push after close() promises
// nothing. The rings' users close a ring after their last push, or to abort (when undelivered
// items are dropped anyway); an aborted producer stops at the latest when the ring is full.
//
// Against a textbook SPSC queue (bench/reference_spsc.h) the fast path differs by exactly the
// sleeper check after the index store: one load of a line nobody writes while both sides run, a
// test and a branch (3 instructions per push and per pop; objdump of exp_ring_pair). Why it must
// be there, on every publish: a consumer sleeps only after announcing and re-reading tail_, and
// a publish that lands after that re-read is seen only by the publisher's own later load of the
// announcement (Dekker). A load at the NEXT push's entry (merged with the full test) would be
// just as correct but late: the wake would wait for the producer's next push, which may come
// much later (a decoder's next image) or never before close(). Nor can the producer skip the
// check when the ring "is not empty": it knows only a lower bound of head_ (its cached copy), so it
// can never rule out that the consumer has drained the ring and gone to sleep. A merged
// per-push check (room for the next item and no sleeper, one word) would need the next push's
// entry to test its outcome again. Measured cost (RESULTS.md, cpu21): ~2% of two-thread
// busy-spin throughput, ~20% when one thread pushes and pops (pure instruction count).
// The one other difference is off the fast path: a try_pop that finds the ring empty pauses
// before it returns (see try_pop), which more than pays for the check when both sides spin.
template <typename T>
class SpscRing {
 public:
  explicit SpscRing(size_t capacity, WakeCheck check = WakeCheck::Asymmetric)
      : capacity_(detail::ring_capacity(capacity, "SpscRing")),
        mask_(capacity_ - 1),
        cells_(std::make_unique<detail::Cell<T>[]>(capacity_)),
        not_empty_(check),
        not_full_(check) {}
  ~SpscRing() {
    for (size_t i = head_.load(); i != tail_.load(); ++i) cells_[i & mask_].get()->~T();
  }
  SpscRing(const SpscRing&) = delete;
  SpscRing& operator=(const SpscRing&) = delete;

  size_t capacity() const { return capacity_; }
  // Approximate while both sides run; exact when they are quiet.
  size_t size() const {
    const size_t head = head_.load(std::memory_order_acquire);
    return tail_.load(std::memory_order_acquire) - head;
  }
  bool closed() const { return closed_.load(std::memory_order_acquire); }
  // Announced sleepers in pop() / push() (an upper bound on who sleeps right now); for tests.
  uint32_t parked_consumers() const { return not_empty_.sleepers(); }
  uint32_t parked_producers() const { return not_full_.sleepers(); }

  // Producer side. On failure (full, or full and closed) `value` is left untouched.
  bool try_push(T& value) {
    const size_t tail = tail_.load(std::memory_order_relaxed);
    if (tail == push_limit_) [[unlikely]] {  // full as far as the producer knows: look again
      push_limit_ = head_.load(std::memory_order_acquire) + capacity_;
      if (tail == push_limit_) return false;
    }
    new (cells_[tail & mask_].bytes) T(std::move(value));
    tail_.store(tail + 1, std::memory_order_release);
    not_empty_.wake();
    return true;
  }
  bool try_push(T&& value) { return try_push(value); }
  // Blocks while full (once parked, until half the ring is free). Returns false when the ring is
  // full and closed; the value is dropped.
  bool push(T value) {
    bool pushed = false;
    detail::blocking([&] { return (pushed = try_push(value)) || closed(); },
                     [&] { return closed() || half_free(); }, not_full_);
    return pushed;
  }

  // Consumer side.
  std::optional<T> try_pop() {
    const size_t head = head_.load(std::memory_order_relaxed);
    if (head == cached_tail_) [[unlikely]] {
      cached_tail_ = tail_.load(std::memory_order_acquire);
      if (head == cached_tail_) {
        // Back off before the caller polls again (FastForward's "temporal slipping"): a consumer
        // that re-reads tail_ at once pulls the producer's line away after every single push, so
        // the two run in lockstep, one line transfer per item. A pause lets the producer publish
        // several items per transfer (bench/RESULTS.md, session 23: 1.5-1.7x the textbook queue,
        // whose try_pop has no pause).
        detail::cpu_relax();
        return std::nullopt;
      }
    }
    T* cell = cells_[head & mask_].get();
    std::optional<T> value(std::move(*cell));
    cell->~T();
    head_.store(head + 1, std::memory_order_release);
    not_full_.wake_when(
        [&] { return tail_.load(std::memory_order_acquire) - (head + 1) <= capacity_ / 2; });
    return value;
  }
  // Blocks while empty; nullopt once the ring is closed and drained.
  std::optional<T> pop() {
    std::optional<T> result;
    detail::blocking(
        [&] {
          if ((result = try_pop())) return true;
          if (!closed()) return false;
          // Closed: look once more, now that everything pushed before close() is visible.
          result = try_pop();
          return true;
        },
        [&] { return closed() || has_items(); }, not_empty_);
    return result;
  }

  // Ends the stream and wakes every sleeper. Call it after the last push (or to abort).
  void close() {
    closed_.store(true, std::memory_order_release);
    not_empty_.wake_all();
    not_full_.wake_all();
  }

 private:
  // A parked producer's condition: at most half the ring is full.
  bool half_free() const {
    return tail_.load(std::memory_order_relaxed) - head_.load(std::memory_order_acquire) <=
           capacity_ / 2;
  }
  bool has_items() const {
    return head_.load(std::memory_order_relaxed) != tail_.load(std::memory_order_acquire);
  }

  const size_t capacity_;
  const size_t mask_;
  std::unique_ptr<detail::Cell<T>[]> cells_;
  // Consumer-owned line: its index and its cached view of the producer's index.
  alignas(kFalseSharingRange) std::atomic<size_t> head_{0};
  size_t cached_tail_ = 0;
  // Producer-owned line. push_limit_ = the consumer's index as last seen + capacity: the tail
  // the producer may fill up to without looking at head_ (one compare on the fast path).
  alignas(kFalseSharingRange) std::atomic<size_t> tail_{0};
  size_t push_limit_ = capacity_;
  // Read-mostly from here on (closed_ and the sleeper words are written only by close() and by a
  // side that parks), so these may share a 128-byte pair with each other, not with the indices.
  alignas(kFalseSharingRange) std::atomic<bool> closed_{false};
  alignas(kCacheLine) detail::Parker not_empty_;
  alignas(kCacheLine) detail::Parker not_full_;
};

template <typename T>
class MpmcRing {
 public:
  // At least 2 slots: a slot's sequence number tells "written on lap L" (pos + 1) from "free for
  // the next lap" (pos + capacity) only when capacity > 1; with one slot a second push took the
  // full slot for a free one and overwrote its item (a distributed gpipe run lost a flush and
  // hung).
  explicit MpmcRing(size_t capacity, WakeCheck check = WakeCheck::Asymmetric)
      : capacity_(detail::ring_capacity(capacity == 1 ? 2 : capacity, "MpmcRing")),
        mask_(capacity_ - 1),
        slots_(std::make_unique<Slot[]>(capacity_)),
        not_empty_(check),
        not_full_(check) {
    for (size_t i = 0; i < capacity_; ++i) slots_[i].sequence.store(i, std::memory_order_relaxed);
  }
  ~MpmcRing() {
    for (size_t i = dequeue_.load(); i != enqueue_.load(); ++i) slots_[i & mask_].cell.get()->~T();
  }
  MpmcRing(const MpmcRing&) = delete;
  MpmcRing& operator=(const MpmcRing&) = delete;

  size_t capacity() const { return capacity_; }
  size_t size() const {
    const size_t dequeue = dequeue_.load(std::memory_order_acquire);
    const size_t enqueue = enqueue_.load(std::memory_order_acquire);
    return enqueue > dequeue ? enqueue - dequeue : 0;
  }
  bool closed() const { return closed_.load(std::memory_order_acquire); }
  // Announced sleepers in pop() / push() (an upper bound on who sleeps right now); for tests.
  uint32_t parked_consumers() const { return not_empty_.sleepers(); }
  uint32_t parked_producers() const { return not_full_.sleepers(); }

  // On failure (full or closed) `value` is left untouched.
  bool try_push(T& value) {
    if (closed()) return false;
    size_t pos = enqueue_.load(std::memory_order_relaxed);
    Slot* slot;
    for (;;) {
      slot = &slots_[pos & mask_];
      const size_t sequence = slot->sequence.load(std::memory_order_acquire);
      const auto lap = static_cast<std::ptrdiff_t>(sequence - pos);
      if (lap == 0) {
        if (enqueue_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) break;
      } else if (lap < 0) {
        return false;  // the slot still holds last lap's item: full
      } else {
        pos = enqueue_.load(std::memory_order_relaxed);
      }
    }
    new (slot->cell.bytes) T(std::move(value));
    slot->sequence.store(pos + 1, std::memory_order_release);
    not_empty_.wake();
    return true;
  }
  bool try_push(T&& value) { return try_push(value); }
  // Blocks while full (once parked, until half the ring is free); false once closed.
  bool push(T value) {
    bool pushed = false;
    detail::blocking([&] { return (pushed = try_push(value)) || closed(); },
                     [&] { return closed() || size() <= capacity_ / 2; }, not_full_);
    return pushed;
  }

  std::optional<T> try_pop() {
    size_t pos = dequeue_.load(std::memory_order_relaxed);
    Slot* slot;
    for (;;) {
      slot = &slots_[pos & mask_];
      const size_t sequence = slot->sequence.load(std::memory_order_acquire);
      const auto lap = static_cast<std::ptrdiff_t>(sequence - (pos + 1));
      if (lap == 0) {
        if (dequeue_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) break;
      } else if (lap < 0) {
        return std::nullopt;  // not yet written this lap: empty
      } else {
        pos = dequeue_.load(std::memory_order_relaxed);
      }
    }
    T* cell = slot->cell.get();
    std::optional<T> value(std::move(*cell));
    cell->~T();
    slot->sequence.store(pos + capacity_, std::memory_order_release);
    // size() reads this consumer's own dequeue_ increment at least, so the pop that drains the
    // ring to half (or the last one, when pushes race with it) sees it.
    not_full_.wake_when([&] { return size() <= capacity_ / 2; });
    return value;
  }
  std::optional<T> pop() {
    std::optional<T> result;
    detail::blocking(
        [&] {
          const bool was_closed = closed();
          result = try_pop();
          return result.has_value() || was_closed;
        },
        [&] { return closed() || has_items(); }, not_empty_);
    return result;
  }

  // Ends the stream once every producer is done (or to abort) and wakes every sleeper.
  void close() {
    closed_.store(true, std::memory_order_release);
    not_empty_.wake_all();
    not_full_.wake_all();
  }

 private:
  struct Slot {
    std::atomic<size_t> sequence;
    detail::Cell<T> cell;
  };
  bool has_items() const {
    const size_t pos = dequeue_.load(std::memory_order_relaxed);
    return slots_[pos & mask_].sequence.load(std::memory_order_acquire) == pos + 1;
  }

  const size_t capacity_;
  const size_t mask_;
  std::unique_ptr<Slot[]> slots_;
  alignas(kFalseSharingRange) std::atomic<size_t> enqueue_{0};
  alignas(kFalseSharingRange) std::atomic<size_t> dequeue_{0};
  alignas(kFalseSharingRange) std::atomic<bool> closed_{false};
  alignas(kCacheLine) detail::Parker not_empty_;
  alignas(kCacheLine) detail::Parker not_full_;
};

}  // namespace echelon::data
