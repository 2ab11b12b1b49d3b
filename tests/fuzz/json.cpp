// The JSON reader of config.json, metrics.jsonl, summary.json and checkpoint metadata
// (json::parse). Beyond the contract, a parsed value must write back (dump) and read back equal.
#include "fuzz_common.h"

#include <echelon/base/json.h>

namespace {

// Touches every value through every typed accessor the readers use (config.json, metadata,
// metrics): the right kind returns, every other kind throws echelon::Error naming the source.
void walk(const echelon::json::Value& v) {
  namespace json = echelon::json;
  namespace fuzz = echelon::fuzz;
  (void)v.where();
  fuzz::expect_parse_or_error("fuzz.json", [&] { (void)v.as_bool(); });
  fuzz::expect_parse_or_error("fuzz.json", [&] { (void)v.as_int(); });
  fuzz::expect_parse_or_error("fuzz.json", [&] { (void)v.as_double(); });
  fuzz::expect_parse_or_error("fuzz.json", [&] { (void)v.as_string(); });
  fuzz::expect_parse_or_error("fuzz.json", [&] { (void)v.size(); });
  fuzz::expect_parse_or_error("fuzz.json", [&] { (void)v.at("\x01missing"); });
  if (v.is_array()) {
    for (const json::Value& item : v.as_array()) walk(item);
  } else if (v.is_object()) {
    for (const auto& [key, item] : v.as_object()) {
      if (v.find(key) != &item || &v.at(key) != &item)
        fuzz::finding("find()/at() do not return the member");
      walk(item);
    }
  } else {
    fuzz::expect_parse_or_error("fuzz.json", [&] { (void)v.as_array(); });
    fuzz::expect_parse_or_error("fuzz.json", [&] { (void)v.as_object(); });
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace fuzz = echelon::fuzz;
  namespace json = echelon::json;
  const std::string text(reinterpret_cast<const char*>(data), size);
  json::Value value;
  bool parsed = false;
  fuzz::expect_parse_or_error("fuzz.json", [&] {
    value = json::parse(text, "fuzz.json");
    parsed = true;
  });
  if (!parsed) return 0;
  walk(value);
  std::string written;
  try {
    written = value.dump();
  } catch (const std::exception& e) {
    fuzz::finding(std::string("a parsed value does not write back: ") + e.what());
  }
  try {
    if (!(json::parse(written, "rewritten") == value))
      fuzz::finding("dump/parse round trip differs");
  } catch (const std::exception& e) {
    fuzz::finding(std::string("written JSON does not read back: ") + e.what());
  }
  return 0;
}
