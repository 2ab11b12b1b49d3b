// Training-step throughput (images/s) of the single-device engine — forward, cross-entropy,
// backward, SGD with momentum — for LeNet-5 (1x28x28) and ResNet-20 (3x32x32), on the CPU with
// one BLAS thread and, when a CUDA device is usable at run time, on cuda:0. The data pipeline is
// left out: every step reuses one random batch already on the device.
//
// On the CPU, LeNet-5 at batch 64 is compared with PyTorch in the same run when a Python with torch
// is found ($ECHELON_PYTHON, python3, /usr/bin/python3 — Debian's python3-torch) (one thread, same
// model, same batch); otherwise the table says that torch was unavailable.
//
//   build/bench/exp_train_throughput [--steps N] [--warmup N]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <echelon/layers/models/registry.h>
#include <echelon/parallel/engine.h>
#include <echelon/tensor/ops.h>
#include <echelon/tensor/random.h>

namespace {

using namespace echelon;

struct Case {
  const char* model;
  int64_t channels, size, batch;
};

double measure(const Case& c, Device device, int warmup, int steps) {
  auto model = make_model(c.model, c.channels, 10, /*seed=*/1, c.size);
  SGDOptions sgd;
  sgd.lr = 0.01;
  sgd.momentum = 0.9;
  auto engine = parallel::make_single_device_engine(model, sgd, device);
  Generator gen(42);
  data::Batch batch;
  batch.images = ops::randn({c.batch, c.channels, c.size, c.size}, gen, kFloat32, device);
  std::vector<int64_t> labels(static_cast<size_t>(c.batch));
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int64_t>((i * 7 + 3) % 10);
  batch.labels = Tensor::from_vector(labels, {c.batch}).to(device);
  for (int i = 0; i < warmup; ++i) engine->train_step(batch);
  // The loss is read back every step (item()), so a CUDA step is complete when train_step returns.
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) engine->train_step(batch);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return static_cast<double>(c.batch) * steps / s;
}

// The first Python interpreter that can import torch: $ECHELON_PYTHON, then python3 on PATH,
// then Debian's /usr/bin/python3 (python3-torch installs there; PATH may lead to another Python).
std::string torch_python() {
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("ECHELON_PYTHON")) candidates.push_back(env);
  candidates.insert(candidates.end(), {"python3", "/usr/bin/python3"});
  for (const std::string& python : candidates)
    if (std::system((python + " -c 'import torch' >/dev/null 2>&1").c_str()) == 0) return python;
  return "";
}

// PyTorch LeNet-5 train-step images/s on one CPU thread; negative when torch is unavailable.
double torch_lenet(int64_t batch, int warmup, int steps) {
  const std::string python = torch_python();
  if (python.empty()) return -1;
  const std::string script =
      "import time, torch\n"
      "from torch import nn\n"
      "torch.set_num_threads(1); torch.manual_seed(1)\n"
      "m = nn.Sequential(nn.Conv2d(1,6,5,padding=2), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(6,16,5),"
      " nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(400,120), nn.ReLU(), nn.Linear(120,84),"
      " nn.ReLU(), nn.Linear(84,10))\n"
      "opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)\n"
      "x = torch.randn(" +
      std::to_string(batch) + ",1,28,28); y = torch.arange(" + std::to_string(batch) +
      ") % 10\n"
      "def step():\n"
      "  opt.zero_grad(); loss = nn.functional.cross_entropy(m(x), y); loss.backward(); opt.step();"
      " return loss.item()\n"
      "for _ in range(" +
      std::to_string(warmup) +
      "): step()\n"
      "t = time.perf_counter()\n"
      "for _ in range(" +
      std::to_string(steps) +
      "): step()\n"
      "print(" +
      std::to_string(batch * steps) + " / (time.perf_counter() - t))\n";
  FILE* pipe = popen((python + " -c \"" + script + "\"").c_str(), "r");
  if (!pipe) return -1;
  double rate = -1;
  if (std::fscanf(pipe, "%lf", &rate) != 1) rate = -1;
  pclose(pipe);
  return rate;
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 30, warmup = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--steps") == 0)
      steps = std::atoi(argv[i + 1]);
    else if (std::strcmp(argv[i], "--warmup") == 0)
      warmup = std::atoi(argv[i + 1]);
  }
  if (steps < 1 || warmup < 0) {
    std::fprintf(stderr, "exp_train_throughput: --steps must be >= 1 and --warmup >= 0\n");
    return 2;
  }
  ops::set_cpu_threads(1);
  const std::vector<Case> cases = {{"lenet5", 1, 28, 64}, {"resnet20", 3, 32, 64}};
  std::vector<Device> devices = {Device::cpu()};
  if (cuda_available()) devices.push_back(Device::cuda(0));

  std::printf("%-10s %-7s %6s %14s\n", "model", "device", "batch", "images/s");
  for (const Device& device : devices) {
    for (const Case& c : cases) {
      // ResNet-20 on one CPU thread is slow: fewer steps keep the run short.
      const int n =
          device.is_cpu() && std::string(c.model) == "resnet20" ? std::max(steps / 6, 2) : steps;
      const double rate = measure(c, device, warmup, n);
      std::printf("%-10s %-7s %6lld %14.1f\n", c.model, device.to_string().c_str(),
                  static_cast<long long>(c.batch), rate);
      std::fflush(stdout);
    }
  }
  const double torch_rate = torch_lenet(64, warmup, steps);
  if (torch_rate > 0)
    std::printf("%-10s %-7s %6d %14.1f   (PyTorch, 1 thread, same run)\n", "lenet5", "torch", 64,
                torch_rate);
  else
    std::printf("PyTorch: unavailable (python3 cannot import torch): no peer measured\n");
  return 0;
}
