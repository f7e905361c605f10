// A heterogeneous graph as schedules: one over every edge with its relation (what R-GCN and the
// row-wise layers read) and one per relation over that relation's edges alone (what
// relation_wise, sar/nn/relation_wise.hpp, runs a homogeneous layer on), all over the same
// nodes. Each relation's schedule is an ordinary schedule of its own: its degrees are the
// relation's, and under a distributed schedule its halo plan moves only the rows that relation
// reads. The schedule interface itself is the typed schedule's, so every layer runs on a
// relational_graph. docs/heterogeneous.md.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "sar/core/error.hpp"
#include "sar/core/types.hpp"
#include "sar/graph/csr.hpp"
#include "sar/schedule/local_schedule.hpp"
#include "sar/schedule/schedule.hpp"

namespace sar {

/// One schedule with typed edges and one per relation (see the top of this file); Schedule is
/// local_schedule or a distributed_schedule. Not copyable.
template <class Schedule>
class relational_graph {
 public:
  /// The schedule type of the whole graph and of each relation.
  using schedule_type = Schedule;

  /// Takes the schedule over every edge (with its edge types) and one schedule per relation.
  /// Throws sar::invalid_argument if a schedule is missing or the relations' node counts
  /// differ from the typed one's.
  relational_graph(std::unique_ptr<Schedule> typed, std::vector<std::unique_ptr<Schedule>> relations)
      : typed_(std::move(typed)), relations_(std::move(relations)) {
    SAR_CHECK(typed_ != nullptr && !relations_.empty(), invalid_argument,
              "sar::relational_graph: a typed schedule and at least one relation's");
    for (std::size_t r = 0; r < relations_.size(); ++r)
      SAR_CHECK(relations_[r] != nullptr &&
                    relations_[r]->num_destinations() == typed_->num_destinations() &&
                    relations_[r]->num_sources() == typed_->num_sources(),
                invalid_argument, "sar::relational_graph: relation ", r,
                "'s schedule is not over the typed schedule's nodes");
  }

  /// The schedule over every edge, with its relation.
  Schedule& typed() { return *typed_; }
  /// The schedule over relation r's edges alone (0 <= r < num_relations()).
  Schedule& relation(std::int32_t r) { return *relations_.at(static_cast<std::size_t>(r)); }
  /// Number of relations.
  std::int32_t num_relations() const { return static_cast<std::int32_t>(relations_.size()); }

  // --- the schedule interface (sar/schedule/schedule.hpp), the typed schedule's ---
  /// Rows of a layer's output.
  node_t num_destinations() const { return typed_->num_destinations(); }
  /// Rows of a layer's input.
  node_t num_sources() const { return typed_->num_sources(); }
  /// The dataset id of source row `row`.
  node_t node_id(node_t row) const { return typed_->node_id(row); }
  /// In-degrees over every relation.
  std::span<const node_t> in_degrees() const { return typed_->in_degrees(); }
  /// Out-degrees over every relation.
  std::span<const node_t> out_degrees() const { return typed_->out_degrees(); }
  /// The edge features of every edge.
  const matrixf& edge_features() const { return typed_->edge_features(); }
  /// The relation of every edge.
  std::span<const std::int32_t> edge_types() const { return typed_->edge_types(); }
  /// The typed schedule's all_reduce_sum (collective).
  template <class V>
  void all_reduce_sum(std::span<V> values) { typed_->all_reduce_sum(values); }
  /// The typed schedule's gather (collective).
  template <class X, class Visit>
  void gather(const exchange_key& key, const Eigen::MatrixBase<X>& x, Visit&& visit) {
    typed_->gather(key, x, std::forward<Visit>(visit));
  }
  /// The typed schedule's scatter (collective).
  template <class DX, class Visit>
  void scatter(const exchange_key& key, Eigen::MatrixBase<DX>& dx, Visit&& visit) {
    typed_->scatter(key, dx, std::forward<Visit>(visit));
  }
  /// The typed schedule's gather_scatter (collective).
  template <class X, class DX, class Visit>
  void gather_scatter(const exchange_key& key, const Eigen::MatrixBase<X>& x,
                      Eigen::MatrixBase<DX>& dx, Visit&& visit) {
    typed_->gather_scatter(key, x, dx, std::forward<Visit>(visit));
  }

 private:
  std::unique_ptr<Schedule> typed_;
  std::vector<std::unique_ptr<Schedule>> relations_;
};

static_assert(aggregation_schedule<relational_graph<local_schedule>>);

/// The entries of `graph` (in-edges, one relation per entry in `edge_types`) of relation r,
/// with their edge-feature rows (`edge_features`: one per entry, or 0 x 0): the same rows
/// and columns, the other entries dropped. Throws sar::invalid_argument if edge_types is not
/// one per entry.
inline std::pair<csr, matrixf> relation_edges(const csr& graph,
                                              std::span<const std::int32_t> edge_types,
                                              const matrixf& edge_features, std::int32_t r) {
  SAR_CHECK(static_cast<edge_t>(edge_types.size()) == graph.num_edges(), invalid_argument,
            "sar::relation_edges: ", edge_types.size(), " edge types for ", graph.num_edges(),
            " edges");
  csr out;
  out.num_rows = graph.num_rows;
  out.num_cols = graph.num_cols;
  out.offsets.assign(1, 0);
  std::vector<edge_t> kept;
  for (node_t i = 0; i < graph.num_rows; ++i) {
    for (edge_t e = graph.offsets[i]; e < graph.offsets[i + 1]; ++e)
      if (edge_types[static_cast<std::size_t>(e)] == r) {
        out.columns.push_back(graph.columns[e]);
        kept.push_back(e);
      }
    out.offsets.push_back(static_cast<edge_t>(out.columns.size()));
  }
  matrixf features(static_cast<Eigen::Index>(kept.size()), edge_features.cols());
  for (std::size_t k = 0; k < kept.size() && edge_features.cols() > 0; ++k)
    features.row(static_cast<Eigen::Index>(k)) = edge_features.row(kept[k]);
  return {std::move(out), std::move(features)};
}

/// One process: the relational graph of a typed graph (in-edges, one relation in [0,
/// relations) per entry; its edge features, one row per entry, or 0 x 0; node ids first_id +
/// row). Throws sar::invalid_argument as local_schedule and relation_edges do.
inline relational_graph<local_schedule> make_relational_graph(
    const csr& graph, std::span<const std::int32_t> edge_types, std::int32_t relations,
    const matrixf& edge_features = matrixf(), node_t first_id = 0) {
  std::vector<std::unique_ptr<local_schedule>> per_relation;
  for (std::int32_t r = 0; r < relations; ++r) {
    auto [edges, features] = relation_edges(graph, edge_types, edge_features, r);
    per_relation.push_back(
        std::make_unique<local_schedule>(std::move(edges), std::move(features), first_id));
  }
  return relational_graph<local_schedule>(
      std::make_unique<local_schedule>(csr{graph}, matrixf{edge_features},
                                       std::vector<std::int32_t>(edge_types.begin(), edge_types.end()),
                                       first_id),
      std::move(per_relation));
}

}  // namespace sar
