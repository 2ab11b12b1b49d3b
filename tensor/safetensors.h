// Reading and writing the safetensors format (https://github.com/huggingface/safetensors):
//   [8 bytes: little-endian uint64 N][N bytes: JSON header][data buffer]
// The header maps each tensor name to {"dtype": "F32"|"F64"|"I32"|"I64"|"U8", "shape": [...],
// "data_offsets": [begin, end]} (offsets relative to the data buffer, row-major, little-endian),
// plus an optional "__metadata__" map of string -> string. We pad the header with spaces to a
// multiple of 8 bytes, as the reference writer does, so every tensor starts 8-byte aligned.
// PyTorch loads our checkpoints with safetensors.torch.load_file (see tests/load_in_torch.py).
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include <echelon/tensor/tensor.h>

namespace echelon::safetensors {

using Metadata = std::map<std::string, std::string>;

struct Contents {
  std::vector<std::pair<std::string, Tensor>> tensors;  // CPU, contiguous, in file order
  Metadata metadata;

  // The tensor called `name`; throws echelon::Error naming the file's tensors when absent.
  const Tensor& at(const std::string& name) const;
  const Tensor* find(const std::string& name) const;
};

// "F32" etc. for our dtypes; parse_dtype throws naming the text for anything else.
const char* dtype_code(DType dtype);
DType parse_dtype_code(const std::string& code);

// Serialises tensors (any device: copied to the host) and metadata into the file's bytes.
// Names must be unique, non-empty and not "__metadata__".
std::string serialize(const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const Metadata& metadata = {});
// Parses and validates a whole file image; `what` (the path) prefixes every error. Checks: the
// 8-byte length, header length within the file, valid JSON object, known dtypes, non-negative
// shapes, offsets in range, sizes equal to numel * itemsize, no overlapping tensors, no bytes
// left unused in the data buffer.
Contents deserialize(const std::string& bytes, const std::string& what = "safetensors");

// Writes atomically: a temporary file in the same folder, fsync, rename over `path`, fsync of the
// folder. A crash leaves either the old file or the new one, never a torn file.
void save(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
          const Metadata& metadata = {});
Contents load(const std::string& path);

}  // namespace echelon::safetensors
