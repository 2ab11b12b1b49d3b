// `echelon bench op|model|pipeline|loader` run as a user would: the table's fields on stdout, the
// --json file parsed back and checked against it, and one-line errors with exit status 2.
#include <doctest/doctest.h>

#include <filesystem>
#include <string>

#include <echelon/base/json.h>

#include "tests/support/cli_run.h"

namespace fs = std::filesystem;

using echelon::json::Value;
using echelon::test::check_usage_error;
using echelon::test::has;
using echelon::test::kBinary;
using echelon::test::run;
using echelon::test::Run;
using echelon::test::temp_dir;

namespace {

// Runs `args --json FILE` and returns the parsed file (exit status 0 required).
Value run_json(const std::string& args, Run& r) {
  const fs::path file = temp_dir("bench_json") / "result.json";
  r = run(args + " --json " + file.string());
  REQUIRE_MESSAGE(r.status == 0, r.err);
  return echelon::json::parse_file(file.string());
}

}  // namespace

TEST_SUITE("cli_bench") {
  TEST_CASE("bench op conv2d: three passes per implementation, table and JSON agree") {
    if (!fs::exists(kBinary)) return;
    Run r;
    const Value j = run_json(
        "bench op conv2d --input 2,3,8,8 --out-channels 4 --kernel 3 --warmup 1 --repeats 2 "
        "--device cpu",
        r);
    for (const char* field : {"forward", "backward-data", "backward-weight", "naive", "median ms",
                              "IQR ms", "GF/s", "speedup", "baseline naive"})
      CHECK_MESSAGE(has(r.out, field), field);
    CHECK(j.at("op").as_string() == "conv2d");
    CHECK(j.at("device").as_string() == "cpu");
    CHECK(j.at("baseline").as_string() == "naive");
    for (const Value& impl : j.at("impls").as_array()) {
      CHECK(has(r.out, impl.at("impl").as_string()));
      REQUIRE(impl.at("passes").size() == 3);
      for (const Value& pass : impl.at("passes").as_array()) {
        const Value& t = pass.at("time");
        CHECK(t.at("repeats").as_int() == 2);
        CHECK(t.at("min_ms").as_double() <= t.at("median_ms").as_double());
        CHECK(t.at("median_ms").as_double() <= t.at("max_ms").as_double());
        CHECK(pass.at("gflops_per_s").as_double() > 0);
      }
    }
  }

  TEST_CASE("bench --html: the table and a bar chart as inline SVG") {
    if (!fs::exists(kBinary)) return;
    const fs::path page = temp_dir("bench_html") / "report.html";
    const Run r = run("bench op relu --input 64 --repeats 1 --device cpu --html " + page.string());
    REQUIRE_MESSAGE(r.status == 0, r.err);
    const std::string html = echelon::test::slurp(page);
    CHECK(has(html, "<svg"));
    CHECK(has(html, "naive forward"));
    CHECK(has(html, "median ms"));
  }

  TEST_CASE("bench op: memory-bound ops report GB/s; --list names every family") {
    if (!fs::exists(kBinary)) return;
    const Run r = run("bench op max_pool2d --input 2,3,8,8 --repeats 1 --device cpu");
    REQUIRE_MESSAGE(r.status == 0, r.err);
    CHECK(has(r.out, "GB/s"));
    const Run list = run("bench op --list");
    REQUIRE(list.status == 0);
    for (const char* op : {"conv2d", "matmul", "max_pool2d", "batch_norm", "relu", "softmax",
                           "cross_entropy", "sgd", "im2col", "randn"})
      CHECK_MESSAGE(has(list.out, op), op);
  }

  TEST_CASE("bench model --per-layer: one row per layer and the whole step") {
    if (!fs::exists(kBinary)) return;
    Run r;
    const Value j = run_json(
        "bench model lenet5 --batch-size 4 --per-layer --warmup 0 --repeats 1 --device cpu", r);
    CHECK(has(r.out, "share"));
    CHECK(has(r.out, "images/s"));
    CHECK(j.at("input").at("model").as_string() == "lenet5");
    double share = 0;
    for (const Value& layer : j.at("layers").as_array()) {
      CHECK(has(r.out, layer.at("layer").as_string().substr(0, 20)));
      CHECK(layer.at("activation_bytes").as_int() > 0);
      share += layer.at("share").as_double();
    }
    CHECK(j.at("layers").size() >= 5);
    CHECK(share == doctest::Approx(1.0));
    CHECK(j.at("step").at("median_ms").as_double() > 0);
  }

  TEST_CASE("bench pipeline: busy, idle, bubble and transfer per partition vs one worker") {
    if (!fs::exists(kBinary)) return;
    Run r;
    const Value j = run_json(
        "bench pipeline --model lenet5 --batch-size 8 --pipeline 2 --schedule stale --warmup 1 "
        "--steps 2 --device cpu",
        r);
    for (const char* field : {"busy s", "idle s", "bubble s", "xfer s", "one worker"})
      CHECK_MESSAGE(has(r.out, field), field);
    CHECK(j.at("engine").as_string() == "pipeline:stale");
    REQUIRE(j.at("partitions").size() == 2);
    for (const Value& p : j.at("partitions").as_array()) {
      CHECK(p.at("forwards").as_int() == 2);
      CHECK(p.at("idle_s").as_double() >= 0);
    }
    CHECK(j.at("images_per_s").as_double() > 0);
    CHECK(j.at("single_images_per_s").as_double() > 0);
  }

  TEST_CASE("bench loader: stage rates, ring occupancy and the auto echo factor") {
    if (!fs::exists(kBinary)) return;
    Run r;
    const Value j = run_json(
        "bench loader --data synthetic --limit 64 --batch-size 16 --workers 1 --echo 2 "
        "--device cpu",
        r);
    CHECK(has(r.out, "--echo auto would choose"));
    CHECK(has(r.out, "ring mean"));
    CHECK(j.at("batches").as_int() == 8);
    CHECK(j.at("items").as_int() == 128);
    const double e = j.at("auto_echo_factor").as_double();
    CHECK(e >= 1.0);
    CHECK(e <= 8.0);
    CHECK(j.at("loader").at("fresh").as_int() == 64);
    CHECK(j.at("rings").size() == j.at("loader").at("stages").size());
  }

  TEST_CASE("bench: unknown ops, bad shapes and bad values exit 2 with one line") {
    if (!fs::exists(kBinary)) return;
    check_usage_error("bench op frob --device cpu", "unknown op 'frob'");
    check_usage_error("bench op conv2d --input 1,2 --device cpu", "input must be N,C,H,W");
    check_usage_error("bench op conv2d --input 1,2,0,4 --device cpu", "must be >= 1");
    check_usage_error("bench op conv2d --impl cudnn --device cpu", "not available");
    // Once read as 2^64 - 1 without a word, as train's --seed was.
    check_usage_error("bench op relu --device cpu --seed -1", "--seed: must be a whole number");
    check_usage_error("bench model lenet5 --device cpu --seed -1", "--seed: must be a whole");
    check_usage_error("bench loader --seed 99999999999999999999", "--seed: must be a whole");
    check_usage_error("bench op relu --input 4000000000,4000000000 --device cpu", "2^40");
    check_usage_error("bench op matmul --input 4,4 --repeats 0", "--repeats");
    check_usage_error("bench op conv2d --input 2,3,4,4 --kernel 7 --pad 0 --device cpu", "conv2d");
    check_usage_error("bench op", "name an op");
    check_usage_error("bench op matmul --n -3 --device cpu", "--n must be >= 0 (got -3)");
    check_usage_error("bench op max_pool2d --pad -2 --device cpu", "--pad must be >= -1 (got -2)");
    check_usage_error("bench model lenet7 --device cpu", "lenet7");
    check_usage_error("bench op conv2d --device cpu --autotune",
                      "--autotune tunes the CUDA convolutions");
    check_usage_error("bench model lenet5 --batch-size 0", "--batch-size");
    check_usage_error("bench pipeline --model lenet5 --steps 0", "--steps");
    check_usage_error("bench pipeline --model lenet5 --schedule frob", "frob");
    check_usage_error("bench loader --data synthetic --echo 0.5", "0.5");
    check_usage_error("bench", "subcommand");
    check_usage_error("bench op conv2d --input 2,3,8,8 --json /proc/no-such-dir/x.json", "--json");
  }
}
