// One pipeline partition and its executor. A Stage owns a slice of the model (sharing the layer
// objects with the whole model), its own SGD over its own parameters, and a weight version
// counter bumped by every update. Its executor follows next_op of schedule.h, either on a thread
// of its own (run) or inline on the driver's thread until it waits for a message (run_inline).
//
// Staleness is measured, not assumed: the forward of mini-batch i records the version it read,
// the backward the version of the weights it reads (the current one, or the stashed one), and the
// difference is added to a histogram. Held memory is accounted per mini-batch in flight: the
// stage's input, every layer's output and, with stashing, the weight snapshot.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <echelon/data/ring.h>
#include <echelon/layers/optim.h>
#include <echelon/layers/sequential.h>
#include <echelon/parallel/device_trace.h>
#include <echelon/parallel/grad_buckets.h>
#include <echelon/parallel/partition.h>
#include <echelon/parallel/schedule.h>
#include <echelon/parallel/trace.h>
#include <echelon/parallel/transport.h>

namespace echelon::parallel {

// Per-partition counters for reports (PipelineEngine::partition_stats, summary.json).
struct PartitionStats {
  int partition = 0;
  LayerRange layers;
  std::string device;
  int64_t forwards = 0, backwards = 0, updates = 0, skipped = 0;
  double busy_s = 0;                                   // forward, backward and optimizer compute
  double forward_s = 0, backward_s = 0, update_s = 0;  // busy_s by operation
  // CPU seconds of the partition's thread within busy_s (on CUDA: launching). busy_s minus this
  // is time the thread was runnable but not running: preempted by other threads or processes.
  double busy_cpu_s = 0;
  double wait_s = 0;                           // blocked receiving (idle: the pipeline bubble)
  double send_s = 0;                           // blocked sending (downstream full) plus transfer
  int64_t bytes_sent = 0, bytes_received = 0;  // tensor bytes to and from neighbour partitions
  AllReduceStats all_reduce;                   // data parallelism: the gradient sums
  size_t held_bytes = 0;  // activations (+ stashed weights) of mini-batches in flight now
  size_t peak_bytes = 0;
  int64_t version = 0;                   // updates applied
  std::map<int64_t, int64_t> staleness;  // measured staleness -> mini-batches
  int64_t max_staleness() const { return staleness.empty() ? 0 : staleness.rbegin()->first; }
};

// One completed forward at the last partition: what the trainer's StepStats are made of.
struct BatchResult {
  int64_t id = -1;
  int64_t batch_index = -1;
  int64_t samples = 0;
  double loss = 0;  // mean over the (micro-)batch
  int64_t correct = 0;
  bool finite = true;
  int replica = 0;  // data parallelism: the pipeline replica that computed it
  // Across processes only: not a result but the last partition's flush, after the results of
  // its flush interval (StageContext::results_may_lag), so that the driver can wait on one ring.
  bool flush_end = false;
};

class DeferredStats;

// What the executors share with the driver. Stages report through it and stop through it.
struct StageContext {
  data::SpscRing<BatchResult>* results = nullptr;  // the last partition's losses, to the driver
  // Across processes a later partition's driver only relays results and is not paced by the feed,
  // so it can fall behind by more than the ring holds: the last partition then waits for it. Its
  // driver waits for the flush on this ring too (it must relay while it waits), so the last
  // partition also pushes a flush_end marker there at each flush.
  bool results_may_lag = false;
  // Each partition once per flush: 1 when the Flush ended an epoch (Message::epoch_end), else 0.
  data::MpmcRing<int>* flushed = nullptr;
  ScheduleKind schedule = ScheduleKind::Stale;  // at start; each Flush names the next one
  int micro_batches = 1;
  // Stale partitions run their forward on predicted weights (PipelineOptions::predict_weights).
  bool predict_weights = false;
  std::function<void(const std::string& error)> fail;  // first error wins; closes everything
  // Data parallelism: sums the partition's gradients over its replicas, bucket by bucket during
  // the backward that an update follows, and waits for the sums right before the update.
  std::shared_ptr<GradientBuckets> gradient_buckets;
  TraceRecorder* trace = nullptr;  // optional
  bool timed_ops = false;          // PipelineOptions::timed_ops
  // The sync-free step (deferred_stats.h): the last partition queues its loss and correct count
  // there instead of reading them, and its SGD takes the guard. Null: read every step.
  DeferredStats* deferred_stats = nullptr;
};

struct StageLinks {
  Transport* forward_in = nullptr;    // activations (or, for partition 0, batches from the driver)
  Transport* forward_out = nullptr;   // null on the last partition
  Transport* backward_in = nullptr;   // null on the last partition
  Transport* backward_out = nullptr;  // null on partition 0
};

class Stage {
 public:
  Stage(int partition, int num_partitions, LayerRange range, std::shared_ptr<Sequential> layers,
        Device device, const SGDOptions& sgd);

  // Joins the stage to its links and the driver; before run or run_inline.
  void connect(const StageLinks& links, const StageContext& context);
  // The executor thread's loop; returns when a transport closes. Exceptions go to context.fail.
  void run();
  // On the caller's thread and stream: runs operations until the next one needs a message that
  // has not arrived. An exception goes to context.fail and is rethrown as it was.
  void run_inline();

  PartitionStats stats() const;
  std::string label() const;  // "partition 1 (layers [2, 8) on cpu)"
  Sequential& layers() { return *layers_; }
  Device device() const { return device_; }
  // Only while the executor is idle (drained pipeline): momentum buffers and "step".
  SGD& optimizer() { return sgd_; }

 private:
  struct InFlight {
    Message message;  // id, batch index, lr, loss weight
    Tensor input;     // requires grad except on partition 0
    Tensor root;      // the partition's output, or the loss on the last partition
    int64_t version = 0;
    size_t bytes = 0;
    std::vector<Tensor> snapshot;  // stashed weights
    bool skip = false;             // non-finite loss: no backward, no update
  };
  // What one executor operation came to. Idle: only without waiting, no message yet.
  enum class Progress : uint8_t { Ran, Idle, Closed };

  // One operation of the rule; `wait`: block for its message instead of returning Idle.
  Progress advance(bool wait);
  Progress forward_next(bool wait);
  Progress backward_oldest(bool wait);
  Progress finish_flush();
  // `what` names the trace event: "recv act", "send grad", ...
  std::optional<Message> receive(Transport* from, const char* what, bool wait);
  bool send(Transport* to, Message message, const char* what);
  InFlight forward(Message message);
  // Last partition: the loss of `state` from the logits `out`, reported to the driver.
  void loss(InFlight& state, const Message& message, const Tensor& out);
  Message backward(InFlight& state, const Message* grad);
  void step(double lr);
  // Moves the parameters to w - steps * lr * momentum (in place); returns w to restore.
  std::vector<Tensor> predict_weights(int64_t steps, double lr);
  int64_t version() const;
  void account(size_t add, size_t remove);
  // Seconds of compute since `start`, in device time with StageContext::timed_ops on CUDA.
  double busy_since(TraceRecorder::Clock::time_point start) const;
  // Records "<what> <id>" ("F 3", "recv act 3"; just `what` for id -1) when tracing.
  void trace(TraceTrack track, const char* what, TraceRecorder::Clock::time_point start,
             int64_t id);

  int partition_, num_partitions_;
  LayerRange range_;
  std::shared_ptr<Sequential> layers_;
  Device device_;
  SGD sgd_;
  std::vector<Tensor> params_;
  bool pending_update_ = false;  // gpipe: gradients accumulated since the last step
  double pending_lr_ = 0;

  // The executor's state between operations (only its own thread touches it).
  StageLinks links_;
  StageContext context_;
  StagePolicy policy_;
  ScheduleKind next_schedule_ = ScheduleKind::Stale;  // named by the Flush being processed
  bool flushing_ = false;          // a Flush arrived: no forward until the partition is drained
  bool flush_ends_epoch_ = false;  // the Flush being processed ends an epoch
  // run() on a GPU: this partition's work is on a stream of its own (read in CUDA builds only).
  [[maybe_unused]] bool own_stream_ = false;
  std::deque<InFlight> in_flight_;

  // CUDA events per op on this partition's stream when tracing on a GPU (set by connect).
  std::unique_ptr<DeviceTrace> device_trace_;

  mutable std::mutex stats_mutex_;  // the driver reads stats while the executor runs
  PartitionStats stats_;
};

}  // namespace echelon::parallel
