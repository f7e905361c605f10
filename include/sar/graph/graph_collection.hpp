// Many graphs held as one, as PyG's Batch and DGL's batched graph hold them: the graphs' nodes
// concatenated (graph g owns the ids [node_offsets[g], node_offsets[g + 1]), PyG's ptr), one
// CSR of in-edges over all of them that is block diagonal (no edge joins two graphs), one
// feature row per node and per edge, and what each graph is to predict (a class or a row of
// targets). A minibatch of graphs is the block-diagonal graph of some of them (make_batch);
// every layer runs on it unchanged, and a readout (sar/nn/readout.hpp) pools each graph's rows.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <numeric>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "sar/core/error.hpp"
#include "sar/core/rng.hpp"
#include "sar/core/task_kind.hpp"
#include "sar/core/types.hpp"
#include "sar/graph/csr.hpp"

namespace sar {

/// The graphs a run trains, validates and tests on: indices into a collection.
struct graph_split {
  std::vector<std::int64_t> train;  ///< graphs trained on
  std::vector<std::int64_t> valid;  ///< graphs that pick the best epoch
  std::vector<std::int64_t> test;   ///< graphs reported
};

/// A collection of graphs (see the top of this file).
struct graph_collection {
  std::string name;  ///< what the dataset is called (a TU directory's name)
  /// graph_classify (labels, num_classes) or graph_regress (targets).
  task_kind task = task_kind::graph_classify;
  csr graph;  ///< in-edges over every node of every graph, block diagonal
  /// num_graphs() + 1 entries: graph g's nodes are [node_offsets[g], node_offsets[g + 1]).
  std::vector<node_t> node_offsets{0};
  matrixf features;       ///< num_nodes() x feature columns (at least one)
  matrixf edge_features;  ///< one row per entry of graph, in its order; 0 x 0: none
  std::vector<std::int32_t> labels;  ///< graph_classify: one class per graph
  std::int32_t num_classes = 0;      ///< graph_classify: labels are in [0, num_classes)
  /// graph_classify: the dataset's own label of class k (a TU dataset's, in sorted order);
  /// empty: the classes are their own labels.
  std::vector<std::int64_t> class_labels;
  matrixf targets;  ///< graph_regress: num_graphs() x outputs
  /// The splits the dataset brings (its split/NAME/ folders), by name.
  std::map<std::string, graph_split> splits;

  /// Number of graphs.
  std::int64_t num_graphs() const { return static_cast<std::int64_t>(node_offsets.size()) - 1; }
  /// Number of nodes of every graph together.
  node_t num_nodes() const { return node_offsets.back(); }
  /// Nodes of graph g.
  node_t graph_nodes(std::int64_t g) const { return node_offsets[g + 1] - node_offsets[g]; }
  /// What a model outputs per graph: num_classes (graph_classify) or the targets' columns.
  Eigen::Index num_outputs() const { return has_class_ids(task) ? num_classes : targets.cols(); }

  /// Throws sar::invalid_argument naming `where` and the first broken invariant: a graph-level
  /// task; offsets from 0, every graph with a node; a square graph over num_nodes() whose
  /// every edge stays inside its graph; one feature row per node (at least one column); edge
  /// features one row per entry or none; one label in [0, num_classes) per graph
  /// (graph_classify) or finite targets, one row per graph (graph_regress).
  void validate(const char* where = "sar::graph_collection::validate") const {
    SAR_CHECK(is_graph_level(task), invalid_argument, where, ": task ", task_name(task),
              " is not a graph-level task (", task_choices(task_level::graph), ")");
    SAR_CHECK(!node_offsets.empty() && node_offsets.front() == 0, invalid_argument, where,
              ": node offsets must start at 0");
    for (std::int64_t g = 0; g < num_graphs(); ++g)
      SAR_CHECK(graph_nodes(g) >= 1, invalid_argument, where, ": graph ", g, " has no node");
    graph.validate(where);
    SAR_CHECK(graph.num_rows == num_nodes() && graph.num_cols == num_nodes(), invalid_argument,
              where, ": a graph of ", graph.num_rows, " x ", graph.num_cols, " for ", num_nodes(),
              " nodes");
    for (std::int64_t g = 0; g < num_graphs(); ++g)
      for (node_t v = node_offsets[g]; v < node_offsets[g + 1]; ++v)
        for (const node_t u : graph.row(v))
          SAR_CHECK(u >= node_offsets[g] && u < node_offsets[g + 1], invalid_argument, where,
                    ": the edge ", u, " -> ", v, " joins graph ", g, " to another graph");
    SAR_CHECK(features.rows() == num_nodes() && features.cols() >= 1, invalid_argument, where,
              ": features of ", features.rows(), " x ", features.cols(), " for ", num_nodes(),
              " nodes (at least one column)");
    SAR_CHECK((edge_features.rows() == 0 && edge_features.cols() == 0) ||
                  edge_features.rows() == graph.num_edges(),
              invalid_argument, where, ": ", edge_features.rows(), " edge feature rows for ",
              graph.num_edges(), " edges");
    if (has_class_ids(task)) {
      SAR_CHECK(static_cast<std::int64_t>(labels.size()) == num_graphs() && num_classes >= 1,
                invalid_argument, where, ": ", labels.size(), " labels for ", num_graphs(),
                " graphs (", num_classes, " classes)");
      for (std::size_t g = 0; g < labels.size(); ++g)
        SAR_CHECK(labels[g] >= 0 && labels[g] < num_classes, invalid_argument, where,
                  ": graph ", g, " has the label ", labels[g], " outside [0, ", num_classes, ")");
    } else {
      SAR_CHECK(targets.rows() == num_graphs() && targets.cols() >= 1, invalid_argument, where,
                ": targets of ", targets.rows(), " x ", targets.cols(), " for ", num_graphs(),
                " graphs");
      for (Eigen::Index i = 0; i < targets.size(); ++i)
        SAR_CHECK(std::isfinite(targets.data()[i]), invalid_argument, where, ": the target ",
                  targets.data()[i], " of graph ", i / targets.cols(), " is not finite");
    }
  }
};

/// Some graphs of a collection as one block-diagonal graph: a minibatch of graphs.
struct graph_batch {
  std::vector<std::int64_t> graphs;  ///< the collection's index of each graph, in batch order
  csr graph;                         ///< in-edges over the batch's nodes, block diagonal
  std::vector<node_t> node_offsets;  ///< graphs.size() + 1: graph b's rows of `graph`
  std::vector<node_t> ids;           ///< the collection's id of each node row
  matrixf features;                  ///< the nodes' feature rows
  matrixf edge_features;             ///< one row per entry of `graph`, or 0 x 0
  std::vector<std::int32_t> labels;  ///< graph_classify: the graphs' classes
  matrixf targets;                   ///< graph_regress: the graphs' target rows

  /// Number of graphs in the batch.
  std::int64_t num_graphs() const { return static_cast<std::int64_t>(graphs.size()); }
  /// Number of node rows.
  node_t num_nodes() const { return node_offsets.back(); }
  /// The graphs x nodes membership: row b lists graph b's node rows (what a readout sums).
  csr membership() const {
    csr m;
    m.num_rows = num_graphs();
    m.num_cols = num_nodes();
    m.offsets = node_offsets;
    m.columns.resize(static_cast<std::size_t>(num_nodes()));
    std::iota(m.columns.begin(), m.columns.end(), node_t{0});
    return m;
  }
};

/// The batch of `graphs` (indices into c, in that order; a graph may not repeat): their nodes
/// renumbered from 0 in that order, their edges and feature rows copied (one pass over the
/// batch's edges, as PyG's collate does; the collection is not copied). Throws
/// sar::invalid_argument naming a graph index outside c.
inline graph_batch make_batch(const graph_collection& c, std::span<const std::int64_t> graphs) {
  graph_batch b;
  b.graphs.assign(graphs.begin(), graphs.end());
  b.node_offsets.assign(1, 0);
  edge_t edges = 0;
  for (const std::int64_t g : graphs) {
    SAR_CHECK(g >= 0 && g < c.num_graphs(), invalid_argument, "sar::make_batch: graph ", g,
              " of a collection of ", c.num_graphs());
    b.node_offsets.push_back(b.node_offsets.back() + c.graph_nodes(g));
    edges += c.graph.offsets[c.node_offsets[g + 1]] - c.graph.offsets[c.node_offsets[g]];
  }
  const node_t n = b.node_offsets.back();
  b.graph.num_rows = b.graph.num_cols = n;
  b.graph.offsets.assign(1, 0);
  b.graph.offsets.reserve(static_cast<std::size_t>(n) + 1);
  b.graph.columns.reserve(static_cast<std::size_t>(edges));
  b.ids.reserve(static_cast<std::size_t>(n));
  const bool with_edge_features = c.edge_features.rows() > 0;
  b.features.resize(n, c.features.cols());
  if (with_edge_features) b.edge_features.resize(edges, c.edge_features.cols());
  const bool classify = has_class_ids(c.task);
  if (!classify) b.targets.resize(b.num_graphs(), c.targets.cols());
  for (std::size_t k = 0; k < graphs.size(); ++k) {
    const std::int64_t g = graphs[k];
    const node_t shift = b.node_offsets[k] - c.node_offsets[g];
    for (node_t v = c.node_offsets[g]; v < c.node_offsets[g + 1]; ++v) {
      b.features.row(v + shift) = c.features.row(v);
      b.ids.push_back(v);
      for (edge_t e = c.graph.offsets[v]; e < c.graph.offsets[v + 1]; ++e) {
        if (with_edge_features)
          b.edge_features.row(static_cast<Eigen::Index>(b.graph.columns.size())) =
              c.edge_features.row(e);
        b.graph.columns.push_back(c.graph.columns[e] + shift);
      }
      b.graph.offsets.push_back(static_cast<edge_t>(b.graph.columns.size()));
    }
    if (classify) b.labels.push_back(c.labels[g]);
    else b.targets.row(static_cast<Eigen::Index>(k)) = c.targets.row(g);
  }
  return b;
}

/// What an order of graphs is for: its sub-stream of rng_stream::sampling (above the samplers'
/// own sub-streams).
enum class graph_order : std::uint64_t {
  fold_strata = 16,  ///< k_fold_split: each class's graphs before they are dealt to the folds
  fold_rest = 17,    ///< k_fold_split: the graphs outside the test fold, before validation
  epoch = 18,        ///< train_graph_level: an epoch's training graphs
};

/// `items` in an order keyed by (seed, `purpose`, round): a pure function of its arguments, the
/// same on every rank.
inline std::vector<std::int64_t> shuffled_graphs(std::vector<std::int64_t> items,
                                                 std::uint64_t seed, graph_order purpose,
                                                 std::uint64_t round) {
  const counter_rng rng(seed, rng_stream::sampling, static_cast<std::uint64_t>(purpose));
  std::vector<std::pair<std::uint64_t, std::int64_t>> keyed;
  keyed.reserve(items.size());
  for (const std::int64_t g : items)
    keyed.emplace_back(rng.bits(round, static_cast<std::uint64_t>(g))[0], g);
  std::sort(keyed.begin(), keyed.end());
  for (std::size_t k = 0; k < keyed.size(); ++k) items[k] = keyed[k].second;
  return items;
}

/// Fold `fold` of a seeded k-fold over c's graphs, stratified by class for graph_classify (each
/// class's graphs, in a seeded order, dealt to the folds in turn, continuing where the last
/// class stopped): test is the fold; of the rest, in a seeded order, the first tenth (rounded
/// to nearest, at least one when there are two or more) validates and the others train. Each
/// list is sorted. Throws sar::invalid_argument unless 2 <= folds <= num_graphs() and
/// 0 <= fold < folds.
inline graph_split k_fold_split(const graph_collection& c, int folds, int fold,
                                std::uint64_t seed) {
  constexpr const char* where = "sar::k_fold_split";
  SAR_CHECK(folds >= 2 && folds <= c.num_graphs() && fold >= 0 && fold < folds, invalid_argument,
            where, ": fold ", fold, " of ", folds, " folds over ", c.num_graphs(), " graphs");
  const bool classify = has_class_ids(c.task);
  const std::int32_t strata = classify ? c.num_classes : 1;
  std::vector<std::vector<std::int64_t>> of_stratum(static_cast<std::size_t>(strata));
  for (std::int64_t g = 0; g < c.num_graphs(); ++g)
    of_stratum[classify ? static_cast<std::size_t>(c.labels[g]) : 0].push_back(g);
  graph_split s;
  std::vector<std::int64_t> rest;
  std::int64_t dealt = 0;
  for (std::size_t k = 0; k < of_stratum.size(); ++k)
    for (const std::int64_t g : shuffled_graphs(of_stratum[k], seed, graph_order::fold_strata, k))
      (dealt++ % folds == fold ? s.test : rest).push_back(g);
  rest = shuffled_graphs(std::move(rest), seed, graph_order::fold_rest,
                         static_cast<std::uint64_t>(fold));
  const auto valid = rest.size() < 2 ? std::size_t{0}
                                     : std::max<std::size_t>(1, (rest.size() + 5) / 10);
  s.valid.assign(rest.begin(), rest.begin() + static_cast<std::ptrdiff_t>(valid));
  s.train.assign(rest.begin() + static_cast<std::ptrdiff_t>(valid), rest.end());
  for (auto* list : {&s.train, &s.valid, &s.test}) std::sort(list->begin(), list->end());
  return s;
}

}  // namespace sar
