// Multi-process pipeline check, run under `mpirun -np W` (tests/mpi/CMakeLists.txt):
//   pipeline_mpi_check --partitions K [--data-parallel R] --schedules stale,stash,gpipe,hybrid
// Every process first trains the THREADED K-partition pipeline (one process, the reference), then
// the same model, seed and batches with one process per partition (and R replicas). With R = 1
// the per-mini-batch losses and every weight, momentum buffer and moving average must be
// bit-identical; with R > 1 (each replica gets half of each global batch) equal within float
// tolerance.
//   pipeline_mpi_check ... --buckets MB   the reference is instead the same multi-process run with
//                                      one gradient sum after each backward (--bucket-mb 0); the
//                                      run with MB-sized buckets must be bit-identical to it and
//                                      must have started buckets while its backward still ran.
//   pipeline_mpi_check ... --device cuda:0  both runs on that device (the emulation build: over the
//                                      emulated NCCL, cuda/sim/nccl.h); the partitions' links
//                                      must then be NCCL's.
//   pipeline_mpi_check --fail-rank r   rank r throws after two steps: every process must end.
//   pipeline_mpi_check ... --eval-lag-rank r  every process evaluates between epochs, rank r
//                                      after a 1 s stall, then share_evaluation: no partition may
//                                      run a forward of the next epoch while its process's driver
//                                      evaluates.
//   pipeline_mpi_check ... --follow 1  the processes of later partitions get no batch: they run
//                                      each epoch with follow_epoch(), as `echelon train`'s do.
//   pipeline_mpi_check ... --empty-epoch e  epoch e has no mini-batch (in both runs); with
//                                      --follow 1 the later partitions' processes must still see
//                                      it end (partition 0's process sends its epoch_end marker).
//   pipeline_mpi_check ... --balance-auto 1  cuts by profiling (--balance auto) the first batch.
//   pipeline_mpi_check ... --model resnet20 --split-blocks 1  ResNet-20 (instead of LeNet-5)
//                                      with each residual block as four layers: the even cuts
//                                      then fall inside blocks (cat(h, shortcut) crosses them).
//   pipeline_mpi_check --compare A B   (no mpirun) exit 0 when two checkpoints hold bit-identical
//                                      tensors (weights, momentum buffers) under the same names.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <echelon/base/error.h>
#include <echelon/layers/models/registry.h>
#include <echelon/parallel/pipeline.h>
#include <echelon/parallel/process_group.h>
#include <echelon/tensor/ops.h>
#include <echelon/tensor/random.h>
#include <echelon/tensor/safetensors.h>

using namespace echelon;
using namespace echelon::parallel;

namespace {

struct Args {
  int partitions = 2, data_parallel = 1, fail_rank = -1;
  int lag_rank = -1;       // this rank's driver stalls 2 s before its second step (a lagging relay)
  int eval_lag_rank = -1;  // >= 0: evaluate between epochs, this rank 1 s late
  bool follow = false;     // later partitions' processes run follow_epoch(), as the trainer's do
  int empty_epoch = -1;    // this epoch feeds no mini-batch
  bool balance_auto = false;
  bool split_blocks = false;
  std::string model = "lenet5";
  std::vector<std::string> schedules = {"stale"};
  int epochs = 2, batches = 4;
  int64_t batch = 16;
  double buckets_mb = -1;  // >= 0: compare bucketed against one-bucket runs (no threaded run)
  Device device = Device::cpu();
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--partitions")
      a.partitions = std::stoi(value);
    else if (flag == "--data-parallel")
      a.data_parallel = std::stoi(value);
    else if (flag == "--fail-rank")
      a.fail_rank = std::stoi(value);
    else if (flag == "--lag-rank")
      a.lag_rank = std::stoi(value);
    else if (flag == "--eval-lag-rank")
      a.eval_lag_rank = std::stoi(value);
    else if (flag == "--epochs")
      a.epochs = std::stoi(value);
    else if (flag == "--batches")
      a.batches = std::stoi(value);
    else if (flag == "--batch")
      a.batch = std::stoll(value);
    else if (flag == "--buckets")
      a.buckets_mb = std::stod(value);
    else if (flag == "--device")
      a.device = Device::parse(value);
    else if (flag == "--empty-epoch")
      a.empty_epoch = std::stoi(value);
    else if (flag == "--balance-auto")
      a.balance_auto = value == "1";
    else if (flag == "--split-blocks")
      a.split_blocks = value == "1";
    else if (flag == "--model")
      a.model = value;
    else if (flag == "--follow")
      a.follow = value == "1";
    else if (flag == "--schedules") {
      a.schedules.clear();
      for (size_t start = 0; start <= value.size();) {
        const size_t comma = std::min(value.find(',', start), value.size());
        a.schedules.push_back(value.substr(start, comma - start));
        start = comma + 1;
      }
    } else
      ECH_FAIL("unknown flag ", flag);
  }
  return a;
}

std::vector<data::Batch> make_batches(const Args& a) {
  Generator gen(7);
  std::vector<data::Batch> batches;
  for (int i = 0; i < a.batches; ++i) {
    data::Batch b;
    b.images = ops::randn({a.batch, 1, 28, 28}, gen);
    std::vector<int64_t> labels;
    for (float v : ops::rand({a.batch}, gen).to_vector<float>())
      labels.push_back(static_cast<int64_t>(v * 10) % 10);
    b.labels = Tensor::from_vector<int64_t>(labels, {a.batch});
    b.index = i;
    b.fresh = a.batch;
    batches.push_back(b);
  }
  return batches;
}

struct Outcome {
  std::vector<BatchResult> results;
  StateDict weights, optimizer;
  PartitionStats stats;   // this process's partition (the first one when threaded)
  std::string transport;  // multi-process: the first forward link's kind ("mpi", "nccl", "none")
  bool partition_thread_named = true;  // multi-process: a thread "ech-part-<its partition>" ran
};

// Whether this process has a thread called `name` (/proc/self/task/*/comm).
bool has_thread(const std::string& name) {
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(task.path() / "comm");
    std::string seen;
    if (std::getline(comm, seen) && seen == name) return true;
  }
  return false;
}

// Trains `epochs` epochs of `batches`; group null = the threaded reference.
Outcome train(const Args& a, const std::string& schedule,
              const std::shared_ptr<ProcessGroup>& group, int rank, double bucket_mb = 1.0) {
  PipelineOptions options;
  options.partitions = a.partitions;
  // "stale+predict": the stale schedule with --predict-weights.
  const size_t plus = schedule.find("+predict");
  options.predict_weights = plus != std::string::npos;
  options.schedule = parse_schedule(schedule.substr(0, plus));
  options.micro_batches = 3;
  options.hybrid_switch = 1;
  options.balance_auto = a.balance_auto;
  options.split_blocks = a.split_blocks;
  options.total_epochs = a.epochs;
  options.process_group = group;
  options.data_parallel = group ? a.data_parallel : 1;
  options.bucket_mb = bucket_mb;
  Outcome outcome;
  options.on_result = [&](const BatchResult& r) { outcome.results.push_back(r); };
  SGDOptions sgd;
  sgd.lr = 0.05;
  sgd.momentum = 0.9;
  sgd.ema_decay = 0.9;  // moving averages (--ema): synced between processes as momentum buffers are
  PipelineEngine engine(make_model(a.model, 1, 10, 3, 28), sgd, a.device, options);
  const std::vector<data::Batch> batches = make_batches(a);
  // Without --follow a later partition's process calls train_step with every batch too (it
  // sends nothing); with it, it sees no batch at all.
  const bool follows = group && a.follow && !engine.takes_batches();
  for (int epoch = 0; epoch < a.epochs; ++epoch) {
    for (size_t i = 0; i < batches.size() && !follows && epoch != a.empty_epoch; ++i) {
      if (group && rank == a.fail_rank && epoch == 0 && i == 2)
        ECH_FAIL("planted failure on rank ", rank, " (partition ", rank % a.partitions, ")");
      // After the first step started the engine, partition 0 feeds every batch meanwhile; a
      // later partition's results wait for this driver.
      if (group && rank == a.lag_rank && epoch == 0 && i == 1)
        std::this_thread::sleep_for(std::chrono::seconds(2));
      engine.train_step(batches[i]);
    }
    if (follows)
      engine.follow_epoch();
    else
      engine.finish_epoch();
    if (a.eval_lag_rank >= 0 && epoch + 1 < a.epochs) {
      // Partition 0's process evaluates at once and then feeds the next epoch; this partition's
      // layers must stay untouched until this process's evaluation has ended.
      const int64_t forwards = engine.partition_stats().front().forwards;
      if (group && rank == a.eval_lag_rank) std::this_thread::sleep_for(std::chrono::seconds(1));
      (void)engine.predict(batches[0].images);
      const int64_t during = engine.partition_stats().front().forwards - forwards;
      ECH_CHECK(during == 0, "rank ", rank, ": its partition ran ", during,
                " forwards of the next epoch while this process evaluated");
      std::vector<double> metrics = {static_cast<double>(rank)};
      engine.share_evaluation(metrics);  // every process has evaluated: the next epoch may start
      ECH_CHECK(!group || metrics[0] == 0, "rank ", rank, ": share_evaluation gave ", metrics[0],
                ", not rank 0's number");
    }
  }
  outcome.weights = engine.model().state_dict();
  outcome.optimizer = engine.optimizer_state();
  outcome.stats = engine.partition_stats().front();
  if (group) {
    outcome.transport = engine.report().at("processes").at("transport").as_string();
    // Named by its partition in the whole pipeline, not by its index in this process.
    outcome.partition_thread_named = has_thread("ech-part-" + std::to_string(rank % a.partitions));
  }
  return outcome;
}

// Number of values differing: bitwise (tolerance 0) or by |a-b| <= tol * (1 + |b|).
int64_t compare(const StateDict& got, const StateDict& want, double tolerance, const char* what) {
  ECH_CHECK(got.size() == want.size(), what, ": ", got.size(), " entries, expected ", want.size());
  int64_t differing = 0;
  for (const auto& [name, wanted] : want) {
    const Tensor actual = got.at(name).to(Device::cpu()).contiguous();
    const Tensor expected = wanted.to(Device::cpu()).contiguous();
    ECH_CHECK(actual.shape() == expected.shape(), what, " ", name, ": shapes differ");
    if (tolerance == 0) {
      differing += std::memcmp(actual.raw_data(), expected.raw_data(), expected.nbytes()) != 0;
      continue;
    }
    const std::vector<double> x = actual.to(kFloat64).to_vector<double>();
    const std::vector<double> y = expected.to(kFloat64).to_vector<double>();
    for (size_t i = 0; i < x.size(); ++i)
      differing += std::abs(x[i] - y[i]) > tolerance * (1 + std::abs(y[i]));
  }
  return differing;
}

int64_t compare_losses(const Outcome& got, const Outcome& want, int replicas, double tolerance) {
  // With replicas, a global mini-batch's loss is the sample-weighted mean of its shares.
  std::vector<double> loss_sum(want.results.size(), 0), samples(want.results.size(), 0);
  ECH_CHECK(got.results.size() == want.results.size() * static_cast<size_t>(replicas),
            got.results.size(), " results, expected ", want.results.size() * replicas);
  for (const BatchResult& r : got.results) {
    const auto i = static_cast<size_t>(r.id);
    ECH_CHECK(i < want.results.size(), "unexpected result id ", r.id);
    loss_sum[i] += r.loss * static_cast<double>(r.samples);
    samples[i] += static_cast<double>(r.samples);
  }
  int64_t differing = 0;
  for (size_t i = 0; i < want.results.size(); ++i) {
    const double expected = want.results[i].loss, actual = loss_sum[i] / samples[i];
    differing += tolerance == 0
                     ? actual != expected
                     : std::abs(actual - expected) > tolerance * (1 + std::abs(expected));
  }
  return differing;
}

// Two multi-process runs: every replica's loss of every mini-batch, bit for bit.
int64_t compare_replica_losses(const Outcome& got, const Outcome& want) {
  const auto losses = [](const Outcome& outcome) {
    std::map<std::pair<int64_t, int>, double> by_batch;  // (id, replica) -> loss
    for (const BatchResult& r : outcome.results) by_batch[{r.id, r.replica}] = r.loss;
    return by_batch;
  };
  const auto x = losses(got), y = losses(want);
  ECH_CHECK(x.size() == y.size() && x.size() == got.results.size(), got.results.size(),
            " results, expected ", want.results.size());
  int64_t differing = 0;
  for (const auto& [key, loss] : y) {
    const auto found = x.find(key);
    differing += found == x.end() || found->second != loss;
  }
  return differing;
}

int compare_checkpoints(const std::string& a, const std::string& b) {
  const auto to_dict = [](const std::string& path) {
    StateDict dict;
    for (const auto& [name, tensor] : safetensors::load(path).tensors) dict.insert(name, tensor);
    return dict;
  };
  const StateDict x = to_dict(a), y = to_dict(b);
  const int64_t differing = compare(x, y, 0, "checkpoint");
  std::printf("%zu tensors, %lld differ\n", y.size(), static_cast<long long>(differing));
  return differing == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 4 && std::string(argv[1]) == "--compare") {
    try {
      return compare_checkpoints(argv[2], argv[3]);
    } catch (const std::exception& e) {
      std::cerr << "pipeline_mpi_check: error: " << message_of(e) << "\n";
      return 2;
    }
  }
  std::shared_ptr<ProcessGroup> group;
  try {
    const Args a = parse(argc, argv);
    ops::set_deterministic(true);
    ops::set_cpu_threads(1);
    group = world_process_group();
    ECH_CHECK(group != nullptr, "run me under mpirun -np ", a.partitions * a.data_parallel);
    const int rank = group->rank();
    const bool buckets = a.buckets_mb >= 0;
    const double tolerance = a.data_parallel > 1 && !buckets ? 1e-4 : 0;
    int failures = 0;
    for (const std::string& schedule : a.schedules) {
      const Outcome want =
          buckets ? train(a, schedule, group, rank, 0.0) : train(a, schedule, nullptr, rank);
      const Outcome got = train(a, schedule, group, rank, buckets ? a.buckets_mb : 1.0);
      const int64_t losses = buckets ? compare_replica_losses(got, want)
                                     : compare_losses(got, want, a.data_parallel, tolerance);
      const int64_t weights = compare(got.weights, want.weights, tolerance, "weights");
      const int64_t momenta = compare(got.optimizer, want.optimizer, tolerance, "optimizer");
      bool ok = losses == 0 && weights == 0 && momenta == 0;
      // A partition with a next one sends over NCCL when on a GPU (the last one sends nothing).
      const bool sends = a.partitions > 1 && rank % a.partitions < a.partitions - 1;
      if (sends && a.device.is_cuda() && got.transport != "nccl") {
        std::printf("rank %d: the link to the next partition is %s, not nccl\n", rank,
                    got.transport.c_str());
        ok = false;
      }
      if (!got.partition_thread_named) {
        std::printf("rank %d: no thread is named ech-part-%d\n", rank, rank % a.partitions);
        ok = false;
      }
      if (buckets) {
        // One sum after each backward never overlaps; with small buckets every update overlaps.
        const AllReduceStats &one = want.stats.all_reduce, &many = got.stats.all_reduce;
        std::printf(
            "rank %d %-10s buckets: one-bucket run %lld sums (%lld overlapped), "
            "%g MiB run %lld sums (%lld overlapped), %lld updates\n",
            rank, schedule.c_str(), static_cast<long long>(one.buckets),
            static_cast<long long>(one.overlapped), a.buckets_mb,
            static_cast<long long>(many.buckets), static_cast<long long>(many.overlapped),
            static_cast<long long>(got.stats.updates));
        ok = ok && one.overlapped == 0 && one.buckets == want.stats.updates &&
             many.overlapped > 0 && many.buckets > got.stats.updates;
      }
      failures += ok ? 0 : 1;
      std::printf(
          "rank %d %-10s K=%d R=%d %s %s: %zu losses (%lld differ), weights (%lld differ), "
          "optimizer (%lld differ) -> %s\n",
          rank, schedule.c_str(), a.partitions, a.data_parallel, a.device.to_string().c_str(),
          buckets          ? "bit-identical to one bucket"
          : tolerance == 0 ? "bit-identical"
                           : "within 1e-4",
          want.results.size(), static_cast<long long>(losses), static_cast<long long>(weights),
          static_cast<long long>(momenta), ok ? "ok" : "FAILED");
    }
    group->barrier();
    return failures == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "pipeline_mpi_check: error: rank " << (group ? group->rank() : -1) << ": "
              << message_of(e) << std::endl;
    if (group) group->abort(3);
    return 3;
  }
}
