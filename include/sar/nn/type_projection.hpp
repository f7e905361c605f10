// Per-type input projection of a heterogeneous graph: every node type t has its own weight
// and bias, y_i = x_i[0, F_t) W_t + b_t for node i of type t (F_t: the type's feature_dim,
// sar/graph/schema.hpp), so node types whose features differ in width and meaning all enter
// the model at one width. A featureless type (F_t = 0) gets y_i = b_t: one learnt vector for
// the whole type; or, with embeddings, y_i = b_t + e_i, a learnable row per node (a row table
// of the parameter store, sar/nn/parameters.hpp: each rank holds and updates the rows of its
// own nodes, as DGL's NodeEmbedding with SparseAdam). A node's type follows from its dataset
// id (graph.node_id(row)), so the layer runs on any schedule, one process or P ranks, whole
// graphs or sampled blocks. Row-wise: it reads no neighbours. Keeps nothing between forward
// and backward. With embeddings, every row the layer sees must be a node whose row this rank
// holds (parameter_store::hold_rows: whole graphs) or borrowed (row_table::borrowed_ids:
// sampled blocks, whose input nodes the minibatch loop borrows from the ranks that hold them).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "sar/core/error.hpp"
#include "sar/core/memory.hpp"
#include "sar/core/types.hpp"
#include "sar/graph/schema.hpp"
#include "sar/kernels/dense.hpp"
#include "sar/nn/detail/graph_conv.hpp"
#include "sar/nn/layer.hpp"
#include "sar/nn/parameters.hpp"

namespace sar {

/// Per-type input projection (see the top of this file).
template <class T>
class type_projection {
 public:
  /// Element type of the matrices and parameters.
  using scalar = T;
  /// Row i of y depends on row i of x alone (sar/nn/layer.hpp).
  static constexpr bool reads_neighbours = false;

  /// For the node types of `schema` (heterogeneous), inputs input_dim wide (at least every
  /// type's feature_dim), outputs output_dim >= 1 wide; `embed_featureless`: a learnable row
  /// per node of each featureless type. Throws sar::invalid_argument otherwise.
  type_projection(const graph_schema& schema, Eigen::Index input_dim, Eigen::Index output_dim,
                  bool embed_featureless = false)
      : begins_(schema.type_begins()), in_(input_dim), out_(output_dim),
        embed_(embed_featureless) {
    constexpr const char* where = "sar::type_projection";
    SAR_CHECK(schema.heterogeneous() && output_dim >= 1, invalid_argument, where, ": ",
              schema.num_node_types(), " node types, output width ", output_dim);
    for (const node_type& t : schema.node_types) {
      SAR_CHECK(t.feature_dim <= input_dim, invalid_argument, where, ": node type '", t.name,
                "' has ", t.feature_dim, " features, the input ", input_dim);
      names_.push_back(t.name);
      widths_.push_back(t.feature_dim);
    }
  }

  /// Input width.
  Eigen::Index input_dim() const { return in_; }
  /// Output width.
  Eigen::Index output_dim() const { return out_; }
  /// Backward reads x, never y.
  reads_in_backward backward_reads() const { return {.input = true, .output = false}; }

  /// Declares for each type t, in type order, "type_projection.<name>.weight" (F_t x out,
  /// Glorot, group 0; none for a featureless type) and "type_projection.<name>.bias" (1 x out,
  /// zeros, group 1); with embeddings, for each featureless type the row table
  /// "type_projection.<name>.embedding" (out columns for the type's dataset ids).
  void declare(parameter_store<T>& store) {
    store_ = &store;
    weights_.clear();
    biases_.clear();
    tables_.clear();
    for (std::size_t t = 0; t < names_.size(); ++t) {
      const std::string name = "type_projection." + names_[t];
      weights_.push_back(widths_[t] > 0 ? store.declare({name + ".weight", widths_[t], out_,
                                                          init_kind::glorot_uniform, 0})
                                        : 0);
      biases_.push_back(store.declare({name + ".bias", 1, out_, init_kind::zeros, 1}));
      tables_.push_back(embed_ && widths_[t] == 0
                            ? static_cast<std::ptrdiff_t>(store.declare_table(
                                  {name + ".embedding", begins_[t], begins_[t + 1], out_}))
                            : -1);
    }
  }

  /// y := each row's projection by its type. Requires x: graph.num_sources() x input_dim()
  /// (or graph.num_destinations() rows on an edgeless level schedule: any row count whose
  /// rows graph.node_id names). Throws sar::invalid_argument on a shape mismatch.
  template <class Schedule>
  void forward(Schedule& graph, const layer_context&, const_rows_ref<T> x, matrix<T>& y) {
    constexpr const char* where = "sar::type_projection::forward";
    detail::check_declared(where, store_);
    SAR_CHECK(x.cols() == in_, invalid_argument, where, ": x has ", x.cols(), " columns, expected ",
              in_);
    huge_page_resize(y, x.rows(), out_);
    const auto rows = rows_by_type(graph, x.rows());
    for (std::size_t t = 0; t < rows.size(); ++t) {
      if (rows[t].empty()) continue;
      const auto b = store_->value(biases_[t]);
      if (widths_[t] == 0) {
        for (const node_t i : rows[t]) y.row(i) = b;
        if (tables_[t] >= 0) {
          row_table<T>& table = store_->table(static_cast<std::size_t>(tables_[t]));
          for (const node_t i : rows[t]) {
            const auto at = locate(table, graph, i);
            y.row(i) += at.values->row(at.row);
          }
        }
        continue;
      }
      const matrix<T> xt = leading_columns(x, rows[t], widths_[t]);
      matrix<T> yt(xt.rows(), out_);
      dense_product<false, T>(xt, store_->value(weights_[t]), yt, b.data());
      for (std::size_t k = 0; k < rows[t].size(); ++k)
        y.row(rows[t][k]) = yt.row(static_cast<Eigen::Index>(k));
    }
  }

  /// Assigns each type's dW_t = X_t^T dY_t and db_t = column sums of dY_t, and an embedding's
  /// de_i = dy_i (zero for rows not seen); ADDS dLoss/dx into dx's leading columns unless dx is
  /// empty. Throws sar::invalid_argument on a shape mismatch.
  template <class Schedule>
  void backward(Schedule& graph, const layer_context&, const_rows_ref<T> x, const_rows_ref<T>,
                const_rows_ref<T> dy, matrix<T>& dx) {
    constexpr const char* where = "sar::type_projection::backward";
    detail::check_declared(where, store_);
    detail::check_shape(where, "dy", dy.rows(), dy.cols(), x.rows(), out_);
    detail::check_input_gradient(where, dx.rows(), dx.cols(), x.rows(), in_);
    const bool want_dx = dx.rows() == x.rows() && dx.cols() == in_ && dx.size() > 0;
    const auto rows = rows_by_type(graph, x.rows());
    for (std::size_t t = 0; t < rows.size(); ++t) {
      const matrix<T> dyt = leading_columns(dy, rows[t], out_);
      column_sums<T>(dyt, rows_ref<T>(store_->grad(biases_[t])));
      if (tables_[t] >= 0) {
        row_table<T>& table = store_->table(static_cast<std::size_t>(tables_[t]));
        table.grads.setZero();
        table.borrowed_grads.setZero();
        for (const node_t i : rows[t]) {
          const auto at = locate(table, graph, i);
          at.grads->row(at.row) += dy.row(i);
        }
      }
      if (widths_[t] == 0) continue;
      const matrix<T> xt = leading_columns(x, rows[t], widths_[t]);
      detail::assign_transposed_product<T>(xt, dyt, store_->grad(weights_[t]));
      if (!want_dx || rows[t].empty()) continue;
      matrix<T> dxt(dyt.rows(), widths_[t]);
      dense_product_transposed<false, T>(dyt, store_->value(weights_[t]), dxt);
      for (std::size_t k = 0; k < rows[t].size(); ++k)
        dx.row(rows[t][k]).head(widths_[t]) += dxt.row(static_cast<Eigen::Index>(k));
    }
  }

 private:
  /// The rows [0, count) of each node type, in increasing order.
  template <class Schedule>
  std::vector<std::vector<node_t>> rows_by_type(const Schedule& graph, Eigen::Index count) const {
    std::vector<std::vector<node_t>> out(names_.size());
    for (node_t i = 0; i < count; ++i) {
      const node_t id = graph.node_id(i);
      SAR_CHECK(id >= 0 && id < begins_.back(), invalid_argument,
                "sar::type_projection: row ", i, " is node ", id, ", outside the schema's ",
                begins_.back(), " nodes");
      out[static_cast<std::size_t>(graph_schema::type_in(begins_, id))].push_back(i);
    }
    return out;
  }
  /// Where row i's node has its row of `table` (row_table::locate). Throws
  /// sar::invalid_argument if this process neither holds nor borrowed it.
  template <class Schedule>
  static typename row_table<T>::place locate(row_table<T>& table, const Schedule& graph,
                                             node_t i) {
    const node_t id = graph.node_id(i);
    const auto at = table.locate(id);
    SAR_CHECK(at.row >= 0, invalid_argument, "sar::type_projection: row ", i, " is node ", id,
              ", whose '", table.shape.name, "' row this process neither holds nor borrowed (",
              table.ids.size(), " held, ", table.borrowed_ids.size(), " borrowed: "
              "parameter_store::hold_rows takes the nodes a rank holds; minibatch training "
              "borrows the rows of a step's input nodes)");
    return at;
  }
  /// The first `width` columns of m's rows `rows`.
  static matrix<T> leading_columns(const_rows_ref<T> m, const std::vector<node_t>& rows,
                                   Eigen::Index width) {
    matrix<T> out(static_cast<Eigen::Index>(rows.size()), width);
    for (std::size_t k = 0; k < rows.size(); ++k)
      out.row(static_cast<Eigen::Index>(k)) = m.row(rows[k]).head(width);
    return out;
  }

  std::vector<node_t> begins_;        // the first dataset id of each type, then the count
  std::vector<std::string> names_;    // of the types
  std::vector<Eigen::Index> widths_;  // F_t
  Eigen::Index in_, out_;
  bool embed_;                        // a row table per featureless type
  parameter_store<T>* store_ = nullptr;
  std::vector<std::size_t> weights_, biases_;
  std::vector<std::ptrdiff_t> tables_;  // of each type, -1: none
};

}  // namespace sar
