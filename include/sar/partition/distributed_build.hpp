// The distributed graph build: the in-edge CSR of a graph whose edges are spread over the ranks
// in any way, each rank ending with the rows of its own range of destinations. The same graph
// as sar::build_csr builds on one process from all the edges (symmetrised, duplicates merged,
// self-loops as asked), without any rank holding more than its rows plus a bounded round of
// edges in flight. 64-bit ids throughout.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include "sar/comm/communicator.hpp"
#include "sar/core/error.hpp"
#include "sar/core/types.hpp"
#include "sar/graph/builders.hpp"
#include "sar/graph/csr.hpp"
#include "sar/partition/partition_book.hpp"

namespace sar {

/// Edges sent to their destination's owner per round and rank in build_block_csr (bounds the
/// exchange buffers: 16 bytes per edge, twice when symmetrising).
inline constexpr std::int64_t default_build_round_edges = std::int64_t{1} << 22;

namespace detail {
/// This rank's rows [first, first + rows) of the in-edge CSR from (destination, source) pairs
/// of global ids (destinations in the range), exactly as build_csr shapes a row: sorted;
/// duplicates merged if asked; self-loops dropped unless kept; one added if asked.
inline csr block_csr_from_pairs(std::vector<std::int64_t>&& pairs, node_t first, node_t rows,
                                node_t num_nodes, const build_options& options) {
  const std::size_t m = pairs.size() / 2;
  std::vector<edge_t> offsets(static_cast<std::size_t>(rows) + 1, 0);
  for (std::size_t k = 0; k < m; ++k) ++offsets[static_cast<std::size_t>(pairs[2 * k] - first) + 1];
  for (node_t r = 0; r < rows; ++r) offsets[r + 1] += offsets[r];
  std::vector<node_t> columns(static_cast<std::size_t>(offsets.back()));
  {
    std::vector<edge_t> cursor(offsets.begin(), offsets.end() - 1);
    for (std::size_t k = 0; k < m; ++k)
      columns[static_cast<std::size_t>(cursor[static_cast<std::size_t>(pairs[2 * k] - first)]++)] =
          pairs[2 * k + 1];
  }
  pairs = {};
  const bool add_loops = options.self_loops == self_loop_policy::add;
  const bool drop_loops = options.self_loops != self_loop_policy::keep;
  std::vector<edge_t> kept(static_cast<std::size_t>(rows), 0);  // per row, before an added loop
  tbb::parallel_for(tbb::blocked_range<node_t>(0, rows), [&](const auto& range) {
    for (node_t r = range.begin(); r != range.end(); ++r) {
      const auto begin = columns.begin() + offsets[r];
      auto end = columns.begin() + offsets[r + 1];
      std::sort(begin, end);
      if (options.deduplicate) end = std::unique(begin, end);
      if (drop_loops) end = std::remove(begin, end, first + r);
      kept[static_cast<std::size_t>(r)] = end - begin;
    }
  });
  csr g;
  g.num_rows = rows;
  g.num_cols = num_nodes;
  g.offsets.assign(static_cast<std::size_t>(rows) + 1, 0);
  for (node_t r = 0; r < rows; ++r)
    g.offsets[r + 1] = g.offsets[r] + kept[static_cast<std::size_t>(r)] + (add_loops ? 1 : 0);
  g.columns.resize(static_cast<std::size_t>(g.offsets.back()));
  tbb::parallel_for(tbb::blocked_range<node_t>(0, rows), [&](const auto& range) {
    for (node_t r = range.begin(); r != range.end(); ++r) {
      const auto begin = columns.begin() + offsets[r];
      const auto end = begin + kept[static_cast<std::size_t>(r)];
      auto to = g.columns.begin() + g.offsets[r];
      if (!add_loops) {
        std::copy(begin, end, to);
        continue;
      }
      const auto split = std::lower_bound(begin, end, first + r);  // keep the row sorted
      to = std::copy(begin, split, to);
      *to++ = first + r;
      std::copy(split, end, to);
    }
  });
  return g;
}
/// Throws sar::invalid_argument on every rank (`where` naming the rank and the edge on the
/// rank that holds it, the others naming none) if any rank's edge_at(k), k < count, has an id
/// outside [0, book.num_nodes()), or the book does not have a range per rank, or round_edges
/// < 1. Collective.
template <communicator Comm, class EdgeAt>
void check_edge_ids(Comm& comm, std::int64_t count, EdgeAt&& edge_at, const partition_book& book,
                    std::int64_t round_edges, const char* where) {
  SAR_CHECK(book.num_parts() == comm.size() && round_edges >= 1, invalid_argument, where,
            ": a book of ", book.num_parts(), " ranges for ", comm.size(), " ranks, rounds of ",
            round_edges, " edges");
  const node_t n = book.num_nodes();
  std::int64_t bad = -1;
  for (std::int64_t k = 0; k < count && bad < 0; ++k) {
    const auto [s, d] = edge_at(k);
    if (s < 0 || s >= n || d < 0 || d >= n) bad = k;
  }
  std::int64_t any = bad >= 0 ? 1 : 0;
  comm.all_reduce(std::span<std::int64_t>(&any, 1), reduce_op::max);
  if (any == 0) return;
  SAR_CHECK(bad < 0, invalid_argument, where, ": rank ", comm.rank(), ": edge ", bad, " (",
            edge_at(bad).first, " -> ", edge_at(bad).second, ") has an id outside [0, ", n, ")");
  throw invalid_argument(message(where, ": another rank holds an edge with an id outside [0, ",
                                 n, ") (rank ", comm.rank(), " stops too)"));
}

/// Sends what emit(k, outgoing) appends to outgoing[q] (a vector of int64 per rank q) for each
/// of this rank's `count` items, in rounds of at most round_items items per rank (every rank
/// as many rounds), and returns everything received, in round and rank order. Collective.
template <communicator Comm, class Emit>
std::vector<std::int64_t> exchange_in_rounds(Comm& comm, std::int64_t count,
                                             std::int64_t round_items, Emit&& emit) {
  std::int64_t rounds = (count + round_items - 1) / round_items;
  comm.all_reduce(std::span<std::int64_t>(&rounds, 1), reduce_op::max);
  std::vector<std::int64_t> received;
  std::vector<std::vector<std::int64_t>> outgoing(static_cast<std::size_t>(comm.size()));
  for (std::int64_t round = 0; round < rounds; ++round) {
    const std::int64_t begin = std::min(count, round * round_items);
    const std::int64_t end = std::min(count, begin + round_items);
    for (auto& bucket : outgoing) bucket.clear();
    for (std::int64_t k = begin; k < end; ++k) emit(k, outgoing);
    for (auto& from_peer : all_to_all_vectors(comm, outgoing))
      received.insert(received.end(), from_peer.begin(), from_peer.end());
  }
  return received;
}

}  // namespace detail

/// This rank's rows of the in-edge CSR (row = destination - book.begin(rank), sorted columns =
/// global source ids) of the graph whose edges are the union over the ranks of `count` edges
/// each, edge k being edge_at(k) = {source, destination} (global ids in [0, book.num_nodes())).
/// The result equals rows [book.begin(rank), book.end(rank)) of build_csr(all edges, options).
/// Edges travel to their destination's owner (and, symmetrising, reversed to their source's
/// owner) in rounds of at most `round_edges` edges per rank.
/// Requires book.num_parts() == comm.size(). Collective. Throws sar::invalid_argument naming
/// the rank and the edge for an id out of range (every rank then throws alike).
template <communicator Comm, class EdgeAt>
csr build_block_csr(Comm& comm, std::int64_t count, EdgeAt&& edge_at, const partition_book& book,
                    const build_options& options,
                    std::int64_t round_edges = default_build_round_edges) {
  detail::check_edge_ids(comm, count, edge_at, book, round_edges, "sar::build_block_csr");
  std::vector<std::int64_t> pairs =  // (destination, source) received, interleaved
      detail::exchange_in_rounds(comm, count, round_edges, [&](std::int64_t k, auto& outgoing) {
        const auto [s, d] = edge_at(k);
        auto& to_destination = outgoing[static_cast<std::size_t>(book.owner(d))];
        to_destination.push_back(d);
        to_destination.push_back(s);
        if (options.symmetrise) {
          auto& to_source = outgoing[static_cast<std::size_t>(book.owner(s))];
          to_source.push_back(s);
          to_source.push_back(d);
        }
      });
  return detail::block_csr_from_pairs(std::move(pairs), book.begin(comm.rank()),
                                      book.size(comm.rank()), book.num_nodes(), options);
}

/// build_block_csr of the edges in `edges` (this rank's share; edges.num_nodes is ignored:
/// the book gives the node count).
template <communicator Comm>
csr build_block_csr(Comm& comm, const edge_list& edges, const partition_book& book,
                    const build_options& options,
                    std::int64_t round_edges = default_build_round_edges) {
  return build_block_csr(
      comm, static_cast<std::int64_t>(edges.size()),
      [&](std::int64_t k) {
        return std::pair<node_t, node_t>(edges.src[static_cast<std::size_t>(k)],
                                         edges.dst[static_cast<std::size_t>(k)]);
      },
      book, options, round_edges);
}

/// This rank's rows of the typed in-edge CSR of the graph whose edges are the union over the
/// ranks of `edges` (global ids in [0, book.num_nodes()); edges.num_nodes is ignored), edge k
/// of relation types[k]: rows [book.begin(rank), book.end(rank)) of build_typed_csr of all the
/// edges (each row sorted by (source, relation), a repeat within a relation kept once,
/// self-loops kept), and each entry's relation assigned to entry_types. Edges travel to their
/// destination's owner in rounds of at most round_edges per rank. Requires types.size() ==
/// edges.size(). Collective. Throws sar::invalid_argument as build_block_csr does.
template <communicator Comm>
csr build_typed_block_csr(Comm& comm, const edge_list& edges, std::span<const std::int32_t> types,
                          const partition_book& book, std::vector<std::int32_t>& entry_types,
                          std::int64_t round_edges = default_build_round_edges) {
  const auto count = static_cast<std::int64_t>(edges.size());
  SAR_CHECK(types.size() == edges.size(), invalid_argument, "sar::build_typed_block_csr: rank ",
            comm.rank(), ": ", edges.size(), " edges, ", types.size(), " relations");
  const auto edge_at = [&](std::int64_t k) {
    const auto at = static_cast<std::size_t>(k);
    return std::pair<node_t, node_t>(edges.src[at], edges.dst[at]);
  };
  detail::check_edge_ids(comm, count, edge_at, book, round_edges, "sar::build_typed_block_csr");
  const std::vector<std::int64_t> triples =  // (destination, source, relation) received
      detail::exchange_in_rounds(comm, count, round_edges, [&](std::int64_t k, auto& outgoing) {
        const auto [s, d] = edge_at(k);
        auto& to = outgoing[static_cast<std::size_t>(book.owner(d))];
        to.insert(to.end(), {d, s, types[static_cast<std::size_t>(k)]});
      });
  const node_t first = book.begin(comm.rank()), rows = book.size(comm.rank());
  const std::size_t m = triples.size() / 3;
  std::vector<edge_t> offsets(static_cast<std::size_t>(rows) + 1, 0);
  for (std::size_t k = 0; k < m; ++k) ++offsets[static_cast<std::size_t>(triples[3 * k] - first) + 1];
  for (node_t r = 0; r < rows; ++r) offsets[r + 1] += offsets[r];
  std::vector<std::pair<node_t, std::int32_t>> entries(m);  // (source, relation) by row
  {
    std::vector<edge_t> cursor(offsets.begin(), offsets.end() - 1);
    for (std::size_t k = 0; k < m; ++k)
      entries[static_cast<std::size_t>(cursor[static_cast<std::size_t>(triples[3 * k] - first)]++)] =
          {triples[3 * k + 1], static_cast<std::int32_t>(triples[3 * k + 2])};
  }
  std::vector<edge_t> kept(static_cast<std::size_t>(rows), 0);
  tbb::parallel_for(tbb::blocked_range<node_t>(0, rows), [&](const auto& range) {
    for (node_t r = range.begin(); r != range.end(); ++r) {
      const auto begin = entries.begin() + offsets[r], end = entries.begin() + offsets[r + 1];
      std::sort(begin, end);
      kept[static_cast<std::size_t>(r)] = std::unique(begin, end) - begin;
    }
  });
  csr g;
  g.num_rows = rows;
  g.num_cols = book.num_nodes();
  g.offsets.assign(static_cast<std::size_t>(rows) + 1, 0);
  for (node_t r = 0; r < rows; ++r) g.offsets[r + 1] = g.offsets[r] + kept[static_cast<std::size_t>(r)];
  g.columns.resize(static_cast<std::size_t>(g.offsets.back()));
  entry_types.resize(g.columns.size());
  for (node_t r = 0; r < rows; ++r)
    for (edge_t a = 0; a < kept[static_cast<std::size_t>(r)]; ++a) {
      const auto& [source, relation] = entries[static_cast<std::size_t>(offsets[r] + a)];
      g.columns[static_cast<std::size_t>(g.offsets[r] + a)] = source;
      entry_types[static_cast<std::size_t>(g.offsets[r] + a)] = relation;
    }
  return g;
}

/// The symmetric adjacency of this rank's rows of a block-distributed graph (`in_edges`: rows
/// book.begin(rank) + r, columns global ids): every edge in both directions, once, without
/// self-loops. What a graph partitioner needs (PT-Scotch requires exactly this). Collective.
template <communicator Comm>
csr symmetric_adjacency(Comm& comm, const csr& in_edges, const partition_book& book,
                        std::int64_t round_edges = default_build_round_edges) {
  const node_t first = book.begin(comm.rank());
  std::vector<node_t> row_of;  // row of each stored edge, without a copy of the columns
  row_of.reserve(static_cast<std::size_t>(in_edges.num_edges()));
  for (node_t r = 0; r < in_edges.num_rows; ++r)
    row_of.insert(row_of.end(), static_cast<std::size_t>(in_edges.degree(r)), first + r);
  return build_block_csr(
      comm, in_edges.num_edges(),
      [&](std::int64_t k) {
        return std::pair<node_t, node_t>(in_edges.columns[static_cast<std::size_t>(k)],
                                         row_of[static_cast<std::size_t>(k)]);
      },
      book,
      {.symmetrise = true, .deduplicate = true, .self_loops = self_loop_policy::remove},
      round_edges);
}

}  // namespace sar
