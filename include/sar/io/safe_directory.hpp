// Safe replacement of an output directory (partition stores, .npy datasets, checkpoints,
// samples). One rule, for every directory sar writes (docs/safe-outputs.md):
//
// 1. A manifest. The directory's metadata file (meta.json, checkpoint.json, ...) lists every
//    file sar wrote there (relative path, size, CRC-32) and every directory, under
//    "manifest", and carries a CRC-32 of its own content ("metadata_crc32"), so an edited
//    metadata file is named, not believed.
// 2. Replacing is allowed only when the directory is exactly what its manifest lists,
//    recursively (same names, kinds and sizes; no symbolic links), or empty, or missing.
//    Anything else is refused with the first foreign entry named: replacing deletes the old
//    content, and sar deletes only what it can prove it wrote.
// 3. The new content is written into a temporary sibling <target>.sar-partial-<host>-<pid>-
//    <token> (the token random), which starts with a journal (.sar-journal) naming every
//    entry before it is created; it is flushed to disk and swapped into place in one step
//    (renameat2 RENAME_EXCHANGE; where the file system lacks it, NFS, Lustre, GPFS, the old
//    content is first renamed to <target>.sar-previous-<host>-<pid>-<token>). Any failure
//    before the swap leaves the previous content as it was.
// 4. What a killed writer leaves is cleaned up by the next replace_directory of the same
//    target, but only siblings of this host whose process is gone and whose content its
//    journal or its sealed manifest proves sar wrote; anything else matching the names is
//    left alone (with a warning).
//
//   sar::replace_directory(out, {"sar-partition-store", "meta.json"},
//                          [&](sar::directory_writer& to) { ... }, "sar::write_partition_store");
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "sar/io/checksum.hpp"
#include "sar/core/error.hpp"
#include "sar/core/log.hpp"
#include "sar/io/output_file.hpp"

namespace sar {

/// What a directory of ours is recognised by: the name of its JSON metadata file and the
/// "format" that file holds.
struct directory_kind {
  /// The "format" field its metadata file holds (e.g. "sar-partition-store").
  std::string_view format;
  /// Name of the JSON metadata file at the top of the directory (e.g. "meta.json").
  std::string_view metadata_file;
  /// The metadata key under which the kind's versions before manifests listed their files
  /// ({relative path: CRC-32}); empty: it had none.
  std::string_view legacy_checksums = {};
};

// ---------------------------------------------------------------------------------------
// The metadata seal: a CRC-32 of the metadata's own content.

/// The key of the seal in a metadata object.
inline constexpr const char* metadata_seal_key = "metadata_crc32";

/// CRC-32 of `meta` without its seal, in a canonical form (keys sorted, no spaces): the same
/// value for the object as written and as parsed back.
template <class Json>
std::uint32_t metadata_crc32(const Json& meta) {
  nlohmann::json canonical = nlohmann::json::parse(meta.dump());
  if (canonical.is_object()) canonical.erase(metadata_seal_key);
  const std::string text = canonical.dump();
  return crc32_update(0, text.data(), text.size());
}

/// Adds the seal to `meta` (a JSON object), replacing an earlier one.
template <class Json>
void seal_metadata(Json& meta) {
  meta[metadata_seal_key] = metadata_crc32(meta);
}

/// Whether `meta` carries a seal.
inline bool is_sealed(const nlohmann::json& meta) {
  return meta.is_object() && meta.contains(metadata_seal_key);
}

/// Throws sar::io_error "<where>: <file> was changed after sar wrote it ..." unless `meta`
/// carries a seal that matches its content.
inline void check_metadata_seal(const nlohmann::json& meta, const std::string& file,
                                std::string_view where) {
  SAR_CHECK(is_sealed(meta) && meta[metadata_seal_key].is_number_unsigned(), io_error, where,
            ": ", file, " has no \"", metadata_seal_key, "\" (sar seals every metadata file it "
            "writes)");
  const auto listed = meta[metadata_seal_key].get<std::uint64_t>();
  const std::uint32_t actual = metadata_crc32(meta);
  SAR_CHECK(listed == actual, io_error, where, ": ", file, " was changed after sar wrote it (its ",
            metadata_seal_key, " is ", listed, ", its content gives ", actual,
            "): an edited metadata file is not trusted; write the output again");
}

// ---------------------------------------------------------------------------------------
// The manifest.

/// Every file and directory sar wrote into an output directory, by path relative to it
/// ("part-0001/features.bin"), with each file's size and CRC-32 (of what its format
/// checksums: a .npy file's array data, a store file whole). The metadata file itself is not
/// listed (it carries its seal).
class manifest {
 public:
  /// A file: its size in bytes (-1: unknown, for older formats) and CRC-32.
  struct file_entry {
    /// Size in bytes (-1: not recorded).
    std::int64_t bytes = -1;
    /// CRC-32 (see the class).
    std::uint32_t crc32 = 0;
  };

  /// Whether `relative` is a path sar may list: non-empty components, none "." or "..", not
  /// absolute, no backslash, NUL or newline.
  static bool valid_path(std::string_view relative) {
    if (relative.empty() || relative.front() == '/' || relative.back() == '/') return false;
    for (std::string_view rest = relative; !rest.empty();) {
      const auto slash = rest.find('/');
      const std::string_view part = rest.substr(0, slash);
      if (part.empty() || part == "." || part == ".." ||
          part.find_first_of(std::string_view("\\\n\r\0", 4)) != std::string_view::npos)
        return false;
      rest = slash == std::string_view::npos ? std::string_view() : rest.substr(slash + 1);
    }
    return true;
  }

  /// Lists the directory `relative` (and its parents). Throws sar::invalid_argument for an
  /// invalid path.
  void add_directory(const std::string& relative) {
    check_path(relative);
    for (auto slash = relative.find('/'); slash != std::string::npos;
         slash = relative.find('/', slash + 1))
      directories_.insert(relative.substr(0, slash));
    directories_.insert(relative);
  }
  /// Lists the file `relative` (and its directories). Throws sar::invalid_argument for an
  /// invalid path.
  void add_file(const std::string& relative, std::int64_t bytes, std::uint32_t crc32) {
    check_path(relative);
    if (const auto slash = relative.rfind('/'); slash != std::string::npos)
      add_directory(relative.substr(0, slash));
    files_[relative] = {bytes, crc32};
  }
  /// Adds every entry of `other`.
  void merge(const manifest& other) {
    files_.insert(other.files_.begin(), other.files_.end());
    directories_.insert(other.directories_.begin(), other.directories_.end());
  }

  /// The files, by relative path.
  const std::map<std::string, file_entry>& files() const { return files_; }
  /// The directories, by relative path.
  const std::set<std::string>& directories() const { return directories_; }
  /// The CRC-32 listed for `relative`, if it is listed.
  std::optional<std::uint32_t> crc32_of(const std::string& relative) const {
    const auto it = files_.find(relative);
    if (it == files_.end()) return std::nullopt;
    return it->second.crc32;
  }

  /// {"files": {path: {"bytes": n, "crc32": c}}, "directories": [path, ...]}
  nlohmann::json to_json() const {
    nlohmann::json files = nlohmann::json::object();
    for (const auto& [path, f] : files_) files[path] = {{"bytes", f.bytes}, {"crc32", f.crc32}};
    return {{"files", files}, {"directories", directories_}};
  }

  /// The manifest a metadata object lists: its "manifest", or, for a format's versions before
  /// manifests, the object under `legacy_checksums` (directory_kind::legacy_checksums: relative
  /// path -> CRC-32; sizes unknown, directories implied). An object with neither lists
  /// nothing. Throws sar::io_error naming `file` for a malformed entry.
  static manifest from_metadata(const nlohmann::json& meta, const std::string& file,
                                std::string_view legacy_checksums = {}) {
    manifest m;
    const auto bad = [&](const std::string& what) {
      return io_error(message("sar::manifest: ", file, ": ", what));
    };
    const auto path_of = [&](const std::string& path) {
      if (!valid_path(path)) throw bad(message("the path '", path, "' is not a relative path"));
      return path;
    };
    const auto crc_of = [&](const nlohmann::json& j, const std::string& path) {
      if (!j.is_number_unsigned() || j.get<std::uint64_t>() > 0xffffffffu)
        throw bad(message("the CRC-32 of ", path, " is ", j.dump()));
      return j.get<std::uint32_t>();
    };
    if (!meta.is_object()) return m;
    if (meta.contains("manifest")) {
      const auto& j = meta["manifest"];
      if (!j.is_object() || !j.contains("files") || !j["files"].is_object() ||
          !j.contains("directories") || !j["directories"].is_array())
        throw bad("\"manifest\" must be an object with \"files\" and \"directories\"");
      for (const auto& d : j["directories"]) {
        if (!d.is_string()) throw bad("a directory of \"manifest\" is not a string");
        m.add_directory(path_of(d.get<std::string>()));
      }
      for (const auto& [path, f] : j["files"].items()) {
        if (!f.is_object() || !f.contains("bytes") || !f["bytes"].is_number_unsigned() ||
            !f.contains("crc32"))
          throw bad(message("the entry of ", path, " needs \"bytes\" and \"crc32\""));
        const auto bytes = f["bytes"].get<std::uint64_t>();
        if (bytes > (std::uint64_t{1} << 62)) throw bad(message(path, " has ", bytes, " bytes"));
        m.add_file(path_of(path), static_cast<std::int64_t>(bytes), crc_of(f["crc32"], path));
      }
    } else if (const std::string legacy(legacy_checksums);
               !legacy.empty() && meta.contains(legacy) && meta[legacy].is_object()) {
      for (const auto& [path, crc] : meta[legacy].items())
        m.add_file(path_of(path), -1, crc_of(crc, path));
    }
    return m;
  }

  /// The first entry under `dir` (recursively, not following symbolic links) that is not
  /// listed as it is: a name not listed, a file listed as a directory or the other way, a
  /// size other than the listed one, a symbolic link or anything else. `ignored` names
  /// top-level entries to skip (the metadata file). Returns "" if there is none, else e.g.
  /// "part-0000/notes.txt, which sar did not write".
  std::string first_foreign_entry(const std::filesystem::path& dir,
                                  const std::set<std::string>& ignored) const {
    namespace fs = std::filesystem;
    std::error_code ec;
    fs::recursive_directory_iterator it(dir, fs::directory_options::none, ec), end;
    if (ec) return message(dir.string(), " cannot be listed: ", ec.message());
    for (; it != end; it.increment(ec)) {
      if (ec) return message("an entry cannot be listed: ", ec.message());
      const std::string path = it->path().lexically_relative(dir).generic_string();
      if (it.depth() == 0 && ignored.contains(path)) {
        if (!it->is_regular_file(ec) || it->is_symlink(ec))
          return message(path, ", which is not a regular file");
        continue;
      }
      const fs::file_status status = it->symlink_status(ec);
      if (fs::is_symlink(status)) return message(path, ", a symbolic link sar did not write");
      if (fs::is_directory(status)) {
        if (!directories_.contains(path)) return message(path, "/, which sar did not write");
        continue;
      }
      const auto listed = files_.find(path);
      if (listed == files_.end() || !fs::is_regular_file(status))
        return message(path, ", which sar did not write");
      const auto bytes = static_cast<std::int64_t>(it->file_size(ec));
      if (listed->second.bytes >= 0 && bytes != listed->second.bytes)
        return message(path, ", which has ", bytes, " bytes where sar wrote ",
                       listed->second.bytes, " (changed since)");
    }
    return "";
  }

  /// The first listed entry that `dir` does not hold as listed ("" if none).
  std::string first_missing_entry(const std::filesystem::path& dir) const {
    namespace fs = std::filesystem;
    std::error_code ec;
    for (const auto& d : directories_)
      if (!fs::is_directory(fs::symlink_status(dir / d, ec))) return d + "/";
    for (const auto& [path, f] : files_) {
      const auto status = fs::symlink_status(dir / path, ec);
      if (!fs::is_regular_file(status) ||
          (f.bytes >= 0 && static_cast<std::int64_t>(fs::file_size(dir / path, ec)) != f.bytes))
        return path;
    }
    return "";
  }

 private:
  static void check_path(const std::string& relative) {
    SAR_CHECK(valid_path(relative), invalid_argument, "sar::manifest: '", relative,
              "' is not a relative path of plain names");
  }

  std::map<std::string, file_entry> files_;
  std::set<std::string> directories_;
};

namespace detail {

/// The journal a temporary directory starts with: one line per entry, written before the
/// entry is created ("d <path>" or "f <path>"), after a first line naming its token.
inline constexpr std::string_view journal_prefix = ".sar-journal";

/// dir/metadata_file parsed (a discarded value if missing or malformed).
inline nlohmann::json read_metadata(const std::filesystem::path& dir,
                                    std::string_view metadata_file) {
  std::error_code ec;
  const auto file = dir / metadata_file;
  if (!std::filesystem::is_regular_file(std::filesystem::symlink_status(file, ec)))
    return nlohmann::json(nlohmann::json::value_t::discarded);
  std::ifstream in(file, std::ios::binary);
  return nlohmann::json::parse(in, nullptr, false);
}

/// Why `dir` (an existing, non-empty directory) is not exactly a sar directory of `kind`
/// ("" if it is: metadata of the kind, sealed if it has a manifest, content as listed).
inline std::string why_not_ours(const std::filesystem::path& dir, directory_kind kind) {
  std::error_code ec;
  if (std::filesystem::is_empty(dir, ec) && !ec) return "";
  const nlohmann::json meta = read_metadata(dir, kind.metadata_file);
  const std::string file = (dir / kind.metadata_file).string();
  if (!meta.is_object() || !meta.contains("format") || !meta["format"].is_string()) {
    std::string first;  // the first entry by name, to say what would be lost
    for (const auto& entry : std::filesystem::directory_iterator(dir, ec))
      if (first.empty() || entry.path().filename().string() < first)
        first = entry.path().filename().string();
    return message("it holds ", first.empty() ? std::string("entries") : "'" + first + "'",
                   " and its ", kind.metadata_file, " is missing or has no format, so it is not ",
                   "a ", kind.format, " directory");
  }
  if (meta["format"] != kind.format)
    return message("it is not empty and not a ", kind.format, " directory (its ",
                   kind.metadata_file, " says format ", meta["format"].dump(), ")");
  try {
    if (meta.contains("manifest") || is_sealed(meta)) check_metadata_seal(meta, file, "sar");
    const manifest listed = manifest::from_metadata(meta, file, kind.legacy_checksums);
    if (listed.files().empty() && listed.directories().empty() && !meta.contains("manifest"))
      return message("its ", kind.metadata_file, " lists no manifest (written by an older sar), "
                     "so sar cannot prove it wrote everything in it");
    const std::string foreign =
        listed.first_foreign_entry(dir, {std::string(kind.metadata_file)});
    if (!foreign.empty()) return message("it holds ", foreign);
  } catch (const io_error& e) {
    return e.what();
  }
  return "";
}

/// The parts of a temporary sibling's name <target><marker><host>-<pid>-<token>.
struct sibling_name {
  std::string host;
  long pid = 0;
  std::string token;
};

/// `name` parsed as a sibling of `target_name` with `marker`; nullopt if it is not one.
inline std::optional<sibling_name> parse_sibling(std::string_view name,
                                                 const std::string& target_name,
                                                 std::string_view marker) {
  const std::string prefix = target_name + std::string(marker);
  if (!name.starts_with(prefix)) return std::nullopt;
  std::string_view rest = name.substr(prefix.size());
  const auto token_dash = rest.rfind('-');
  if (token_dash == std::string_view::npos) return std::nullopt;
  const std::string_view token = rest.substr(token_dash + 1);
  rest = rest.substr(0, token_dash);
  const auto pid_dash = rest.rfind('-');
  if (pid_dash == std::string_view::npos || pid_dash == 0) return std::nullopt;
  const std::string_view digits = rest.substr(pid_dash + 1);
  long pid = 0;
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), pid);
  const bool hex = token.size() == 16 && token.find_first_not_of("0123456789abcdef") ==
                                             std::string_view::npos;
  if (!hex || digits.empty() || error != std::errc() || end != digits.data() + digits.size() ||
      pid <= 0)
    return std::nullopt;
  return sibling_name{std::string(rest.substr(0, pid_dash)), pid, std::string(token)};
}

/// Whether process `pid` of this host has ended: no such process, or a zombie (dead, only not
/// yet reaped: a killed MPI rank whose launcher died waits for init, which may never reap it).
inline bool process_ended(long pid) {
  if (::kill(static_cast<pid_t>(pid), 0) != 0) return errno == ESRCH;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  const auto name_end = line.rfind(')');  // "pid (name) state ...": the name may hold spaces
  return name_end != std::string::npos && name_end + 2 < line.size() &&
         (line[name_end + 2] == 'Z' || line[name_end + 2] == 'X');
}

/// Whether the sibling's process is gone: same host, and its pid ended (see process_ended).
inline bool owner_gone(const sibling_name& s) {
  return s.host == host_name() && process_ended(s.pid);
}

/// Whether every entry under `dir` is named by one of its journals (.sar-journal*) whose
/// first line names `token`.
inline bool journaled(const std::filesystem::path& dir, const std::string& token) {
  namespace fs = std::filesystem;
  std::error_code ec;
  manifest listed;
  std::set<std::string> journals;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with(journal_prefix)) continue;
    std::ifstream in(entry.path());
    std::string line;
    if (!std::getline(in, line)) return false;
    const auto head = nlohmann::json::parse(line, nullptr, false);
    if (!head.is_object() || head.value("token", std::string()) != token) return false;
    journals.insert(name);
    while (std::getline(in, line)) {
      if (line.size() < 3 || line[1] != ' ' || !manifest::valid_path(line.substr(2))) continue;
      if (line[0] == 'd') listed.add_directory(line.substr(2));
      if (line[0] == 'f') listed.add_file(line.substr(2), -1, 0);
    }
  }
  return !journals.empty() && !ec && listed.first_foreign_entry(dir, journals).empty();
}

/// Cleans up after processes that died replacing `target` (rule 4 at the top of this file):
/// their partial directories are removed, and their previous content goes back to `target` if
/// it is missing, else is removed; only siblings of this host whose process is gone, and only
/// if their journal or sealed manifest proves sar wrote all of it. Others are left (warned).
inline void recover_stale(const std::filesystem::path& target, directory_kind kind) {
  namespace fs = std::filesystem;
  const fs::path parent = target.parent_path().empty() ? fs::path(".") : target.parent_path();
  const std::string name = target.filename().string();
  std::error_code ec;
  std::vector<fs::path> siblings;  // listed first: the loop below renames and removes
  for (const auto& entry : fs::directory_iterator(parent, ec))
    if (entry.path().filename().string().starts_with(name + ".sar-"))
      siblings.push_back(entry.path());
  for (const fs::path& path : siblings) {
    const std::string sibling = path.filename().string();
    const auto partial = parse_sibling(sibling, name, partial_marker);
    const auto previous = partial ? std::nullopt : parse_sibling(sibling, name, previous_marker);
    const auto& found = partial ? partial : previous;
    if (!found || !owner_gone(*found)) continue;
    const bool directory = fs::is_directory(fs::symlink_status(path, ec));
    const bool proven = directory && (why_not_ours(path, kind).empty() ||
                                      (partial && journaled(path, found->token)));
    if (!proven) {
      log_warning(message("sar: ", path.string(), " looks like what a killed sar process left, "
                          "but sar cannot prove it wrote all of it: left as it is (remove it "
                          "yourself if it is not yours)"));
      continue;
    }
    std::error_code ignored;
    if (previous && !fs::exists(fs::symlink_status(target, ignored))) {
      fs::rename(path, target, ignored);
      continue;
    }
    fs::remove_all(path, ignored);
  }
}

/// Flushes every file and directory under dir, then dir itself.
inline void sync_tree(const std::filesystem::path& dir, std::string_view where) {
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir))
    if (entry.is_regular_file() || entry.is_directory()) sync_path(entry.path(), where);
  sync_path(dir, where);
}

/// `given` made absolute and normal, without a trailing slash, a symbolic link followed.
inline std::filesystem::path output_target(const std::filesystem::path& given,
                                           std::string_view where) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path target = fs::absolute(given, ec).lexically_normal();
  if (target.filename().empty()) target = target.parent_path();  // "out/" -> "out"
  return follow_links(target, where);
}

}  // namespace detail

/// The new content of an output directory as it is written (replace_directory hands one to
/// its writer): creates entries through a journal, records each file in the manifest, and
/// writes the metadata file last, with the manifest and the seal.
class directory_writer {
 public:
  /// Starts writing into the existing empty directory `dir` (a temporary sibling named with
  /// `token`): creates its journal `journal` (several writers of one directory use one journal
  /// each). Throws sar::io_error naming the journal if it cannot be created.
  directory_writer(std::filesystem::path dir, directory_kind kind, std::string token,
                   std::string where, std::string journal = std::string(detail::journal_prefix))
      : dir_(std::move(dir)), kind_(kind), where_(std::move(where)), journal_(std::move(journal)) {
    const auto file = dir_ / journal_;
    journal_fd_ = ::open(file.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644);
    SAR_CHECK(journal_fd_ >= 0, io_error, where_, ": cannot create ", file.string(), ": ",
              std::strerror(errno));
    try {
      note(nlohmann::json{{"token", token}, {"pid", ::getpid()}, {"host", detail::host_name()}}
               .dump());
    } catch (...) {
      close_journal();
      throw;
    }
  }
  ~directory_writer() { close_journal(); }
  directory_writer(const directory_writer&) = delete;
  directory_writer& operator=(const directory_writer&) = delete;

  /// The directory being written.
  const std::filesystem::path& path() const { return dir_; }
  /// What has been recorded so far.
  const sar::manifest& contents() const { return manifest_; }

  /// Creates the directory `relative` (and its parents); returns its path. Throws
  /// sar::io_error naming it on failure, sar::invalid_argument for an invalid path.
  std::filesystem::path make_directory(const std::string& relative) {
    manifest_.add_directory(relative);
    note("d " + relative);
    const auto path = dir_ / relative;
    std::error_code ec;
    std::filesystem::create_directories(path, ec);
    SAR_CHECK(!ec, io_error, where_, ": cannot create directory ", path.string(), ": ",
              ec.message());
    return path;
  }

  /// Writes the file `relative` with write(path), which returns its CRC-32, and records it
  /// with its size. Its directory must have been made. Returns the CRC-32. Rethrows what
  /// write throws.
  template <class Write>
  std::uint32_t add_file(const std::string& relative, Write&& write) {
    SAR_CHECK(manifest::valid_path(relative), invalid_argument, where_, ": internal: '",
              relative, "' is not a relative path");
    note("f " + relative);
    const auto path = dir_ / relative;
    const std::uint32_t crc = write(path);
    std::error_code ec;
    const auto bytes = std::filesystem::file_size(path, ec);
    SAR_CHECK(!ec, io_error, where_, ": cannot stat ", path.string(), " after writing it: ",
              ec.message());
    manifest_.add_file(relative, static_cast<std::int64_t>(bytes), crc);
    return crc;
  }

  /// Records the files another writer of this directory (another rank) wrote.
  void merge(const sar::manifest& other) { manifest_.merge(other); }

  /// Writes the metadata file: `meta` with "manifest" (everything recorded) and the seal.
  /// Call it last. Throws sar::io_error naming the file.
  template <class Json>
  void write_metadata(Json meta) {
    meta["manifest"] = manifest_.to_json();
    seal_metadata(meta);
    note("f " + std::string(kind_.metadata_file));
    const auto file = dir_ / kind_.metadata_file;
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out << meta.dump(2) << '\n';
    out.close();
    SAR_CHECK(!out.fail(), io_error, where_, ": cannot write ", file.string(), ": ",
              std::strerror(errno));
    metadata_written_ = true;
  }

  /// For one of several writers of one directory (a rank each, each with its own journal):
  /// flushes what it recorded to disk. The last writer then merges the others' contents(),
  /// writes the metadata and calls finish(). Throws sar::io_error.
  void finish_share() {
    for (const auto& [path, file] : manifest_.files()) detail::sync_path(dir_ / path, where_);
    for (const auto& d : manifest_.directories()) detail::sync_path(dir_ / d, where_);
  }

  /// Ensures the directory holds exactly the metadata file, the journals and what was
  /// recorded, then removes the journals. Throws sar::error if not (a writer that created
  /// something without recording it).
  void finish() {
    SAR_CHECK(metadata_written_, error, where_, ": internal: ", dir_.string(),
              " was written without its ", kind_.metadata_file);
    std::set<std::string> ignored{std::string(kind_.metadata_file)};
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(dir_, ec))
      if (entry.path().filename().string().starts_with(detail::journal_prefix))
        ignored.insert(entry.path().filename().string());
    const std::string foreign = manifest_.first_foreign_entry(dir_, ignored);
    const std::string missing = manifest_.first_missing_entry(dir_);
    SAR_CHECK(foreign.empty() && missing.empty(), error, where_, ": internal: ", dir_.string(),
              " differs from its manifest: ", foreign.empty() ? missing + " is missing" : foreign);
    close_journal();
    for (const auto& journal : ignored)
      if (journal.starts_with(detail::journal_prefix)) std::filesystem::remove(dir_ / journal, ec);
  }

 private:
  void note(const std::string& line) {
    const int status = detail::write_all(journal_fd_, line + "\n");
    SAR_CHECK(status == 0, io_error, where_, ": cannot write the journal of ", dir_.string(), ": ",
              std::strerror(status));
  }
  void close_journal() {
    if (journal_fd_ >= 0) ::close(journal_fd_);
    journal_fd_ = -1;
  }

  std::filesystem::path dir_;
  directory_kind kind_;
  std::string where_, journal_;
  int journal_fd_ = -1;
  sar::manifest manifest_;
  bool metadata_written_ = false;
};

/// Whether `target` exists. Throws sar::io_error naming it, and why, unless it is missing, an
/// empty directory, or exactly a sar directory of `kind` (rule 2 at the top of this file: what
/// replace_directory may replace). For programs to check their output before long work.
inline bool check_replaceable(const std::filesystem::path& given, directory_kind kind,
                              std::string_view where) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path target = detail::output_target(given, where);
  const fs::file_status status = fs::status(target, ec);
  if (!fs::exists(status)) return false;
  SAR_CHECK(fs::is_directory(status), io_error, where, ": ", target.string(),
            " exists and is not a directory; refusing to replace it");
  if (fs::is_empty(target, ec)) return true;
  const std::string why = detail::why_not_ours(target, kind);
  SAR_CHECK(why.empty(), io_error, where, ": ", target.string(), ": ", why,
            "; replacing it would delete what sar did not write, so it is refused: move it "
            "away or choose another output");
  return true;
}

namespace detail {

/// The steps of replace_directory, for writers that split them over ranks (sar/partition/
/// store.hpp). prepare: the target (absolute, links followed), after cleaning up what killed
/// writers left and checking it may be replaced; whether it exists. Throws sar::io_error.
struct replacement {
  std::filesystem::path target;     ///< what is replaced
  bool exists = false;              ///< whether it exists (an empty or sar directory)
  std::string token;                ///< the temporary sibling's random token
  std::filesystem::path temporary;  ///< <target>.sar-partial-<host>-<pid>-<token>, created
};

/// Checks the target and creates the temporary sibling (rules 2 and 3 at the top).
inline replacement begin_replacement(const std::filesystem::path& given, directory_kind kind,
                                     std::string_view where) {
  namespace fs = std::filesystem;
  replacement r;
  r.target = output_target(given, where);
  recover_stale(r.target, kind);
  r.exists = check_replaceable(r.target, kind, where);
  r.token = random_token();
  r.temporary = sibling(r.target, partial_marker, r.token);
  std::error_code ec;
  SAR_CHECK(fs::create_directory(r.temporary, ec) && !ec, io_error, where, ": cannot create ",
            r.temporary.string(), ": ", ec ? ec.message() : "it exists");
  return r;
}

/// Swaps the complete, flushed temporary into place and removes the previous content (if it is
/// still exactly sar's; else keeps it beside, warned). On failure the target is as it was, the
/// temporary removed. Throws sar::io_error naming the paths.
inline void finish_replacement(const replacement& r, directory_kind kind, std::string_view where) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path previous = sibling(r.target, previous_marker, r.token);
  fs::path old_content;  // where the previous content is once the new one is in place
  if (!r.exists) {
    fs::rename(r.temporary, r.target, ec);
  } else if (::renameat2(AT_FDCWD, r.temporary.c_str(), AT_FDCWD, r.target.c_str(),
                         RENAME_EXCHANGE) == 0) {
    old_content = r.temporary;  // swapped: the partial name now holds the previous content
  } else {  // no atomic swap on this file system: two renames, a death between them recovered
    fs::rename(r.target, previous, ec);
    if (!ec) {
      fs::rename(r.temporary, r.target, ec);
      if (ec) fs::rename(previous, r.target, ec);  // put it back
      else old_content = previous;
    }
  }
  if (ec || (r.exists && old_content.empty())) {
    std::error_code ignored;
    fs::remove_all(r.temporary, ignored);
    throw io_error(message(where, ": cannot move ", r.temporary.string(), " into place at ",
                           r.target.string(), ": ", ec.message(),
                           " (the previous content is kept)"));
  }
  sync_path(r.target.parent_path(), where);  // the new name is durable before the old goes
  if (old_content.empty()) return;
  // Checked again: a user may have added to it while the new content was written.
  if (const std::string why = why_not_ours(old_content, kind); why.empty())
    fs::remove_all(old_content, ec);
  else
    log_warning(message(where, ": the previous content of ", r.target.string(), " changed while "
                        "it was replaced (", why, "); it is kept as ", old_content.string()));
}

}  // namespace detail

/// Replaces the directory `given` with what write(directory_writer&) puts into a new temporary
/// sibling (rules at the top of this file). Requires `given` to be missing, an empty directory
/// or exactly a sar directory of `kind`; write must end with writer.write_metadata(...).
/// Ensures on return: the target holds exactly what write wrote, flushed to disk; the
/// previous content is gone (or, if someone added to it during the write, kept beside it with
/// a warning). On any failure before the new content is in place the target is left as it
/// was and the temporary is removed (after a kill: by the next call).
/// Throws sar::io_error naming the path for a target that is not ours or a file-system
/// failure; rethrows what write throws. `where` prefixes the messages.
template <class Write>
void replace_directory(const std::filesystem::path& given, directory_kind kind, Write&& write,
                       std::string_view where) {
  const detail::replacement r = detail::begin_replacement(given, kind, where);
  try {
    directory_writer writer(r.temporary, kind, r.token, std::string(where));
    write(writer);
    writer.finish();
    detail::sync_tree(r.temporary, where);
  } catch (...) {
    std::error_code ec;
    std::filesystem::remove_all(r.temporary, ec);  // ours: created under a fresh random name
    throw;
  }
  detail::finish_replacement(r, kind, where);
}

/// Writes `json` (indented by 2, then a newline) to `file` as sar::output_file writes (atomic
/// replace of a regular file, a device or FIFO written in place, a symbolic link followed).
/// Throws sar::io_error "<where>: ..." naming the file on failure.
template <class Json>
void write_json_file(const std::filesystem::path& file, const Json& json, std::string_view where) {
  write_output_file(file, json.dump(2) + "\n", std::string(where));
}

}  // namespace sar
