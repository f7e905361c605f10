// Output files a user names (sar-train --metrics-out, --log-csv; a saved model): written so
// that nothing of the user's is lost and nothing half-written is ever seen.
//
//   sar::output_file out("metrics.json", "sar-train: --metrics-out");
//   out.write(text);              // the whole content; again later with more appended
//
// What the path names decides how:
// - a regular file, or nothing yet: the content goes into an unnamed file in the same
//   directory (O_TMPFILE; where the file system lacks it, a sibling named
//   <file>.sar-partial-<host>-<pid>-<token>), is flushed to disk and renamed over the target:
//   the target is replaced whole or not at all, and a killed writer leaves nothing behind
//   (or, without O_TMPFILE, a sibling no later run removes: it cannot prove it wrote it). The
//   replaced file's permission bits (and, for root, its owner) are kept.
// - a symbolic link: followed (through a chain of links); what it points to is written, the
//   link stays.
// - a character or block device, a FIFO: written in place, never replaced (/dev/null,
//   /dev/stdout); each write() sends only what the previous ones did not. A FIFO without a
//   reader blocks, as any writer of it would.
// - a directory, a socket, or a path whose parent directory is missing: refused
//   (sar::io_error naming the path), nothing written.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <string_view>

#include "sar/core/error.hpp"

namespace sar {

namespace detail {

/// This host's name ("localhost" if unknown): sibling names carry it, so a process id is only
/// ever compared with processes of the host that wrote it.
inline std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0 || name[0] == '\0') return "localhost";
  std::string host(name);
  for (char& c : host)  // a name part, not a path
    if (c == '/' || c == '\\') c = '_';
  return host;
}

/// 16 random hexadecimal digits (std::random_device): the token of a temporary sibling.
inline std::string random_token() {
  std::random_device device;
  const unsigned long long value =
      (static_cast<unsigned long long>(device()) << 32) ^ device();
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", value);
  return text;
}

inline constexpr std::string_view partial_marker = ".sar-partial-";
inline constexpr std::string_view previous_marker = ".sar-previous-";

/// <target><marker><host>-<pid>-<token>: a temporary sibling of target.
inline std::filesystem::path sibling(const std::filesystem::path& target,
                                     std::string_view marker, const std::string& token) {
  return target.string() + std::string(marker) + host_name() + "-" +
         std::to_string(::getpid()) + "-" + token;
}

/// fsync of an open descriptor; returns errno or 0.
inline int sync_descriptor(int fd) { return ::fsync(fd) == 0 ? 0 : errno; }

/// fsync of one path (a file, or a directory's entries). Throws sar::io_error naming it.
inline void sync_path(const std::filesystem::path& path, std::string_view where) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  SAR_CHECK(fd >= 0, io_error, where, ": cannot open ", path.string(), " to flush it: ",
            std::strerror(errno));
  const int status = sync_descriptor(fd);
  ::close(fd);
  SAR_CHECK(status == 0, io_error, where, ": cannot flush ", path.string(), " to disk: ",
            std::strerror(status));
}

/// Writes all of `bytes` to fd; returns errno or 0.
inline int write_all(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return n < 0 ? errno : EIO;
    bytes.remove_prefix(static_cast<std::size_t>(n));
  }
  return 0;
}

/// `path` with every symbolic link along the final component followed (at most 40 links).
/// Throws sar::io_error naming the path for a loop.
inline std::filesystem::path follow_links(std::filesystem::path path, std::string_view where) {
  namespace fs = std::filesystem;
  std::error_code ec;
  for (int hops = 0; fs::is_symlink(path, ec); ++hops) {
    SAR_CHECK(hops < 40, io_error, where, ": ", path.string(), ": too many symbolic links");
    const fs::path next = fs::read_symlink(path, ec);
    SAR_CHECK(!ec, io_error, where, ": cannot read the symbolic link ", path.string(), ": ",
              ec.message());
    path = next.is_absolute() ? next : path.parent_path() / next;
  }
  return path.lexically_normal();
}

}  // namespace detail

/// An output file a user names; see the top of this file.
class output_file {
 public:
  /// Resolves `path` (symbolic links followed) and checks it can be written: requires a
  /// regular file, nothing, a device or a FIFO there, in an existing directory. Nothing is
  /// written yet. `where` prefixes messages ("sar-train: --metrics-out").
  /// Throws sar::io_error naming the path otherwise.
  output_file(const std::filesystem::path& path, std::string where)
      : where_(std::move(where)), target_(path) {
    namespace fs = std::filesystem;
    std::error_code ec;
    const fs::file_status status = fs::status(path, ec);  // through every link
    // A regular file is replaced by renaming, so its real name is needed; a device or a pipe
    // is opened through the path as given (/dev/stdout's /proc links are no file names).
    if (status.type() == fs::file_type::regular || status.type() == fs::file_type::not_found)
      target_ = detail::follow_links(path, where_);
    const fs::path parent = target_.parent_path().empty() ? fs::path(".") : target_.parent_path();
    switch (status.type()) {
      case fs::file_type::not_found:
        SAR_CHECK(fs::is_directory(parent, ec), io_error, where_, ": cannot write ",
                  target_.string(), ": its directory ", parent.string(), " does not exist");
        break;
      case fs::file_type::regular: break;
      case fs::file_type::character:
      case fs::file_type::block:
      case fs::file_type::fifo: stream_ = true; break;
      case fs::file_type::directory:
        throw io_error(message(where_, ": ", target_.string(), " is a directory, not a file"));
      default:
        throw io_error(message(where_, ": ", target_.string(),
                               " is not a regular file, device or FIFO; refusing to write it"));
    }
  }
  ~output_file() {
    if (stream_fd_ >= 0) ::close(stream_fd_);
  }
  output_file(const output_file&) = delete;
  output_file& operator=(const output_file&) = delete;

  /// The file written (symbolic links followed, for a regular file).
  const std::filesystem::path& path() const { return target_; }

  /// Makes the file hold `content`: a regular file is replaced whole, atomically and durably;
  /// a device or FIFO receives the part of `content` past what earlier calls sent (requires
  /// content to extend what they sent). Throws sar::io_error naming the file; on a failure a
  /// regular file keeps its previous content.
  void write(std::string_view content) {
    if (stream_) return write_stream(content);
    replace(content);
  }

 private:
  void write_stream(std::string_view content) {
    SAR_CHECK(content.size() >= sent_, error, where_, ": internal: the content of ",
              target_.string(), " shrank");
    if (stream_fd_ < 0) {
      stream_fd_ = ::open(target_.c_str(), O_WRONLY | O_CLOEXEC);
      SAR_CHECK(stream_fd_ >= 0, io_error, where_, ": cannot open ", target_.string(), ": ",
                std::strerror(errno));
    }
    const int status = detail::write_all(stream_fd_, content.substr(sent_));
    SAR_CHECK(status == 0, io_error, where_, ": cannot write ", target_.string(), ": ",
              std::strerror(status));
    sent_ = content.size();
  }

  void replace(std::string_view content) {
    namespace fs = std::filesystem;
    const fs::path parent = target_.parent_path().empty() ? fs::path(".") : target_.parent_path();
    struct stat previous {};
    const bool existed = ::stat(target_.c_str(), &previous) == 0;
    SAR_CHECK(!existed || S_ISREG(previous.st_mode), io_error, where_, ": ", target_.string(),
              " is no longer a regular file; refusing to replace it");
    // An unnamed file, linked under a temporary name only once complete.
    fs::path named;  // the temporary name, once there is one
    int fd = ::open(parent.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0666);
    const bool unnamed = fd >= 0;
    if (!unnamed) {
      named = detail::sibling(target_, detail::partial_marker, detail::random_token());
      fd = ::open(named.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
      SAR_CHECK(fd >= 0, io_error, where_, ": cannot create ", named.string(), ": ",
                std::strerror(errno));
    }
    int status = detail::write_all(fd, content);
    if (existed && status == 0) {
      if (::fchmod(fd, previous.st_mode & 07777) != 0) status = errno;
      if (::geteuid() == 0 && ::fchown(fd, previous.st_uid, previous.st_gid) != 0) {
        // keeping the owner is a courtesy to the user; the content is what matters
      }
    }
    if (status == 0) status = detail::sync_descriptor(fd);
    if (status == 0 && unnamed) {
      named = detail::sibling(target_, detail::partial_marker, detail::random_token());
      const std::string self = "/proc/self/fd/" + std::to_string(fd);
      if (::linkat(AT_FDCWD, self.c_str(), AT_FDCWD, named.c_str(), AT_SYMLINK_FOLLOW) != 0)
        status = errno;
    }
    ::close(fd);
    if (status == 0 && ::rename(named.c_str(), target_.c_str()) != 0) status = errno;
    if (status != 0) {
      if (!named.empty()) ::unlink(named.c_str());  // ours: this call created it
      throw io_error(message(where_, ": cannot write ", target_.string(), ": ",
                             std::strerror(status), existed ? " (its previous content is kept)" : ""));
    }
    detail::sync_path(parent, where_);
  }

  std::string where_;
  std::filesystem::path target_;
  bool stream_ = false;
  int stream_fd_ = -1;
  std::size_t sent_ = 0;
};

/// output_file(path, where).write(content): the one-shot form.
inline void write_output_file(const std::filesystem::path& path, std::string_view content,
                              std::string where) {
  output_file(path, std::move(where)).write(content);
}

}  // namespace sar
