// Coarsening and refinement around a distributed partitioner. On a graph whose ids carry no
// locality, PT-Scotch's memory per rank falls slowly with P: nearly every node is a ghost of
// every rank, and the arcs do not shrink at any level of its own coarsening (about 190 bytes
// per arc of the rank, bench/RESULTS.md §32). Handing it the graph of small clusters (ghosts at
// most the clusters) and a sample of that graph's arcs, then projecting the parts back and
// moving single nodes to the part most of their neighbours are in, keeps the cut and takes the
// memory down.
//
//   indexed_adjacency g = index_adjacency(adjacency);       // neighbours numbered once
//   std::vector<node_t> root = star_clusters(comm, g, book, 32, seed);
//   coarse_graph coarse = contract(comm, g, book, root, weights);
//   sample_arcs(coarse, comm.rank(), 0.5, seed);
//   ... parts of the coarse graph ... -> project(comm, coarse, coarse_parts)
//   refine_parts(comm, g, book, weights, parts, 0.03, part, seed);
//
// Every function here is collective over the ranks of a block-distributed symmetric graph: rank
// r holds rows [book.begin(r), book.end(r)) (columns: global ids), no self-loops. No rank holds
// an array over all nodes: values of neighbours come from their owners (sar::directory_lookup).
#pragma once

#include <tbb/blocked_range.h>
#include <tbb/enumerable_thread_specific.h>
#include <tbb/parallel_for.h>
#include <tbb/parallel_sort.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "sar/comm/communicator.hpp"
#include "sar/partition/directory.hpp"
#include "sar/core/error.hpp"
#include "sar/core/rng.hpp"
#include "sar/core/types.hpp"
#include "sar/graph/csr.hpp"
#include "sar/partition/partition_book.hpp"

namespace sar {

/// How a graph is made smaller before a partitioner sees it, and refined after.
struct coarsening_options {
  /// Star clusters of at most this many nodes (star_clusters); 0 or 1: every node alone.
  node_t cluster_size = 0;
  /// The fraction of the weight-1 arcs handed to the partitioner (sample_arcs), in (0, 1].
  double arc_fraction = 1;
  /// Rounds of single-node moves after the parts are projected (refine_parts).
  int refine_rounds = 8;
  /// Whether the graph is made smaller at all.
  bool enabled() const { return cluster_size > 1 || arc_fraction < 1; }
};

/// This rank's rows of a symmetric graph with each column replaced by its slot among the
/// distinct columns: a value per neighbour is then fetched once per distinct neighbour
/// (directory_lookup of `ids`), not once per arc.
struct indexed_adjacency {
  /// Row r's arcs are slots[offsets[r] .. offsets[r + 1]).
  std::vector<edge_t> offsets{0};
  /// Per arc: the index of its column in `ids`.
  std::vector<std::uint32_t> slots;
  /// The distinct columns, ascending.
  std::vector<node_t> ids;

  /// Number of rows (this rank's nodes).
  node_t rows() const { return static_cast<node_t>(offsets.size()) - 1; }
  /// Number of arcs of row r.
  edge_t degree(node_t r) const { return offsets[r + 1] - offsets[r]; }
};

/// `adjacency` with its columns numbered (see indexed_adjacency). Not collective. Throws
/// sar::invalid_argument if a rank's distinct neighbours exceed 2^32 - 1.
inline indexed_adjacency index_adjacency(const csr& adjacency) {
  indexed_adjacency g;
  g.offsets = adjacency.offsets;
  g.ids = adjacency.columns;
  std::sort(g.ids.begin(), g.ids.end());
  g.ids.erase(std::unique(g.ids.begin(), g.ids.end()), g.ids.end());
  SAR_CHECK(g.ids.size() <= std::numeric_limits<std::uint32_t>::max(), invalid_argument,
            "sar::index_adjacency: ", g.ids.size(), " distinct neighbours on one rank");
  g.slots.resize(adjacency.columns.size());
  for (std::size_t e = 0; e < adjacency.columns.size(); ++e)
    g.slots[e] = static_cast<std::uint32_t>(
        std::lower_bound(g.ids.begin(), g.ids.end(), adjacency.columns[e]) - g.ids.begin());
  return g;
}

namespace detail {
/// The values of g's neighbours (per slot) where this rank holds `local` for its rows.
template <communicator Comm, class T>
std::vector<std::int64_t> neighbour_values(Comm& comm, const indexed_adjacency& g,
                                           const partition_book& book,
                                           const std::vector<T>& local) {
  const std::vector<std::int64_t> wide(local.begin(), local.end());
  return directory_lookup(comm, book, wide, g.ids);
}

/// A random key of node `id` in `round` (ties broken by the id).
inline std::pair<std::uint64_t, node_t> coarsen_key(const counter_rng& rng, int round, node_t id) {
  return {rng.bits(static_cast<std::uint64_t>(id), static_cast<std::uint64_t>(round))[0], id};
}
}  // namespace detail

/// Star clusters: the root (a node id) of each of this rank's nodes. In each of `rounds`
/// rounds, a free node whose random key is below every free neighbour's becomes a root
/// (`max_cluster` > its degree only: a root's cluster is itself and some of its neighbours),
/// then every free node joins its neighbouring root of least key; nodes still free at the end
/// are roots of themselves. So every cluster is connected (a star around its root) and holds
/// at most `max_cluster` nodes. The same clusters for a graph and a seed on any number of ranks.
/// Requires book.num_parts() == comm.size(), g of this rank's rows, max_cluster >= 1. Collective.
template <communicator Comm>
std::vector<node_t> star_clusters(Comm& comm, const indexed_adjacency& g,
                                  const partition_book& book, node_t max_cluster,
                                  std::uint64_t seed, int rounds = 4) {
  SAR_CHECK(g.rows() == book.size(comm.rank()) && max_cluster >= 1 && rounds >= 0, invalid_argument,
            "sar::star_clusters: rank ", comm.rank(), " holds ", g.rows(), " rows of its ",
            book.size(comm.rank()), ", clusters of at most ", max_cluster, " nodes, ", rounds,
            " rounds");
  const node_t first = book.begin(comm.rank());
  constexpr node_t free = -1;
  std::vector<node_t> root(static_cast<std::size_t>(g.rows()), free);
  std::vector<std::int64_t> degree(static_cast<std::size_t>(g.rows()));
  for (node_t r = 0; r < g.rows(); ++r) degree[r] = g.degree(r);
  std::vector<char> can_lead(g.ids.size());  // a neighbour's degree + 1 <= max_cluster
  {
    const auto degrees = detail::neighbour_values(comm, g, book, degree);
    for (std::size_t s = 0; s < g.ids.size(); ++s) can_lead[s] = degrees[s] + 1 <= max_cluster;
  }
  const counter_rng rng(seed, rng_stream::partition_random, /*sub_stream=*/1);
  std::vector<std::pair<std::uint64_t, node_t>> key(g.ids.size());  // each neighbour's, a round
  const auto parallel_rows = [&](auto&& body) {
    tbb::parallel_for(tbb::blocked_range<node_t>(0, g.rows()), [&](const auto& range) {
      for (node_t r = range.begin(); r != range.end(); ++r) body(r);
    });
  };
  for (int round = 0; round < rounds; ++round) {
    std::int64_t still_free = std::count(root.begin(), root.end(), free);
    if (min_max_over_ranks(comm, still_free).second == 0) break;
    tbb::parallel_for(std::size_t{0}, g.ids.size(),
                      [&](std::size_t s) { key[s] = detail::coarsen_key(rng, round, g.ids[s]); });
    // Roots: a free node that may lead, with the least key among its free neighbours that may.
    std::vector<std::int64_t> state = detail::neighbour_values(comm, g, book, root);
    parallel_rows([&](node_t r) {
      if (root[r] != free || degree[r] + 1 > max_cluster) return;
      const auto own = detail::coarsen_key(rng, round, first + r);
      for (edge_t e = g.offsets[r]; e < g.offsets[r + 1]; ++e) {
        const std::uint32_t s = g.slots[e];
        if (state[s] == free && can_lead[s] && key[s] < own) return;
      }
      root[r] = first + r;
    });
    // Joins: a free node joins its neighbouring root (a node that is its own root) of least key.
    state = detail::neighbour_values(comm, g, book, root);
    parallel_rows([&](node_t r) {
      if (root[r] != free) return;
      std::pair<std::uint64_t, node_t> best{std::numeric_limits<std::uint64_t>::max(), free};
      for (edge_t e = g.offsets[r]; e < g.offsets[r + 1]; ++e) {
        const std::uint32_t s = g.slots[e];
        if (state[s] == g.ids[s]) best = std::min(best, key[s]);
      }
      root[r] = best.second;
    });
  }
  for (node_t r = 0; r < g.rows(); ++r)
    if (root[r] == free) root[r] = first + r;
  return root;
}

/// The graph of the clusters, block-distributed over the ranks: coarse vertex c stands for the
/// cluster of the c-th root in id order, and rank r holds the clusters of the roots it owns.
struct coarse_graph {
  /// This rank's rows of the coarse graph: symmetric, no self-loops, sorted columns (global
  /// coarse ids).
  csr adjacency;
  /// Per arc: the number of the fine graph's arcs it stands for.
  std::vector<std::int64_t> arc_weights;
  /// Per row: the sum of its members' weights.
  std::vector<std::int64_t> vertex_weights;
  /// The ranges of coarse ids per rank.
  partition_book book;
  /// Per fine row of this rank: its coarse vertex.
  std::vector<node_t> coarse_of;
};

/// The coarse graph of the clusters `root` (star_clusters' result: per own row, a node id that
/// is its own root), each fine node weighing weights[r] (empty: 1 each). Collective.
/// Requires root of this rank's rows naming nodes that are their own roots.
template <communicator Comm>
coarse_graph contract(Comm& comm, const indexed_adjacency& g, const partition_book& book,
                      std::span<const node_t> root, std::span<const std::int64_t> weights = {}) {
  const int size = comm.size(), rank = comm.rank();
  const node_t first = book.begin(rank);
  SAR_CHECK(static_cast<node_t>(root.size()) == g.rows() &&
                (weights.empty() || weights.size() == root.size()),
            invalid_argument, "sar::contract: rank ", rank, " has ", g.rows(), " rows, ",
            root.size(), " roots, ", weights.size(), " weights");
  coarse_graph out;
  // The book: each rank numbers its roots in order after the roots of the ranks before it.
  std::vector<node_t> roots_per_rank(static_cast<std::size_t>(size), 0);
  for (node_t r = 0; r < g.rows(); ++r) roots_per_rank[rank] += root[r] == first + r;
  comm.all_reduce(std::span<node_t>(roots_per_rank), reduce_op::sum);
  std::vector<node_t> offsets(static_cast<std::size_t>(size) + 1, 0);
  for (int q = 0; q < size; ++q) offsets[q + 1] = offsets[q] + roots_per_rank[q];
  out.book = partition_book(std::move(offsets));
  std::vector<std::int64_t> own_coarse(static_cast<std::size_t>(g.rows()), -1);
  node_t next = out.book.begin(rank);
  for (node_t r = 0; r < g.rows(); ++r)
    if (root[r] == first + r) own_coarse[r] = next++;
  out.coarse_of = directory_lookup(comm, book, own_coarse, root);
  SAR_CHECK(
      std::none_of(out.coarse_of.begin(), out.coarse_of.end(), [](node_t c) { return c < 0; }),
      invalid_argument, "sar::contract: rank ", rank, " has a node whose root is not a root");
  own_coarse = {};

  // Vertex weights, summed by the coarse vertices' owners.
  const node_t coarse_first = out.book.begin(rank);
  std::vector<std::vector<std::int64_t>> outgoing(static_cast<std::size_t>(size));
  for (node_t r = 0; r < g.rows(); ++r) {
    auto& to = outgoing[static_cast<std::size_t>(out.book.owner(out.coarse_of[r]))];
    to.push_back(out.coarse_of[r]);
    to.push_back(weights.empty() ? 1 : weights[r]);
  }
  out.vertex_weights.assign(static_cast<std::size_t>(out.book.size(rank)), 0);
  for (const auto& from : all_to_all_vectors(comm, outgoing))
    for (std::size_t k = 0; k < from.size(); k += 2)
      out.vertex_weights[from[k] - coarse_first] += from[k + 1];

  // Arcs between different clusters, as (row, column) pairs at the row's owner, then counted.
  const std::vector<std::int64_t> neighbour_coarse =
      detail::neighbour_values(comm, g, book, out.coarse_of);
  for (auto& to : outgoing) to.clear();
  for (node_t r = 0; r < g.rows(); ++r)
    for (edge_t e = g.offsets[r]; e < g.offsets[r + 1]; ++e) {
      const node_t from = out.coarse_of[r], to = neighbour_coarse[g.slots[e]];
      if (from == to) continue;
      auto& bucket = outgoing[static_cast<std::size_t>(out.book.owner(from))];
      bucket.push_back(from);
      bucket.push_back(to);
    }
  std::vector<std::vector<std::int64_t>> pairs = all_to_all_vectors(comm, outgoing);
  outgoing = {};
  const node_t rows = out.book.size(rank);
  std::vector<edge_t> starts(static_cast<std::size_t>(rows) + 1, 0);
  for (const auto& from : pairs)
    for (std::size_t k = 0; k < from.size(); k += 2) ++starts[from[k] - coarse_first + 1];
  for (node_t r = 0; r < rows; ++r) starts[r + 1] += starts[r];
  std::vector<node_t> columns(static_cast<std::size_t>(starts.back()));
  {
    std::vector<edge_t> cursor(starts.begin(), starts.end() - 1);
    for (const auto& from : pairs)
      for (std::size_t k = 0; k < from.size(); k += 2)
        columns[cursor[from[k] - coarse_first]++] = from[k + 1];
  }
  pairs = {};
  csr& a = out.adjacency;
  a.num_rows = rows;
  a.num_cols = out.book.num_nodes();
  a.offsets.assign(static_cast<std::size_t>(rows) + 1, 0);
  for (node_t r = 0; r < rows; ++r) {
    const auto begin = columns.begin() + starts[r], end = columns.begin() + starts[r + 1];
    std::sort(begin, end);
    for (auto run = begin; run != end;) {
      const auto stop = std::find_if(run, end, [&](node_t c) { return c != *run; });
      a.columns.push_back(*run);
      out.arc_weights.push_back(stop - run);
      run = stop;
    }
    a.offsets[r + 1] = static_cast<edge_t>(a.columns.size());
  }
  return out;
}

/// Keeps a `fraction` of the coarse graph's arcs of weight 1, drawn by a key of the unordered
/// pair (so the graph stays symmetric), and every heavier arc: a partitioner's memory grows with
/// the arcs it is given (PT-Scotch: about 190 bytes per arc of its rank, bench/RESULTS.md §32),
/// and refine_parts, run on the whole graph afterwards, restores what the missing arcs blur.
/// Requires 0 < fraction <= 1, coarse of this `rank`. Not collective.
inline void sample_arcs(coarse_graph& coarse, int rank, double fraction, std::uint64_t seed) {
  SAR_CHECK(fraction > 0 && fraction <= 1, invalid_argument, "sar::sample_arcs: fraction ",
            fraction);
  if (fraction == 1) return;
  const counter_rng rng(seed, rng_stream::partition_random, /*sub_stream=*/3);
  const auto below = static_cast<std::uint64_t>(fraction * 18446744073709551615.0);
  csr& a = coarse.adjacency;
  edge_t kept = 0;
  for (node_t r = 0; r < a.num_rows; ++r) {
    const node_t u = coarse.book.begin(rank) + r;
    const edge_t begin = a.offsets[r];
    a.offsets[r] = kept;
    for (edge_t e = begin; e < a.offsets[r + 1]; ++e) {
      const node_t v = a.columns[e];
      if (coarse.arc_weights[e] == 1 &&
          rng.bits(static_cast<std::uint64_t>(std::min(u, v)),
                   static_cast<std::uint64_t>(std::max(u, v)))[0] >= below)
        continue;
      a.columns[kept] = v;
      coarse.arc_weights[kept++] = coarse.arc_weights[e];
    }
  }
  a.offsets[a.num_rows] = kept;
  a.columns.resize(static_cast<std::size_t>(kept));
  a.columns.shrink_to_fit();
  coarse.arc_weights.resize(static_cast<std::size_t>(kept));
  coarse.arc_weights.shrink_to_fit();
}

/// The part of each of this rank's fine nodes, from `coarse_parts` (this rank's rows of
/// coarse.book). Collective.
template <communicator Comm>
std::vector<int> project(Comm& comm, const coarse_graph& coarse,
                         std::span<const int> coarse_parts) {
  const std::vector<std::int64_t> wide(coarse_parts.begin(), coarse_parts.end());
  const std::vector<std::int64_t> parts =
      directory_lookup(comm, coarse.book, wide, coarse.coarse_of);
  return std::vector<int>(parts.begin(), parts.end());
}

/// Moves single nodes to lower the edge cut: in each of `rounds` rounds, half of the nodes
/// (drawn by key, so that neighbours rarely move at once) may move to the part holding the most
/// of their neighbours when it holds more than their own part does, and moves into a part are
/// taken, most cut arcs saved first, while they keep its weight at most (1 + imbalance) times
/// the mean (each rank a 1/P share of the room). Stops early once no node moves. `part` holds
/// this rank's nodes' parts in [0, parts); weights as in contract. Collective. Returns the
/// number of moves over all ranks.
template <communicator Comm>
std::int64_t refine_parts(Comm& comm, const indexed_adjacency& g, const partition_book& book,
                          std::span<const std::int64_t> weights, int parts, double imbalance,
                          std::vector<int>& part, std::uint64_t seed, int rounds = 8) {
  const int size = comm.size();
  const node_t first = book.begin(comm.rank());
  SAR_CHECK(static_cast<node_t>(part.size()) == g.rows() && parts >= 1 &&
                (weights.empty() || weights.size() == part.size()),
            invalid_argument, "sar::refine_parts: rank ", comm.rank(), " has ", g.rows(), " rows, ",
            part.size(), " parts, ", weights.size(), " weights");
  // Every rank learns of a part out of range (the next steps are collective).
  const auto outside =
      std::find_if(part.begin(), part.end(), [&](int p) { return p < 0 || p >= parts; });
  SAR_CHECK(min_max_over_ranks(comm, outside == part.end() ? 0 : 1).second == 0, invalid_argument,
            "sar::refine_parts: ",
            outside == part.end() ? std::string("another rank") : message("rank ", comm.rank()),
            " has a node in a part outside [0, ", parts, ")");
  const auto weight = [&](node_t r) { return weights.empty() ? std::int64_t{1} : weights[r]; };
  const counter_rng rng(seed, rng_stream::partition_random, /*sub_stream=*/2);
  std::int64_t moved_total = 0;
  std::vector<std::int64_t> load(static_cast<std::size_t>(parts));
  // A thread's scan: arcs per part of the row at hand, the parts they touch, its candidates
  // (arcs saved, row, to).
  using move = std::tuple<std::int64_t, node_t, int>;
  struct scan {
    std::vector<std::int64_t> links;
    std::vector<int> touched;
    std::vector<move> moves;
  };
  tbb::enumerable_thread_specific<scan> scans(
      [&] { return scan{std::vector<std::int64_t>(static_cast<std::size_t>(parts), 0), {}, {}}; });
  for (int round = 0; round < rounds; ++round) {
    std::fill(load.begin(), load.end(), 0);
    for (node_t r = 0; r < g.rows(); ++r) load[part[r]] += weight(r);
    comm.all_reduce(std::span<std::int64_t>(load), reduce_op::sum);
    std::int64_t total = 0;
    for (std::int64_t w : load) total += w;
    const auto most =
        static_cast<std::int64_t>((1 + imbalance) * static_cast<double>(total) / parts);
    const std::vector<std::int64_t> neighbour_part = detail::neighbour_values(comm, g, book, part);

    // Candidate moves, on every thread; sorted by arcs saved, then row (a total order, so the
    // moves are the same on any thread count).
    tbb::parallel_for(tbb::blocked_range<node_t>(0, g.rows(), 4096), [&](const auto& range) {
      auto& [links, touched, found] = scans.local();
      for (node_t r = range.begin(); r < range.end(); ++r) {
        if ((rng.bits(static_cast<std::uint64_t>(first + r),
                      static_cast<std::uint64_t>(round))[0] & 1) == 0)
          continue;
        for (edge_t e = g.offsets[r]; e < g.offsets[r + 1]; ++e) {
          const auto p = static_cast<int>(neighbour_part[g.slots[e]]);
          if (links[p]++ == 0) touched.push_back(p);
        }
        int best = part[r];
        for (int p : touched)  // ties keep the node where it is, else take the first seen
          if (links[p] > links[best]) best = p;
        if (best != part[r]) found.emplace_back(links[best] - links[part[r]], r, best);
        for (int p : touched) links[p] = 0;
        touched.clear();
      }
    });
    std::vector<move> moves;
    for (scan& thread : scans) {
      moves.insert(moves.end(), thread.moves.begin(), thread.moves.end());
      thread.moves.clear();
    }
    tbb::parallel_sort(moves.begin(), moves.end(), [](const move& a, const move& b) {
      return std::get<0>(a) > std::get<0>(b) ||
             (std::get<0>(a) == std::get<0>(b) && std::get<1>(a) < std::get<1>(b));
    });
    // Each rank may fill a 1/P share of a part's room; moves out give room back. Two passes, so
    // that a move refused first may use the room a later move out gave.
    std::vector<std::int64_t> room(static_cast<std::size_t>(parts));
    for (int p = 0; p < parts; ++p) room[p] = (most - load[p]) / size;
    std::vector<char> taken(moves.size(), 0);
    std::int64_t moved = 0;
    for (int pass = 0; pass < 2; ++pass)
      for (std::size_t k = 0; k < moves.size(); ++k) {
        const auto [saved, r, to] = moves[k];
        if (taken[k] || room[to] < weight(r)) continue;
        room[to] -= weight(r);
        room[part[r]] += weight(r);
        part[r] = to;
        taken[k] = 1;
        ++moved;
      }
    comm.all_reduce(std::span<std::int64_t>(&moved, 1), reduce_op::sum);
    moved_total += moved;
    if (moved == 0) break;
  }
  return moved_total;
}

}  // namespace sar
