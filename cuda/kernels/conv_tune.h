// The convolution autotuner (cuda/kernels/conv_tune.cu), like cudnn.benchmark: with tuning on,
// the first call of each (device, pass, geometry with batch, precision) times every candidate
// configuration of conv.h's conv_candidates on the caller's stream and buffers (CUDA events: a
// warm-up launch, then up to 3 timed ones, the fastest kept) and caches the fastest; later calls,
// and calls during stream capture (which never time or synchronise: the cached pick, else the
// heuristic), reuse it. A candidate that fails to run (out of memory for its scratch) is skipped;
// the heuristic, timed first, fails the call as it would untuned. A tuned pick depends on timings,
// and split-K group counts change the weight gradient's order of summation, so the app refuses
// --autotune with --deterministic.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <echelon/cuda/kernels/conv.h>

namespace echelon::cuda {

// Process-wide; off by default, on when the environment sets ECHELON_AUTOTUNE=1. Applies to the
// ImplicitGemm algorithm (Im2colGemm stays the forced baseline). Thread-safe: the cache is under
// a mutex, and one tuning runs at a time (pipeline partitions call from several threads).
void set_conv_autotune(bool on);
bool conv_autotune();

// The configuration `call` runs: conv_heuristic with tuning off, for empty problems and under
// Im2colGemm; else the cached pick, tuning on a miss (outside capture; during capture the
// heuristic). Tuning runs the candidates on call.out, which the caller then overwrites with the
// pick (every pass overwrites its output); an accumulating call (ConvCall::accumulate) is tuned
// as the overwriting one on scratch of out's size, so the sum it adds to is left alone. The key
// has no accumulate: both share one pick. It has whether a weight gradient brings its bias's
// (ConvCall::grad_bias: free in the direct kernel, a pass of its own after the others), timed in.
// The tuned pick may then differ from the heuristic's, which conv2d_relu's backward goes by
// (conv2d_backward_weight_sums_bias): its bias gradient stays right, but may differ from
// --no-fuse's in the last bits.
ConvConfig conv_config_for(const ConvCall& call);

// What tuning did, one entry per tuned key in the order tuned: the shape, the pick and its time,
// the heuristic's config and time (ms; the heuristic is always among the candidates).
struct ConvTunePick {
  int device = 0;
  ConvPass pass = ConvPass::Forward;
  Precision precision = Precision::Fp32;
  Conv2dGeometry geometry;
  std::string pick, heuristic;  // to_string of the configs
  ConvConfig pick_config, heuristic_config;
  double tuned_ms = 0, heuristic_ms = 0;
  int candidates = 0;
};
std::vector<ConvTunePick> conv_tune_picks();
// "N128 C64 32x32 -> O64 3x3 s1 p1" (dilation when not 1).
std::string describe(const Conv2dGeometry& a);
// Forgets every pick (tests; a bench that re-tunes).
void clear_conv_tune_cache();

// Tests only: replaces the CUDA-event timing by a function giving each candidate's time in ms
// (called once per candidate; nothing is launched while timing); an empty function restores it.
using ConvTuneTimer = std::function<double(const ConvCall& call, const ConvConfig& config)>;
void set_conv_tune_timer(ConvTuneTimer timer);

}  // namespace echelon::cuda
