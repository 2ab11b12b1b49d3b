// Training-step throughput (images/s) of the single-device engine — forward, cross-entropy,
// backward, SGD with momentum — for LeNet-5 (1x28x28, batch 64) and ResNet-20 (1x32x32, batch
// 128) on the CPU at 1 and 2 threads, against PyTorch in the same run: Debian's python3-torch
// (or $ECHELON_PYTHON) eager, and PyPI's current release eager and torch.compile'd when
// tools/setup-torch-peer.sh has made its venv ($ECHELON_TORCH_VENV). Each case alternates
// Echelon and every peer for --rounds rounds; a cell is the median round. The data pipeline is
// left out: every step reuses one random batch already in memory. When a CUDA device is usable,
// Echelon's cuda:0 rate is printed after the table.
//
// A second table (unless --no-epoch) puts the data pipeline back: a whole epoch over the first
// --epoch-images Fashion-MNIST training images through the loader as `echelon train` sets it up
// (normalisation), against the step-only rate of the same model at the same 28x28 size, all
// alternating in each round: the threaded loader with 1 worker per stage, and the inline loader
// (--workers 0: every stage inside next(), on the training thread). The timed epoch is the second
// of two, so start-up is left out. The step-only rate there times as many steps as the epoch has
// batches (--epoch-step-steps; before 2026-12-03 it was --steps, 30 for LeNet-5: a 0.1 s window
// against the epoch's 0.4 s, which swung the per-round ratios by +-10% on a shared machine).
// Issue 13's goal: epoch / step >= 0.95.
//
//   build/bench/exp_train_throughput [--steps N] [--resnet-steps N] [--rounds N] [--no-torch]
//                                    [--no-epoch] [--epoch-images N] [--epoch-step-steps N]
//                                    [--data-dir DIR]
//                                    [--cpu-time] [--models lenet5 resnet20] [--threads 1 2]
// --cpu-time rates Echelon by the process's CPU seconds instead of wall seconds (images per CPU
// second; the epoch table too): at 1 thread it hardly moves when other processes share the cores,
// so A/B runs of two builds on a loaded machine compare; at 2 threads it also counts the pool's
// spin-waits (and in the epoch table the loader threads' CPU).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <string>
#include <vector>

#include <echelon/data/loader.h>
#include <echelon/data/registry.h>
#include <echelon/layers/models/registry.h>
#include <echelon/parallel/engine.h>
#include <echelon/tensor/ops.h>
#include <echelon/tensor/random.h>

#include "bench/driver_args.h"

namespace {

using namespace echelon;

struct Case {
  const char* model;
  int64_t channels, size, batch;
  int steps;
};

double process_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

// Echelon's images/s (per CPU second when cpu_time) over `steps` steps after `warmup` untimed
// ones.
double measure(const Case& c, Device device, int warmup, int steps, bool cpu_time = false) {
  auto model = make_model(c.model, c.channels, 10, /*seed=*/1, c.size);
  SGDOptions sgd;
  sgd.lr = 0.01;
  sgd.momentum = 0.9;
  auto engine = parallel::make_single_device_engine(model, sgd, device);
  Generator gen(42);
  data::Batch batch;
  batch.images = ops::randn({c.batch, c.channels, c.size, c.size}, gen, kFloat32, device);
  std::vector<int64_t> labels(static_cast<size_t>(c.batch));
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int64_t>(i % 10);
  batch.labels = Tensor::from_vector(labels, {c.batch}).to(device);
  for (int i = 0; i < warmup; ++i) engine->train_step(batch);
  // The loss is read back every step (item()), so a CUDA step is complete when train_step returns.
  const auto start = std::chrono::steady_clock::now();
  const double cpu_start = process_cpu_seconds();
  for (int i = 0; i < steps; ++i) engine->train_step(batch);
  const double s =
      cpu_time ? process_cpu_seconds() - cpu_start
               : std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return static_cast<double>(c.batch) * steps / s;
}

// Whole-epoch images/s: the second of two epochs over `data.train` through the loader with
// `workers` per stage (0: inline; else the engine and the loader's threads share the CPU, as in
// `echelon train`); per process CPU second when cpu_time.
double measure_epoch(const Case& c, const data::DatasetSplits& data, int workers, bool cpu_time) {
  auto model = make_model(c.model, data.channels, data.num_classes, /*seed=*/1, data.image_size);
  SGDOptions sgd;
  sgd.lr = 0.01;
  sgd.momentum = 0.9;
  auto engine = parallel::make_single_device_engine(model, sgd, Device::cpu());
  data::LoaderOptions options;
  options.batch_size = c.batch;
  options.workers = workers;
  options.seed = 1;
  options.augment = data.train_augment;
  data::Loader loader(data.train, options);
  double rate = 0;
  for (int epoch = 0; epoch < 2; ++epoch) {
    const auto start = std::chrono::steady_clock::now();
    const double cpu_start = process_cpu_seconds();
    loader.start_epoch(epoch);
    int64_t images = 0;
    while (auto batch = loader.next()) {
      engine->train_step(*batch);
      images += batch->images.size(0);
    }
    const double s =
        cpu_time ? process_cpu_seconds() - cpu_start
                 : std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    rate = static_cast<double>(images) / s;
  }
  return rate;
}

struct Peer {
  std::string label;   // "torch 1.13 eager", filled in from the version the script prints
  std::string python;  // interpreter
  bool compiled = false;
};

// The torch version `python` imports ("1.13.0a0"), or "" when it cannot import torch.
std::string torch_version(const std::string& python) {
  const std::string command =
      python + " -c 'import torch; print(torch.__version__.split(\"+\")[0])' 2>/dev/null";
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return "";
  char version[64] = {0};
  const bool ok = std::fscanf(pipe, "%63s", version) == 1;
  pclose(pipe);
  return ok ? version : "";
}

// Debian's torch (the first of $ECHELON_PYTHON, /usr/bin/python3, python3 that imports it), then
// the venv's eager and compiled, when present.
std::vector<Peer> find_peers() {
  std::vector<Peer> peers;
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("ECHELON_PYTHON")) candidates.push_back(env);
  candidates.insert(candidates.end(), {"/usr/bin/python3", "python3"});
  for (const std::string& python : candidates)
    if (const std::string v = torch_version(python); !v.empty()) {
      peers.push_back({"torch " + v + " eager", python, false});
      break;
    }
  const char* venv_env = std::getenv("ECHELON_TORCH_VENV");
  const char* home = std::getenv("HOME");
  const std::string venv =
      venv_env ? venv_env : std::string(home ? home : "") + "/.cache/echelon/torch-venv";
  const std::string venv_python = venv + "/bin/python";
  const std::string v = std::filesystem::exists(venv_python) ? torch_version(venv_python) : "";
  if (!v.empty()) {
    peers.push_back({"torch " + v + " eager", venv_python, false});
    peers.push_back({"torch " + v + " compiled", venv_python, true});
  }
  return peers;
}

// The peer's images/s for one case (negative when it failed).
double measure_peer(const Peer& peer, const Case& c, int threads, int warmup) {
  const std::string command =
      peer.python + " " + ECHELON_SOURCE_DIR + "/bench/torch_train_step.py " + c.model + " " +
      std::to_string(c.batch) + " " + std::to_string(threads) + " " + std::to_string(c.steps) +
      " " + std::to_string(warmup) + (peer.compiled ? " --compile" : "") + " 2>/dev/null";
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return -1;
  char version[64] = {0};
  double rate = -1;
  if (std::fscanf(pipe, "%63s %lf", version, &rate) != 2) rate = -1;
  pclose(pipe);
  return rate;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? -1 : v[v.size() / 2];
}

struct Options {
  int lenet_steps = 30, resnet_steps = 3, rounds = 3, warmup = 2;
  bool torch = true, cpu_time = false;
  bool epoch = true;
  int64_t epoch_images = 6400;
  int epoch_step_steps = 0;  // step-only steps in the epoch table; 0: the epoch's batch count
  std::string data_dir;
  std::vector<std::string> models = {"lenet5", "resnet20"};
  std::vector<int> threads = {1, 2};
};

Options parse(int argc, char** argv) {
  Options o;
  bool no_torch = false, no_epoch = false;
  CLI::App app{"Train-step images/s, LeNet-5 and ResNet-20 on the CPU, vs PyTorch in the same run",
               "exp_train_throughput"};
  app.option_defaults()->always_capture_default();
  app.add_option("--steps", o.lenet_steps, "LeNet-5 steps per measurement")
      ->check(CLI::Range(1, 100000));
  app.add_option("--resnet-steps", o.resnet_steps, "ResNet-20 steps per measurement")
      ->check(CLI::Range(1, 100000));
  app.add_option("--rounds", o.rounds, "Alternating rounds (the median is kept)")
      ->check(CLI::Range(1, 1000));
  app.add_flag("--no-torch", no_torch, "Echelon only: skip the PyTorch peers");
  app.add_flag("--no-epoch", no_epoch, "Skip the whole-epoch table (data pipeline included)");
  app.add_option("--epoch-images", o.epoch_images,
                 "Fashion-MNIST training images per timed epoch (a multiple of 128 keeps every "
                 "batch full)")
      ->check(CLI::Range(int64_t{128}, int64_t{60000}));
  app.add_option("--epoch-step-steps", o.epoch_step_steps,
                 "Step-only steps timed in the epoch table (0: as many as the epoch has batches)")
      ->check(CLI::Range(0, 100000));
  app.add_option("--data-dir", o.data_dir, "Fashion-MNIST folder (default: Debian's)");
  app.add_option("--models", o.models, "Models to measure (lenet5, resnet20)")
      ->check(CLI::IsMember({"lenet5", "resnet20"}));
  app.add_option("--threads", o.threads, "Thread counts to measure")->check(CLI::Range(1, 64));
  app.add_flag("--cpu-time", o.cpu_time,
               "Rate Echelon per process CPU second (for A/B on a loaded machine)");
  echelon::bench::parse_args_or_exit(app, argc, argv);
  o.torch = !no_torch;
  o.epoch = !no_epoch;
  return o;
}

// One table row: Echelon and every peer alternating for `rounds` rounds, medians and the ratio.
void run_row(const Case& c, int threads, const Options& o, const std::vector<Peer>& peers) {
  ops::set_cpu_threads(threads);
  std::vector<std::vector<double>> rates(1 + peers.size());
  for (int round = 0; round < o.rounds; ++round) {
    rates[0].push_back(measure(c, Device::cpu(), o.warmup, c.steps, o.cpu_time));
    for (size_t p = 0; p < peers.size(); ++p)
      rates[p + 1].push_back(measure_peer(peers[p], c, threads, o.warmup));
  }
  const double ours = median(rates[0]);
  double best = -1;
  std::printf("| %s, %lld, %d | %.1f", c.model, static_cast<long long>(c.batch), threads, ours);
  for (size_t p = 0; p < peers.size(); ++p) {
    const double r = median(rates[p + 1]);
    best = std::max(best, r);
    std::printf(" | %.1f", r);
  }
  if (best > 0)
    std::printf(" | %.2f |\n", ours / best);
  else
    std::printf(" | - |\n");
  std::fflush(stdout);
}

// One row of the epoch table: step-only, threaded-loader and inline-loader epoch rates
// alternating for `rounds` rounds (each round's ratios printed too, so the spread shows).
void run_epoch_row(Case c, int threads, const Options& o, const data::DatasetSplits& data) {
  ops::set_cpu_threads(threads);
  c.channels = data.channels;
  c.size = data.image_size;
  // The step-only window as long as the epoch's: a short one rides the machine's swings alone.
  const int64_t batches = (data.train->size() + c.batch - 1) / c.batch;
  c.steps = o.epoch_step_steps > 0 ? o.epoch_step_steps : static_cast<int>(batches);
  std::vector<double> step, threaded, inline_epoch;
  std::string rounds;
  for (int round = 0; round < o.rounds; ++round) {
    step.push_back(measure(c, Device::cpu(), o.warmup, c.steps, o.cpu_time));
    threaded.push_back(measure_epoch(c, data, /*workers=*/1, o.cpu_time));
    inline_epoch.push_back(measure_epoch(c, data, /*workers=*/0, o.cpu_time));
    char text[64];
    std::snprintf(text, sizeof text, "%s%.2f/%.2f", round > 0 ? " " : "",
                  threaded.back() / step.back(), inline_epoch.back() / step.back());
    rounds += text;
  }
  const double s = median(step), t = median(threaded), n = median(inline_epoch);
  std::printf("| %s, %lld, %d | %.1f | %.1f | %.3f | %.1f | %.3f | %s |\n", c.model,
              static_cast<long long>(c.batch), threads, s, t, t / s, n, n / s, rounds.c_str());
  std::fflush(stdout);
}

void run_epoch_table(const std::vector<Case>& cases, const Options& o) {
  data::DatasetSplits data;
  try {
    data = data::load_dataset("fashion-mnist", o.data_dir, {.train = o.epoch_images, .test = 1});
  } catch (const Error& e) {
    std::printf("whole epoch: skipped (%s)\n", e.what());
    return;
  }
  std::printf(
      "\nwhole epoch (%lld Fashion-MNIST images, %dx%d; loader with 1 worker per stage, and "
      "inline: --workers 0) vs step-only at the same size (%s steps), images/s, median of %d "
      "alternating rounds%s\n",
      static_cast<long long>(data.train->size()), static_cast<int>(data.image_size),
      static_cast<int>(data.image_size),
      o.epoch_step_steps > 0 ? std::to_string(o.epoch_step_steps).c_str() : "epoch's batches",
      o.rounds, o.cpu_time ? " (--cpu-time: images per process CPU second)" : "");
  std::printf(
      "| model, batch, threads | step only | epoch, 1 worker | epoch / step | epoch, inline | "
      "inline / step | per round: 1 worker / inline, each over step |\n"
      "|---|---|---|---|---|---|---|\n");
  for (const Case& c : cases)
    for (int threads : o.threads) run_epoch_row(c, threads, o, data);
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  std::vector<Case> cases;
  for (const Case& c :
       {Case{"lenet5", 1, 28, 64, o.lenet_steps}, Case{"resnet20", 1, 32, 128, o.resnet_steps}})
    if (std::find(o.models.begin(), o.models.end(), c.model) != o.models.end()) cases.push_back(c);
  const std::vector<Peer> peers = o.torch ? find_peers() : std::vector<Peer>();
  if (o.torch && peers.empty())
    std::printf("PyTorch: unavailable (no python3 imports torch): no peer measured\n");
  std::printf("images/s, median of %d alternating rounds (Echelon first, then each peer)\n",
              o.rounds);
  std::printf("| model, batch, threads | Echelon");
  for (const Peer& p : peers) std::printf(" | %s", p.label.c_str());
  std::printf(" | Echelon / best peer |\n|---|---");
  for (size_t p = 0; p < peers.size(); ++p) std::printf("|---");
  std::printf("|---|\n");
  for (const Case& c : cases)
    for (int threads : o.threads) run_row(c, threads, o, peers);
  if (o.epoch) run_epoch_table(cases, o);
  if (cuda_available()) {
    for (const Case& c : cases)
      std::printf("%s cuda:0 batch %lld: %.1f images/s\n", c.model, static_cast<long long>(c.batch),
                  measure(c, Device::cuda(0), o.warmup, c.steps));
  }
  return 0;
}
