// One timeline from the traces of every process of a multi-process run: rank r's processes get
// ids r * kRankPidStride + pid and names prefixed "rank r: ", and its timestamps are moved onto
// rank 0's clock. Rank 0 writes the result to --trace PATH (each rank also keeps PATH.rank<r>).
#pragma once

#include <string>
#include <vector>

namespace echelon::parallel {

inline constexpr int kRankPidStride = 1000;

// texts[r]: rank r's Chrome trace JSON (TraceRecorder::to_json). offsets_us[r]: what to add to
// rank r's timestamps to put them on rank 0's clock (0 for rank 0). Throws echelon::Error naming
// the rank whose text is not a trace.
std::string merge_rank_traces(const std::vector<std::string>& texts,
                              const std::vector<double>& offsets_us);

}  // namespace echelon::parallel
