#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include <echelon/base/error.h>
#include <echelon/base/json.h>

using echelon::Error;
namespace json = echelon::json;

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
  }

  TEST_CASE("doubles print shortest round-trip text and stay doubles") {
    for (const double d : {1.0, -0.0, 3.0e-310, 1e300, 0.30000000000000004, 123456.789}) {
      const json::Value back = json::parse(json::Value(d).dump());
      CHECK(back.kind() == json::Kind::Double);
      CHECK(back.as_double() == d);
    }
    CHECK(json::Value(std::numeric_limits<double>::quiet_NaN()).dump() == "null");
    CHECK(json::Value(2.0).dump() == "2.0");
  }

  TEST_CASE("parser handles escapes and surrogate pairs") {
    const json::Value v = json::parse(R"( {"a": "\u00e9\ud83d\ude00\/\b\f", "n": -12e-1} )");
    CHECK(v.at("a").as_string() == "\xc3\xa9\xf0\x9f\x98\x80/\b\f");
    CHECK(v.at("n").as_double() == doctest::Approx(-1.2));
  }

  TEST_CASE("malformed input throws with the byte offset") {
    const char* bad[] = {
        "",         "{",   "{\"a\":}", "[1,]",    "{\"a\" 1}",   "01",    "1.",
        "-",        "tru", "\"abc",    "\"\\x\"", "\"\\ud800\"", "[1] 2", "{\"a\":1,\"a\":2}",
        "\"\x01\"", "1e",  "{1:2}"};
    for (const char* text : bad) {
      CAPTURE(text);
      CHECK_THROWS_AS(json::parse(text, "t.json"), Error);
    }
    try {
      json::parse("[1, 2, x]", "file.json");
      FAIL("no throw");
    } catch (const Error& e) {
      const std::string message = e.what();
      CHECK(message.find("file.json") != std::string::npos);
      CHECK(message.find("byte 7") != std::string::npos);
    }
  }

  TEST_CASE("deep nesting is rejected instead of overflowing the stack") {
    const std::string deep(100000, '[');
    CHECK_THROWS_AS(json::parse(deep), Error);
  }

  TEST_CASE("typed accessors name the wrong kind") {
    const json::Value v = json::parse(R"({"s": "x", "d": 2.5, "i": 4.0})");
    CHECK_THROWS_WITH_AS(v.at("s").as_int(), doctest::Contains("expected integer, got string"),
                         Error);
    CHECK_THROWS_AS(v.at("d").as_int(), Error);
    CHECK(v.at("i").as_int() == 4);
    CHECK_THROWS_WITH_AS(v.at("missing"), doctest::Contains("missing"), Error);
    CHECK(v.find("missing") == nullptr);
  }
}
