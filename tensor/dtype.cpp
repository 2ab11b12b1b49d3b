#include <echelon/tensor/dtype.h>

namespace echelon {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case kFloat32:
      return 4;
    case kFloat64:
      return 8;
    case kInt32:
      return 4;
    case kInt64:
      return 8;
    case kUInt8:
      return 1;
    case kBFloat16:
      return 2;
  }
  ECH_FAIL("dtype_size: unknown dtype ", static_cast<int>(dtype));
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case kFloat32:
      return "float32";
    case kFloat64:
      return "float64";
    case kInt32:
      return "int32";
    case kInt64:
      return "int64";
    case kUInt8:
      return "uint8";
    case kBFloat16:
      return "bfloat16";
  }
  return "unknown";
}

DType parse_dtype(const std::string& text) {
  if (text == "float32" || text == "float") return kFloat32;
  if (text == "float64" || text == "double") return kFloat64;
  if (text == "int32" || text == "int") return kInt32;
  if (text == "int64" || text == "long") return kInt64;
  if (text == "uint8") return kUInt8;
  if (text == "bfloat16" || text == "bf16") return kBFloat16;
  ECH_FAIL("parse_dtype: unknown dtype '", text,
           "' (expected float32, float64, int32, int64, uint8 or bfloat16)");
}

}  // namespace echelon
