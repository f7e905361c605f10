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
//     The block keeps the picked edges; layers normalise by the block's degrees (DGL's rule).
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
// thread count. No sentinel vertex: levels are explicit sizes.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <oneapi/tbb/enumerable_thread_specific.h>
#include <oneapi/tbb/parallel_for.h>

#include "sar/core/error.hpp"
#include "sar/core/types.hpp"
#include "sar/graph/builders.hpp"
#include "sar/graph/csr.hpp"
#include "sar/sampling/darts.hpp"
#include "sar/sampling/spgemm.hpp"
#include "sar/schedule/local_schedule.hpp"

namespace sar {

/// The layers of one sampled minibatch as plain data (sar-sample writes it; sampled_minibatch
/// in sar/sampling/minibatch.hpp runs a model on it).
struct minibatch_sample {
  std::vector<node_t> ids;            ///< dataset ids of level 0 (all input rows), seeds first
  std::vector<node_t> level_sizes;    ///< n_0 >= n_1 >= ... >= n_L (n_L = the seeds)
  std::vector<sampled_block> blocks;  ///< block l: level l (sources) -> level l + 1

  std::span<const node_t> seeds() const {
    return {ids.data(), static_cast<std::size_t>(level_sizes.back())};
  }
};

enum class sampler_kind { node_wise, layer_wise };

struct sampler_options {
  sampler_kind kind = sampler_kind::node_wise;
  /// Per layer from the input: the fanout (node-wise; -1 = all in-neighbours) or the sources
  /// drawn per minibatch (layer-wise, >= 1).
  std::vector<node_t> fanouts;
  std::uint64_t seed = 0;
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
}

namespace detail {

/// Per-thread map from a dataset id to a row of the minibatch being built (-1: none); reset
/// after each use, so it costs one array of the graph's size per thread.
class row_marker {
 public:
  explicit row_marker(node_t nodes) : nodes_(nodes) {}
  std::vector<node_t>& local() {
    auto& m = marks_.local();
    const auto size = static_cast<std::size_t>(nodes_);
    if (m.size() != size) m.assign(size, -1);
    return m;
  }

 private:
  node_t nodes_;
  tbb::enumerable_thread_specific<std::vector<node_t>> marks_;
};

/// Appends to `ids` (marked in `mark` with their rows) the columns of `picked` not marked yet,
/// in increasing id order.
inline void append_new(std::vector<node_t>& ids, std::vector<node_t>& mark,
                       std::vector<node_t> picked) {
  std::sort(picked.begin(), picked.end());
  picked.erase(std::unique(picked.begin(), picked.end()), picked.end());
  for (node_t v : picked)
    if (mark[v] < 0) {
      mark[v] = static_cast<node_t>(ids.size());
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

/// Samples the blocks of k minibatches at once. Built once per graph and options: the
/// layer-wise sampler's Â o Â and the per-thread row maps are made here, not per call.
class bulk_sampler {
 public:
  /// graph: in-edges (row = destination), square; it must outlive the sampler. Throws
  /// sar::invalid_argument for bad options (check_sampler_options) or a non-square graph.
  bulk_sampler(const csr& graph, sampler_options options)
      : graph_(&graph), options_(std::move(options)), marker_(graph.num_rows) {
    constexpr const char* where = "sar::bulk_sampler";
    check_sampler_options(where, options_);
    SAR_CHECK(graph.num_cols == graph.num_rows, invalid_argument, where, ": the graph is ",
              graph.num_rows, " x ", graph.num_cols, " (square expected)");
    if (options_.kind != sampler_kind::layer_wise) return;
    // The importances come from Â o Â, whose values are 1 / (in_i out_j).
    const std::vector<node_t> in_degree = in_degrees(graph);
    out_degree_ = out_degrees(graph);
    squared_.resize(static_cast<std::size_t>(graph.num_edges()));
    for (node_t i = 0; i < graph.num_rows; ++i)
      for (edge_t e = graph.offsets[i]; e < graph.offsets[i + 1]; ++e)
        squared_[e] =
            1.0 / (static_cast<double>(std::max<node_t>(in_degree[i], 1)) *
                   static_cast<double>(std::max<node_t>(out_degree_[graph.columns[e]], 1)));
  }

  const sampler_options& options() const { return options_; }

  /// The samples of minibatches batches[0..k) (their seeds: distinct node ids of the graph);
  /// minibatch b is number first_minibatch + b of `epoch` (keys its random numbers). Each
  /// sample is the same as sampling that minibatch alone. Throws sar::invalid_argument for an
  /// empty minibatch or a seed outside the graph or listed twice. Parallel; not for
  /// concurrent calls on one sampler.
  std::vector<minibatch_sample> sample(std::span<const std::vector<node_t>> batches,
                                       std::uint64_t epoch, std::uint64_t first_minibatch) {
    constexpr const char* where = "sar::bulk_sampler::sample";
    const csr& graph = *graph_;
    const sampler_options& options = options_;
    const node_t n = graph.num_rows;
    const std::size_t k = batches.size();
    const auto layers = options.fanouts.size();
    detail::row_marker& marker = marker_;
    std::vector<minibatch_sample> out(k);
    for (std::size_t b = 0; b < k; ++b) {
      SAR_CHECK(!batches[b].empty(), invalid_argument, where, ": minibatch ",
                first_minibatch + b, " has no seeds");
      auto& mark = marker.local();
      for (node_t v : batches[b]) {
        SAR_CHECK(v >= 0 && v < n, invalid_argument, where, ": seed ", v, " of minibatch ",
                  first_minibatch + b, " outside [0, ", n, ")");
        SAR_CHECK(mark[v] < 0, invalid_argument, where, ": seed ", v,
                  " listed twice in minibatch ", first_minibatch + b);
        mark[v] = 0;
      }
      for (node_t v : batches[b]) mark[v] = -1;
      out[b].ids = batches[b];
      out[b].level_sizes.assign(layers + 1, 0);
      out[b].level_sizes[layers] = static_cast<node_t>(batches[b].size());
      out[b].blocks.resize(layers);
    }
    const std::vector<node_t>& out_degree = out_degree_;
    const std::vector<double>& squared = squared_;

    for (std::size_t l = layers; l-- > 0;) {
      // Q's rows: every minibatch's level l + 1, stacked.
      std::vector<node_t> row_start(k + 1, 0);
      for (std::size_t b = 0; b < k; ++b)
        row_start[b + 1] = row_start[b] + out[b].level_sizes[l + 1];
      std::vector<node_t> stacked(static_cast<std::size_t>(row_start[k]));
      for (std::size_t b = 0; b < k; ++b)
        std::copy_n(out[b].ids.begin(), out[b].level_sizes[l + 1], stacked.begin() + row_start[b]);
      const sparse_matrix rows_of_a = spgemm(selection_matrix(stacked, n), sparse_view(graph));

      if (options.kind == sampler_kind::node_wise) {
        const std::vector<node_t> want(stacked.size(), options.fanouts[l]);
        const sparse_matrix picked = sample_rows(rows_of_a, want, options.seed, [&](node_t r) {
          const auto b = static_cast<std::size_t>(
              std::upper_bound(row_start.begin(), row_start.end(), r) - row_start.begin() - 1);
          return dart_key{epoch, first_minibatch + b, static_cast<std::uint64_t>(stacked[r]), l};
        });
        tbb::parallel_for(std::size_t{0}, k, [&](std::size_t b) {
          minibatch_sample& s = out[b];
          auto& mark = marker.local();
          for (std::size_t r = 0; r < s.ids.size(); ++r) mark[s.ids[r]] = static_cast<node_t>(r);
          const node_t first = row_start[b], rows = s.level_sizes[l + 1];
          const edge_t e0 = picked.pattern.offsets[first];
          const edge_t e1 = picked.pattern.offsets[first + rows];
          detail::append_new(s.ids, mark, {picked.pattern.columns.begin() + e0,
                                           picked.pattern.columns.begin() + e1});
          csr& block = s.blocks[l].edges;
          block.num_rows = rows;
          block.num_cols = static_cast<node_t>(s.ids.size());
          block.offsets.resize(static_cast<std::size_t>(rows) + 1);
          for (node_t r = 0; r <= rows; ++r)
            block.offsets[r] = picked.pattern.offsets[first + r] - e0;
          block.columns.resize(static_cast<std::size_t>(e1 - e0));
          for (edge_t e = e0; e < e1; ++e) block.columns[e - e0] = mark[picked.pattern.columns[e]];
          for (node_t v : s.ids) mark[v] = -1;
          s.level_sizes[l] = block.num_cols;
          s.blocks[l].ids = detail::prefix(s.ids, block.num_cols);
        });
      } else {
        // P = Q (Â o Â): one row per minibatch, the importance of every candidate source.
        sparse_matrix q;
        q.pattern.num_rows = static_cast<node_t>(k);
        q.pattern.num_cols = n;
        q.pattern.offsets.assign(row_start.begin(), row_start.end());
        q.pattern.columns = stacked;
        for (std::size_t b = 0; b < k; ++b)  // Q's columns sorted within each row
          std::sort(q.pattern.columns.begin() + row_start[b],
                    q.pattern.columns.begin() + row_start[b + 1]);
        q.values.assign(stacked.size(), 1.0);
        const sparse_matrix importance = spgemm(q, sparse_view(graph, squared));
        const std::vector<node_t> want(k, options.fanouts[l]);
        const sparse_matrix picked = sample_rows(importance, want, options.seed, [&](node_t b) {
          return dart_key{epoch, first_minibatch + static_cast<std::uint64_t>(b),
                          ~std::uint64_t{0}, l};
        });
        const auto s_count = static_cast<double>(options.fanouts[l]);
        tbb::parallel_for(std::size_t{0}, k, [&](std::size_t b) {
          minibatch_sample& s = out[b];
          auto& mark = marker.local();
          const auto weights = importance.row_values(static_cast<node_t>(b));
          double total = 0;
          for (double w : weights) total += w;
          // Scale of each picked source (by id, while marked), then the level's rows.
          const auto picks = picked.row_columns(static_cast<node_t>(b));
          const auto pick_weights = picked.row_values(static_cast<node_t>(b));
          std::vector<double> pick_scale(picks.size());
          for (std::size_t p = 0; p < picks.size(); ++p)
            pick_scale[p] = detail::inverse_sqrt_degree(out_degree[picks[p]]) /
                            (s_count * pick_weights[p] / total);
          for (std::size_t r = 0; r < s.ids.size(); ++r) mark[s.ids[r]] = static_cast<node_t>(r);
          const node_t rows = s.level_sizes[l + 1];
          detail::append_new(s.ids, mark, {picks.begin(), picks.end()});
          const auto sources = static_cast<node_t>(s.ids.size());
          sampled_block& block = s.blocks[l];
          block.source_scales.assign(static_cast<std::size_t>(sources), 0.0);
          std::vector<char> picked_row(static_cast<std::size_t>(sources), 0);
          for (std::size_t p = 0; p < picks.size(); ++p) {
            const node_t r = mark[picks[p]];
            picked_row[r] = 1;
            block.source_scales[r] = pick_scale[p];
          }
          // Q_R A Q_C: the rows of A of this minibatch, kept where the column was picked.
          csr& edges = block.edges;
          edges.num_rows = rows;
          edges.num_cols = sources;
          edges.offsets.assign(1, 0);
          block.destination_scales.assign(static_cast<std::size_t>(rows), 0.0);
          for (node_t r = 0; r < rows; ++r) {
            double sum = 0;
            for (node_t v : rows_of_a.row_columns(row_start[b] + r)) {
              const node_t c = mark[v];
              if (c >= 0 && picked_row[c]) {
                edges.columns.push_back(c);
                sum += block.source_scales[c];
              }
            }
            edges.offsets.push_back(static_cast<edge_t>(edges.columns.size()));
            block.destination_scales[r] = sum > 0 ? 1.0 / sum : 0.0;
          }
          for (node_t v : s.ids) mark[v] = -1;
          s.level_sizes[l] = sources;
          block.ids = detail::prefix(s.ids, sources);
        });
      }
    }
    return out;
  }

 private:
  const csr* graph_;
  sampler_options options_;
  detail::row_marker marker_;
  std::vector<node_t> out_degree_;  // layer-wise only
  std::vector<double> squared_;     // layer-wise: Â o Â, one value per edge of the graph
};

/// The block of layer-wise inference for destinations [begin, end) of `graph`: every
/// in-edge, sources = the destinations then their other in-neighbours (increasing id),
/// source degrees = `source_degrees` of the whole graph (GCN then normalises as a full-batch
/// run does). Throws sar::invalid_argument for a range outside the graph.
inline minibatch_sample neighbourhood_block(const csr& graph, node_t begin, node_t end,
                                            std::span<const node_t> source_degrees) {
  SAR_CHECK(0 <= begin && begin <= end && end <= graph.num_rows, invalid_argument,
            "sar::neighbourhood_block: rows [", begin, ", ", end, ") of ", graph.num_rows);
  minibatch_sample s;
  std::vector<node_t> ids;
  for (node_t v = begin; v < end; ++v) ids.push_back(v);
  std::vector<node_t> others;
  for (node_t v = begin; v < end; ++v)
    for (node_t u : graph.row(v))
      if (u < begin || u >= end) others.push_back(u);
  std::sort(others.begin(), others.end());
  others.erase(std::unique(others.begin(), others.end()), others.end());
  ids.insert(ids.end(), others.begin(), others.end());
  const auto local = [&](node_t u) {
    if (u >= begin && u < end) return u - begin;
    return end - begin + static_cast<node_t>(std::lower_bound(others.begin(), others.end(), u) -
                                             others.begin());
  };
  sampled_block block;
  block.edges.num_rows = end - begin;
  block.edges.num_cols = static_cast<node_t>(ids.size());
  block.edges.offsets.assign(1, 0);
  for (node_t v = begin; v < end; ++v) {
    for (node_t u : graph.row(v)) block.edges.columns.push_back(local(u));
    block.edges.offsets.push_back(static_cast<edge_t>(block.edges.columns.size()));
  }
  block.ids = ids;
  block.source_degrees.reserve(ids.size());
  for (node_t u : ids) block.source_degrees.push_back(source_degrees[u]);
  s.level_sizes = {static_cast<node_t>(ids.size()), end - begin};
  s.ids = std::move(ids);
  s.blocks.push_back(std::move(block));
  return s;
}

}  // namespace sar
