// Helpers the two `echelon reproduce` tables share (app/reproduce_*_table.cpp).
#pragma once

#include <chrono>
#include <ostream>
#include <string>

#include <echelon/app/reproduce.h>

namespace echelon::app::reproduce {

// printf-style formatting of one value into a string.
std::string fmt(const char* format, double value);
const char* size_name(ReproduceSize size);  // "full" | "quick" | "smoke"
// Adds the wall time and the machine's load average to `result`, prints them, and writes
// options.json_path when set (throws naming the path when it cannot).
void finish_reproduce(json::Value& result, std::chrono::steady_clock::time_point start,
                      const ReproduceOptions& options, std::ostream& out);

}  // namespace echelon::app::reproduce
