#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include <unistd.h>

#include <echelon/base/error.h>
#include <echelon/base/json.h>
#include <echelon/tensor/ops.h>
#include <echelon/tensor/safetensors.h>

using echelon::Error;
using echelon::Tensor;
namespace fs = std::filesystem;
namespace st = echelon::safetensors;
namespace json = echelon::json;

namespace {

fs::path temp_dir(const std::string& name) {
  const char* root = std::getenv("ECHELON_TEST_TMP");
  fs::path dir = fs::path(root ? root : fs::temp_directory_path().string()) /
                 ("safetensors_test_" + std::to_string(::getpid())) / name;
  fs::create_directories(dir);
  return dir;
}

std::vector<std::pair<std::string, Tensor>> sample_tensors() {
  std::mt19937_64 rng(1234);
  std::normal_distribution<double> normal;
  auto floats = [&](int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = static_cast<float>(normal(rng));
    return v;
  };
  std::vector<double> doubles(7);
  for (double& x : doubles) x = normal(rng);
  std::vector<int64_t> ints = {-5, 3, 1LL << 40, 0, 9};
  std::vector<uint8_t> bytes = {1, 255, 7};
  std::vector<int32_t> int32s = {-7, 11};
  return {{"features.0.weight", Tensor::from_vector(floats(6 * 1 * 5 * 5), {6, 1, 5, 5})},
          {"features.0.bias", Tensor::from_vector(floats(6), {6})},
          {"d", Tensor::from_vector(doubles, {7})},
          {"step", Tensor::from_vector(ints, {5})},
          {"u8", Tensor::from_vector(bytes, {3, 1})},
          {"i32", Tensor::from_vector(int32s, {2})},
          {"bf16", echelon::ops::cast(Tensor::from_vector(floats(6), {2, 3}), echelon::kBFloat16)},
          {"empty", Tensor::empty({0, 3})},
          {"scalar", Tensor::from_vector(std::vector<float>{2.5f}, {})}};
}

uint64_t read_u64_le(const std::string& bytes) {
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t{static_cast<unsigned char>(bytes[i])} << (8 * i);
  return n;
}

std::string with_header(const std::string& header, const std::string& data) {
  std::string out;
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out += static_cast<char>((n >> (8 * i)) & 0xFF);
  return out + header + data;
}

std::string error_of(const std::string& bytes) {
  try {
    st::deserialize(bytes, "ckpt.safetensors");
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

}  // namespace

TEST_SUITE("safetensors") {
  TEST_CASE("round trip keeps names, order, dtypes, shapes, bytes and metadata") {
    const auto tensors = sample_tensors();
    const st::Metadata meta = {{"model", "lenet5"}, {"epoch", "3"}};
    const fs::path path = temp_dir("roundtrip") / "a.safetensors";
    st::save(path.string(), tensors, meta);
    const st::Contents back = st::load(path.string());
    REQUIRE(back.tensors.size() == tensors.size());
    CHECK(back.metadata == meta);
    for (size_t i = 0; i < tensors.size(); ++i) {
      CAPTURE(tensors[i].first);
      const Tensor& a = tensors[i].second;
      const Tensor& b = back.tensors[i].second;
      CHECK(back.tensors[i].first == tensors[i].first);
      CHECK(b.dtype() == a.dtype());
      CHECK(b.shape() == a.shape());
      REQUIRE(b.nbytes() == a.nbytes());
      // Empty tensors may have no storage pointer at all; memcmp must not see a null pointer.
      if (a.nbytes() > 0) CHECK(std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0);
    }
    CHECK(&back.at("d") == back.find("d"));
    CHECK_THROWS_WITH_AS(back.at("nope"), doctest::Contains("no tensor named \"nope\""), Error);
    // Atomic write leaves no temporary file behind.
    int files = 0;
    for (const auto& entry : fs::directory_iterator(path.parent_path())) files += entry.exists();
    CHECK(files == 1);
  }

  TEST_CASE("layout follows the spec: LE length, JSON header, aligned contiguous offsets") {
    const auto tensors = sample_tensors();
    const std::string bytes = st::serialize(tensors, {{"k", "v"}});
    const uint64_t n = read_u64_le(bytes);
    CHECK(n % 8 == 0);
    const json::Value header = json::parse(bytes.substr(8, n));
    CHECK(header.at("__metadata__").at("k").as_string() == "v");
    const json::Value& w = header.at("features.0.weight");
    CHECK(w.at("dtype").as_string() == "F32");
    CHECK(w.at("shape").dump() == "[6,1,5,5]");
    CHECK(header.at("step").at("dtype").as_string() == "I64");
    CHECK(header.at("d").at("dtype").as_string() == "F64");
    CHECK(header.at("u8").at("dtype").as_string() == "U8");
    uint64_t cursor = 0;
    for (const auto& [name, tensor] : tensors) {
      const json::Array& off = header.at(name).at("data_offsets").as_array();
      CHECK(static_cast<uint64_t>(off[0].as_int()) == cursor);
      cursor = static_cast<uint64_t>(off[1].as_int());
      CHECK(cursor - static_cast<uint64_t>(off[0].as_int()) == tensor.nbytes());
      // Little-endian raw data at the stated offset.
      if (tensor.nbytes())
        CHECK(std::memcmp(bytes.data() + 8 + n + off[0].as_int(), tensor.raw_data(),
                          tensor.nbytes()) == 0);
    }
    CHECK(8 + n + cursor == bytes.size());
  }

  TEST_CASE("damaged files give one clear error naming the file and the problem") {
    const std::string good = st::serialize(sample_tensors());
    const uint64_t n = read_u64_le(good);
    const std::string header = good.substr(8, n);
    const std::string data = good.substr(8 + n);

    CHECK(error_of("abc").find("too short") != std::string::npos);
    CHECK(error_of(good.substr(0, good.size() - 3)).find("trailing") == std::string::npos);
    CHECK(error_of(good.substr(0, good.size() - 3)).find("ckpt.safetensors") == 0);
    CHECK(error_of(good.substr(0, 8 + n / 2)).find("runs past the end") != std::string::npos);
    CHECK(error_of(good + "xyz").find("trailing bytes") != std::string::npos);
    CHECK(error_of(with_header("{\"a\": [1,", "")).find("invalid JSON") != std::string::npos);
    CHECK(error_of(with_header("[1, 2]  ", "")).find("expected an object") != std::string::npos);

    const std::string bad_dtype = R"({"w":{"dtype":"F16","shape":[2],"data_offsets":[0,4]}})";
    CHECK(error_of(with_header(bad_dtype, "abcd")).find("unsupported dtype \"F16\"") !=
          std::string::npos);
    const std::string out_of_range = R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})";
    CHECK(error_of(with_header(out_of_range, "abcdefgh")).find("run past the data buffer") !=
          std::string::npos);
    const std::string size_mismatch = R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})";
    CHECK(error_of(with_header(size_mismatch, "abcdefgh")).find("needs 12") != std::string::npos);
    const std::string overlap = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})";
    CHECK(error_of(with_header(overlap, "abcdefgh")).find("overlaps") != std::string::npos);
    const std::string hole = R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}})";
    CHECK(error_of(with_header(hole, "abcd")).find("hole") != std::string::npos);
    const std::string negative = R"({"a":{"dtype":"U8","shape":[-2],"data_offsets":[0,0]}})";
    CHECK(error_of(with_header(negative, "")).find("tensor \"a\": negative dimension") !=
          std::string::npos);
    const std::string missing = R"({"a":{"dtype":"U8","data_offsets":[0,0]}})";
    CHECK(error_of(with_header(missing, "")).find("lacks \"shape\"") != std::string::npos);
    const std::string bad_meta = R"({"__metadata__":{"k":1}})";
    CHECK(error_of(with_header(bad_meta, "")).find("not a string") != std::string::npos);
    // The format requires a UTF-8 header: a stray 0xFF, an overlong form and a lone surrogate are
    // refused; a size written as 1.0 is not a JSON integer.
    for (const std::string name : {"\xff", "\xc0\xaf", "\\ud800"}) {
      CAPTURE(name);
      const std::string text =
          "{\"" + name + R"(":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}})";
      CHECK(error_of(with_header(text, "")) != "<no error>");
    }
    const std::string real_shape = R"({"a":{"dtype":"U8","shape":[1.0],"data_offsets":[0,1]}})";
    CHECK(error_of(with_header(real_shape, "x")).find("JSON integers") != std::string::npos);
    // A header length field of 2^63 must not allocate or crash.
    std::string huge = good;
    huge[7] = static_cast<char>(0x80);
    CHECK(error_of(huge).find("runs past the end") != std::string::npos);

    // Every truncation of a valid file is rejected (never crashes, never half-loads).
    for (size_t cut = 0; cut < good.size(); cut += 37) {
      CAPTURE(cut);
      CHECK_THROWS_AS(st::deserialize(good.substr(0, cut), "x"), Error);
    }
    CHECK(error_of(with_header(header, data)) == "<no error>");
  }

  TEST_CASE("load of a missing file and bad names throw") {
    CHECK_THROWS_WITH_AS(st::load("/nonexistent/x.safetensors"),
                         doctest::Contains("/nonexistent/x.safetensors"), Error);
    const Tensor t = Tensor::zeros({2});
    CHECK_THROWS_AS(st::serialize({{"a", t}, {"a", t}}), Error);
    CHECK_THROWS_AS(st::serialize({{"__metadata__", t}}), Error);
    CHECK_THROWS_AS(st::save("/nonexistent/dir/x.safetensors", {{"a", t}}), Error);
  }
}
