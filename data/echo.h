// Data echoing (Choi et al. 2019, "Faster Neural Network Training with Data Echoing"): repeat
// each item e times so a consumer R times faster than the upstream stages stays busy. Helpers
// for the copy count, the automatic factor and the shuffle buffer that spreads copies apart.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include <echelon/base/error.h>
#include <echelon/data/random_keys.h>

namespace echelon::data {

// Copies of item `key` under echo factor e >= 1: floor(e), plus one more with probability
// frac(e) (a seeded Bernoulli draw, so the mean is e and a rerun makes the same choices).
inline int64_t echo_copies(double factor, uint64_t seed, int64_t epoch, int64_t key) {
  const double whole = std::floor(factor);
  const double fraction = factor - whole;
  const double u = unit_uniform(data_draw(seed, epoch, DrawPurpose::Echo, key).x[0]);
  return static_cast<int64_t>(whole) + (u < fraction ? 1 : 0);
}

// echo = auto: e tracks R = downstream rate / upstream rate, bounded to [1, 8]. The n-th
// measurement moves e by max(1/n, kSmoothing) of the way to clamp(R): the first one sets e at
// once (a warm-up that starts from e = 1 would under-feed the consumer for ~15 batches), the next
// few average, later ones follow an EMA so one slow step does not swing it. Each step moves e
// only part of the way towards the target, so e never overshoots a steady R.
class AutoEcho {
 public:
  static constexpr double kMin = 1.0, kMax = 8.0, kSmoothing = 0.2;
  double factor() const { return factor_; }
  int64_t measurements() const { return measurements_; }
  // Rates in items/s; non-positive rates (not yet measured) leave the factor alone.
  double update(double upstream_rate, double downstream_rate) {
    if (upstream_rate <= 0 || downstream_rate <= 0) return factor_;
    const double target = std::clamp(downstream_rate / upstream_rate, kMin, kMax);
    ++measurements_;
    const double weight = std::max(kSmoothing, 1.0 / static_cast<double>(measurements_));
    factor_ = std::clamp(factor_ + weight * (target - factor_), kMin, kMax);
    return factor_;
  }

 private:
  double factor_ = 1.0;
  int64_t measurements_ = 0;
};

// Holds up to `capacity` items and releases a uniformly chosen one for each item added once full,
// so copies of one example that arrive together leave spread over ~capacity positions.
// Draws are keyed by (seed, epoch, draw number): deterministic for a given arrival order.
template <typename T>
class ShuffleBuffer {
 public:
  ShuffleBuffer(int64_t capacity, uint64_t seed, int64_t epoch)
      : capacity_(capacity), seed_(seed), epoch_(epoch) {
    ECH_CHECK(capacity >= 0, "shuffle buffer: capacity ", capacity, " < 0");
    // Grown as items arrive: a capacity beyond the epoch (--shuffle-buffer 1e11) holds the whole
    // epoch instead of failing with bad_alloc before the first item.
    items_.reserve(static_cast<size_t>(std::min<int64_t>(capacity, 4096)));
  }
  // Adds `item`; returns an item to pass on when the buffer was full (capacity 0: `item` itself).
  std::optional<T> add(T item) {
    if (static_cast<int64_t>(items_.size()) < capacity_) {
      items_.push_back(std::move(item));
      return std::nullopt;
    }
    if (capacity_ == 0) return item;
    const size_t pick = draw(items_.size());
    T out = std::move(items_[pick]);
    items_[pick] = std::move(item);
    return out;
  }
  // At end of stream: the remaining items, in random order, one per call.
  std::optional<T> drain() {
    if (items_.empty()) return std::nullopt;
    const size_t pick = draw(items_.size());
    T out = std::move(items_[pick]);
    items_[pick] = std::move(items_.back());
    items_.pop_back();
    return out;
  }
  size_t size() const { return items_.size(); }

 private:
  size_t draw(size_t n) {
    const Philox4 w = data_draw(seed_, epoch_, DrawPurpose::ShuffleBuffer, draws_++);
    return static_cast<size_t>(((uint64_t{w.x[0]} << 32) | w.x[1]) % n);
  }
  int64_t capacity_;
  uint64_t seed_;
  int64_t epoch_;
  int64_t draws_ = 0;
  std::vector<T> items_;
};

}  // namespace echelon::data
