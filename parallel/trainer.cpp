#include <echelon/parallel/trainer.h>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iostream>

#include <echelon/autograd/grad_mode.h>
#include <echelon/base/error.h>
#include <echelon/layers/dropout.h>
#include <echelon/layers/loss.h>
#include <echelon/layers/lr_schedule.h>
#include <echelon/layers/models/registry.h>
#include <echelon/parallel/report.h>
#include <echelon/parallel/trainer_checkpoint.h>
#include <echelon/tensor/ops.h>
#include <echelon/tensor/safetensors.h>

// OpenBLAS's thread control, when the program links OpenBLAS (weak: absent otherwise).
extern "C" void openblas_set_num_threads(int threads) __attribute__((weak));

namespace echelon::parallel {

namespace {

std::atomic<bool> g_stop_requested{false};
static_assert(std::atomic<bool>::is_always_lock_free, "request_stop must be signal-safe");

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::string percent(double fraction) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f%%", 100.0 * fraction);
  return buf;
}

// SplitMix64 finaliser: decorrelates the per-(seed, epoch, layer) dropout seeds.
uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Dropout masks become a function of (seed, epoch, layer), so a resumed run draws the same ones.
void reseed_dropout(Module& module, uint64_t seed, int64_t epoch, uint64_t& counter) {
  if (auto* dropout = dynamic_cast<Dropout*>(&module))
    dropout->generator().set_state(
        mix(mix(seed) ^ mix(static_cast<uint64_t>(epoch) * 1000003u + counter)), 0);
  ++counter;
  for (const auto& child : module.children()) reseed_dropout(*child, seed, epoch, counter);
}

// Re-runs the forward layer by layer to name the first layer whose output is non-finite.
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

// Keeps only the records of epochs before `first_epoch` (a resumed run rewrites the rest).
void truncate_metrics(const std::string& path, int64_t first_epoch) {
  std::ifstream in(path);
  if (!in.good()) return;
  std::string kept, line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    try {
      const json::Value record = json::parse(line, path);
      const json::Value* epoch = record.find("epoch");
      if (epoch && epoch->as_int() < first_epoch) kept += line + "\n";
    } catch (const Error&) {
      // A line torn by the interruption: dropped, the resumed run writes it again.
    }
  }
  in.close();
  safetensors::write_file_atomic(path, kept);
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

data::LoaderOptions loader_options(const TrainOptions& o, const data::AugmentOptions& augment,
                                   Device device) {
  data::LoaderOptions l;
  l.batch_size = o.batch_size;
  l.seed = o.seed;
  l.workers = o.workers;
  l.set_echo(o.echo);
  l.echo_at = data::parse_echo_placement(o.echo_at);
  l.shuffle_buffer = o.shuffle_buffer;
  l.augment = augment;
  l.device = device;
  return l;
}

}  // namespace

void request_stop() {
  g_stop_requested.store(true);
}

EvalResult evaluate(StepEngine& engine, std::shared_ptr<const data::Dataset> dataset,
                    const data::AugmentOptions& augment, int64_t batch_size, int workers,
                    Device device) {
  data::LoaderOptions l;
  l.batch_size = batch_size;
  l.shuffle = false;
  l.workers = workers;
  l.augment = augment;
  l.device = device;
  data::Loader loader(std::move(dataset), l);
  loader.start_epoch(0);
  EvalResult result;
  double loss_sum = 0;
  int64_t correct = 0;
  while (auto batch = loader.next()) {
    const Tensor logits = engine.predict(batch->images);  // (B, classes)
    NoGradGuard no_grad;
    Tensor log_probs;
    const Tensor labels = batch->labels.device() == logits.device()
                              ? batch->labels
                              : batch->labels.to(logits.device());
    const double loss = ops::cross_entropy(logits, labels, &log_probs).item<float>();
    const int64_t n = batch->images.size(0);
    loss_sum += loss * static_cast<double>(n);
    correct += correct_count(logits, labels);
    result.samples += n;
  }
  if (result.samples > 0) {
    result.loss = loss_sum / static_cast<double>(result.samples);
    result.accuracy = static_cast<double>(correct) / static_cast<double>(result.samples);
  }
  return result;
}

TrainResult train(const TrainOptions& options, std::ostream& out, const EngineFactory& factory) {
  validate(options);
  g_stop_requested.store(false);
  const auto wall_start = Clock::now();
  const Device device = resolve_device(options.device);
  ops::set_conv_impl(options.conv_impl == "cudnn" ? ops::ConvImpl::Cudnn : ops::ConvImpl::Ours);
  if (options.threads > 0 && openblas_set_num_threads) openblas_set_num_threads(options.threads);

  const std::string dir = options.out.empty() ? options.resume : options.out;
  if (!dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    ECH_CHECK(!ec, "--out ", dir, ": cannot create the folder: ", ec.message());
  }
  auto in_dir = [&](const char* file) { return (std::filesystem::path(dir) / file).string(); };

  // ---- data and model ----
  const DataBundle data = load_data(options);
  std::shared_ptr<Sequential> model;
  CheckpointInfo info;
  LoadedCheckpoint resumed;
  if (!options.resume.empty()) {
    const std::string path = (std::filesystem::path(options.resume) / kCheckpointFile).string();
    resumed = load_checkpoint(path);
    model = restore_model(resumed, path, options.model);
    ECH_CHECK(resumed.info.epoch < options.epochs, "--resume ", options.resume,
              ": the run already finished ", resumed.info.epoch, " epochs; pass --epochs > ",
              resumed.info.epoch, " to continue it");
    info = resumed.info;
  } else {
    model =
        make_model(options.model, data.channels, data.num_classes, options.seed, data.image_size);
    info.model = options.model;
    info.in_channels = data.channels;
    info.num_classes = data.num_classes;
    info.image_size = data.image_size;
    info.seed = options.seed;
  }
  info.dataset = data.name;
  info.data_dir = data.dir;
  info.config = options.to_json();
  const int64_t params = model->num_parameters();

  SgdConfig sgd;
  sgd.lr = options.lr;
  sgd.momentum = options.momentum;
  sgd.weight_decay = options.wd;
  sgd.nesterov = options.nesterov;
  std::unique_ptr<StepEngine> engine =
      factory ? factory(model, sgd, device) : make_single_device_engine(model, sgd, device);
  ECH_CHECK(engine != nullptr, "train: the engine factory returned no engine");
  if (!options.resume.empty()) engine->load_optimizer_state(resumed.optimizer_state);

  const auto schedule = make_schedule(options);
  data::Loader loader(data.train, loader_options(options, data.train_augment, device));
  // The LR schedule's notion of an epoch: batches including echoes (an epoch counts fresh
  // examples, so with echo factor e it has about e times the fresh batch count).
  const double echo_factor = loader.options().echo_auto ? 1.0 : loader.options().echo_factor;
  const int64_t steps_per_epoch = std::max<int64_t>(
      1, static_cast<int64_t>(std::ceil(loader.batches_per_epoch_fresh() * echo_factor)));

  MetricsWriter metrics;
  if (!dir.empty()) {
    safetensors::write_file_atomic(in_dir("config.json"), info.config.dump(2) + "\n");
    if (!options.resume.empty()) truncate_metrics(in_dir("metrics.jsonl"), info.epoch);
    metrics.open(in_dir("metrics.jsonl"), /*append=*/!options.resume.empty());
  }
  const bool tty = options.progress == "bar" ||
                   (options.progress == "auto" && &out == &std::cout && is_terminal(STDOUT_FILENO));
  ProgressDisplay progress(out, tty, options.progress == "none" ? 0 : options.log_every);

  out << "echelon train: " << options.model << " (" << params << " parameters) on " << data.name
      << " (" << data.train->size() << " train / " << data.test->size() << " test), device "
      << device << ", engine " << engine->name() << "\n";
  if (!options.resume.empty())
    out << "resuming " << options.resume << " after epoch " << info.epoch << " (step "
        << info.global_step << ")\n";

  TrainResult result;
  result.epochs = info.history;
  json::Value loader_stats;
  const double previous_wall_s = info.wall_s;
  int64_t global_step = info.global_step;
  std::deque<data::Batch> recent;  // the last few batches, to diagnose a non-finite loss

  auto write_outputs = [&](bool final_run) {
    const EpochRecord* best = nullptr;
    int64_t images = 0;
    double train_s = 0;
    for (const EpochRecord& e : result.epochs) {
      if (!best || e.test_acc > best->test_acc) best = &e;
      images += e.train_images;
      train_s += e.train_s;
    }
    json::Value summary = json::Value::object()
                              .set("model", options.model)
                              .set("dataset", data.name)
                              .set("device", device.to_string())
                              .set("engine", engine->name())
                              .set("epochs", static_cast<int64_t>(result.epochs.size()))
                              .set("params", params)
                              .set("completed", final_run);
    if (!result.epochs.empty()) {
      summary.set("final_test_acc", result.epochs.back().test_acc)
          .set("final_test_loss", result.epochs.back().test_loss)
          .set("final_train_loss", result.epochs.back().train_loss)
          .set("best_test_acc", best->test_acc)
          .set("best_epoch", best->epoch + 1);
    }
    summary.set("train_images_per_s", train_s > 0 ? static_cast<double>(images) / train_s : 0.0)
        .set("wall_s", previous_wall_s + seconds_since(wall_start))
        .set("echo", loader_stats);
    if (const json::Value report = engine->report(); !report.is_null())
      summary.set("pipeline", report);
    result.summary = summary;
    if (dir.empty()) return;
    safetensors::write_file_atomic(in_dir("summary.json"), summary.dump(2) + "\n");
    ReportData report{"echelon: " + options.model + " on " + data.name, info.config, summary,
                      result.epochs, info.steps};
    safetensors::write_file_atomic(in_dir("report.html"), render_report_html(report));
  };

  for (int64_t epoch = info.epoch; epoch < options.epochs; ++epoch) {
    uint64_t layer_counter = 0;
    reseed_dropout(*model, options.seed, epoch, layer_counter);
    model->train();
    loader.start_epoch(epoch);
    const auto epoch_start = Clock::now();
    StepStats epoch_stats, since_log;
    int64_t step = 0, fresh = 0;
    double lr = 0;

    auto account = [&](const StepStats& stats) {
      if (!stats.finite) {
        std::string where = "the batch is no longer available";
        for (const data::Batch& b : recent)
          if (b.index == stats.nonfinite_batch)
            where = diagnose_nonfinite(engine->model(), b.images);
        progress.finish_line();
        ECH_FAIL("non-finite training loss at step ", global_step + 1, " (epoch ", epoch + 1,
                 ", batch ", stats.nonfinite_batch, "); ", where, ". Try a lower --lr (now ", lr,
                 ")");
      }
      if (stats.batches == 0) return;
      epoch_stats.add(stats);
      since_log.add(stats);
      result.step_losses.push_back(stats.mean_loss());
      global_step += stats.batches;
      if (options.log_every > 0 && since_log.batches >= options.log_every) {
        const double elapsed = seconds_since(epoch_start);
        metrics.write(json::Value::object()
                          .set("type", "step")
                          .set("epoch", epoch)
                          .set("step", step)
                          .set("global_step", global_step)
                          .set("lr", lr)
                          .set("loss", since_log.mean_loss())
                          .set("train_acc", since_log.accuracy())
                          .set("images_per_s", static_cast<double>(epoch_stats.samples) / elapsed));
        info.steps.push_back({global_step,
                              static_cast<double>(epoch) +
                                  static_cast<double>(step) / static_cast<double>(steps_per_epoch),
                              since_log.mean_loss()});
        since_log = StepStats{};
      }
    };

    while (auto batch = loader.next()) {
      if (g_stop_requested.load()) break;
      lr = schedule->lr_at(epoch, std::min(step, steps_per_epoch - 1), steps_per_epoch);
      engine->set_lr(lr);
      fresh += batch->fresh;
      recent.push_back(*batch);
      if (recent.size() > 8) recent.pop_front();
      const StepStats stats = engine->train_step(*batch);
      ++step;
      account(stats);
      const double elapsed = seconds_since(epoch_start);
      progress.update({epoch, options.epochs, step, steps_per_epoch,
                       static_cast<double>(epoch_stats.samples) / std::max(elapsed, 1e-9),
                       epoch_stats.mean_loss(), elapsed});
    }
    account(engine->finish_epoch());
    progress.finish_line();
    recent.clear();
    loader_stats = loader.stats().to_json();
    if (g_stop_requested.load()) {
      out << "interrupted in epoch " << epoch + 1 << "; the checkpoint holds epoch " << info.epoch
          << "\n";
      write_outputs(false);
      return result;
    }
    const double train_s = seconds_since(epoch_start);

    const auto eval_start = Clock::now();
    const EvalResult test =
        evaluate(*engine, data.test, data.test_augment, std::max<int64_t>(options.batch_size, 256),
                 options.workers, device);
    EpochRecord record;
    record.epoch = epoch;
    record.lr = lr;
    record.train_loss = epoch_stats.mean_loss();
    record.train_acc = epoch_stats.accuracy();
    record.test_loss = test.loss;
    record.test_acc = test.accuracy;
    record.train_images = epoch_stats.samples;
    record.fresh_images = fresh;
    record.train_s = train_s;
    record.eval_s = seconds_since(eval_start);
    record.images_per_s = static_cast<double>(epoch_stats.samples) / std::max(train_s, 1e-9);
    record.global_step = global_step;
    result.epochs.push_back(record);
    metrics.write(record.to_json());

    char line[256];
    std::snprintf(line, sizeof(line),
                  "epoch %lld/%lld  train loss %.4f acc %s  test loss %.4f acc %s  lr %.4g  "
                  "%.0f img/s  %.1f s",
                  static_cast<long long>(epoch + 1), static_cast<long long>(options.epochs),
                  record.train_loss, percent(record.train_acc).c_str(), record.test_loss,
                  percent(record.test_acc).c_str(), lr, record.images_per_s,
                  record.train_s + record.eval_s);
    out << line << "\n" << std::flush;

    info.epoch = epoch + 1;
    info.global_step = global_step;
    info.history = result.epochs;
    info.wall_s = previous_wall_s + seconds_since(wall_start);
    if (!dir.empty())
      save_checkpoint(in_dir(kCheckpointFile), *model, engine->optimizer_state(), info);
    const bool last = epoch + 1 == options.epochs;
    write_outputs(last);
    if (!last && options.stop_after_epoch > 0 && epoch + 1 >= options.stop_after_epoch) {
      out << "stopping after epoch " << epoch + 1 << " (--stop-after-epoch)\n";
      return result;
    }
  }

  // Final summary table.
  out << "\n  epoch   train loss  train acc   test loss   test acc    img/s\n";
  for (const EpochRecord& e : result.epochs) {
    char row[160];
    std::snprintf(row, sizeof(row), "  %5lld   %10.4f  %9s  %10.4f  %9s  %7.0f\n",
                  static_cast<long long>(e.epoch + 1), e.train_loss, percent(e.train_acc).c_str(),
                  e.test_loss, percent(e.test_acc).c_str(), e.images_per_s);
    out << row;
  }
  out << "test accuracy " << percent(result.summary.at("final_test_acc").as_double()) << " (best "
      << percent(result.summary.at("best_test_acc").as_double()) << " at epoch "
      << result.summary.at("best_epoch").as_int() << ")";
  if (!dir.empty()) out << "; report: " << in_dir("report.html");
  out << "\n";
  result.completed = true;
  return result;
}

EvalResult evaluate_checkpoint(const EvalOptions& options, std::ostream& out) {
  ECH_CHECK(!options.checkpoint.empty(), "--checkpoint FILE is required");
  ECH_CHECK(options.batch_size >= 1, "--batch-size must be >= 1 (got ", options.batch_size, ")");
  ECH_CHECK(options.limit_test >= 0, "--limit-test must be >= 0 (got ", options.limit_test, ")");
  ECH_CHECK(options.workers >= 1, "--workers must be >= 1 (got ", options.workers, ")");
  const Device device = resolve_device(options.device);
  const LoadedCheckpoint checkpoint = load_checkpoint(options.checkpoint);
  auto model = restore_model(checkpoint, options.checkpoint);

  TrainOptions data_options;
  data_options.data = options.data.empty() ? checkpoint.info.dataset : options.data;
  data_options.data_dir = options.data.empty() && options.data_dir.empty()
                              ? checkpoint.info.data_dir
                              : options.data_dir;
  data_options.limit_test = options.limit_test;
  const DataBundle data = load_data(data_options);
  ECH_CHECK(data.channels == checkpoint.info.in_channels &&
                data.num_classes == checkpoint.info.num_classes,
            options.checkpoint, ": model expects ", checkpoint.info.in_channels, " channels and ",
            checkpoint.info.num_classes, " classes, dataset ", data.name, " has ", data.channels,
            " and ", data.num_classes);

  auto engine = make_single_device_engine(model, SgdConfig{}, device);
  const EvalResult r =
      evaluate(*engine, data.test, data.test_augment, options.batch_size, options.workers, device);
  out << "eval " << checkpoint.info.model << " (epoch " << checkpoint.info.epoch << ") on "
      << data.name << " test (" << r.samples << " images): loss " << r.loss << ", accuracy "
      << percent(r.accuracy) << "\n";
  return r;
}

}  // namespace echelon::parallel
