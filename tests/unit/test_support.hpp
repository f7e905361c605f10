// Helpers shared by the unit tests.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

#include <doctest/doctest.h>

namespace sar::testing_support {

/// ../shared/data (from SAR_DATA_DIR set by meson test); fails the test if it is missing.
inline std::filesystem::path data_dir() {
  const char* env = std::getenv("SAR_DATA_DIR");
  std::filesystem::path dir = env ? env : "../shared/data";
  REQUIRE_MESSAGE(std::filesystem::is_directory(dir / "cora"),
                  "real datasets not found at " << dir.string() << " (set SAR_DATA_DIR)");
  return dir;
}

/// A fresh empty directory under the system temp dir, removed by the destructor.
struct temp_dir {
  std::filesystem::path path;
  explicit temp_dir(const std::string& tag) {
    path = std::filesystem::temp_directory_path() /
           ("sar-test-" + tag + "-" + std::to_string(std::rand()) + "-" +
            std::to_string(reinterpret_cast<std::uintptr_t>(this)));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~temp_dir() { std::filesystem::remove_all(path); }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
};

}  // namespace sar::testing_support
