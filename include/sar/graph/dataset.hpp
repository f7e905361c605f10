// A node-classification dataset held in memory on one process: graph, features, labels, splits.
#pragma once

#include <string>
#include <vector>

#include "sar/core/error.hpp"
#include "sar/core/types.hpp"
#include "sar/graph/csr.hpp"

namespace sar {

/// A node-classification dataset held in memory on one process: graph, features, labels,
/// split.
struct graph_dataset {
  /// What the dataset is called (e.g. "planted", "rmat", an OGB directory's name).
  std::string name;
  csr graph;                         ///< in-edges, num_rows = num_cols = num_nodes()
  matrixf features;                  ///< num_nodes() x feature_dim (feature_dim may be 0)
  std::vector<std::int32_t> labels;  ///< one per node, -1 = unlabelled (may be empty)
  /// Number of classes: labels are in [0, num_classes), or -1.
  std::int32_t num_classes = 0;
  std::vector<node_split> split;     ///< one per node (may be empty: no split)

  /// Number of nodes (rows of the graph).
  node_t num_nodes() const { return graph.num_rows; }
  /// How many nodes the split puts in `which` (0 when there is no split).
  node_t count(node_split which) const {
    node_t total = 0;
    for (auto s : split) total += (s == which);
    return total;
  }

  /// Throws sar::invalid_argument if the parts disagree on the number of nodes.
  void validate(const char* where = "sar::graph_dataset::validate") const {
    graph.validate(where);
    const node_t n = num_nodes();
    SAR_CHECK(features.rows() == n || features.size() == 0, invalid_argument, where, ": ",
              features.rows(), " feature rows for ", n, " nodes");
    SAR_CHECK(labels.empty() || static_cast<node_t>(labels.size()) == n, invalid_argument, where,
              ": ", labels.size(), " labels for ", n, " nodes");
    SAR_CHECK(split.empty() || static_cast<node_t>(split.size()) == n, invalid_argument, where,
              ": ", split.size(), " split entries for ", n, " nodes");
    for (std::size_t i = 0; i < labels.size(); ++i)
      SAR_CHECK(labels[i] >= -1 && labels[i] < num_classes, invalid_argument, where, ": label ",
                labels[i], " of node ", i, " outside [-1, ", num_classes, ")");
  }
};

}  // namespace sar
