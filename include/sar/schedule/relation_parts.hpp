// A graph block's edges split by relation (its edge types, sar/graph/schema.hpp), so each
// relation's part runs through the SpMM kernels as a block of its own: what R-GCN aggregates
// (sar/nn/rgcn.hpp).
//   detail::relation_blocks   the parts of one block, one side (its edges, or their transposes)
//   relation_parts_cache      the parts kept between products by the block's owner
//   detail::relation_parts_of the kept parts when the block has a cache, else parts made anew
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <utility>
#include <vector>

#include <tbb/parallel_for.h>

#include "sar/core/error.hpp"
#include "sar/core/types.hpp"
#include "sar/graph/block.hpp"
#include "sar/graph/csr.hpp"
#include "sar/kernels/dense.hpp"

namespace sar {

namespace detail {

/// Which products a block's relation parts serve: forward's (the edges) or backward's (their
/// transposes).
enum class relation_side { forward, backward };

/// A block's edges split by relation, one side of them: block(r) is a graph_block over the
/// same destination and halo rows holding relation r's edges alone, so each relation runs
/// through the tiled SpMM kernels. Forward: the edges (transposed null); for a compressed
/// parent, compressed to the rows with an edge of the relation. Backward: the transposes
/// alone (edges null). Every other part covers only the span of its side's rows (destinations
/// forward, halo rows backward) from the first with an edge of the relation to the last
/// (covered(r, m): the rows of a side-sized m that part r's row k is row k of), so a relation
/// into one node type of a type-ordered graph costs that type's rows, not all. Built in
/// O(edges + relations x rows), in parallel over rows. Throws sar::invalid_argument naming
/// `where` for an edge whose relation is outside [0, relations).
class relation_blocks {
 public:
  relation_blocks(const graph_block& parent, std::int32_t relations, relation_side side,
                  const char* where)
      : parts_(static_cast<std::size_t>(relations)), rows_(parts_.size()),
        span_(parts_.size(), {0, -1}), blocks_(parts_.size(), parent) {
    const auto relation_of = [&](edge_t e) {
      const std::int32_t r = parent.edge_type(e);
      SAR_CHECK(r >= 0 && r < relations, invalid_argument, where, ": edge ", e, " has relation ",
                r, " of ", relations);
      return static_cast<std::size_t>(r);
    };
    const bool forward = side == relation_side::forward;
    if (forward) {
      split(*parent.edges, relation_of, parts_);
      if (parent.compressed())
        for (std::size_t r = 0; r < parts_.size(); ++r) keep_rows_with_edges(parent, r);
    } else {
      split(*parent.transposed, [&](edge_t s) {
        return relation_of(parent.transposed_edges[static_cast<std::size_t>(s)]);
      }, parts_);
    }
    if (!forward || !parent.compressed())
      for (std::size_t r = 0; r < parts_.size(); ++r) keep_span_with_edges(r);
    for (std::size_t r = 0; r < parts_.size(); ++r) {
      graph_block& b = blocks_[r];
      b.rows = forward && parent.compressed() ? std::span<const node_t>(rows_[r])
                                              : std::span<const node_t>();
      b.edges = forward ? &parts_[r] : nullptr;
      b.transposed = forward ? nullptr : &parts_[r];
      b.edge_tiles = b.transposed_tiles = nullptr;  // the parent's tilings are of its edges
      b.relation_parts = nullptr;
      b.whole = false;
      b.edge_features = nullptr;
      b.edge_types = {};
      b.edge_rows = {};
      b.transposed_edges = {};
    }
  }
  relation_blocks(const relation_blocks&) = delete;
  relation_blocks& operator=(const relation_blocks&) = delete;

  /// Relation r's part of the block (see the class); skip it when empty(r): it may have no
  /// rows at all.
  const graph_block& block(std::int32_t r) const { return blocks_[static_cast<std::size_t>(r)]; }
  /// Whether relation r has no edge in the block.
  bool empty(std::int32_t r) const { return parts_[static_cast<std::size_t>(r)].num_edges() == 0; }
  /// The side's row that block(r)'s row 0 is (0 for a compressed part).
  node_t first_row(std::int32_t r) const { return span_[static_cast<std::size_t>(r)].first; }
  /// The rows of m (a matrix or block with a row per row of the part's side) that block(r)'s
  /// rows are, in order: all of m for a compressed part (its `rows` name them).
  template <class Rows>
  auto covered(std::int32_t r, Rows&& m) const {
    const auto [first, count] = span_[static_cast<std::size_t>(r)];
    return m.middleRows(first, count < 0 ? m.rows() : count);
  }

 private:
  /// out[r] := the entries e of c with relation(e) == r, over c's rows and columns, each row's
  /// in c's order. Parallel over rows; the same on any thread count. Throws what relation
  /// throws.
  template <class Relation>
  static void split(const csr& c, const Relation& relation, std::vector<csr>& out) {
    const std::size_t R = out.size();
    for (csr& part : out)
      part = {c.num_rows, c.num_cols,
              std::vector<edge_t>(static_cast<std::size_t>(c.num_rows) + 1), {}};
    const double per_row = c.num_rows > 0 ? static_cast<double>(c.num_edges()) / c.num_rows : 0;
    for_row_chunks(c.num_rows, per_row, [&](Eigen::Index begin, Eigen::Index end) {
      std::vector<edge_t> count(R);
      for (Eigen::Index k = begin; k < end; ++k) {  // each row's counts, into its own cells
        std::fill(count.begin(), count.end(), 0);
        for (edge_t e = c.offsets[k]; e < c.offsets[k + 1]; ++e) ++count[relation(e)];
        for (std::size_t r = 0; r < R; ++r)
          out[r].offsets[static_cast<std::size_t>(k) + 1] = count[r];
      }
    });
    tbb::parallel_for(std::size_t{0}, R, [&](std::size_t r) {
      std::partial_sum(out[r].offsets.begin(), out[r].offsets.end(), out[r].offsets.begin());
      out[r].columns.resize(static_cast<std::size_t>(out[r].offsets.back()));
    });
    for_row_chunks(c.num_rows, per_row, [&](Eigen::Index begin, Eigen::Index end) {
      std::vector<edge_t> next(R);
      for (Eigen::Index k = begin; k < end; ++k) {
        for (std::size_t r = 0; r < R; ++r) next[r] = out[r].offsets[static_cast<std::size_t>(k)];
        for (edge_t e = c.offsets[k]; e < c.offsets[k + 1]; ++e) {
          const std::size_t r = relation(e);
          out[r].columns[static_cast<std::size_t>(next[r]++)] = c.columns[e];
        }
      }
    });
  }
  /// Drops relation r's rows without an edge, rows_[r] := the destination rows of those left.
  void keep_rows_with_edges(const graph_block& parent, std::size_t r) {
    csr& a = parts_[r];
    node_t kept = 0;
    for (node_t k = 0; k < a.num_rows; ++k) {
      if (a.offsets[k + 1] == a.offsets[k]) continue;
      rows_[r].push_back(parent.local_row(k));
      a.offsets[++kept] = a.offsets[k + 1];
    }
    a.num_rows = kept;
    a.offsets.resize(static_cast<std::size_t>(kept) + 1);
  }

  /// Drops relation r's rows before its first and after its last with an edge (all when it
  /// has none): span_[r] := the first row kept and their count.
  void keep_span_with_edges(std::size_t r) {
    csr& a = parts_[r];
    const auto& o = a.offsets;
    node_t first = 0, last = a.num_rows;
    while (first < last && o[static_cast<std::size_t>(first) + 1] == 0) ++first;
    while (last > first && o[static_cast<std::size_t>(last) - 1] == o.back()) --last;
    // The rows before `first` hold no entry, so the kept offsets still start at 0.
    a.offsets.erase(a.offsets.begin() + last + 1, a.offsets.end());
    a.offsets.erase(a.offsets.begin(), a.offsets.begin() + first);
    a.num_rows = last - first;
    span_[r] = {first, last - first};
  }

  std::vector<csr> parts_;                 // each relation's edges, or their transpose
  std::vector<std::vector<node_t>> rows_;  // each part's destination rows (compressed parents)
  std::vector<std::pair<node_t, node_t>> span_;  // each part's first row and count (-1: all)
  std::vector<graph_block> blocks_;
};

}  // namespace detail

/// The relation parts of one block (detail::relation_blocks), made on first use for each
/// relation count and side and kept: the owner of a block that is aggregated every epoch (a
/// local_schedule) keeps one beside it, as it keeps the SpMM tilings (spmm_tile_cache), so
/// products do not split the edges again in every gather and scatter (27 % of a one-process
/// R-GCN epoch, bench/RESULTS.md §36). Costs, per side kept, 8 bytes per edge and 8 per row
/// and relation. Requires the block's edges, transposes and types to stay unchanged while the
/// cache is used with it. Thread-safe.
class relation_parts_cache {
 public:
  /// block's parts for `relations` relations on `side`, made now if not kept yet. Throws what
  /// detail::relation_blocks throws (and keeps nothing then).
  const detail::relation_blocks& parts(const graph_block& block, std::int32_t relations,
                                       detail::relation_side side, const char* where) {
    const std::lock_guard lock(mutex_);
    for (const auto& kept : kept_)
      if (kept.relations == relations && kept.side == side) return *kept.parts;
    auto parts = std::make_unique<const detail::relation_blocks>(block, relations, side, where);
    kept_.push_back({relations, side, std::move(parts)});
    return *kept_.back().parts;
  }

 private:
  struct entry {
    std::int32_t relations;
    detail::relation_side side;
    std::unique_ptr<const detail::relation_blocks> parts;
  };
  std::mutex mutex_;
  std::vector<entry> kept_;
};

namespace detail {
/// block's relation parts: its owner's kept ones (graph_block::relation_parts), else made
/// into `made` (valid while `made` lives). Throws what relation_blocks throws.
inline const relation_blocks& relation_parts_of(const graph_block& block, std::int32_t relations,
                                                relation_side side, const char* where,
                                                std::optional<relation_blocks>& made) {
  if (block.relation_parts != nullptr)
    return block.relation_parts->parts(block, relations, side, where);
  return made.emplace(block, relations, side, where);
}
}  // namespace detail

}  // namespace sar
