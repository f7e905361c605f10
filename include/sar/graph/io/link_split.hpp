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
// The dataset's graph is the message-passing graph: no held-out positive may be one of its
// edges (sar/graph/edge_split.hpp checks; sar-convert --split-edges writes such splits).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "sar/core/error.hpp"
#include "sar/graph/edge_split.hpp"
#include "sar/graph/io/npy.hpp"
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
inline std::vector<std::int64_t> interleave(const node_pairs& pairs) {
  std::vector<std::int64_t> out(2 * pairs.size());
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    out[2 * i] = pairs.source[i];
    out[2 * i + 1] = pairs.destination[i];
  }
  return out;
}

// The int64 array `file` of `columns` columns (any, if -1): its values, rows and columns.
// Throws sar::io_error naming the file for another dtype or shape.
inline std::vector<std::int64_t> read_ids(const std::filesystem::path& file, std::int64_t columns,
                                          std::int64_t& rows, std::int64_t& cols,
                                          const char* where = "sar::read_link_split") {
  const npy_header header = read_npy_header(file);
  SAR_CHECK(header.dtype == npy_dtype::int64, io_error, where, ": ", file.string(), " holds ",
            npy_dtype_name(header.dtype), ", expected int64 node ids");
  SAR_CHECK(header.shape.size() == 2 && (columns < 0 || header.shape[1] == columns), io_error,
            where, ": ", file.string(), " has shape ", npy_shape_string(header.shape),
            ", expected (rows, ", columns < 0 ? std::string("K") : std::to_string(columns), ")");
  rows = header.shape[0];
  cols = header.shape[1];
  std::vector<std::int64_t> values(header.element_count());
  read_npy_data(file, header, values.data());
  return values;
}

// The pairs of `file` ([rows, 2]), every id in [0, num_nodes), read in pieces (no copy of
// the whole array beside the pairs). Throws sar::io_error for the array's form,
// sar::invalid_argument naming the file and row for an id outside the graph, and for an empty
// array when `required`.
inline node_pairs read_pairs(const std::filesystem::path& file, node_t num_nodes, bool required,
                             const char* where = "sar::read_link_split") {
  const npy_header header = read_npy_header(file);
  SAR_CHECK(header.dtype == npy_dtype::int64, io_error, where, ": ", file.string(), " holds ",
            npy_dtype_name(header.dtype), ", expected int64 node ids");
  SAR_CHECK(header.shape.size() == 2 && header.shape[1] == 2, io_error, where, ": ",
            file.string(), " has shape ", npy_shape_string(header.shape), ", expected (rows, 2)");
  const std::int64_t rows = header.shape[0];
  SAR_CHECK(!required || rows > 0, invalid_argument, where, ": ", file.string(), " holds no pair");
  node_pairs out;
  out.source.reserve(static_cast<std::size_t>(rows));
  out.destination.reserve(static_cast<std::size_t>(rows));
  constexpr std::int64_t piece = std::int64_t{1} << 20;  // rows read at once
  std::vector<std::int64_t> ids;
  for (std::int64_t first = 0; first < rows; first += piece) {
    const std::int64_t count = std::min(piece, rows - first);
    ids.resize(static_cast<std::size_t>(2 * count));
    read_npy_elements(file, header, static_cast<std::uint64_t>(2 * first),
                      static_cast<std::uint64_t>(2 * count), ids.data());
    for (std::int64_t k = 0; k < count; ++k) {
      const std::int64_t u = ids[static_cast<std::size_t>(2 * k)];
      const std::int64_t v = ids[static_cast<std::size_t>(2 * k + 1)];
      SAR_CHECK(u >= 0 && u < num_nodes && v >= 0 && v < num_nodes, invalid_argument, where,
                ": ", file.string(), ", row ", first + k, ": pair (", u, ", ", v,
                ") outside the ", num_nodes, " nodes");
      out.push(u, v);
    }
  }
  return out;
}
}  // namespace detail::link_files

/// The node pairs of the .npy file `file` (int64, shape (m, 2), dataset ids), every id in
/// [0, num_nodes). Not collective. Throws sar::io_error naming the file for another dtype or
/// shape, sar::invalid_argument naming the file and row for an id outside the graph.
inline node_pairs read_node_pairs(const std::filesystem::path& file, node_t num_nodes) {
  return detail::link_files::read_pairs(file, num_nodes, false, "sar::read_node_pairs");
}

/// Writes `split` into split/`name`/ of the directory `out` is writing (the arrays at the top
/// of this file). Throws what directory_writer and write_npy throw.
inline void write_link_split(directory_writer& out, const link_split& split,
                             const std::string& name) {
  namespace lf = detail::link_files;
  const std::string dir = "split/" + name + "/";
  out.make_directory(dir.substr(0, dir.size() - 1));
  const auto pairs = [&](const char* file, const node_pairs& p) {
    const std::vector<std::int64_t> ids = lf::interleave(p);
    const std::array<std::int64_t, 2> shape{static_cast<std::int64_t>(p.size()), 2};
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

/// Reads the link split `name` of the dataset at `dataset`, whose graph has `num_nodes` nodes
/// (the arrays at the top of this file). Throws sar::io_error naming the file for a missing
/// array, a dtype other than int64 or a wrong shape (target negatives whose rows are not their
/// positives', or whose K differ between valid and test, or only one of them);
/// sar::invalid_argument naming the file and row for an id outside [0, num_nodes), and for an
/// empty train, valid or test set. Leaks are the caller's to check (check_held_out), against
/// the graph it passes messages on.
inline link_split read_link_split(const std::filesystem::path& dataset, const std::string& name,
                                  node_t num_nodes) {
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
  link_split split;
  split.train = lf::read_pairs(dir / "train_edge.npy", num_nodes, true);
  split.valid = lf::read_pairs(dir / "valid_edge.npy", num_nodes, true);
  split.test = lf::read_pairs(dir / "test_edge.npy", num_nodes, true);
  split.valid_negatives = lf::read_pairs(dir / "valid_edge_neg.npy", num_nodes, false);
  split.test_negatives = lf::read_pairs(dir / "test_edge_neg.npy", num_nodes, false);
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
  const auto targets = [&](const fs::path& file, std::size_t positives) {
    std::int64_t rows = 0;
    std::vector<std::int64_t> ids = lf::read_ids(file, k, rows, k);
    SAR_CHECK(rows == static_cast<std::int64_t>(positives) && k >= 1, io_error, where, ": ",
              file.string(), " has shape (", rows, ", ", k, ") for ", positives,
              " positives (expected one row of at least one node each)");
    for (std::size_t i = 0; i < ids.size(); ++i)
      SAR_CHECK(ids[i] >= 0 && ids[i] < num_nodes, invalid_argument, where, ": ", file.string(),
                ", row ", i / static_cast<std::size_t>(k), ": node ", ids[i], " outside the ",
                num_nodes, " nodes");
    return ids;
  };
  split.valid_target_negatives = targets(valid_targets, split.valid.size());
  split.test_target_negatives = targets(test_targets, split.test.size());
  split.per_source = static_cast<int>(k);
  return split;
}

}  // namespace sar
