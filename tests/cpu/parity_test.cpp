// CPU mode of the parity harness over every registered case (float32 twin vs float64 twin,
// naive GEMM vs OpenBLAS), plus tests of the harness itself: a harness that cannot fail proves
// nothing, so the comparison, the guards and the registry are checked against known failures.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <iostream>
#include <set>

#include "tests/support/parity.h"

using namespace echelon;

TEST_SUITE("parity") {
  TEST_CASE("every registered case passes in CPU mode") {
    const std::vector<parity::CaseResult> results = parity::run_cpu_parity();
    int failed = 0, ran = 0;
    for (const parity::CaseResult& r : results) {
      if (r.skipped) continue;
      ++ran;
      if (!r.ok) ++failed;
      CHECK_MESSAGE(r.ok, r.name, " [", r.variant, "]: ", r.detail);
    }
    MESSAGE(parity::format_results(results));
    CHECK(ran >= 100);
    CHECK(failed == 0);
  }

  TEST_CASE("the registry covers the basic families with unique names") {
    std::set<std::string> names, families;
    for (const parity::OpCase& c : parity::cases()) {
      CHECK(names.insert(c.name).second);
      families.insert(c.family);
    }
    for (const char* family : {"elementwise", "reduce", "matmul", "shape", "im2col", "random"})
      CHECK_MESSAGE(families.count(family) == 1, "no parity case for family ", family);
    CHECK_THROWS_AS(
        parity::add({parity::cases().front().name, "x", {}, parity::cases().front().run}), Error);
    const std::string listing = parity::list_cases();
    CHECK(listing.find("matmul/tt_multi_tile") != std::string::npos);
    if (std::getenv("ECHELON_PARITY_LIST")) std::cout << listing;
  }

  TEST_CASE("compare catches value, NaN, shape and tolerance errors") {
    const Tensor ref = Tensor::from_vector<float>({1.0f, -2.0f, 3.0f}, {3});
    CHECK(parity::compare(ref, ref.clone(), {0, 0}).ok);
    const Tensor off = Tensor::from_vector<float>({1.0f, -2.001f, 3.0f}, {3});
    const parity::Comparison bad = parity::compare(off, ref, {1e-5, 1e-5});
    CHECK_FALSE(bad.ok);
    CHECK(bad.mismatches == 1);
    CHECK(bad.worst_index == 1);
    CHECK(parity::compare(off, ref, {0, 1e-3}).ok);  // |err| 1e-3 <= 1e-3 * |-2|
    const Tensor nan = Tensor::from_vector<float>({1.0f, std::nanf(""), 3.0f}, {3});
    CHECK_FALSE(parity::compare(nan, ref, {1, 1}).ok);
    CHECK(parity::compare(nan, nan.clone(), {0, 0}).ok);
    CHECK_FALSE(parity::compare(ref.view({1, 3}), ref, {1, 1}).ok);
  }

  TEST_CASE("inputs: same values on each dtype, the requested views, never all zeros") {
    const std::vector<parity::InputSpec> specs = {
        {{5, 7}, kFloat32, -1, 1, parity::Layout::Transposed, {}},
        {{4, 9}, kFloat32, -1, 1, parity::Layout::Strided, {}},
        {{3, 6}, kFloat32, -1, 1, parity::Layout::Offset, {}},
        {{1, 6}, kFloat32, -1, 1, parity::Layout::Broadcast, {5, 6}},
        {{13}, kInt64, 0, 4, parity::Layout::Contiguous, {}}};
    const auto f32 = parity::make_inputs(specs, 42, Device::cpu(), kFloat32);
    const auto f64 = parity::make_inputs(specs, 42, Device::cpu(), kFloat64);
    REQUIRE(f32.size() == specs.size());
    for (size_t i = 0; i < specs.size(); ++i) {
      CHECK(f32[i].shape() ==
            (specs[i].layout == parity::Layout::Broadcast ? specs[i].expand_to : specs[i].shape));
      CHECK(parity::compare(f32[i], f64[i], {0, 0}).ok);
    }
    CHECK(f64[0].dtype() == kFloat64);
    CHECK(f64[4].dtype() == kInt64);
    CHECK_FALSE(f32[0].is_contiguous());
    CHECK_FALSE(f32[1].is_contiguous());
    CHECK(f32[2].offset() == 6);
    CHECK(f32[3].stride(0) == 0);
    const auto values = f32[1].contiguous().to_vector<float>();
    CHECK(std::any_of(values.begin(), values.end(), [](float v) { return v != 0.0f; }));
  }

  TEST_CASE("guards catch a write past the view and a short copy") {
    parity::Guarded g = parity::make_guarded({3, 5}, kFloat32, Device::cpu(), 4);
    CHECK_NOTHROW(g.check("untouched"));
    CHECK(std::isnan(g.view.contiguous().to_vector<float>()[7]));
    Tensor overrun = g.buffer.narrow(0, 4 + 15, 1);  // the first element after the view
    ops::fill_(overrun, 1.0);
    CHECK_THROWS_AS(g.check("overrun"), Error);
    const Tensor out = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
    CHECK(parity::check_guarded_copy(out).empty());
  }
}
