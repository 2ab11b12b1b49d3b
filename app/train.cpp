// train(): one run as a short sequence of named steps (see TrainingRun::execute). Everything that
// can fail on the user's input (flags, data set, model shape, resume compatibility) is checked
// while the run is prepared, before the run folder is touched.
#include <echelon/app/train.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <future>
#include <iostream>
#include <optional>

#include <echelon/app/checkpoint.h>
#include <echelon/app/report.h>
#include <echelon/app/run_setup.h>
#include <echelon/base/error.h>
#include <echelon/base/file.h>
#include <echelon/data/resident.h>
#include <echelon/layers/lr_schedule.h>
#include <echelon/layers/models/registry.h>
#include <echelon/layers/optim.h>
#include <echelon/parallel/trace.h>
#include <echelon/tensor/ops.h>
#include <echelon/tensor/safetensors.h>

namespace echelon::app {

namespace {

using run_setup::diagnose_nonfinite;
using run_setup::loader_options;
using run_setup::loader_trace_hook;
using run_setup::make_schedule;
using run_setup::reseed_dropout;
using run_setup::ScopedRunSettings;
using run_setup::sgd_config;
using run_setup::truncate_metrics;

std::atomic<bool> g_stop_requested{false};
static_assert(std::atomic<bool>::is_always_lock_free, "request_stop must be signal-safe");

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The device's context, created on another thread (while the data loads); the seconds it took.
std::future<double> warm_up_timed(Device device) {
  return std::async(std::launch::async, [device] {
    const auto start = Clock::now();
    warm_up_device(device).get();
    return seconds_since(start);
  });
}

// f()'s result; the seconds it took go to `seconds`.
template <typename F>
auto timed(double& seconds, F f) {
  const auto start = Clock::now();
  auto result = f();
  seconds = seconds_since(start);
  return result;
}

// What one epoch of training produced (before evaluation).
struct EpochTotals {
  parallel::StepStats stats;
  int64_t fresh = 0;
  double lr = 0;
  double train_s = 0;
};

class TrainingRun {
 public:
  TrainingRun(const TrainOptions& options, std::ostream& out, const EngineFactory& factory);
  TrainResult execute();

 private:
  void build_model(const EngineFactory& factory);
  void open_folder();
  void announce() const;
  // Trains one epoch; false when a stop was requested during it.
  bool train_epoch(int64_t epoch, EpochTotals& totals);
  bool follow_epoch(int64_t epoch, EpochTotals& totals);  // !engine_->takes_batches()
  void account(const parallel::StepStats& stats, int64_t epoch, int64_t step, EpochTotals& totals,
               parallel::StepStats& since_log, Clock::time_point epoch_start);
  EpochRecord evaluate_epoch(int64_t epoch, const EpochTotals& totals);
  void print_epoch(const EpochRecord& record) const;
  void save_epoch(const EpochRecord& record);
  void write_outputs(bool final_run);
  void print_table() const;
  // A span on the trace's "trainer" process (nothing when not tracing).
  void trace_span(const char* thread, const std::string& name, Clock::time_point start,
                  int64_t id = -1);
  // Reports and records the first epoch that reached --target-accuracy; true when it stops the run.
  bool reached_target(const EpochRecord& record, double wall_s);
  int64_t eval_batch_size() const { return std::max<int64_t>(options_.batch_size, 256); }
  std::string in_dir(const char* file) const {
    return (std::filesystem::path(dir_) / file).string();
  }

  const TrainOptions& options_;
  std::ostream& out_;
  ScopedRunSettings settings_;
  const Clock::time_point wall_start_ = Clock::now();
  run_setup::StartupTimes startup_;
  const Device device_;
  std::future<double> device_warm_;  // the device's context, created while the data loads
  const std::string dir_;
  const DataBundle data_;
  const WorkersChoice workers_;  // --workers resolved (auto: by the training split)
  std::shared_ptr<Sequential> model_;
  CheckpointInfo info_;
  std::unique_ptr<StepEngine> engine_;
  parallel::TraceRecorder* trace_ = nullptr;  // the engine's, when --trace is given
  std::shared_ptr<LrSchedule> schedule_;
  std::unique_ptr<data::Loader> loader_;  // the training batches: the loader, or
  std::unique_ptr<data::ResidentData> resident_, resident_test_;  // --resident-data
  int64_t steps_per_epoch_ = 1;
  int64_t params_ = 0;
  double previous_wall_s_ = 0;
  int64_t global_step_ = 0;
  MetricsWriter metrics_;
  std::unique_ptr<ProgressDisplay> progress_;
  TrainResult result_;
  json::Value loader_stats_;
  std::deque<data::Batch> recent_;  // the last few batches, to diagnose a non-finite loss
  size_t recent_capacity_ = 8;
};

TrainingRun::TrainingRun(const TrainOptions& options, std::ostream& out,
                         const EngineFactory& factory)
    : options_(options),
      out_(out),
      settings_(options),
      device_(resolve_device(options.device)),
      device_warm_(warm_up_timed(device_)),
      dir_(!options.primary      ? ""
           : options.out.empty() ? options.resume
                                 : options.out),
      data_(timed(startup_.data_s, [&] { return load_data(options); })),
      workers_(resolve_workers(options.workers, data_.train.get(), options.echo, device_)) {
  const auto wait_start = Clock::now();
  startup_.device_s = device_warm_.get();
  startup_.device_wait_s = seconds_since(wait_start);
  const auto model_start = Clock::now();
  build_model(factory);
  startup_.model_s = seconds_since(model_start);
  schedule_ = make_schedule(options_);
  trace_ = engine_->trace_recorder();
  // A later partition's process follows the epochs partition 0's process feeds (follow_epoch).
  ECH_CHECK(options_.loads_data || !engine_->takes_batches(),
            "train: this process loads no data, but its engine takes the mini-batches");
  if (!engine_->takes_batches()) {
    loader_stats_ = json::Value::object().set("source", "partition 0's process");
  } else if (options_.resident_data) {
    const auto resident_start = Clock::now();
    resident_ = std::make_unique<data::ResidentData>(
        *data_.train, data::ResidentOptions{.batch_size = options_.batch_size,
                                            .seed = options_.seed,
                                            .augment = data_.train_augment,
                                            .device = device_});
    if (engine_->evaluates())
      resident_test_ = std::make_unique<data::ResidentData>(
          *data_.test, data::ResidentOptions{.batch_size = eval_batch_size(),
                                             .shuffle = false,
                                             .augment = data_.test_augment,
                                             .device = device_});
    steps_per_epoch_ = resident_->batches_per_epoch();
    loader_stats_ = json::Value::object().set("source", "resident");
    startup_.resident_s = seconds_since(resident_start);
  } else {
    data::LoaderOptions loader_settings =
        loader_options(options_, data_.train_augment, device_, workers_.workers);
    if (trace_) loader_settings.on_work = loader_trace_hook(*trace_);
    loader_ = std::make_unique<data::Loader>(data_.train, loader_settings);
    // The LR schedule's notion of an epoch: batches including echoes (an epoch counts fresh
    // examples, so with echo factor e it has about e times the fresh batch count).
    const double echo_factor = loader_->options().echo_auto ? 1.0 : loader_->options().echo_factor;
    steps_per_epoch_ = std::max<int64_t>(
        1, static_cast<int64_t>(std::ceil(loader_->batches_per_epoch_fresh() * echo_factor)));
  }
  // The sync-free step (single device on a GPU; other engines ignore it): losses are read once per
  // log line, or once per epoch without logging. Identical numbers; a bad label or non-finite loss
  // is raised at that read. Enough recent batches are kept to diagnose a non-finite one then.
  const int64_t stats_interval = options_.log_every > 0 ? options_.log_every : steps_per_epoch_;
  engine_->defer_step_stats(stats_interval);
  recent_capacity_ = static_cast<size_t>(std::clamp<int64_t>(stats_interval + 1, 8, 65));
  const bool tty =
      options_.progress == "bar" ||
      (options_.progress == "auto" && &out_ == &std::cout && is_terminal(STDOUT_FILENO));
  progress_ = std::make_unique<ProgressDisplay>(
      out_, tty, options_.progress == "none" ? 0 : options_.log_every);
}

// A new model from the seed, or the checkpoint's model and optimizer state on --resume.
void TrainingRun::build_model(const EngineFactory& factory) {
  LoadedCheckpoint resumed;
  if (!options_.resume.empty()) {
    const std::string path = (std::filesystem::path(options_.resume) / kCheckpointFile).string();
    resumed = load_checkpoint(path);
    model_ = restore_model(resumed, path, options_.model);
    ECH_CHECK(resumed.info.epoch < options_.epochs, "--resume ", options_.resume,
              ": the run already finished ", resumed.info.epoch,
              resumed.info.epoch == 1 ? " epoch" : " epochs", "; pass --epochs > ",
              resumed.info.epoch, " to continue it");
    // The data must fit the model (another --data, --resize or folder would fail mid-epoch).
    ECH_CHECK(data_.channels == resumed.info.in_channels &&
                  data_.num_classes == resumed.info.num_classes &&
                  (resumed.info.image_size == 0 || data_.image_size == resumed.info.image_size),
              "--resume ", options_.resume, ": the run's model takes ", resumed.info.in_channels,
              " x ", resumed.info.image_size, "x", resumed.info.image_size, " images of ",
              resumed.info.num_classes, " classes; ", data_.name, " gives ", data_.channels, " x ",
              data_.image_size, "x", data_.image_size, " images of ", data_.num_classes,
              " classes");
    info_ = resumed.info;
  } else {
    try {
      model_ = make_model(options_.model, data_.channels, data_.num_classes, options_.seed,
                          data_.image_size);
    } catch (const Error& e) {
      // An image folder's size is the user's to choose ("lenet5: image size must be 28 or 32").
      if (options_.data != "folder") throw;
      ECH_FAIL(e.message(), " (", data_.dir, " gives ", data_.image_size, "x", data_.image_size,
               " images", options_.resize > 0 ? " at --resize " : "",
               options_.resize > 0 ? std::to_string(options_.resize) : std::string(),
               "; --resize N makes them N x N)");
    }
    info_.model = options_.model;
    info_.in_channels = data_.channels;
    info_.num_classes = data_.num_classes;
    info_.image_size = data_.image_size;
    info_.seed = options_.seed;
  }
  info_.dataset = data_.name;
  // Absolute: `echelon eval` of the checkpoint may run from another folder. Empty stays empty
  // (synthetic data has no folder).
  info_.data_dir = data_.dir.empty() ? "" : std::filesystem::absolute(data_.dir).string();
  info_.class_names = data_.class_names;
  // The number auto picked: a resume reproduces this run's batches whatever auto would pick then.
  info_.config = options_.to_json().set("workers", workers_.workers);
  params_ = model_->num_parameters();
  previous_wall_s_ = info_.wall_s;
  global_step_ = info_.global_step;
  result_.epochs = info_.history;

  const SGDOptions sgd = sgd_config(options_);
  engine_ = factory ? factory(model_, sgd, device_)
                    : parallel::make_single_device_engine(model_, sgd, device_);
  ECH_CHECK(engine_ != nullptr, "train: the engine factory returned no engine");
  if (!options_.resume.empty()) {
    engine_->load_optimizer_state(resumed.optimizer_state);
    engine_->continue_after_epochs(static_cast<int>(info_.epoch));
  }
}

// The run folder: config.json, and metrics.jsonl cut back to the epochs the checkpoint holds.
void TrainingRun::open_folder() {
  if (dir_.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  ECH_CHECK(!ec, "--out ", dir_, ": cannot create the folder: ", ec.message());
  write_file_atomic(in_dir("config.json"), info_.config.dump(2) + "\n");
  if (!options_.resume.empty()) truncate_metrics(in_dir("metrics.jsonl"), info_.epoch);
  metrics_.open(in_dir("metrics.jsonl"), /*append=*/!options_.resume.empty());
}

void TrainingRun::announce() const {
  out_ << "echelon train: " << options_.model << " (" << params_ << " parameters) on "
       << data_.name;
  if (data_.train)
    out_ << " (" << data_.train->size() << " train / " << data_.test->size() << " test)";
  out_ << ", device " << device_ << ", engine " << engine_->name() << "\n";
  if (options_.ema > 0)
    out_ << "evaluating the moving average of the weights (--ema " << options_.ema << ")\n";
  if (loader_)
    out_ << "loader: workers " << workers_.workers << " (" << workers_.reason << "), echo "
         << options_.echo << "\n";
  if (!options_.resume.empty())
    out_ << "resuming " << options_.resume << " after epoch " << info_.epoch << " (step "
         << info_.global_step << ")\n";
}

TrainResult TrainingRun::execute() {
  open_folder();
  announce();
  for (int64_t epoch = info_.epoch; epoch < options_.epochs; ++epoch) {
    const auto epoch_start = Clock::now();
    EpochTotals totals;
    if (!train_epoch(epoch, totals)) {
      // Say what is on disk: without --out nothing is, and in epoch 1 no checkpoint exists yet.
      out_ << "interrupted in epoch " << epoch + 1;
      if (dir_.empty())
        out_ << "; nothing was saved (no --out: pass --out DIR to keep a checkpoint to resume)\n";
      else if (info_.epoch == 0)
        out_ << ", before any epoch finished: " << dir_ << " holds no checkpoint yet\n";
      else
        out_ << "; " << in_dir(kCheckpointFile) << " holds epoch " << info_.epoch
             << ": continue with `echelon train --resume " << dir_ << "`\n";
      write_outputs(false);
      return std::move(result_);
    }
    const EpochRecord record = evaluate_epoch(epoch, totals);
    const double wall_s = previous_wall_s_ + seconds_since(wall_start_);
    print_epoch(record);
    save_epoch(record);
    const bool reached = reached_target(record, wall_s);
    const bool last = epoch + 1 == options_.epochs || reached;
    write_outputs(last);
    trace_span("epochs", str("epoch ", epoch + 1), epoch_start, epoch);
    if (trace_) trace_->save();
    if (reached) break;
    if (!last && options_.stop_after_epoch > 0 && epoch + 1 >= options_.stop_after_epoch) {
      out_ << "stopping after epoch " << epoch + 1 << " (--stop-after-epoch)\n";
      return std::move(result_);
    }
  }
  print_table();
  result_.completed = true;
  return std::move(result_);
}

bool TrainingRun::reached_target(const EpochRecord& record, double wall_s) {
  if (options_.target_accuracy <= 0 || record.test_acc < options_.target_accuracy) return false;
  result_.time_to_target_s = wall_s;
  result_.target_epoch = record.epoch + 1;
  char seconds[32];
  std::snprintf(seconds, sizeof(seconds), "%.3f", wall_s);
  out_ << "reached " << format_percent(record.test_acc) << " test accuracy (target "
       << format_percent(options_.target_accuracy) << ") at epoch " << record.epoch + 1 << ": "
       << seconds << " s from the start of the run (data loading and evaluation included)\n";
  return true;
}

bool TrainingRun::train_epoch(int64_t epoch, EpochTotals& totals) {
  uint64_t layer_counter = 0;
  reseed_dropout(*model_, options_.seed, epoch, layer_counter);
  model_->train();
  if (!engine_->takes_batches()) return follow_epoch(epoch, totals);
  if (resident_)
    resident_->start_epoch(epoch);
  else
    loader_->start_epoch(epoch);
  const auto epoch_start = Clock::now();
  parallel::StepStats since_log;
  int64_t step = 0;
  for (;;) {
    const auto wait_start = Clock::now();
    std::optional<data::Batch> batch = resident_ ? resident_->next() : loader_->next();
    trace_span("main", "next batch", wait_start, step);
    if (!batch || g_stop_requested.load()) break;
    totals.lr = schedule_->lr_at(epoch, std::min(step, steps_per_epoch_ - 1), steps_per_epoch_);
    engine_->set_lr(totals.lr);
    totals.fresh += batch->fresh;
    recent_.push_back(*batch);
    if (recent_.size() > recent_capacity_) recent_.pop_front();
    const bool first_step = startup_.until_first_step_s == 0;
    if (first_step) startup_.until_first_step_s = seconds_since(wall_start_);
    const auto step_start = Clock::now();
    const parallel::StepStats stats = engine_->train_step(*batch);
    if (first_step) {
      startup_.first_step_s = seconds_since(step_start);
      if (options_.target_accuracy > 0) out_ << startup_.line() << "\n";
    }
    ++step;
    account(stats, epoch, step, totals, since_log, epoch_start);
    const double elapsed = seconds_since(epoch_start);
    progress_->update({epoch, options_.epochs, step, steps_per_epoch_,
                       static_cast<double>(totals.stats.samples) / std::max(elapsed, 1e-9),
                       totals.stats.mean_loss(), elapsed});
  }
  account(engine_->finish_epoch(), epoch, step, totals, since_log, epoch_start);
  progress_->finish_line();
  recent_.clear();
  if (loader_) loader_stats_ = loader_->stats().to_json().set("workers_choice", workers_.reason);
  totals.train_s = seconds_since(epoch_start);
  return !g_stop_requested.load();
}

// A later partition's process: partition 0's process feeds the epoch and sets the learning rate
// (it travels with each mini-batch); this one only counts the results.
bool TrainingRun::follow_epoch(int64_t epoch, EpochTotals& totals) {
  const auto epoch_start = Clock::now();
  parallel::StepStats since_log;
  account(engine_->follow_epoch(), epoch, 0, totals, since_log, epoch_start);
  totals.lr = schedule_->lr_at(epoch, steps_per_epoch_ - 1, steps_per_epoch_);
  totals.train_s = seconds_since(epoch_start);
  return !g_stop_requested.load();
}

// Adds the engine's completed mini-batches to the epoch; a non-finite loss stops the run naming
// the first layer whose output is non-finite.
void TrainingRun::account(const parallel::StepStats& stats, int64_t epoch, int64_t step,
                          EpochTotals& totals, parallel::StepStats& since_log,
                          Clock::time_point epoch_start) {
  if (!stats.finite) {
    std::string where = engine_->takes_batches() ? "the batch is no longer available"
                                                 : "partition 0's process holds the batch";
    for (const data::Batch& b : recent_)
      if (b.index == stats.nonfinite_batch) where = diagnose_nonfinite(engine_->model(), b.images);
    progress_->finish_line();
    ECH_FAIL("non-finite training loss at step ", global_step_ + 1, " (epoch ", epoch + 1,
             ", batch ", stats.nonfinite_batch, "); ", where, ". Try a lower --lr (now ", totals.lr,
             ")");
  }
  if (stats.batches == 0 && stats.samples == 0) return;
  totals.stats.add(stats);
  since_log.add(stats);
  // Only other replicas' shares of steps already counted (data parallel: they can arrive after
  // replica 0's own, e.g. at the epoch's flush): their images count, but no step is new.
  if (stats.batches == 0) return;
  result_.step_losses.push_back(stats.mean_loss());
  global_step_ += stats.batches;
  if (options_.log_every <= 0 || since_log.batches < options_.log_every) return;
  const double elapsed = seconds_since(epoch_start);
  metrics_.write(json::Value::object()
                     .set("type", "step")
                     .set("epoch", epoch + 1)
                     .set("step", step)
                     .set("global_step", global_step_)
                     .set("lr", totals.lr)
                     .set("loss", since_log.mean_loss())
                     .set("train_acc", since_log.accuracy())
                     .set("images_per_s", static_cast<double>(totals.stats.samples) / elapsed));
  info_.steps.push_back({global_step_,
                         static_cast<double>(epoch) +
                             static_cast<double>(step) / static_cast<double>(steps_per_epoch_),
                         since_log.mean_loss()});
  since_log = parallel::StepStats{};
}

EpochRecord TrainingRun::evaluate_epoch(int64_t epoch, const EpochTotals& totals) {
  const auto eval_start = Clock::now();
  EvalResult test;
  // Multi-process: rank 0 evaluates (it holds every partition's weights) and shares the numbers.
  if (engine_->evaluates()) {
    // --ema: the test numbers are the averaged weights' (the training numbers the live ones').
    std::optional<AveragedWeights> averaged;
    if (options_.ema > 0) averaged.emplace(*model_, engine_->optimizer_state());
    test = resident_test_ ? evaluate(*engine_, *resident_test_)
                          : evaluate(*engine_, data_.test, data_.test_augment, eval_batch_size(),
                                     workers_.workers, device_);
  }
  std::vector<double> shared = {test.loss, test.accuracy, static_cast<double>(test.samples)};
  engine_->share_evaluation(shared);
  test = {shared[0], shared[1], static_cast<int64_t>(shared[2])};
  EpochRecord record;
  record.epoch = epoch;
  record.lr = totals.lr;
  record.train_loss = totals.stats.mean_loss();
  record.train_acc = totals.stats.accuracy();
  record.test_loss = test.loss;
  record.test_acc = test.accuracy;
  record.train_images = totals.stats.samples;
  record.fresh_images = totals.fresh;
  record.train_s = totals.train_s;
  record.eval_s = seconds_since(eval_start);
  trace_span("main", "eval", eval_start, epoch);
  record.images_per_s = static_cast<double>(totals.stats.samples) / std::max(totals.train_s, 1e-9);
  record.global_step = global_step_;
  return record;
}

void TrainingRun::print_epoch(const EpochRecord& record) const {
  char line[256];
  std::snprintf(line, sizeof(line),
                "epoch %lld/%lld  train loss %.4f acc %s  test loss %.4f acc %s  lr %.4g  "
                "%.0f img/s  %.1f s",
                static_cast<long long>(record.epoch + 1), static_cast<long long>(options_.epochs),
                record.train_loss, format_percent(record.train_acc).c_str(), record.test_loss,
                format_percent(record.test_acc).c_str(), record.lr, record.images_per_s,
                record.train_s + record.eval_s);
  out_ << line << "\n" << std::flush;
}

// metrics.jsonl line and checkpoint (atomic) of a finished epoch.
void TrainingRun::save_epoch(const EpochRecord& record) {
  result_.epochs.push_back(record);
  metrics_.write(record.to_json());
  info_.epoch = record.epoch + 1;
  info_.global_step = global_step_;
  info_.history = result_.epochs;
  info_.wall_s = previous_wall_s_ + seconds_since(wall_start_);
  if (dir_.empty()) return;
  const auto start = Clock::now();
  const StateDict optimizer_state = engine_->optimizer_state();
  save_checkpoint(in_dir(kCheckpointFile), *model_, optimizer_state, info_);
  const bool best = std::all_of(result_.epochs.begin(), result_.epochs.end() - 1,
                                [&](const EpochRecord& e) { return e.test_acc < record.test_acc; });
  if (best) save_checkpoint(in_dir(kBestCheckpointFile), *model_, optimizer_state, info_);
  trace_span("main", "checkpoint", start, record.epoch);
}

void TrainingRun::trace_span(const char* thread, const std::string& name, Clock::time_point start,
                             int64_t id) {
  if (trace_)
    trace_->record_on(trace_->add_track("trainer", thread), name, start, Clock::now(), id);
}

// summary.json and report.html (rewritten after every epoch).
void TrainingRun::write_outputs(bool final_run) {
  const EpochRecord* best = nullptr;
  int64_t images = 0;
  double train_s = 0;
  for (const EpochRecord& e : result_.epochs) {
    if (!best || e.test_acc > best->test_acc) best = &e;
    images += e.train_images;
    train_s += e.train_s;
  }
  json::Value summary = json::Value::object()
                            .set("model", options_.model)
                            .set("dataset", data_.name)
                            .set("device", device_.to_string())
                            .set("precision", options_.precision)  // matmul/conv compute
                            .set("engine", engine_->name())
                            .set("epochs", static_cast<int64_t>(result_.epochs.size()))
                            .set("params", params_)
                            .set("completed", final_run);
  if (best) {
    summary.set("final_test_acc", result_.epochs.back().test_acc)
        .set("final_test_loss", result_.epochs.back().test_loss)
        .set("final_train_loss", result_.epochs.back().train_loss)
        .set("best_test_acc", best->test_acc)
        .set("best_epoch", best->epoch + 1);
  }
  summary.set("train_images_per_s", train_s > 0 ? static_cast<double>(images) / train_s : 0.0)
      .set("wall_s", previous_wall_s_ + seconds_since(wall_start_))
      .set("echo", loader_stats_)
      .set("startup", startup_.to_json());
  if (options_.target_accuracy > 0)
    summary.set("target_accuracy", options_.target_accuracy)
        .set("time_to_target_s", result_.time_to_target_s)
        .set("target_epoch", result_.target_epoch);
  if (json::Value picks = run_setup::conv_autotune_json(); !picks.is_null())
    summary.set("conv_autotune", std::move(picks));  // what --autotune picked per layer shape
  if (const json::Value report = engine_->report(); !report.is_null())
    summary.set("pipeline", report);
  result_.summary = summary;
  if (dir_.empty()) return;
  write_file_atomic(in_dir("summary.json"), summary.dump(2) + "\n");
  const ReportData report{"echelon: " + options_.model + " on " + data_.name, info_.config, summary,
                          result_.epochs, info_.steps};
  write_file_atomic(in_dir("report.html"), render_report_html(report));
}

void TrainingRun::print_table() const {
  out_ << "\n  epoch   train loss  train acc   test loss   test acc    img/s\n";
  // A diverged run's loss (1e35 at --lr 1e9) in %f would push the other columns out of line.
  const auto loss = [](double value) {
    char text[32];
    std::snprintf(text, sizeof(text), std::fabs(value) < 1e5 ? "%.4f" : "%.4g", value);
    return std::string(text);
  };
  for (const EpochRecord& e : result_.epochs) {
    char row[160];
    std::snprintf(row, sizeof(row), "  %5lld   %10s  %9s  %10s  %9s  %7.0f\n",
                  static_cast<long long>(e.epoch + 1), loss(e.train_loss).c_str(),
                  format_percent(e.train_acc).c_str(), loss(e.test_loss).c_str(),
                  format_percent(e.test_acc).c_str(), e.images_per_s);
    out_ << row;
  }
  out_ << "test accuracy " << format_percent(result_.summary.at("final_test_acc").as_double())
       << " (best " << format_percent(result_.summary.at("best_test_acc").as_double())
       << " at epoch " << result_.summary.at("best_epoch").as_int() << ")";
  if (!dir_.empty()) out_ << "; report: " << in_dir("report.html");
  out_ << "\n";
}

}  // namespace

void request_stop() {
  g_stop_requested.store(true);
}

TrainResult train(const TrainOptions& options, std::ostream& out, const EngineFactory& factory) {
  validate(options);
  g_stop_requested.store(false);
  TrainingRun run(options, out, factory);
  return run.execute();
}

}  // namespace echelon::app
