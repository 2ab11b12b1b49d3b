#include <echelon/tensor/safetensors.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <set>

#include <echelon/base/error.h>
#include <echelon/base/file.h>
#include <echelon/base/json.h>

namespace echelon::safetensors {

namespace {
constexpr const char* kMetadataKey = "__metadata__";
// The reference implementation refuses headers above 100 MB; so do we (a damaged length field
// must not make us allocate gigabytes).
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; a big-endian host would need byte swaps");
}  // namespace

const Tensor* Contents::find(const std::string& name) const {
  for (const auto& [key, tensor] : tensors)
    if (key == name) return &tensor;
  return nullptr;
}

const Tensor& Contents::at(const std::string& name) const {
  const Tensor* t = find(name);
  if (!t) {
    std::string names;
    for (size_t i = 0; i < tensors.size() && i < 12; ++i)
      names += (i ? ", " : "") + tensors[i].first;
    if (tensors.size() > 12) names += ", ...";
    ECH_FAIL("safetensors: no tensor named \"", name, "\" (file has: ", names, ")");
  }
  return *t;
}

const char* dtype_code(DType dtype) {
  switch (dtype) {
    case kFloat32:
      return "F32";
    case kFloat64:
      return "F64";
    case kInt32:
      return "I32";
    case kInt64:
      return "I64";
    case kUInt8:
      return "U8";
    case kBFloat16:
      return "BF16";
  }
  ECH_FAIL("safetensors: unknown dtype");
}

DType parse_dtype_code(const std::string& code) {
  if (code == "F32") return kFloat32;
  if (code == "F64") return kFloat64;
  if (code == "I32") return kInt32;
  if (code == "I64") return kInt64;
  if (code == "U8") return kUInt8;
  if (code == "BF16") return kBFloat16;
  ECH_FAIL("safetensors: unsupported dtype \"", code,
           "\" (supported: F32, F64, I32, I64, U8, BF16)");
}

std::string serialize(const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const Metadata& metadata) {
  json::Value header = json::Value::object();
  if (!metadata.empty()) {
    json::Value meta = json::Value::object();
    for (const auto& [key, value] : metadata) meta.set(key, value);
    header.set(kMetadataKey, std::move(meta));
  }
  std::set<std::string> seen;
  std::vector<Tensor> host;
  host.reserve(tensors.size());
  uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    ECH_CHECK(!name.empty() && name != kMetadataKey, "safetensors: invalid tensor name \"", name,
              "\"");
    ECH_CHECK(seen.insert(name).second, "safetensors: duplicate tensor name \"", name, "\"");
    ECH_CHECK(tensor.defined(), "safetensors: tensor \"", name, "\" is undefined");
    Tensor h = tensor.contiguous().cpu();
    json::Value shape = json::Value::array();
    for (const int64_t d : h.shape()) shape.push(d);
    const uint64_t end = offset + h.nbytes();
    header.set(name, json::Value::object()
                         .set("dtype", dtype_code(h.dtype()))
                         .set("shape", std::move(shape))
                         .set("data_offsets", json::Array{json::Value(offset), json::Value(end)}));
    offset = end;
    host.push_back(std::move(h));
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // 8-byte aligned data buffer

  std::string out;
  out.reserve(8 + text.size() + offset);
  const uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) out += static_cast<char>((n >> (8 * i)) & 0xFF);
  out += text;
  for (const Tensor& h : host)
    if (h.nbytes()) out.append(static_cast<const char*>(h.raw_data()), h.nbytes());
  return out;
}

namespace {

struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin, end;
};

Entry parse_entry(const std::string& what, const std::string& name, const json::Value& v,
                  uint64_t data_bytes) {
  const std::string where = what + ": tensor \"" + name + "\"";
  ECH_CHECK(v.is_object(), where, ": header entry is not an object");
  for (const char* key : {"dtype", "shape", "data_offsets"})
    ECH_CHECK(v.contains(key), where, ": header entry lacks \"", key, "\"");
  Entry e{name, kFloat32, {}, 0, 0};
  try {
    e.dtype = parse_dtype_code(v.at("dtype").as_string());
    uint64_t numel = 1, nonzero = 1;
    // JSON integers only: the format has no "1.0" for a size (5.5 and 1.0 are both rejected).
    auto integer = [](const json::Value& x, const char* field) {
      ECH_CHECK(x.is_int(), field, " entries must be JSON integers, got ", x.dump());
      return x.as_int();
    };
    for (const json::Value& d : v.at("shape").as_array()) {
      const int64_t dim = integer(d, "shape");
      ECH_CHECK(dim >= 0, "negative dimension ", dim);
      // Bound the product of the non-zero dims too (not only numel, which a 0 makes 0): the
      // tensor's strides are such products and must not overflow.
      ECH_CHECK(dim == 0 || nonzero <= (uint64_t{1} << 62) / static_cast<uint64_t>(dim),
                "shape is too large");
      if (dim != 0) nonzero *= static_cast<uint64_t>(dim);
      numel *= static_cast<uint64_t>(dim);
      e.shape.push_back(dim);
    }
    const json::Array& offsets = v.at("data_offsets").as_array();
    ECH_CHECK(offsets.size() == 2, "data_offsets must have 2 entries, has ", offsets.size());
    const int64_t begin = integer(offsets[0], "data_offsets");
    const int64_t end = integer(offsets[1], "data_offsets");
    ECH_CHECK(begin >= 0 && begin <= end, "data_offsets [", begin, ", ", end, "] are not ordered");
    e.begin = static_cast<uint64_t>(begin);
    e.end = static_cast<uint64_t>(end);
    ECH_CHECK(e.end <= data_bytes, "data_offsets [", begin, ", ", end,
              "] run past the data buffer of ", data_bytes, " bytes");
    const uint64_t expected = numel * dtype_size(e.dtype);
    ECH_CHECK(e.end - e.begin == expected, "data_offsets span ", e.end - e.begin,
              " bytes but shape ", e.shape, " of ", dtype_code(e.dtype), " needs ", expected);
  } catch (const Error& error) {
    // Re-raise with the file and tensor in front, keeping the detail (minus its source tag).
    ECH_FAIL(where, ": ", error.message());
  }
  return e;
}

}  // namespace

Contents deserialize(const std::string& bytes, const std::string& what) {
  ECH_CHECK(bytes.size() >= 8, what, ": file is ", bytes.size(),
            " bytes, too short for the 8-byte header length");
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t{static_cast<unsigned char>(bytes[i])} << (8 * i);
  ECH_CHECK(n <= bytes.size() - 8, what, ": header length ", n, " runs past the end of the file (",
            bytes.size(), " bytes)");
  ECH_CHECK(n <= kMaxHeaderBytes, what, ": header length ", n, " exceeds the 100 MB limit");
  ECH_CHECK(n >= 2, what, ": header length ", n, " is too small for a JSON object");
  const json::Value header = json::parse(bytes.substr(8, n), what + " (header)");
  ECH_CHECK(header.is_object(), what, ": header is a JSON ", json::kind_name(header.kind()),
            ", expected an object");
  const uint64_t data_bytes = bytes.size() - 8 - n;

  Contents contents;
  std::vector<Entry> entries;
  for (const auto& [name, value] : header.as_object()) {
    if (name == kMetadataKey) {
      ECH_CHECK(value.is_object(), what, ": __metadata__ must be an object of strings");
      for (const auto& [key, text] : value.as_object()) {
        ECH_CHECK(text.is_string(), what, ": __metadata__ value of \"", key, "\" is not a string");
        contents.metadata[key] = text.as_string();
      }
      continue;
    }
    entries.push_back(parse_entry(what, name, value, data_bytes));
  }

  // The spec requires the data buffer to be fully indexed, without holes or overlaps.
  std::vector<const Entry*> by_offset;
  by_offset.reserve(entries.size());
  for (const Entry& e : entries) by_offset.push_back(&e);
  std::sort(by_offset.begin(), by_offset.end(), [](const Entry* a, const Entry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t cursor = 0;
  for (const Entry* e : by_offset) {
    ECH_CHECK(e->begin >= cursor, what, ": tensor \"", e->name, "\" overlaps the previous tensor (",
              "starts at ", e->begin, ", previous ends at ", cursor, ")");
    ECH_CHECK(e->begin == cursor, what, ": hole in the data buffer before tensor \"", e->name,
              "\" (bytes ", cursor, "..", e->begin, " unused)");
    cursor = e->end;
  }
  ECH_CHECK(cursor == data_bytes, what, ": data buffer has ", data_bytes - cursor,
            " trailing bytes that no tensor uses (file truncated or appended to?)");

  const char* data = bytes.data() + 8 + n;
  for (const Entry& e : entries) {
    Tensor t = Tensor::empty(e.shape, e.dtype);
    if (e.end > e.begin) std::memcpy(t.raw_data(), data + e.begin, e.end - e.begin);
    contents.tensors.emplace_back(e.name, std::move(t));
  }
  return contents;
}

void save(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
          const Metadata& metadata) {
  write_file_atomic(path, serialize(tensors, metadata));
}

Contents load(const std::string& path) {
  return deserialize(read_file(path, "checkpoint"), path);
}

}  // namespace echelon::safetensors
