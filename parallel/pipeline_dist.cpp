// The pipeline engine across processes (PipelineOptions::process_group): every process runs the
// same trainer loop (SPMD, as with torchrun or DeepSpeed) and builds the same model from the same
// seed, but starts only ITS partition's executor:
//   rank r = replica * K + partition      (replica 0's pipeline is ranks 0 .. K-1)
// Partition 0's process loads and feeds the mini-batches (its replica's share of each); the
// others load nothing: their drivers follow the epochs by the flush markers (follow_epoch) and
// collect. Activations, labels, gradients and flush markers travel through the group's
// transports, so every schedule runs unchanged. The last partitions relay each result to every
// process, so every trainer sees the same losses. At each epoch's end every process receives every
// partition's weights and optimizer state; rank 0 evaluates and checkpoints the whole model and
// shares its evaluation (share_evaluation).
#include <echelon/parallel/pipeline.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <memory>
#include <string>

#include <echelon/autograd/grad_mode.h>
#include <echelon/base/error.h>
#include <echelon/layers/sequential.h>
#include <echelon/parallel/grad_buckets.h>
#include <echelon/parallel/process_group.h>
#include <echelon/parallel/trace_merge.h>
#include <echelon/tensor/ops.h>

namespace echelon::parallel {

namespace {

// Each pair of neighbouring processes talks in both directions, one tag per direction.
constexpr int kForwardTag = 1, kBackwardTag = 2;
constexpr int kResultTag = 3;  // results relay (control messages)
constexpr int kTraceTag = 4;   // each rank's trace text, to rank 0 at every save
constexpr int kStatsTag = 5;   // each rank's partition statistics, to rank 0 at every epoch's end

// One relayed BatchResult, or the end marker a last partition sends at each flush.
struct RelayRecord {
  int64_t id = -1, batch_index = -1, samples = 0, correct = 0;
  double loss = 0;
  int32_t finite = 1, replica = 0, end = 0, unused = 0;
};

std::vector<uint8_t> encode(const RelayRecord& record) {
  std::vector<uint8_t> bytes(sizeof(RelayRecord));
  std::memcpy(bytes.data(), &record, sizeof(RelayRecord));
  return bytes;
}

RelayRecord decode(const std::vector<uint8_t>& bytes, int source) {
  ECH_CHECK(bytes.size() == sizeof(RelayRecord), "rank ", source, " relayed a malformed result (",
            bytes.size(), " bytes)");
  RelayRecord record;
  std::memcpy(&record, bytes.data(), sizeof(RelayRecord));
  return record;
}

RelayRecord to_record(const BatchResult& r) {
  RelayRecord record;
  record.id = r.id;
  record.batch_index = r.batch_index;
  record.samples = r.samples;
  record.correct = r.correct;
  record.loss = r.loss;
  record.finite = r.finite ? 1 : 0;
  record.replica = r.replica;
  return record;
}

BatchResult from_record(const RelayRecord& record) {
  BatchResult r;
  r.id = record.id;
  r.batch_index = record.batch_index;
  r.samples = record.samples;
  r.correct = record.correct;
  r.loss = record.loss;
  r.finite = record.finite != 0;
  r.replica = record.replica;
  return r;
}

// Copies process `owner`'s value of `tensor` into every process's, in place (a device tensor
// through a host copy).
void broadcast_into(ProcessGroup& group, const Tensor& tensor, int owner) {
  if (tensor.device().is_cpu() && tensor.is_contiguous()) {
    Tensor handle = tensor;
    group.broadcast(handle, owner);
    return;
  }
  Tensor host = tensor.to(Device::cpu()).contiguous();
  group.broadcast(host, owner);
  if (group.rank() == owner) return;
  NoGradGuard no_grad;
  Tensor target = tensor.detach();
  ops::copy_(target, host.to(tensor.device()));
}

}  // namespace

std::vector<int64_t> PipelineEngine::agree_on_cuts(const std::vector<int64_t>& cuts) {
  // Rank 0's cuts win (with --balance auto only rank 0 profiled). Its model's size comes along: a
  // later partition's process built its model from the data set's description, without reading
  // the data, so data of another image size would give rank 0 another model.
  Tensor header = Tensor::zeros({2}, kInt64);
  auto* head = static_cast<int64_t*>(header.raw_data());
  head[0] = static_cast<int64_t>(cuts.size());
  head[1] = model_->num_parameters();
  group_->broadcast(header, 0);
  ECH_CHECK(head[1] == model_->num_parameters(), "pipeline: rank 0's model has ", head[1],
            " parameters, rank ", group_->rank(), "'s ", model_->num_parameters(),
            " (a later partition's process builds its model for the data set's usual image "
            "size; are the data's images of another size?)");
  const int64_t n = head[0];
  Tensor values = Tensor::zeros({std::max<int64_t>(n, 1)}, kInt64);
  if (group_->rank() == 0 && n > 0) std::memcpy(values.raw_data(), cuts.data(), n * 8);
  group_->broadcast(values, 0);
  std::vector<int64_t> agreed(static_cast<size_t>(n));
  if (n > 0) std::memcpy(agreed.data(), values.raw_data(), n * 8);
  return agreed;
}

void PipelineEngine::place_process(int num_partitions) {
  const int R = options_.data_parallel;
  ECH_CHECK(group_->size() == num_partitions * R, "pipeline: ", group_->size(),
            " processes cannot run ", num_partitions, " partitions x ", R,
            " replicas; start exactly ", num_partitions * R, " (mpirun -np ", num_partitions * R,
            ")");
  num_partitions_ = num_partitions;
  partition_ = group_->rank() % num_partitions;
  replica_ = group_->rank() / num_partitions;
  // Collective over the world: every process splits, each joins its partition's replicas.
  if (R > 1) replicas_ = group_->split(partition_, replica_);
  partition_optimizer_.assign(static_cast<size_t>(num_partitions), StateDict());
  if (trace_) gather_traces();
}

void PipelineEngine::gather_traces() {
  // Clocks: every rank reads its trace clock as it leaves one barrier; rank r's events move by
  // (rank 0's reading - rank r's), which is exact on one machine up to the barrier's exit skew
  // and also aligns machines whose clocks have different origins.
  group_->barrier();
  const double at_barrier_us = trace_->now_us();
  struct Pending {  // rank 0: texts received early (a rank may save again before another's first)
    std::vector<std::vector<std::vector<uint8_t>>> by_rank;
  };
  auto pending = std::make_shared<Pending>();
  pending->by_rank.resize(static_cast<size_t>(group_->size()));
  std::shared_ptr<ProcessGroup> group = group_;
  trace_->set_gather([group, pending, at_barrier_us](std::string own) -> std::string {
    std::vector<uint8_t> bytes(sizeof(double) + own.size());
    std::memcpy(bytes.data(), &at_barrier_us, sizeof(double));
    std::memcpy(bytes.data() + sizeof(double), own.data(), own.size());
    if (group->rank() != 0) {
      group->send_bytes(bytes, 0, kTraceTag);
      return own;  // PATH.rank<r>: this rank's own trace
    }
    auto& by_rank = pending->by_rank;
    by_rank[0].push_back(std::move(bytes));
    const auto missing = [&] {
      return std::any_of(by_rank.begin(), by_rank.end(), [](const auto& q) { return q.empty(); });
    };
    while (missing()) {
      auto [source, received] = group->recv_bytes(kTraceTag);
      ECH_CHECK(received.size() >= sizeof(double), "rank ", source, " sent a malformed trace");
      by_rank[static_cast<size_t>(source)].push_back(std::move(received));
    }
    std::vector<std::string> texts;
    std::vector<double> offsets_us;
    for (auto& queue : by_rank) {
      double their_barrier_us = 0;
      std::memcpy(&their_barrier_us, queue.front().data(), sizeof(double));
      offsets_us.push_back(at_barrier_us - their_barrier_us);
      texts.emplace_back(queue.front().begin() + sizeof(double), queue.front().end());
      queue.erase(queue.begin());
    }
    return merge_rank_traces(texts, offsets_us);
  });
}

void PipelineEngine::connect_distributed(Device device) {
  const int K = num_partitions_;
  const size_t capacity = static_cast<size_t>(std::max(K, options_.micro_batches)) + 2;
  const int first = replica_ * K;  // this replica's partition 0
  StageLinks links;
  input_ = make_transport(device_, device, 1);
  links.forward_in = input_.get();
  const auto add = [&](std::vector<std::unique_ptr<Transport>>& owner, int peer, int tag) {
    owner.push_back(group_->make_transport(peer, tag, device, capacity));
    return owner.back().get();
  };
  if (partition_ > 0) {
    links.forward_in = add(forward_links_, first + partition_ - 1, kForwardTag);
    links.backward_out = add(backward_links_, first + partition_ - 1, kBackwardTag);
  }
  if (partition_ + 1 < K) {
    links.forward_out = add(forward_links_, first + partition_ + 1, kForwardTag);
    links.backward_in = add(backward_links_, first + partition_ + 1, kBackwardTag);
  }
  const size_t held = 1 + static_cast<size_t>(K - 1) * std::bit_ceil(capacity) +
                      static_cast<size_t>(K) + static_cast<size_t>(options_.micro_batches);
  results_ = std::make_unique<data::SpscRing<BatchResult>>(held);
  // This process's one stage's flush codes: 2 slots, the least an MpmcRing has.
  flushed_ = std::make_unique<data::MpmcRing<int>>(2);
  StageContext context = stage_context();
  // This process's driver drains the ring at every step and flush, but nothing paces it against
  // partition 0's feed (a loaded machine once left it 16 results behind: "results ring is full").
  context.results_may_lag = true;
  if (replicas_) {
    // The loss weights already hold each replica's share: the sum is the global gradient.
    const auto cap_bytes = static_cast<size_t>(options_.bucket_mb * 1024 * 1024);
    context.gradient_buckets =
        std::make_shared<GradientBuckets>(replicas_, stages_[0]->layers().parameters(), cap_bytes);
  }
  stages_[0]->connect(links, context);
}

std::pair<data::Batch, double> PipelineEngine::replica_shard(const data::Batch& batch) const {
  const int R = options_.data_parallel;
  if (R == 1) return {batch, 1.0};
  const int64_t n = batch.images.size(0);
  ECH_CHECK(n >= R, "data parallel: mini-batch ", batch.index, " has ", n,
            " examples, fewer than the ", R, " replicas");
  const int64_t size = n / R + (replica_ < n % R ? 1 : 0);
  const int64_t begin = replica_ * (n / R) + std::min<int64_t>(replica_, n % R);
  data::Batch shard = batch;
  shard.images = batch.images.narrow(0, begin, size).contiguous();
  shard.labels = batch.labels.narrow(0, begin, size).contiguous();
  return {shard, static_cast<double>(size) / static_cast<double>(n)};
}

void PipelineEngine::relay_local_results() {
  while (std::optional<BatchResult> result = results_->try_pop()) relay(*result);
}

void PipelineEngine::relay(BatchResult result) {
  if (result.flush_end) {  // the stage flushed (this driver may not have reached its flush yet)
    ++flush_ends_;
    return;
  }
  result.replica = replica_;
  if (partition_ + 1 == num_partitions_) {
    for (int rank = 0; rank < group_->size(); ++rank) {
      if (rank != group_->rank()) group_->send_bytes(encode(to_record(result)), rank, kResultTag);
    }
  }
  relayed_.push_back(result);
}

// Distributed, the last partition's driver relays its partition's results while it waits: no one
// else drains that results ring, and this driver is not paced by feeding the pipeline. It sleeps
// on the ring (the stage's flush_end marker wakes it), never polls: the driver of a later partition
// waits here for most of each epoch, and polling there cost a fifth of that process's CPU.
std::optional<bool> PipelineEngine::await_flushed() {
  const auto ack = [this]() -> std::optional<bool> {
    const std::optional<int> code = flushed_->pop();
    if (!code) return std::nullopt;
    return *code != 0;
  };
  if (!distributed() || partition_ + 1 < num_partitions_) return ack();
  while (flush_ends_ == 0) {
    std::optional<BatchResult> result = results_->pop();
    if (!result) return std::nullopt;  // shut down
    relay(*result);
  }
  --flush_ends_;
  return ack();  // pushed before the marker: at hand
}

// A later partition's process: its driver has nothing to feed, so it waits for its partition's
// flushes (sleeping; the last partition's relays the results meanwhile) until the one that ends
// the epoch, which partition 0's finish_epoch sent. gpipe flushes after every mini-batch.
StepStats PipelineEngine::follow_epoch() {
  check_alive();
  ECH_CHECK(!takes_batches(),
            "pipeline: follow_epoch is for the processes of later partitions; this process feeds "
            "the mini-batches (train_step)");
  if (!started()) start(Tensor());  // only rank 0 profiles (--balance auto) a sample
  synced_ = false;
  StepStats stats;
  for (bool epoch_end = false; !epoch_end;) {
    const std::optional<bool> flushed = await_flushed();
    if (!flushed) rethrow_failure();
    epoch_end = *flushed;
    exchange_results(/*at_flush=*/true);
    stats.add(collect(current_ == ScheduleKind::GPipe, /*drain=*/true));
  }
  unflushed_ = 0;
  last_flush_at_ = std::chrono::steady_clock::now();
  end_epoch(schedule_after_epoch());
  return stats;
}

void PipelineEngine::share_evaluation(std::vector<double>& metrics) {
  if (!distributed()) return;
  // Every process passes as many numbers (the trainer's loss, accuracy and count).
  Tensor values = Tensor::zeros({static_cast<int64_t>(metrics.size())}, kFloat64);
  auto* data = static_cast<double*>(values.raw_data());
  std::copy(metrics.begin(), metrics.end(), data);
  group_->broadcast(values, 0);
  std::copy(data, data + metrics.size(), metrics.begin());
  // A process that evaluated ran its partition's layers in eval mode on its driver's thread
  // (BatchNorm with the running statistics): partition 0 feeds the next batch only after every
  // process is done.
  group_->barrier();
}

// Per source, records are taken up to (at a flush: through) that source's next end marker, so a
// result of the next flush interval never joins this one.
void PipelineEngine::exchange_results(bool at_flush) {
  relay_local_results();
  const int K = num_partitions_;
  const bool last = partition_ + 1 == K;
  if (at_flush && last) {
    RelayRecord end;
    end.end = 1;
    for (int rank = 0; rank < group_->size(); ++rank) {
      if (rank != group_->rank()) group_->send_bytes(encode(end), rank, kResultTag);
    }
  }
  const auto hold = [this](int source, const std::vector<uint8_t>& bytes) {
    const RelayRecord record = decode(bytes, source);
    held_[source].push_back(record.end ? std::nullopt : std::optional(from_record(record)));
  };
  while (auto message = group_->try_recv_bytes(kResultTag)) hold(message->first, message->second);
  for (int replica = 0; replica < options_.data_parallel; ++replica) {
    const int source = replica * K + K - 1;
    if (source == group_->rank()) continue;
    auto& queue = held_[source];
    for (;;) {
      if (queue.empty()) {
        if (!at_flush) break;
        auto [from, bytes] = group_->recv_bytes(kResultTag);
        hold(from, bytes);
        continue;
      }
      if (!queue.front()) {  // the end of this flush interval
        if (at_flush) queue.pop_front();
        break;
      }
      relayed_.push_back(*queue.front());
      queue.pop_front();
    }
  }
}

void PipelineEngine::sync_partitions() {
  for (int k = 0; k < num_partitions_; ++k) {
    const int owner = k;  // replica 0's process of partition k
    for (const auto& [name, tensor] : parts_[k]->state_dict())
      broadcast_into(*group_, tensor, owner);
    partition_optimizer_[k] = sync_optimizer(k, owner);
  }
  synced_ = true;
}

// Partition k's momentum buffers, moving averages and step, from its owner to every process.
StateDict PipelineEngine::sync_optimizer(int k, int owner) {
  const NamedTensors params = parts_[k]->named_parameters();
  const std::vector<std::string>& prefixes = SGD::parameter_state_prefixes();
  // Key i: prefix i / params.size() of parameter i % params.size(); the last flag holds the step.
  const size_t n = params.size() * prefixes.size();
  const auto key_of = [&](size_t i) {
    return prefixes[i / params.size()] + params[i % params.size()].first;
  };
  Tensor flags = Tensor::zeros({static_cast<int64_t>(n) + 1}, kInt64);
  StateDict owned;
  if (group_->rank() == owner) {
    owned = stages_[0]->optimizer().state_dict();
    auto* data = static_cast<int64_t*>(flags.raw_data());
    for (size_t i = 0; i < n; ++i) data[i] = owned.contains(key_of(i));
    if (const Tensor* step = owned.find("step")) data[n] = step->to(kInt64).item<int64_t>();
  }
  group_->broadcast(flags, owner);
  const auto* data = static_cast<const int64_t*>(flags.raw_data());
  StateDict state;
  for (size_t i = 0; i < n; ++i) {
    if (!data[i]) continue;
    const std::string key = key_of(i);
    const Tensor& param = params[i % params.size()].second;
    Tensor buffer = group_->rank() == owner
                        ? owned.at(key)
                        : Tensor::empty(param.shape(), param.dtype(), param.device());
    broadcast_into(*group_, buffer, owner);
    state.insert(key, buffer);
  }
  state.insert("step", Tensor::scalar(static_cast<double>(data[n]), kInt64));
  return state;
}

StateDict PipelineEngine::merged_optimizer_state() const {
  StateDict merged;
  for (int k = 0; k < num_partitions_; ++k) {
    const StateDict part = k == partition_ ? stages_[0]->optimizer().state_dict()
                                           : partition_optimizer_[static_cast<size_t>(k)];
    for (const auto& [key, value] : part) {
      if (key != "step" || !merged.contains("step")) merged.insert(key, value);
    }
  }
  return merged;
}

void PipelineEngine::load_distributed_optimizer_state(const StateDict& state) {
  size_t used = 0;
  for (int k = 0; k < num_partitions_; ++k) {
    StateDict part;
    if (const Tensor* step = state.find("step")) part.insert("step", *step);
    for (const auto& [name, param] : parts_[k]->named_parameters()) {
      for (const std::string& prefix : SGD::parameter_state_prefixes()) {
        if (const Tensor* buffer = state.find(prefix + name)) {
          part.insert(prefix + name, *buffer);
          ++used;
        }
      }
    }
    if (k == partition_) stages_[0]->optimizer().load_state_dict(part);
    partition_optimizer_[static_cast<size_t>(k)] = part;
  }
  const size_t expected = state.size() - (state.contains("step") ? 1 : 0);
  if (used == expected) return;
  for (const std::string& key : state.keys()) {
    bool known = key == "step";
    for (const auto& part : parts_) {
      for (const auto& [name, param] : part->named_parameters()) {
        for (const std::string& prefix : SGD::parameter_state_prefixes())
          known = known || key == prefix + name;
      }
    }
    ECH_CHECK(known, "optimizer state: '", key, "' matches no parameter of the model");
  }
}

json::Value PipelineEngine::rank_stats() const {
  const PartitionStats s = stages_[0]->stats();
  double body_receive_s = 0;
  for (const auto* links : {&forward_links_, &backward_links_}) {
    for (const auto& link : *links) body_receive_s += link->body_receive_s();
  }
  return json::Value::object()
      .set("rank", group_->rank())
      .set("partition", partition_)
      .set("replica", replica_)
      .set("host", group_->host())
      .set("device", s.device)
      .set("batches", s.forwards)
      .set("forward_s", s.forward_s)
      .set("backward_s", s.backward_s)
      .set("update_s", s.update_s)
      .set("busy_s", s.busy_s)
      .set("busy_cpu_s", s.busy_cpu_s)
      .set("wait_s", s.wait_s)
      .set("body_receive_s", body_receive_s)
      .set("send_s", s.send_s)
      .set("all_reduce_wait_s", s.all_reduce.wait_s)
      .set("all_reduce_buckets", s.all_reduce.buckets)
      .set("all_reduce_buckets_overlapped", s.all_reduce.overlapped)
      .set("all_reduce_bytes", s.all_reduce.bytes)
      .set("bytes_sent", s.bytes_sent)
      .set("bytes_received", s.bytes_received);
}

// Like the traces: each rank sends its statistics to rank 0 (never blocking), rank 0 waits for
// one message per rank. Every rank has just left sync_partitions' broadcasts from rank 0, so no
// rank's next epoch's message can overtake another's of this epoch.
void PipelineEngine::gather_rank_stats() {
  const std::string own = rank_stats().dump();
  if (group_->rank() != 0) {
    group_->send_bytes(std::vector<uint8_t>(own.begin(), own.end()), 0, kStatsTag);
    return;
  }
  std::vector<json::Value> by_rank(static_cast<size_t>(group_->size()));
  by_rank[0] = json::parse(own);
  for (int received = 1; received < group_->size(); ++received) {
    auto [source, bytes] = group_->recv_bytes(kStatsTag);
    by_rank[static_cast<size_t>(source)] =
        json::parse(std::string(bytes.begin(), bytes.end()), str("rank ", source, "'s statistics"));
  }
  ranks_ = json::Value::array();
  for (json::Value& entry : by_rank) ranks_.push(std::move(entry));
}

json::Value PipelineEngine::distributed_report() const {
  return json::Value::object()
      .set("backend", group_->backend())
      .set("world_size", group_->size())
      .set("partitions", num_partitions_)
      .set("data_parallel", options_.data_parallel)
      .set("bucket_mb", options_.bucket_mb)
      .set("transport", forward_links_.empty() ? "none" : forward_links_.front()->kind())
      .set("note",
           "stages lists the partition of rank 0; ranks every rank's, at the last epoch end")
      .set("ranks", ranks_);
}

}  // namespace echelon::parallel
