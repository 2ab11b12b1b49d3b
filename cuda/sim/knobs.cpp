// CUDA emulation: the scheduler's knobs, process-wide: the order in which a block's threads run
// (ECHELON_CUDASIM_ORDER or set_order; cuda/sim/sim.h) and the grid cap
// (ECHELON_CUDASIM_GRID_CAP or set_grid_cap), read by every launch (scheduler.cpp); and the
// checked reader every environment knob of the emulator goes through (internal.h).
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <limits>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>

#include <echelon/base/env.h>
#include <echelon/base/error.h>
#include <echelon/cuda/sim/internal.h>
#include <echelon/cuda/sim/sim.h>

namespace echelon::cudasim {

namespace {

struct Knobs {
  std::mutex mutex;
  Order order;
  std::atomic<unsigned> grid_cap{0};
  Knobs() {
    if (const std::optional<std::string> text = env::value("ECHELON_CUDASIM_ORDER")) {
      try {
        order = parse_order(*text);
      } catch (const std::exception&) {  // invalid_argument, or out_of_range for the seed
        detail::abort_on_bad_knob(
            str("ECHELON_CUDASIM_ORDER='", *text, "': expected forward, reverse or random:SEED"));
      }
    }
    grid_cap = static_cast<unsigned>(
        detail::env_integer("ECHELON_CUDASIM_GRID_CAP", 0, 0, std::numeric_limits<int>::max()));
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

void abort_on_bad_knob(const std::string& message) {
  std::fprintf(stderr, "cudasim: %s\n", message.c_str());
  std::abort();
}

bool env_flag(const char* name, bool fallback) {
  try {
    return env::flag(name, fallback);
  } catch (const std::exception& e) {
    abort_on_bad_knob(message_of(e));
  }
}

int64_t env_integer(const char* name, int64_t fallback, int64_t low, int64_t high) {
  try {
    return env::integer(name, fallback, low, high);
  } catch (const std::exception& e) {
    abort_on_bad_knob(message_of(e));
  }
}

Order launch_order() {
  return order();
}

}  // namespace detail
}  // namespace echelon::cudasim
