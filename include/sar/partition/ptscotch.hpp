// Distributed graph partitioning with PT-Scotch (Debian: libptscotch-dev), for graphs no
// process holds whole: every rank passes its rows of the symmetric adjacency
// (sar::symmetric_adjacency) and gets the part of each of its nodes. This header, with
// sar/comm/mpi.hpp, is the only one that includes PT-Scotch.
//
// What PT-Scotch 7.0.3 (Debian 12) requires, and what this wrapper does about it:
// - A symmetric graph without self-loops or duplicate arcs (self-loops corrupt its memory, an
//   asymmetric graph hangs it): symmetric_adjacency builds exactly that.
// - Its index type SCOTCH_Num is 32-bit in Debian's default build (/usr/include/scotch): at
//   most 2^31 - 1 vertices and 2^31 - 1 arcs (2 per undirected edge). Larger graphs are refused
//   before PT-Scotch runs, naming the 64-bit build (meson -Dptscotch_index=64: the
//   scotch-int64 variant of the same package, linked with an rpath, because both variants
//   share one soname; docs/large-graphs.md).
// - One vertex weight only (no multi-constraint balance as METIS has): the parts are balanced
//   on nodes, or on nodes plus edges combined (ptscotch_options::balance).
// - Its threads call MPI: sar::mpi_environment provides MPI_THREAD_MULTIPLE; the wrapper also
//   runs PT-Scotch in a context of one thread per rank, deterministic and with a fixed seed,
//   so the same graph on the same number of ranks gives the same parts.
#pragma once

#include <stdio.h>  // ptscotch.h needs FILE

#include <algorithm>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "sar/comm/mpi.hpp"
#include "sar/core/error.hpp"
#include "sar/core/types.hpp"
#include "sar/graph/csr.hpp"
#include "sar/partition/partition_book.hpp"

#include <ptscotch.h>

namespace sar {

/// How partition_ptscotch balances and searches.
struct ptscotch_options {
  /// What the parts are balanced on.
  enum class balance_kind {
    nodes,            ///< every node weighs 1
    nodes_and_edges,  ///< a node weighs 1 + its degree (memory and work both)
  };
  /// What the parts are balanced on.
  balance_kind balance = balance_kind::nodes;
  /// Largest part weight over the mean weight, minus 1 (PT-Scotch's balance ratio).
  double imbalance = 0.03;
  /// Seed of PT-Scotch's random numbers.
  std::uint64_t seed = 0;
};

/// Weights of the vertices and arcs of the graph partition_ptscotch partitions (a coarsened
/// graph's clusters and merged arcs, sar/partition/coarsen.hpp); empty: as the options say.
struct ptscotch_weights {
  /// Per row of this rank: the vertex's weight (> 0); replaces ptscotch_options::balance.
  std::vector<std::int64_t> vertices;
  /// Per arc of this rank: the arc's weight (> 0), the same in both directions.
  std::vector<std::int64_t> arcs;
};

/// The vertex weights `options.balance` asks for, of rows whose degrees degree(r) gives:
/// 1 + degree when balancing nodes and edges; empty (every vertex weighs 1) for nodes.
template <class Degree>
std::vector<std::int64_t> balance_weights(const ptscotch_options& options, node_t rows,
                                          Degree&& degree) {
  std::vector<std::int64_t> weights;
  if (options.balance == ptscotch_options::balance_kind::nodes_and_edges)
    for (node_t r = 0; r < rows; ++r) weights.push_back(1 + degree(r));
  return weights;
}

/// The largest count (vertices, arcs) the linked PT-Scotch takes: its SCOTCH_Num's maximum.
inline constexpr std::int64_t ptscotch_max_count =
    static_cast<std::int64_t>(std::numeric_limits<SCOTCH_Num>::max());

/// The part in [0, parts) of each of this rank's nodes: `adjacency` holds this rank's rows
/// [book.begin(rank), book.end(rank)) of a symmetric graph without self-loops or duplicates
/// (columns are global ids; sar::symmetric_adjacency builds it), freed once PT-Scotch has its
/// copy; `weights` optional (a rank without rows or arcs may leave them empty). Any number of
/// parts (K need not equal the number of ranks). Deterministic for a given graph, rank count
/// and seed.
/// Requires book.num_parts() == comm.size(), parts >= 1. Collective.
/// Throws sar::invalid_argument (on every rank) for a graph beyond the linked PT-Scotch's
/// index range, naming the 64-bit build, or bad arguments; sar::error if PT-Scotch fails.
inline std::vector<int> partition_ptscotch(mpi_communicator& comm, csr adjacency,
                                           const partition_book& book, int parts,
                                           const ptscotch_options& options = {},
                                           ptscotch_weights weights = {}) {
  constexpr const char* where = "sar::partition_ptscotch";
  const int rank = comm.rank();
  SAR_CHECK(book.num_parts() == comm.size() && adjacency.num_rows == book.size(rank) &&
                parts >= 1 && options.imbalance >= 0,
            invalid_argument, where, ": rank ", rank, " holds ", adjacency.num_rows,
            " rows of its range of ", book.size(rank), " in a book of ", book.num_parts(),
            " ranges for ", comm.size(), " ranks, ", parts, " parts, imbalance ",
            options.imbalance);
  const auto given_for = [](const auto& values, std::int64_t count) {
    return values.empty() || static_cast<std::int64_t>(values.size()) == count;
  };
  SAR_CHECK(given_for(weights.vertices, adjacency.num_rows) &&
                given_for(weights.arcs, adjacency.num_edges()),
            invalid_argument, where, ": rank ", rank, " gives ", weights.vertices.size(),
            " vertex and ", weights.arcs.size(), " arc weights for ", adjacency.num_rows,
            " rows and ", adjacency.num_edges(), " arcs");
  if (weights.vertices.empty())
    weights.vertices =
        balance_weights(options, adjacency.num_rows, [&](node_t r) { return adjacency.degree(r); });
  // Counts and weight sums must fit SCOTCH_Num: arcs, then the vertices' and arcs' weights.
  std::int64_t sums[3] = {adjacency.num_edges(), 0, 0};
  for (std::int64_t w : weights.vertices) sums[1] += w;
  for (std::int64_t w : weights.arcs) sums[2] += w;
  comm.all_reduce(std::span<std::int64_t>(sums), reduce_op::sum);
  const std::int64_t arcs = sums[0];
  SAR_CHECK(sums[1] <= ptscotch_max_count && sums[2] <= ptscotch_max_count, invalid_argument,
            where, ": vertex weights summing to ", sums[1], " and arc weights to ", sums[2],
            " exceed the ", ptscotch_max_count, " that the linked PT-Scotch takes");
  SAR_CHECK(book.num_nodes() <= ptscotch_max_count && arcs <= ptscotch_max_count &&
                static_cast<std::int64_t>(parts) <= ptscotch_max_count,
            invalid_argument, where, ": the graph has ", book.num_nodes(), " nodes and ", arcs,
            " arcs (2 per undirected edge), more than the ", ptscotch_max_count, " that the "
            "linked PT-Scotch (", 8 * sizeof(SCOTCH_Num), "-bit SCOTCH_Num) takes: build sar "
            "with meson -Dptscotch_index=64 (Debian's scotch-int64 variant)");

  // PT-Scotch keeps pointers to these arrays until SCOTCH_dgraphExit; none may be null (an
  // empty range still passes arrays), and optional ones are given by every rank or none.
  const auto rows = static_cast<std::size_t>(adjacency.num_rows);
  std::vector<SCOTCH_Num> vertices(rows + 1), arcs_local(std::max<std::size_t>(
                                                  static_cast<std::size_t>(adjacency.num_edges()), 1));
  std::vector<SCOTCH_Num> result(std::max<std::size_t>(rows, 1), 0);
  for (std::size_t r = 0; r <= rows; ++r) vertices[r] = static_cast<SCOTCH_Num>(adjacency.offsets[r]);
  for (std::size_t e = 0; e < adjacency.columns.size(); ++e)
    arcs_local[e] = static_cast<SCOTCH_Num>(adjacency.columns[e]);
  // A weight array in SCOTCH_Num, all 1s where none is given.
  const auto scotch_weights = [](const std::vector<std::int64_t>& wide, std::size_t size) {
    std::vector<SCOTCH_Num> out(std::max<std::size_t>(size, 1), 1);
    std::copy(wide.begin(), wide.end(), out.begin());
    return out;
  };
  std::vector<SCOTCH_Num> vertex_weights = scotch_weights(weights.vertices, rows);
  std::vector<SCOTCH_Num> arc_weights = scotch_weights(weights.arcs, adjacency.columns.size());
  // Optional arrays are given by every rank or by none: a rank without rows or arcs follows.
  std::int64_t given[2] = {!weights.vertices.empty(), !weights.arcs.empty()};
  comm.all_reduce(std::span<std::int64_t>(given), reduce_op::max);
  const bool with_vertex_weights = given[0] != 0, with_arc_weights = given[1] != 0;
  weights = {};

  SCOTCH_Dgraph graph, bound;
  SCOTCH_Context context;
  SCOTCH_Strat strategy;
  SCOTCH_contextInit(&context);
  SCOTCH_contextOptionSetNum(&context, SCOTCH_OPTIONNUMDETERMINISTIC, 1);
  SCOTCH_contextOptionSetNum(&context, SCOTCH_OPTIONNUMRANDOMFIXEDSEED, 1);
  SCOTCH_contextRandomClone(&context);
  SCOTCH_contextRandomSeed(&context, static_cast<SCOTCH_Num>(options.seed % 1000000007u));
  int status = SCOTCH_contextThreadSpawn(&context, 1, nullptr);
  status |= SCOTCH_dgraphInit(&graph, comm.native());
  status |= SCOTCH_dgraphInit(&bound, comm.native());
  const auto edges = static_cast<SCOTCH_Num>(adjacency.num_edges());
  adjacency = csr{};  // copied: not held during PT-Scotch's own peak
  status |= SCOTCH_dgraphBuild(&graph, 0, static_cast<SCOTCH_Num>(rows),
                               static_cast<SCOTCH_Num>(rows), vertices.data(), nullptr,
                               with_vertex_weights ? vertex_weights.data() : nullptr, nullptr,
                               edges, edges, arcs_local.data(), nullptr,
                               with_arc_weights ? arc_weights.data() : nullptr);
  status |= SCOTCH_contextBindDgraph(&context, &graph, &bound);
  SCOTCH_stratInit(&strategy);
  status |= SCOTCH_stratDgraphMapBuild(&strategy, SCOTCH_STRATDEFAULT,
                                       static_cast<SCOTCH_Num>(comm.size()),
                                       static_cast<SCOTCH_Num>(parts), options.imbalance);
  // A failure before the collective partitioning call must not leave the others in it.
  std::int64_t failed = status != 0;
  comm.all_reduce(std::span<std::int64_t>(&failed, 1), reduce_op::max);
  if (failed == 0) {
    SCOTCH_contextRandomReset(&context);
    failed = SCOTCH_dgraphPart(&bound, static_cast<SCOTCH_Num>(parts), &strategy, result.data()) != 0;
    comm.all_reduce(std::span<std::int64_t>(&failed, 1), reduce_op::max);
  }
  SCOTCH_stratExit(&strategy);
  SCOTCH_dgraphExit(&bound);
  SCOTCH_dgraphExit(&graph);
  SCOTCH_contextExit(&context);
  SAR_CHECK(failed == 0, error, where, ": PT-Scotch failed (its message is above) on ",
            book.num_nodes(), " nodes and ", arcs, " arcs into ", parts, " parts");
  std::vector<int> part(rows);
  for (std::size_t r = 0; r < rows; ++r) {
    SAR_CHECK(result[r] >= 0 && result[r] < parts, error, where, ": PT-Scotch put node ",
              book.begin(rank) + static_cast<node_t>(r), " in part ", result[r]);
    part[r] = static_cast<int>(result[r]);
  }
  return part;
}

}  // namespace sar
