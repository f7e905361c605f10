// A relation-wise composition (DGL's HeteroGraphConv with aggregate "sum", PyG's HeteroConv):
// one homogeneous layer per relation, each on that relation's edges alone, their outputs
// summed:  y = sum_r L_r(relation r's graph, x).  Any graph layer of sar (GCN, GraphSAGE, GAT,
// edge_conv, a user's) becomes relational this way; each relation's layer has its own
// parameters and sees its relation's degrees (GCN's and mean aggregation's normalisation are
// per relation, as in DGL). The graph must be a relational_graph
// (sar/schedule/relational_graph.hpp), whose relation(r) is an ordinary schedule: under a
// distributed schedule each relation's exchange moves only the rows that relation reads.
// Kept between forward and backward: what each relation's layer keeps, and each relation's
// output when its layer's backward reads it.
#pragma once

#include <algorithm>
#include <concepts>
#include <cstdint>
#include <utility>
#include <vector>

#include "sar/core/error.hpp"
#include "sar/core/memory.hpp"
#include "sar/core/types.hpp"
#include "sar/kernels/dense.hpp"
#include "sar/nn/layer.hpp"
#include "sar/nn/parameters.hpp"

namespace sar {

/// One layer L per relation, outputs summed (see the top of this file).
template <class L>
class relation_wise {
 public:
  /// Element type of the matrices and parameters.
  using scalar = typename L::scalar;

  /// Takes one layer per relation (layers[r] runs on relation r), all of the same input and
  /// output widths. Throws sar::invalid_argument for no layer or differing widths.
  explicit relation_wise(std::vector<L> layers) : layers_(std::move(layers)) {
    SAR_CHECK(!layers_.empty(), invalid_argument, "sar::relation_wise: no layer");
    for (std::size_t r = 1; r < layers_.size(); ++r)
      SAR_CHECK(layers_[r].input_dim() == layers_[0].input_dim() &&
                    layers_[r].output_dim() == layers_[0].output_dim(),
                invalid_argument, "sar::relation_wise: relation ", r, "'s layer is ",
                layers_[r].input_dim(), " -> ", layers_[r].output_dim(), ", relation 0's ",
                layers_[0].input_dim(), " -> ", layers_[0].output_dim());
    outputs_.resize(layers_.size());
  }
  /// `relations` copies of `layer`, one per relation.
  relation_wise(const L& layer, std::int32_t relations)
      : relation_wise(std::vector<L>(static_cast<std::size_t>(std::max(relations, 0)), layer)) {}

  /// Input width.
  Eigen::Index input_dim() const { return layers_[0].input_dim(); }
  /// Output width.
  Eigen::Index output_dim() const { return layers_[0].output_dim(); }
  /// Number of relations.
  std::int32_t num_relations() const { return static_cast<std::int32_t>(layers_.size()); }
  /// Reads x (and its outputs) in backward where its layers do.
  reads_in_backward backward_reads() const {
    return {.input = reads_of(layers_[0]).input, .output = false};  // outputs are kept here
  }

  /// Declares each relation's layer's parameters, relation 0's first.
  void declare(parameter_store<scalar>& store) {
    for (L& layer : layers_) layer.declare(store);
  }

  /// y := sum over relations r of layer r's output on graph.relation(r). Requires a graph with
  /// relation(r) for every r < num_relations(). Throws what the layers throw. Collective (the
  /// layers' exchanges, relation by relation).
  template <class Graph>
  void forward(Graph& graph, const layer_context& ctx, const_rows_ref<scalar> x, matrix<scalar>& y) {
    check_relations(graph, "sar::relation_wise::forward");
    layer_context each = ctx;
    each.finish_rows = nullptr;  // rows are finished once every relation has added to them
    for (std::size_t r = 0; r < layers_.size(); ++r) {
      layers_[r].forward(graph.relation(static_cast<std::int32_t>(r)), each, x, outputs_[r]);
      if (r == 0) {
        huge_page_resize(y, outputs_[0].rows(), outputs_[0].cols());
        y = outputs_[0];
      } else {
        y += outputs_[r];
      }
    }
    if (!reads_of(layers_[0]).output)
      for (auto& o : outputs_) o = matrix<scalar>();  // no layer reads it again
  }

  /// ADDS dLoss/dx into dx (unless empty), ASSIGNS the layers' parameter gradients.
  /// Collective.
  template <class Graph>
  void backward(Graph& graph, const layer_context& ctx, const_rows_ref<scalar> x,
                const_rows_ref<scalar>, const_rows_ref<scalar> dy, matrix<scalar>& dx) {
    check_relations(graph, "sar::relation_wise::backward");
    // Wanted unless dx is 0 x 0: a rank without nodes passes 0 x F and must make the same
    // collective calls as the others.
    const bool want_dx = dx.rows() != 0 || dx.cols() != 0;
    matrix<scalar> dx_r;
    for (std::size_t r = 0; r < layers_.size(); ++r) {
      if (want_dx) dx_r.setZero(dx.rows(), dx.cols());
      else dx_r.resize(0, 0);
      layers_[r].backward(graph.relation(static_cast<std::int32_t>(r)), ctx, x, outputs_[r], dy,
                          dx_r);
      if (want_dx) dx += dx_r;
    }
  }

  /// The layer of relation r.
  L& layer(std::int32_t r) { return layers_.at(static_cast<std::size_t>(r)); }

 private:
  static reads_in_backward reads_of(const L& l) {
    if constexpr (requires { { l.backward_reads() } -> std::convertible_to<reads_in_backward>; })
      return l.backward_reads();
    else
      return {};
  }
  template <class Graph>
  void check_relations(const Graph& graph, const char* where) const {
    SAR_CHECK(graph.num_relations() == num_relations(), invalid_argument, where, ": ",
              num_relations(), " relations' layers on a graph of ", graph.num_relations(),
              " relations");
  }

  std::vector<L> layers_;
  std::vector<matrix<scalar>> outputs_;  // each relation's output (for backwards that read it)
};

}  // namespace sar
