// Test helper: one rank's part of a dataset, cut in the process.
#pragma once

#include <vector>

#include "sar/graph/dataset.hpp"
#include "sar/partition/graph_part.hpp"
#include "sar/partition/relabel.hpp"
#include "sar/partition/store.hpp"

namespace sar::mpi_test {

/// This rank's part of `data` under `assignment`, relabelled, with original ids (what
/// read_partition_part returns for a store written by sar-partition).
inline graph_part cut_part(const graph_dataset& data, const std::vector<int>& assignment, int P, int p) {
  return detail::store::part_of(data, relabel(assignment, P), p);
}

}  // namespace sar::mpi_test
