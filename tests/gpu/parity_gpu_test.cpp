// GPU mode of the parity harness: every registered case on CUDA against the CPU twin (matmul
// cases once with our SGEMM and once with cuBLAS), outputs checked through guarded NaN buffers.
// ECHELON_PARITY_FILTER=TEXT restricts the run to cases whose name or family contains TEXT
// (tools/gpu-check.sh runs the compute-sanitizer passes one family at a time that way).
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>

#include "tests/support/parity.h"

using namespace echelon;

TEST_SUITE("parity_gpu") {
  TEST_CASE("every registered case: CUDA matches the CPU twin") {
    const char* env = std::getenv("ECHELON_PARITY_FILTER");
    const std::string filter = env ? env : "";
    const std::vector<parity::CaseResult> results = parity::run_gpu_parity(filter);
    int ran = 0;
    for (const parity::CaseResult& r : results) {
      if (r.skipped) continue;
      ++ran;
      CHECK_MESSAGE(r.ok, r.name, " [", r.variant, "]: ", r.detail);
    }
    MESSAGE(parity::format_results(results));
    if (filter.empty())
      CHECK(ran >= 100);
    else
      CHECK_MESSAGE(ran >= 1, "ECHELON_PARITY_FILTER=", filter, " matches no case");
  }
}
