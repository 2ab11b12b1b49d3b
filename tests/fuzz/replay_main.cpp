// Replays files through the fuzz targets without libFuzzer (any compiler):
//   echelon_fuzz_replay TARGET FILE_OR_DIR...
// Every regular file (folders recursively, in sorted order) is one input. A finding aborts (so
// ctest reports the failure) after the name of the input was printed. The targets' entry points
// are renamed echelon_fuzz_<target> (CMake generates the wrappers and fuzz_targets.inc).
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "fuzz_common.h"

#define ECHELON_FUZZ_TARGET(name) extern "C" int echelon_fuzz_##name(const uint8_t*, size_t);
#include "fuzz_targets.inc"
#undef ECHELON_FUZZ_TARGET

namespace {

struct Target {
  const char* name;
  int (*run)(const uint8_t*, size_t);
};

const Target kTargets[] = {
#define ECHELON_FUZZ_TARGET(name) {#name, &echelon_fuzz_##name},
#include "fuzz_targets.inc"
#undef ECHELON_FUZZ_TARGET
};

}  // namespace

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  const Target* target = nullptr;
  if (argc >= 2)
    for (const Target& t : kTargets)
      if (std::strcmp(t.name, argv[1]) == 0) target = &t;
  if (target == nullptr || argc < 3) {
    std::fprintf(stderr, "usage: echelon_fuzz_replay TARGET FILE_OR_DIR...\ntargets:");
    for (const Target& t : kTargets) std::fprintf(stderr, " %s", t.name);
    std::fprintf(stderr, "\n");
    return 2;
  }
  std::vector<fs::path> inputs;
  for (int i = 2; i < argc; ++i) {
    const fs::path arg = argv[i];
    if (fs::is_directory(arg)) {
      for (const auto& entry : fs::recursive_directory_iterator(arg))
        if (entry.is_regular_file()) inputs.push_back(entry.path());
    } else if (fs::is_regular_file(arg)) {
      inputs.push_back(arg);
    } else {
      std::fprintf(stderr, "replay: no such file or folder: %s\n", argv[i]);
      return 2;
    }
  }
  std::sort(inputs.begin(), inputs.end());
  if (inputs.empty()) {
    std::fprintf(stderr, "replay: no inputs for %s\n", target->name);
    return 2;
  }
  for (const fs::path& path : inputs) {
    std::fprintf(stderr, "replay %s: %s\n", target->name, path.c_str());
    std::ifstream in(path, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    target->run(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  }
  std::printf("replay %s: %zu inputs, no finding\n", target->name, inputs.size());
  return 0;
}
