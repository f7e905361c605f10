// Reading an Open Graph Benchmark node-property dataset from its raw CSV layout (a
// heterogeneous one, ogbn-mag's layout: ogb_hetero.hpp, read by read_ogb_raw too).
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "sar/core/error.hpp"
#include "sar/core/memory.hpp"
#include "sar/core/types.hpp"
#include "sar/graph/builders.hpp"
#include "sar/graph/dataset.hpp"
#include "sar/graph/io/ogb_files.hpp"
#include "sar/graph/io/ogb_hetero.hpp"
#include "sar/graph/io/text.hpp"

namespace sar {

/// What read_ogb_raw_share read.
struct ogb_raw_share {
  /// name, task, num_classes (classify: stated, else -1; else 0), and features, labels
  /// (empty without node-label or for another task), targets (regress, multilabel) and split
  /// (empty without a split) of rows [first, last); graph empty.
  graph_dataset rows;
  node_t num_nodes = 0;             ///< n, from num-node-list
  node_t first = 0;                 ///< the first row read
  node_t last = 0;                  ///< one past the last row read
  edge_list edges;                  ///< the share's edges as written; num_nodes = n
  std::int64_t expected_edges = -1; ///< num-edge-list's count, -1 without that file
  std::int64_t edge_lines = 0;      ///< the edge file's line count
  std::vector<io::row_range> edge_ranges;  ///< the indices of `edges` in the edge file
  std::int32_t max_label = -1;      ///< the largest label in the rows read
  std::int64_t max_label_line = 0;  ///< and its line
  bool per_node_files = false;      ///< node-feat or node-label vouches for n
  std::filesystem::path node_count_file;  ///< raw/num-node-list
  std::filesystem::path edge_file;        ///< raw/edge
  std::filesystem::path edge_count_file;  ///< raw/num-edge-list (empty without it)
  std::filesystem::path label_file;       ///< raw/node-label (empty without it or labels)
};

/// Reads the share `share` of the OGB raw directory `dir` (layout, checks and errors: see
/// read_ogb_raw) without the checks a reader of a share cannot make alone: the edge count
/// against num-edge-list (whole shares check more edges at the first extra one), the class
/// count and the node-range rule. Not collective.
inline ogb_raw_share read_ogb_raw_share(const std::filesystem::path& dir, const ogb_options& options,
                                        const ogb_share& share) {
  namespace fs = std::filesystem;
  using namespace detail::ogb;
  if (!fs::is_directory(dir)) throw io_error(message(function, ": ", dir.string(), " is not a directory"));
  const fs::path raw = dir / "raw";
  ogb_raw_share out;
  graph_dataset& data = out.rows;
  data.name = dataset_name(dir);
  SAR_CHECK(!is_ogb_heterogeneous(dir), io_error, function, ": ", dir.string(),
            " is a heterogeneous dataset (raw/num-node-dict), which read_ogb_raw and "
            "load_dataset read whole in one process; convert it to a .npy dataset (sar-convert) "
            "for readers of shares");

  // Counts.
  const fs::path node_count_file = require_csv(raw, "num-node-list");
  out.node_count_file = node_count_file;
  const node_t n = read_count(node_count_file);
  out.num_nodes = n;
  const dataset_sizes& stated = options.sizes;
  SAR_CHECK(stated.num_nodes < 0 || n == stated.num_nodes, io_error, function, ": ",
            node_count_file.string(), " declares ", n, " nodes, but num_nodes is ",
            stated.num_nodes);
  const node_t first = std::clamp<node_t>(share.first, 0, n);
  const node_t last = share.last < 0 ? n : std::clamp<node_t>(share.last, first, n);
  const node_t rows = last - first;
  out.first = first;
  out.last = last;
  if (const auto edge_count_file = find_csv(raw, "num-edge-list")) {
    out.expected_edges = read_count(*edge_count_file);
    out.edge_count_file = *edge_count_file;
  }
  for (const char* per_node : {"node-feat", "node-label", "node-target"})
    if (const auto file = find_csv(raw, per_node)) {
      check_line_capacity(*file, n, node_count_file);
      out.per_node_files = true;
    }
  const auto allocate = [&](const std::string& what, double bytes, auto&& f) {
    allocate_checked(function,
                     message(what, " of ", rows == n ? "" : message(rows, " of "), "the ", n,
                             " nodes in ", node_count_file.string()),
                     bytes, f);
  };

  // Edges: one per line, so edge k is on line k + 1.
  edge_list& edges = out.edges;
  edges.num_nodes = n;
  out.edge_file = require_csv(raw, "edge");
  const node_t bounds[2] = {n, n};
  out.edge_lines = read_edge_file(out.edge_file, bounds, share.edges, out.expected_edges,
                                  out.edge_count_file, edges.src, edges.dst, out.edge_ranges);

  // Features: row i is line i + 1. Sparse ones (options.sparse_below) read as sparse rows,
  // kept so unless more of them are non-zero.
  const auto feature_file = find_csv(raw, "node-feat");
  if (feature_file && options.sparse_below > 0 && rows == n) {
    read_sparse_rows(*feature_file, n, node_count_file, "feature", data.sparse_features);
    data.features.resize(rows, 0);
    data.densify_above(options.sparse_below, function, feature_file->string());
  } else if (feature_file) {
    read_rows(*feature_file, n, first, last, node_count_file, "feature", data.features, allocate);
  } else {
    data.features.resize(rows, 0);
  }

  // Targets of a regression (node-target) or multi-label (node-label) task.
  const task_kind task = stated.task.value_or(task_kind::classify);
  data.task = task;
  if (!has_class_ids(task)) {
    SAR_CHECK(stated.num_classes < 0, io_error, function, ": num_classes = ",
              stated.num_classes, " is stated for a ", task_name(task), " task (it has targets, "
              "not classes)");
    const std::string stem(facts_of(task).ogb_stem);
    const auto file = find_csv(raw, stem);
    SAR_CHECK(file.has_value(), io_error, function, ": ", dir.string(), " has no ",
              (raw / stem).string(), ".csv.gz, the targets of a ", task_name(task), " task");
    read_rows(*file, n, first, last, node_count_file, "target", data.targets, allocate);
    check_targets(*file, task, first, data.targets);
  }

  // Labels: line i + 1 is node i.
  data.num_classes = stated.num_classes;
  if (!has_class_ids(task)) {
    data.num_classes = 0;
  } else if (const auto file = find_csv(raw, "node-label")) {
    out.label_file = *file;
    allocate("the labels", 4.0 * static_cast<double>(rows), [&] { data.labels.assign(rows, -1); });
    const label_maximum largest =
        read_labels(*file, n, first, data.labels, stated.num_classes, node_count_file);
    out.max_label = largest.label;
    out.max_label_line = largest.line;
  } else {
    SAR_CHECK(stated.num_classes < 0, io_error, function, ": num_classes = ",
              stated.num_classes, " is stated, but ", dir.string(),
              " has no labels (raw/node-label.csv.gz)");
  }

  // Split.
  if (const fs::path split_dir = split_directory(dir, options.split_name); !split_dir.empty()) {
    allocate("the split", static_cast<double>(rows),
             [&] { data.split.assign(rows, node_split::none); });
    read_splits(split_dir, n, first, data.split);
  }
  return out;
}

/// The checks of read_ogb_raw over the whole directory, of whose shares `totals` totals the
/// readers' (whole_input_totals: one reader): the edge count against num-edge-list, the class
/// count (read.rows.num_classes: stated, else the largest label + 1, with the mostly-empty
/// range rule; 0 without labels) and, when no per-node file vouches for it and num_nodes is
/// not stated, the node range rule. Throws what read_ogb_raw throws for them; collective
/// where `totals` is.
template <class Totals>
void finish_ogb_raw(ogb_raw_share& read, const ogb_options& options, Totals& totals) {
  using detail::ogb::function;
  detail::ogb::check_edge_count(read.edge_file, read.edge_lines,
                                totals.sum(static_cast<std::int64_t>(read.edges.size())),
                                read.expected_edges, read.edge_count_file);
  graph_dataset& data = read.rows;
  if (!read.label_file.empty() && data.num_classes < 0) {
    const auto [max_label, line] = totals.max_with_line(read.max_label, read.max_label_line);
    detail::ogb::count_classes(data, {static_cast<std::int32_t>(max_label), line},
                               read.label_file, totals);
  }
  data.num_classes = std::max(data.num_classes, 0);
  // Without per-node files, nothing but num-node-list vouches for the node count.
  if (options.sizes.num_nodes < 0 && !read.per_node_files)
    detail::check_mostly_used<node_t>(
        totals, read.num_nodes, {read.edges.src, read.edges.dst},
        message(function, ": ", read.node_count_file.string(), " declares ", read.num_nodes,
                " nodes (and no node-feat or node-label file has a line per node)"),
        "appear in an edge", "num_nodes", "--num-nodes");
}

/// The graph build options read_ogb_raw uses for `options`.
inline build_options ogb_build_options(const ogb_options& options) {
  return {.symmetrise = options.add_inverse_edges,
          .deduplicate = options.deduplicate,
          .self_loops = options.self_loops};
}

/// Reads an OGB node-property dataset in the raw layout of `dir`:
///   raw/num-node-list.csv.gz   one number, the node count n (required)
///   raw/edge.csv.gz            "src,dst" per line, 0-based ids in [0, n) (required)
///   raw/num-edge-list.csv.gz   one number, the line count of edge.csv.gz (checked if present)
///   raw/node-feat.csv.gz       n rows of equally many comma-separated numbers (optional:
///                              without it features are n x 0); kept as sparse_features
///                              when at most options.sparse_below of them are non-zero
///   raw/node-label.csv.gz      classify: n lines of one label: integer >= -1, integral float
///                              ("3.0") or "nan"; -1 and nan mean unlabelled (optional: labels
///                              empty); multilabel (required): n rows of equally many 0/1
///                              columns, one per label, read into targets
///   raw/node-target.csv.gz     regress (required; other tasks ignore it): n rows of equally
///                              many finite numbers, one per output, read into targets
///   raw/edge-feat.csv.gz       one row of equally many numbers per line of edge.csv.gz
///                              (optional): edge_features, each stored entry taking its input
///                              edge's row (a reverse added by add_inverse_edges the same row;
///                              build_csr's origins)
///   split/<name>/{train,valid,test}.csv.gz   node ids, one per line (all three required if
///                              the split directory exists; no split/ directory: split empty)
/// Each file may also be stored uncompressed as *.csv (gzip is detected by magic bytes).
/// Blank lines are errors inside these files, except after the number of a num-*-list file.
/// Ensures: graph = build_csr of the edges (add_inverse_edges -> symmetrised; deduplicate,
/// self_loops as in `options`); name = directory name; task = options.sizes.task (classify if
/// not stated); num_classes = options.sizes.num_classes if stated, else max label + 1 (0 if no
/// label or another task); split[i] = the split listing node i, none if no split lists it;
/// validate() passes.
/// Throws sar::io_error "sar::read_ogb_raw: <file> line <n>: <problem> ("<token>")" for any
/// malformed line, an id out of range, feature rows of differing widths, feature or label line
/// counts different from n, an edge count different from num-edge-list, a node in two splits
/// (or twice in one), a label >= a stated num_classes, a target that is not finite (multilabel:
/// not 0 or 1); sar::io_error naming the file for a
/// node count other than a stated num_nodes, a stated num_classes without node-label or for a
/// task other than classify, a missing target file, fewer
/// than half of the classes [0, max label] having a node (num_classes not stated), fewer than
/// half of the nodes appearing in an edge when no node-feat or node-label file vouches for the
/// count (num_nodes not stated); sar::io_error naming the path for a missing required file or
/// split directory, several split directories while split_name is empty (it lists them),
/// unreadable or truncated (gzip) files.
/// A directory with raw/num-node-dict.csv.gz (ogbn-mag's layout, is_ogb_heterogeneous) is
/// read as a heterogeneous graph instead: layout, result and errors in
/// sar/graph/io/ogb_hetero.hpp (detail::ogb::read_heterogeneous) and
/// docs/heterogeneous-data.md.
inline graph_dataset read_ogb_raw(const std::filesystem::path& dir, const ogb_options& options = {}) {
  using detail::ogb::function;
  if (is_ogb_heterogeneous(dir)) return detail::ogb::read_heterogeneous(dir, options);
  ogb_raw_share read = read_ogb_raw_share(dir, options, {});
  whole_input_totals totals;
  finish_ogb_raw(read, options, totals);
  graph_dataset& data = read.rows;
  const build_options build = ogb_build_options(options);
  const auto edge_file = detail::ogb::find_csv(dir / "raw", "edge-feat");
  matrixf per_edge;  // one row per line of edge.csv
  if (edge_file)
    per_edge = detail::ogb::read_edge_rows(*edge_file, static_cast<std::int64_t>(read.edges.size()),
                                           read.edge_ranges, read.edge_file);
  std::vector<edge_t> origins;
  allocate_checked(function,
                   message("the graph of the ", read.num_nodes, " nodes in ",
                           read.node_count_file.string()),
                   build_csr_bytes(read.edges, build),
                   [&] { data.graph = build_csr(read.edges, build, edge_file ? &origins : nullptr); });
  if (edge_file) data.edge_features = take_edge_rows(per_edge, origins, function.data());
  return std::move(data);
}

}  // namespace sar
