// See run_setup.h.
#include <echelon/app/run_setup.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>

#include <echelon/autograd/grad_mode.h>
#include <echelon/base/error.h>
#include <echelon/base/file.h>
#include <echelon/base/json.h>
#include <echelon/layers/dropout.h>

namespace echelon::app::run_setup {

namespace {

// SplitMix64 finaliser: decorrelates the per-(seed, epoch, layer) dropout seeds.
uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace

void reseed_dropout(Module& module, uint64_t seed, int64_t epoch, uint64_t& counter) {
  if (auto* dropout = dynamic_cast<Dropout*>(&module))
    dropout->generator().set_state(
        mix(mix(seed) ^ mix(static_cast<uint64_t>(epoch) * 1000003u + counter)), 0);
  ++counter;
  for (const auto& child : module.children()) reseed_dropout(*child, seed, epoch, counter);
}

std::string diagnose_nonfinite(Sequential& model, const Tensor& images) {
  NoGradGuard no_grad;
  if (!ops::all_finite(images)) return "the input batch itself contains NaN/Inf";
  Tensor x = images;
  for (size_t i = 0; i < model.size(); ++i) {
    x = model.at(i)->forward(x);
    if (!ops::all_finite(x))
      return str("first non-finite output: layer ", i, " ", model.at(i)->describe());
  }
  return "every layer's output is finite; the loss itself overflowed";
}

void truncate_metrics(const std::string& path, int64_t epochs_done) {
  std::ifstream in(path);
  if (!in.good()) return;
  std::string kept, line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    try {
      const json::Value record = json::parse(line, path);
      const json::Value* epoch = record.find("epoch");
      if (epoch && epoch->as_int() <= epochs_done) kept += line + "\n";  // numbered from 1
    } catch (const Error&) {
      // A line torn by the interruption: dropped, the resumed run writes it again.
    }
  }
  in.close();
  write_file_atomic(path, kept);
}

std::shared_ptr<LrSchedule> make_schedule(const TrainOptions& o) {
  LrScheduleOptions s;
  s.kind = o.schedule;
  s.base_lr = o.lr;
  s.gamma = o.gamma;
  s.step_size = o.step_size;
  s.milestones = o.milestones;
  s.total_epochs = static_cast<double>(o.epochs);
  s.warmup_epochs = o.warmup_epochs;
  return make_lr_schedule(s);
}

data::LoaderOptions::WorkHook loader_trace_hook(parallel::TraceRecorder& trace) {
  using Clock = std::chrono::steady_clock;
  return [&trace](const std::string& stage, int worker, int64_t item, Clock::time_point start,
                  Clock::time_point end) {
    trace.record_on(trace.add_track("data loader", str(stage, " ", worker)), stage, start, end,
                    item);
  };
}

data::LoaderOptions loader_options(const TrainOptions& o, const data::AugmentOptions& augment,
                                   Device device, int workers) {
  data::LoaderOptions l;
  l.batch_size = o.batch_size;
  l.seed = o.seed;
  l.workers = workers;
  l.set_echo(o.echo);
  l.echo_at = data::parse_echo_placement(o.echo_at);
  l.shuffle_buffer = o.shuffle_buffer;
  l.augment = augment;
  l.device = device;
  return l;
}

SGDOptions sgd_config(const TrainOptions& o) {
  SGDOptions sgd;
  sgd.lr = o.lr;
  sgd.momentum = o.momentum;
  sgd.weight_decay = o.wd;
  sgd.nesterov = o.nesterov;
  sgd.ema_decay = o.ema;
  return sgd;
}

json::Value conv_autotune_json() {
  const std::vector<ops::ConvTuneRow> picks = ops::conv_tune_picks();
  if (picks.empty()) return json::Value();
  json::Value rows = json::Value::array();
  for (const ops::ConvTuneRow& p : picks)
    rows.push(json::Value::object()
                  .set("shape", p.shape)
                  .set("pass", p.pass)
                  .set("precision", p.precision)
                  .set("pick", p.pick)
                  .set("tuned_ms", p.tuned_ms)
                  .set("heuristic", p.heuristic)
                  .set("heuristic_ms", p.heuristic_ms)
                  .set("candidates", static_cast<int64_t>(p.candidates)));
  return rows;
}

ScopedRunSettings::ScopedRunSettings(const TrainOptions& o)
    : conv_impl_(ops::conv_impl()),
      deterministic_(ops::deterministic()),
      fused_ops_(ops::fused_ops()),
      precision_(ops::float32_precision()),
      autotune_(ops::conv_autotune()),
      cpu_threads_(ops::cpu_threads()) {
  ops::set_conv_impl(o.conv_impl == "cudnn" ? ops::ConvImpl::Cudnn : ops::ConvImpl::Ours);
  ops::set_deterministic(o.deterministic);
  ops::set_fused_ops(o.fuse);
  ops::set_float32_precision(o.precision == "tf32"   ? Precision::Tf32
                             : o.precision == "bf16" ? Precision::Bf16
                                                     : Precision::Fp32);
  // ECHELON_AUTOTUNE=1 keeps tuning on for a run without the flag, except a --deterministic one
  // (validate refuses the flag with it).
  ops::set_conv_autotune(o.autotune || (autotune_ && !o.deterministic));
  // --threads 0 keeps the pool's size but still makes OpenBLAS single-threaded: its own
  // workers spin after every call, and beside our pool or another rank's partition they took
  // the cores (bench/RESULTS.md, 2026-12-02, "the 2-process pipeline's compute").
  ops::set_cpu_threads(o.threads > 0 ? o.threads : std::max(1, ops::cpu_threads()));
}
ScopedRunSettings::~ScopedRunSettings() {
  ops::set_conv_impl(conv_impl_);
  ops::set_deterministic(deterministic_);
  ops::set_fused_ops(fused_ops_);
  ops::set_float32_precision(precision_);
  ops::set_conv_autotune(autotune_);
  if (cpu_threads_ > 0)
    ops::set_cpu_threads(cpu_threads_);
  else
    ops::reset_cpu_threads();
}

json::Value StartupTimes::to_json() const {
  return json::Value::object()
      .set("data_s", data_s)
      .set("device_s", device_s)
      .set("device_wait_s", device_wait_s)
      .set("model_s", model_s)
      .set("resident_s", resident_s)
      .set("first_step_s", first_step_s)
      .set("until_first_step_s", until_first_step_s);
}

std::string StartupTimes::line() const {
  char text[256];
  std::snprintf(text, sizeof(text),
                "start-up %.3f s: data %.3f s, device %.3f s (waited %.3f s), model %.3f s, "
                "resident data %.3f s; first step %.3f s",
                until_first_step_s, data_s, device_s, device_wait_s, model_s, resident_s,
                first_step_s);
  return text;
}

}  // namespace echelon::app::run_setup
