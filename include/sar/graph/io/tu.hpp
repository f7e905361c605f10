// The TU graph-dataset format (Morris et al., TUDataset: NCI1, PROTEINS, MUTAG, ENZYMES, DD,
// ...) read into a graph collection, as PyG's TUDataset reads it. A directory DS holds
//   DS_A.txt                "i, j" per line: the edge i -> j (node ids 1-based over the dataset)
//   DS_graph_indicator.txt  the graph (1-based) of node i on line i, sorted, no graph skipped
//   DS_graph_labels.txt     a class per graph (any integers: mapped to 0..C-1 in sorted order,
//                           class_labels keeps them)
// and when present
//   DS_node_labels.txt      integers per node, one or more columns: each shifted to start at 0
//                           and one-hot encoded
//   DS_node_attributes.txt  floats per node; the features are [attributes | one-hot labels]
//   DS_edge_labels.txt, DS_edge_attributes.txt   per line of DS_A.txt, likewise
//   DS_graph_attributes.txt floats per graph: graph_regress's targets
//   split/NAME/{train,valid,test}.npy     0-based graph indices (int64 or int32)
// Self-loops are removed and parallel edges merged, their edge features summed (PyG's
// remove_self_loops and coalesce). A dataset without node labels or attributes gets one
// constant feature per node. Every malformed file is an error naming the file and line.
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "sar/core/error.hpp"
#include "sar/core/task_kind.hpp"
#include "sar/core/types.hpp"
#include "sar/graph/graph_collection.hpp"
#include "sar/graph/io/text.hpp"
#include "sar/io/npy_file.hpp"

namespace sar {

namespace detail::tu {

/// The rows of a file of comma-separated numbers: `values` row-major, `columns` per row (every
/// row alike), `rows` lines.
template <class V>
struct table {
  std::vector<V> values;
  std::size_t columns = 0;
  std::int64_t rows = 0;
  /// Row r's value in column c.
  V at(std::int64_t r, std::size_t c) const {
    return values[static_cast<std::size_t>(r) * columns + c];
  }
};

/// Reads `file` (every line the same number of comma-separated integers, or floats with
/// V = float). Throws sar::io_error naming the file and line for an empty line, a token that
/// is not a number, or a row of another width.
template <class V>
table<V> read_table(const std::filesystem::path& file, const char* where) {
  io::line_reader reader(file, where);
  table<V> t;
  std::string_view line;
  while (reader.next_line(line)) {
    const std::string_view row = io::trim(line);
    const std::int64_t at = reader.line_number();
    if (row.empty()) io::throw_parse_error(where, file, at, "an empty line", row);
    std::size_t columns = 0;
    for (std::size_t begin = 0;;) {
      const std::size_t comma = row.find(',', begin);
      const std::string_view token =
          io::trim(row.substr(begin, comma == std::string_view::npos ? comma : comma - begin));
      if constexpr (std::is_same_v<V, float>) {
        float v = 0;
        if (!io::parse_float(token, v))
          io::throw_parse_error(where, file, at, "not a number", token);
        t.values.push_back(v);
      } else {
        std::int64_t v = 0;
        if (!io::parse_integer(token, v))
          io::throw_parse_error(where, file, at, "not an integer", token);
        t.values.push_back(v);
      }
      ++columns;
      if (comma == std::string_view::npos) break;
      begin = comma + 1;
    }
    if (t.rows == 0) t.columns = columns;
    else if (columns != t.columns)
      io::throw_parse_error(where, file, at,
                            message(columns, " values where line 1 has ", t.columns), row);
    ++t.rows;
  }
  return t;
}

/// Throws sar::io_error naming `file` unless it has `rows` lines (what `of` counts).
inline void expect_rows(const std::filesystem::path& file, std::int64_t got, std::int64_t rows,
                        const char* of, const char* where) {
  SAR_CHECK(got == rows, io_error, where, ": ", file.string(), " has ", got, " lines for ", rows,
            " ", of, " (one per line)");
}

/// Per column of the integer table read from `file`: its smallest value and its number of
/// one-hot columns (largest - smallest + 1). Throws sar::io_error naming the file when all
/// columns together span more than 2^20 values.
inline std::vector<std::pair<std::int64_t, Eigen::Index>> one_hot_ranges(
    const table<std::int64_t>& t, const std::filesystem::path& file, const char* where) {
  std::vector<std::pair<std::int64_t, Eigen::Index>> ranges;
  constexpr std::uint64_t limit = std::uint64_t{1} << 20;
  std::uint64_t total = 0;
  for (std::size_t c = 0; c < t.columns; ++c) {
    std::int64_t lo = t.at(0, c), hi = lo;
    for (std::int64_t r = 0; r < t.rows; ++r) {
      lo = std::min(lo, t.at(r, c));
      hi = std::max(hi, t.at(r, c));
    }
    // In unsigned arithmetic: any two int64 labels have a representable distance.
    const std::uint64_t span = static_cast<std::uint64_t>(hi) - static_cast<std::uint64_t>(lo);
    total += std::min(span, limit) + 1;
    SAR_CHECK(total <= limit, io_error, where, ": ", file.string(), ": labels spanning more "
              "than ", limit, " values (from ", lo, " to ", hi, " in column ", c + 1,
              "): too many one-hot columns");
    ranges.emplace_back(lo, static_cast<Eigen::Index>(span + 1));
  }
  return ranges;
}

/// Rows of [attributes | one-hot labels] from the optional files `attributes` and `labels`
/// of `rows` lines each (what `of` counts); 0 x 0 when neither exists. Throws sar::io_error
/// naming a file of another line count, or labels spanning more than 2^20 values.
inline matrixf feature_rows(const std::filesystem::path& attributes,
                            const std::filesystem::path& labels, std::int64_t rows,
                            const char* of, const char* where) {
  table<float> a;
  table<std::int64_t> l;
  const bool has_a = std::filesystem::exists(attributes), has_l = std::filesystem::exists(labels);
  if (has_a) a = read_table<float>(attributes, where);
  if (has_l) l = read_table<std::int64_t>(labels, where);
  if (has_a) expect_rows(attributes, a.rows, rows, of, where);
  if (has_l) expect_rows(labels, l.rows, rows, of, where);
  if (!has_a && !has_l) return {};
  const auto ranges = has_l && rows > 0 ? one_hot_ranges(l, labels, where)
                                         : std::vector<std::pair<std::int64_t, Eigen::Index>>{};
  Eigen::Index hot = 0;
  for (const auto& range : ranges) hot += range.second;
  const auto dense = static_cast<Eigen::Index>(a.columns);
  matrixf out = matrixf::Zero(rows, dense + hot);
  for (std::int64_t r = 0; r < rows; ++r) {
    for (Eigen::Index c = 0; c < dense; ++c) out(r, c) = a.at(r, static_cast<std::size_t>(c));
    Eigen::Index base = dense;
    for (std::size_t c = 0; c < ranges.size(); ++c) {
      out(r, base + l.at(r, c) - ranges[c].first) = 1;
      base += ranges[c].second;
    }
  }
  return out;
}

}  // namespace detail::tu

/// Whether `dir` looks like a TU dataset (it holds DS_A.txt, DS being its own name).
inline bool is_tu_dataset(const std::filesystem::path& dir) {
  const std::string name = dir.filename().empty() ? dir.parent_path().filename().string()
                                                  : dir.filename().string();
  return std::filesystem::exists(dir / (name + "_A.txt"));
}

/// The splits in `dir`/split/NAME/{train,valid,test}.npy (0-based graph indices, int64 or
/// int32, 1-D) of a collection of `graphs` graphs, by name; none without split/. Throws
/// sar::io_error naming the file for a missing file, another dtype or shape, an index outside
/// [0, graphs), or a graph twice (within a file or in two of them).
inline std::map<std::string, graph_split> read_graph_splits(const std::filesystem::path& dir,
                                                            std::int64_t graphs) {
  constexpr const char* where = "sar::read_graph_splits";
  std::map<std::string, graph_split> splits;
  const std::filesystem::path root = dir / "split";
  if (!std::filesystem::is_directory(root)) return splits;
  for (const auto& entry : std::filesystem::directory_iterator(root)) {
    if (!entry.is_directory()) continue;
    graph_split s;
    std::vector<std::uint8_t> seen(static_cast<std::size_t>(graphs), 0);
    for (auto [file, list] : {std::pair{"train.npy", &s.train}, std::pair{"valid.npy", &s.valid},
                              std::pair{"test.npy", &s.test}}) {
      const std::filesystem::path path = entry.path() / file;
      SAR_CHECK(std::filesystem::exists(path), io_error, where, ": ", path.string(),
                " is missing (a split folder holds train.npy, valid.npy and test.npy)");
      const npy_header h = read_npy_header(path);
      SAR_CHECK(h.shape.size() == 1 &&
                    (h.dtype == npy_dtype::int64 || h.dtype == npy_dtype::int32),
                io_error, where, ": ", path.string(), " holds ", npy_dtype_name(h.dtype),
                " of shape ", npy_shape_string(h.shape),
                ", expected a 1-D array of int64 or int32 graph indices");
      if (h.dtype == npy_dtype::int64) {
        list->resize(h.element_count());
        read_npy_data(path, h, list->data());
      } else {
        std::vector<std::int32_t> narrow(h.element_count());
        read_npy_data(path, h, narrow.data());
        list->assign(narrow.begin(), narrow.end());
      }
      for (std::size_t k = 0; k < list->size(); ++k) {
        const std::int64_t g = (*list)[k];
        SAR_CHECK(g >= 0 && g < graphs, io_error, where, ": ", path.string(), " entry ", k,
                  ": graph ", g, " outside [0, ", graphs, ")");
        SAR_CHECK(!seen[static_cast<std::size_t>(g)]++, io_error, where, ": ", path.string(),
                  " entry ", k, ": graph ", g, " is listed twice in the split");
      }
    }
    SAR_CHECK(!s.train.empty(), io_error, where, ": ", (entry.path() / "train.npy").string(),
              " lists no graph");
    splits.emplace(entry.path().filename().string(), std::move(s));
  }
  return splits;
}

/// Reads the TU dataset in `dir` (see the top of this file) for `task` (graph_classify: the
/// graph labels; graph_regress: the graph attributes; none: classify when DS_graph_labels.txt
/// exists, else regress). Throws sar::io_error naming the file and line for a malformed file
/// (an id outside [1, nodes], an edge between two graphs, a graph indicator that is not
/// sorted or skips a graph, a file whose line count does not match), and naming the directory
/// when a required file is missing; sar::invalid_argument for a task that is not graph-level.
inline graph_collection read_tu_dataset(const std::filesystem::path& dir,
                                        std::optional<task_kind> task = std::nullopt) {
  constexpr const char* where = "sar::read_tu_dataset";
  namespace fs = std::filesystem;
  using detail::tu::read_table;
  graph_collection c;
  c.name = dir.filename().empty() ? dir.parent_path().filename().string()
                                  : dir.filename().string();
  const auto file = [&](std::string_view stem) { return dir / (c.name + "_" + std::string(stem)); };
  for (const char* required : {"A.txt", "graph_indicator.txt"})
    SAR_CHECK(fs::exists(file(required)), io_error, where, ": ", dir.string(), " has no ",
              file(required).filename().string(), " (a TU dataset directory DS holds DS_A.txt, "
              "DS_graph_indicator.txt and DS_graph_labels.txt or DS_graph_attributes.txt)");
  const bool has_labels = fs::exists(file("graph_labels.txt"));
  const bool has_attributes = fs::exists(file("graph_attributes.txt"));
  c.task = task.value_or(has_labels ? task_kind::graph_classify : task_kind::graph_regress);
  SAR_CHECK(is_graph_level(c.task), invalid_argument, where, ": task ", task_name(c.task),
            " is not a graph-level task (", task_choices(task_level::graph), ")");
  const bool classify = has_class_ids(c.task);
  const fs::path targets_file = file(classify ? "graph_labels.txt" : "graph_attributes.txt");
  SAR_CHECK(classify ? has_labels : has_attributes, io_error, where, ": ", dir.string(),
            " has no ", targets_file.filename().string(), " (what ", task_name(c.task),
            " predicts)");

  // Graph of each node: 1, 1, ..., 2, ... with no graph skipped.
  {
    const fs::path path = file("graph_indicator.txt");
    const auto t = read_table<std::int64_t>(path, where);
    SAR_CHECK(t.rows >= 1 && t.columns == 1, io_error, where, ": ", path.string(),
              " must hold one graph id per line, for at least one node");
    std::int64_t last = 0;
    for (std::int64_t v = 0; v < t.rows; ++v) {
      const std::int64_t g = t.at(v, 0);
      if (g < last)
        io::throw_parse_error(where, path, v + 1, message("graph ids are not sorted (", last,
                                                          " before)"), std::to_string(g));
      if (g > last + 1)
        io::throw_parse_error(where, path, v + 1,
                              message("graph ", last + 1, " has no node (ids must run from 1 "
                                      "without a gap)"), std::to_string(g));
      if (g == last + 1) c.node_offsets.push_back(v);
      last = g;
    }
    c.node_offsets.erase(c.node_offsets.begin());  // the first push was graph 1's start, 0
    c.node_offsets.push_back(t.rows);
  }
  const node_t n = c.num_nodes();
  std::vector<std::int64_t> graph_of(static_cast<std::size_t>(n));
  for (std::int64_t g = 0; g < c.num_graphs(); ++g)
    std::fill(graph_of.begin() + c.node_offsets[g], graph_of.begin() + c.node_offsets[g + 1], g);

  // Edges: (destination, source, line), self-loops dropped; sorted, parallel ones merged.
  const fs::path a_path = file("A.txt");
  const auto a = read_table<std::int64_t>(a_path, where);
  SAR_CHECK(a.rows == 0 || a.columns == 2, io_error, where, ": ", a_path.string(),
            " must hold two node ids per line (\"i, j\": the edge i -> j)");
  std::vector<std::tuple<node_t, node_t, std::int64_t>> edges;
  edges.reserve(static_cast<std::size_t>(a.rows));
  for (std::int64_t line = 0; line < a.rows; ++line) {
    const std::int64_t i = a.at(line, 0), j = a.at(line, 1);
    for (const std::int64_t id : {i, j})
      if (id < 1 || id > n)
        io::throw_parse_error(where, a_path, line + 1,
                              message("node id outside [1, ", n, "] (the graph indicator's)"),
                              std::to_string(id));
    if (graph_of[i - 1] != graph_of[j - 1])
      io::throw_parse_error(where, a_path, line + 1,
                            message("an edge from graph ", graph_of[i - 1] + 1, " to graph ",
                                    graph_of[j - 1] + 1),
                            message(i, ", ", j));
    if (i != j) edges.emplace_back(j - 1, i - 1, line);
  }
  std::sort(edges.begin(), edges.end());
  const matrixf edge_rows = detail::tu::feature_rows(file("edge_attributes.txt"),
                                                     file("edge_labels.txt"), a.rows,
                                                     "edges of DS_A.txt", where);
  c.graph.num_rows = c.graph.num_cols = n;
  c.graph.offsets.assign(static_cast<std::size_t>(n) + 1, 0);
  std::vector<edge_t> entry_of(edges.size());  // the entry each line's edge merges into
  for (std::size_t k = 0; k < edges.size(); ++k) {
    const auto [dst, src, line] = edges[k];
    if (k == 0 || std::get<0>(edges[k - 1]) != dst || std::get<1>(edges[k - 1]) != src) {
      c.graph.columns.push_back(src);
      ++c.graph.offsets[static_cast<std::size_t>(dst) + 1];
    }
    entry_of[k] = static_cast<edge_t>(c.graph.columns.size()) - 1;
  }
  for (std::size_t v = 0; v < static_cast<std::size_t>(n); ++v)
    c.graph.offsets[v + 1] += c.graph.offsets[v];
  if (edge_rows.cols() > 0) {
    c.edge_features = matrixf::Zero(c.graph.num_edges(), edge_rows.cols());
    for (std::size_t k = 0; k < edges.size(); ++k)
      c.edge_features.row(entry_of[k]) += edge_rows.row(std::get<2>(edges[k]));
  }

  c.features = detail::tu::feature_rows(file("node_attributes.txt"), file("node_labels.txt"), n,
                                        "nodes of DS_graph_indicator.txt", where);
  if (c.features.cols() == 0) c.features = matrixf::Ones(n, 1);

  if (classify) {
    const auto t = read_table<std::int64_t>(targets_file, where);
    detail::tu::expect_rows(targets_file, t.rows, c.num_graphs(), "graphs", where);
    SAR_CHECK(t.columns == 1, io_error, where, ": ", targets_file.string(),
              " must hold one class per line");
    std::vector<std::int64_t> distinct = t.values;
    std::sort(distinct.begin(), distinct.end());
    distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
    for (const std::int64_t v : t.values)
      c.labels.push_back(static_cast<std::int32_t>(
          std::lower_bound(distinct.begin(), distinct.end(), v) - distinct.begin()));
    c.num_classes = static_cast<std::int32_t>(distinct.size());
    c.class_labels = std::move(distinct);
  } else {
    const auto t = read_table<float>(targets_file, where);
    detail::tu::expect_rows(targets_file, t.rows, c.num_graphs(), "graphs", where);
    c.targets.resize(t.rows, static_cast<Eigen::Index>(t.columns));
    std::copy(t.values.begin(), t.values.end(), c.targets.data());
    for (Eigen::Index i = 0; i < c.targets.size(); ++i)
      if (!std::isfinite(c.targets.data()[i]))
        io::throw_parse_error(where, targets_file, i / c.targets.cols() + 1,
                              "a target that is not a finite number",
                              std::to_string(c.targets.data()[i]));
  }
  c.splits = read_graph_splits(dir, c.num_graphs());
  c.validate(where);
  return c;
}

}  // namespace sar
