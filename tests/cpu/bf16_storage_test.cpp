// bfloat16 tensors (DType::BFloat16) as storage: the cast's bits against PyTorch's, every dtype
// in and out, strided and broadcast copies, fill, the errors of ops that do not compute on it,
// the safetensors BF16 code and a BF16 state dict widened into a float32 model. The CUDA kernels
// give the same bits: parity cases bf16_storage/* (tests/support/parity_bf16.cpp).
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <unistd.h>

#include <echelon/base/error.h>
#include <echelon/kernels/bf16.h>
#include <echelon/layers/linear.h>
#include <echelon/tensor/ops.h>
#include <echelon/tensor/random.h>
#include <echelon/tensor/safetensors.h>

#include "tests/support/float_bits.h"

using namespace echelon;
using test::bits_of;
using test::from_bits;

namespace {

std::vector<uint16_t> bits_of(const Tensor& bf16) {
  std::vector<uint16_t> out;
  for (const bfloat16 v : bf16.to_vector<bfloat16>()) out.push_back(v.bits);
  return out;
}

}  // namespace

TEST_SUITE("bf16_storage") {
  TEST_CASE("float32 -> bfloat16 gives PyTorch's bits") {
    // {float bits, bfloat16 bits} from `torch.tensor(v).to(torch.bfloat16).view(torch.int16)`
    // (PyTorch 1.13, Debian): ties to even, subnormals, near the largest float, signed zero.
    const std::vector<std::pair<uint32_t, uint16_t>> expected = {
        {0x3f800000u, 0x3f80u},  // 1.0
        {0x3f808000u, 0x3f80u},  // 1.00390625, a tie: even below
        {0x3f818000u, 0x3f82u},  // 1.01171875, a tie: even above
        {0x40490fdbu, 0x4049u},  // pi
        {0x801b38fcu, 0x801bu},  // -2.5e-39, subnormal
        {0x00000001u, 0x0000u},  // 1e-45, the smallest subnormal
        {0x7f7f7e82u, 0x7f7fu},  // 3.3961e38
        {0x7f7e486fu, 0x7f7eu},  // 3.38e38
        {0x80000000u, 0x8000u},  // -0.0
        {0x7f800000u, 0x7f80u},  // inf
        {0xff800000u, 0xff80u},  // -inf
        {0x477fe000u, 0x4780u},  // 65504.0
        {0x501502f9u, 0x5015u},  // 1e10
        {0x9fb776c5u, 0x9fb7u},  // -7.77e-20
        {0x3dcccccdu, 0x3dcdu},  // 0.1
        {0xc7f12065u, 0xc7f1u},  // -123456.789
    };
    std::vector<float> values;
    for (const auto& [f, b] : expected) values.push_back(from_bits(f));
    const Tensor h =
        ops::cast(Tensor::from_vector(values, {static_cast<int64_t>(values.size())}), kBFloat16);
    CHECK(h.dtype() == kBFloat16);
    CHECK(h.nbytes() == values.size() * 2);
    const std::vector<uint16_t> got = bits_of(h);
    for (size_t i = 0; i < expected.size(); ++i) {
      CAPTURE(values[i]);
      CHECK(got[i] == expected[i].second);
    }
    // NaN stays NaN (PyTorch's bits differ, the value does not).
    const Tensor nan = ops::cast(Tensor::from_vector(std::vector<float>{NAN}, {1}), kBFloat16);
    CHECK(std::isnan(ops::cast(nan, kFloat32).item<float>()));
  }

  TEST_CASE("the cast is round_to_bf16, and bfloat16 -> float32 is exact") {
    std::vector<float> values;
    uint32_t state = 12345;
    for (int i = 0; i < 20000; ++i) {
      state = state * 1664525u + 1013904223u;  // every bit pattern but NaNs
      const float v = from_bits(state);
      if (!std::isnan(v)) values.push_back(v);
    }
    const Tensor x = Tensor::from_vector(values, {static_cast<int64_t>(values.size())});
    const std::vector<float> back = ops::cast(ops::cast(x, kBFloat16), kFloat32).to_vector<float>();
    for (size_t i = 0; i < values.size(); ++i) {
      CAPTURE(values[i]);
      REQUIRE(bits_of(back[i]) == bits_of(round_to_bf16(values[i])));
    }
  }

  TEST_CASE("every dtype converts through float32, as PyTorch's does") {
    // 2^24 + 1 is no float: int64 -> float rounds it first, then to bfloat16 (0x4b80 = 2^24).
    const Tensor big = Tensor::from_vector(std::vector<int64_t>{16777217, -3}, {2});
    CHECK(bits_of(ops::cast(big, kBFloat16)) == std::vector<uint16_t>{0x4b80u, 0xc040u});
    // A double rounds to float first: 1.00390625000001 becomes the tie 1.00390625, then 1.0.
    const Tensor d = Tensor::from_vector(std::vector<double>{1.00390625000001}, {1});
    CHECK(bits_of(ops::cast(d, kBFloat16)) == std::vector<uint16_t>{0x3f80u});
    // Out: -2.5 -> int32 truncates to -2; 300.7 is stored as 300.0; uint8 wraps as from float.
    const Tensor h =
        ops::cast(Tensor::from_vector(std::vector<float>{-2.5f, 300.7f}, {2}), kBFloat16);
    CHECK(ops::cast(h, kInt32).to_vector<int32_t>() == std::vector<int32_t>{-2, 300});
    CHECK(ops::cast(h, kFloat64).to_vector<double>() == std::vector<double>{-2.5, 300.0});
    CHECK(ops::cast(h, kUInt8).to_vector<uint8_t>() == std::vector<uint8_t>{254, 44});
    CHECK(Tensor::full({}, -2.5, kBFloat16).item<float>() == -2.5f);  // item converts too
  }

  TEST_CASE("strided and broadcast copies, clone, fill, zeros") {
    const Tensor x = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
    Tensor h = Tensor::empty({3, 2}, kBFloat16);
    Tensor view = h.transpose(0, 1);
    ops::copy_(view, x);  // into a strided bfloat16 view
    CHECK(ops::cast(h, kFloat32).to_vector<float>() == std::vector<float>{1, 4, 2, 5, 3, 6});
    const Tensor again = view.contiguous();  // bfloat16 -> bfloat16, strided source
    CHECK(again.dtype() == kBFloat16);
    CHECK(ops::cast(again, kFloat32).to_vector<float>() == std::vector<float>{1, 2, 3, 4, 5, 6});
    Tensor row = Tensor::empty({2, 3}, kBFloat16);
    ops::copy_(row, Tensor::from_vector(std::vector<float>{7, 8, 9}, {3}));  // broadcast
    CHECK(ops::cast(row, kFloat32).to_vector<float>() == std::vector<float>{7, 8, 9, 7, 8, 9});
    const Tensor third = Tensor::full({3}, 1.0 / 3.0, kBFloat16);
    CHECK(bits_of(third) == std::vector<uint16_t>(3, 0x3eabu));  // 0.333984375
    CHECK(bits_of(Tensor::zeros({2}, kBFloat16)) == std::vector<uint16_t>{0, 0});
  }

  TEST_CASE("ops that do not compute on bfloat16 say so; all_finite reads it") {
    const Tensor h = Tensor::zeros({4}, kBFloat16);
    const char* hint = "cast to float32 for this op";  // relu and add compute: bf16_compute_test
    CHECK_THROWS_WITH_AS(ops::mul(h, h), doctest::Contains(hint), Error);
    CHECK_THROWS_WITH_AS(ops::tanh(h), doctest::Contains(hint), Error);
    CHECK_THROWS_WITH_AS(ops::eq(h, h), doctest::Contains("eq: dtype bfloat16"), Error);
    Tensor grad = Tensor::zeros({4}, kBFloat16);
    CHECK_THROWS_AS(grad.set_requires_grad(true), Error);
    CHECK(ops::all_finite(h));
    const Tensor inf =
        ops::cast(Tensor::from_vector(std::vector<float>{0, INFINITY}, {2}), kBFloat16);
    CHECK_FALSE(ops::all_finite(inf));
    CHECK(parse_dtype("bf16") == kBFloat16);
    CHECK(std::string(dtype_name(kBFloat16)) == "bfloat16");
  }

  TEST_CASE("safetensors BF16, and a BF16 state dict loads into a float32 model") {
    namespace fs = std::filesystem;
    const fs::path dir = fs::temp_directory_path() / ("bf16_storage_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    const std::string path = (dir / "w.safetensors").string();
    Generator gen(3);
    Linear layer(3, 2, gen);
    std::vector<std::pair<std::string, Tensor>> halves;
    for (const auto& [name, value] : layer.state_dict()) {
      halves.emplace_back(name, ops::cast(ops::add(value, Tensor::scalar(0.01)), kBFloat16));
    }
    safetensors::save(path, halves, {});
    std::string header(200, '\0');
    {
      std::FILE* f = std::fopen(path.c_str(), "rb");
      REQUIRE(f != nullptr);
      header.resize(std::fread(header.data(), 1, header.size(), f));
      std::fclose(f);
    }
    CHECK(header.find("\"dtype\":\"BF16\"") != std::string::npos);
    const safetensors::Contents back = safetensors::load(path);
    StateDict state;
    for (const auto& [name, value] : back.tensors) {
      CHECK(value.dtype() == kBFloat16);
      state.insert(name, value);
    }
    layer.load_state_dict(state);
    for (const auto& item : layer.state_dict()) {  // not a binding: CAPTURE takes it in a lambda
      const Tensor& value = item.second;
      CAPTURE(item.first);
      CHECK(value.dtype() == kFloat32);  // widened exactly
      CHECK(value.to_vector<float>() ==
            ops::cast(back.at(item.first), kFloat32).to_vector<float>());
    }
    // Any other dtype change is still refused.
    StateDict ints;
    for (const auto& [name, value] : layer.state_dict())
      ints.insert(name, ops::cast(value, kInt32));
    CHECK_THROWS_WITH_AS(layer.load_state_dict(ints),
                         doctest::Contains("is int32 in the state dict"), Error);
    fs::remove_all(dir);
  }
}
