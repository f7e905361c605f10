// Bulk samplers: the blocks of k minibatches drawn at once from one stacked sparse product per
// layer (docs/algorithms.md §7), and the full-neighbourhood blocks of layer-wise inference.
//
// Layers are numbered from the input: block 0 feeds the first graph layer, block L - 1 the
// last, whose destinations are the seeds. Sampling walks from the seeds down. A minibatch's
// rows form nested levels (sar/schedule/schedule.hpp, layered_graph): level L is the seeds,
// level l is level l + 1 followed by the vertices layer l's sampling added (in increasing
// dataset id), so every block's destinations are the first rows of its sources.
//
//   node-wise (GraphSAGE): Q has one row per (minibatch, vertex of level l + 1), a 1 in the
//     vertex's column; P = Q A is the stacked rows of A; each row draws min(fanout, degree)
//     distinct in-neighbours uniformly (darts, sar/sampling/darts.hpp; fanout -1: all).
//     With fanouts per relation (sampler_options::relation_fanouts), a row draws apart among
//     its in-edges of each relation, each with its own count. The block keeps the picked
//     edges. Layers normalise a destination by its in-degree in
//     the block (DGL's rule); GCN a source by its out-degree in the whole graph, which the
//     minibatch loop supplies (sampled_block::source_degrees): a source's degree within the
//     block would depend on how a minibatch's seeds are split over ranks.
//   layer-wise (LADIES): Q has one row per minibatch, ones at its level l + 1; P = Q (Â o Â),
//     Â = D_in^-1/2 A D_out^-1/2, gives each candidate source j its importance p_j (the
//     squared column norm of Â restricted to the minibatch's rows); each row draws s distinct
//     sources with probability proportional to p_j (successive sampling). The block holds
//     the edges of A from level l + 1 into the picked sources (Q_R A Q_C: the stacked rows of
//     A filtered to each minibatch's picks) with GCN scales c_j = out_j^-1/2 / (s p~_j),
//     p~ = p / sum p, and destination scales 1 / sum_j c_j: Â re-weighted by the inverse
//     sampling probability and row-normalised, as the LADIES paper does (the factors of the
//     destination side cancel in the normalisation).
//
// Random numbers: a row's darts are keyed by (seed, epoch, minibatch, layer, node id or ~0
// for a LADIES row), so a minibatch's sample is the same drawn alone or in a bulk, on any
// thread count and any rank count. No sentinel vertex: levels are explicit sizes.
//
// The sampler reads the graph through a sampling graph (sar/sampling/sampling_graph.hpp): rows
// of A by dataset id and LADIES' importance sums. sampling_graph is the whole graph in one
// process; distributed_sampling_graph (sar/sampling/distributed_sampling_graph.hpp) fetches
// rows from the ranks that own them (the 1.5D product). On P ranks a minibatch's seeds are
// split over the ranks and each rank samples the tree of its share: a node-wise row's picks
// depend only on its key, so they are the same as in one process; LADIES' importances are
// summed over the whole minibatch's level (every rank knows it: the seeds and all picks), so
// every rank draws the minibatch's picks, and keeps in its level only the picks its rows reach
// (a pick no destination reaches changes no output, in one process either).
#pragma once

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <iterator>
#include <numeric>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <oneapi/tbb/enumerable_thread_specific.h>
#include <oneapi/tbb/parallel_for.h>

#include "sar/core/bf16.hpp"
#include "sar/core/error.hpp"
#include "sar/core/sparse_rows.hpp"
#include "sar/core/types.hpp"
#include "sar/graph/builders.hpp"
#include "sar/graph/csr.hpp"
#include "sar/kernels/dense.hpp"
#include "sar/sampling/darts.hpp"
#include "sar/sampling/sampling_graph.hpp"
#include "sar/sampling/spgemm.hpp"
#include "sar/schedule/local_schedule.hpp"

namespace sar {

/// The layers of one sampled minibatch as plain data (sar-sample writes it; sampled_minibatch
/// in sar/sampling/minibatch.hpp runs a model on it).
struct minibatch_sample {
  std::vector<node_t> ids;            ///< dataset ids of level 0 (all input rows), seeds first
  std::vector<node_t> level_sizes;    ///< n_0 >= n_1 >= ... >= n_L (n_L = the seeds)
  std::vector<sampled_block> blocks;  ///< block l: level l (sources) -> level l + 1

  /// The seeds: the first level_sizes.back() ids.
  std::span<const node_t> seeds() const {
    return {ids.data(), static_cast<std::size_t>(level_sizes.back())};
  }
};

enum class sampler_kind { node_wise, layer_wise };

/// How bulk_sampler samples.
struct sampler_options {
  /// Node-wise (fanout per node) or layer-wise (LADIES: sources per minibatch).
  sampler_kind kind = sampler_kind::node_wise;
  /// Per layer from the input: the fanout (node-wise; -1 = all in-neighbours) or the sources
  /// drawn per minibatch (layer-wise, >= 1).
  std::vector<node_t> fanouts{};
  /// Keys the random numbers of the sampling.
  std::uint64_t seed = 0;
  /// Node-wise on a graph with relations, per layer from the input (at most one list per
  /// layer): a fanout per relation, as DGL's sample_neighbors with a fanout per edge type.
  /// A node draws relation_fanouts[l][t] of its in-edges of relation t (-1: all of them, 0:
  /// none), each relation apart. An empty list (or none) for layer l: fanouts[l] over all its
  /// in-edges, whatever their relations.
  std::vector<std::vector<node_t>> relation_fanouts{};

  /// Whether layer l draws a fanout per relation.
  bool by_relation(std::size_t l) const {
    return l < relation_fanouts.size() && !relation_fanouts[l].empty();
  }
};

/// Node pairs a minibatch's sample leaves out of its blocks, each in both directions: the
/// supervision edges of a link-prediction minibatch and their reverses (DGL's
/// exclude='reverse_id'), so a model does not see the edge it is asked to predict. A picked
/// edge that is excluded is dropped after the draw (the other picks stay what they were, so a
/// sample does not depend on which rank drew it).
class excluded_pairs {
 public:
  /// Excludes nothing.
  excluded_pairs() = default;
  /// Excludes (first[i], second[i]) and (second[i], first[i]) for every i. Requires spans of
  /// one length.
  excluded_pairs(std::span<const node_t> first, std::span<const node_t> second) {
    SAR_CHECK(first.size() == second.size(), invalid_argument, "sar::excluded_pairs: ",
              first.size(), " first and ", second.size(), " second nodes");
    for (std::size_t i = 0; i < first.size(); ++i)
      keys_.push_back(key(first[i], second[i]));
    std::sort(keys_.begin(), keys_.end());
    keys_.erase(std::unique(keys_.begin(), keys_.end()), keys_.end());
  }
  /// Whether the edge u -> v (or v -> u) is excluded.
  bool contains(node_t u, node_t v) const {
    return std::binary_search(keys_.begin(), keys_.end(), key(u, v));
  }
  /// Whether nothing is excluded.
  bool empty() const { return keys_.empty(); }

 private:
  static std::pair<node_t, node_t> key(node_t u, node_t v) {
    return {std::min(u, v), std::max(u, v)};
  }
  std::vector<std::pair<node_t, node_t>> keys_;  // (smaller, larger), sorted
};

/// Throws sar::invalid_argument naming `where` for an empty fanout list, a fanout of 0 or
/// below -1, or -1 for the layer-wise sampler.
inline void check_sampler_options(const char* where, const sampler_options& o) {
  SAR_CHECK(!o.fanouts.empty(), invalid_argument, where, ": no fanouts (one per layer)");
  for (std::size_t l = 0; l < o.fanouts.size(); ++l)
    SAR_CHECK(o.fanouts[l] >= 1 || (o.fanouts[l] == -1 && o.kind == sampler_kind::node_wise),
              invalid_argument, where, ": fanout ", o.fanouts[l], " of layer ", l,
              o.kind == sampler_kind::node_wise ? " (a positive count, or -1 for all neighbours)"
                                                : " (a positive count of sources per layer)");
  SAR_CHECK(o.relation_fanouts.empty() || o.kind == sampler_kind::node_wise, invalid_argument,
            where, ": fanouts per relation are node-wise (LADIES draws sources per layer)");
  SAR_CHECK(o.relation_fanouts.size() <= o.fanouts.size(), invalid_argument, where, ": ",
            o.relation_fanouts.size(), " layers of fanouts per relation for ", o.fanouts.size(),
            " layers");
  for (std::size_t l = 0; l < o.relation_fanouts.size(); ++l)
    for (std::size_t t = 0; t < o.relation_fanouts[l].size(); ++t)
      SAR_CHECK(o.relation_fanouts[l][t] >= -1, invalid_argument, where, ": fanout ",
                o.relation_fanouts[l][t], " of relation ", t, " in layer ", l,
                " (a count, 0 for none, or -1 for all)");
}

namespace detail {

/// A map from dataset ids to rows of the minibatch being built (-1: none): an array of the
/// graph's size while that is at most `dense_limit` ids (fastest), else a hash table of the
/// ids marked (memory of the minibatch's size, not the graph's: no array of N per rank on
/// the distributed path). reset() after each use.
class id_marks {
 public:
  /// Graphs of up to this many nodes get an array.
  static constexpr node_t default_dense_limit = node_t{1} << 22;

  id_marks(node_t nodes, node_t dense_limit)
      : dense_(nodes <= dense_limit), dense_marks_(dense_ ? static_cast<std::size_t>(nodes) : 0, -1) {}
  /// The row of v, -1 if not marked.
  node_t find(node_t v) const {
    if (dense_) return dense_marks_[static_cast<std::size_t>(v)];
    if (keys_.empty()) return -1;
    for (std::size_t at = slot_of(v);; at = (at + 1) & (keys_.size() - 1)) {
      if (keys_[at] == v) return rows_[at];
      if (keys_[at] < 0) return -1;
    }
  }
  /// Marks v with `row`.
  void set(node_t v, node_t row) {
    if (dense_) {
      dense_marks_[static_cast<std::size_t>(v)] = row;
      return;
    }
    if (2 * (used_ + 1) > keys_.size()) grow();
    std::size_t at = slot_of(v);
    while (keys_[at] >= 0 && keys_[at] != v) at = (at + 1) & (keys_.size() - 1);
    if (keys_[at] < 0) ++used_;
    keys_[at] = v;
    rows_[at] = row;
  }
  /// Unmarks every id; `marked` lists them (the array form clears only those).
  void reset(std::span<const node_t> marked) {
    if (dense_) {
      for (node_t v : marked) dense_marks_[static_cast<std::size_t>(v)] = -1;
      return;
    }
    std::fill(keys_.begin(), keys_.end(), -1);
    used_ = 0;
  }

 private:
  std::size_t slot_of(node_t v) const {
    return static_cast<std::size_t>((static_cast<std::uint64_t>(v) * 0x9E3779B97F4A7C15ull) >> 20) &
           (keys_.size() - 1);
  }
  void grow() {
    std::vector<node_t> keys = std::move(keys_), rows = std::move(rows_);
    keys_.assign(std::max<std::size_t>(64, 2 * keys.size()), -1);
    rows_.assign(keys_.size(), -1);
    used_ = 0;
    for (std::size_t k = 0; k < keys.size(); ++k)
      if (keys[k] >= 0) set(keys[k], rows[k]);
  }
  bool dense_;
  std::vector<node_t> dense_marks_;
  std::vector<node_t> keys_, rows_;  // the hash table: keys -1 = empty, power-of-2 size
  std::size_t used_ = 0;
};

/// Per-thread id_marks.
class row_marker {
 public:
  explicit row_marker(node_t nodes, node_t dense_limit = id_marks::default_dense_limit)
      : marks_([=] { return id_marks(nodes, dense_limit); }) {}
  id_marks& local() { return marks_.local(); }

 private:
  tbb::enumerable_thread_specific<id_marks> marks_;
};

/// Appends to `ids` (marked in `mark` with their rows) the entries of `picked` not marked
/// yet, in order of first appearance (a function of `picked` alone: deterministic).
inline void append_new(std::vector<node_t>& ids, id_marks& mark, std::span<const node_t> picked) {
  for (node_t v : picked)
    if (mark.find(v) < 0) {
      mark.set(v, static_cast<node_t>(ids.size()));
      ids.push_back(v);
    }
}

/// 1 / sqrt(max(d, 1)).
inline double inverse_sqrt_degree(node_t d) {
  return 1.0 / std::sqrt(static_cast<double>(std::max<node_t>(d, 1)));
}

/// The first `rows` ids of a level as a block's id list.
inline std::vector<node_t> prefix(const std::vector<node_t>& ids, node_t rows) {
  return {ids.begin(), ids.begin() + rows};
}

}  // namespace detail

namespace detail {

/// Node-wise picks of each row of `rows` drawn apart per relation: the entries of relation t
/// draw fanouts[t] of them (-1: all, 0: none) by darts keyed by key_of(row) with the relation
/// in the node key's bits 40 and up (node + ((t + 1) << 40): another stream than the row's
/// draw over all relations). Returns the picks row by row, relation after relation (each
/// relation's in its order in the row), and assigns `entries` the entry of rows.a of each
/// pick (as sample_rows does). Throws sar::invalid_argument if rows has no relations or one
/// has no fanout.
template <class KeyOf>
sparse_matrix sample_by_relation(const adjacency_rows& rows, std::span<const node_t> fanouts,
                                 std::uint64_t seed, KeyOf&& key_of, std::vector<edge_t>& entries) {
  constexpr const char* where = "sar::bulk_sampler";
  const sparse_matrix& a = rows.a;
  SAR_CHECK(rows.types.size() == a.pattern.columns.size(), invalid_argument, where,
            ": fanouts per relation on a graph without relations");
  // One sub-row per (row, relation present with a fanout): its entries in their row order.
  sparse_matrix sub;
  sub.pattern.num_rows = 0;
  sub.pattern.num_cols = a.cols();
  sub.pattern.offsets.assign(1, 0);
  std::vector<edge_t> entry_of;  // the entry of a of each sub-row entry
  std::vector<node_t> row_of, want;
  std::vector<std::int32_t> relation_of;
  std::vector<edge_t> order;
  for (node_t r = 0; r < a.rows(); ++r) {
    order.resize(static_cast<std::size_t>(a.pattern.offsets[r + 1] - a.pattern.offsets[r]));
    std::iota(order.begin(), order.end(), a.pattern.offsets[r]);
    std::stable_sort(order.begin(), order.end(), [&](edge_t x, edge_t y) {
      return rows.types[static_cast<std::size_t>(x)] < rows.types[static_cast<std::size_t>(y)];
    });
    for (std::size_t i = 0; i < order.size();) {
      const std::int32_t t = rows.types[static_cast<std::size_t>(order[i])];
      SAR_CHECK(t >= 0 && static_cast<std::size_t>(t) < fanouts.size(), invalid_argument, where,
                ": an edge of relation ", t, ", fanouts for ", fanouts.size(), " relations");
      std::size_t end = i;
      while (end < order.size() && rows.types[static_cast<std::size_t>(order[end])] == t) ++end;
      if (fanouts[static_cast<std::size_t>(t)] != 0) {
        for (std::size_t k = i; k < end; ++k) {
          entry_of.push_back(order[k]);
          sub.pattern.columns.push_back(a.pattern.columns[static_cast<std::size_t>(order[k])]);
        }
        sub.pattern.offsets.push_back(static_cast<edge_t>(sub.pattern.columns.size()));
        row_of.push_back(r);
        relation_of.push_back(t);
        want.push_back(fanouts[static_cast<std::size_t>(t)]);
        ++sub.pattern.num_rows;
      }
      i = end;
    }
  }
  sub.values.assign(sub.pattern.columns.size(), 1.0);
  std::vector<edge_t> sub_entries;
  const sparse_matrix sub_picked = sample_rows(sub, want, seed, [&](node_t s) {
    dart_key key = key_of(row_of[static_cast<std::size_t>(s)]);
    key.node += static_cast<std::uint64_t>(relation_of[static_cast<std::size_t>(s)] + 1) << 40;
    return key;
  }, &sub_entries);
  // Sub-rows are in row order: row r's picks are its sub-rows' picks, joined.
  sparse_matrix picked;
  picked.pattern.num_rows = a.rows();
  picked.pattern.num_cols = a.cols();
  picked.pattern.offsets.assign(static_cast<std::size_t>(a.rows()) + 1, 0);
  for (node_t s = 0; s < sub.rows(); ++s)
    picked.pattern.offsets[static_cast<std::size_t>(row_of[static_cast<std::size_t>(s)]) + 1] +=
        sub_picked.pattern.offsets[s + 1] - sub_picked.pattern.offsets[s];
  for (node_t r = 0; r < a.rows(); ++r) picked.pattern.offsets[r + 1] += picked.pattern.offsets[r];
  picked.pattern.columns = sub_picked.pattern.columns;
  picked.values = sub_picked.values;
  entries.resize(sub_entries.size());
  for (std::size_t j = 0; j < sub_entries.size(); ++j)
    entries[j] = entry_of[static_cast<std::size_t>(sub_entries[j])];
  return picked;
}

}  // namespace detail

/// Samples the blocks of k minibatches at once, from any sampling graph.
class bulk_sampler {
 public:
  /// For a graph of num_nodes nodes; graphs of more than dense_limit nodes mark ids in hash
  /// tables instead of arrays of num_nodes per thread (detail::id_marks). Throws
  /// sar::invalid_argument for bad options (check_sampler_options).
  bulk_sampler(node_t num_nodes, sampler_options options,
               node_t dense_limit = detail::id_marks::default_dense_limit)
      : options_(std::move(options)), marker_(num_nodes, dense_limit) {
    check_sampler_options("sar::bulk_sampler", options_);
  }
  /// One process: samples `graph` (in-edges, square; it must outlive the sampler).
  bulk_sampler(const csr& graph, sampler_options options,
               node_t dense_limit = detail::id_marks::default_dense_limit)
      : bulk_sampler(graph.num_rows, std::move(options), dense_limit) {
    local_.emplace(graph);
  }

  /// The options it was made with.
  const sampler_options& options() const { return options_; }

  /// One process: the samples of minibatches batches[0..k) (their seeds: distinct node ids of
  /// the graph); minibatch b is number first_minibatch + b of `epoch` (keys its random
  /// numbers). Each sample is the same as sampling that minibatch alone. Throws
  /// sar::invalid_argument for an empty minibatch or a seed outside the graph or listed twice,
  /// sar::error if the sampler was made without a graph. Parallel; not for concurrent calls.
  std::vector<minibatch_sample> sample(std::span<const std::vector<node_t>> batches,
                                       std::uint64_t epoch, std::uint64_t first_minibatch) {
    SAR_CHECK(local_.has_value(), error, "sar::bulk_sampler::sample: made without a graph; "
              "pass the sampling graph");
    return sample(*local_, batches, batches, epoch, first_minibatch);
  }

  /// The samples of this process's share of minibatches batches[0..k): sample b is the tree
  /// of shares[b] (a subset of batches[b], possibly empty) within minibatch b, which has the
  /// seeds batches[b] (every rank passes the same batches). Node-wise, it is the sample one
  /// process draws for shares[b]; layer-wise, the picks are those of the whole minibatch.
  /// With `exclude` (empty, or one per minibatch), minibatch b's blocks leave out the edges
  /// exclude[b] names. Collective on a distributed graph. Throws as above (a share may be
  /// empty).
  template <sampling_graph_of Graph>
  std::vector<minibatch_sample> sample(Graph& graph, std::span<const std::vector<node_t>> batches,
                                       std::span<const std::vector<node_t>> shares,
                                       std::uint64_t epoch, std::uint64_t first_minibatch,
                                       std::span<const excluded_pairs> exclude = {}) {
    constexpr const char* where = "sar::bulk_sampler::sample";
    const node_t n = graph.num_nodes();
    const std::size_t k = batches.size();
    const auto layers = options_.fanouts.size();
    SAR_CHECK(shares.size() == k && (exclude.empty() || exclude.size() == k), invalid_argument,
              where, ": ", shares.size(), " shares and ", exclude.size(),
              " exclusions for ", k, " minibatches");
    detail::row_marker& marker = marker_;
    const auto check_seeds = [&](std::span<const node_t> seeds, std::uint64_t b) {
      auto& mark = marker.local();
      for (node_t v : seeds) {
        SAR_CHECK(v >= 0 && v < n, invalid_argument, where, ": seed ", v, " of minibatch ", b,
                  " outside [0, ", n, ")");
        SAR_CHECK(mark.find(v) < 0, invalid_argument, where, ": seed ", v,
                  " listed twice in minibatch ", b);
        mark.set(v, 0);
      }
      mark.reset(seeds);
    };
    std::vector<minibatch_sample> out(k);
    std::vector<std::vector<node_t>> whole_level(k);  // layer-wise: the minibatch's level
    for (std::size_t b = 0; b < k; ++b) {
      SAR_CHECK(!batches[b].empty(), invalid_argument, where, ": minibatch ",
                first_minibatch + b, " has no seeds");
      check_seeds(batches[b], first_minibatch + b);
      check_seeds(shares[b], first_minibatch + b);
      out[b].ids = shares[b];
      out[b].level_sizes.assign(layers + 1, 0);
      out[b].level_sizes[layers] = static_cast<node_t>(shares[b].size());
      out[b].blocks.resize(layers);
      if (options_.kind == sampler_kind::layer_wise) {
        whole_level[b] = batches[b];
        std::sort(whole_level[b].begin(), whole_level[b].end());
      }
    }

    for (std::size_t l = layers; l-- > 0;) {
      // This process's rows: every minibatch's level l + 1, stacked; P = Q A by rows of A.
      std::vector<node_t> row_start(k + 1, 0);
      for (std::size_t b = 0; b < k; ++b)
        row_start[b + 1] = row_start[b] + out[b].level_sizes[l + 1];
      std::vector<node_t> stacked(static_cast<std::size_t>(row_start[k]));
      for (std::size_t b = 0; b < k; ++b)
        std::copy_n(out[b].ids.begin(), out[b].level_sizes[l + 1], stacked.begin() + row_start[b]);
      if (options_.kind == sampler_kind::node_wise)
        sample_node_wise(graph.rows(stacked, options_.by_relation(l)), row_start, stacked, out,
                         l, epoch, first_minibatch, exclude);
      else
        sample_layer_wise(graph, row_start, stacked, out, whole_level, l, epoch, first_minibatch,
                          exclude);
    }
    return out;
  }

 private:
  /// Node-wise layer l: each row of rows_of_a draws its fanout; the picks join the level.
  void sample_node_wise(const adjacency_rows& rows_of_a, const std::vector<node_t>& row_start,
                        const std::vector<node_t>& stacked, std::vector<minibatch_sample>& out,
                        std::size_t l, std::uint64_t epoch, std::uint64_t first_minibatch,
                        std::span<const excluded_pairs> exclude) {
    const bool edge_ids = !rows_of_a.first_edge.empty();
    std::vector<edge_t> entries;  // with edge ids: the entry of rows_of_a of each pick
    const auto key_of = [&](node_t r) {
      const auto b = static_cast<std::size_t>(
          std::upper_bound(row_start.begin(), row_start.end(), r) - row_start.begin() - 1);
      return dart_key{epoch, first_minibatch + b, static_cast<std::uint64_t>(stacked[r]), l};
    };
    sparse_matrix picked =
        options_.by_relation(l)
            ? detail::sample_by_relation(rows_of_a, options_.relation_fanouts[l], options_.seed,
                                         key_of, entries)
            : sample_rows(rows_of_a.a, std::vector<node_t>(stacked.size(), options_.fanouts[l]),
                          options_.seed, key_of, edge_ids ? &entries : nullptr);
    if (!exclude.empty()) drop_excluded(picked, edge_ids ? &entries : nullptr, row_start, stacked,
                                        exclude);
    detail::row_marker& marker = marker_;
    tbb::parallel_for(std::size_t{0}, out.size(), [&](std::size_t b) {
      minibatch_sample& s = out[b];
      auto& mark = marker.local();
      for (std::size_t r = 0; r < s.ids.size(); ++r) mark.set(s.ids[r], static_cast<node_t>(r));
      const node_t first = row_start[b], rows = s.level_sizes[l + 1];
      const edge_t e0 = picked.pattern.offsets[first];
      const edge_t e1 = picked.pattern.offsets[first + rows];
      detail::append_new(s.ids, mark, std::span<const node_t>(picked.pattern.columns).subspan(
                                          static_cast<std::size_t>(e0),
                                          static_cast<std::size_t>(e1 - e0)));
      csr& block = s.blocks[l].edges;
      block.num_rows = rows;
      block.num_cols = static_cast<node_t>(s.ids.size());
      block.offsets.resize(static_cast<std::size_t>(rows) + 1);
      for (node_t r = 0; r <= rows; ++r) block.offsets[r] = picked.pattern.offsets[first + r] - e0;
      block.columns.resize(static_cast<std::size_t>(e1 - e0));
      for (edge_t e = e0; e < e1; ++e) block.columns[e - e0] = mark.find(picked.pattern.columns[e]);
      if (edge_ids) {  // each pick's edge: its row's first edge id plus its place in the row
        std::vector<edge_t>& ids = s.blocks[l].edge_ids;
        ids.resize(static_cast<std::size_t>(e1 - e0));
        for (node_t r = 0; r < rows; ++r) {
          const node_t row = first + r;
          for (edge_t e = picked.pattern.offsets[row]; e < picked.pattern.offsets[row + 1]; ++e)
            ids[e - e0] = rows_of_a.first_edge[static_cast<std::size_t>(row)] +
                          (entries[static_cast<std::size_t>(e)] - rows_of_a.a.pattern.offsets[row]);
        }
      }
      mark.reset(s.ids);
      s.level_sizes[l] = block.num_cols;
      s.blocks[l].ids = detail::prefix(s.ids, block.num_cols);
    });
  }

  /// Removes from `picked` (row r: the picks of destination stacked[r], of the minibatch
  /// whose rows start at row_start[b]) the edges its minibatch excludes, and their entries.
  static void drop_excluded(sparse_matrix& picked, std::vector<edge_t>* entries,
                            const std::vector<node_t>& row_start,
                            const std::vector<node_t>& stacked,
                            std::span<const excluded_pairs> exclude) {
    csr& p = picked.pattern;
    edge_t kept = 0;
    for (std::size_t b = 0; b + 1 < row_start.size(); ++b)
      for (node_t r = row_start[b]; r < row_start[b + 1]; ++r) {
        const edge_t begin = p.offsets[r], end = p.offsets[r + 1];
        p.offsets[r] = kept;
        for (edge_t e = begin; e < end; ++e) {
          if (exclude[b].contains(stacked[r], p.columns[e])) continue;
          p.columns[kept] = p.columns[e];
          picked.values[kept] = picked.values[e];
          if (entries) (*entries)[kept] = (*entries)[e];
          ++kept;
        }
      }
    p.offsets[p.num_rows] = kept;
    p.columns.resize(static_cast<std::size_t>(kept));
    picked.values.resize(static_cast<std::size_t>(kept));
    if (entries) entries->resize(static_cast<std::size_t>(kept));
  }

  /// Layer-wise layer l: every minibatch draws s sources from the importances of its whole
  /// level; this process's rows keep their edges into the picks (less those it excludes).
  template <class Graph>
  void sample_layer_wise(Graph& graph, const std::vector<node_t>& row_start,
                         const std::vector<node_t>& stacked, std::vector<minibatch_sample>& out,
                         std::vector<std::vector<node_t>>& whole_level, std::size_t l,
                         std::uint64_t epoch, std::uint64_t first_minibatch,
                         std::span<const excluded_pairs> exclude) {
    const std::size_t k = out.size();
    // P = Q (Â o Â): one row per minibatch, the importance of every candidate source.
    sparse_matrix q;
    q.pattern.num_rows = static_cast<node_t>(k);
    q.pattern.num_cols = graph.num_nodes();
    q.pattern.offsets.assign(1, 0);
    for (const auto& level : whole_level) {
      q.pattern.columns.insert(q.pattern.columns.end(), level.begin(), level.end());
      q.pattern.offsets.push_back(static_cast<edge_t>(q.pattern.columns.size()));
    }
    q.values.assign(q.pattern.columns.size(), 1.0);
    const ladies_importance importance = graph.importance(q);
    const std::vector<node_t> want(k, options_.fanouts[l]);
    const sparse_matrix picked = sample_rows(importance.weights, want, options_.seed,
                                             [&](node_t b) {
      return dart_key{epoch, first_minibatch + static_cast<std::uint64_t>(b), ~std::uint64_t{0},
                      l};
    });
    const adjacency_rows fetched = graph.rows(stacked);
    const sparse_matrix& rows_of_a = fetched.a;
    const bool edge_ids = !fetched.first_edge.empty();
    const auto s_count = static_cast<double>(options_.fanouts[l]);
    detail::row_marker& marker = marker_;
    tbb::parallel_for(std::size_t{0}, k, [&](std::size_t b) {
      minibatch_sample& s = out[b];
      const auto row = static_cast<node_t>(b);
      const auto candidates = importance.weights.row_columns(row);
      const auto weights = importance.weights.row_values(row);
      double total = 0;
      for (double w : weights) total += w;
      // The picks (sorted), their scales c_j, and which of them this process's rows reach.
      const auto picks = picked.row_columns(row);
      const auto pick_weights = picked.row_values(row);
      std::vector<double> pick_scale(picks.size());
      for (std::size_t p = 0; p < picks.size(); ++p) {
        const auto e = std::lower_bound(candidates.begin(), candidates.end(), picks[p]) -
                       candidates.begin();
        const edge_t entry = importance.weights.pattern.offsets[row] + e;
        pick_scale[p] = detail::inverse_sqrt_degree(importance.out_degree[entry]) /
                        (s_count * pick_weights[p] / total);
      }
      const auto pick_of = [&](node_t v) {
        const auto it = std::lower_bound(picks.begin(), picks.end(), v);
        return it != picks.end() && *it == v ? it - picks.begin() : std::ptrdiff_t{-1};
      };
      const node_t rows = s.level_sizes[l + 1];
      std::vector<node_t> reached;
      for (node_t r = 0; r < rows; ++r)
        for (node_t v : rows_of_a.row_columns(row_start[b] + r))
          if (pick_of(v) >= 0) reached.push_back(v);
      auto& mark = marker.local();
      for (std::size_t r = 0; r < s.ids.size(); ++r) mark.set(s.ids[r], static_cast<node_t>(r));
      detail::append_new(s.ids, mark, reached);
      const auto sources = static_cast<node_t>(s.ids.size());
      sampled_block& block = s.blocks[l];
      block.source_scales.assign(static_cast<std::size_t>(sources), 0.0);
      for (std::size_t p = 0; p < picks.size(); ++p)
        if (const node_t at = mark.find(picks[p]); at >= 0) block.source_scales[at] = pick_scale[p];
      // Q_R A Q_C: the rows of A of this minibatch, kept where the column was picked.
      csr& edges = block.edges;
      edges.num_rows = rows;
      edges.num_cols = sources;
      edges.offsets.assign(1, 0);
      block.destination_scales.assign(static_cast<std::size_t>(rows), 0.0);
      for (node_t r = 0; r < rows; ++r) {
        double sum = 0;
        const auto candidates_of_row = rows_of_a.row_columns(row_start[b] + r);
        for (std::size_t j = 0; j < candidates_of_row.size(); ++j) {
          const node_t v = candidates_of_row[j];
          const auto p = pick_of(v);
          if (p < 0 || (!exclude.empty() && exclude[b].contains(stacked[row_start[b] + r], v)))
            continue;
          edges.columns.push_back(mark.find(v));
          if (edge_ids)
            block.edge_ids.push_back(fetched.first_edge[row_start[b] + r] + static_cast<edge_t>(j));
          sum += pick_scale[p];
        }
        edges.offsets.push_back(static_cast<edge_t>(edges.columns.size()));
        block.destination_scales[r] = sum > 0 ? 1.0 / sum : 0.0;
      }
      mark.reset(s.ids);
      s.level_sizes[l] = sources;
      block.ids = detail::prefix(s.ids, sources);
      // The minibatch's whole level l: level l + 1 and every pick.
      std::vector<node_t>& level = whole_level[b];
      std::vector<node_t> added;
      std::set_difference(picks.begin(), picks.end(), level.begin(), level.end(),
                          std::back_inserter(added));
      level.insert(level.end(), added.begin(), added.end());
      std::inplace_merge(level.begin(), level.end() - static_cast<std::ptrdiff_t>(added.size()),
                         level.end());
    });
  }

  sampler_options options_;
  detail::row_marker marker_;
  std::optional<sampling_graph> local_;  // one process
};

/// The block of layer-wise inference for rows [begin, end) of `rows` (in-edges, columns =
/// dataset ids; row r is node row_ids[r], or r when row_ids is empty): every in-edge, sources
/// = the destinations then their other in-neighbours (increasing id), with the rows of
/// `edge_features` (one per entry of `rows`; 0 columns: none) and `edge_types` (one per entry;
/// empty: none) as the block's edge features and relations. The caller sets the block's
/// source_degrees (the whole graph's out-degrees of its ids, so GCN normalises as a
/// full-batch run does). Requires the row ids in [0, rows.num_cols). Throws
/// sar::invalid_argument for a range outside `rows`, a row id outside the columns' range or an
/// edge table of another row count. Time and memory: the range's rows and edges, or
/// rows.num_cols where those are more than an eighth of it.
inline minibatch_sample neighbourhood_block(const csr& rows, const matrixf& edge_features,
                                            std::span<const std::int32_t> edge_types,
                                            std::span<const node_t> row_ids, node_t begin,
                                            node_t end) {
  SAR_CHECK(0 <= begin && begin <= end && end <= rows.num_rows &&
                (row_ids.empty() || row_ids.size() == static_cast<std::size_t>(rows.num_rows)) &&
                (edge_features.cols() == 0 || edge_features.rows() == rows.num_edges()) &&
                (edge_types.empty() || static_cast<edge_t>(edge_types.size()) == rows.num_edges()),
            invalid_argument, "sar::neighbourhood_block: rows [", begin, ", ", end, ") of ",
            rows.num_rows, " (", row_ids.size(), " row ids, ", edge_features.rows(),
            " edge feature rows, ", edge_types.size(), " edge types)");
  // Each source's block column, found in constant time per edge: the destinations' first. An
  // array over every id where the block is a sizeable share of them, else a hash table.
  const edge_t block_edges = rows.offsets[end] - rows.offsets[begin];
  const bool dense = rows.num_cols <= 8 * (block_edges + (end - begin));
  detail::id_marks column(rows.num_cols, dense ? detail::id_marks::default_dense_limit : 0);
  std::vector<node_t> ids;
  for (node_t r = begin; r < end; ++r) {
    const node_t id = row_ids.empty() ? r : row_ids[r];
    SAR_CHECK(id >= 0 && id < rows.num_cols, invalid_argument, "sar::neighbourhood_block: row ",
              r, " is node ", id, ", outside the columns' [0, ", rows.num_cols, ")");
    column.set(id, r - begin);
    ids.push_back(id);
  }
  std::vector<node_t> others;
  for (node_t r = begin; r < end; ++r)
    for (node_t u : rows.row(r))
      if (column.find(u) < 0) others.push_back(u);
  std::sort(others.begin(), others.end());
  others.erase(std::unique(others.begin(), others.end()), others.end());
  for (std::size_t i = 0; i < others.size(); ++i)
    column.set(others[i], end - begin + static_cast<node_t>(i));
  ids.insert(ids.end(), others.begin(), others.end());
  sampled_block block;
  block.edges.num_rows = end - begin;
  block.edges.num_cols = static_cast<node_t>(ids.size());
  block.edges.offsets.assign(1, 0);
  block.edges.columns.reserve(static_cast<std::size_t>(block_edges));
  for (node_t r = begin; r < end; ++r) {
    for (node_t u : rows.row(r)) block.edges.columns.push_back(column.find(u));
    block.edges.offsets.push_back(static_cast<edge_t>(block.edges.columns.size()));
  }
  // The block's entries are rows [begin, end)'s, in order.
  const edge_t first_entry = rows.offsets[begin], entries = rows.offsets[end] - first_entry;
  if (edge_features.cols() > 0) block.edge_features = edge_features.middleRows(first_entry, entries);
  if (!edge_types.empty())
    block.edge_types.assign(edge_types.begin() + first_entry,
                            edge_types.begin() + first_entry + entries);
  block.ids = ids;
  minibatch_sample s;
  s.level_sizes = {static_cast<node_t>(ids.size()), end - begin};
  s.ids = std::move(ids);
  s.blocks.push_back(std::move(block));
  return s;
}

}  // namespace sar
