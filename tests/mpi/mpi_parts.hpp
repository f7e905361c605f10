// Test helper: one rank's part of a dataset, cut in the process.
#pragma once

#include <algorithm>
#include <vector>

#include "sar/graph/dataset.hpp"
#include "sar/partition/graph_part.hpp"
#include "sar/partition/relabel.hpp"

namespace sar::mpi_test {

/// This rank's part of `data` under `assignment`, relabelled, with original ids (what
/// read_partition_part returns for a store written by sar-partition).
inline graph_part cut_part(const graph_dataset& data, const std::vector<int>& assignment, int P, int p) {
  const relabelling r = relabel(assignment, P);
  graph_part part;
  part.part = p;
  part.book = r.book;
  part.num_classes = data.num_classes;
  csr& in = part.in_edges;
  in.num_rows = r.book.size(p);
  in.num_cols = data.num_nodes();
  in.offsets.assign(1, 0);
  part.features.resize(in.num_rows, data.features.cols());
  for (node_t i = r.book.begin(p); i < r.book.end(p); ++i) {
    const node_t old = r.old_of_new[i];
    const std::size_t from = in.columns.size();
    for (node_t c : data.graph.row(old)) in.columns.push_back(r.new_of_old[c]);
    std::sort(in.columns.begin() + from, in.columns.end());
    in.offsets.push_back(static_cast<edge_t>(in.columns.size()));
    part.features.row(i - r.book.begin(p)) = data.features.row(old);
    part.labels.push_back(data.labels[old]);
    part.split.push_back(data.split[old]);
    part.original_ids.push_back(old);
  }
  return part;
}

}  // namespace sar::mpi_test
