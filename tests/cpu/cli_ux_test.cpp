// The rough edges a new user meets in `echelon`: warnings and errors that say what went wrong and
// what to do, checked by running the binary as a user would (the rest: cli_test.cpp).
#include <doctest/doctest.h>

#include <filesystem>
#include <string>
#include <thread>

#include <echelon/app/cli/parse_error.h>
#include <echelon/app/train.h>

#include "tests/support/cli_run.h"

namespace fs = std::filesystem;

using echelon::test::check_usage_error;
using echelon::test::count_lines;
using echelon::test::has;
using echelon::test::kBinary;
using echelon::test::run;
using echelon::test::Run;
using echelon::test::temp_dir;

TEST_SUITE("cli") {
  TEST_CASE("--threads beyond the machine's threads warns once, naming the count") {
    // The rule itself, for any machine.
    CHECK(echelon::app::threads_warning(4, 8).empty());
    CHECK(echelon::app::threads_warning(8, 8).empty());
    CHECK(echelon::app::threads_warning(0, 8).empty());
    CHECK(echelon::app::threads_warning(9, 0).empty());     // unknown core count: no guess
    CHECK(echelon::app::threads_warning(2000, 8).empty());  // refused as an error instead
    const std::string w = echelon::app::threads_warning(1000, 8);
    CHECK_MESSAGE(has(w, "--threads 1000 is more than the 8 CPU threads this machine has"), w);
    if (!fs::exists(kBinary)) return;
    const unsigned cores = std::thread::hardware_concurrency();
    if (cores == 0 || cores >= 1000) return;
    const std::string base = "--device cpu --threads 1000 ";
    const Run train =
        run("train --data synthetic --limit-train 32 --limit-test 32 --epochs 1 "
            "--batch-size 16 --progress none " +
            base);
    CHECK(train.status == 0);
    CHECK_MESSAGE(count_lines(train.err) == 1, train.err);
    CHECK_MESSAGE(has(train.err, "echelon: warning: --threads 1000 is more than the " +
                                     std::to_string(cores) + " CPU threads"),
                  train.err);
    const Run bench = run("bench op relu --input 4,4 --repeats 1 --warmup 0 " + base);
    CHECK(bench.status == 0);
    CHECK_MESSAGE(has(bench.err, "echelon: warning: --threads 1000"), bench.err);
    // Within the machine, nothing on stderr.
    const Run quiet =
        run("bench op relu --input 4,4 --repeats 1 --warmup 0 --device cpu "
            "--threads 1");
    CHECK(quiet.status == 0);
    CHECK_MESSAGE(quiet.err.empty(), quiet.err);
    // The hard cap stays an error, in bench as in train.
    check_usage_error("train --device cpu --threads 5000", "--threads must be in 0..1024");
    check_usage_error("bench op relu --device cpu --threads 5000", "--threads must be in 0..1024");
  }

  TEST_CASE("a mistyped flag is named, with the nearest known flag of that subcommand") {
    CHECK(echelon::app::edit_distance("--modle", "--model") == 1);  // a swap is one slip
    CHECK(echelon::app::edit_distance("", "abc") == 3);
    CHECK(echelon::app::edit_distance("kitten", "sitting") == 3);
    if (!fs::exists(kBinary)) return;
    // Before: "The following arguments were not expected: lenet5 --modle (see echelon --help)".
    check_usage_error("train --modle lenet5",
                      "echelon train: unknown flag --modle; did you mean --model? (see echelon "
                      "train --help)");
    check_usage_error("train --epoch 3", "unknown flag --epoch; did you mean --epochs?");
    check_usage_error("train --lr=0.1 --momentun 0.9",
                      "unknown flag --momentun; did you mean "
                      "--momentum?");
    check_usage_error("bench op relu --repeat 3",
                      "echelon bench op: unknown flag --repeat; did you mean --repeats? (see "
                      "echelon bench op --help)");
    check_usage_error("launch --nproc 2 -- train --pipeline 2",
                      "echelon launch: unknown flag --nproc; did you mean --nproc-per-node?");
    // A flag of another subcommand: named, no far-fetched guess.
    check_usage_error("eval --checkpoint x --resume y",
                      "echelon eval: unknown flag --resume (see echelon eval --help)");
    check_usage_error("--trian", "unknown flag --trian; give a subcommand first: train, eval");
    // A negative number is a value, not an unknown flag.
    check_usage_error("train --lr -1", "--lr must be a number > 0 (got -1)");
  }

  TEST_CASE("a value of the wrong kind says what the flag takes; a missing subcommand lists them") {
    if (!fs::exists(kBinary)) return;
    // Before: "Could not convert: --epochs = 1.5 (see echelon --help)".
    check_usage_error("train --epochs 1.5",
                      "--epochs: '1.5' is not a whole number (see echelon train --help)");
    check_usage_error("train --lr abc", "--lr: 'abc' is not a number (see echelon train --help)");
    check_usage_error("train --milestones 3,x", "--milestones: '3,x' is not a whole number");
    check_usage_error("bench model lenet5 --batch-size 1e3",
                      "--batch-size: '1e3' is not a whole number (see echelon bench model --help)");
    // Before: "A subcommand is required (see echelon --help)".
    check_usage_error("",
                      "give a subcommand: train, eval, models, bench, launch, reproduce (see "
                      "echelon --help)");
    check_usage_error("bench",
                      "echelon bench: give a subcommand: op, model, pipeline, loader (see "
                      "echelon bench --help)");
    check_usage_error("eval", "echelon eval: --checkpoint is required (see echelon eval --help)");
    check_usage_error("models extra", "echelon models: ");
  }

  TEST_CASE("--resume and --out mistakes are caught before any data is loaded") {
    if (!fs::exists(kBinary)) return;
    const fs::path dir = temp_dir("cli_ux_resume");
    const std::string folder = (dir / "run").string();
    const Run first =
        run("train --data synthetic --device cpu --epochs 1 --limit-train 32 "
            "--limit-test 16 --batch-size 16 --progress none --out " +
            folder);
    REQUIRE(first.status == 0);
    // Before: "r/checkpoint.safetensors: checkpoint holds model "lenet5", not "resnet20"", after
    // loading the data set.
    check_usage_error("train --resume " + folder + " --model resnet20 --epochs 2",
                      "--resume " + folder +
                          ": that run trains lenet5, and --model resnet20 cannot continue it; "
                          "drop --model, or start a new run with --out DIR");
    // The run's own model, given again, is fine (the epoch check speaks next).
    check_usage_error("train --resume " + folder + " --model lenet5 --epochs 1",
                      "the run already finished 1 epoch");
    // Before: "no config.json there (not a run folder?)" for a folder that does not exist.
    check_usage_error("train --resume " + (dir / "nothere").string(),
                      "nothere: no such folder (give the --out folder of an earlier run)");
    // Before: "cannot create the folder: Not a directory", after loading the data set.
    const std::string file = (dir / "run" / "summary.json").string();
    check_usage_error("train --data synthetic --device cpu --out " + file,
                      "--out " + file + ": is a file, not a folder");
    check_usage_error("train --data synthetic --device cpu --overwrite --out " + file,
                      "is a file, not a folder");
  }

  TEST_CASE("bench names the argument that gave an unknown model or data set") {
    if (!fs::exists(kBinary)) return;
    check_usage_error("bench model lenet7", "bench model: unknown model 'lenet7' (known: lenet5");
    check_usage_error("bench pipeline --model vgg --device cpu",
                      "--model: unknown model 'vgg' (known:");
    check_usage_error("bench loader --data nothing --device cpu",
                      "--data: unknown dataset \"nothing\" (known: fashion-mnist");
    check_usage_error("bench loader --data synthetic --model x --device cpu",
                      "--model: unknown model 'x'");
  }

  TEST_CASE("eval names --data and --data-dir; --target-accuracy hints at a percentage") {
    if (!fs::exists(kBinary)) return;
    const fs::path dir = temp_dir("cli_ux_eval");
    const std::string folder = (dir / "run").string();
    REQUIRE(run("train --data synthetic --device cpu --epochs 1 --limit-train 16 --limit-test 16 "
                "--batch-size 16 --progress none --out " +
                folder)
                .status == 0);
    // Before: "dataset 'folder' needs a directory (with train/ and test/)" (no flag named).
    check_usage_error("eval --device cpu --checkpoint " + folder + " --data folder",
                      "--data folder needs --data-dir DIR");
    // Before: "unknown dataset "imagenet"" without the flag.
    check_usage_error("eval --device cpu --checkpoint " + folder + " --data imagenet",
                      "--data: unknown dataset \"imagenet\" (known: fashion-mnist");
    // eval takes --threads as train and bench do (it was "not expected"), with the same cap.
    const Run threads = run("eval --device cpu --threads 1 --checkpoint " + folder);
    CHECK_MESSAGE(threads.status == 0, threads.err);
    CHECK(has(threads.out, "eval lenet5 (epoch 1) on synthetic test ("));
    check_usage_error("eval --device cpu --threads 5000 --checkpoint " + folder,
                      "--threads must be in 0..1024 (got 5000)");
    check_usage_error("train --data synthetic --device cpu --target-accuracy 95",
                      "--target-accuracy must be a fraction in (0, 1], or 0 for none (got 95; for "
                      "95% give 0.95)");
    check_usage_error("train --data synthetic --device cpu --target-accuracy 1000",
                      "or 0 for none (got 1000)");
  }
}
