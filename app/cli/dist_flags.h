// Multi-process runs for `echelon train`: the --data-parallel flag and joining the process group
// that `mpirun` (or a torchrun-style rendezvous, parallel/rendezvous.h) started. Header-only, like
// pipeline_flags.h. With mpirun -np W, every process runs the same command; rank r runs pipeline
// partition r % K of replica r / K (W = K * R). Only rank 0 prints and writes the run folder.
#pragma once

#include <sched.h>

#include <cmath>
#include <cstdlib>
#include <memory>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include <echelon/app/cli/pipeline_flags.h>
#include <echelon/app/train.h>
#include <echelon/base/error.h>
#include <echelon/base/json.h>
#include <echelon/parallel/process_group.h>
#if ECHELON_WITH_NCCL
#include <echelon/parallel/nccl_comm.h>
#endif

namespace echelon::app {

inline void add_distributed_options(CLI::App& app, parallel::PipelineOptions& options) {
  app.add_option("--data-parallel", options.data_parallel,
                 "Replicas R of the pipeline, one process each (mpirun -np K*R); --batch-size is "
                 "the global batch, split across the replicas")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--bucket-mb", options.bucket_mb,
                 "Data parallelism: sum the gradients in buckets of about this many MiB, each "
                 "started while the backward of the earlier layers runs; 0 = one sum after the "
                 "backward")
      ->check(CLI::Validator(
          [](const std::string& text) -> std::string {
            double mb = -1;
            try {
              size_t used = 0;
              mb = std::stod(text, &used);
              if (used != text.size()) mb = -1;
            } catch (const std::exception&) {
              mb = -1;
            }
            if (std::isfinite(mb) && mb >= 0 && mb <= parallel::kMaxBucketMb) return "";
            return str("must be a number of MiB in [0, ", parallel::kMaxBucketMb, "], got '", text,
                       "'");
          },
          "MiB in [0, 1024]"));
}

// On --resume: --bucket-mb not given again takes the run's value from config.json ("engine").
inline void restore_bucket_mb(const CLI::App& cmd, const json::Value& saved,
                              parallel::PipelineOptions& options) {
  const json::Value* value = saved.find("bucket-mb");
  if (cmd.count("--bucket-mb") > 0 || value == nullptr) return;
  double mb = -1;
  try {
    mb = value->as_double();
  } catch (const Error& e) {
    ECH_FAIL("config.json: engine key \"bucket-mb\": ", e.message());
  }
  ECH_CHECK(std::isfinite(mb) && mb >= 0 && mb <= parallel::kMaxBucketMb, value->where(),
            ": engine key \"bucket-mb\" must be in [0, ", parallel::kMaxBucketMb, "], got ", mb);
  options.bucket_mb = mb;
}

// On --resume: --data-parallel not given again takes the run's value from config.json ("engine").
inline void restore_distributed_flags(const CLI::App& cmd, const json::Value& saved,
                                      parallel::PipelineOptions& options) {
  restore_bucket_mb(cmd, saved, options);
  const json::Value* value = saved.find("data-parallel");
  if (cmd.count("--data-parallel") > 0 || value == nullptr) return;
  int64_t replicas = 0;
  try {
    replicas = value->as_int();
  } catch (const Error& e) {
    ECH_FAIL("config.json: engine key \"data-parallel\": ", e.message());
  }
  ECH_CHECK(replicas >= 1 && replicas <= 1 << 20, value->where(),
            ": engine key \"data-parallel\" must be in [1, 2^20], got ", replicas);
  options.data_parallel = static_cast<int>(replicas);
}

// The world group when started by mpirun (else nullptr), checked against --pipeline and
// --data-parallel; sets the engine's group and makes ranks other than 0 silent.
inline std::shared_ptr<parallel::ProcessGroup> join_process_group(PipelineFlags& flags,
                                                                  TrainOptions& train) {
  parallel::PipelineOptions& o = flags.options;
  ECH_CHECK(o.data_parallel >= 1, "--data-parallel must be >= 1, got ", o.data_parallel);
  std::shared_ptr<parallel::ProcessGroup> world = parallel::world_process_group();
  if (!world) {
    ECH_CHECK(o.data_parallel == 1, "--data-parallel ", o.data_parallel,
              " needs one process per replica: start the run with mpirun -np ",
              o.partitions * o.data_parallel);
    return nullptr;
  }
  ECH_CHECK(world->size() == o.partitions * o.data_parallel, "the run has ", world->size(),
            " processes, but --pipeline ", o.partitions, " x --data-parallel ", o.data_parallel,
            " needs ", o.partitions * o.data_parallel);
  ECH_CHECK(o.devices.empty(), "--devices places the partitions of one process; under mpirun ",
            "each rank runs one partition on cuda:<local rank> (--device cuda)");
  o.process_group = world;
  train.primary = world->rank() == 0;
  train.loads_data = world->rank() % o.partitions == 0;  // partition 0 of its replica
  // One GPU per process: --device cuda (or auto, when a GPU is there) becomes cuda:<local rank>
  // (mpirun's, or torchrun's LOCAL_RANK); too few GPUs then fail naming the device.
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  if (local == nullptr) local = std::getenv("LOCAL_RANK");
  if (local != nullptr &&
      (train.device == "cuda" || (train.device == "auto" && resolve_device("auto").is_cuda()))) {
    train.device = str("cuda:", local);
  }
  return world;
}

// CPU numbers as Linux lists them: {0, 1, 2, 5} -> "0-2,5" (sorted, no duplicates).
inline std::string cpu_list_text(const std::vector<int>& cpus) {
  std::string text;
  for (size_t i = 0; i < cpus.size();) {
    size_t last = i;
    while (last + 1 < cpus.size() && cpus[last + 1] == cpus[last] + 1) ++last;
    text += (text.empty() ? "" : ",") + std::to_string(cpus[i]);
    if (last > i) text += "-" + std::to_string(cpus[last]);
    i = last + 1;
  }
  return text;
}

// The CPUs this process may run on (its affinity: mpirun binds each rank to one core unless
// started with --bind-to none).
inline std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  return cpus;
}

// A rank whose --threads exceed the CPUs it may run on: its pool's threads take turns on them.
inline std::string binding_warning(int rank, const std::string& cpus, int num_cpus, int threads) {
  if (num_cpus <= 0 || threads <= num_cpus) return "";
  return str("warning: rank ", rank, " may run on ", num_cpus, num_cpus == 1 ? " CPU" : " CPUs",
             " (", cpus, ") but has --threads ", threads,
             ": mpirun binds each rank to one core by default; start it with --bind-to none "
             "(echelon launch does) or lower --threads\n");
}

// Rank 0 prints where every rank runs: "rank 1: host node2, device cpu, partition 1 of replica
// 0, cpus 1", and a warning for a rank with more --threads than CPUs.
inline void print_topology(parallel::ProcessGroup& world, const parallel::PipelineOptions& o,
                           const std::string& device, int threads, std::ostream& out) {
  constexpr int kHostTag = 7;
  // What a rank says of itself: "host<TAB>device<TAB>cpus<TAB>number of cpus<TAB>threads".
  const std::vector<int> cpus = allowed_cpus();
  const std::string self = world.host() + "\t" + device + "\t" + cpu_list_text(cpus) + "\t" +
                           std::to_string(cpus.size()) + "\t" + std::to_string(threads);
  if (world.rank() != 0) {
    world.send_bytes(std::vector<uint8_t>(self.begin(), self.end()), 0, kHostTag);
    return;
  }
  std::vector<std::string> ranks(static_cast<size_t>(world.size()));
  ranks[0] = self;
  for (int i = 1; i < world.size(); ++i) {
    auto [rank, bytes] = world.recv_bytes(kHostTag);
    ranks[static_cast<size_t>(rank)] = std::string(bytes.begin(), bytes.end());
  }
  // Activations of GPU partitions go device to device over NCCL when the build has it, else over
  // MPI through the host (parallel/mpi_group.cpp); CPU tensors always go over MPI.
  const bool on_gpu = device.rfind("cuda", 0) == 0;
#if ECHELON_WITH_NCCL
  const std::string transport =
      on_gpu ? "nccl " + parallel::NcclCommunicator::version() + " (GPU tensors), mpi" : "mpi";
#else
  const std::string transport = on_gpu ? "mpi (through the host: this build has no NCCL)" : "mpi";
#endif
  out << "processes: " << world.size() << " (" << world.backend() << "), pipeline " << o.partitions
      << " x data-parallel " << o.data_parallel << ", transport " << transport << "\n";
  std::string warnings;
  for (int rank = 0; rank < world.size(); ++rank) {
    std::vector<std::string> said;
    std::stringstream fields(ranks[static_cast<size_t>(rank)]);
    for (std::string field; std::getline(fields, field, '\t');) said.push_back(field);
    said.resize(5);
    out << "  rank " << rank << ": host " << said[0] << ", device " << said[1] << ", partition "
        << rank % o.partitions << " of replica " << rank / o.partitions << ", cpus " << said[2]
        << "\n";
    warnings +=
        binding_warning(rank, said[2], std::atoi(said[3].c_str()), std::atoi(said[4].c_str()));
  }
  out << warnings;
}

}  // namespace echelon::app
