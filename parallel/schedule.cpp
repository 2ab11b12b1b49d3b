#include <echelon/parallel/schedule.h>

#include <algorithm>

#include <echelon/base/error.h>

namespace echelon::parallel {

const char* schedule_name(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::Sequential:
      return "sequential";
    case ScheduleKind::Stale:
      return "stale";
    case ScheduleKind::Stash:
      return "stash";
    case ScheduleKind::GPipe:
      return "gpipe";
    case ScheduleKind::Hybrid:
      return "hybrid";
  }
  return "?";
}

namespace {
constexpr ScheduleKind kAllSchedules[] = {ScheduleKind::Sequential, ScheduleKind::Stale,
                                          ScheduleKind::Stash, ScheduleKind::GPipe,
                                          ScheduleKind::Hybrid};
}  // namespace

std::optional<ScheduleKind> find_schedule(const std::string& text) {
  for (ScheduleKind kind : kAllSchedules) {
    if (text == schedule_name(kind)) return kind;
  }
  return std::nullopt;
}

std::string schedule_names() {
  std::string names;
  for (ScheduleKind kind : kAllSchedules)
    names += (names.empty() ? "" : ", ") + std::string(schedule_name(kind));
  return names;
}

ScheduleKind parse_schedule(const std::string& text) {
  const std::optional<ScheduleKind> kind = find_schedule(text);
  ECH_CHECK(kind.has_value(), "unknown pipeline schedule '", text, "' (expected ", schedule_names(),
            ")");
  return *kind;
}

StagePolicy stage_policy(ScheduleKind kind, int num_partitions, int partition, int micro_batches) {
  ECH_CHECK(num_partitions >= 1 && partition >= 0 && partition < num_partitions,
            "stage_policy: partition ", partition, " of ", num_partitions, " is out of range");
  ECH_CHECK(micro_batches >= 1, "stage_policy: micro_batches must be >= 1, got ", micro_batches);
  StagePolicy policy;
  switch (kind) {
    case ScheduleKind::Sequential:
      policy.window = 1;
      break;
    case ScheduleKind::Stale:
    case ScheduleKind::Hybrid:
      // K - k in flight is the least that keeps every partition busy in steady state.
      policy.window = num_partitions - partition;
      break;
    case ScheduleKind::Stash:
      policy.window = num_partitions - partition;
      policy.stash_weights = true;
      break;
    case ScheduleKind::GPipe:
      policy.window = micro_batches;
      policy.update_per_backward = false;
      break;
  }
  return policy;
}

int64_t analytic_staleness(ScheduleKind kind, int num_partitions, int partition) {
  const StagePolicy policy = stage_policy(kind, num_partitions, partition);
  if (policy.stash_weights || !policy.update_per_backward) return 0;
  // In steady state F(i) directly follows B(i - window), and B(i) directly follows F(i+window-1)
  // which follows B(i - 1): updates i-window+1 .. i-1 land between them.
  return policy.window - 1;
}

NextOp next_op(const StagePolicy& policy, int64_t in_flight, bool more_forwards) {
  if (more_forwards && in_flight < policy.window) return NextOp::Forward;
  if (in_flight > 0) return NextOp::Backward;
  return NextOp::Drained;
}

std::vector<StageOp> stage_program(const StagePolicy& policy, int64_t num_batches) {
  ECH_CHECK(policy.window >= 1, "stage_program: window must be >= 1, got ", policy.window);
  std::vector<StageOp> program;
  int64_t forwarded = 0, backwarded = 0;
  for (;;) {
    switch (next_op(policy, forwarded - backwarded, forwarded < num_batches)) {
      case NextOp::Forward:
        program.push_back({StageOp::Kind::Forward, forwarded++});
        break;
      case NextOp::Backward:
        program.push_back({StageOp::Kind::Backward, backwarded++});
        break;
      case NextOp::Drained:
        if (!policy.update_per_backward && num_batches > 0)
          program.push_back({StageOp::Kind::Step, -1});
        return program;
    }
  }
}

double SimulationResult::bubble_fraction() const {
  if (busy.empty() || makespan <= 0) return 0;
  double total = 0;
  for (double b : busy) total += b;
  return 1.0 - total / (static_cast<double>(busy.size()) * makespan);
}

SimulationResult simulate(const std::vector<StagePolicy>& policies,
                          const std::vector<double>& forward_cost,
                          const std::vector<double>& backward_cost, int64_t num_batches) {
  const size_t num_partitions = policies.size();
  ECH_CHECK(num_partitions >= 1 && forward_cost.size() == num_partitions &&
                backward_cost.size() == num_partitions,
            "simulate: need one policy, forward cost and backward cost per partition, got ",
            num_partitions, ", ", forward_cost.size(), ", ", backward_cost.size());
  const double unset = -1;
  std::vector<std::vector<StageOp>> programs;
  programs.reserve(policies.size());
  for (const StagePolicy& policy : policies) programs.push_back(stage_program(policy, num_batches));
  // finish[k][i]: when partition k finished forward (fwd) / backward (bwd) of mini-batch i.
  std::vector<std::vector<double>> fwd(num_partitions, std::vector<double>(num_batches, unset));
  std::vector<std::vector<double>> bwd = fwd;
  std::vector<size_t> next_index(num_partitions, 0);  // each program's next operation
  std::vector<double> free_at(num_partitions, 0);
  SimulationResult result;
  result.busy.assign(num_partitions, 0);
  bool progress = true;
  while (progress) {
    progress = false;
    for (size_t k = 0; k < num_partitions; ++k) {
      while (next_index[k] < programs[k].size()) {
        const StageOp op = programs[k][next_index[k]];
        double ready = 0, cost = 0;
        if (op.kind == StageOp::Kind::Forward) {
          ready = k == 0 ? 0 : fwd[k - 1][op.id];
          cost = forward_cost[k];
        } else if (op.kind == StageOp::Kind::Backward) {
          ready = k + 1 == num_partitions ? fwd[k][op.id] : bwd[k + 1][op.id];
          cost = backward_cost[k];
        }
        if (ready == unset) break;  // waits for another partition
        const double start = std::max(ready, free_at[k]);
        free_at[k] = start + cost;
        result.busy[k] += cost;
        if (op.kind == StageOp::Kind::Forward) fwd[k][op.id] = free_at[k];
        if (op.kind == StageOp::Kind::Backward) bwd[k][op.id] = free_at[k];
        ++next_index[k];
        progress = true;
      }
    }
  }
  for (size_t k = 0; k < num_partitions; ++k) {
    ECH_CHECK(next_index[k] == programs[k].size(), "simulate: partition ", k,
              " deadlocks at operation ", next_index[k], " (windows must not grow with depth)");
    result.makespan = std::max(result.makespan, free_at[k]);
  }
  return result;
}

}  // namespace echelon::parallel
