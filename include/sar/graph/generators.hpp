// Synthetic graphs, deterministic for a given seed and independent of the thread count
// (every random number is keyed by node or edge id through sar::counter_rng).
#pragma once

#include <cmath>
#include <vector>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include "sar/core/error.hpp"
#include "sar/core/memory.hpp"
#include "sar/core/rng.hpp"
#include "sar/graph/builders.hpp"
#include "sar/graph/dataset.hpp"

namespace sar {

/// A planted-partition (stochastic block model) graph whose features are noisy class signals:
/// a node's own features predict its class only weakly, its neighbours' (mostly of the same
/// class) much better, so a GNN learns something real on it. sar-train's built-in graph.
struct planted_partition_options {
  /// Number of nodes (> 0).
  node_t num_nodes = 20000;
  /// Number of classes, each node's drawn uniformly (in [1, num_nodes]).
  std::int32_t num_classes = 8;
  double average_degree = 10;     ///< mean in-degree after symmetrising (self-loops excluded)
  double homophily = 0.7;         ///< probability that an edge stays inside its class
  /// Features per node (>= 0).
  std::int32_t feature_dim = 32;
  double feature_noise = 2.0;     ///< std of the per-node noise; class centroids have unit std
  /// Fraction of the nodes in the training split (train_fraction + valid_fraction <= 1).
  double train_fraction = 0.1;
  double valid_fraction = 0.1;    ///< the rest is test
  /// Features per edge (>= 0): column 0 is +1 for an edge inside a class and -1 across
  /// classes, plus Gaussian noise of std edge_noise; further columns are noise. Both
  /// directions of an edge get the same row.
  std::int32_t edge_feature_dim = 0;
  double edge_noise = 1.0;  ///< std of the edge features' noise
  /// Seed of every random number of the graph.
  std::uint64_t seed = 1;
};

namespace detail {
/// Splits nodes at random into train/valid/test with the given fractions.
inline std::vector<node_split> random_split(node_t n, double train, double valid,
                                            std::uint64_t seed) {
  std::vector<node_split> split(n);
  const counter_rng rng(seed, rng_stream::generator_splits);
  tbb::parallel_for(tbb::blocked_range<node_t>(0, n), [&](const auto& r) {
    for (node_t i = r.begin(); i != r.end(); ++i) {
      const double u = rng.uniform(i);
      split[i] = u < train ? node_split::train
                 : u < train + valid ? node_split::valid : node_split::test;
    }
  });
  return split;
}

/// Requires options in range; throws sar::invalid_argument naming the offending one.
inline void check_fractions(const char* where, double train, double valid) {
  SAR_CHECK(train >= 0 && valid >= 0 && train + valid <= 1, invalid_argument, where,
            ": train fraction ", train, " and valid fraction ", valid,
            " must be >= 0 and sum to at most 1");
}
}  // namespace detail

/// About the bytes make_planted_partition(o) allocates at its peak (for check_memory).
inline double planted_partition_bytes(const planted_partition_options& o) {
  const double n = static_cast<double>(o.num_nodes);
  const double edges = n * std::ceil(o.average_degree / 2);  // before symmetrising
  // labels, class members, starts, offsets, split; the edge list; the CSR; the features
  const double per_node = sizeof(std::int32_t) + 3 * sizeof(node_t) + sizeof(node_split);
  return n * per_node + 2 * sizeof(node_t) * edges +
         build_csr_bytes(n, edges, {.symmetrise = true}) +
         n * static_cast<double>(o.feature_dim) * sizeof(float) +
         2 * edges * static_cast<double>(o.edge_feature_dim) * sizeof(float);
}

/// Throws sar::invalid_argument for sizes or probabilities out of range (naming the option
/// and value), or for a graph that needs more memory than is available (check_memory).
inline graph_dataset make_planted_partition(const planted_partition_options& o) {
  constexpr const char* where = "sar::make_planted_partition";
  SAR_CHECK(o.num_nodes > 0, invalid_argument, where, ": num_nodes = ", o.num_nodes);
  SAR_CHECK(o.num_classes > 0 && o.num_classes <= o.num_nodes, invalid_argument, where,
            ": num_classes = ", o.num_classes, " (expected 1 to num_nodes = ", o.num_nodes, ")");
  SAR_CHECK(o.average_degree >= 0 && o.average_degree < o.num_nodes, invalid_argument, where,
            ": average_degree = ", o.average_degree, " (expected 0 <= degree < num_nodes = ",
            o.num_nodes, ")");
  SAR_CHECK(o.homophily >= 0 && o.homophily <= 1, invalid_argument, where, ": homophily = ",
            o.homophily);
  SAR_CHECK(o.feature_dim >= 0, invalid_argument, where, ": feature_dim = ", o.feature_dim);
  SAR_CHECK(o.edge_feature_dim >= 0 && o.edge_noise >= 0 && std::isfinite(o.edge_noise),
            invalid_argument, where, ": edge_feature_dim = ", o.edge_feature_dim,
            ", edge_noise = ", o.edge_noise);
  SAR_CHECK(o.feature_noise >= 0 && std::isfinite(o.feature_noise), invalid_argument, where,
            ": feature_noise = ", o.feature_noise, " (expected a finite number >= 0)");
  detail::check_fractions(where, o.train_fraction, o.valid_fraction);
  check_memory<invalid_argument>(
      where, message("a graph of num_nodes = ", o.num_nodes, " with feature_dim = ",
                     o.feature_dim, " and average_degree = ", o.average_degree),
      planted_partition_bytes(o));
  const node_t n = o.num_nodes;

  graph_dataset data;
  data.name = "planted";
  data.num_classes = o.num_classes;

  // Classes, and the members of each class (ascending) to draw intra-class neighbours from.
  const counter_rng class_rng(o.seed, rng_stream::generator_classes);
  data.labels.resize(n);
  for (node_t i = 0; i < n; ++i)
    data.labels[i] = static_cast<std::int32_t>(class_rng.below(o.num_classes, i));
  std::vector<std::vector<node_t>> members(o.num_classes);
  for (node_t i = 0; i < n; ++i) members[data.labels[i]].push_back(i);

  // Each node starts about average_degree / 2 undirected edges; symmetrising doubles them.
  const counter_rng edge_rng(o.seed, rng_stream::generator_edges);
  const double half = o.average_degree / 2;
  std::vector<edge_t> starts(n);
  for (node_t i = 0; i < n; ++i)
    starts[i] = static_cast<edge_t>(half) + (edge_rng.uniform(i, ~0ull) < half - std::floor(half));
  std::vector<edge_t> offsets;
  detail::exclusive_scan(starts, offsets);
  edge_list edges;
  edges.num_nodes = n;
  edges.src.resize(offsets.back());
  edges.dst.resize(offsets.back());
  tbb::parallel_for(tbb::blocked_range<node_t>(0, n), [&](const auto& r) {
    for (node_t i = r.begin(); i != r.end(); ++i)
      for (edge_t e = offsets[i]; e < offsets[i + 1]; ++e) {
        const auto draw = edge_rng.bits(i, e - offsets[i]);
        const bool inside = counter_rng::to_unit(draw[0]) < o.homophily;
        const auto& pool = members[data.labels[i]];
        const std::uint64_t range = inside ? pool.size() : static_cast<std::uint64_t>(n);
        const auto pick = static_cast<node_t>((static_cast<unsigned __int128>(draw[1]) * range) >> 64);
        edges.src[e] = i;
        edges.dst[e] = inside ? pool[pick] : pick;
      }
  });
  data.graph = build_csr(edges, {.symmetrise = true, .deduplicate = true,
                                 .self_loops = self_loop_policy::remove});

  // Features: the class centroid plus Gaussian noise.
  const counter_rng feature_rng(o.seed, rng_stream::generator_features);
  data.features.resize(n, o.feature_dim);
  tbb::parallel_for(tbb::blocked_range<node_t>(0, n), [&](const auto& r) {
    for (node_t i = r.begin(); i != r.end(); ++i)
      for (std::int32_t f = 0; f < o.feature_dim; ++f) {
        const double centroid = feature_rng.normal(0, data.labels[i], f);
        data.features(i, f) =
            static_cast<float>(centroid + o.feature_noise * feature_rng.normal(1 + i, f));
      }
  });
  // Edge features: keyed by the edge's two nodes, the same in both directions.
  const counter_rng edge_feature_rng(o.seed, rng_stream::generator_features, 1);
  data.edge_features.resize(data.graph.num_edges(), o.edge_feature_dim);
  tbb::parallel_for(tbb::blocked_range<node_t>(0, n), [&](const auto& r) {
    for (node_t i = r.begin(); i != r.end(); ++i)
      for (edge_t e = data.graph.offsets[i]; e < data.graph.offsets[i + 1]; ++e) {
        const node_t j = data.graph.columns[e];
        const auto lo = static_cast<std::uint64_t>(std::min(i, j)),
                   hi = static_cast<std::uint64_t>(std::max(i, j));
        for (std::int32_t c = 0; c < o.edge_feature_dim; ++c)
          data.edge_features(e, c) = static_cast<float>(
              (c == 0 ? (data.labels[i] == data.labels[j] ? 1.0 : -1.0) : 0.0) +
              o.edge_noise * edge_feature_rng.normal(lo, hi, c));
      }
  });
  data.split = detail::random_split(n, o.train_fraction, o.valid_fraction, o.seed);
  return data;
}

/// R-MAT (recursive matrix) power-law edges over 2^scale nodes: each edge descends `scale`
/// levels choosing a quadrant with probabilities a, b, c, 1-a-b-c. Produces duplicates,
/// self-loops and isolated nodes, as real power-law graphs have.
struct rmat_options {
  /// The graph has 2^scale nodes (scale in [1, 40]).
  int scale = 16;
  /// Number of edges drawn (before any deduplication).
  edge_t num_edges = 16 << 16;
  /// \var a
  /// Probability of the top-left quadrant at each level (a + b + c <= 1, each >= 0).
  /// \var b
  /// Probability of the top-right quadrant at each level.
  /// \var c
  /// Probability of the bottom-left quadrant at each level (bottom-right: 1 - a - b - c).
  double a = 0.57, b = 0.19, c = 0.19;
  /// Seed of every random number of the graph.
  std::uint64_t seed = 1;
};

namespace detail {
/// Throws sar::invalid_argument naming `where` and the option for a scale outside [1, 40], a
/// negative edge count or quadrant probabilities out of range.
inline void check_rmat_options(const char* where, const rmat_options& o) {
  SAR_CHECK(o.scale >= 1 && o.scale <= 40, invalid_argument, where, ": scale = ", o.scale,
            " (expected 1 to 40)");
  SAR_CHECK(o.num_edges >= 0, invalid_argument, where, ": num_edges = ", o.num_edges);
  SAR_CHECK(o.a >= 0 && o.b >= 0 && o.c >= 0 && o.a + o.b + o.c <= 1, invalid_argument, where,
            ": quadrant probabilities a = ", o.a, ", b = ", o.b, ", c = ", o.c);
}
}  // namespace detail

/// Throws sar::invalid_argument for a scale outside [1, 40], probabilities out of range, or
/// more edges than fit in the memory available (check_memory).
inline edge_list make_rmat(const rmat_options& o) {
  constexpr const char* where = "sar::make_rmat";
  detail::check_rmat_options(where, o);
  check_memory<invalid_argument>(where, message(o.num_edges, " edges (num_edges)"),
                                 2.0 * sizeof(node_t) * static_cast<double>(o.num_edges));
  edge_list edges;
  edges.num_nodes = node_t{1} << o.scale;
  edges.src.resize(o.num_edges);
  edges.dst.resize(o.num_edges);
  const counter_rng rng(o.seed, rng_stream::generator_edges);
  const double ab = o.a + o.b, abc = o.a + o.b + o.c;
  tbb::parallel_for(tbb::blocked_range<edge_t>(0, o.num_edges), [&](const auto& r) {
    for (edge_t k = r.begin(); k != r.end(); ++k) {
      node_t row = 0, col = 0;
      counter_rng::bits_t words{};
      for (int level = 0; level < o.scale; ++level) {
        const int slot = level % 8;  // one Philox call gives 8 uniforms of 32 bits
        if (slot == 0) words = rng.bits(k, level / 8);
        const double u = static_cast<double>((words[slot / 2] >> (32 * (slot % 2))) & 0xffffffffu) *
                         0x1.0p-32;
        const bool down = u >= ab, right = (u >= o.a && u < ab) || u >= abc;
        row = 2 * row + down;
        col = 2 * col + right;
      }
      edges.dst[k] = row;  // in-edge convention: row = destination
      edges.src[k] = col;
    }
  });
  return edges;
}

/// An R-MAT graph as a node-classification dataset: symmetrised, duplicates merged, self-loops
/// kept, random Gaussian features, uniform random labels and a random split (for scale and
/// exactness tests; there is nothing to learn).
/// Throws as make_rmat, and sar::invalid_argument for fractions or sizes out of range or a
/// dataset that needs more memory than is available (check_memory), before allocating.
inline graph_dataset make_rmat_dataset(const rmat_options& o, std::int32_t feature_dim = 16,
                                       std::int32_t num_classes = 4, double train_fraction = 0.3,
                                       double valid_fraction = 0.2) {
  constexpr const char* where = "sar::make_rmat_dataset";
  detail::check_fractions(where, train_fraction, valid_fraction);
  SAR_CHECK(feature_dim >= 0 && num_classes > 0, invalid_argument, where,
            ": feature_dim = ", feature_dim, ", num_classes = ", num_classes);
  detail::check_rmat_options(where, o);
  const double nodes = std::ldexp(1.0, o.scale), edges = static_cast<double>(o.num_edges);
  check_memory<invalid_argument>(
      where, message("a graph of 2^", o.scale, " nodes (scale) with ", o.num_edges,
                     " edges and feature_dim = ", feature_dim),
      2.0 * sizeof(node_t) * edges + build_csr_bytes(nodes, edges, {.symmetrise = true}) +
          nodes * (sizeof(std::int32_t) + sizeof(node_split) + sizeof(float) * feature_dim));
  graph_dataset data;
  data.name = "rmat";
  data.graph = build_csr(make_rmat(o), {.symmetrise = true});
  const node_t n = data.graph.num_rows;
  data.num_classes = num_classes;
  const counter_rng rng(o.seed, rng_stream::generator_features);
  data.labels.resize(n);
  data.features.resize(n, feature_dim);
  tbb::parallel_for(tbb::blocked_range<node_t>(0, n), [&](const auto& r) {
    for (node_t i = r.begin(); i != r.end(); ++i) {
      data.labels[i] = static_cast<std::int32_t>(rng.below(num_classes, i, ~0ull));
      for (std::int32_t f = 0; f < feature_dim; ++f)
        data.features(i, f) = static_cast<float>(rng.normal(i, f));
    }
  });
  data.split = detail::random_split(n, train_fraction, valid_fraction, o.seed);
  return data;
}

}  // namespace sar
