// Safe replacement of an output directory (partition stores, .npy datasets, samples): the new
// content is written into a temporary sibling, flushed to disk, and swapped into place in one
// step, so a failure at any point (an error, a full disk, Ctrl-C, a kill) leaves the previous
// content intact; a directory that is not recognisably ours is never touched.
//
//   sar::replace_directory(out, {"sar-partition-store"}, [&](const fs::path& dir) { ... },
//                          "sar::write_partition_store");
//
// "Ours" means: missing, empty, or holding a metadata file (meta.json unless the kind names
// another) whose "format" is the kind's. The
// temporary sibling is named <target>.sar-partial-<pid>; one left by a process that no longer
// runs (killed midway) is removed by the next replace_directory of the same target, so a
// re-run needs no manual clean-up.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <system_error>

#include <nlohmann/json.hpp>

#include "sar/core/error.hpp"

namespace sar {

/// What a directory of ours is recognised by: its metadata file's "format".
struct directory_kind {
  std::string_view format;
  std::string_view metadata_file = "meta.json";
};

/// The "format" field of dir/metadata_file, or "" if the file is missing or not a JSON
/// object with a string "format".
inline std::string directory_format(const std::filesystem::path& dir,
                                    std::string_view metadata_file = "meta.json") {
  std::ifstream in(dir / metadata_file);
  if (!in) return "";
  const nlohmann::json meta = nlohmann::json::parse(in, nullptr, false);
  if (!meta.is_object() || !meta.contains("format") || !meta["format"].is_string()) return "";
  return meta["format"].get<std::string>();
}

namespace detail {

/// fsync of one path (a file, or a directory's entries). Throws sar::io_error naming it.
inline void sync_path(const std::filesystem::path& path, const char* where) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  SAR_CHECK(fd >= 0, io_error, where, ": cannot open ", path.string(), " to flush it: ",
            std::strerror(errno));
  const int status = ::fsync(fd);
  const int saved = errno;
  ::close(fd);
  SAR_CHECK(status == 0, io_error, where, ": cannot flush ", path.string(), " to disk: ",
            std::strerror(saved));
}

/// Flushes every file and directory under dir, then dir itself.
inline void sync_tree(const std::filesystem::path& dir, const char* where) {
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir))
    if (entry.is_regular_file() || entry.is_directory()) sync_path(entry.path(), where);
  sync_path(dir, where);
}

inline constexpr std::string_view partial_marker = ".sar-partial-";

/// Removes siblings <target>.sar-partial-<pid> whose process no longer runs.
inline void remove_stale_partials(const std::filesystem::path& target) {
  namespace fs = std::filesystem;
  const fs::path parent = target.parent_path().empty() ? fs::path(".") : target.parent_path();
  const std::string prefix = target.filename().string() + std::string(partial_marker);
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(parent, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    const std::string pid = name.substr(prefix.size());
    if (pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos) continue;
    if (::kill(static_cast<pid_t>(std::stol(pid)), 0) == 0 || errno != ESRCH) continue;
    fs::remove_all(entry.path(), ec);
  }
}

}  // namespace detail

/// Whether `target` exists. Throws sar::io_error naming it unless it is missing, an empty
/// directory or a directory of `kind` (what replace_directory may replace). For programs to
/// check their output before long work.
inline bool check_replaceable(const std::filesystem::path& target, directory_kind kind,
                              const char* where) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(target, ec)) return false;
  SAR_CHECK(fs::is_directory(target, ec), io_error, where, ": ", target.string(),
            " exists and is not a directory; refusing to replace it");
  const std::string found = directory_format(target, kind.metadata_file);
  SAR_CHECK(fs::is_empty(target, ec) || found == kind.format, io_error, where, ": ",
            target.string(), " is not empty and not a ", kind.format, " directory (its ",
            kind.metadata_file, " ",
            found.empty() ? std::string("is missing or has no format")
                          : "says format \"" + found + "\"",
            "); refusing to touch it");
  return true;
}

/// Replaces the directory `target` with what write(temporary) puts into a new temporary
/// sibling. Requires target to be missing, an empty directory, or a directory of `kind`
/// (write should produce its metadata file too). Ensures on return: target holds
/// exactly what write wrote, flushed to disk; the previous content is gone. On any failure
/// (write throws, the disk fills, the process dies) target is left as it was and the
/// temporary is removed (or, after a kill, removed by the next call). Throws sar::io_error
/// naming the path for a target that is not ours or a file-system failure, and rethrows what
/// write throws. `where` prefixes the messages.
template <class Write>
void replace_directory(const std::filesystem::path& given, directory_kind kind, Write&& write,
                       const char* where) {
  namespace fs = std::filesystem;
  fs::path target = given.lexically_normal();
  if (target.filename().empty()) target = target.parent_path();  // "out/" -> "out"
  std::error_code ec;
  const bool exists = check_replaceable(target, kind, where);
  detail::remove_stale_partials(target);
  const fs::path temporary =
      target.string() + std::string(detail::partial_marker) + std::to_string(::getpid());
  fs::remove_all(temporary, ec);  // ours: named by this process id
  fs::create_directories(temporary, ec);
  SAR_CHECK(!ec, io_error, where, ": cannot create ", temporary.string(), ": ", ec.message());
  try {
    write(temporary);
    detail::sync_tree(temporary, where);
    if (exists) {  // swap both names in one step: target is always whole
      SAR_CHECK(::renameat2(AT_FDCWD, temporary.c_str(), AT_FDCWD, target.c_str(),
                            RENAME_EXCHANGE) == 0,
                io_error, where, ": cannot move ", temporary.string(), " into place at ",
                target.string(), ": ", std::strerror(errno));
      fs::remove_all(temporary, ec);  // the previous content, now under the temporary name
    } else {
      fs::rename(temporary, target, ec);
      SAR_CHECK(!ec, io_error, where, ": cannot move ", temporary.string(), " into place at ",
                target.string(), ": ", ec.message());
    }
    const fs::path parent = target.parent_path().empty() ? fs::path(".") : target.parent_path();
    detail::sync_path(parent, where);
  } catch (...) {
    fs::remove_all(temporary, ec);
    throw;
  }
}

}  // namespace sar
