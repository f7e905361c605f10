// Synthetic graphs, deterministic for a given seed and independent of the thread count
// (every random number is keyed by node or edge id through sar::counter_rng).
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include "sar/core/error.hpp"
#include "sar/core/memory.hpp"
#include "sar/core/rng.hpp"
#include "sar/graph/builders.hpp"
#include "sar/graph/dataset.hpp"
#include "sar/graph/heterogeneous.hpp"

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
  /// Below 1: binary bag-of-words features instead, about feature_density x feature_dim words
  /// (1s) per node, each drawn from the node's class's own slice of the columns with
  /// probability 1 / (1 + feature_noise), else from all of them (sparse input features).
  double feature_density = 1;
  /// With feature_density below 1: hold the words as sparse_features (never dense).
  bool sparse_features = false;
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
         (o.feature_density < 1 && o.sparse_features  // words, then values and columns
              ? n * std::max(1.0, std::round(o.feature_density * o.feature_dim)) * 12.0
              : n * static_cast<double>(o.feature_dim) * sizeof(float)) +
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
  SAR_CHECK(o.feature_density > 0 && o.feature_density <= 1, invalid_argument, where,
            ": feature_density = ", o.feature_density, " (expected (0, 1])");
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

  // Features: the class centroid plus Gaussian noise, or words of the class's and any slice.
  const counter_rng feature_rng(o.seed, rng_stream::generator_features);
  if (o.feature_density < 1) {
    // Node i's words: `words` columns drawn with replacement, sorted, repeats dropped.
    const auto words = std::max<std::int64_t>(
        std::llround(o.feature_density * o.feature_dim), 1);
    const double slice = static_cast<double>(o.feature_dim) / o.num_classes;
    const double own = 1 / (1 + o.feature_noise);
    std::vector<std::int32_t> columns(static_cast<std::size_t>(n * words));
    std::vector<edge_t> counts(static_cast<std::size_t>(n) + 1, 0);
    tbb::parallel_for(tbb::blocked_range<node_t>(0, n), [&](const auto& r) {
      for (node_t i = r.begin(); i != r.end(); ++i) {
        std::int32_t* row = columns.data() + i * words;
        for (std::int64_t w = 0; w < words; ++w) {
          const double where = feature_rng.uniform(1 + i, 2 * w + 1);
          const auto f = static_cast<std::int64_t>(
              feature_rng.uniform(1 + i, 2 * w) < own ? (data.labels[i] + where) * slice
                                                      : where * o.feature_dim);
          row[w] = static_cast<std::int32_t>(std::min<std::int64_t>(f, o.feature_dim - 1));
        }
        std::sort(row, row + words);
        counts[static_cast<std::size_t>(i) + 1] = std::unique(row, row + words) - row;
      }
    });
    if (o.sparse_features) {
      sparse_rows<float>& x = data.sparse_features;
      x.num_rows = n;
      x.num_cols = o.feature_dim;
      x.offsets.assign(counts.begin(), counts.end());
      for (node_t i = 0; i < n; ++i) x.offsets[i + 1] += x.offsets[i];
      x.columns.resize(static_cast<std::size_t>(x.offsets.back()));
      for (node_t i = 0; i < n; ++i)
        std::copy_n(columns.begin() + i * words, counts[i + 1], x.columns.begin() + x.offsets[i]);
      x.values.assign(x.columns.size(), 1.0f);
      data.features.resize(n, 0);
    } else {
      data.features.setZero(n, o.feature_dim);
      for (node_t i = 0; i < n; ++i)
        for (edge_t w = 0; w < counts[i + 1]; ++w) data.features(i, columns[i * words + w]) = 1.0f;
    }
  } else {
    data.features.resize(n, o.feature_dim);
    tbb::parallel_for(tbb::blocked_range<node_t>(0, n), [&](const auto& r) {
      for (node_t i = r.begin(); i != r.end(); ++i)
        for (std::int32_t f = 0; f < o.feature_dim; ++f) {
          const double centroid = feature_rng.normal(0, data.labels[i], f);
          data.features(i, f) =
              static_cast<float>(centroid + o.feature_noise * feature_rng.normal(1 + i, f));
        }
    });
  }
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

/// A planted heterogeneous graph whose classes only relations reveal (the test bed of
/// relational models). Two node types: "author" (author_feature_dim features of pure noise)
/// and "paper" (the labelled type: 2 classes; feature column 0 is +1 or -1 by class plus
/// Gaussian noise of std feature_noise, further columns noise). Three relations into papers:
/// "writes" (author -> paper: authors_per_paper random authors, no information), "agrees"
/// (paper -> paper: `degree` in-edges, each from a paper of the same class with probability
/// homophily, else a random paper) and "disagrees" (`degree` in-edges, each from a paper of
/// the other class with probability homophily, else random). A model that keeps relations
/// apart reads the class from the sign of its agreeing and disagreeing neighbours; a model
/// that erases types sums both, which cancel, and is left with the node's own noisy feature.
/// With add_reverse, every relation's reverse too (rev_writes lets authors hear their papers).
struct planted_heterogeneous_options {
  node_t num_papers = 20000;              ///< labelled nodes (> 0)
  node_t num_authors = 10000;             ///< further nodes (>= 1)
  std::int32_t feature_dim = 16;          ///< paper features (>= 1)
  std::int32_t author_feature_dim = 8;    ///< author features (0 to feature_dim)
  std::int32_t degree = 4;                ///< in-edges per paper of "agrees" and of "disagrees"
  std::int32_t authors_per_paper = 3;     ///< in-edges per paper of "writes"
  double homophily = 0.9;                 ///< probability that a paper-paper edge informs
  double feature_noise = 1.5;             ///< std of the features' noise
  double train_fraction = 0.3;            ///< of the papers (train + valid <= 1)
  double valid_fraction = 0.2;            ///< of the papers; the rest are test
  bool add_reverse = true;                ///< add rev_writes, rev_agrees, rev_disagrees
  std::uint64_t seed = 1;                 ///< of every random number of the graph
};

/// About the bytes make_planted_heterogeneous(o) allocates at its peak (for check_memory).
inline double planted_heterogeneous_bytes(const planted_heterogeneous_options& o) {
  const double papers = static_cast<double>(o.num_papers), n = papers + static_cast<double>(o.num_authors);
  const double edges = papers * (2.0 * o.degree + o.authors_per_paper) * (o.add_reverse ? 2 : 1);
  return n * (static_cast<double>(o.feature_dim) * sizeof(float) + 16) +
         edges * (3 * sizeof(node_t) + 2 * sizeof(std::int32_t) + sizeof(edge_t));
}

/// Throws sar::invalid_argument naming the option for sizes or probabilities out of range,
/// or for a graph that needs more memory than is available.
inline graph_dataset make_planted_heterogeneous(const planted_heterogeneous_options& o) {
  constexpr const char* where = "sar::make_planted_heterogeneous";
  SAR_CHECK(o.num_papers >= 2 && o.num_authors >= 1, invalid_argument, where, ": ", o.num_papers,
            " papers and ", o.num_authors, " authors (at least 2 and 1)");
  SAR_CHECK(o.feature_dim >= 1 && o.author_feature_dim >= 0 && o.author_feature_dim <= o.feature_dim,
            invalid_argument, where, ": feature_dim = ", o.feature_dim, ", author_feature_dim = ",
            o.author_feature_dim, " (expected 1 <= feature_dim, 0 <= author_feature_dim <= feature_dim)");
  SAR_CHECK(o.degree >= 0 && o.authors_per_paper >= 0, invalid_argument, where, ": degree = ",
            o.degree, ", authors_per_paper = ", o.authors_per_paper);
  SAR_CHECK(o.homophily >= 0 && o.homophily <= 1 && o.feature_noise >= 0 &&
                std::isfinite(o.feature_noise),
            invalid_argument, where, ": homophily = ", o.homophily, ", feature_noise = ",
            o.feature_noise);
  detail::check_fractions(where, o.train_fraction, o.valid_fraction);
  check_memory<invalid_argument>(
      where, message("a heterogeneous graph of ", o.num_papers, " papers and ", o.num_authors,
                     " authors"),
      planted_heterogeneous_bytes(o));
  const node_t authors = o.num_authors, papers = o.num_papers, n = authors + papers;
  graph_dataset data;
  data.name = "planted-hetero";
  data.num_classes = 2;
  data.schema.node_types = {{"author", authors, o.author_feature_dim},
                            {"paper", papers, o.feature_dim}};
  constexpr std::int32_t author = 0, paper = 1;
  data.schema.relations = {{author, "writes", paper}, {paper, "agrees", paper},
                           {paper, "disagrees", paper}};

  const counter_rng class_rng(o.seed, rng_stream::generator_classes, 1);
  data.labels.assign(static_cast<std::size_t>(n), -1);
  std::vector<node_t> of_class[2];
  for (node_t i = authors; i < n; ++i) {
    const auto c = static_cast<std::int32_t>(class_rng.below(2, i));
    data.labels[static_cast<std::size_t>(i)] = c;
    of_class[c].push_back(i);
  }
  // Edges into each paper, drawn from counter-based numbers keyed by (paper, relation, k).
  const counter_rng edge_rng(o.seed, rng_stream::generator_edges, 1);
  const auto pick = [](std::uint64_t word, std::uint64_t range) {
    return static_cast<node_t>((static_cast<unsigned __int128>(word) * range) >> 64);
  };
  edge_list edges;
  edges.num_nodes = n;
  std::vector<std::int32_t> types;
  for (node_t i = authors; i < n; ++i) {
    const std::int32_t c = data.labels[static_cast<std::size_t>(i)];
    for (std::int32_t k = 0; k < o.authors_per_paper; ++k) {
      edges.push_back(pick(edge_rng.bits(i, 0, k)[0], static_cast<std::uint64_t>(authors)), i);
      types.push_back(0);
    }
    for (std::int32_t r = 1; r <= 2; ++r)
      for (std::int32_t k = 0; k < o.degree; ++k) {
        const auto draw = edge_rng.bits(i, r, k);
        const auto& pool = of_class[r == 1 ? c : 1 - c];
        const bool informs = counter_rng::to_unit(draw[0]) < o.homophily && !pool.empty();
        edges.push_back(informs ? pool[static_cast<std::size_t>(pick(draw[1], pool.size()))]
                                : authors + pick(draw[1], static_cast<std::uint64_t>(papers)),
                        i);
        types.push_back(r);
      }
  }
  data.graph = build_typed_csr(edges, types, data.edge_types);
  edges = {};
  if (o.add_reverse) add_reverse_relations(data);

  const counter_rng feature_rng(o.seed, rng_stream::generator_features, 2);
  data.features = matrixf::Zero(n, o.feature_dim);
  tbb::parallel_for(tbb::blocked_range<node_t>(0, n), [&](const auto& r) {
    for (node_t i = r.begin(); i != r.end(); ++i) {
      const bool is_paper = i >= authors;
      const std::int32_t width = is_paper ? o.feature_dim : o.author_feature_dim;
      for (std::int32_t f = 0; f < width; ++f) {
        const double signal =
            is_paper && f == 0 ? (data.labels[static_cast<std::size_t>(i)] == 1 ? 1.0 : -1.0) : 0.0;
        data.features(i, f) = static_cast<float>(signal + o.feature_noise * feature_rng.normal(i, f));
      }
    }
  });
  data.split.assign(static_cast<std::size_t>(n), node_split::none);
  const std::vector<node_split> paper_split =
      detail::random_split(papers, o.train_fraction, o.valid_fraction, o.seed);
  std::copy(paper_split.begin(), paper_split.end(), data.split.begin() + authors);
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
