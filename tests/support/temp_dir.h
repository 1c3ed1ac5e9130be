// A fresh folder under the system temp directory for one test, removed with everything in it when
// the object goes: <tmp>/cypris_<prefix>_<pid>_<n>.
#pragma once

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <string>

namespace cypris::test {

class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "test")
      : path_(std::filesystem::temp_directory_path() /
              ("cypris_" + prefix + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++))) {
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  static inline std::atomic<int> counter_{0};
  std::filesystem::path path_;
};

}  // namespace cypris::test
