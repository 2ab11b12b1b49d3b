// Pixel layout conversions at the boundary with the file formats. Internal to the data layer.
#pragma once

#include <cstdint>
#include <vector>

#include <echelon/data/dataset.h>

// Pixel loops are not parsing: libFuzzer's comparison tracing would make them the cost of every
// large image (80% of a 2 s timeout was the loop bound of to_planar being traced).
#if defined(__clang__)
#define ECHELON_NO_FUZZ_COVERAGE __attribute__((no_sanitize("coverage")))
#else
#define ECHELON_NO_FUZZ_COVERAGE
#endif

namespace echelon::data::detail {

// Codecs store pixels interleaved (H, W, C); an Image is planar (C, H, W) like a tensor. These two
// are the only layout conversions of the data path.
std::vector<uint8_t> to_planar(const uint8_t* hwc /* (h, w, c) */, int64_t h, int64_t w, int64_t c);
std::vector<uint8_t> to_interleaved(const Image& image);  // (h, w, c)

}  // namespace echelon::data::detail
