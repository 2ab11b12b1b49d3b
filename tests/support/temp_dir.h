// A fresh scratch folder for a test: $ECHELON_TEST_TMP (or the system's temp folder) /
// echelon_test_<pid> / NAME, emptied first. The pid keeps parallel test processes apart.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace echelon::test {

inline std::filesystem::path temp_dir(const std::string& name) {
  namespace fs = std::filesystem;
  const char* root = std::getenv("ECHELON_TEST_TMP");
  fs::path dir = fs::path(root ? root : fs::temp_directory_path().string()) /
                 ("echelon_test_" + std::to_string(::getpid())) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

}  // namespace echelon::test
