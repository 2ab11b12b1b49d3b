// The rough edges a new user meets in `echelon`: warnings and errors that say what went wrong and
// what to do, checked by running the binary as a user would (the rest: cli_test.cpp).
#include <doctest/doctest.h>

#include <filesystem>
#include <string>
#include <thread>

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
}
