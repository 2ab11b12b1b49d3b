#include <doctest/doctest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "tests/support/temp_dir.h"

#include <echelon/app/checkpoint.h>
#include <echelon/app/report.h>
#include <echelon/app/train.h>
#include <echelon/base/error.h>
#include <echelon/base/file.h>
#include <echelon/base/json.h>
#include <echelon/tensor/cpu/fast/parallel.h>
#include <echelon/tensor/ops.h>
#include <echelon/tensor/safetensors.h>

using echelon::Error;
namespace fs = std::filesystem;
using echelon::test::temp_dir;
namespace json = echelon::json;
namespace app = echelon::app;

namespace {

bool have_fashion_mnist() {
  return fs::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz");
}

// A small, quick Fashion-MNIST run; tests override what they study.
app::TrainOptions small_run(int64_t train, int64_t test, int64_t epochs) {
  app::TrainOptions o;
  o.model = "lenet5";
  o.data = "fashion-mnist";
  o.device = "cpu";
  o.limit_train = train;
  o.limit_test = test;
  o.epochs = epochs;
  o.batch_size = 32;
  o.lr = 0.05;
  o.momentum = 0.9;
  o.seed = 7;
  o.progress = "none";
  o.log_every = 4;
  return o;
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// metrics.jsonl records without the timing fields, which differ between runs.
std::vector<std::string> metrics_without_timing(const fs::path& path) {
  std::vector<std::string> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    json::Value v = json::parse(line);
    json::Object kept;
    for (const auto& [key, value] : v.as_object())
      if (key != "images_per_s" && key != "train_s" && key != "eval_s")
        kept.emplace_back(key, value);
    out.push_back(json::Value(kept).dump());
  }
  return out;
}

std::string error_of(const app::TrainOptions& o) {
  try {
    app::validate(o);
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

}  // namespace

TEST_SUITE("trainer") {
  TEST_CASE("validate names the flag and the bad value") {
    app::TrainOptions ok;
    ok.device = "cpu";
    CHECK(error_of(ok) == "<no error>");
    auto with = [&](auto change) {
      app::TrainOptions o = ok;
      change(o);
      return error_of(o);
    };
    CHECK(with([](auto& o) { o.epochs = -1; }).find("--epochs must be >= 1 (got -1)") == 0);
    CHECK(with([](auto& o) { o.epochs = 0; }).find("--epochs") == 0);
    CHECK(with([](auto& o) { o.lr = 0; }).find("--lr") == 0);
    CHECK(with([](auto& o) { o.lr = -0.5; }).find("--lr") == 0);
    CHECK(with([](auto& o) { o.batch_size = 0; }).find("--batch-size") == 0);
    CHECK(with([](auto& o) { o.device = "gpu:1"; }).find("--device") == 0);
    CHECK(with([](auto& o) { o.device = "cuda:x"; }).find("--device") == 0);
    CHECK(with([](auto& o) { o.model = "lenet6"; }).find("--model: unknown model \"lenet6\"") == 0);
    CHECK(with([](auto& o) { o.data = "imagenet"; }).find("--data") == 0);
    CHECK(with([](auto& o) { o.momentum = 1.5; }).find("--momentum") == 0);
    CHECK(with([](auto& o) { o.wd = -1; }).find("--wd") == 0);
    CHECK(with([](auto& o) { o.ema = 1; }).find("--ema must be 0 (no average) or a decay") == 0);
    CHECK(with([](auto& o) { o.ema = 0.99; }) == "<no error>");
    CHECK(with([](auto& o) { o.schedule = "exp"; }).find("--schedule") == 0);
    CHECK(with([](auto& o) { o.schedule = "multistep"; }).find("--schedule multistep") == 0);
    CHECK(with([](auto& o) { o.milestones = {5, 3}; }).find("--milestones") == 0);
    CHECK(with([](auto& o) { o.conv_impl = "fast"; }).find("--conv-impl") == 0);
    CHECK(with([](auto& o) { o.precision = "bf17"; }).find("--precision: unknown value") == 0);
    CHECK(with([](auto& o) {
            o.precision = "tf32";
          }).find("--precision tf32 applies to CUDA devices and this run is on the CPU") == 0);
    CHECK(with([](auto& o) {
            o.precision = "bf16";
          }).find("--precision bf16 applies to CUDA devices and this run is on the CPU") == 0);
    CHECK(with([](auto& o) { o.echo = "0.5"; }).find("--echo") == 0);
    CHECK(with([](auto& o) { o.echo_at = "middle"; }).find("--echo-at") == 0);
    CHECK(with([](auto& o) { o.workers = -2; }).find("--workers must be auto or in 0..256") == 0);
    CHECK(with([](auto& o) { o.workers = 257; }).find("--workers must be auto or in 0..256") == 0);
    CHECK(with([](auto& o) { o.workers = app::kAutoWorkers, o.echo = "auto"; }) == "<no error>");
    CHECK(with([](auto& o) { o.workers = 0; }) == "<no error>");  // inline
    CHECK(with([](auto& o) { o.workers = 0, o.echo = "auto"; }).find("--echo auto needs") == 0);
    CHECK(with([](auto& o) { o.deterministic = true, o.workers = 2; }).find("--deterministic") ==
          0);
    CHECK(with([](auto& o) { o.nesterov = true, o.momentum = 0; }).find("--nesterov") == 0);
    CHECK(with([](auto& o) { o.deterministic = true, o.echo = "auto"; }).find("--deterministic") ==
          0);
    CHECK(with([](auto& o) { o.data = "folder"; }).find("--data folder needs --data-dir") == 0);
    // The tuned kernels depend on timings: refused with --deterministic (before the device).
    CHECK(with([](auto& o) {
            o.deterministic = true, o.autotune = true;
          }).find("--deterministic cannot be combined with --autotune") == 0);
    CHECK(with([](auto& o) { o.autotune = true; }).find("--autotune tunes the CUDA convolutions") ==
          0);
    if (!echelon::cuda_available())
      CHECK(with([](auto& o) { o.device = "cuda:0"; }).find("no CUDA device") != std::string::npos);
  }

  TEST_CASE("options survive the config.json round trip") {
    app::TrainOptions o = small_run(100, 50, 3);
    o.milestones = {1, 2};
    o.schedule = "multistep";
    o.nesterov = true;
    o.wd = 5e-4;
    o.echo = "2.5";
    o.seed = 123456789012345ull;
    o.precision = "tf32";  // not validated here: the round trip only
    const app::TrainOptions back = app::TrainOptions::from_json(json::parse(o.to_json().dump(2)));
    CHECK(back.to_json() == o.to_json());
    CHECK_THROWS_WITH_AS(app::TrainOptions::from_json(json::parse(R"({"epochs": "ten"})")),
                         doctest::Contains("config key \"epochs\""), Error);
  }

  TEST_CASE("missing dataset files are reported with the path") {
    app::TrainOptions o = small_run(64, 64, 1);
    o.data_dir = temp_dir("no_data").string();
    std::ostringstream log;
    try {
      app::train(o, log);
      FAIL("no error for a folder without dataset files");
    } catch (const Error& e) {
      CHECK(std::string(e.what()).find(o.data_dir) != std::string::npos);
    }
  }

  TEST_CASE("progress line and durations") {
    CHECK(app::format_duration(3725) == "1:02:05");
    CHECK(app::format_duration(65.4) == "1:05");
    CHECK(app::format_duration(-1) == "?");
    app::ProgressState s{1, 10, 25, 100, 1234.4, 0.56789, 10.0};
    const std::string bar = app::ProgressDisplay::render(s, true, 8);
    CHECK(bar == "epoch 2/10 [##......] 25/100  1234 img/s  loss 0.5679  ETA 0:30");
    std::ostringstream plain;
    app::ProgressDisplay lines(plain, /*tty=*/false, /*log_every=*/25);
    lines.update(s);
    s.step = 26;
    lines.update(s);
    CHECK(plain.str() == "epoch 2/10 25/100  1234 img/s  loss 0.5679  ETA 0:30\n");
    std::ostringstream tty;
    app::ProgressDisplay bar_display(tty, /*tty=*/true, 0, /*columns=*/60);
    bar_display.update(s);
    bar_display.finish_line();
    CHECK(tty.str().front() == '\r');
    CHECK(tty.str().back() == '\n');
    CHECK(tty.str().find("\x1b[K") != std::string::npos);  // clears what a longer line left
    // The line fits the terminal (one column spare: filling the last one wraps on some).
    CHECK(tty.str().find("\x1b[K") - 1 <= 59);
    s.step = 25;
    const std::string at80 = app::ProgressDisplay::fit_line(s, 80);
    CHECK(at80 ==
          "epoch 2/10 [######..................] 25/100  1234 img/s  loss 0.5679  ETA 0:30");
    CHECK(at80.size() == 79);
    const std::string wide = app::ProgressDisplay::fit_line(s, 200);
    CHECK(wide.find("[" + std::string(3, '#')) != std::string::npos);  // 30-cell bar, 25% full
    CHECK(wide.find(std::string(22, '.')) != std::string::npos);
    const std::string narrow = app::ProgressDisplay::fit_line(s, 50);  // no room for a bar
    CHECK(narrow == "epoch 2/10 25/100  1234 img/s  loss 0.5679  ETA 0");
    CHECK(app::ProgressDisplay::fit_line(s, 12) == "epoch 2/10 ");
  }

  TEST_CASE("report.html is self-contained with both charts") {
    app::ReportData data;
    data.title = "run <1>";
    data.config = json::Value::object().set("lr", 0.01);
    data.summary = json::Value::object().set("final_test_acc", 0.9);
    for (int e = 0; e < 3; ++e) {
      app::EpochRecord r;
      r.epoch = e;
      r.train_loss = 1.0 / (e + 1);
      r.test_loss = 1.1 / (e + 1);
      r.train_acc = 0.5 + 0.1 * e;
      r.test_acc = 0.45 + 0.1 * e;
      data.epochs.push_back(r);
    }
    data.steps = {{10, 0.5, 1.3}, {20, 1.0, 0.9}};
    const std::string html = app::render_report_html(data);
    CHECK(html.find("<title>run &lt;1&gt;</title>") != std::string::npos);
    size_t charts = 0;
    for (size_t at = html.find("<svg"); at != std::string::npos; at = html.find("<svg", at + 1))
      ++charts;
    CHECK(charts == 3);  // loss, accuracy, time per epoch
    CHECK(html.find("Time per epoch") != std::string::npos);
    CHECK(html.find("train (mean per log") != std::string::npos);  // what the step curve is
    CHECK(html.find("<polyline") != std::string::npos);
    CHECK(html.find("<script") == std::string::npos);
    CHECK(html.find("http://www.w3.org/2000/svg") != std::string::npos);
    CHECK(html.find("src=") == std::string::npos);  // nothing external
  }

  TEST_CASE("report.html: legends beside the plot, echo and pipeline blocks as tables and bars") {
    // The legend starts right of the plot's frame (x = 64 + plot width), never over a curve.
    const std::string chart = app::svg_line_chart("t", "x", "y", {{"series", "#000", {{0, 1}}}});
    const size_t frame = chart.find("<rect x=\"64\" y=\"36\" width=\"");
    REQUIRE(frame != std::string::npos);
    const double plot_w = std::stod(chart.substr(chart.find("width=\"", frame) + 7));
    const size_t legend = chart.find(">series<");
    REQUIRE(legend != std::string::npos);
    const size_t x_at = chart.rfind("<text x=\"", legend) + 9;
    CHECK(std::stod(chart.substr(x_at)) > 64 + plot_w);

    app::ReportData data;
    data.title = "r";
    json::Value stage =
        json::Value::object().set("name", "decode").set("busy_s", 1.5).set("stall_s", 0.25);
    json::Value partition =
        json::Value::object().set("partition", 1).set("busy_s", 2.0).set("wait_s", 0.5);
    data.summary = json::Value::object()
                       .set("echo", json::Value::object()
                                        .set("factor", 2.0)
                                        .set("stages", json::Value::array().push(stage)))
                       .set("pipeline", json::Value::object().set(
                                            "stages", json::Value::array().push(partition)));
    const std::string html = app::render_report_html(data);
    CHECK(html.find("{\"") == std::string::npos);              // no block shown as one line of JSON
    CHECK(html.find("<th>busy_s</th>") != std::string::npos);  // a column per stage key
    CHECK(html.find("<td>decode</td>") != std::string::npos);
    CHECK(html.find("Data loader stages") != std::string::npos);
    CHECK(html.find("Pipeline partitions") != std::string::npos);
    CHECK(html.find("<title>busy_s: 1.5</title>") != std::string::npos);  // bar tooltips
    CHECK(html.find(">partition 1<") != std::string::npos);
  }

  TEST_CASE("one short epoch learns: accuracy far above what a broken gradient reaches") {
    if (!have_fashion_mnist()) {
      MESSAGE("Fashion-MNIST not installed: skipped");
      return;
    }
    const fs::path dir = temp_dir("learn");
    app::TrainOptions o = small_run(4096, 1000, 1);
    o.out = dir.string();
    std::ostringstream log;
    const app::TrainResult r = app::train(o, log);
    REQUIRE(r.completed);
    REQUIRE(r.epochs.size() == 1);
    MESSAGE("test accuracy after 128 steps: " << r.epochs[0].test_acc);
    // Chance is 10%; a wrong gradient sign or scale stays far below this.
    CHECK(r.epochs[0].test_acc >= 0.60);
    CHECK(r.step_losses.back() < r.step_losses.front());
    for (const char* file :
         {"config.json", "metrics.jsonl", "summary.json", "checkpoint.safetensors", "report.html"})
      CHECK(fs::exists(dir / file));
    const json::Value summary = json::parse_file((dir / "summary.json").string());
    for (const char* key : {"model", "dataset", "device", "epochs", "params", "final_test_acc",
                            "best_test_acc", "train_images_per_s", "wall_s", "echo", "startup"})
      CHECK(summary.contains(key));
    CHECK(summary.at("params").as_int() == 61706);
    // Where the time before the first step went: loading the data set is most of it on the CPU.
    const json::Value& startup = summary.at("startup");
    CHECK(startup.at("data_s").as_double() > 0);
    CHECK(startup.at("first_step_s").as_double() > 0);
    CHECK(startup.at("until_first_step_s").as_double() >= startup.at("data_s").as_double());
    CHECK(startup.at("until_first_step_s").as_double() <= summary.at("wall_s").as_double());
    CHECK(summary.at("echo").at("fresh").as_int() == 4096);

    // `echelon eval` on the checkpoint reproduces the final test accuracy.
    app::EvalOptions eval;
    eval.checkpoint = (dir / "checkpoint.safetensors").string();
    eval.device = "cpu";
    eval.limit_test = 1000;
    std::ostringstream eval_log;
    const int threads_before = echelon::ops::cpu_threads();
    const app::EvalResult e = app::evaluate_checkpoint(eval, eval_log);
    CHECK(echelon::ops::cpu_threads() == threads_before);  // eval puts the pool back as it was
    CHECK(e.samples == 1000);
    CHECK(e.accuracy == doctest::Approx(r.epochs[0].test_acc).epsilon(1e-9));
  }

  TEST_CASE("train() leaves the process-wide thread settings as it found them") {
    if (!have_fashion_mnist()) return;
    app::TrainOptions o = small_run(64, 32, 1);
    std::ostringstream log;
    echelon::ops::reset_cpu_threads();
    app::train(o, log);  // --threads 0: the pool keeps its size, OpenBLAS goes single-threaded
    CHECK(echelon::ops::cpu_threads() == 0);
    o.threads = 2;
    app::train(o, log);
    CHECK(echelon::ops::cpu_threads() == 0);
    CHECK(echelon::cpu::fast::num_threads() == 1);
    echelon::ops::set_cpu_threads(3);
    app::train(o, log);
    CHECK(echelon::ops::cpu_threads() == 3);
    CHECK(echelon::cpu::fast::num_threads() == 3);
    echelon::ops::reset_cpu_threads();
    CHECK(echelon::ops::cpu_threads() == 0);
    CHECK(echelon::cpu::fast::num_threads() == 1);
  }

  TEST_CASE("--workers auto: inline only for an in-memory set, no echo auto, on the CPU") {
    namespace ed = echelon::data;
    const auto memory = ed::make_synthetic_dataset({});
    ed::SyntheticOptions slow;
    slow.decode_cost_us = 10;  // emulates a codec: not in memory in the loader's sense
    const auto decoded = ed::make_synthetic_dataset(slow);
    CHECK(memory->in_memory());
    CHECK_FALSE(decoded->in_memory());
    const echelon::Device cpu = echelon::Device::cpu(), gpu = echelon::Device::cuda(0);
    const auto pick = [](const app::WorkersChoice& c) { return c.workers; };
    CHECK(pick(app::resolve_workers(app::kAutoWorkers, memory.get(), "1", cpu)) == 0);
    CHECK(app::resolve_workers(app::kAutoWorkers, memory.get(), "2", cpu).reason ==
          "auto: in-memory data set");
    CHECK(pick(app::resolve_workers(app::kAutoWorkers, memory.get(), "auto", cpu)) == 1);
    CHECK(pick(app::resolve_workers(app::kAutoWorkers, memory.get(), "1", gpu)) == 1);
    CHECK(pick(app::resolve_workers(app::kAutoWorkers, decoded.get(), "1", cpu)) == 1);
    CHECK(pick(app::resolve_workers(app::kAutoWorkers, nullptr, "1", cpu)) == 1);
    // An explicit count is kept whatever the data set.
    CHECK(pick(app::resolve_workers(0, decoded.get(), "1", gpu)) == 0);
    CHECK(pick(app::resolve_workers(3, memory.get(), "1", cpu)) == 3);
    CHECK(app::resolve_workers(1, memory.get(), "1", cpu).reason == "given");
    // The flag's text, and config.json's value (an int, as old files have, or "auto").
    CHECK(app::parse_workers("auto") == app::kAutoWorkers);
    CHECK(app::parse_workers("0") == 0);
    CHECK(app::parse_workers("2") == 2);
    for (const char* bad : {"-1", "abc", "", "2x", "1.5"})
      CHECK_THROWS_WITH_AS(app::parse_workers(bad), doctest::Contains("--workers: invalid value"),
                           Error);
    CHECK(app::TrainOptions::from_json(json::parse(R"({"workers": 1})")).workers == 1);
    CHECK(app::TrainOptions::from_json(json::parse(R"({"workers": "auto"})")).workers ==
          app::kAutoWorkers);
    CHECK(app::TrainOptions{}.workers == app::kAutoWorkers);
  }

  TEST_CASE("same seed gives bit-identical losses; another seed does not") {
    if (!have_fashion_mnist()) return;
    app::TrainOptions o = small_run(640, 64, 1);
    std::ostringstream log;
    const auto a = app::train(o, log);
    const auto b = app::train(o, log);
    REQUIRE(a.step_losses.size() == 20);
    CHECK(a.step_losses == b.step_losses);
    CHECK(a.epochs[0].test_loss == b.epochs[0].test_loss);
    o.workers = 0;  // the inline loader hands out the same batches as one worker per stage
    const auto inline_run = app::train(o, log);
    CHECK(inline_run.step_losses == a.step_losses);
    CHECK(inline_run.epochs[0].test_loss == a.epochs[0].test_loss);
    o.workers = 1;
    o.seed = 8;
    const auto c = app::train(o, log);
    CHECK(c.step_losses != a.step_losses);
  }

  TEST_CASE("a warm-up from lr 0 trains (the first step runs at lr 0)") {
    if (!have_fashion_mnist()) return;
    app::TrainOptions o = small_run(320, 64, 1);
    o.warmup_epochs = 1;
    std::ostringstream log;
    const auto result = app::train(o, log);
    REQUIRE(result.step_losses.size() == 10);
    CHECK(std::isfinite(result.step_losses.back()));
  }

  TEST_CASE("interrupt after epoch 1 and resume gives the metrics of an uninterrupted run") {
    if (!have_fashion_mnist()) return;
    app::TrainOptions o = small_run(512, 128, 3);
    o.schedule = "cosine";  // the LR depends on the epoch: resume must restore it
    o.echo = "2";           // echoing draws must also be a function of (seed, epoch)
    o.echo_at = "before-augment";
    const fs::path whole = temp_dir("whole"), parts = temp_dir("parts");
    std::ostringstream log;
    o.out = whole.string();
    const auto uninterrupted = app::train(o, log);
    REQUIRE(uninterrupted.completed);

    o.out = parts.string();
    o.stop_after_epoch = 1;
    const auto first = app::train(o, log);
    CHECK_FALSE(first.completed);
    REQUIRE(first.epochs.size() == 1);
    o.stop_after_epoch = 0;
    o.resume = parts.string();
    const auto resumed = app::train(o, log);
    REQUIRE(resumed.completed);
    REQUIRE(resumed.epochs.size() == 3);
    for (size_t e = 0; e < 3; ++e) {
      CAPTURE(e);
      CHECK(resumed.epochs[e].train_loss == uninterrupted.epochs[e].train_loss);
      CHECK(resumed.epochs[e].test_loss == uninterrupted.epochs[e].test_loss);
      CHECK(resumed.epochs[e].test_acc == uninterrupted.epochs[e].test_acc);
      CHECK(resumed.epochs[e].lr == uninterrupted.epochs[e].lr);
    }
    std::vector<double> joined = first.step_losses;
    joined.insert(joined.end(), resumed.step_losses.begin(), resumed.step_losses.end());
    CHECK(joined == uninterrupted.step_losses);
    CHECK(metrics_without_timing(parts / "metrics.jsonl") ==
          metrics_without_timing(whole / "metrics.jsonl"));

    // Resuming a finished run asks for more epochs.
    CHECK_THROWS_WITH_AS(app::train(o, log), doctest::Contains("already finished 3"), Error);
  }

  TEST_CASE("--ema: evaluated on the averaged weights, training unchanged, exact resume, eval") {
    if (!have_fashion_mnist()) return;
    app::TrainOptions o = small_run(512, 128, 3);
    std::ostringstream log;
    const auto live = app::train(o, log);
    o.ema = 0.9;
    const fs::path whole = temp_dir("ema-whole"), parts = temp_dir("ema-parts");
    o.out = whole.string();
    const auto averaged = app::train(o, log);
    REQUIRE(averaged.completed);
    // The average does not feed back into training; only the evaluated weights differ.
    CHECK(averaged.step_losses == live.step_losses);
    CHECK(averaged.epochs.back().train_loss == live.epochs.back().train_loss);
    CHECK(averaged.epochs.back().test_loss != live.epochs.back().test_loss);
    CHECK(log.str().find("evaluating the moving average of the weights (--ema 0.9)") !=
          std::string::npos);

    // Interrupted after epoch 1 and resumed: the same averages, so the same test numbers.
    o.out = parts.string();
    o.stop_after_epoch = 1;
    app::train(o, log);
    o.stop_after_epoch = 0;
    o.resume = parts.string();
    const auto resumed = app::train(o, log);
    REQUIRE(resumed.epochs.size() == 3);
    for (size_t e = 0; e < 3; ++e) {
      CAPTURE(e);
      CHECK(resumed.epochs[e].test_loss == averaged.epochs[e].test_loss);
    }

    // `echelon eval` of the checkpoint: the averaged weights by default, the live ones on request,
    // bit for bit as the runs evaluated them (eval's OpenBLAS is single-threaded as in train()).
    app::EvalOptions eval;
    eval.checkpoint = whole.string();
    eval.device = "cpu";
    eval.limit_test = 128;
    std::ostringstream eval_log;
    CHECK(app::evaluate_checkpoint(eval, eval_log).loss ==
          doctest::Approx(averaged.epochs.back().test_loss).epsilon(1e-9));
    CHECK(eval_log.str().find("moving average of the weights") != std::string::npos);
    eval.live_weights = true;
    CHECK(app::evaluate_checkpoint(eval, eval_log).loss ==
          doctest::Approx(live.epochs.back().test_loss).epsilon(1e-9));
  }

  TEST_CASE("damaged or foreign checkpoints are refused with the file name") {
    if (!have_fashion_mnist()) return;
    const fs::path dir = temp_dir("damaged");
    app::TrainOptions o = small_run(64, 32, 2);
    o.out = dir.string();
    o.stop_after_epoch = 1;
    std::ostringstream log;
    app::train(o, log);
    const fs::path ckpt = dir / "checkpoint.safetensors";
    const std::string good = read_file(ckpt);
    o.stop_after_epoch = 0;
    o.resume = dir.string();

    // Another model's checkpoint.
    o.model = "resnet20";
    CHECK_THROWS_WITH_AS(app::train(o, log), doctest::Contains("holds model \"lenet5\""), Error);
    o.model = "lenet5";
    // Truncated.
    echelon::write_file_atomic(ckpt.string(), good.substr(0, good.size() / 2));
    try {
      app::train(o, log);
      FAIL("a truncated checkpoint was accepted");
    } catch (const Error& e) {
      CHECK(std::string(e.what()).find(ckpt.string()) != std::string::npos);
    }
    // A valid safetensors file that is not a checkpoint.
    echelon::safetensors::save(ckpt.string(), {{"w", echelon::Tensor::ones({3})}});
    CHECK_THROWS_WITH_AS(app::train(o, log), doctest::Contains("not an echelon checkpoint"), Error);
    // Weights with the wrong shape for the recorded model.
    echelon::safetensors::Contents contents = echelon::safetensors::deserialize(good);
    for (auto& [name, tensor] : contents.tensors)
      if (name == "0.weight") tensor = echelon::Tensor::ones({6, 1, 3, 3});
    echelon::safetensors::save(ckpt.string(), contents.tensors, contents.metadata);
    CHECK_THROWS_WITH_AS(app::train(o, log), doctest::Contains("0.weight"), Error);
    CHECK_THROWS_WITH_AS(app::load_checkpoint((dir / "missing.safetensors").string()),
                         doctest::Contains("missing.safetensors"), Error);
  }

  TEST_CASE("a non-finite loss stops training naming the step and the layer") {
    if (!have_fashion_mnist()) return;
    app::TrainOptions o = small_run(512, 32, 1);
    o.lr = 1e8;  // diverges within a few steps
    o.momentum = 0;
    std::ostringstream log;
    try {
      app::train(o, log);
      FAIL("training with lr 1e8 did not stop");
    } catch (const Error& e) {
      const std::string message = e.what();
      MESSAGE(message);
      CHECK(message.find("non-finite training loss at step ") == 0);
      CHECK(message.find("layer") != std::string::npos);
      CHECK(message.find("--lr") != std::string::npos);
    }
  }
}
