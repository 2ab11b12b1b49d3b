// GPU mode of the parity harness: every registered case on CUDA against the CPU twin (matmul
// cases once with our SGEMM and once with cuBLAS), outputs checked through guarded NaN buffers.
#include <doctest/doctest.h>

#include "tests/support/parity.h"

using namespace echelon;

TEST_SUITE("parity_gpu") {
  TEST_CASE("every registered case: CUDA matches the CPU twin") {
    const std::vector<parity::CaseResult> results = parity::run_gpu_parity();
    int ran = 0;
    for (const parity::CaseResult& r : results) {
      if (r.skipped) continue;
      ++ran;
      CHECK_MESSAGE(r.ok, r.name, " [", r.variant, "]: ", r.detail);
    }
    MESSAGE(parity::format_results(results));
    CHECK(ran >= 100);
  }
}
