// Pipeline schedules as per-partition policies. Every schedule runs the same executor loop: a
// partition may hold at most `window` mini-batches between their forward and their backward; when
// it holds fewer it runs the next forward, otherwise the oldest pending backward (1F1B order).
// The window, whether weights are stashed, and when the optimizer steps are all that differ:
//
//   sequential  window 1        no overlap at all (one mini-batch in the whole pipeline)
//   stale       window K - k    Zhang & Abdelrahman 2019: update after every backward, no stash
//   stash       window K - k    PipeDream 1F1B: same order, backward reads the forward's weights
//   gpipe       window = micro  all micro-batches forward, then backward, one update at the flush
//   hybrid      stale, then sequential after the switch point
//
// docs/pipeline.md derives the staleness that follows from the windows.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace echelon::parallel {

enum class ScheduleKind : uint8_t { Sequential, Stale, Stash, GPipe, Hybrid };

const char* schedule_name(ScheduleKind kind);
// "sequential", "stale", "stash", "gpipe", "hybrid"; anything else throws naming the text.
ScheduleKind parse_schedule(const std::string& text);
// The same without throwing: nullopt for a name that is not a pipeline schedule.
std::optional<ScheduleKind> find_schedule(const std::string& text);
// "sequential, stale, stash, gpipe, hybrid" (for error messages).
std::string schedule_names();

struct StagePolicy {
  int64_t window = 1;               // mini-batches forwarded but not yet backpropagated, at most
  bool stash_weights = false;       // backward runs against the weights its forward saw
  bool update_per_backward = true;  // false: accumulate gradients, step once at the flush
};

// The policy of partition `partition` (0 = nearest the input) of `num_partitions`. Hybrid maps to
// stale; the engine switches it to sequential itself. micro_batches is used by gpipe only.
StagePolicy stage_policy(ScheduleKind kind, int num_partitions, int partition,
                         int micro_batches = 1);

// Steady-state staleness of partition k: the number of its own weight updates applied between a
// mini-batch's forward and the weights its backward reads. Stale: window - 1 = K - 1 - k.
int64_t analytic_staleness(ScheduleKind kind, int num_partitions, int partition);

// THE executor rule (1F1B within a window), written once: what a partition does next when it holds
// `in_flight` mini-batches between their forward and their backward, and `more_forwards` says
// whether another forward may come before the flush. Drained: everything is through (the flush
// point, where gpipe applies its one update). The stage executors and stage_program follow it.
enum class NextOp : uint8_t { Forward, Backward, Drained };
NextOp next_op(const StagePolicy& policy, int64_t in_flight, bool more_forwards);

// One executor operation: forward or backward of mini-batch `id`, or the optimizer step at a flush.
struct StageOp {
  enum class Kind : uint8_t { Forward, Backward, Step };
  Kind kind;
  int64_t id;
  bool operator==(const StageOp&) const = default;
};

// The exact operation order a partition executes for `num_batches` mini-batches followed by a
// flush (next_op applied offline); tests and the simulator use this list.
std::vector<StageOp> stage_program(const StagePolicy& policy, int64_t num_batches);

// Event-driven simulation of the executor loops with fixed per-partition forward/backward costs
// and free transfers: the makespan of `num_batches` mini-batches and each partition's busy time.
struct SimulationResult {
  double makespan = 0;
  std::vector<double> busy;        // per partition
  double bubble_fraction() const;  // 1 - sum(busy) / (K * makespan)
};
SimulationResult simulate(const std::vector<StagePolicy>& policies,
                          const std::vector<double>& forward_cost,
                          const std::vector<double>& backward_cost, int64_t num_batches);

}  // namespace echelon::parallel
