// Safe replacement of an output directory (partition stores, .npy datasets, samples): the new
// content is written into a temporary sibling, flushed to disk, and swapped into place in one
// step, so a failure at any point (an error, a full disk, Ctrl-C, a kill) leaves the previous
// content intact; a directory that is not recognisably ours is never touched.
//
//   sar::replace_directory(out, {"sar-partition-store", "meta.json", "meta.json part-*"},
//                          [&](const fs::path& dir) { ... }, "sar::write_partition_store");
//
// "Ours" means: missing, empty, or holding a metadata file whose "format" is the kind's and
// nothing but the names the kind writes (a file a user put there makes it refused, so
// replacing never deletes what sar did not write). A symbolic link is followed. The new
// content is written into <target>.sar-partial-<pid>; where the file system cannot swap two
// names atomically (renameat2 RENAME_EXCHANGE: NFS, Lustre, GPFS), the previous content is
// first renamed to <target>.sar-previous-<pid>. What a killed process leaves is cleaned up
// by the next replace_directory of the same target: its partial directory is removed, and
// its previous content is moved back if the target is missing (else removed).
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
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

/// What a directory of ours is recognised by: its metadata file's "format", and the names of
/// the entries it may hold (space-separated; a trailing * matches any suffix).
struct directory_kind {
  /// The "format" field its metadata file holds (e.g. "sar-partition-store").
  std::string_view format;
  /// Name of the JSON metadata file inside the directory (e.g. "meta.json").
  std::string_view metadata_file;
  /// The names of the entries it may hold (space-separated; a trailing * matches any suffix).
  std::string_view entries;

  /// Whether `name` is one of the entries.
  bool holds(std::string_view name) const {
    for (std::string_view rest = entries; !rest.empty();) {
      const auto space = rest.find(' ');
      const std::string_view pattern = rest.substr(0, space);
      rest = space == std::string_view::npos ? std::string_view() : rest.substr(space + 1);
      if (pattern.ends_with('*') ? name.starts_with(pattern.substr(0, pattern.size() - 1))
                                 : name == pattern)
        return true;
    }
    return false;
  }
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
inline constexpr std::string_view previous_marker = ".sar-previous-";

/// <target><marker><pid>
inline std::filesystem::path sibling(const std::filesystem::path& target,
                                     std::string_view marker, long pid) {
  return target.string() + std::string(marker) + std::to_string(pid);
}


/// The pid in `name` = <prefix><pid> if that process no longer runs on this host, else -1.
inline long dead_pid(std::string_view name, std::string_view prefix) {
  if (!name.starts_with(prefix)) return -1;
  const std::string_view digits = name.substr(prefix.size());
  long pid = 0;
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), pid);
  if (digits.empty() || error != std::errc() || end != digits.data() + digits.size() || pid <= 0)
    return -1;
  return ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH ? pid : -1;
}

/// Cleans up after processes that died replacing `target`: their partial directories (or files)
/// are removed; their previous content goes back to `target` if it is missing, else is removed.
inline void recover_stale(const std::filesystem::path& target) {
  namespace fs = std::filesystem;
  const fs::path parent = target.parent_path().empty() ? fs::path(".") : target.parent_path();
  const std::string name = target.filename().string();
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(parent, ec)) {
    const std::string sibling_name = entry.path().filename().string();
    if (dead_pid(sibling_name, name + std::string(partial_marker)) > 0) {
      fs::remove_all(entry.path(), ec);
    } else if (dead_pid(sibling_name, name + std::string(previous_marker)) > 0) {
      if (!fs::exists(target, ec)) fs::rename(entry.path(), target, ec);
      else fs::remove_all(entry.path(), ec);
    }
  }
}

}  // namespace detail

/// Whether `target` exists. Throws sar::io_error naming it unless it is missing, an empty
/// directory, or a directory of `kind` holding only the kind's entries (what
/// replace_directory may replace). For programs to check their output before long work.
inline bool check_replaceable(const std::filesystem::path& target, directory_kind kind,
                              const char* where) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(target, ec)) return false;
  SAR_CHECK(fs::is_directory(target, ec), io_error, where, ": ", target.string(),
            " exists and is not a directory; refusing to replace it");
  if (fs::is_empty(target, ec)) return true;
  const std::string found = directory_format(target, kind.metadata_file);
  SAR_CHECK(found == kind.format, io_error, where, ": ", target.string(),
            " is not empty and not a ", kind.format, " directory (its ", kind.metadata_file,
            " ",
            found.empty() ? std::string("is missing or has no format")
                          : "says format \"" + found + "\"",
            "); refusing to touch it");
  for (const auto& entry : fs::directory_iterator(target, ec)) {
    const std::string name = entry.path().filename().string();
    SAR_CHECK(kind.holds(name), io_error, where, ": ", target.string(), " holds ", name,
              ", which a ", kind.format, " directory does not; replacing it would delete "
              "that, so it is refused: move it away or choose another output");
  }
  return true;
}

/// Replaces the directory `target` with what write(temporary) puts into a new temporary
/// sibling. Requires target to be missing, an empty directory, or a directory of `kind`
/// (write should produce its metadata file too). Ensures on return: target holds
/// exactly what write wrote, flushed to disk; the previous content is gone. On any failure
/// before the new content is in place (write throws, the disk fills, the process dies)
/// target is left as it was and the temporary is removed (after a kill: by the next call).
/// Throws sar::io_error naming the path for a target that is not ours or a file-system
/// failure, and rethrows what write throws. `where` prefixes the messages.
template <class Write>
void replace_directory(const std::filesystem::path& given, directory_kind kind, Write&& write,
                       const char* where) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path target = given.lexically_normal();
  if (target.filename().empty()) target = target.parent_path();  // "out/" -> "out"
  if (fs::is_symlink(target, ec)) target = fs::canonical(target);  // replace what it points to
  detail::recover_stale(target);
  const bool exists = check_replaceable(target, kind, where);
  const long pid = ::getpid();
  const fs::path temporary = detail::sibling(target, detail::partial_marker, pid);
  const fs::path previous = detail::sibling(target, detail::previous_marker, pid);
  const fs::path parent = target.parent_path().empty() ? fs::path(".") : target.parent_path();
  fs::remove_all(temporary, ec);  // ours: named by this process id
  fs::create_directories(temporary, ec);
  SAR_CHECK(!ec, io_error, where, ": cannot create ", temporary.string(), ": ", ec.message());
  try {
    write(temporary);
    detail::sync_tree(temporary, where);
  } catch (...) {
    fs::remove_all(temporary, ec);
    throw;
  }
  fs::path old_content;  // where the previous content is once the new one is in place
  if (!exists) {
    fs::rename(temporary, target, ec);
  } else if (::renameat2(AT_FDCWD, temporary.c_str(), AT_FDCWD, target.c_str(),
                         RENAME_EXCHANGE) == 0) {
    old_content = temporary;  // swapped: the partial name now holds the previous content
  } else {  // no atomic swap on this file system: two renames, a death between them recovered
    fs::rename(target, previous, ec);
    if (!ec) {
      fs::rename(temporary, target, ec);
      if (ec) fs::rename(previous, target, ec);  // put it back
      else old_content = previous;
    }
  }
  if (ec || (exists && old_content.empty())) {
    std::error_code ignored;
    fs::remove_all(temporary, ignored);
    throw io_error(message(where, ": cannot move ", temporary.string(), " into place at ",
                           target.string(), ": ", ec.message(),
                           " (the previous content is kept)"));
  }
  detail::sync_path(parent, where);  // the new name is durable before the old content goes
  if (!old_content.empty()) fs::remove_all(old_content, ec);
}

/// Writes `json` (indented by 2, then a newline) to `file` through a sibling
/// <file>.sar-partial-<pid> that is flushed to disk and renamed over `file`: a failure at any
/// point leaves the previous `file` as it was (the partial file is removed, or by the next
/// call if the process was killed). For a directory's metadata and for output files a user
/// names (sar-train --metrics-out).
/// Throws sar::io_error "<where>: cannot write <file>: <reason>" on failure.
template <class Json>
void write_json_file(const std::filesystem::path& file, const Json& json, std::string_view where) {
  namespace fs = std::filesystem;
  detail::recover_stale(file);  // removes what a killed earlier writer of `file` left
  const fs::path partial = detail::sibling(file, detail::partial_marker, ::getpid());
  std::string problem;
  {
    std::ofstream out(partial, std::ios::trunc);
    out << json.dump(2) << '\n';
    out.close();
    if (out.fail()) problem = std::strerror(errno);
  }
  if (problem.empty()) {
    try {
      detail::sync_path(partial, "flush");
      fs::rename(partial, file);
    } catch (const std::exception& e) {
      problem = e.what();
    }
  }
  if (!problem.empty()) {
    std::error_code ignored;
    fs::remove(partial, ignored);
    throw io_error(message(where, ": cannot write ", file.string(), ": ", problem));
  }
}

}  // namespace sar
