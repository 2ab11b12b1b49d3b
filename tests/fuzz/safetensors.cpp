// Safetensors checkpoints, as `echelon eval --checkpoint FILE` and `--resume DIR` read them:
// load_checkpoint (8-byte length, JSON header, tensor table, __metadata__ -> CheckpointInfo) and
// restore_model (the model the metadata describes, loaded strictly from the tensors; with the model
// name `train --resume` expects, and without, as `eval`). The empty input also loads the scratch
// folder itself, as `--checkpoint DIR` would.
#include "fuzz_common.h"

#include <echelon/app/checkpoint.h>
#include <echelon/tensor/safetensors.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace fuzz = echelon::fuzz;
  namespace app = echelon::app;
  if (size == 0) {
    // `--checkpoint DIR` (issue 14): a folder is named as one, not read as a 0-byte file.
    const std::string dir = fuzz::scratch_dir().string();
    fuzz::expect_parse_or_error(dir, [&] {
      (void)app::load_checkpoint(dir);
      fuzz::finding("a folder loaded as a checkpoint");
    });
    try {
      (void)app::load_checkpoint(dir);
    } catch (const echelon::Error& e) {
      if (std::string(e.what()).find("is a directory") == std::string::npos)
        fuzz::finding(std::string("a folder as --checkpoint is not named as one: ") + e.what());
    }
  }
  const std::string path = fuzz::write_scratch(
      "checkpoint.safetensors", std::string_view(reinterpret_cast<const char*>(data), size));
  fuzz::expect_parse_or_error(path, [&] {
    // The plain reader: a file it accepts must write back to the same bytes' meaning.
    const echelon::safetensors::Contents contents = echelon::safetensors::load(path);
    (void)echelon::safetensors::serialize(contents.tensors, contents.metadata);
  });
  fuzz::expect_parse_or_error(path, [&] {
    const app::LoadedCheckpoint checkpoint = app::load_checkpoint(path);
    // `train --resume` names the model it expects; `eval` takes the checkpoint's.
    if (checkpoint.info.model != "lenet5")
      fuzz::expect_parse_or_error(path,
                                  [&] { (void)app::restore_model(checkpoint, path, "lenet5"); });
    (void)app::restore_model(checkpoint, path);
  });
  return 0;
}
