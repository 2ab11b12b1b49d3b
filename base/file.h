// Whole-file reads and atomic writes, with errors that name the file.
#pragma once

#include <string>

namespace echelon {

// The bytes of `path`. `what` names the kind of file in errors ("checkpoint", "config"); a
// directory or a missing or unreadable file is an echelon::Error naming the path.
std::string read_file(const std::string& path, const char* what);

// Writes `bytes` to `path` atomically: a temporary file in the same folder, fsync, rename, fsync
// of the folder. A reader sees the old file or the new one, never a torn one.
void write_file_atomic(const std::string& path, const std::string& bytes);

}  // namespace echelon
