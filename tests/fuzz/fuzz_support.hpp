// What the libFuzzer targets share: the input bytes as a file in a private scratch directory
// (the loaders read paths), and the rule that a sar::error is the expected answer to bad
// input while anything else (a crash, another exception, a sanitizer report, an allocation
// beyond libFuzzer's limit) is a finding.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <system_error>
#include <vector>

#include <csignal>
#include <cerrno>
#include <unistd.h>

#include "sar/core/error.hpp"

namespace sar_fuzz {

/// A directory of this process under /dev/shm (or the temp dir), made once.
inline const std::filesystem::path& scratch() {
  static const std::filesystem::path dir = [] {
    std::filesystem::path base = std::filesystem::exists("/dev/shm")
                                     ? std::filesystem::path("/dev/shm")
                                     : std::filesystem::temp_directory_path();
    // libFuzzer may leave with _Exit: remove what dead fuzzing processes left instead.
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(base, ec)) {
      const std::string name = entry.path().filename().string();
      if (!name.starts_with("sar-fuzz-")) continue;
      const long pid = std::strtol(name.c_str() + 9, nullptr, 10);
      if (pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH)
        std::filesystem::remove_all(entry.path(), ec);
    }
    auto d = base / ("sar-fuzz-" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

/// Writes bytes to `path` (replacing it).
inline void write_bytes(const std::filesystem::path& path, const std::uint8_t* data,
                        std::size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
}

/// Inputs of the targets that mutate a valid directory are (selector byte, new content of the
/// selector's file). With SAR_FUZZ_WRITE_SEEDS=DIR set, writes one such input per file of
/// `files` (the unchanged content) into DIR: the seed corpus in tests/fuzz/corpus/.
inline void write_seeds(const std::vector<std::filesystem::path>& files) {
  const char* dir = std::getenv("SAR_FUZZ_WRITE_SEEDS");
  if (dir == nullptr) return;
  std::filesystem::create_directories(dir);
  for (std::size_t k = 0; k < files.size(); ++k) {
    std::ifstream in(files[k], std::ios::binary);
    const std::string content{std::istreambuf_iterator<char>(in), {}};
    const auto name = "seed-" + std::to_string(k) + "-" + files[k].filename().string();
    std::ofstream out(std::filesystem::path(dir) / name, std::ios::binary);
    out.put(static_cast<char>(k));
    out << content;
  }
}

/// A valid directory (files sorted by path) whose files an input replaces one at a time; the
/// original is put back after each run, so no copy of the directory is needed.
class mutable_directory {
 public:
  explicit mutable_directory(const std::filesystem::path& dir) {
    for (const auto& entry : std::filesystem::recursive_directory_iterator(dir))
      if (entry.is_regular_file()) files_.push_back(entry.path());
    std::sort(files_.begin(), files_.end());
    for (const auto& f : files_) {
      std::ifstream in(f, std::ios::binary);
      originals_.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    write_seeds(files_);
  }
  /// Runs f with the file chosen by data[0] replaced by data[1..size), then restores it.
  template <class F>
  void with_input(const std::uint8_t* data, std::size_t size, F&& f) {
    if (size == 0) return;
    const std::size_t k = data[0] % files_.size();
    write_bytes(files_[k], data + 1, size - 1);
    f();
    write_bytes(files_[k], reinterpret_cast<const std::uint8_t*>(originals_[k].data()),
                originals_[k].size());
  }

 private:
  std::vector<std::filesystem::path> files_;
  std::vector<std::string> originals_;
};

/// Runs f; a sar::error (a clear refusal of bad input) is fine, anything else escapes.
template <class F>
void expect_clear_errors(F&& f) {
  try {
    f();
  } catch (const sar::error&) {
  }
}

}  // namespace sar_fuzz
