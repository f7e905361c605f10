// Link prediction's split on disk: a folder split/<name>/ beside a dataset's files (an OGB raw
// directory or a sar .npy dataset), of NumPy int64 arrays of dataset node ids, OGB's names:
//
//   train_edge.npy              [E, 2]  supervision positives (the graph's own edges, once)
//   valid_edge.npy              [n, 2]  held-out positives, source in column 0
//   test_edge.npy               [t, 2]
//   valid_edge_neg.npy          [m, 2]  shared negatives (ogbl-collab: Hits@K)
//   test_edge_neg.npy           [m', 2]
//   valid_target_node_neg.npy   [n, K]  optional: negative destinations of each positive's
//   test_target_node_neg.npy    [t, K]  source (ogbl-citation2: MRR); both or neither
//
// On a heterogeneous graph the pair arrays may carry each pair's relation (an edge type of the
// dataset, 0-based) in a third column: [rows, 3] = (source, destination, relation), every pair
// array alike (per-source negatives take their positive's relation).
//
// A partition store written from such a dataset carries its splits (copy_link_splits), in the
// dataset's node ids, read as a dataset's are.
//
// The dataset's graph is the message-passing graph: no held-out positive may be one of its
// edges (sar/graph/edge_split.hpp checks; sar-convert --split-edges writes such splits).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "sar/core/error.hpp"
#include "sar/graph/edge_split.hpp"
#include "sar/io/checksum.hpp"
#include "sar/io/npy_file.hpp"
#include "sar/io/safe_directory.hpp"

namespace sar {

/// The folder of the link split `name` of the dataset at `dataset`.
inline std::filesystem::path link_split_dir(const std::filesystem::path& dataset,
                                            const std::string& name) {
  return dataset / "split" / name;
}

/// Whether the dataset at `dataset` has the link split `name` (its train_edge.npy).
inline bool has_link_split(const std::filesystem::path& dataset, const std::string& name) {
  std::error_code ec;
  return std::filesystem::is_regular_file(link_split_dir(dataset, name) / "train_edge.npy", ec);
}

namespace detail::link_files {
inline std::vector<std::int64_t> interleave(const node_pairs& pairs, bool typed) {
  const std::size_t w = typed ? 3 : 2;
  std::vector<std::int64_t> out(w * pairs.size());
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    out[w * i] = pairs.source[i];
    out[w * i + 1] = pairs.destination[i];
    if (typed) out[w * i + 2] = pairs.relation_of(i);
  }
  return out;
}

// Rows [m share / shares, m (share + 1) / shares) of an array of m rows.
inline std::pair<std::int64_t, std::int64_t> share_rows(std::int64_t m, int share, int shares) {
  return {m * share / shares, m * (share + 1) / shares};
}

// Share `share` of `shares` of the pairs of `file` ([rows, 2], or [rows, 3] with relations;
// share_rows), every id in [0, num_nodes) and relation in [0, num_relations), read in pieces (no
// copy of the array beside the pairs); `first` := the row of the share's first pair. Throws
// sar::io_error for the array's form, sar::invalid_argument naming the file and row for an id
// or relation out of range, and for an empty array when `required`.
inline node_pairs read_pairs(const std::filesystem::path& file, node_t num_nodes, bool required,
                             std::int32_t num_relations, const char* where, int share = 0,
                             int shares = 1, std::int64_t* first = nullptr) {
  const npy_header header = read_npy_header(file);
  SAR_CHECK(header.dtype == npy_dtype::int64, io_error, where, ": ", file.string(), " holds ",
            npy_dtype_name(header.dtype), ", expected int64 node ids");
  SAR_CHECK(header.shape.size() == 2 && (header.shape[1] == 2 || header.shape[1] == 3), io_error,
            where, ": ", file.string(), " has shape ", npy_shape_string(header.shape),
            ", expected (rows, 2), or (rows, 3) with each pair's relation");
  SAR_CHECK(!required || header.shape[0] > 0, invalid_argument, where, ": ", file.string(),
            " holds no pair");
  const std::int64_t w = header.shape[1];
  const auto [begin, end] = share_rows(header.shape[0], share, shares);
  if (first) *first = begin;
  node_pairs out;
  out.source.reserve(static_cast<std::size_t>(end - begin));
  out.destination.reserve(static_cast<std::size_t>(end - begin));
  if (w == 3) out.relation.reserve(static_cast<std::size_t>(end - begin));
  constexpr std::int64_t piece = std::int64_t{1} << 20;  // rows read at once
  std::vector<std::int64_t> ids;
  for (std::int64_t at = begin; at < end; at += piece) {
    const std::int64_t count = std::min(piece, end - at);
    ids.resize(static_cast<std::size_t>(w * count));
    read_npy_elements(file, header, static_cast<std::uint64_t>(w * at),
                      static_cast<std::uint64_t>(w * count), ids.data());
    for (std::int64_t k = 0; k < count; ++k) {
      const std::int64_t u = ids[static_cast<std::size_t>(w * k)];
      const std::int64_t v = ids[static_cast<std::size_t>(w * k + 1)];
      SAR_CHECK(u >= 0 && u < num_nodes && v >= 0 && v < num_nodes, invalid_argument, where,
                ": ", file.string(), ", row ", at + k, ": pair (", u, ", ", v,
                ") outside the ", num_nodes, " nodes");
      if (w == 2) {
        out.push(u, v);
        continue;
      }
      const std::int64_t r = ids[static_cast<std::size_t>(w * k + 2)];
      SAR_CHECK(r >= 0 && r < num_relations, invalid_argument, where, ": ", file.string(),
                ", row ", at + k, ": relation ", r, " outside the graph's ", num_relations,
                " relations");
      out.push(u, v, static_cast<std::int32_t>(r));
    }
  }
  return out;
}
}  // namespace detail::link_files

/// The node pairs of the .npy file `file` (int64, shape (m, 2), or (m, 3) with each pair's
/// relation, dataset ids), every id in [0, num_nodes) and relation in [0, num_relations). Not
/// collective. Throws sar::io_error naming the file for another dtype or shape,
/// sar::invalid_argument naming the file and row for an id or relation out of range.
inline node_pairs read_node_pairs(const std::filesystem::path& file, node_t num_nodes,
                                  std::int32_t num_relations = 1) {
  return detail::link_files::read_pairs(file, num_nodes, false, num_relations,
                                        "sar::read_node_pairs");
}

/// Writes `split` into split/`name`/ of the directory `out` is writing (the arrays at the top
/// of this file; three columns when the split is typed). Throws what directory_writer and
/// write_npy throw.
inline void write_link_split(directory_writer& out, const link_split& split,
                             const std::string& name) {
  namespace lf = detail::link_files;
  const std::string dir = "split/" + name + "/";
  out.make_directory(dir.substr(0, dir.size() - 1));
  const bool typed = split.typed();
  const auto pairs = [&](const char* file, const node_pairs& p) {
    const std::vector<std::int64_t> ids = lf::interleave(p, typed);
    const std::array<std::int64_t, 2> shape{static_cast<std::int64_t>(p.size()), typed ? 3 : 2};
    out.add_file(dir + file, [&](const std::filesystem::path& path) {
      return write_npy(path, npy_dtype::int64, shape, ids.data());
    });
  };
  pairs("train_edge.npy", split.train);
  pairs("valid_edge.npy", split.valid);
  pairs("test_edge.npy", split.test);
  pairs("valid_edge_neg.npy", split.valid_negatives);
  pairs("test_edge_neg.npy", split.test_negatives);
  if (split.per_source == 0) return;
  const auto targets = [&](const char* file, const std::vector<node_t>& t, std::size_t rows) {
    const std::array<std::int64_t, 2> shape{static_cast<std::int64_t>(rows), split.per_source};
    out.add_file(dir + file, [&](const std::filesystem::path& path) {
      return write_npy(path, npy_dtype::int64, shape, t.data());
    });
  };
  targets("valid_target_node_neg.npy", split.valid_target_negatives, split.valid.size());
  targets("test_target_node_neg.npy", split.test_target_negatives, split.test.size());
}

/// Copies every link split of the dataset at `dataset` (each folder split/<name>/ holding a
/// train_edge.npy; its .npy arrays, byte for byte, streamed) into the directory `out` is
/// writing, e.g. a partition store, whose readers find them as they find a dataset's. Returns
/// the names copied (none for a dataset without). Throws sar::io_error naming the file that
/// cannot be read, what directory_writer throws.
inline std::vector<std::string> copy_link_splits(directory_writer& out,
                                                 const std::filesystem::path& dataset) {
  namespace fs = std::filesystem;
  constexpr const char* where = "sar::copy_link_splits";
  std::vector<std::string> names;
  std::error_code ec;
  if (!fs::is_directory(dataset / "split", ec)) return names;
  for (const auto& entry : fs::directory_iterator(dataset / "split", ec))
    if (has_link_split(dataset, entry.path().filename().string()))
      names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  if (!names.empty()) out.make_directory("split");
  std::vector<char> buffer(std::size_t{1} << 20);
  for (const std::string& name : names) {
    const fs::path from = link_split_dir(dataset, name);
    out.make_directory("split/" + name);
    std::vector<std::string> files;
    for (const auto& entry : fs::directory_iterator(from, ec))
      if (entry.is_regular_file() && entry.path().extension() == ".npy")
        files.push_back(entry.path().filename().string());
    std::sort(files.begin(), files.end());
    for (const std::string& file : files)
      out.add_file("split/" + name + "/" + file, [&](const fs::path& to) {
        std::ifstream in(from / file, std::ios::binary);
        std::ofstream copy(to, std::ios::binary | std::ios::trunc);
        SAR_CHECK(in && copy, io_error, where, ": cannot copy ", (from / file).string(), " to ",
                  to.string());
        std::uint32_t crc = 0;
        while (in) {
          in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
          const auto got = static_cast<std::size_t>(in.gcount());
          crc = crc32_update(crc, buffer.data(), got);
          copy.write(buffer.data(), static_cast<std::streamsize>(got));
        }
        SAR_CHECK(in.eof() && copy.flush(), io_error, where, ": copying ",
                  (from / file).string(), " to ", to.string(), " failed");
        return crc;
      });
  }
  return names;
}

/// Reads the link split `name` of the dataset at `dataset`, whose graph has `num_nodes` nodes
/// (the arrays at the top of this file), or share `share` of `shares` of it: rows
/// [m share / shares, m (share + 1) / shares) of each array of m rows (per-source negatives
/// with their positives; split.train_ids the train rows), so P ranks read it once between
/// them. Relations (a third column) are in [0, num_relations). Throws sar::io_error naming the
/// file for a missing array, a dtype other than int64 or a wrong shape (pair arrays of
/// different widths, target negatives whose rows are not their positives', or whose K differ
/// between valid and test, or only one of them); sar::invalid_argument naming the file and row
/// for an id or relation out of range, and for an empty train, valid or test set. Leaks are the
/// caller's to check (check_held_out), against the graph it passes messages on.
inline link_split read_link_split(const std::filesystem::path& dataset, const std::string& name,
                                  node_t num_nodes, int share = 0, int shares = 1,
                                  std::int32_t num_relations = 1) {
  namespace lf = detail::link_files;
  namespace fs = std::filesystem;
  constexpr const char* where = "sar::read_link_split";
  const fs::path dir = link_split_dir(dataset, name);
  std::error_code ec;
  for (const char* file : {"train_edge.npy", "valid_edge.npy", "test_edge.npy",
                           "valid_edge_neg.npy", "test_edge_neg.npy"})
    SAR_CHECK(fs::is_regular_file(dir / file, ec), io_error, where, ": ", (dir / file).string(),
              " is missing (a link split holds train_edge, valid_edge, test_edge, "
              "valid_edge_neg and test_edge_neg .npy arrays)");
  SAR_CHECK(shares >= 1 && share >= 0 && share < shares, invalid_argument, where, ": share ",
            share, " of ", shares);
  // Every pair array of one width: relations in all or in none (other shapes: read_pairs).
  const auto columns = [&](const char* file) {  // 2 or 3, else -1
    const npy_header header = read_npy_header(dir / file);
    const bool pairs = header.shape.size() == 2 && (header.shape[1] == 2 || header.shape[1] == 3);
    return pairs ? header.shape[1] : std::int64_t{-1};
  };
  const std::int64_t width = columns("train_edge.npy");
  for (const char* file : {"valid_edge.npy", "test_edge.npy", "valid_edge_neg.npy",
                           "test_edge_neg.npy"}) {
    const std::int64_t w = columns(file);
    SAR_CHECK(w < 0 || width < 0 || w == width, io_error, where, ": ", (dir / file).string(),
              " has ", w, " columns, train_edge.npy ", width,
              " (each pair's relation in a third column of every pair array, or of none)");
  }
  link_split split;
  const auto pairs = [&](const char* file, bool required, std::int64_t* first = nullptr) {
    return lf::read_pairs(dir / file, num_nodes, required, num_relations, where, share, shares,
                          first);
  };
  std::int64_t first_train = 0;
  split.train = pairs("train_edge.npy", true, &first_train);
  if (shares > 1)
    for (std::size_t i = 0; i < split.train.size(); ++i)
      split.train_ids.push_back(first_train + static_cast<edge_t>(i));
  split.valid = pairs("valid_edge.npy", true);
  split.test = pairs("test_edge.npy", true);
  split.valid_negatives = pairs("valid_edge_neg.npy", false);
  split.test_negatives = pairs("test_edge_neg.npy", false);
  const fs::path valid_targets = dir / "valid_target_node_neg.npy";
  const fs::path test_targets = dir / "test_target_node_neg.npy";
  const bool with_valid = fs::is_regular_file(valid_targets, ec);
  const bool with_test = fs::is_regular_file(test_targets, ec);
  SAR_CHECK(with_valid == with_test, io_error, where, ": ",
            (with_valid ? test_targets : valid_targets).string(),
            " is missing (per-source negatives come for valid and test together)");
  if (!with_valid) return split;
  // Each file's rows are its positives'; K (the columns) the same in both.
  std::int64_t k = -1;
  const auto targets = [&](const fs::path& file, const char* positives_file) {
    const std::int64_t positives = read_npy_header(dir / positives_file).shape[0];
    const npy_header header = read_npy_header(file);
    SAR_CHECK(header.dtype == npy_dtype::int64 && header.shape.size() == 2, io_error, where,
              ": ", file.string(), " holds ", npy_dtype_name(header.dtype), " of shape ",
              npy_shape_string(header.shape), ", expected int64 (rows, K)");
    const std::int64_t rows = header.shape[0];
    if (k < 0) k = header.shape[1];
    SAR_CHECK(rows == positives && header.shape[1] == k && k >= 1, io_error, where, ": ",
              file.string(), " has shape (", rows, ", ", header.shape[1], ") for ", positives,
              " positives (expected one row of at least one node each, K alike in valid and "
              "test)");
    const auto [begin, end] = lf::share_rows(rows, share, shares);
    std::vector<std::int64_t> ids(static_cast<std::size_t>((end - begin) * k));
    read_npy_elements(file, header, static_cast<std::uint64_t>(begin * k), ids.size(),
                      ids.data());
    for (std::size_t i = 0; i < ids.size(); ++i)
      SAR_CHECK(ids[i] >= 0 && ids[i] < num_nodes, invalid_argument, where, ": ", file.string(),
                ", row ", begin + static_cast<std::int64_t>(i) / k, ": node ", ids[i],
                " outside the ", num_nodes, " nodes");
    return ids;
  };
  split.valid_target_negatives = targets(valid_targets, "valid_edge.npy");
  split.test_target_negatives = targets(test_targets, "test_edge.npy");
  split.per_source = static_cast<int>(k);
  return split;
}

}  // namespace sar
