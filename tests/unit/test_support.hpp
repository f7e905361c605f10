// Helpers shared by the unit tests.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>

#include <doctest/doctest.h>

#include "sar/core/types.hpp"

namespace sar::testing_support {

/// A rows x cols matrix of values uniform in [lo, hi), from mt19937_64(seed).
template <class T = double>
matrix<T> random_matrix(Eigen::Index rows, Eigen::Index cols, std::uint64_t seed,
                        double lo = -1, double hi = 1) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  matrix<T> m(rows, cols);
  for (Eigen::Index k = 0; k < m.size(); ++k) m.data()[k] = static_cast<T>(u(gen));
  return m;
}

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
