#include <echelon/base/json.h>

#include <cmath>
#include <limits>

#include <nlohmann/json.hpp>

#include <echelon/base/error.h>
#include <echelon/base/file.h>

namespace echelon::json {

// A parsed value's place: the root holds the source name, every other node its parent and its
// key (in an object) or index (in an array).
struct Origin {
  std::shared_ptr<const Origin> parent;
  std::string source;  // root only
  std::string key;
  int64_t index = -1;  // >= 0 for an array element
};

const char* kind_name(Kind kind) {
  switch (kind) {
    case Kind::Null:
      return "null";
    case Kind::Bool:
      return "bool";
    case Kind::Int:
      return "integer";
    case Kind::Double:
      return "number";
    case Kind::String:
      return "string";
    case Kind::Array:
      return "array";
    case Kind::Object:
      return "object";
  }
  return "?";
}

namespace {

// Non-finite doubles have no JSON literal; these strings stand for them (Python's spelling).
constexpr const char* kNaN = "NaN";
constexpr const char* kInf = "Infinity";
constexpr const char* kNegInf = "-Infinity";

std::string path_of(const Origin& origin) {
  if (!origin.parent) return "";
  std::string path = path_of(*origin.parent);
  if (origin.index >= 0) return path + "[" + std::to_string(origin.index) + "]";
  return path + (path.empty() ? "'" : ".'") + origin.key + "'";
}

// "file.json", "file.json: key 'a'[2].'b'" or "file.json: element [3]"; "json" without origin.
std::string describe(const Origin* origin) {
  if (!origin) return "json";
  const Origin* root = origin;
  while (root->parent) root = root->parent.get();
  const std::string path = path_of(*origin);
  if (path.empty()) return root->source;
  return root->source + (path.front() == '[' ? ": element " : ": key ") + path;
}

// nlohmann's what() is "[json.exception.parse_error.101] parse error at line 1, column 8: ...":
// keep the human part, and bound it (the "last read" token of a hostile file can be megabytes).
std::string library_message(const std::exception& e) {
  std::string message = e.what();
  if (const size_t start = message.find("] "); start != std::string::npos)
    message.erase(0, start + 2);
  if (message.size() > 240) message = message.substr(0, 240) + "...";
  return message;
}

}  // namespace

std::string Value::where() const {
  return describe(origin_.get());
}

bool Value::as_bool() const {
  if (!is_bool()) ECH_FAIL(where(), ": expected a bool, got ", kind_name(kind()));
  return std::get<bool>(data_);
}

int64_t Value::as_int() const {
  if (is_int()) return std::get<int64_t>(data_);
  if (kind() == Kind::Double) {
    const double d = std::get<double>(data_);
    // 2^63 bounds the int64 range; beyond it the cast is undefined.
    if (std::nearbyint(d) == d && std::fabs(d) < 9.2e18) return static_cast<int64_t>(d);
    ECH_FAIL(where(), ": expected an integer, got ", d);
  }
  ECH_FAIL(where(), ": expected an integer, got ", kind_name(kind()));
}

double Value::as_double() const {
  if (is_int()) return static_cast<double>(std::get<int64_t>(data_));
  if (kind() == Kind::Double) return std::get<double>(data_);
  if (is_string()) {
    const std::string& s = std::get<std::string>(data_);
    if (s == kNaN) return std::numeric_limits<double>::quiet_NaN();
    if (s == kInf) return std::numeric_limits<double>::infinity();
    if (s == kNegInf) return -std::numeric_limits<double>::infinity();
  }
  ECH_FAIL(where(), ": expected a number, got ", kind_name(kind()));
}

const std::string& Value::as_string() const {
  if (!is_string()) ECH_FAIL(where(), ": expected a string, got ", kind_name(kind()));
  return std::get<std::string>(data_);
}
const Array& Value::as_array() const {
  if (!is_array()) ECH_FAIL(where(), ": expected an array, got ", kind_name(kind()));
  return std::get<Array>(data_);
}
Array& Value::as_array() {
  if (!is_array()) ECH_FAIL(where(), ": expected an array, got ", kind_name(kind()));
  return std::get<Array>(data_);
}
const Object& Value::as_object() const {
  if (!is_object()) ECH_FAIL(where(), ": expected an object, got ", kind_name(kind()));
  return std::get<Object>(data_);
}
Object& Value::as_object() {
  if (!is_object()) ECH_FAIL(where(), ": expected an object, got ", kind_name(kind()));
  return std::get<Object>(data_);
}

const Value* Value::find(const std::string& key) const {
  for (const auto& [k, v] : as_object())
    if (k == key) return &v;
  return nullptr;
}

const Value& Value::at(const std::string& key) const {
  const Value* v = find(key);
  ECH_CHECK(v != nullptr, where(), ": missing key '", key, "'");
  return *v;
}

Value& Value::set(const std::string& key, Value value) {
  Object& members = as_object();
  for (auto& [k, v] : members) {
    if (k == key) {
      v = std::move(value);
      return *this;
    }
  }
  members.emplace_back(key, std::move(value));
  return *this;
}

Value& Value::push(Value value) {
  as_array().push_back(std::move(value));
  return *this;
}

size_t Value::size() const {
  if (is_array()) return as_array().size();
  if (is_object()) return as_object().size();
  ECH_FAIL(where(), ": expected an array or object, got ", kind_name(kind()));
}

// ---- writing: our tree -> nlohmann's, which prints it ---------------------------------------

namespace {

nlohmann::ordered_json to_library(const Value& v) {
  switch (v.kind()) {
    case Kind::Null:
      return nullptr;
    case Kind::Bool:
      return v.as_bool();
    case Kind::Int:
      return v.as_int();
    case Kind::Double: {
      const double d = v.as_double();
      if (std::isfinite(d)) return d;
      return std::isnan(d) ? kNaN : d > 0 ? kInf : kNegInf;
    }
    case Kind::String:
      return v.as_string();
    case Kind::Array: {
      nlohmann::ordered_json out = nlohmann::ordered_json::array();
      for (const Value& item : v.as_array()) out.push_back(to_library(item));
      return out;
    }
    case Kind::Object: {
      nlohmann::ordered_json out = nlohmann::ordered_json::object();
      for (const auto& [key, item] : v.as_object()) out.emplace(key, to_library(item));
      return out;
    }
  }
  return nullptr;
}

}  // namespace

std::string Value::dump(int indent) const {
  try {
    // nlohmann prints doubles as the shortest text that round-trips (Grisu2), always with a '.'
    // or an exponent, so a double stays a double when read back.
    return to_library(*this).dump(indent, ' ', /*ensure_ascii=*/false,
                                  nlohmann::ordered_json::error_handler_t::strict);
  } catch (const nlohmann::ordered_json::exception& e) {
    ECH_FAIL(where(), ": cannot write as JSON: ", library_message(e));
  }
}

// ---- reading: nlohmann's SAX parser builds our tree directly --------------------------------

// SAX handler (the friend of Value that attaches origins). Containers under construction live on
// a stack and are moved into their parent when they end, so no pointer into a growing vector is
// ever held.
class Builder final : public nlohmann::json_sax<nlohmann::json> {
 public:
  explicit Builder(const std::string& what)
      : root_origin_(std::make_shared<const Origin>(Origin{nullptr, what, "", -1})) {}

  Value take() { return std::move(root_); }

  bool null() override { return add_scalar(Value()); }
  bool boolean(bool b) override { return add_scalar(Value(b)); }
  bool number_integer(number_integer_t i) override { return add_scalar(Value(int64_t{i})); }
  bool number_unsigned(number_unsigned_t u) override {
    // Above int64: keep it as a double, as most JSON readers do.
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      return add_scalar(Value(static_cast<double>(u)));
    return add_scalar(Value(static_cast<int64_t>(u)));
  }
  bool number_float(number_float_t d, const string_t& /*text*/) override {
    return add_scalar(Value(d));
  }
  bool string(string_t& s) override { return add_scalar(Value(std::move(s))); }
  bool binary(binary_t& /*bytes*/) override {  // only CBOR and friends have binary values
    ECH_FAIL(root_origin_->source, ": binary values are not JSON");
  }
  bool start_object(std::size_t /*elements*/) override { return open(Value::object()); }
  bool key(string_t& k) override {
    for (const auto& member : std::get<Object>(stack_.back().data_)) {
      if (member.first == k) {
        const Origin duplicate{stack_.back().origin_, "", k, -1};
        ECH_FAIL(describe(&duplicate), ": duplicate key");
      }
    }
    key_ = std::move(k);
    return true;
  }
  bool end_object() override { return close(); }
  bool start_array(std::size_t /*elements*/) override { return open(Value::array()); }
  bool end_array() override { return close(); }
  bool parse_error(std::size_t /*position*/, const std::string& /*last_token*/,
                   const nlohmann::detail::exception& e) override {
    ECH_FAIL(root_origin_->source, ": invalid JSON: ", library_message(e));
  }

 private:
  // Deeper nesting than any of our files needs; bounds the recursion of dump() and of the
  // destructor on hostile input.
  static constexpr size_t kMaxDepth = 256;

  // The origin of the next value: the root, the next element of an array, or the member of an
  // object named by the last key.
  std::shared_ptr<const Origin> next_origin() const {
    if (stack_.empty()) return root_origin_;
    const Value& parent = stack_.back();
    if (parent.is_array())
      return std::make_shared<const Origin>(
          Origin{parent.origin_, "", "", static_cast<int64_t>(parent.as_array().size())});
    return std::make_shared<const Origin>(Origin{parent.origin_, "", key_, -1});
  }

  // Puts a finished value where it belongs: the root, or the innermost open container.
  bool place(Value v) {
    if (stack_.empty())
      root_ = std::move(v);
    else if (stack_.back().is_array())
      std::get<Array>(stack_.back().data_).push_back(std::move(v));
    else
      std::get<Object>(stack_.back().data_).emplace_back(std::move(key_), std::move(v));
    return true;
  }

  bool add_scalar(Value v) {
    v.origin_ = next_origin();
    return place(std::move(v));
  }

  bool open(Value container) {
    if (stack_.size() >= kMaxDepth)
      ECH_FAIL(root_origin_->source, ": invalid JSON: nesting deeper than ", kMaxDepth, " levels");
    container.origin_ = next_origin();
    stack_.push_back(std::move(container));
    keys_.push_back(std::move(key_));  // the key this container will have in its parent
    return true;
  }

  bool close() {
    Value done = std::move(stack_.back());
    stack_.pop_back();
    key_ = std::move(keys_.back());
    keys_.pop_back();
    return place(std::move(done));
  }

  std::shared_ptr<const Origin> root_origin_;
  std::vector<Value> stack_;       // open containers, innermost last
  std::vector<std::string> keys_;  // for each open container, its key in its parent
  std::string key_;                // the key of the next member of the innermost object
  Value root_;
};

Value parse(const std::string& text, const std::string& what) {
  Builder builder(what);
  nlohmann::json::sax_parse(text, &builder);
  return builder.take();
}

Value parse_file(const std::string& path) {
  return parse(read_file(path, "JSON"), path);
}

}  // namespace echelon::json
