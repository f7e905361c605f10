// A node-level dataset held in memory on one process: graph, features, labels or targets,
// split.
#pragma once

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sar/core/error.hpp"
#include "sar/core/memory.hpp"
#include "sar/core/sparse_rows.hpp"
#include "sar/core/task_kind.hpp"
#include "sar/core/types.hpp"
#include "sar/graph/csr.hpp"
#include "sar/graph/schema.hpp"

namespace sar {

namespace detail {
/// The index of the first value of values[0, size) that a target of `task` may not hold
/// (regress: not finite; multilabel: neither 0 nor 1), or -1.
inline std::ptrdiff_t first_invalid_target(task_kind task, const float* values,
                                           std::ptrdiff_t size) {
  for (std::ptrdiff_t i = 0; i < size; ++i)
    if (!valid_target(task, values[i])) return i;
  return -1;
}

/// Throws Exception "<where>: the target <v> of <row_name> <first + r> (column <c>) is not a
/// finite number" (multilabel: "0 or 1") for the first value of `targets` (rows numbered from
/// `first`) that a target of `task` may not hold.
template <class Exception>
void check_target_values(task_kind task, const matrixf& targets, std::int64_t first,
                         const std::string& where, const char* row_name = "node") {
  const std::ptrdiff_t bad = first_invalid_target(task, targets.data(), targets.size());
  if (bad < 0) return;
  throw Exception(message(where, ": the target ", targets.data()[bad], " of ", row_name, " ",
                          first + bad / targets.cols(), " (column ", bad % targets.cols(),
                          ") is not ", target_rule(task)));
}
}  // namespace detail

/// A node-level dataset held in memory on one process: graph, features, what the nodes are
/// to predict (labels or targets), split.
struct graph_dataset {
  /// What the dataset is called (e.g. "planted", "rmat", an OGB directory's name).
  std::string name;
  csr graph;                         ///< in-edges, num_rows = num_cols = num_nodes()
  matrixf features;                  ///< num_nodes() x feature_dim (feature_dim may be 0)
  /// The features as sparse rows instead (a reader asked to keep sparse features sparse:
  /// load_dataset's sparse_below), num_nodes() x feature_dim; then `features` is
  /// num_nodes() x 0. Empty (0 x 0) otherwise.
  sparse_rows<float> sparse_features;
  std::vector<std::int32_t> labels;  ///< one per node, -1 = unlabelled (may be empty)
  /// Number of classes: labels are in [0, num_classes), or -1.
  std::int32_t num_classes = 0;
  /// What the nodes are to predict: classify (labels, num_classes) or regress / multilabel
  /// (targets; labels empty, num_classes 0).
  task_kind task = task_kind::classify;
  /// regress / multilabel: num_nodes() x outputs (multilabel: each 0 or 1); classify: empty.
  matrixf targets;
  std::vector<node_split> split;     ///< one per node (may be empty: no split)
  /// One feature row per edge, in the order of graph's entries (row e: the edge of entry e,
  /// into the node whose row holds it), or empty (0 x 0): no edge features.
  matrixf edge_features;
  /// A heterogeneous graph's node types and relations (empty: homogeneous; sar/graph/schema.hpp:
  /// type t's nodes are the ids [schema.type_begin(t), schema.type_begin(t + 1))).
  graph_schema schema;
  /// The relation of each entry of graph (an index into schema.relations), in its order; empty
  /// exactly when the schema is.
  std::vector<std::int32_t> edge_types;

  /// Whether the features are held as sparse_features.
  bool sparse() const { return sparse_features.num_cols > 0; }
  /// Width of the features, dense or sparse.
  Eigen::Index feature_dim() const { return sparse() ? sparse_features.num_cols : features.cols(); }
  /// Makes sparse_features dense when more than `sparse_below` of their entries are non-zero
  /// (else, and for dense features, changes nothing). Throws sar::io_error naming `where` and
  /// `source` (the features' file) before allocating if the dense matrix would not fit in the
  /// memory available, or if allocating it fails.
  void densify_above(double sparse_below, std::string_view where, const std::string& source) {
    if (!sparse() || sparse_features.density() <= sparse_below) return;
    allocate_checked(where, message("the ", feature_dim(), " features of ", source, " made dense"),
                     4.0 * static_cast<double>(sparse_features.rows()) *
                         static_cast<double>(feature_dim()),
                     [&] { features = to_dense<float>(sparse_features); });
    sparse_features = {};
  }
  /// Width of the edge features (0: none).
  Eigen::Index edge_feature_dim() const { return edge_features.cols(); }
  /// The width of a model's output for this dataset: num_classes, or the targets' columns.
  Eigen::Index num_outputs() const {
    return has_class_ids(task) ? num_classes : targets.cols();
  }

  /// Number of nodes (rows of the graph).
  node_t num_nodes() const { return graph.num_rows; }
  /// How many nodes the split puts in `which` (0 when there is no split).
  node_t count(node_split which) const {
    node_t total = 0;
    for (auto s : split) total += (s == which);
    return total;
  }

  /// Throws sar::invalid_argument if the parts disagree on the number of nodes, or a
  /// heterogeneous dataset's schema, edge types and edges disagree (graph_schema::validate,
  /// check_edges).
  void validate(const char* where = "sar::graph_dataset::validate") const {
    graph.validate(where);
    const node_t n = num_nodes();
    SAR_CHECK(features.rows() == n || features.size() == 0, invalid_argument, where, ": ",
              features.rows(), " feature rows for ", n, " nodes");
    if (sparse()) {
      sparse_features.validate(where);
      SAR_CHECK(sparse_features.rows() == n && features.cols() == 0, invalid_argument, where,
                ": ", sparse_features.rows(), " sparse feature rows for ", n, " nodes, and ",
                features.cols(), " dense feature columns besides");
    }
    SAR_CHECK(labels.empty() || static_cast<node_t>(labels.size()) == n, invalid_argument, where,
              ": ", labels.size(), " labels for ", n, " nodes");
    SAR_CHECK(split.empty() || static_cast<node_t>(split.size()) == n, invalid_argument, where,
              ": ", split.size(), " split entries for ", n, " nodes");
    SAR_CHECK(edge_features.cols() == 0 || edge_features.rows() == graph.num_edges(),
              invalid_argument, where, ": ", edge_features.rows(), " edge feature rows for ",
              graph.num_edges(), " edges");
    schema.validate(n, feature_dim(), where);
    SAR_CHECK(schema.heterogeneous() || edge_types.empty(), invalid_argument, where, ": ",
              edge_types.size(), " edge types without a schema");
    if (schema.heterogeneous())
      schema.check_edges(graph.offsets, graph.columns, 0, edge_types,
                         [](node_t c) { return c; }, where);
    for (std::size_t i = 0; i < labels.size(); ++i)
      SAR_CHECK(labels[i] >= -1 && labels[i] < num_classes, invalid_argument, where, ": label ",
                labels[i], " of node ", i, " outside [-1, ", num_classes, ")");
    if (has_class_ids(task)) {
      SAR_CHECK(targets.size() == 0, invalid_argument, where, ": a classification dataset with ",
                targets.rows(), " x ", targets.cols(), " targets");
      return;
    }
    SAR_CHECK(labels.empty() && num_classes == 0, invalid_argument, where, ": a ",
              task_name(task), " dataset with ", labels.size(), " labels and ", num_classes,
              " classes (its targets are in `targets`)");
    SAR_CHECK(targets.rows() == n && (targets.cols() >= 1 || n == 0), invalid_argument, where, ": ",
              targets.rows(), " x ", targets.cols(), " ", task_name(task), " targets for ", n,
              " nodes");
    detail::check_target_values<invalid_argument>(task, targets, 0, where);
  }
};

/// What a caller states when reading a dataset from files: its node and class counts (sar's
/// programs: --num-nodes N, --num-classes C; -1 = not stated) and its task (--task). The
/// readers refuse a node-id
/// or class range that is mostly empty unless its size is stated, because one stray id or
/// label (1000000 among 2708 nodes, 100 among classes 0-6) would otherwise silently give a
/// huge graph or model (the rule: detail::check_mostly_used).
struct dataset_sizes {
  /// The number of nodes. An edge list gets exactly this many (an id >= N is an error naming
  /// the file and line); a format that declares its node count (OGB's num-node-list, Matrix
  /// Market's size line, .npy's meta.json) must declare this one. -1: the count the input
  /// gives (max id + 1 for an edge list), refused if fewer than half of its ids appear in
  /// an edge where nothing else vouches for it (edge lists, Matrix Market, OGB without
  /// per-node files).
  node_t num_nodes = -1;
  /// The number of classes: every label must be below it (else an error naming the file and
  /// line or row), and the dataset gets this many. -1: max label + 1 (OGB) or meta.json's
  /// num_classes (.npy), refused if fewer than half of those classes have a node. Stating it
  /// for a dataset without labels is an error.
  std::int32_t num_classes = -1;
  /// The task, which decides which file holds what the nodes predict: in an OGB raw
  /// directory raw/node-label (classify: one class per line; multilabel: one 0/1 column per
  /// label) or raw/node-target (regress: one float column per output), so floats are never
  /// taken for class ids. A .npy dataset or partition store declares its task and must
  /// declare this one. Empty: the input's own (classify for inputs that do not declare one).
  std::optional<task_kind> task{};
};

namespace detail {

/// Ranges up to this many values are counted exactly (a bitmap of at most 8 MiB).
inline constexpr std::int64_t exact_count_range = std::int64_t{1} << 26;

/// How many distinct values in [0, range) the arrays hold (others are ignored), counted in a
/// bitmap of `range` bits. Requires range <= exact_count_range or range <= 2 x the values in
/// all arrays (so the bitmap is never larger than the input).
template <class T>
std::int64_t count_distinct_below(std::int64_t range,
                                  std::initializer_list<std::span<const T>> arrays) {
  std::vector<bool> seen(static_cast<std::size_t>(range), false);
  std::int64_t distinct = 0;
  for (const auto& values : arrays)
    for (const T v : values)
      if (v >= 0 && static_cast<std::int64_t>(v) < range && !seen[static_cast<std::size_t>(v)]) {
        seen[static_cast<std::size_t>(v)] = true;
        ++distinct;
      }
  return distinct;
}

/// The rule that keeps one stray id or label from making a huge, mostly empty graph or
/// model: throws sar::io_error when fewer than half of the `range` values [0, range) occur
/// in `arrays` (values outside are ignored) of the readers `totals` totals (one reader:
/// whole_input_totals). `origin` says where the range comes from ("<file>: the largest node
/// id, 999999 (line 5), makes 1000000 nodes"), `used` what occurring means ("appear in an
/// edge"), `stated` how to accept the range on purpose ("num_nodes", with `option` the
/// programs' flag "--num-nodes"). Counts exactly when the range is at most exact_count_range
/// or twice the values; else at most the number of values can occur.
template <class T, class Totals>
void check_mostly_used(Totals& totals, std::int64_t range,
                       std::initializer_list<std::span<const T>> arrays,
                       const std::string& origin, const char* used, const char* stated,
                       const char* option) {
  std::int64_t values = 0;
  for (const auto& a : arrays) values += static_cast<std::int64_t>(a.size());
  values = totals.sum(values);
  const bool exact = range <= exact_count_range || range <= 2 * values;
  const std::int64_t present = exact ? totals.count_distinct(range, arrays) : values;
  if (2 * present >= range) return;
  throw io_error(message(origin, ", but ", exact ? "only " : "at most ", present,
                         " of them ", used, ". A range this empty (fewer than half used) is "
                         "refused as a likely error in the input; to accept it, state the "
                         "count: dataset_sizes::", stated, " (sar's programs: ", option, " ",
                         range, ")"));
}

}  // namespace detail

/// The totals of the checks a reader makes over its whole input (counts against their
/// declarations, the largest id or label, the mostly-empty ranges, checksums) when one reader
/// read all of it: the serial loaders. Readers of shares of one input (each rank a share)
/// total them across the ranks with sar::ranks_totals (sar/partition/parallel_read.hpp), which
/// has the same members.
struct whole_input_totals {
  /// The sum of `value` over the readers.
  std::int64_t sum(std::int64_t value) const { return value; }
  /// The largest `value` over the readers, and the first `line` holding it.
  std::pair<std::int64_t, std::int64_t> max_with_line(std::int64_t value, std::int64_t line) const {
    return {value, line};
  }
  /// The CRC-32 of the readers' pieces of one file, in reader order (`crc` of `bytes` here).
  std::uint32_t crc32(std::uint32_t crc, std::uint64_t /*bytes*/) const { return crc; }
  /// How many distinct values in [0, range) the readers' arrays hold (requires range at most
  /// exact_count_range or twice the values: see detail::count_distinct_below).
  template <class T>
  std::int64_t count_distinct(std::int64_t range,
                              std::initializer_list<std::span<const T>> arrays) const {
    return detail::count_distinct_below(range, arrays);
  }
};

}  // namespace sar
