// What one rank holds of a partitioned dataset: its own nodes and every edge INTO them.
// This is what a partition store file set contains and what a graph shard is built from.
#pragma once

#include <string>
#include <vector>

#include "sar/core/error.hpp"
#include "sar/core/sparse_rows.hpp"
#include "sar/core/task_kind.hpp"
#include "sar/core/types.hpp"
#include "sar/graph/csr.hpp"
#include "sar/graph/schema.hpp"
#include "sar/partition/partition_book.hpp"

namespace sar {

/// What one rank holds of a partitioned dataset (see the top of this file).
struct graph_part {
  int part = 0;                          ///< this part's index (= the rank that loads it)
  partition_book book;                   ///< ranges of all parts (relabelled global ids)
  csr in_edges;                          ///< rows: local nodes (global id = book.begin(part) + row);
                                         ///< columns: GLOBAL source ids (num_cols = book.num_nodes())
  matrixf features;                      ///< local nodes x feature_dim
  /// The features as sparse rows instead (a store written with sparse features, read with
  /// partition_read_options::sparse_features), local nodes x feature_dim; then `features` is
  /// local nodes x 0. Empty (0 x 0) otherwise.
  sparse_rows<float> sparse_features;
  std::vector<std::int32_t> labels;      ///< local nodes (may be empty), -1 = unlabelled
  /// Number of classes of the whole dataset (labels are in [0, num_classes) or -1).
  std::int32_t num_classes = 0;
  /// What the nodes are to predict (sar::graph_dataset::task): classify (labels) or regress /
  /// multilabel (targets).
  task_kind task = task_kind::classify;
  matrixf targets;                       ///< regress / multilabel: local nodes x outputs
  std::vector<node_split> split;         ///< local nodes (may be empty)
  std::vector<node_t> original_ids;      ///< local row -> id in the dataset before relabelling
  /// One feature row per entry of in_edges, in its order (sar::graph_dataset::edge_features),
  /// or 0 x 0: no edge features. A part without edges has 0 x width when the dataset has them.
  matrixf edge_features;
  /// A heterogeneous dataset's node types and relations (empty: homogeneous); a local node's
  /// type follows from its original id (sar/graph/schema.hpp).
  graph_schema schema;
  /// The relation of each entry of in_edges, in its order (sar::graph_dataset::edge_types);
  /// empty exactly when the schema is.
  std::vector<std::int32_t> edge_types;

  /// Whether the features are held as sparse_features.
  bool sparse() const { return sparse_features.num_cols > 0; }
  /// Width of the features, dense or sparse.
  Eigen::Index feature_dim() const { return sparse() ? sparse_features.num_cols : features.cols(); }
  /// Number of nodes this part owns.
  node_t num_local() const { return in_edges.num_rows; }
  /// Global (relabelled) id of local row 0.
  node_t first_global() const { return book.begin(part); }
  /// The width of a model's output: num_classes, or the targets' columns.
  Eigen::Index num_outputs() const {
    return has_class_ids(task) ? num_classes : targets.cols();
  }

  /// Throws sar::invalid_argument naming `where` and the first inconsistency with the contract
  /// above: the part outside the book, rows other than its range's size, offsets that do not
  /// rise from 0 to the edge count, a column outside [0, num_nodes), feature, label, target,
  /// split, original-id or edge-feature rows that do not match (targets: present exactly for
  /// regress and multilabel), sparse features that break their invariants or sit beside dense
  /// columns, edge types that are not one relation per in-edge exactly when
  /// the part has a schema.
  void validate(const char* where) const {
    SAR_CHECK(part >= 0 && part < book.num_parts(), invalid_argument, where, ": part ", part,
              " outside [0, ", book.num_parts(), ")");
    const node_t n = book.size(part);
    SAR_CHECK(in_edges.num_rows == n && static_cast<node_t>(in_edges.offsets.size()) == n + 1 &&
                  in_edges.offsets.front() == 0 &&
                  in_edges.offsets.back() == static_cast<edge_t>(in_edges.columns.size()),
              invalid_argument, where, ": part ", part, " has ", in_edges.num_rows, " rows and ",
              in_edges.offsets.size(), " offsets for its ", n, " nodes");
    for (node_t c : in_edges.columns)
      SAR_CHECK(c >= 0 && c < book.num_nodes(), invalid_argument, where, ": part ", part,
                ": source ", c, " outside [0, ", book.num_nodes(), ")");
    SAR_CHECK(features.rows() == n && (labels.empty() || static_cast<node_t>(labels.size()) == n) &&
                  (split.empty() || static_cast<node_t>(split.size()) == n) &&
                  static_cast<node_t>(original_ids.size()) == n,
              invalid_argument, where, ": part ", part, " has ", features.rows(), " feature rows, ",
              labels.size(), " labels, ", split.size(), " split entries and ", original_ids.size(),
              " original ids for its ", n, " nodes");
    if (sparse()) {
      sparse_features.validate(where);
      SAR_CHECK(sparse_features.rows() == n && features.cols() == 0, invalid_argument, where,
                ": part ", part, " has ", sparse_features.rows(), " sparse feature rows for its ",
                n, " nodes, and ", features.cols(), " dense feature columns besides");
    }
    SAR_CHECK(edge_features.cols() == 0 || edge_features.rows() == in_edges.num_edges(),
              invalid_argument, where, ": part ", part, " has ", edge_features.rows(),
              " edge feature rows for its ", in_edges.num_edges(), " in-edges");
    SAR_CHECK(schema.heterogeneous() ? static_cast<edge_t>(edge_types.size()) == in_edges.num_edges()
                                     : edge_types.empty(),
              invalid_argument, where, ": part ", part, " has ", edge_types.size(),
              " edge types for its ", in_edges.num_edges(), " in-edges (",
              schema.num_relations(), " relations)");
    for (const std::int32_t r : edge_types)
      SAR_CHECK(r >= 0 && r < schema.num_relations(), invalid_argument, where, ": part ", part,
                ": relation ", r, " outside [0, ", schema.num_relations(), ")");
    const bool with_targets = !has_class_ids(task);
    SAR_CHECK(with_targets ? targets.rows() == n && labels.empty()
                           : targets.size() == 0,
              invalid_argument, where, ": part ", part, " of a ", task_name(task), " dataset has ",
              targets.rows(), " x ", targets.cols(), " targets and ", labels.size(),
              " labels for its ", n, " nodes");
  }
};

}  // namespace sar
