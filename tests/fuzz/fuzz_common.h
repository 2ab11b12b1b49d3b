// Shared by every fuzz target (tests/fuzz/*.cpp). Each target defines LLVMFuzzerTestOneInput and
// calls the entry point the `echelon` tool calls. The contract it asserts: the input parses, or
// the parser throws echelon::Error whose message names the source (the file, or the flag). Any
// other outcome is a finding: a crash or sanitizer report, another exception type (reported here
// and aborted, so libFuzzer saves the input), an error that does not name its source, a hang or an
// allocation beyond the budget (libFuzzer's -timeout / -malloc_limit_mb).
//
// The same sources link either with libFuzzer (-fsanitize=fuzzer, ECHELON_FUZZ=ON, clang) or with
// replay_main.cpp (any compiler): the ctest label `fuzz-replay` runs every corpus file through it.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include <echelon/base/error.h>

namespace echelon::fuzz {

// Aborts with the reason: libFuzzer (and the replay driver) report the input as a finding.
[[noreturn]] inline void finding(const std::string& what) {
  std::fprintf(stderr, "FUZZ FINDING: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

// Runs `parse`; an echelon::Error must mention `source` (empty: any message); every other
// exception is a finding.
template <typename F>
void expect_parse_or_error(const std::string& source, F&& parse) {
  try {
    parse();
  } catch (const echelon::Error& e) {
    const std::string message = e.what();
    if (message.empty()) finding("echelon::Error with an empty message");
    if (!source.empty() && message.find(source) == std::string::npos)
      finding("echelon::Error does not name its source '" + source + "': " + message);
  } catch (const std::exception& e) {
    finding(std::string("exception other than echelon::Error: ") + e.what());
  } catch (...) {
    finding("non-standard exception");
  }
}

// Splits the input at the separator into at most `max_parts` parts (the last takes the rest), so
// one fuzz input can hold several files: "images|labels", "config.json|argv".
inline constexpr std::string_view kSeparator = "\n--echelon-fuzz-part--\n";

inline std::vector<std::string> split_parts(const uint8_t* data, size_t size, size_t max_parts) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> parts;
  size_t start = 0;
  while (parts.size() + 1 < max_parts) {
    const size_t at = text.find(kSeparator, start);
    if (at == std::string_view::npos) break;
    parts.emplace_back(text.substr(start, at - start));
    start = at + kSeparator.size();
  }
  parts.emplace_back(text.substr(start));
  return parts;
}

// A per-process scratch folder for parsers that take a path (as the tool does): the file name
// is what errors must name.
// Removed at exit.
inline const std::filesystem::path& scratch_dir() {
  struct Scratch {
    std::filesystem::path path;
    Scratch() {
      std::string base = std::filesystem::temp_directory_path() / "echelon-fuzz-XXXXXX";
      if (mkdtemp(base.data()) == nullptr) finding("cannot create a scratch folder");
      path = base;
    }
    ~Scratch() {
      std::error_code ignored;
      std::filesystem::remove_all(path, ignored);
    }
  };
  static const Scratch scratch;
  return scratch.path;
}

inline std::string write_scratch(const std::string& name, std::string_view bytes) {
  const std::string path = (scratch_dir() / name).string();
  FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr) finding("cannot write " + path);
  if (!bytes.empty() && std::fwrite(bytes.data(), 1, bytes.size(), file) != bytes.size())
    finding("short write to " + path);
  std::fclose(file);
  return path;
}

// Pixel loops of the differential targets: not traced by libFuzzer (comparison tracing per pixel
// made large images time out), they are not what is being fuzzed.
#if defined(__clang__)
#define ECHELON_FUZZ_UNTRACED __attribute__((no_sanitize("coverage")))
#else
#define ECHELON_FUZZ_UNTRACED
#endif

ECHELON_FUZZ_UNTRACED inline double mean_abs_difference(const std::vector<uint8_t>& a,
                                                        const std::vector<uint8_t>& b) {
  if (a.size() != b.size()) return 256.0;
  double total = 0;
  for (size_t i = 0; i < a.size(); ++i) total += std::abs(int{a[i]} - int{b[i]});
  return a.empty() ? 0 : total / static_cast<double>(a.size());
}

// Index of the first pixel where planar (C, H, W) `planar` and interleaved (H, W, C) `hwc`
// differ, or -1.
ECHELON_FUZZ_UNTRACED inline int64_t first_planar_mismatch(const std::vector<uint8_t>& planar,
                                                           const std::vector<uint8_t>& hwc,
                                                           int64_t plane, int channels) {
  for (int64_t p = 0; p < plane; ++p)
    for (int c = 0; c < channels; ++c)
      if (planar[c * plane + p] != hwc[p * channels + c]) return p;
  return -1;
}

// Branches on every decoded pixel, so that valgrind's memcheck (ctest label valgrind) reports a
// decoder that left any of them uninitialised: memcheck stays silent until an undefined value
// decides a branch, and a target that only checks sizes never looks at a pixel. The count
// reaches a branch too, in case the compiler turned the loop's into arithmetic.
ECHELON_FUZZ_UNTRACED inline void branch_on_pixels(const std::vector<uint8_t>& pixels) {
  size_t odd = 0;
  for (const uint8_t p : pixels)
    if (p & 1) ++odd;
  if (odd > pixels.size()) finding("more odd pixels than pixels");
}

inline std::vector<uint8_t> as_bytes(std::string_view text) {
  return {text.begin(), text.end()};
}

}  // namespace echelon::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
