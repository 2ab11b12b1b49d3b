// Safetensors checkpoints, as `echelon eval --checkpoint FILE` and `--resume DIR` read them:
// load_checkpoint (8-byte length, JSON header, tensor table, __metadata__ -> CheckpointInfo) and
// restore_model (the model the metadata describes, loaded strictly from the tensors).
#include "fuzz_common.h"

#include <echelon/app/checkpoint.h>
#include <echelon/tensor/safetensors.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace fuzz = echelon::fuzz;
  namespace app = echelon::app;
  const std::string path = fuzz::write_scratch(
      "checkpoint.safetensors", std::string_view(reinterpret_cast<const char*>(data), size));
  fuzz::expect_parse_or_error(path, [&] {
    // The plain reader: a file it accepts must write back to the same bytes' meaning.
    const echelon::safetensors::Contents contents = echelon::safetensors::load(path);
    (void)echelon::safetensors::serialize(contents.tensors, contents.metadata);
  });
  fuzz::expect_parse_or_error(path, [&] {
    const app::LoadedCheckpoint checkpoint = app::load_checkpoint(path);
    (void)app::restore_model(checkpoint, path);
  });
  return 0;
}
