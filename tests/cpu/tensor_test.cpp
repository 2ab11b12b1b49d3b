// Tensor core: factories, metadata, views and strides, copies, casts, dtype/device/shape helpers.
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <future>
#include <string>
#include <vector>

#include <echelon/tensor/ops.h>
#include <echelon/tensor/tensor.h>

using namespace echelon;

namespace {
// Random float64 values in [-1, 1), shape given; deterministic per seed.
Tensor random_tensor(const Shape& shape, uint64_t seed, DType dtype = kFloat64) {
  Generator gen(seed);
  return ops::add(ops::mul(ops::rand(shape, gen, dtype), 2.0), -1.0);
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}
}  // namespace

TEST_SUITE("tensor") {
  TEST_CASE("factories fill values and report metadata") {
    const Tensor f = Tensor::full({3, 5}, 2.5, kFloat32);
    CHECK(f.shape() == Shape{3, 5});
    CHECK(f.strides() == Strides{5, 1});
    CHECK(f.numel() == 15);
    CHECK(f.nbytes() == 60);
    CHECK(f.is_contiguous());
    for (float v : f.to_vector<float>()) CHECK(v == 2.5f);
    for (int64_t v : Tensor::ones({7}, kInt64).to_vector<int64_t>()) CHECK(v == 1);
    for (double v : Tensor::zeros({2, 3, 1}, kFloat64).to_vector<double>()) CHECK(v == 0.0);
    const Tensor s = Tensor::scalar(-4.25, kFloat64);
    CHECK(s.dim() == 0);
    CHECK(s.numel() == 1);
    CHECK(s.item<double>() == -4.25);
    CHECK(s.describe() == "float64[] on cpu");
    CHECK(f.describe() == "float32[3, 5] on cpu");
  }

  TEST_CASE("from_vector round-trips every dtype and checks the element count") {
    const std::vector<int32_t> ints = {3, -1, 7, 9, 11, -13};
    const Tensor t = Tensor::from_vector(ints, {2, 3});
    CHECK(t.dtype() == kInt32);
    CHECK(t.to_vector<int32_t>() == ints);
    CHECK(t.to_vector<double>()[1] == -1.0);  // to_vector casts
    const std::vector<uint8_t> bytes = {0, 255, 17};
    CHECK(Tensor::from_vector(bytes, {3}).to_vector<uint8_t>() == bytes);
    CHECK_THROWS_WITH_AS(Tensor::from_vector(ints, {4, 2}),
                         doctest::Contains("do not fill shape [4, 2]"), Error);
  }

  TEST_CASE("cpu storage is 64-byte aligned") {
    for (int64_t n : {1, 3, 17, 1001}) {
      const Tensor t = Tensor::empty({n}, kUInt8);
      CHECK(reinterpret_cast<uintptr_t>(t.raw_data()) % 64 == 0);
    }
  }

  TEST_CASE("view, reshape and flatten") {
    const Tensor x = random_tensor({4, 6}, 1);
    const Tensor v = x.view({3, -1, 2});
    CHECK(v.shape() == Shape{3, 4, 2});
    CHECK(v.storage() == x.storage());
    CHECK(v.to_vector<double>() == x.to_vector<double>());
    CHECK(x.flatten().shape() == Shape{24});
    CHECK(random_tensor({2, 3, 5, 7}, 2).flatten(1, 2).shape() == Shape{2, 15, 7});
    const Tensor t = x.transpose(0, 1);
    CHECK_FALSE(t.is_contiguous());
    CHECK_THROWS_WITH_AS(t.view({24}), doctest::Contains("not contiguous"), Error);
    const Tensor r = t.reshape({24});
    CHECK(r.storage() != x.storage());
    const auto xv = x.to_vector<double>();
    const auto rv = r.to_vector<double>();
    for (int64_t i = 0; i < 6; ++i)
      for (int64_t j = 0; j < 4; ++j) CHECK(rv[i * 4 + j] == xv[j * 6 + i]);
    CHECK_THROWS_WITH_AS(x.view({5, -1}), doctest::Contains("invalid for a tensor of shape [4, 6]"),
                         Error);
  }

  TEST_CASE("slice, select, narrow read the right elements") {
    const Tensor x = random_tensor({5, 7}, 3);
    const auto xv = x.to_vector<double>();
    const Tensor s = x.slice(1, 1, 7, 2);  // columns 1, 3, 5
    CHECK(s.shape() == Shape{5, 3});
    CHECK(s.strides() == Strides{7, 2});
    const auto sv = s.to_vector<double>();
    for (int64_t i = 0; i < 5; ++i)
      for (int64_t j = 0; j < 3; ++j) CHECK(sv[i * 3 + j] == xv[i * 7 + 1 + 2 * j]);
    const Tensor row = x.select(0, -2);  // row 3
    CHECK(row.shape() == Shape{7});
    CHECK(row.to_vector<double>() == std::vector<double>(xv.begin() + 21, xv.begin() + 28));
    const Tensor n = x.narrow(0, 2, 2);
    CHECK(n.shape() == Shape{2, 7});
    CHECK(n.to_vector<double>()[0] == xv[14]);
    CHECK(x.slice(0, -100, 100).shape() == Shape{5, 7});  // bounds clip like Python
    CHECK_THROWS_WITH_AS(x.select(1, 7), doctest::Contains("index 7 is out of range"), Error);
    CHECK_THROWS_AS(x.narrow(1, 5, 3), Error);
  }

  TEST_CASE("writes through a view reach the base tensor") {
    Tensor x = Tensor::zeros({4, 5});
    Tensor col = x.select(1, 3);
    ops::fill_(col, 9.0);
    const auto v = x.to_vector<float>();
    for (int64_t i = 0; i < 4; ++i)
      for (int64_t j = 0; j < 5; ++j) CHECK(v[i * 5 + j] == (j == 3 ? 9.0f : 0.0f));
    Tensor block = x.slice(0, 1, 3).slice(1, 0, 2);
    block.copy_(Tensor::from_vector<float>({1, 2}, {2}));  // broadcast over rows
    CHECK(x.to_vector<float>()[5] == 1.0f);
    CHECK(x.to_vector<float>()[11] == 2.0f);
  }

  TEST_CASE("permute, transpose, unsqueeze, squeeze, expand") {
    const Tensor x = random_tensor({2, 3, 4}, 4);
    const auto xv = x.to_vector<double>();
    const Tensor p = x.permute({2, 0, 1});
    CHECK(p.shape() == Shape{4, 2, 3});
    CHECK(p.strides() == Strides{1, 12, 4});
    const Tensor pc = p.contiguous();
    CHECK(pc.is_contiguous());
    const auto pv = pc.to_vector<double>();
    for (int64_t k = 0; k < 4; ++k)
      for (int64_t i = 0; i < 2; ++i)
        for (int64_t j = 0; j < 3; ++j) CHECK(pv[(k * 2 + i) * 3 + j] == xv[(i * 3 + j) * 4 + k]);
    CHECK_THROWS_WITH_AS(x.permute({0, 0, 1}), doctest::Contains("repeated"), Error);
    CHECK(x.unsqueeze(1).shape() == Shape{2, 1, 3, 4});
    CHECK(x.unsqueeze(-1).shape() == Shape{2, 3, 4, 1});
    CHECK(x.unsqueeze(1).squeeze(1).shape() == Shape{2, 3, 4});
    CHECK(x.squeeze(0).shape() == Shape{2, 3, 4});  // size 2: no-op
    const Tensor row = random_tensor({1, 5}, 5);
    const Tensor e = row.expand({3, -1});
    CHECK(e.shape() == Shape{3, 5});
    CHECK(e.strides()[0] == 0);
    const auto ev = e.contiguous().to_vector<double>();
    const auto rv = row.to_vector<double>();
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t j = 0; j < 5; ++j) CHECK(ev[i * 5 + j] == rv[j]);
    CHECK_THROWS_WITH_AS(row.expand({3, 4}), doctest::Contains("cannot expand shape [1, 5]"),
                         Error);
  }

  TEST_CASE("clone is independent; contiguous returns self when possible") {
    Tensor x = random_tensor({3, 3}, 6);
    Tensor c = x.clone();
    CHECK(c.storage() != x.storage());
    ops::fill_(x, 0.5);
    CHECK(c.to_vector<double>()[0] != 0.5);
    CHECK(x.contiguous().same(x));
  }

  TEST_CASE("casts between dtypes truncate like static_cast") {
    const Tensor x = Tensor::from_vector<double>({1.75, -2.5, 3.0, 200.9}, {4});
    CHECK(x.to(kInt32).to_vector<int32_t>() == std::vector<int32_t>{1, -2, 3, 200});
    CHECK(x.to(kUInt8).to_vector<uint8_t>()[3] == 200);
    // Values an integer type cannot hold are defined (kernels/cast.h): truncate into int64, wrap.
    CHECK(x.to(kUInt8).to_vector<uint8_t>()[1] == 254);
    const Tensor odd = Tensor::from_vector<double>({std::nan(""), 1e30, -1e30, 3e9}, {4});
    CHECK(odd.to(kInt64).to_vector<int64_t>() ==
          std::vector<int64_t>{0, INT64_MAX, INT64_MIN, 3000000000});
    CHECK(odd.to(kInt32).to_vector<int32_t>()[3] == static_cast<int32_t>(int64_t{3000000000}));
    CHECK(x.to(kFloat32).to_vector<float>()[0] == 1.75f);
    CHECK(x.to(kFloat64).same(x));
    const Tensor strided = random_tensor({4, 5}, 7).transpose(0, 1).to(kFloat32);
    CHECK(strided.is_contiguous());
    CHECK(strided.to_vector<float>()[1] ==
          static_cast<float>(random_tensor({4, 5}, 7).to_vector<double>()[5]));
  }

  TEST_CASE("cuda tensors cannot exist without a usable device") {
    if (cuda_device_count() > 0) return;
      // A CPU-only build says so; a CUDA build on a machine without a GPU names the missing device.
#if ECHELON_WITH_CUDA
    const char* expected = "does not exist";
#else
    const char* expected = "built without CUDA";
#endif
    CHECK_THROWS_WITH_AS(Tensor::empty({2}, kFloat32, Device::cuda(0)), doctest::Contains(expected),
                         Error);
    CHECK_THROWS_WITH_AS(random_tensor({2}, 1).to(Device::cuda()), doctest::Contains(expected),
                         Error);
    CHECK_FALSE(cuda_available());
#if ECHELON_WITH_CUDA
    CHECK_THROWS_WITH_AS(warm_up_device(Device::cuda(0)).get(), doctest::Contains(expected), Error);
#endif
  }

  TEST_CASE("warming up the CPU has nothing to do: the future is ready at once") {
    std::future<void> warm = warm_up_device(Device::cpu());
    CHECK(warm.wait_for(std::chrono::seconds(0)) == std::future_status::ready);
    warm.get();
  }

  TEST_CASE("dtype, device and shape helpers") {
    CHECK(dtype_size(kFloat64) == 8);
    CHECK(dtype_size(kUInt8) == 1);
    CHECK(parse_dtype("int64") == kInt64);
    CHECK(std::string(dtype_name(kInt32)) == "int32");
    CHECK_THROWS_WITH_AS(parse_dtype("half"), doctest::Contains("'half'"), Error);
    CHECK(Device::parse("cuda:3") == Device::cuda(3));
    CHECK(Device::parse("cpu").is_cpu());
    CHECK(Device::cuda(1).to_string() == "cuda:1");
    CHECK_THROWS_WITH_AS(Device::parse("gpu0"), doctest::Contains("'gpu0'"), Error);
    CHECK_THROWS_AS(Device::parse("cuda:x"), Error);
    CHECK(broadcast_shapes({4, 1, 3}, {5, 1}, "test") == Shape{4, 5, 3});
    CHECK(broadcast_shapes({}, {2, 2}, "test") == Shape{2, 2});
    CHECK_THROWS_WITH_AS(broadcast_shapes({4, 3}, {2, 3}, "myop"),
                         doctest::Contains("myop: shapes [4, 3] and [2, 3]"), Error);
    CHECK(wrap_dim(-1, 3, "t") == 2);
    CHECK_THROWS_WITH_AS(wrap_dim(3, 3, "myop"), doctest::Contains("myop: dim 3 is out of range"),
                         Error);
    CHECK(contiguous_strides({2, 3, 4}) == Strides{12, 4, 1});
    CHECK(shape_numel({2, 0, 4}) == 0);
    const int64_t big = int64_t{1} << 40;
    CHECK_THROWS_WITH_AS(shape_numel({big, big}), doctest::Contains("more elements than int64"),
                         Error);
    CHECK_THROWS_WITH_AS(contiguous_strides({0, big, big}),
                         doctest::Contains("more elements than int64"), Error);
    CHECK_THROWS_WITH_AS(Tensor::empty({int64_t{1} << 61}, kFloat64),
                         doctest::Contains("more bytes than int64"), Error);
    CHECK(shape_str({2, 3}) == "[2, 3]");
    CHECK(std::string(name(UnaryOp::Sigmoid)) == "sigmoid");
    CHECK(std::string(name(BinaryOp::Pow)) == "pow");
    CHECK(std::string(name(ReduceOp::Mean)) == "mean");
  }

  TEST_CASE("empty tensors are valid") {
    const Tensor e = Tensor::zeros({3, 0});
    CHECK(e.numel() == 0);
    CHECK(e.clone().numel() == 0);
    CHECK(e.to_vector<float>().empty());
  }

  TEST_CASE("autograd fields and detach") {
    Tensor x = random_tensor({2, 2}, 8);
    CHECK_FALSE(x.requires_grad());
    x.set_requires_grad(true);
    CHECK(x.requires_grad());
    CHECK(x.is_leaf());
    CHECK_FALSE(x.grad().defined());
    x.set_grad(Tensor::ones({2, 2}, kFloat64));
    CHECK(x.grad().to_vector<double>()[3] == 1.0);
    CHECK_THROWS_WITH_AS(x.set_grad(Tensor::ones({3}, kFloat64)), doctest::Contains("[3]"), Error);
    x.zero_grad();
    CHECK_FALSE(x.grad().defined());
    const Tensor d = x.detach();
    CHECK_FALSE(d.requires_grad());
    CHECK(d.storage() == x.storage());
    Tensor labels = Tensor::zeros({3}, kInt64);
    CHECK_THROWS_WITH_AS(labels.set_requires_grad(true), doctest::Contains("floating-point"),
                         Error);
  }

  TEST_CASE("to_string prints values") {
    const Tensor t = Tensor::from_vector<int64_t>({4, 5, 6}, {3});
    const std::string text = t.to_string();
    CHECK(contains(text, "int64[3] on cpu"));
    CHECK(contains(text, "4, 5, 6"));
    CHECK(contains(Tensor::zeros({100}).to_string(4), "..."));
  }

  TEST_CASE("undefined tensors throw instead of crashing") {
    const Tensor u;
    CHECK_FALSE(u.defined());
    CHECK_THROWS_WITH_AS(u.shape(), doctest::Contains("undefined tensor"), Error);
    CHECK_THROWS_AS(ops::relu(u), Error);
  }
}
