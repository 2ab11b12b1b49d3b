#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include <echelon/base/error.h>
#include <echelon/base/json.h>

using echelon::Error;
namespace json = echelon::json;

namespace {

uint64_t bits(double d) {
  uint64_t b = 0;
  std::memcpy(&b, &d, sizeof b);
  return b;
}

// Writes `d` inside an object (as a file would hold it), reads it back and compares the bits.
void check_bit_exact(double d) {
  const json::Value doc = json::Value::object().set("x", d);
  for (const int indent : {-1, 2}) {
    const json::Value back = json::parse(doc.dump(indent));
    const json::Value& x = back.at("x");
    REQUIRE(x.kind() == json::Kind::Double);
    REQUIRE(bits(x.as_double()) == bits(d));
  }
}

}  // namespace

TEST_SUITE("json") {
  TEST_CASE("round trip of every kind keeps order and values") {
    json::Value v = json::Value::object();
    v.set("zeta", 1).set("alpha", -3.25).set("flag", true).set("none", nullptr);
    v.set("text", "quote \" backslash \\ newline \n tab \t ctrl \x01 utf8 \xc3\xa9");
    json::Value list = json::Value::array();
    list.push(7).push(0.1).push("x").push(json::Value::object().set("k", json::Value::array()));
    v.set("list", list);
    v.set("big", int64_t{9007199254740993});  // 2^53 + 1: must survive as an integer

    for (const int indent : {-1, 2}) {
      const json::Value back = json::parse(v.dump(indent));
      CHECK(back == v);
      CHECK(back.as_object().front().first == "zeta");  // insertion order kept
      CHECK(back.at("big").as_int() == 9007199254740993);
      CHECK(back.at("list").as_array()[1].as_double() == 0.1);
    }
    CHECK(v.dump() ==
          "{\"zeta\":1,\"alpha\":-3.25,\"flag\":true,\"none\":null,\"text\":\"quote \\\" backslash "
          "\\\\ newline \\n tab \\t ctrl \\u0001 utf8 \xc3\xa9\",\"list\":[7,0.1,\"x\",{\"k\":[]}],"
          "\"big\":9007199254740993}");
    CHECK(json::Value::object().set("a", json::Value::array().push(1)).dump(2) ==
          "{\n  \"a\": [\n    1\n  ]\n}");
  }

  TEST_CASE("doubles re-read bit-exactly: random bit patterns, denormals, edge values") {
    using limits = std::numeric_limits<double>;
    for (const double d : {0.1,
                           1e300,
                           -1e300,
                           1.0,
                           -0.0,
                           0.0,
                           3.0e-310,
                           0.30000000000000004,
                           123456.789,
                           limits::denorm_min(),
                           -limits::denorm_min(),
                           3 * limits::denorm_min(),
                           limits::min() - limits::denorm_min(),
                           limits::min(),
                           limits::max(),
                           limits::lowest(),
                           limits::epsilon(),
                           1e21,
                           1e22,
                           9007199254740993.0,
                           1.0 / 3.0})
      check_bit_exact(d);
    std::mt19937_64 rng(20260101);
    for (int i = 0; i < 20000; ++i) {
      double d = 0;
      const uint64_t pattern = rng();
      std::memcpy(&d, &pattern, sizeof d);
      if (!std::isfinite(d)) continue;
      check_bit_exact(d);
      // Denormals: the exponent bits cleared.
      const uint64_t denormal = pattern & 0x800FFFFFFFFFFFFFull;
      std::memcpy(&d, &denormal, sizeof d);
      check_bit_exact(d);
    }
    CHECK(json::Value(2.0).dump() == "2.0");  // stays a double when read back
    CHECK(json::parse("2.0").kind() == json::Kind::Double);
  }

  TEST_CASE("non-finite doubles are written as strings that read back as doubles") {
    using limits = std::numeric_limits<double>;
    const json::Value v = json::Value::object()
                              .set("nan", limits::quiet_NaN())
                              .set("inf", limits::infinity())
                              .set("ninf", -limits::infinity());
    CHECK(v.dump() == R"({"nan":"NaN","inf":"Infinity","ninf":"-Infinity"})");
    const json::Value back = json::parse(v.dump(), "checkpoint");
    CHECK(std::isnan(back.at("nan").as_double()));
    CHECK(back.at("inf").as_double() == limits::infinity());
    CHECK(back.at("ninf").as_double() == -limits::infinity());
    CHECK_THROWS_WITH_AS(json::parse(R"({"x": "nan"})", "c.json").at("x").as_double(),
                         doctest::Contains("c.json: key 'x': expected a number, got string"),
                         Error);
  }

  TEST_CASE("int64 values are exact, larger integers become doubles") {
    using limits = std::numeric_limits<int64_t>;
    for (const int64_t i : {limits::max(), limits::min(), int64_t{-9007199254740993}, int64_t{0}}) {
      const json::Value back = json::parse(json::Value::array().push(i).dump());
      CHECK(back.as_array()[0].is_int());
      CHECK(back.as_array()[0].as_int() == i);
    }
    const json::Value big = json::parse("18446744073709551615");  // 2^64 - 1
    CHECK(big.kind() == json::Kind::Double);
    CHECK(big.as_double() == 18446744073709551615.0);
    CHECK_THROWS_AS(big.as_int(), Error);
    CHECK_THROWS_AS(json::parse("1e400"), Error);  // overflows a double
  }

  TEST_CASE("parser handles escapes and surrogate pairs") {
    const json::Value v = json::parse(R"( {"a": "\u00e9\ud83d\ude00\/\b\f", "n": -12e-1} )");
    CHECK(v.at("a").as_string() == "\xc3\xa9\xf0\x9f\x98\x80/\b\f");
    CHECK(v.at("n").as_double() == doctest::Approx(-1.2));
  }

  TEST_CASE("malformed input throws naming the source and the position") {
    const char* bad[] = {
        "",         "{",   "{\"a\":}", "[1,]",    "{\"a\" 1}",   "01",          "1.",
        "-",        "tru", "\"abc",    "\"\\x\"", "\"\\ud800\"", "[1] 2",       "{\"a\":1,\"a\":2}",
        "\"\x01\"", "1e",  "{1:2}",    "NaN",     "\"\xff\"",    "\"\xc0\xaf\""};
    for (const char* text : bad) {
      CAPTURE(text);
      CHECK_THROWS_WITH_AS(json::parse(text, "t.json"), doctest::Contains("t.json: "), Error);
    }
    CHECK_THROWS_WITH_AS(
        json::parse("[1, 2, x]", "file.json"),
        doctest::Contains("file.json: invalid JSON: parse error at line 1, column 8"), Error);
    CHECK_THROWS_WITH_AS(json::parse(R"({"s": {"a": 1, "a": 2}})", "d.json"),
                         doctest::Contains("d.json: key 's'.'a': duplicate key"), Error);
    // A huge bad token does not make a huge message.
    const std::string long_string = "\"" + std::string(100000, 'x');
    try {
      json::parse(long_string, "big.json");
      FAIL("no throw");
    } catch (const Error& e) {
      CHECK(std::strlen(e.what()) < 400);
    }
  }

  TEST_CASE("deep nesting is rejected instead of overflowing the stack") {
    const std::string deep(100000, '[');
    CHECK_THROWS_WITH_AS(json::parse(deep), doctest::Contains("nesting deeper than 256"), Error);
    std::string ok;
    for (int i = 0; i < 200; ++i) ok += "[";
    for (int i = 0; i < 200; ++i) ok += "]";
    CHECK(json::parse(ok).size() == 1);
  }

  TEST_CASE("accessor errors name the file, the key path and the kinds") {
    const json::Value v =
        json::parse(R"({"lr": "x", "i": 4.0, "stages": [{"n": 1.5}, 2]})", "config.json");
    CHECK_THROWS_WITH_AS(v.at("lr").as_double(),
                         doctest::Contains("config.json: key 'lr': expected a number, got string"),
                         Error);
    CHECK(v.at("i").as_int() == 4);
    const json::Array& stages = v.at("stages").as_array();
    CHECK_THROWS_WITH_AS(stages[0].at("n").as_int(),
                         doctest::Contains("config.json: key 'stages'[0].'n': expected an integer, "
                                           "got 1.5"),
                         Error);
    CHECK_THROWS_WITH_AS(stages[0].at("m"),
                         doctest::Contains("config.json: key 'stages'[0]: missing key 'm'"), Error);
    CHECK_THROWS_WITH_AS(stages[1].as_string(),
                         doctest::Contains("key 'stages'[1]: expected a string, got integer"),
                         Error);
    CHECK(v.find("missing") == nullptr);
    // A copied subtree keeps its origin; a value built in code has none.
    const json::Value copy = v.at("stages");
    CHECK_THROWS_WITH_AS(copy.as_object(),
                         doctest::Contains("config.json: key 'stages': expected an object"), Error);
    CHECK_THROWS_WITH_AS(json::parse(R"([1, "a"])", "x.json").as_array()[1].as_int(),
                         doctest::Contains("x.json: element [1]: expected an integer"), Error);
    CHECK_THROWS_WITH_AS(json::Value("s").as_bool(),
                         doctest::Contains("json: expected a bool, got string"), Error);
    // Where a value came from does not take part in comparisons.
    CHECK(json::parse("[1]", "a.json") == json::parse("[1]", "b.json"));
  }

  TEST_CASE("strings that are not UTF-8 are refused when written, not written unreadable") {
    CHECK_THROWS_WITH_AS(json::Value::object().set("path", "caf\xff noir").dump(),
                         doctest::Contains("json: cannot write as JSON: invalid UTF-8 byte at "
                                           "index 3: 0xFF"),
                         Error);
  }

  TEST_CASE("parse_file names the file") {
    CHECK_THROWS_WITH_AS(json::parse_file("/nonexistent/run/config.json"),
                         doctest::Contains("/nonexistent/run/config.json: cannot open"), Error);
  }
}
