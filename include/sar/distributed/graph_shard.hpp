// The graph of one rank, split by the owner of each edge's source (docs/algorithms.md, notation):
// rank p keeps every edge INTO its nodes; block q holds the edges whose source rank q owns.
//
// Column convention (the same in every schedule):
// - Remote block q != p: column c stands for global id sources(q)[c], the c-th of the sorted
//   unique ids of rank q that send edges to p. Rank q sends exactly those rows, in that order.
// - Local block q == p: column c IS the local row c (global id first_global() + c), so round 0
//   of the ring reads this rank's own feature block with no copy. sources(p) is EMPTY and the
//   halo plan sends/receives nothing to/from oneself.
//
// Rows are compressed: block q lists only the local destinations that have at least one edge
// from q (`rows`), so memory is O(num_local + edges + halo) for this rank and never
// O(P * num_local) or O(global nodes).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/parallel_sort.h>

#include "sar/core/error.hpp"
#include "sar/core/types.hpp"
#include "sar/graph/builders.hpp"
#include "sar/graph/csr.hpp"
#include "sar/partition/graph_part.hpp"

namespace sar {

/// The edges of one rank whose sources one peer owns.
struct shard_block {
  int peer = 0;                ///< the rank owning this block's sources
  std::vector<node_t> rows;    ///< sorted local destination rows with >= 1 edge from peer
  /// num_rows = rows.size(); row k lists the columns (see the convention above) of the edges
  /// into local row rows[k], sorted, with multiplicity (parallel edges are kept).
  csr adjacency;
  /// The transpose, for backward: num_rows = adjacency.num_cols; row c lists the LOCAL ROW ids
  /// (not indices into `rows`) of the destinations of column c's edges, increasing;
  /// num_cols = the rank's num_local. A remote column always has >= 1 entry.
  csr transposed;
  /// transposed edge t is adjacency edge transposed_edge[t] (to carry per-edge values).
  std::vector<edge_t> transposed_edge;
  /// adjacency edge e is entry edge_rows[e] of the part's in_edges: its row of the edge table
  /// (graph_shard::edge_features, edge_types). Empty when the part has neither edge features
  /// nor edge types.
  std::vector<edge_t> edge_rows;

  /// Number of edges from peer (with multiplicity).
  edge_t num_edges() const { return adjacency.num_edges(); }
  /// Number of columns (see the column convention).
  node_t num_columns() const { return adjacency.num_cols; }

  /// The same edges with one row per local node (num_rows = num_local, rows without edges
  /// from peer empty): the uncompressed form (sar::graph_block takes the compressed one
  /// directly through graph_block::rows). O(num_local) extra memory: tests and one-off use.
  /// Requires num_local >= every entry of rows.
  csr full_adjacency(node_t num_local) const {
    csr out;
    out.num_rows = num_local;
    out.num_cols = adjacency.num_cols;
    out.offsets.assign(num_local + 1, 0);
    for (std::size_t k = 0; k < rows.size(); ++k) out.offsets[rows[k] + 1] = adjacency.degree(k);
    for (node_t i = 0; i < num_local; ++i) out.offsets[i + 1] += out.offsets[i];
    out.columns = adjacency.columns;
    return out;
  }
  /// Bytes the block holds allocated (capacities).
  std::size_t memory_bytes() const {
    return rows.capacity() * sizeof(node_t) + adjacency.memory_bytes() +
           transposed.memory_bytes() +
           (transposed_edge.capacity() + edge_rows.capacity()) * sizeof(edge_t);
  }
};

/// The graph of one rank (see the top of this file): its in-edges in one block per rank that
/// owns their sources.
class graph_shard {
 public:
  graph_shard() = default;

  /// Builds the shard of part.part. Local, not collective; parallel with oneTBB; the result
  /// does not depend on the number of threads. Memory and time depend only on this part.
  /// Requires 0 <= part.part < P, part.in_edges.num_rows == book.size(part.part),
  /// part.in_edges.num_cols == book.num_nodes(), a valid CSR.
  /// Throws sar::invalid_argument naming the part and the broken requirement.
  explicit graph_shard(const graph_part& part) { build(part); }

  /// This rank (the part it was built from).
  int rank() const { return rank_; }
  /// Number of ranks P.
  int num_parts() const { return book_.num_parts(); }
  /// The partition of the global ids over the ranks.
  const partition_book& book() const { return book_; }
  /// Number of nodes this rank owns.
  node_t num_local() const { return num_local_; }
  /// Global id of local row 0 (a rank owns a contiguous range).
  node_t first_global() const { return book_.begin(rank_); }

  /// Sorted unique global ids of rank q that send edges here; empty for q == rank().
  const std::vector<node_t>& sources(int q) const { return sources_[q]; }
  /// The edges whose sources rank q owns (q == rank(): the local block).
  const shard_block& block(int q) const { return blocks_[q]; }
  /// Every block, indexed by rank.
  std::span<const shard_block> blocks() const { return blocks_; }
  /// In-degree of every local node (all its in-edges, with multiplicity and self-loops): the
  /// GLOBAL in-degree, since every in-edge of a node lives on its owner.
  const std::vector<node_t>& in_degree() const { return in_degree_; }

  /// The id in the dataset (before relabelling) of each local row: part.original_ids, or the
  /// global id when the part has none. Partition independent: it keys random numbers.
  const std::vector<node_t>& node_ids() const { return node_ids_; }
  /// The global id behind column `column` of block q (see the column convention).
  node_t global_source(int q, node_t column) const {
    return q == rank_ ? first_global() + column : sources_[q][column];
  }
  /// The part's edge features (one row per in-edge, in the part's in_edges order; blocks
  /// find their edges' rows through shard_block::edge_rows), or 0 x 0 when it has none.
  const matrixf& edge_features() const { return edge_features_; }
  /// The part's edge types (one relation per in-edge, in the part's in_edges order, found as
  /// the features are), or empty when the graph is homogeneous.
  const std::vector<std::int32_t>& edge_types() const { return edge_types_; }
  /// Number of edges into this rank's nodes (all blocks).
  edge_t num_edges() const {
    edge_t total = 0;
    for (const auto& b : blocks_) total += b.num_edges();
    return total;
  }
  /// Bytes the shard holds allocated (capacities).
  std::size_t memory_bytes() const {
    std::size_t total = (in_degree_.capacity() + node_ids_.capacity()) * sizeof(node_t) +
                        static_cast<std::size_t>(edge_features_.size()) * sizeof(float) +
                        edge_types_.capacity() * sizeof(std::int32_t);
    for (const auto& s : sources_) total += s.capacity() * sizeof(node_t);
    for (const auto& b : blocks_) total += b.memory_bytes();
    return total;
  }

 private:
  void build(const graph_part& part);
  static void fill_block(shard_block& block, std::span<const node_t> dst,
                         std::span<const node_t> src, std::span<const edge_t> entries,
                         std::vector<node_t>& sources, bool local, node_t first_global,
                         node_t num_local);

  int rank_ = 0;
  node_t num_local_ = 0;
  partition_book book_;
  std::vector<std::vector<node_t>> sources_{1};
  std::vector<shard_block> blocks_{1};
  std::vector<node_t> in_degree_;
  std::vector<node_t> node_ids_;
  matrixf edge_features_;
  std::vector<std::int32_t> edge_types_;
};

inline void graph_shard::build(const graph_part& part) {
  constexpr const char* where = "sar::graph_shard";
  const partition_book& book = part.book;
  const int P = book.num_parts();
  const int p = part.part;
  const csr& g = part.in_edges;
  SAR_CHECK(P >= 1 && p >= 0 && p < P, invalid_argument, where, ": part ", p, " outside [0, ", P,
            ")");
  SAR_CHECK(g.num_rows == book.size(p), invalid_argument, where, ": part ", p, " has ",
            g.num_rows, " rows but the partition book gives it ", book.size(p), " nodes");
  SAR_CHECK(g.num_cols == book.num_nodes(), invalid_argument, where, ": part ", p, " has ",
            g.num_cols, " columns but the graph has ", book.num_nodes(), " nodes");
  g.validate(where);

  rank_ = p;
  book_ = book;
  num_local_ = g.num_rows;
  const node_t n = g.num_rows;
  const edge_t m = g.num_edges();

  SAR_CHECK(part.original_ids.empty() || static_cast<node_t>(part.original_ids.size()) == n,
            invalid_argument, where, ": part ", p, " has ", part.original_ids.size(),
            " original ids for ", n, " nodes");
  node_ids_ = part.original_ids;
  SAR_CHECK(part.edge_features.cols() == 0 || part.edge_features.rows() == m, invalid_argument,
            where, ": part ", p, " has ", part.edge_features.rows(), " edge feature rows for ", m,
            " in-edges");
  SAR_CHECK(part.edge_types.empty() || static_cast<edge_t>(part.edge_types.size()) == m,
            invalid_argument, where, ": part ", p, " has ", part.edge_types.size(),
            " edge types for ", m, " in-edges");
  const bool edge_data = part.edge_features.cols() > 0 || !part.edge_types.empty();
  edge_features_ = part.edge_features;
  edge_types_ = part.edge_types;
  if (node_ids_.empty())
    for (node_t i = 0; i < n; ++i) node_ids_.push_back(first_global() + i);

  in_degree_.resize(n);
  tbb::parallel_for(tbb::blocked_range<node_t>(0, n), [&](const auto& r) {
    for (node_t i = r.begin(); i != r.end(); ++i) in_degree_[i] = g.degree(i);
  });

  // 1. Bucket the edges by source owner, keeping row order (a parallel counting sort over a
  //    fixed number of row chunks, so the result is independent of the thread count).
  const node_t num_chunks = std::clamp<node_t>(n / 1024, n > 0 ? 1 : 0, 256);
  auto chunk_begin = [&](node_t c) { return n * c / num_chunks; };
  std::vector<edge_t> counts(static_cast<std::size_t>(num_chunks) * P, 0);  // [chunk][owner]
  std::vector<std::int32_t> owner(m);
  tbb::parallel_for(node_t{0}, num_chunks, [&](node_t c) {
    edge_t* count = counts.data() + c * P;
    for (edge_t e = g.offsets[chunk_begin(c)]; e < g.offsets[chunk_begin(c + 1)]; ++e) {
      owner[e] = book.owner(g.columns[e]);
      ++count[owner[e]];
    }
  });
  std::vector<edge_t> bucket_begin(P + 1, 0);  // edges of owner q: [bucket_begin[q], ...[q+1])
  {
    edge_t position = 0;
    for (int q = 0; q < P; ++q) {
      bucket_begin[q] = position;
      for (node_t c = 0; c < num_chunks; ++c) {
        const edge_t here = counts[c * P + q];
        counts[c * P + q] = position;  // becomes the chunk's write cursor
        position += here;
      }
    }
    bucket_begin[P] = position;
  }
  std::vector<node_t> dst(m), src(m);
  std::vector<edge_t> entry(edge_data ? m : 0);  // the in_edges entry of each bucketed edge
  tbb::parallel_for(node_t{0}, num_chunks, [&](node_t c) {
    edge_t* cursor = counts.data() + c * P;
    for (node_t i = chunk_begin(c); i < chunk_begin(c + 1); ++i)
      for (edge_t e = g.offsets[i]; e < g.offsets[i + 1]; ++e) {
        const edge_t to = cursor[owner[e]]++;
        dst[to] = i;
        src[to] = g.columns[e];
        if (edge_data) entry[to] = e;
      }
  });
  owner = {};
  counts = {};

  // 2. One block per owner, built in parallel (each block is itself parallel inside).
  sources_.assign(P, {});
  blocks_.assign(P, {});
  const node_t first = book.begin(p);
  tbb::parallel_for(0, P, [&](int q) {
    const std::size_t b = bucket_begin[q], e = bucket_begin[q + 1];
    blocks_[q].peer = q;
    fill_block(blocks_[q], std::span(dst).subspan(b, e - b), std::span(src).subspan(b, e - b),
               edge_data ? std::span<const edge_t>(entry).subspan(b, e - b)
                         : std::span<const edge_t>(),
               sources_[q], q == p, first, n);
  });
}

// dst: local rows, non-decreasing; src: global sources of those edges (same length); entries:
// their in_edges entries (same length), or empty without edge data.
inline void graph_shard::fill_block(shard_block& block, std::span<const node_t> dst,
                                    std::span<const node_t> src, std::span<const edge_t> entries,
                                    std::vector<node_t>& sources, bool local,
                                    node_t first_global, node_t num_local) {
  const edge_t m = static_cast<edge_t>(dst.size());
  // Sources: sorted unique global ids (remote blocks only).
  if (!local) {
    sources.assign(src.begin(), src.end());
    tbb::parallel_sort(sources.begin(), sources.end());
    sources.erase(std::unique(sources.begin(), sources.end()), sources.end());
  }
  // Compressed rows and offsets (dst is sorted: runs are rows).
  block.rows.clear();
  std::vector<edge_t> offsets{0};
  for (edge_t e = 0; e < m; ++e) {
    if (e > 0 && dst[e] == dst[e - 1]) continue;
    if (e > 0) offsets.push_back(e);
    block.rows.push_back(dst[e]);
  }
  if (m > 0) offsets.push_back(m);
  csr& a = block.adjacency;
  a.num_rows = static_cast<node_t>(block.rows.size());
  a.num_cols = local ? num_local : static_cast<node_t>(sources.size());
  a.offsets = std::move(offsets);
  a.columns.resize(m);
  const bool edge_data = !entries.empty();
  block.edge_rows.resize(edge_data ? m : 0);
  tbb::parallel_for(tbb::blocked_range<node_t>(0, a.num_rows), [&](const auto& r) {
    std::vector<std::pair<node_t, edge_t>> pairs;  // sort scratch, with edge data
    for (node_t k = r.begin(); k != r.end(); ++k) {
      const edge_t begin = a.offsets[k], degree = a.offsets[k + 1] - begin;
      for (edge_t e = begin; e < begin + degree; ++e)
        a.columns[e] = local ? src[e] - first_global
                             : std::lower_bound(sources.begin(), sources.end(), src[e]) -
                                   sources.begin();
      const auto columns = std::span(a.columns).subspan(begin, degree);
      if (!edge_data) {
        std::sort(columns.begin(), columns.end());
        continue;
      }
      const auto edge_rows = std::span(block.edge_rows).subspan(begin, degree);
      std::copy_n(entries.begin() + begin, degree, edge_rows.begin());
      detail::sort_row_with_payload(columns, edge_rows, pairs);
    }
  });

  // Transpose with the edge map: count, scan, place edge ids, then sort each row's edge ids
  // (adjacency edges are numbered in destination order, so rows come out increasing).
  csr& t = block.transposed;
  t.num_rows = a.num_cols;
  t.num_cols = num_local;
  std::vector<edge_t> counts(a.num_cols, 0);
  tbb::parallel_for(tbb::blocked_range<edge_t>(0, m), [&](const auto& r) {
    for (edge_t e = r.begin(); e != r.end(); ++e)
      std::atomic_ref(counts[a.columns[e]]).fetch_add(1, std::memory_order_relaxed);
  });
  detail::exclusive_scan(counts, t.offsets);
  std::vector<edge_t> cursor(t.offsets.begin(), t.offsets.end() - 1);
  block.transposed_edge.resize(m);
  tbb::parallel_for(tbb::blocked_range<edge_t>(0, m), [&](const auto& r) {
    for (edge_t e = r.begin(); e != r.end(); ++e)
      block.transposed_edge[std::atomic_ref(cursor[a.columns[e]]).fetch_add(
          1, std::memory_order_relaxed)] = e;
  });
  cursor = {};
  t.columns.resize(m);
  tbb::parallel_for(tbb::blocked_range<node_t>(0, t.num_rows), [&](const auto& r) {
    for (node_t c = r.begin(); c != r.end(); ++c) {
      const auto from = block.transposed_edge.begin() + t.offsets[c];
      const auto to = block.transposed_edge.begin() + t.offsets[c + 1];
      std::sort(from, to);
      for (auto it = from; it != to; ++it) t.columns[it - block.transposed_edge.begin()] = dst[*it];
    }
  });
}

}  // namespace sar
