// Link prediction's data: held-out positive pairs and negative pairs beside a message-passing
// graph, made without leaks (split_edges) and checked for them (check_held_out,
// check_negatives), with OGB's conventions: shared negatives for Hits@K and AUC
// (ogbl-collab), per-positive negative destinations for MRR (ogbl-citation2).
//
// An undirected edge {u, v} is stored both ways in the graph (each row holds a node's
// in-neighbours). Held out, it leaves the message-passing graph in both directions: a valid or
// test positive that is still an edge there is a leak, which inflates every metric.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <string_view>
#include <utility>
#include <vector>

#include "sar/core/error.hpp"
#include "sar/core/rng.hpp"
#include "sar/core/types.hpp"
#include "sar/graph/builders.hpp"
#include "sar/graph/csr.hpp"
#include "sar/graph/dataset.hpp"

namespace sar {

/// A list of node pairs (source, destination), by dataset node id, each of a relation (an edge
/// type of a heterogeneous graph: DistMult scores each relation apart) or, untyped, all of
/// relation 0.
struct node_pairs {
  std::vector<node_t> source;       ///< first node of each pair
  std::vector<node_t> destination;  ///< second node of each pair
  std::vector<std::int32_t> relation;  ///< each pair's relation, or empty: untyped
  /// Number of pairs.
  std::size_t size() const { return source.size(); }
  /// Whether the pairs carry relations (a list without pairs never does).
  bool typed() const { return !relation.empty(); }
  /// Relation of pair i (0 when untyped).
  std::int32_t relation_of(std::size_t i) const { return relation.empty() ? 0 : relation[i]; }
  /// Appends (u, v), untyped.
  void push(node_t u, node_t v) {
    source.push_back(u);
    destination.push_back(v);
  }
  /// Appends (u, v) of relation r.
  void push(node_t u, node_t v, std::int32_t r) {
    push(u, v);
    relation.push_back(r);
  }
  /// Appends pair i of `from`, with its relation if `from` is typed.
  void push_from(const node_pairs& from, std::size_t i) {
    if (from.typed()) push(from.source[i], from.destination[i], from.relation[i]);
    else push(from.source[i], from.destination[i]);
  }
  /// Equal pairs and relations.
  bool operator==(const node_pairs&) const = default;
};

/// A link-prediction split of a graph.
struct link_split {
  node_pairs train;  ///< supervision positives: the message-passing graph's own edges, once each
  node_pairs valid;  ///< held-out validation positives
  node_pairs test;   ///< held-out test positives
  node_pairs valid_negatives;  ///< shared negative pairs for validation (Hits\@K, AUC)
  node_pairs test_negatives;   ///< shared negative pairs for test
  /// Negative destinations of each validation positive's source, row-major valid.size() x
  /// per_source (MRR); empty when per_source is 0.
  std::vector<node_t> valid_target_negatives;
  std::vector<node_t> test_target_negatives;  ///< the same for the test positives
  int per_source = 0;  ///< columns of the *_target_negatives
  /// Each train pair's id (its row of train_edge.npy: what keys its negatives) where it is not
  /// its index: a share of the split, or pairs moved between ranks. Empty: pair i has id i.
  std::vector<edge_t> train_ids;
  /// Whether the pairs carry relations (any list does: then every non-empty list does).
  bool typed() const {
    return train.typed() || valid.typed() || test.typed() || valid_negatives.typed() ||
           test_negatives.typed();
  }
};

/// Settings of split_edges.
struct edge_split_options {
  double valid = 0.05;  ///< fraction of the undirected edges held out for validation
  double test = 0.10;   ///< fraction held out for test
  /// Shared negatives per held-out set; -1: as many as that set's positives.
  std::int64_t negatives = -1;
  int per_source_negatives = 0;  ///< negative destinations per held-out positive (0: none)
  std::uint64_t seed = 0;        ///< keys every draw
};

/// Edge membership of a graph, either direction: its rows sorted once.
class edge_lookup {
 public:
  /// Copies `graph` with each row's columns sorted.
  explicit edge_lookup(const csr& graph) : sorted_(graph) {
    for (node_t i = 0; i < sorted_.num_rows; ++i)
      std::sort(sorted_.columns.begin() + sorted_.offsets[i],
                sorted_.columns.begin() + sorted_.offsets[i + 1]);
  }
  /// Is u -> v or v -> u an edge? Requires both in [0, nodes()).
  bool joined(node_t u, node_t v) const { return has(u, v) || has(v, u); }
  /// Number of nodes.
  node_t nodes() const { return sorted_.num_rows; }
  /// The sorted in-neighbours of v.
  std::span<const node_t> row(node_t v) const { return sorted_.row(v); }

 private:
  bool has(node_t u, node_t v) const {
    const auto r = sorted_.row(v);
    return std::binary_search(r.begin(), r.end(), u);
  }
  csr sorted_;
};

/// Throws sar::invalid_argument naming `source` (a file, or what the pairs are) and the row of
/// the first pair with a node outside [0, num_nodes), and, unless allow_leak, of the first pair
/// that is an edge of the message-passing graph in either direction (a leak).
inline void check_held_out(const edge_lookup& graph, const node_pairs& pairs,
                           std::string_view source, bool allow_leak = false) {
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    const node_t u = pairs.source[i], v = pairs.destination[i];
    SAR_CHECK(u >= 0 && u < graph.nodes() && v >= 0 && v < graph.nodes(), invalid_argument,
              source, ", row ", i, ": pair (", u, ", ", v, ") outside the ", graph.nodes(),
              " nodes");
    SAR_CHECK(allow_leak || !graph.joined(u, v), invalid_argument, source, ", row ", i,
              ": held-out pair (", u, ", ", v,
              ") is an edge of the message-passing graph (a leak; --allow-leak keeps it for "
              "datasets whose convention is to)");
  }
}

/// Throws sar::invalid_argument naming `source` and the row of the first negative pair outside
/// [0, num_nodes), or that is an edge of `whole` (the graph with its held-out edges).
inline void check_negatives(const edge_lookup& whole, const node_pairs& pairs,
                            std::string_view source) {
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    const node_t u = pairs.source[i], v = pairs.destination[i];
    SAR_CHECK(u >= 0 && u < whole.nodes() && v >= 0 && v < whole.nodes(), invalid_argument,
              source, ", row ", i, ": pair (", u, ", ", v, ") outside the ", whole.nodes(),
              " nodes");
    SAR_CHECK(!whole.joined(u, v), invalid_argument, source, ", row ", i, ": negative pair (",
              u, ", ", v, ") is an edge of the graph");
  }
}

namespace detail {
// A node v != u not joined to u, uniform, keyed by (what, i, j, attempt). Throws when 1000
// attempts find none (u is joined to almost every node).
inline node_t draw_non_neighbour(const edge_lookup& whole, const counter_rng& rng, node_t u,
                                 std::uint64_t what, std::uint64_t i, std::uint64_t j) {
  const auto n = static_cast<std::uint64_t>(whole.nodes());
  for (std::uint64_t attempt = 0; attempt < 1000; ++attempt) {
    const auto v = static_cast<node_t>(rng.below(n, what, i, (j << 16) | attempt));
    if (v != u && !whole.joined(u, v)) return v;
  }
  SAR_CHECK(false, invalid_argument, "sar::split_edges: no negative found for node ", u,
            " in 1000 draws: it is joined to nearly every node");
  return -1;
}
}  // namespace detail

/// Holds out options.valid and options.test of the undirected edges of `data.graph` (which
/// must be symmetric; self-loops are never held out) for link prediction: removes them from
/// data.graph in both directions (with their rows of edge_features and edge_types), and draws
/// the shared negatives (uniform pairs u != v that are no edge of the original graph) and,
/// with per_source_negatives, each held-out positive's negative destinations (the same rule).
/// On a typed graph (data.edge_types) a pair {u, v}, u < v, has the relation of the entry
/// u -> v (the smallest of several; held out, every entry between u and v leaves), and shared
/// negative i corrupts the destination of held-out positive i mod n, keeping its source and
/// relation.
/// Every draw is keyed by options.seed, so the split depends on nothing else. Returns the split
/// with the remaining edges as train, once each (u < v). Throws sar::invalid_argument for a
/// graph that is not symmetric, fractions outside [0, 1) or summing to 1 or more, a held-out
/// set left empty, or a node with no possible negative.
inline link_split split_edges(graph_dataset& data, const edge_split_options& options) {
  constexpr const char* where = "sar::split_edges";
  SAR_CHECK(options.valid >= 0 && options.test >= 0 && options.valid + options.test < 1,
            invalid_argument, where, ": valid ", options.valid, " and test ", options.test,
            " must be fractions summing to less than 1");
  SAR_CHECK(options.per_source_negatives >= 0 && options.negatives >= -1, invalid_argument,
            where, ": negatives ", options.negatives, ", per source ",
            options.per_source_negatives);
  csr& graph = data.graph;
  SAR_CHECK(is_symmetric(graph), invalid_argument, where,
            ": the graph is directed; link prediction splits undirected edges (each stored both "
            "ways)", data.schema.heterogeneous() ? "; add each relation's reverse (sar-convert "
                                                  "--add-reverse)" : "");
  const edge_lookup whole(graph);

  // The undirected edges {u, v}, u < v, once each, in row order; on a typed graph each of the
  // relation of its entry u -> v (the smallest, if several).
  const bool typed = !data.edge_types.empty();
  node_pairs edges;
  std::vector<std::pair<node_t, std::int32_t>> row;
  for (node_t v = 0; v < whole.nodes(); ++v) {
    row.clear();
    for (edge_t e = graph.offsets[v]; e < graph.offsets[v + 1]; ++e)
      if (graph.columns[static_cast<std::size_t>(e)] < v)
        row.emplace_back(graph.columns[static_cast<std::size_t>(e)],
                         typed ? data.edge_types[static_cast<std::size_t>(e)] : 0);
    std::sort(row.begin(), row.end());
    for (std::size_t k = 0; k < row.size(); ++k) {
      if (k > 0 && row[k].first == row[k - 1].first) continue;
      if (typed) edges.push(row[k].first, v, row[k].second);
      else edges.push(row[k].first, v);
    }
  }
  const auto count = static_cast<std::int64_t>(edges.size());
  const auto n_test =
      static_cast<std::int64_t>(std::llround(options.test * static_cast<double>(count)));
  const auto n_valid =
      static_cast<std::int64_t>(std::llround(options.valid * static_cast<double>(count)));
  SAR_CHECK((options.valid == 0 || n_valid > 0) && (options.test == 0 || n_test > 0),
            invalid_argument, where, ": ", count, " undirected edges leave ", n_valid,
            " for validation and ", n_test, " for test");

  // A keyed permutation of the edges: test first, then valid, then train.
  const counter_rng rng(options.seed, rng_stream::edge_split);
  std::vector<std::uint64_t> key(edges.size());
  for (std::size_t e = 0; e < edges.size(); ++e) key[e] = rng.bits(0, e)[0];
  std::vector<std::size_t> order(edges.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return key[a] != key[b] ? key[a] < key[b] : a < b;
  });
  link_split split;
  for (std::int64_t k = 0; k < count; ++k) {
    const std::size_t e = order[static_cast<std::size_t>(k)];
    node_pairs& to = k < n_test ? split.test : k < n_test + n_valid ? split.valid : split.train;
    to.push_from(edges, e);
  }

  // Remove the held-out edges from the graph, both directions, with their per-entry rows.
  const edge_lookup held_out = [&] {
    edge_list list;
    list.num_nodes = whole.nodes();
    for (const node_pairs* held : {&split.test, &split.valid}) {
      list.src.insert(list.src.end(), held->source.begin(), held->source.end());
      list.dst.insert(list.dst.end(), held->destination.begin(), held->destination.end());
    }
    return edge_lookup(build_csr(list));
  }();
  std::vector<edge_t> kept;
  csr remaining;
  remaining.num_rows = graph.num_rows;
  remaining.num_cols = graph.num_cols;
  remaining.offsets.assign(static_cast<std::size_t>(graph.num_rows) + 1, 0);
  for (node_t v = 0; v < graph.num_rows; ++v) {
    for (edge_t e = graph.offsets[v]; e < graph.offsets[v + 1]; ++e) {
      const node_t u = graph.columns[static_cast<std::size_t>(e)];
      if (u != v && held_out.joined(u, v)) continue;
      kept.push_back(e);
      remaining.columns.push_back(u);
    }
    remaining.offsets[static_cast<std::size_t>(v) + 1] =
        static_cast<edge_t>(remaining.columns.size());
  }
  if (data.edge_features.rows() > 0) data.edge_features = take_edge_rows(data.edge_features, kept);
  if (!data.edge_types.empty()) {
    std::vector<std::int32_t> types(kept.size());
    for (std::size_t k = 0; k < kept.size(); ++k)
      types[k] = data.edge_types[static_cast<std::size_t>(kept[k])];
    data.edge_types = std::move(types);
  }
  graph = std::move(remaining);

  // Negatives, never an edge of the original graph.
  const counter_rng draws(options.seed, rng_stream::link_negatives);
  const auto negatives_of = [&](const node_pairs& positives, std::uint64_t set, node_pairs& shared,
                                std::vector<node_t>& per_source) {
    const std::int64_t m = typed && positives.size() == 0 ? 0
                           : options.negatives < 0 ? static_cast<std::int64_t>(positives.size())
                                                   : options.negatives;
    for (std::int64_t i = 0; i < m; ++i) {
      const auto at = static_cast<std::uint64_t>(i);
      if (typed) {  // corrupts positive i mod n: its source and relation kept
        const std::size_t j = static_cast<std::size_t>(at % positives.size());
        const node_t u = positives.source[j];
        shared.push(u, detail::draw_non_neighbour(whole, draws, u, 2 * set + 1, at, 0),
                    positives.relation[j]);
        continue;
      }
      const auto u = static_cast<node_t>(
          draws.below(static_cast<std::uint64_t>(whole.nodes()), 2 * set, at));
      shared.push(u, detail::draw_non_neighbour(whole, draws, u, 2 * set + 1, at, 0));
    }
    const auto k = static_cast<std::size_t>(options.per_source_negatives);
    per_source.resize(positives.size() * k);
    for (std::size_t i = 0; i < positives.size(); ++i)
      for (std::size_t j = 0; j < k; ++j)
        per_source[i * k + j] =
            detail::draw_non_neighbour(whole, draws, positives.source[i], 4 + set, i, j);
  };
  negatives_of(split.valid, 0, split.valid_negatives, split.valid_target_negatives);
  negatives_of(split.test, 1, split.test_negatives, split.test_target_negatives);
  split.per_source = options.per_source_negatives;
  return split;
}

}  // namespace sar
