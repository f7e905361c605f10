// A run's own directory for data it spills to disk (what does not fit its memory budget),
// inside a directory the user names (--spill-dir PARENT):
//   PARENT/sar-spill-<host>-<pid>-<token>/   created by the run, removed with all it holds when
//                                            the spill_directory is destroyed (the run's end, or
//                                            an exception unwinding it)
//     .sar-journal                           {"token": ...}, then "f NAME" for every file,
//                                            written and flushed before the file is created
// A run killed before it could remove its directory (kill -9, a lost node) leaves it behind;
// the next spill_directory in the same PARENT removes it, but only when it is of this host, its
// process is gone, and its journal names everything in it (the rule of sar/io/safe_directory.hpp:
// sar deletes only what it can prove it wrote). Nothing else in PARENT is touched.
// Writes and reads name the file and the directory on failure; a full file system says how many
// bytes were needed and how many were free.
//
//   sar::spill_directory spill(options.spill_dir);
//   spill.require_free(bytes_per_epoch, "the activations of an epoch");
//   spill.write("layer1.part3", std::as_bytes(std::span(rows)));
//   spill.read("layer1.part3", std::as_writable_bytes(std::span(rows)));
#pragma once

#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "sar/core/error.hpp"
#include "sar/core/log.hpp"
#include "sar/io/output_file.hpp"
#include "sar/io/safe_directory.hpp"

namespace sar {

/// See the top of this file. Not copyable; one per run (or per rank) and PARENT.
class spill_directory {
 public:
  /// The name every spill directory starts with (then -HOST-PID-TOKEN).
  static constexpr std::string_view prefix = "sar-spill";

  /// Creates PARENT/sar-spill-HOST-PID-TOKEN (PARENT too if missing) after removing what
  /// killed runs of this host left in PARENT (see the top of this file). Throws sar::io_error
  /// naming the path when PARENT is not a directory or cannot be written.
  explicit spill_directory(const std::filesystem::path& parent) {
    namespace fs = std::filesystem;
    constexpr const char* where = "sar::spill_directory";
    std::error_code ec;
    fs::create_directories(parent, ec);
    SAR_CHECK(fs::is_directory(parent, ec), io_error, where, ": the spill directory ",
              parent.string(), " is not a directory",
              ec ? message(" (", ec.message(), ")") : std::string());
    remove_stale(parent);
    token_ = detail::random_token();
    path_ = detail::sibling(parent / prefix, "-", token_);
    SAR_CHECK(fs::create_directory(path_, ec) && !ec, io_error, where, ": cannot create ",
              path_.string(), ": ", ec ? ec.message() : "it exists");
    journal_.open(path_ / ".sar-journal");
    journal_ << nlohmann::json{{"token", token_}}.dump() << '\n' << std::flush;
    SAR_CHECK(journal_.good(), io_error, where, ": cannot write ",
              (path_ / ".sar-journal").string());
  }
  spill_directory(const spill_directory&) = delete;             ///< one owner
  spill_directory& operator=(const spill_directory&) = delete;  ///< one owner

  /// Removes the directory and everything in it.
  ~spill_directory() {
    journal_.close();
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }

  /// The run's directory.
  const std::filesystem::path& path() const { return path_; }

  /// Throws sar::io_error naming the directory, `what` and the bytes unless its file system has
  /// `bytes` free for this user.
  void require_free(std::uint64_t bytes, std::string_view what) const {
    const std::uint64_t free = free_bytes();
    SAR_CHECK(bytes <= free, io_error, "sar::spill_directory: ", what, " need ", bytes,
              " bytes in ", path_.parent_path().string(), ", whose file system has ", free,
              " free");
  }

  /// Writes `bytes` as the file `name` of the directory (created, or replaced if this run wrote
  /// it before; a symbolic link there is not followed). Requires a plain name (no '/', not
  /// starting with '.'). Throws sar::invalid_argument for another name, sar::io_error naming
  /// the file (a full file system: the bytes it needed and had free).
  void write(const std::string& name, std::span<const std::byte> bytes) {
    const std::filesystem::path file = add(name);
    const int fd =
        ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    SAR_CHECK(fd >= 0, io_error, "sar::spill_directory: cannot create ", file.string(), ": ",
              std::strerror(errno));
    const int error = detail::write_all(
        fd, std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
    ::close(fd);
    if (error != 0) fail(name, bytes.size(), error, "writing");
  }

  /// Creates the file `name` (or replaces this run's) of `bytes` bytes, every one of them
  /// allocated on disk and zero, and returns it open for reading and writing (the caller closes
  /// it): later writes inside it cannot fail for space. Requires a plain name, as write.
  /// Throws sar::invalid_argument for another name, sar::io_error naming the file (a full file
  /// system: the bytes it needed and had free).
  int create(const std::string& name, std::uint64_t bytes) {
    const std::filesystem::path file = add(name);
    const int fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    SAR_CHECK(fd >= 0, io_error, "sar::spill_directory: cannot create ", file.string(), ": ",
              std::strerror(errno));
    const int error = bytes == 0 ? 0 : ::posix_fallocate(fd, 0, static_cast<off_t>(bytes));
    if (error == 0) return fd;
    ::close(fd);
    fail(name, bytes, error, "allocating");
  }

  /// Reads the file `name` this run wrote into `bytes`, which must be its size. Throws
  /// sar::io_error naming the file when it is missing, of another size, or unreadable.
  void read(const std::string& name, std::span<std::byte> bytes) const {
    const std::filesystem::path file = path_ / name;
    const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    SAR_CHECK(fd >= 0, io_error, "sar::spill_directory: cannot open ", file.string(), ": ",
              std::strerror(errno));
    std::size_t done = 0;
    int error = 0;
    while (done < bytes.size() && error == 0) {
      const ::ssize_t n = ::read(fd, bytes.data() + done, bytes.size() - done);
      if (n > 0) done += static_cast<std::size_t>(n);
      else if (n == 0) break;
      else if (errno != EINTR) error = errno;
    }
    std::byte extra{};
    const bool longer = error == 0 && ::read(fd, &extra, 1) > 0;
    ::close(fd);
    SAR_CHECK(error == 0, io_error, "sar::spill_directory: reading ", file.string(), ": ",
              std::strerror(error));
    SAR_CHECK(done == bytes.size() && !longer, io_error, "sar::spill_directory: ",
              file.string(), " holds ", longer ? "more than " : "", longer ? bytes.size() : done,
              " bytes, ", bytes.size(), " expected");
  }

 private:
  /// The path of a new file `name`, journaled (once) before it exists.
  std::filesystem::path add(const std::string& name) {
    SAR_CHECK(!name.empty() && name.find('/') == std::string::npos && name.front() != '.',
              invalid_argument, "sar::spill_directory: '", name, "' is not a plain file name");
    if (written_.insert(name).second) {
      journal_ << "f " << name << '\n' << std::flush;
      SAR_CHECK(journal_.good(), io_error, "sar::spill_directory: cannot write ",
                (path_ / ".sar-journal").string());
    }
    return path_ / name;
  }

  /// Removes the file `name`, whose `doing` ("writing", "allocating") of `bytes` bytes failed
  /// with `error` (what it holds is of no use), and throws sar::io_error naming it: for a full
  /// file system the bytes it needed and the bytes free.
  [[noreturn]] void fail(const std::string& name, std::uint64_t bytes, int error,
                         const char* doing) const {
    const std::filesystem::path file = path_ / name;
    std::error_code ignored;
    std::filesystem::remove(file, ignored);
    if (error == ENOSPC || error == EDQUOT)
      throw io_error(message("sar::spill_directory: the file system of ",
                             path_.parent_path().string(), " is full: ", doing, " ", name,
                             " needed ", bytes, " bytes (", free_bytes(),
                             " free once it was removed)"));
    throw io_error(message("sar::spill_directory: ", doing, " ", bytes, " bytes for ",
                           file.string(), " failed: ", std::strerror(error)));
  }

  std::uint64_t free_bytes() const {
    struct statvfs fs {};
    if (::statvfs(path_.parent_path().c_str(), &fs) != 0) return 0;
    return static_cast<std::uint64_t>(fs.f_bavail) * static_cast<std::uint64_t>(fs.f_frsize);
  }

  /// Removes the spill directories in `parent` that killed sar runs of this host left (their
  /// journal naming all they hold); others are left, with a warning.
  static void remove_stale(const std::filesystem::path& parent) {
    namespace fs = std::filesystem;
    std::error_code ec;
    std::vector<fs::path> found;
    for (const auto& entry : fs::directory_iterator(parent, ec))
      if (entry.path().filename().string().starts_with(std::string(prefix) + "-"))
        found.push_back(entry.path());
    for (const fs::path& dir : found) {
      const auto name = detail::parse_sibling(dir.filename().string(), std::string(prefix), "-");
      if (!name || !detail::owner_gone(*name)) continue;  // not a spill directory, or running
      std::error_code ignored;
      if (fs::is_directory(fs::symlink_status(dir, ignored)) &&
          detail::journaled(dir, name->token)) {
        fs::remove_all(dir, ignored);
        continue;
      }
      log_warning(message("sar: ", dir.string(), " looks like what a killed sar run spilled, "
                          "but sar cannot prove it wrote all of it: left as it is (remove it "
                          "yourself if it is not yours)"));
    }
  }

  std::filesystem::path path_;
  std::string token_;
  std::ofstream journal_;
  std::set<std::string> written_;
};

}  // namespace sar
