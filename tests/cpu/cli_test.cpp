// Runs the `echelon` binary as a user would and checks exit codes and the one-line errors.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/cli_run.h"

namespace fs = std::filesystem;

using echelon::test::check_usage_error;
using echelon::test::has;
using echelon::test::kBinary;
using echelon::test::run;
using echelon::test::Run;
using echelon::test::slurp;
using echelon::test::temp_dir;

TEST_SUITE("cli") {
  TEST_CASE("models lists the zoo with parameter counts") {
    if (!fs::exists(kBinary)) {
      MESSAGE("echelon binary not built: skipped");
      return;
    }
    const Run r = run("models");
    CHECK(r.status == 0);
    CHECK(r.out.find("lenet5") != std::string::npos);
    CHECK(r.out.find("61706") != std::string::npos);
    CHECK(r.out.find("resnet20") != std::string::npos);
  }

  TEST_CASE("invalid flag values exit 2 with one line naming the flag") {
    if (!fs::exists(kBinary)) return;
    check_usage_error("train --epochs -3", "--epochs must be >= 1 (got -3)");
    check_usage_error("train --lr 0", "--lr");
    check_usage_error("train --lr -1e-3", "--lr");
    check_usage_error("train --batch-size 0", "--batch-size");
    check_usage_error("train --device tpu", "--device");
    check_usage_error("train --lr-schedule cosin", "--lr-schedule: cosin not in");
    check_usage_error("train --stop-after-epoch -1", "--stop-after-epoch must be >= 0 (got -1)");
    check_usage_error("train --model lenet7", "unknown model \"lenet7\"");
    check_usage_error("train --epochs ten", "--epochs");
    check_usage_error("train --no-such-flag", "--no-such-flag");
    check_usage_error("train --echo 0.3", "--echo");
    check_usage_error("train --autotune --deterministic",
                      "--deterministic cannot be combined with --autotune");
    // Before the bound, 1e6 and 1e12 ran one epoch for days and 1e300 trained no step at all.
    check_usage_error("train --echo 1e6",
                      "--echo: echo factor '1e6' must be a number in [1, 1000]");
    check_usage_error("train --echo 1e300", "--echo: echo factor '1e300' must be a number in");
    check_usage_error("train --echo inf", "--echo: echo factor 'inf' must be a number in");
    check_usage_error("train --schedule frob", "pipeline: sequential, stale");
    check_usage_error("train --schedule stale --schedule-pipeline gpipe", "disagree");
    check_usage_error("train --pipeline 2 --schedule-pipeline frob",
                      "--schedule-pipeline: unknown pipeline schedule 'frob'");
    check_usage_error("train --schedule cosine --lr-schedule step", "disagree");
    check_usage_error(
        "train --data synthetic --device cpu --pipeline 2 --trace "
        "/proc/no-such-dir/trace.json",
        "trace '/proc/no-such-dir/trace.json': cannot create the folder '/proc/no-such-dir'");
    check_usage_error("train --data synthetic --device cpu --pipeline 2 --ppv 2,,5",
                      "--ppv: partition points '2,,5': empty entry");
    check_usage_error("train --data synthetic --device cpu --pipeline 2 --micro-batches 0",
                      "--micro-batches must be >= 1");
    check_usage_error(
        "train --data synthetic --device cpu --pipeline 2 --schedule hybrid --hybrid-switch -1",
        "--hybrid-switch: pipeline: hybrid_switch must be > 0");
    check_usage_error("train --bucket-mb -1",
                      "--bucket-mb: must be a number of MiB in [0, 1024], got '-1'");
    check_usage_error("train --bucket-mb nan",
                      "--bucket-mb: must be a number of MiB in [0, 1024], got 'nan'");
    check_usage_error("train --bucket-mb 2e9", "--bucket-mb: must be a number of MiB");
    check_usage_error("train --bucket-mb 1x", "--bucket-mb: must be a number of MiB");
    // A valid size without replicas would be ignored without a word.
    check_usage_error("train --data synthetic --device cpu --bucket-mb 4",
                      "--bucket-mb sums the gradients of data-parallel replicas, and this run has "
                      "one: add --data-parallel R");
  }

  TEST_CASE("conflicting or pointless pipeline flags are errors, not silently ignored") {
    if (!fs::exists(kBinary)) return;
    const std::string base = "train --data synthetic --device cpu ";
    check_usage_error(base + "--pipeline 4 --ppv 2,5",
                      "--pipeline 4 and --ppv 2,5 (3 partitions) disagree");
    check_usage_error(base + "--micro-batches 4", "--micro-batches needs a pipeline");
    check_usage_error(base + "--schedule gpipe", "pipeline schedule 'gpipe' needs a pipeline");
    check_usage_error(base + "--schedule-pipeline stash", "'stash' needs a pipeline");
  }

  TEST_CASE("unknown subcommand, --version, defaults in --help, locations behind ECHELON_DEBUG") {
    if (!fs::exists(kBinary)) return;
    check_usage_error("frobnicate", "unknown subcommand 'frobnicate' (expected one of: train");
    const Run version = run("--version");
    CHECK(version.status == 0);
    CHECK(version.out.rfind("echelon ", 0) == 0);
    const Run help = run("train --help");
    CHECK(help.status == 0);
    CHECK_MESSAGE(help.out.find("--model TEXT=lenet5") != std::string::npos, help.out);
    const Run debug = run("train --epochs 0 --data synthetic", "ECHELON_DEBUG=1 ");
    CHECK(debug.status == 2);
    CHECK_MESSAGE(debug.err.find(".cpp:") != std::string::npos, debug.err);
    const Run quiet = run("train --epochs 0 --data synthetic", "ECHELON_DEBUG=off ");
    CHECK(quiet.status == 2);
    CHECK_MESSAGE(quiet.err.find(".cpp:") == std::string::npos, quiet.err);
    const Run bad = run("models", "ECHELON_DEBUG=verbose ");
    CHECK(bad.status == 2);
    CHECK_MESSAGE(bad.err ==
                      "echelon: error: ECHELON_DEBUG='verbose': expected 1, 0, true, false, on, "
                      "off, yes or no\n",
                  bad.err);
  }

  TEST_CASE("--out into another run's folder needs --overwrite") {
    if (!fs::exists(kBinary)) return;
    const fs::path out = temp_dir("overwrite");
    const std::string args =
        "train --model lenet5 --data synthetic --limit-train 32 --limit-test 16 --epochs 1 "
        "--batch-size 16 --device cpu --progress none --out " +
        out.string();
    REQUIRE(run(args).status == 0);
    const std::string config_before = slurp(out / "config.json");
    check_usage_error(args + " --lr 0.5", "already holds a run (config.json); pass --overwrite");
    CHECK(slurp(out / "config.json") == config_before);  // untouched
    CHECK(run(args + " --lr 0.5 --overwrite").status == 0);
    CHECK(slurp(out / "config.json") != config_before);
  }

  TEST_CASE("a pipelined run resumes pipelined, and a hybrid run resumes in its schedule") {
    if (!fs::exists(kBinary)) return;
    const fs::path whole = temp_dir("hybrid_whole"), parts = temp_dir("hybrid_parts");
    const std::string args =
        "train --model lenet5 --data synthetic --limit-train 64 --limit-test 16 --batch-size 16 "
        "--device cpu --progress none --deterministic --lr 0.1 --pipeline 2 --schedule hybrid "
        "--hybrid-switch 2 --epochs 3 --out ";
    REQUIRE(run(args + whole.string()).status == 0);
    REQUIRE(run(args + parts.string() + " --stop-after-epoch 2").status == 0);
    // No pipeline flag given again: config.json's "engine" brings them back, and the third epoch
    // runs sequential as in the uninterrupted run (it used to restart the hybrid at epoch 0).
    const Run resumed = run("train --progress none --resume " + parts.string());
    REQUIRE(resumed.status == 0);
    CHECK(resumed.out.find("engine pipeline:hybrid") != std::string::npos);
    const auto losses = [](const fs::path& dir) {
      std::vector<std::string> found;
      std::istringstream lines(slurp(dir / "metrics.jsonl"));
      for (std::string line; std::getline(lines, line);)
        if (line.find("\"type\":\"epoch\"") != std::string::npos)
          found.push_back(line.substr(0, line.find(",\"train_images\"")));
      return found;
    };
    REQUIRE(losses(whole).size() == 3);
    CHECK(losses(whole)[0].find("\"epoch\":1,") != std::string::npos);  // from 1, as printed
    CHECK(losses(parts) == losses(whole));
    CHECK(slurp(parts / "summary.json").find("\"schedule_now\": \"sequential\"") !=
          std::string::npos);
  }

  TEST_CASE("checkpoint-best, class names and an absolute data folder; eval needs only test/") {
    if (!fs::exists(kBinary)) return;
    const fs::path out = temp_dir("best");
    const std::string args =
        "train --model lenet5 --data synthetic --limit-train 64 --limit-test 32 --batch-size 16 "
        "--device cpu --progress none --epochs 3 --lr 0.05 --out " +
        out.string();
    REQUIRE(run(args).status == 0);
    REQUIRE(fs::exists(out / "checkpoint-best.safetensors"));
    const std::string summary = slurp(out / "summary.json");
    const auto number_after = [&](const std::string& key) {
      return std::stod(summary.substr(summary.find(key) + key.size() + 2));
    };
    // The best checkpoint scores the summary's best accuracy, the last one the final accuracy.
    const Run best = run("eval --device cpu --limit-test 32 --checkpoint " +
                         (out / "checkpoint-best.safetensors").string());
    REQUIRE(best.status == 0);
    const auto accuracy = [](const std::string& line) {
      return std::stod(line.substr(line.find("accuracy ") + 9));
    };
    CHECK(accuracy(best.out) ==
          doctest::Approx(100 * number_after("\"best_test_acc\"")).epsilon(0.002));
    // It is the best epoch's checkpoint (the first of equals), not the last epoch's.
    const int best_epoch = static_cast<int>(number_after("\"best_epoch\""));
    CHECK(best.out.find("(epoch " + std::to_string(best_epoch) + ")") != std::string::npos);
    const std::string checkpoint = slurp(out / "checkpoint.safetensors");
    CHECK(checkpoint.find(R"("class_names":"[\"0\",\"1\",)") != std::string::npos);
    // The run folder stands for its last epoch's checkpoint.
    const Run folder = run("eval --device cpu --limit-test 32 --checkpoint " + out.string());
    REQUIRE(folder.status == 0);
    CHECK(folder.out.find("(epoch 3)") != std::string::npos);
    CHECK(accuracy(folder.out) ==
          doctest::Approx(100 * number_after("\"final_test_acc\"")).epsilon(0.002));
  }

  TEST_CASE("Ctrl-C says what is on disk: the checkpoint and how to resume, or nothing saved") {
    if (!fs::exists(kBinary)) return;
    // Tiny epochs (ms each): two seconds in, several have finished. SIGINT, as Ctrl-C sends.
    const std::string args =
        "train --data synthetic --limit-train 64 --limit-test 32 --epochs 1000000 --progress none "
        "--device cpu";
    const std::string interrupt = "timeout --preserve-status -s INT 2 ";
    const Run bare = run(args, interrupt);
    CHECK(bare.status == 130);
    CHECK_MESSAGE(has(bare.out, "nothing was saved (no --out"), bare.out);
    CHECK_FALSE(has(bare.out, "holds epoch"));  // once: "the checkpoint holds epoch N", of none
    const fs::path out = temp_dir("interrupted");
    const Run kept = run(args + " --out " + out.string(), interrupt);
    CHECK(kept.status == 130);
    CHECK_MESSAGE(has(kept.out, "checkpoint.safetensors holds epoch"), kept.out);
    CHECK(has(kept.out, "continue with `echelon train --resume " + out.string() + "`"));
    const Run eval = run("eval --device cpu --checkpoint " + out.string());
    CHECK_MESSAGE(eval.status == 0, eval.err);
  }

  TEST_CASE("--trace naming a folder is refused by name") {
    if (!fs::exists(kBinary)) return;
    // Once "DIR: cannot rename the temporary file onto: Is a directory".
    const fs::path dir = temp_dir("trace_dir");
    check_usage_error("train --data synthetic --device cpu --trace " + dir.string(),
                      "--trace " + dir.string() + ": is a folder; give a file name, e.g. " +
                          (dir / "trace.json").string());
  }

  TEST_CASE("a folder without a checkpoint, given as one, is named as a folder") {
    if (!fs::exists(kBinary)) return;
    const fs::path dir = temp_dir("checkpoint_dir");
    check_usage_error("eval --checkpoint " + dir.string(),
                      ": is a directory without checkpoint.safetensors");
  }

  TEST_CASE("a diverged run's losses keep the epoch table's columns in line") {
    if (!fs::exists(kBinary)) return;
    const Run r =
        run("train --model lenet5 --data synthetic --limit-train 64 --limit-test 32 --epochs 2 "
            "--batch-size 64 --device cpu --progress none --lr 1e9");
    REQUIRE_MESSAGE(r.status == 0, r.err);
    std::istringstream lines(r.out);
    size_t header = 0;
    std::vector<size_t> rows;
    for (std::string line; std::getline(lines, line);) {
      if (line.rfind("  epoch", 0) == 0) header = line.size();
      if (line.rfind("      ", 0) == 0) rows.push_back(line.size());
    }
    REQUIRE(rows.size() == 2);
    // A 35-digit %f loss made its row ~30 characters longer than the header.
    CHECK(rows[0] == header);
    CHECK(rows[1] == header);
  }

  TEST_CASE("--no-fuse is recorded in config.json (and resumed from it)") {
    if (!fs::exists(kBinary)) return;
    const std::string small =
        "train --model lenet5 --data synthetic --limit-train 32 --limit-test 16 --batch-size 16 "
        "--device cpu --progress none --out ";
    const fs::path fused = temp_dir("fuse_on"), unfused = temp_dir("fuse_off");
    REQUIRE(run(small + fused.string() + " --epochs 1").status == 0);
    REQUIRE(run(small + unfused.string() + " --epochs 1 --no-fuse").status == 0);
    CHECK(slurp(fused / "config.json").find("\"fuse\": true") != std::string::npos);
    CHECK(slurp(unfused / "config.json").find("\"fuse\": false") != std::string::npos);
    REQUIRE(run("train --resume " + unfused.string() + " --epochs 2").status == 0);
    CHECK(slurp(unfused / "config.json").find("\"fuse\": false") != std::string::npos);
    REQUIRE(run("train --resume " + unfused.string() + " --epochs 3 --fuse").status == 0);
    CHECK(slurp(unfused / "config.json").find("\"fuse\": true") != std::string::npos);
  }

  TEST_CASE("--schedule takes a pipeline schedule as well as an LR schedule") {
    if (!fs::exists(kBinary)) return;
    const fs::path out = temp_dir("schedule_flag");
    const Run r =
        run("train --model lenet5 --data synthetic --limit-train 64 --limit-test 32 "
            "--epochs 1 --batch-size 16 --device cpu --progress none --pipeline 2 "
            "--schedule stash --lr-schedule cosine --out " +
            out.string());
    REQUIRE_MESSAGE(r.status == 0, r.err);
    std::ifstream summary(out / "summary.json");
    std::ostringstream text;
    text << summary.rdbuf();
    CHECK(text.str().find("pipeline:stash") != std::string::npos);
    std::ifstream config(out / "config.json");
    std::ostringstream config_text;
    config_text << config.rdbuf();
    CHECK(config_text.str().find("\"cosine\"") != std::string::npos);
  }

  TEST_CASE("missing and corrupt dataset files exit 2 naming the file") {
    if (!fs::exists(kBinary)) return;
    const fs::path empty = temp_dir("empty_data");
    check_usage_error("train --device cpu --data-dir " + empty.string(), empty.string());
    // Files with the right names but garbage inside.
    const fs::path corrupt = temp_dir("corrupt_data");
    for (const char* name : {"train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                             "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"}) {
      std::ofstream f(corrupt / name, std::ios::binary);
      f << "this is not an IDX file at all";
    }
    check_usage_error("train --device cpu --data-dir " + corrupt.string(),
                      (corrupt / "train-images-idx3-ubyte").string());
    check_usage_error("train --data cifar10 --device cpu --data-dir " + empty.string(),
                      empty.string());
  }

  TEST_CASE("eval refuses damaged checkpoints with one line naming the file") {
    if (!fs::exists(kBinary)) return;
    const fs::path dir = temp_dir("bad_ckpt");
    const fs::path missing = dir / "missing.safetensors";
    check_usage_error("eval --device cpu --checkpoint " + missing.string(), missing.string());

    const fs::path short_file = dir / "short.safetensors";
    std::ofstream(short_file, std::ios::binary) << "abc";
    check_usage_error("eval --device cpu --checkpoint " + short_file.string(), "too short");

    // Header length far beyond the file.
    const fs::path beyond = dir / "beyond.safetensors";
    {
      std::ofstream f(beyond, std::ios::binary);
      const unsigned char len[8] = {0x00, 0x10, 0, 0, 0, 0, 0, 0};
      f.write(reinterpret_cast<const char*>(len), 8);
      f << "{}";
    }
    check_usage_error("eval --device cpu --checkpoint " + beyond.string(), "runs past the end");

    const fs::path bad_json = dir / "bad_json.safetensors";
    {
      std::ofstream f(bad_json, std::ios::binary);
      const std::string header = "{\"a\": [1,";
      const unsigned char len[8] = {static_cast<unsigned char>(header.size()), 0, 0, 0, 0, 0, 0, 0};
      f.write(reinterpret_cast<const char*>(len), 8);
      f << header;
    }
    check_usage_error("eval --device cpu --checkpoint " + bad_json.string(), "invalid JSON");

    const fs::path out_of_range = dir / "range.safetensors";
    {
      std::ofstream f(out_of_range, std::ios::binary);
      const std::string header = R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})";
      const unsigned char len[8] = {static_cast<unsigned char>(header.size()), 0, 0, 0, 0, 0, 0, 0};
      f.write(reinterpret_cast<const char*>(len), 8);
      f << header << "12345678";
    }
    check_usage_error("eval --device cpu --checkpoint " + out_of_range.string(),
                      "past the data buffer");
  }

  TEST_CASE("resume of a folder without a run exits 2") {
    if (!fs::exists(kBinary)) return;
    const fs::path dir = temp_dir("not_a_run");
    check_usage_error("train --resume " + dir.string(), "config.json");
  }
}
