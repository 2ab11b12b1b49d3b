// The pipeline engine, the one StepEngine: it cuts the model into K partitions, runs each on its
// own executor thread (a CPU worker, a CUDA device, or a CUDA stream on a shared GPU), joins them
// with transports (transport.h) and runs one of the schedules of schedule.h. With the sequential
// schedule it computes exactly what ordinary single-device training computes. With K = 1 the
// partition runs inline on the driver's thread and stream, no executor thread and no hand-off:
// that IS ordinary training (make_single_device_engine).
//
// The driver (the trainer's thread) feeds mini-batches to partition 0 and collects losses from
// the last partition; labels travel with the activations. train_step returns the mini-batches
// whose loss was computed meanwhile; finish_epoch flushes, after which every update has landed.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <echelon/data/ring.h>
#include <echelon/parallel/cuda_graph.h>
#include <echelon/parallel/deferred_stats.h>
#include <echelon/parallel/engine.h>
#include <echelon/parallel/partition.h>
#include <echelon/parallel/schedule.h>
#include <echelon/parallel/stage.h>
#include <echelon/parallel/trace.h>
#include <echelon/parallel/transport.h>

namespace echelon::parallel {

class ProcessGroup;

// The largest gradient bucket (MiB): one MPI message's element count stays far below 2^31.
constexpr double kMaxBucketMb = 1024;

struct PipelineOptions {
  int partitions = 2;         // --pipeline K (ignored when ppv is given: K = cuts + 1)
  std::string ppv;            // --ppv "2,5": partition starts; empty: balance or even split
  bool balance_auto = false;  // --balance auto: profile layers on the first batch, then DP
  // --split-blocks: each residual block counts as four layers (its steps, BlockPiece), so that
  // the cuts of ppv and balance_auto can fall inside a block.
  bool split_blocks = false;
  ScheduleKind schedule = ScheduleKind::Stale;
  int micro_batches = 4;       // gpipe only
  double hybrid_switch = 0.5;  // hybrid: >= 1 an epoch number; in (0, 1) a fraction of epochs
  int total_epochs = 0;        // needed for a fractional hybrid switch
  std::string trace_path;      // Chrome trace JSON, rewritten at every finish_epoch (any K)
  // stale/hybrid: partition k runs its forward on w - (K-1-k) * lr * momentum, the linear
  // prediction of the weights its backward will meet (Kosson et al. 2020); not in the paper.
  bool predict_weights = false;
  std::vector<Device> devices;  // per partition; empty: every partition on the engine's device
  // Busy time in device time (`echelon bench pipeline`): on a CUDA partition each op waits for its
  // stream before the clock is read. Off in training: it costs the host/device overlap.
  bool timed_ops = false;
  // Ordinary training (single()): named "single", and no pipeline block in summary.json.
  bool single_device = false;
  // The captured training step (cuda_graph.h): one partition on a GPU in this process, with the
  // sync-free step (defer_step_stats), no trace and no timed ops; start() says which is missing.
  bool cuda_graph = false;
  // One process per partition and replica (pipeline_dist.cpp): the run's world group, of size
  // K * data_parallel; rank r runs partition r % K of replica r / K. Null: threads of one process.
  std::shared_ptr<ProcessGroup> process_group;
  // R replicas of the pipeline; each partition sums its gradients over its R replicas (in buckets
  // during the backward, waited for right before its update). Every replica gets its share of each
  // mini-batch (the batch is the global one).
  int data_parallel = 1;
  // Data parallelism: gradients are summed in buckets of about this many MiB, each started as soon
  // as the backward has finished its layers (grad_buckets.h); 0: one sum after the backward.
  double bucket_mb = 1.0;
  // Called on the driver's thread for every completed (micro-)batch, in completion order.
  std::function<void(const BatchResult&)> on_result;

  // One partition, sequential, single_device: what make_single_device_engine runs.
  static PipelineOptions single();
  // Throws naming the flag when a value is out of range.
  void validate() const;
  // The epoch (0-based) from which hybrid runs sequential.
  int hybrid_switch_epoch() const;
};

class PipelineEngine : public StepEngine {
 public:
  PipelineEngine(std::shared_ptr<Sequential> model, const SGDOptions& sgd, Device device,
                 PipelineOptions options);
  ~PipelineEngine() override;

  std::string name() const override;
  StepStats train_step(const data::Batch& batch) override;
  StepStats finish_epoch() override;
  void continue_after_epochs(int epochs_done) override;
  void set_lr(double lr) override { lr_ = lr; }
  void defer_step_stats(int64_t interval) override;
  Sequential& model() override { return *model_; }
  Tensor predict(const Tensor& images) override;
  bool takes_batches() const override { return !distributed() || partition_ == 0; }
  StepStats follow_epoch() override;
  bool evaluates() const override { return !distributed() || group_->rank() == 0; }
  void share_evaluation(std::vector<double>& metrics) override;
  StateDict optimizer_state() const override;
  void load_optimizer_state(const StateDict& state) override;
  json::Value report() const override;

  // Cuts the model and starts the executors; train_step does it on the first batch (balance
  // profiles on that batch). `sample` (N, C, H, W) is only read when balancing.
  void start(const Tensor& sample);
  bool started() const { return !stages_.empty(); }
  std::vector<int64_t> cuts() const { return cuts_; }
  std::vector<PartitionStats> partition_stats() const;
  // Steps replayed from the captured CUDA graph so far (options_.cuda_graph).
  int64_t graph_replays() const { return graph_replays_; }
  ScheduleKind current_schedule() const { return current_; }
  double wall_seconds() const;
  int64_t samples_done() const { return samples_done_; }
  const TraceRecorder* trace() const { return trace_.get(); }
  TraceRecorder* trace_recorder() override { return trace_.get(); }

 private:
  std::vector<int64_t> choose_cuts(const Tensor& sample);
  // Transports, the driver's rings and each stage's links; `devices` one per partition.
  void connect(const std::vector<Device>& devices);
  StageContext stage_context();
  void submit(Message message);
  // Waits until every partition has drained; true when the flush ended an epoch (`epoch_end`
  // here, or finish_epoch's marker in partition 0's process).
  bool flush(ScheduleKind next, bool epoch_end = false);
  // finish_epoch's and follow_epoch's end: the epoch count, the schedule, the other processes.
  void end_epoch(ScheduleKind next);
  // The schedule after this epoch (hybrid switches to sequential).
  ScheduleKind schedule_after_epoch() const;
  // drain: also read every deferred result (otherwise only once an interval's worth is queued).
  StepStats collect(bool aggregate_micro_batches, bool drain = false);
  void fail(const std::string& error);
  void close_all();
  [[noreturn]] void rethrow_failure();
  void check_alive();
  // The mini-batch's messages (all gpipe micro-batches, or the one mini-batch).
  void submit_batch(const data::Batch& batch);
  // options_.cuda_graph (pipeline_graph.cpp): checks the run can use it, then creates graph_.
  void start_cuda_graph();
  // One step eagerly, captured or replayed (see cuda_graph.h), on graph_'s stream.
  void graph_step(const data::Batch& batch);

  // Multi-process (pipeline_dist.cpp).
  bool distributed() const { return group_ != nullptr; }
  std::vector<int64_t> agree_on_cuts(const std::vector<int64_t>& cuts);
  void place_process(int num_partitions);
  // --trace across processes: rank 0's file becomes every rank's timeline (trace_merge.h).
  void gather_traces();
  void connect_distributed(Device device);
  // This replica's rows of a global mini-batch and their share of it (1 without replicas).
  std::pair<data::Batch, double> replica_shard(const data::Batch& batch) const;
  // Moves the local results into relayed_ (a last partition also sends them to every process) and
  // appends what the other last partitions relayed; at a flush, waits for all of theirs.
  void exchange_results(bool at_flush);
  void relay_local_results();
  void relay(BatchResult result);  // one entry of the results ring (a result or a flush_end)
  // One partition's flush acknowledgement: whether the flush ended an epoch; nullopt once the
  // pipeline has shut down.
  std::optional<bool> await_flushed();
  // Every process receives every partition's parameters, buffers and optimizer state.
  void sync_partitions();
  StateDict sync_optimizer(int partition, int owner);
  StateDict merged_optimizer_state() const;
  void load_distributed_optimizer_state(const StateDict& state);
  json::Value distributed_report() const;
  // This rank's partition statistics, and (rank 0) every rank's, gathered at each epoch's end.
  json::Value rank_stats() const;
  void gather_rank_stats();

  std::shared_ptr<Sequential> model_;
  std::shared_ptr<Sequential> layers_;  // what the cuts index: model_, or its split_blocks view
  SGDOptions sgd_;
  Device device_;
  PipelineOptions options_;
  std::vector<int64_t> cuts_;
  std::vector<std::unique_ptr<Stage>> stages_;
  std::unique_ptr<Transport> input_;
  std::vector<std::unique_ptr<Transport>> forward_links_, backward_links_;
  std::unique_ptr<data::SpscRing<BatchResult>> results_;  // last partition -> driver
  std::unique_ptr<data::MpmcRing<int>> flushed_;          // every partition -> driver
  std::unique_ptr<TraceRecorder> trace_;
  int64_t deferred_interval_ = 0;            // defer_step_stats; 0: read every step
  std::unique_ptr<DeferredStats> deferred_;  // inline on a GPU with an interval
  // options_.cuda_graph (pipeline_graph.cpp): the graph, the static inputs it reads, and the
  // eager steps of that shape so far (capture after CudaGraphStep::kWarmupSteps).
  std::unique_ptr<CudaGraphStep> graph_;
  Tensor graph_images_, graph_labels_;
  int64_t graph_warmup_ = 0;
  std::vector<std::thread> threads_;  // none when the one partition runs inline
  bool inline_ = false;

  std::mutex error_mutex_;
  std::string error_;
  std::atomic<bool> failed_{false};

  ScheduleKind current_;
  double lr_;
  int64_t next_id_ = 0;
  int64_t unflushed_ = 0;  // mini-batches submitted since the last flush
  int64_t graph_replays_ = 0;
  int epochs_done_ = 0;
  int64_t samples_done_ = 0;
  StepStats carried_;  // results collected by predict(), returned by the next call
  std::optional<StateDict> pending_optimizer_state_;
  std::chrono::steady_clock::time_point started_at_, last_flush_at_;

  std::shared_ptr<ProcessGroup> group_, replicas_;  // the world; this partition's replicas
  int partition_ = 0, replica_ = 0, num_partitions_ = 0;
  std::vector<std::shared_ptr<Sequential>> parts_;  // every partition's layers (distributed)
  std::vector<StateDict> partition_optimizer_;      // every partition's, as last synced
  std::vector<BatchResult> relayed_;                // results not yet collected
  int64_t flush_ends_ = 0;  // the stage's flush_end markers relay() met and await_flushed did not
  // Relayed per source rank, not yet taken; nullopt marks the end of a flush interval.
  std::map<int, std::deque<std::optional<BatchResult>>> held_;
  bool synced_ = true;  // every process holds every partition's current weights
  json::Value ranks_ = json::Value::array();  // rank 0: every rank's rank_stats, last gathered
};

// The trainer's factory for `options` (see parallel/engine.h EngineFactory).
EngineFactory pipeline_engine_factory(const PipelineOptions& options);

}  // namespace echelon::parallel
