// CUDA emulation: the scheduler's knobs, process-wide: the order in which a block's threads run
// (ECHELON_CUDASIM_ORDER or set_order; cuda/sim/sim.h) and the grid cap
// (ECHELON_CUDASIM_GRID_CAP or set_grid_cap), read by every launch (scheduler.cpp).
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <string>

#include <echelon/cuda/sim/internal.h>
#include <echelon/cuda/sim/sim.h>

namespace echelon::cudasim {

namespace {

struct Knobs {
  std::mutex mutex;
  Order order;
  std::atomic<unsigned> grid_cap{0};
  Knobs() {
    if (const char* text = std::getenv("ECHELON_CUDASIM_ORDER"); text && *text) {
      try {
        order = parse_order(text);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "cudasim: ECHELON_CUDASIM_ORDER: %s\n", e.what());
        std::abort();  // a typo must not silently test the default order
      }
    }
    if (const char* cap = std::getenv("ECHELON_CUDASIM_GRID_CAP"); cap && *cap)
      grid_cap = static_cast<unsigned>(std::strtoul(cap, nullptr, 10));
  }
};

Knobs& knobs() {
  static Knobs* k = new Knobs;
  return *k;
}

}  // namespace

Order parse_order(const std::string& text) {
  if (text == "forward") return {OrderKind::Forward, 0};
  if (text == "reverse") return {OrderKind::Reverse, 0};
  if (text.rfind("random:", 0) == 0 && text.size() > 7 &&
      text.find_first_not_of("0123456789", 7) == std::string::npos)
    return {OrderKind::Random, std::stoull(text.substr(7))};
  throw std::invalid_argument("unknown order '" + text +
                              "' (expected forward, reverse or random:SEED)");
}

std::string to_string(Order order) {
  switch (order.kind) {
    case OrderKind::Forward:
      return "forward";
    case OrderKind::Reverse:
      return "reverse";
    case OrderKind::Random:
      return "random:" + std::to_string(order.seed);
  }
  return "?";
}

void set_order(Order order) {
  std::lock_guard lock(knobs().mutex);
  knobs().order = order;
}

Order order() {
  std::lock_guard lock(knobs().mutex);
  return knobs().order;
}

void set_grid_cap(unsigned blocks) {
  knobs().grid_cap = blocks;
}

unsigned grid_cap(unsigned kernel_cap) {
  const unsigned cap = knobs().grid_cap;
  return cap > 0 && cap < kernel_cap ? cap : kernel_cap;
}

namespace detail {

Order launch_order() {
  return order();
}

}  // namespace detail
}  // namespace echelon::cudasim
