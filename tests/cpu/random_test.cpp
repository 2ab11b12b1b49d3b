// Philox streams: known-answer vector, determinism per seed, disjoint offsets, distributions.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include <echelon/kernels/philox.h>
#include <echelon/tensor/ops.h>

using namespace echelon;

TEST_SUITE("random") {
  TEST_CASE("philox4x32-10 matches the Random123 known-answer vector for zero key and counter") {
    const Philox4 r = philox4x32(0, 0);
    CHECK(r.x[0] == 0x6627e8d5u);
    CHECK(r.x[1] == 0xe169c58du);
    CHECK(r.x[2] == 0xbc57ac4cu);
    CHECK(r.x[3] == 0x9b00dbd8u);
  }

  TEST_CASE("same seed, same numbers; different seeds differ") {
    Generator g1(1234), g2(1234), g3(1235);
    const auto a = ops::rand({7, 13}, g1).to_vector<float>();
    const auto b = ops::rand({7, 13}, g2).to_vector<float>();
    const auto c = ops::rand({7, 13}, g3).to_vector<float>();
    CHECK(a == b);
    CHECK(a != c);
    // The next draw continues the stream rather than repeating it.
    CHECK(ops::rand({7, 13}, g1).to_vector<float>() != a);
  }

  TEST_CASE("generator offsets advance by whole Philox blocks") {
    Generator gen(9);
    ops::rand({5}, gen);  // 5 words -> 2 blocks
    CHECK(gen.offset() == 2);
    ops::randn({3}, gen);  // 3 normals use 4 words -> 1 block
    CHECK(gen.offset() == 3);
    // Element i of a draw is philox_word(state, i): the tensor is a pure function of the state.
    const PhiloxState state{9, 3};
    const Tensor u = ops::rand({6}, gen, kFloat64);
    for (int64_t i = 0; i < 6; ++i)
      CHECK(u.to_vector<double>()[i] == static_cast<double>(philox_uniform(state, i)));
  }

  TEST_CASE("float32 and float64 draws agree to float rounding") {
    Generator g1(77), g2(77);
    const auto f = ops::randn({101}, g1, kFloat32).to_vector<double>();
    const auto d = ops::randn({101}, g2, kFloat64).to_vector<double>();
    for (size_t i = 0; i < f.size(); ++i)
      CHECK(f[i] == static_cast<double>(static_cast<float>(d[i])));
  }

  TEST_CASE("uniform, normal and bernoulli have the right moments") {
    Generator gen(2024);
    const int64_t n = 40001;
    const auto u = ops::rand({n}, gen, kFloat64).to_vector<double>();
    CHECK(*std::min_element(u.begin(), u.end()) >= 0.0);
    CHECK(*std::max_element(u.begin(), u.end()) < 1.0);
    const double u_mean = std::accumulate(u.begin(), u.end(), 0.0) / n;
    CHECK(std::abs(u_mean - 0.5) < 0.01);  // sd of the mean is 0.0014

    const Tensor z = ops::randn({n}, gen, kFloat64);
    const double z_mean = ops::mean(z).item<double>();
    const double z_var = ops::mean(ops::square(ops::add(z, -z_mean))).item<double>();
    CHECK(std::abs(z_mean) < 0.02);
    CHECK(std::abs(z_var - 1.0) < 0.03);
    CHECK(ops::all_finite(z));

    for (double p : {0.1, 0.5, 0.9}) {
      const Tensor b = ops::bernoulli({n}, p, gen);
      const auto bv = b.to_vector<float>();
      CHECK(std::all_of(bv.begin(), bv.end(), [](float v) { return v == 0.0f || v == 1.0f; }));
      CHECK(std::abs(ops::mean(b).item<double>() - p) < 0.01);
    }
    CHECK(ops::mean(ops::bernoulli({100}, 0.0, gen)).item<double>() == 0.0);
    CHECK(ops::mean(ops::bernoulli({100}, 1.0, gen)).item<double>() == 1.0);
  }

  TEST_CASE("randperm is a deterministic permutation") {
    Generator g1(5), g2(5);
    const auto p = ops::randperm(1000, g1).to_vector<int64_t>();
    CHECK(p == ops::randperm(1000, g2).to_vector<int64_t>());
    std::vector<int64_t> sorted = p;
    std::sort(sorted.begin(), sorted.end());
    std::vector<int64_t> identity(1000);
    std::iota(identity.begin(), identity.end(), 0);
    CHECK(sorted == identity);
    CHECK(p != identity);
    CHECK(ops::randperm(0, g1).numel() == 0);
    CHECK(ops::randperm(1, g1).to_vector<int64_t>() == std::vector<int64_t>{0});
  }

  TEST_CASE("manual_seed resets the default generator") {
    manual_seed(42);
    const auto a = ops::rand({9}, default_generator()).to_vector<float>();
    manual_seed(42);
    CHECK(ops::rand({9}, default_generator()).to_vector<float>() == a);
    CHECK(default_generator().seed() == 42);
  }
}
