// The JSON values of our own files (config.json, metrics.jsonl, summary.json, safetensors headers,
// checkpoint metadata, Chrome traces). nlohmann-json reads and writes the text; this small value
// type is what the code builds and reads, so call sites need no third-party header. Objects keep
// insertion order so the files we write read in a stable, human-friendly order.
//
// A value parsed from a file remembers where it came from, so a typed accessor that fails names
// the file and the key path: "run/config.json: key 'lr': expected a number, got string".
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace echelon::json {

class Value;
using Array = std::vector<Value>;
// Ordered key/value pairs; keys are unique (set() replaces, the parser rejects duplicates).
using Object = std::vector<std::pair<std::string, Value>>;

enum class Kind : uint8_t { Null, Bool, Int, Double, String, Array, Object };

// Where a parsed value sits: the source (a file) and its key path. Defined in json.cpp.
struct Origin;

class Value {
 public:
  Value() = default;  // null
  Value(std::nullptr_t) {}
  Value(bool b) : data_(b) {}
  Value(int i) : data_(static_cast<int64_t>(i)) {}
  Value(int64_t i) : data_(i) {}
  Value(uint64_t i) : data_(static_cast<int64_t>(i)) {}
  Value(double d) : data_(d) {}
  Value(const char* s) : data_(std::string(s)) {}
  Value(std::string s) : data_(std::move(s)) {}
  Value(Array a) : data_(std::move(a)) {}
  Value(Object o) : data_(std::move(o)) {}

  static Value object() { return Value(Object{}); }
  static Value array() { return Value(Array{}); }

  Kind kind() const { return static_cast<Kind>(data_.index()); }
  bool is_null() const { return kind() == Kind::Null; }
  bool is_bool() const { return kind() == Kind::Bool; }
  bool is_number() const { return kind() == Kind::Int || kind() == Kind::Double; }
  bool is_int() const { return kind() == Kind::Int; }
  bool is_string() const { return kind() == Kind::String; }
  bool is_array() const { return kind() == Kind::Array; }
  bool is_object() const { return kind() == Kind::Object; }

  // Typed accessors throw echelon::Error naming the source and key path (when parsed), the
  // expected and the actual kind.
  bool as_bool() const;
  int64_t as_int() const;  // an Int, or a Double with an exact integer value
  // Any number, or one of the strings "NaN", "Infinity", "-Infinity" that dump() writes for
  // non-finite doubles (JSON has no literal for them).
  double as_double() const;
  const std::string& as_string() const;
  const Array& as_array() const;
  Array& as_array();
  const Object& as_object() const;
  Object& as_object();

  // Object access. find() returns nullptr when absent; at() throws naming the key.
  const Value* find(const std::string& key) const;
  const Value& at(const std::string& key) const;
  bool contains(const std::string& key) const { return find(key) != nullptr; }
  // Inserts or replaces; returns *this for chaining: v.set("a", 1).set("b", "x").
  Value& set(const std::string& key, Value value);
  // Array append.
  Value& push(Value value);
  size_t size() const;  // elements of an array or members of an object

  // Compares contents only (where a value was parsed from does not matter).
  bool operator==(const Value& other) const { return data_ == other.data_; }

  // Compact single-line text (indent < 0) or pretty-printed with `indent` spaces per level.
  // Doubles are written as the shortest text that reads back bit-exactly; non-finite ones as the
  // strings "NaN", "Infinity", "-Infinity" (as_double() reads them back). Strings must be valid
  // UTF-8 (otherwise the file could not be read back): invalid ones throw.
  std::string dump(int indent = -1) const;

  // "file.json: key 'a'[2].'b'" for a parsed value, "json" for one built in code.
  std::string where() const;

 private:
  friend class Builder;  // the parser attaches origins
  std::variant<std::nullptr_t, bool, int64_t, double, std::string, Array, Object> data_;
  std::shared_ptr<const Origin> origin_;
};

const char* kind_name(Kind kind);

// Parses exactly one JSON value (surrounding whitespace allowed). Throws echelon::Error naming
// `what` (a file) and the line and column; duplicate keys and nesting deeper than 256 levels are
// errors too. The values remember `what` and their key path for later accessor errors.
Value parse(const std::string& text, const std::string& what = "json");

// Reads and parses a whole file; errors name the file.
Value parse_file(const std::string& path);

}  // namespace echelon::json
