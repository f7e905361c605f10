// What one rank holds of a partitioned dataset: its own nodes and every edge INTO them.
// This is what a partition store file set contains and what a graph shard is built from.
#pragma once

#include <string>
#include <vector>

#include "sar/core/types.hpp"
#include "sar/graph/csr.hpp"
#include "sar/partition/partition_book.hpp"

namespace sar {

/// What one rank holds of a partitioned dataset (see the top of this file).
struct graph_part {
  int part = 0;                          ///< this part's index (= the rank that loads it)
  partition_book book;                   ///< ranges of all parts (relabelled global ids)
  csr in_edges;                          ///< rows: local nodes (global id = book.begin(part) + row);
                                         ///< columns: GLOBAL source ids (num_cols = book.num_nodes())
  matrixf features;                      ///< local nodes x feature_dim
  std::vector<std::int32_t> labels;      ///< local nodes (may be empty), -1 = unlabelled
  /// Number of classes of the whole dataset (labels are in [0, num_classes) or -1).
  std::int32_t num_classes = 0;
  std::vector<node_split> split;         ///< local nodes (may be empty)
  std::vector<node_t> original_ids;      ///< local row -> id in the dataset before relabelling

  /// Number of nodes this part owns.
  node_t num_local() const { return in_edges.num_rows; }
  /// Global (relabelled) id of local row 0.
  node_t first_global() const { return book.begin(part); }
};

}  // namespace sar
