#include <echelon/base/json.h>

#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include <echelon/base/error.h>

namespace echelon::json {

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
[[noreturn]] void wrong_kind(const char* expected, Kind actual) {
  ECH_FAIL("json: expected ", expected, ", got ", kind_name(actual));
}
}  // namespace

bool Value::as_bool() const {
  if (!is_bool()) wrong_kind("bool", kind());
  return std::get<bool>(data_);
}

int64_t Value::as_int() const {
  if (is_int()) return std::get<int64_t>(data_);
  if (kind() == Kind::Double) {
    const double d = std::get<double>(data_);
    // 2^63 bounds the int64 range; beyond it the cast is undefined.
    if (std::nearbyint(d) == d && std::fabs(d) < 9.2e18) return static_cast<int64_t>(d);
    ECH_FAIL("json: expected an integer, got ", d);
  }
  wrong_kind("integer", kind());
}

double Value::as_double() const {
  if (is_int()) return static_cast<double>(std::get<int64_t>(data_));
  if (kind() != Kind::Double) wrong_kind("number", kind());
  return std::get<double>(data_);
}

const std::string& Value::as_string() const {
  if (!is_string()) wrong_kind("string", kind());
  return std::get<std::string>(data_);
}
const Array& Value::as_array() const {
  if (!is_array()) wrong_kind("array", kind());
  return std::get<Array>(data_);
}
Array& Value::as_array() {
  if (!is_array()) wrong_kind("array", kind());
  return std::get<Array>(data_);
}
const Object& Value::as_object() const {
  if (!is_object()) wrong_kind("object", kind());
  return std::get<Object>(data_);
}
Object& Value::as_object() {
  if (!is_object()) wrong_kind("object", kind());
  return std::get<Object>(data_);
}

const Value* Value::find(const std::string& key) const {
  for (const auto& [k, v] : as_object())
    if (k == key) return &v;
  return nullptr;
}

const Value& Value::at(const std::string& key) const {
  const Value* v = find(key);
  ECH_CHECK(v != nullptr, "json: missing key \"", key, "\"");
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
  wrong_kind("array or object", kind());
}

// ---- writer ----------------------------------------------------------------------------------

std::string quote(const std::string& s) {
  std::string out;
  out.reserve(s.size() + 2);
  out += '"';
  for (const char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(c));
          out += buf;
        } else {
          out += c;  // UTF-8 bytes pass through unchanged
        }
    }
  }
  out += '"';
  return out;
}

namespace {

// Shortest text that parses back to the same double; always looks like a float ("1.0", "1e+20").
void write_double(std::string& out, double d) {
  if (!std::isfinite(d)) {
    out += "null";
    return;
  }
  char buf[32];
  const auto result = std::to_chars(buf, buf + sizeof(buf), d);
  std::string text(buf, result.ptr);
  if (text.find_first_of(".eE") == std::string::npos) text += ".0";
  out += text;
}

void newline(std::string& out, int indent, int depth) {
  if (indent < 0) return;
  out += '\n';
  out.append(static_cast<size_t>(indent * depth), ' ');
}

void write(std::string& out, const Value& v, int indent, int depth) {
  switch (v.kind()) {
    case Kind::Null:
      out += "null";
      break;
    case Kind::Bool:
      out += v.as_bool() ? "true" : "false";
      break;
    case Kind::Int:
      out += std::to_string(v.as_int());
      break;
    case Kind::Double:
      write_double(out, v.as_double());
      break;
    case Kind::String:
      out += quote(v.as_string());
      break;
    case Kind::Array: {
      const Array& items = v.as_array();
      out += '[';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += ',';
        newline(out, indent, depth + 1);
        write(out, items[i], indent, depth + 1);
      }
      if (!items.empty()) newline(out, indent, depth);
      out += ']';
      break;
    }
    case Kind::Object: {
      const Object& members = v.as_object();
      out += '{';
      for (size_t i = 0; i < members.size(); ++i) {
        if (i) out += ',';
        newline(out, indent, depth + 1);
        out += quote(members[i].first);
        out += indent < 0 ? ":" : ": ";
        write(out, members[i].second, indent, depth + 1);
      }
      if (!members.empty()) newline(out, indent, depth);
      out += '}';
      break;
    }
  }
}

}  // namespace

std::string Value::dump(int indent) const {
  std::string out;
  write(out, *this, indent, 0);
  return out;
}

// ---- parser ----------------------------------------------------------------------------------

namespace {

class Parser {
 public:
  Parser(const std::string& text, const std::string& what) : text_(text), what_(what) {}

  Value parse_document() {
    skip_space();
    Value v = parse_value(0);
    skip_space();
    if (pos_ != text_.size()) fail("unexpected trailing characters");
    return v;
  }

 private:
  // Deeper nesting than any of our files needs; bounds the recursion on hostile input.
  static constexpr int kMaxDepth = 256;

  [[noreturn]] void fail(const std::string& message) const {
    ECH_FAIL(what_, ": invalid JSON at byte ", pos_, ": ", message);
  }

  bool at_end() const { return pos_ >= text_.size(); }
  char peek() const { return at_end() ? '\0' : text_[pos_]; }

  void skip_space() {
    while (!at_end() && (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n' ||
                         text_[pos_] == '\r'))
      ++pos_;
  }

  void expect(char c) {
    if (peek() != c) fail(str("expected '", c, "'"));
    ++pos_;
  }

  void expect_word(const char* word) {
    const size_t n = std::strlen(word);
    if (text_.compare(pos_, n, word) != 0) fail(str("expected '", word, "'"));
    pos_ += n;
  }

  Value parse_value(int depth) {
    if (depth > kMaxDepth) fail("nesting deeper than 256 levels");
    if (at_end()) fail("unexpected end of input");
    switch (peek()) {
      case '{':
        return parse_object(depth);
      case '[':
        return parse_array(depth);
      case '"':
        return Value(parse_string());
      case 't':
        expect_word("true");
        return Value(true);
      case 'f':
        expect_word("false");
        return Value(false);
      case 'n':
        expect_word("null");
        return Value();
      default:
        if (peek() == '-' || (peek() >= '0' && peek() <= '9')) return parse_number();
        fail(str("unexpected character '", peek(), "'"));
    }
  }

  Value parse_object(int depth) {
    expect('{');
    Value v = Value::object();
    skip_space();
    if (peek() == '}') {
      ++pos_;
      return v;
    }
    while (true) {
      skip_space();
      if (peek() != '"') fail("expected a string key");
      std::string key = parse_string();
      if (v.contains(key)) fail(str("duplicate key \"", key, "\""));
      skip_space();
      expect(':');
      skip_space();
      v.as_object().emplace_back(std::move(key), parse_value(depth + 1));
      skip_space();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      expect('}');
      return v;
    }
  }

  Value parse_array(int depth) {
    expect('[');
    Value v = Value::array();
    skip_space();
    if (peek() == ']') {
      ++pos_;
      return v;
    }
    while (true) {
      skip_space();
      v.push(parse_value(depth + 1));
      skip_space();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      expect(']');
      return v;
    }
  }

  unsigned parse_hex4() {
    if (pos_ + 4 > text_.size()) fail("truncated \\u escape");
    unsigned code = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = text_[pos_++];
      code <<= 4;
      if (c >= '0' && c <= '9')
        code |= static_cast<unsigned>(c - '0');
      else if (c >= 'a' && c <= 'f')
        code |= static_cast<unsigned>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F')
        code |= static_cast<unsigned>(c - 'A' + 10);
      else
        fail("bad hex digit in \\u escape");
    }
    return code;
  }

  static void append_utf8(std::string& out, unsigned code) {
    if (code < 0x80) {
      out += static_cast<char>(code);
    } else if (code < 0x800) {
      out += static_cast<char>(0xC0 | (code >> 6));
      out += static_cast<char>(0x80 | (code & 0x3F));
    } else if (code < 0x10000) {
      out += static_cast<char>(0xE0 | (code >> 12));
      out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (code & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (code >> 18));
      out += static_cast<char>(0x80 | ((code >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (code & 0x3F));
    }
  }

  std::string parse_string() {
    expect('"');
    std::string out;
    while (true) {
      if (at_end()) fail("unterminated string");
      const char c = text_[pos_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) fail("control character in string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (at_end()) fail("unterminated escape");
      const char e = text_[pos_++];
      switch (e) {
        case '"':
          out += '"';
          break;
        case '\\':
          out += '\\';
          break;
        case '/':
          out += '/';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u': {
          unsigned code = parse_hex4();
          if (code >= 0xD800 && code < 0xDC00) {  // high surrogate: a low one must follow
            if (text_.compare(pos_, 2, "\\u") != 0) fail("unpaired surrogate");
            pos_ += 2;
            const unsigned low = parse_hex4();
            if (low < 0xDC00 || low >= 0xE000) fail("bad low surrogate");
            code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00);
          } else if (code >= 0xDC00 && code < 0xE000) {
            fail("unpaired surrogate");
          }
          append_utf8(out, code);
          break;
        }
        default:
          fail(str("bad escape '\\", e, "'"));
      }
    }
  }

  Value parse_number() {
    const size_t start = pos_;
    bool is_float = false;
    if (peek() == '-') ++pos_;
    if (peek() == '0') {
      ++pos_;
    } else if (peek() >= '1' && peek() <= '9') {
      while (peek() >= '0' && peek() <= '9') ++pos_;
    } else {
      fail("expected a digit");
    }
    if (peek() == '.') {
      is_float = true;
      ++pos_;
      if (!(peek() >= '0' && peek() <= '9')) fail("expected a digit after '.'");
      while (peek() >= '0' && peek() <= '9') ++pos_;
    }
    if (peek() == 'e' || peek() == 'E') {
      is_float = true;
      ++pos_;
      if (peek() == '+' || peek() == '-') ++pos_;
      if (!(peek() >= '0' && peek() <= '9')) fail("expected a digit in the exponent");
      while (peek() >= '0' && peek() <= '9') ++pos_;
    }
    const char* first = text_.data() + start;
    const char* last = text_.data() + pos_;
    if (!is_float) {
      int64_t i = 0;
      const auto r = std::from_chars(first, last, i);
      if (r.ec == std::errc() && r.ptr == last) return Value(i);
      // Too large for int64: keep it as a double, as most JSON readers do.
    }
    double d = 0;
    const auto r = std::from_chars(first, last, d);
    if (r.ec != std::errc() || r.ptr != last) fail("number out of range");
    return Value(d);
  }

  const std::string& text_;
  const std::string& what_;
  size_t pos_ = 0;
};

}  // namespace

Value parse(const std::string& text, const std::string& what) {
  return Parser(text, what).parse_document();
}

Value parse_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  ECH_CHECK(in.good(), path, ": cannot open for reading");
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return parse(buffer.str(), path);
}

}  // namespace echelon::json
