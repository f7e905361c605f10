// Checks shared by the MPI partitioning tests (mpi_partition.cpp, and mpi_ptscotch_int64.cpp
// against PT-Scotch's 64-bit index build): a dataset's block of rows, and PT-Scotch's parts.
#pragma once

#include <cstdint>
#include <cstdio>
#include <span>
#include <vector>

#include "mpi_check.hpp"
#include "sar/partition/directory.hpp"
#include "sar/graph/generators.hpp"
#include "sar/partition/distributed_build.hpp"
#include "sar/partition/graph_part.hpp"
#include "sar/partition/parallel_read.hpp"
#include "sar/partition/ptscotch.hpp"

namespace sar::mpi_test {

/// Rows [book.begin(rank), book.end(rank)) of `data` as a block (columns: dataset ids).
inline graph_part block_of(const graph_dataset& data, const partition_book& book, int rank) {
  graph_part b = detail::parallel_read::slice(data, book, rank);
  for (node_t i = book.begin(rank); i < book.end(rank); ++i) b.original_ids.push_back(i);
  return b;
}

/// The edge cut of `part` (the parts of this rank's rows of `rows`, columns global ids) over
/// `rows`' edges, on every rank. Collective.
inline double edge_cut(mpi_communicator& comm, const csr& rows, const partition_book& book,
                       const std::vector<int>& part) {
  const std::vector<std::int64_t> as_values(part.begin(), part.end());
  const auto source_parts = directory_lookup(comm, book, as_values, rows.columns);
  std::int64_t counts[2] = {0, rows.num_edges()};
  for (node_t r = 0; r < rows.num_rows; ++r)
    for (edge_t e = rows.offsets[r]; e < rows.offsets[r + 1]; ++e)
      counts[0] += source_parts[static_cast<std::size_t>(e)] != part[r];
  comm.all_reduce(std::span<std::int64_t>(counts), reduce_op::sum);
  return static_cast<double>(counts[0]) / static_cast<double>(counts[1]);
}

/// PT-Scotch on a planted graph, for P and 8 parts: valid, balanced within 5%, deterministic,
/// an edge cut below half of random's.
inline void test_ptscotch(mpi_communicator& comm) {
  const graph_dataset data = make_planted_partition({.num_nodes = 4000, .num_classes = 8,
                                                     .average_degree = 10, .homophily = 0.9,
                                                     .feature_dim = 0});
  const partition_book book = block_book(data.num_nodes(), comm.size());
  const graph_part block = block_of(data, book, comm.rank());
  const csr adjacency = symmetric_adjacency(comm, block.in_edges, book, /*round_edges=*/500);
  for (int parts : {comm.size(), 8}) {
    const std::vector<int> mine = partition_ptscotch(comm, adjacency, book, parts, {.seed = 3});
    const std::vector<int> again = partition_ptscotch(comm, adjacency, book, parts, {.seed = 3});
    EXPECT(mine == again, "PT-Scotch: the same graph, ranks and seed give the same parts");
    std::vector<std::int64_t> sizes(static_cast<std::size_t>(parts), 0);
    for (int p : mine) {
      EXPECT(p >= 0 && p < parts, "PT-Scotch: part ", p);
      ++sizes[static_cast<std::size_t>(p)];
    }
    comm.all_reduce(std::span<std::int64_t>(sizes), reduce_op::sum);
    const double mean = static_cast<double>(data.num_nodes()) / parts;
    for (std::int64_t s : sizes) EXPECT(s <= 1.05 * mean + 1, "PT-Scotch: a part of ", s, " nodes, mean ", mean);
    const double cut = edge_cut(comm, block.in_edges, book, mine);
    const double random_cut = 1.0 - 1.0 / parts;
    if (comm.rank() == 0) std::printf("PT-Scotch, %d parts: edge cut %.3f (random %.3f)\n", parts, cut, random_cut);
    EXPECT(parts == 1 || cut < 0.5 * random_cut, "PT-Scotch: cut ", cut, " against random's ", random_cut);
  }
}

}  // namespace sar::mpi_test
