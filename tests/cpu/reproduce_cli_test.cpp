// `echelon reproduce echo|pipeline` at the hidden smoke size (seconds): every table and its
// paper column on stdout, the --json file parsed back and consistent with itself, and one-line
// errors with exit status 2.
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

Value run_smoke(const std::string& paper, Run& r) {
  const fs::path file = temp_dir("reproduce_json") / (paper + ".json");
  r = run("reproduce " + paper + " --size smoke --json " + file.string());
  REQUIRE_MESSAGE(r.status == 0, r.err);
  return echelon::json::parse_file(file.string());
}

}  // namespace

TEST_SUITE("cli_reproduce") {
  TEST_CASE("reproduce echo: speedup per R and e, fresh examples per placement, paper beside") {
    if (!fs::exists(kBinary)) return;
    Run r;
    const Value j = run_smoke("echo", r);
    for (const char* field :
         {"Choi et al. 2019", "What differs from the paper", "Fashion-MNIST", "| R | e |",
          "ideal min(e, R)", "measured R", "auto (", "fresh examples to target", "before-augment",
          "batch", "3.25x", "not found", "load average"})
      CHECK_MESSAGE(has(r.out, field), field);
    CHECK(j.at("paper").as_string() == "echo");
    CHECK(j.at("size").as_string() == "smoke");
    CHECK(j.at("differences").size() >= 3);
    const auto& speed = j.at("speed").as_array();
    REQUIRE(speed.size() == 3);  // smoke: R = 2, e = 1, 2, auto
    CHECK(speed[0].at("echo").as_string() == "1");
    CHECK(speed[0].at("speedup").as_double() == doctest::Approx(1.0));
    for (const Value& row : speed) {
      CHECK(row.at("seconds").as_double() > 0);
      CHECK(row.at("ideal").as_double() ==
            doctest::Approx(std::min(row.at("factor").as_double(), 2.0)));
      CHECK(row.at("paper").as_string() == "not found");
    }
    CHECK(speed[2].at("echo").as_string() == "auto");
    CHECK(speed[2].at("factor").as_double() > 1.0);  // the loader measured a slow upstream
    const auto& fresh = j.at("fresh_examples").as_array();
    REQUIRE(fresh.size() == 3);
    CHECK(fresh[0].at("factor").as_double() == 1.0);
    for (const Value& row : fresh) {
      CHECK(row.at("fresh").as_int() > 0);
      // Echoing repeats examples: at least as many steps as fresh batches of 64.
      CHECK(row.at("steps").as_int() * 64 >= row.at("fresh").as_int());
      CHECK(row.at("accuracy").as_double() >= 0);
      CHECK(row.at("accuracy").as_double() <= 1);
    }
  }

  TEST_CASE("reproduce pipeline: speedup, memory and accuracy drop tables, paper beside") {
    if (!fs::exists(kBinary)) return;
    Run r;
    const Value j = run_smoke("pipeline", r);
    for (const char* field : {"Zhang & Abdelrahman 2019", "What differs from the paper",
                              "2 workers, stale", "balance bound", "4-stage cut", "stash increase",
                              "97% / 109%", "paper's placement (ppv 2)", "stale, deep", "hybrid",
                              "paper drop", "warm-up", "0.4", "load average"})
      CHECK_MESSAGE(has(r.out, field), field);
    CHECK(j.at("paper").as_string() == "pipeline");
    const auto& speed = j.at("speed").as_array();
    REQUIRE(speed.size() == 2);
    CHECK(speed[0].at("speedup").as_double() == doctest::Approx(1.0));
    CHECK(!speed[1].at("ppv").as_string().empty());  // the 2-worker run has a cut
    const Value& memory = j.at("memory").as_array().at(0);
    // Partition 0 holds 4 mini-batches in flight: more than the non-pipelined one, and stashing
    // adds weight snapshots on top.
    CHECK(memory.at("stale_bytes").as_int() > memory.at("base_bytes").as_int());
    CHECK(memory.at("stash_bytes").as_int() >= memory.at("stale_bytes").as_int());
    CHECK(memory.at("paper").as_string() == "97% / 109%");
    const auto& accuracy = j.at("accuracy").as_array();
    REQUIRE(accuracy.size() == 4);  // sequential, stale at the paper's cut, deep, hybrid
    CHECK(accuracy[0].at("drop_points").as_double() == 0.0);
    CHECK(accuracy[1].at("paper_drop").as_string() == "0.4");
    const double sequential = accuracy[0].at("test_acc").as_double();
    for (const Value& row : accuracy) {
      CHECK(row.at("drop_points").as_double() ==
            doctest::Approx(row.at("ppv").as_string().empty()
                                ? 0.0
                                : 100 * (sequential - row.at("test_acc").as_double())));
    }
  }

  TEST_CASE("reproduce: bad arguments are one-line errors with exit status 2") {
    if (!fs::exists(kBinary)) return;
    check_usage_error("reproduce frob --size smoke", "unknown paper 'frob'");
    check_usage_error("reproduce", "paper is required");
    check_usage_error("reproduce echo --size huge", "--size must be smoke");
    check_usage_error("reproduce pipeline --quick --epochs", "--epochs");
    check_usage_error("reproduce pipeline --size smoke --json /no/such/dir/r.json",
                      "/no/such/dir/");
    // Before the first table, not after it (these once failed only minutes in).
    const fs::path dir = echelon::test::temp_dir("reproduce_args");
    check_usage_error("reproduce echo --size smoke --json " + dir.string(), "is a folder");
    check_usage_error("reproduce echo --size smoke --data-dir " + (dir / "absent").string(),
                      "fashion-mnist: no folder");
    const echelon::test::Run quick =
        run("reproduce echo --size smoke --data-dir " + (dir / "absent").string());
    CHECK_MESSAGE(quick.out.find('|') == std::string::npos, quick.out);  // no table printed
  }
}
