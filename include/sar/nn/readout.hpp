// A readout: each graph of a batch (sar/graph/graph_collection.hpp) pooled into one row,
//   sum        y_g = sum_{v in g} x_v
//   mean       y_g = sum_{v in g} x_v / |g|
//   max        y_g = the column-wise max of g's rows (the gradient flows to the row that holds
//              it; the first such row on a tie)
//   attention  y_g = sum_{v in g} a_v x_v, a = softmax over g's nodes of the gate x_v w (Li et
//              al. 2016's gated pooling; PyG's AttentionalAggregation with a linear gate, whose
//              bias cancels in the softmax and is left out).
// A layer of the layer contract on a schedule whose one block is the batch's membership
// (graphs x nodes: a local_schedule of graph_batch::membership()): destinations are graphs,
// sources are nodes. A graph without nodes pools to a zero row. Kept between forward and
// backward: max, the arg-max per graph and column; attention, the weight a of every node.
// Not collective (a rank pools its own graphs).
#pragma once

#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "sar/core/error.hpp"
#include "sar/core/types.hpp"
#include "sar/nn/layer.hpp"
#include "sar/nn/parameters.hpp"
#include "sar/schedule/schedule.hpp"

namespace sar {

/// How a readout pools a graph's rows (see the top of this file).
enum class readout_kind { sum, mean, max, attention };

/// Every readout's name, in readout_kind's order.
inline constexpr std::string_view readout_names[] = {"sum", "mean", "max", "attention"};

/// The readout named `name`. Throws sar::invalid_argument for another name.
inline readout_kind parse_readout(std::string_view name) {
  for (std::size_t k = 0; k < std::size(readout_names); ++k)
    if (name == readout_names[k]) return static_cast<readout_kind>(k);
  throw invalid_argument(
      message("sar::parse_readout: unknown readout '", name, "' (sum, mean, max or attention)"));
}

/// The readout of `kind` over rows of `dim` features (see the top of this file).
template <class T>
class readout {
 public:
  /// Element type of the matrices.
  using scalar = T;
  /// A graph's row depends on other rows: it runs on a block (the membership).
  static constexpr bool reads_neighbours = true;

  /// Requires dim >= 1; throws sar::invalid_argument otherwise.
  readout(readout_kind kind, Eigen::Index dim) : kind_(kind), dim_(dim) {
    SAR_CHECK(dim >= 1, invalid_argument, "sar::readout: width ", dim);
  }
  /// Feature width of a node row.
  Eigen::Index input_dim() const { return dim_; }
  /// Feature width of a graph row (the same).
  Eigen::Index output_dim() const { return dim_; }
  /// The kind of pooling.
  readout_kind kind() const { return kind_; }
  /// Attention's backward reads x; the others read neither x nor y.
  reads_in_backward backward_reads() const {
    return {.input = kind_ == readout_kind::attention, .output = false};
  }

  /// Declares attention's gate w (dim x 1, Glorot); the others have no parameter.
  void declare(parameter_store<T>& store) {
    store_ = &store;
    if (kind_ == readout_kind::attention)
      gate_ = store.declare({"readout.gate", dim_, 1, init_kind::glorot_uniform, 0});
  }

  /// y := one row per graph of the membership (see the top of this file). Requires x:
  /// graph.num_sources() x dim. Throws sar::invalid_argument on a shape mismatch.
  template <class Schedule>
    requires whole_block_schedule<Schedule>
  void forward(Schedule& graph, const layer_context&, const_rows_ref<T> x, matrix<T>& y) {
    const csr& m = membership(graph, x.rows(), "sar::readout::forward");
    y.setZero(m.num_rows, dim_);
    if (kind_ == readout_kind::max) arg_max_.assign(static_cast<std::size_t>(y.size()), -1);
    if (kind_ == readout_kind::attention) weights_.assign(static_cast<std::size_t>(x.rows()), T(0));
    for (node_t g = 0; g < m.num_rows; ++g) {
      const auto nodes = m.row(g);
      if (nodes.empty()) continue;
      auto out = y.row(g);
      switch (kind_) {
        case readout_kind::sum:
        case readout_kind::mean:
          for (const node_t v : nodes) out += x.row(v);
          if (kind_ == readout_kind::mean) out /= static_cast<T>(nodes.size());
          break;
        case readout_kind::max:
          out = x.row(nodes[0]);
          for (Eigen::Index c = 0; c < dim_; ++c) {
            node_t best = nodes[0];
            for (const node_t v : nodes)
              if (x(v, c) > out(c)) out(c) = x(best = v, c);
            arg_max_[static_cast<std::size_t>(g * dim_ + c)] = best;
          }
          break;
        case readout_kind::attention: {
          const auto w = store_->value(gate_).col(0);
          T top = -std::numeric_limits<T>::infinity(), total = 0;
          for (const node_t v : nodes) top = std::max(top, T(x.row(v).dot(w)));
          for (const node_t v : nodes) total += weights_[v] = std::exp(T(x.row(v).dot(w)) - top);
          for (const node_t v : nodes) out += (weights_[v] /= total) * x.row(v);
          break;
        }
      }
    }
  }

  /// Given the x of the matching forward and dy: adds dx += dL/dx unless dx is 0 x 0, and
  /// assigns attention's gate gradient. Throws sar::invalid_argument on a shape mismatch or
  /// without a matching forward (max, attention).
  template <class Schedule>
    requires whole_block_schedule<Schedule>
  void backward(Schedule& graph, const layer_context&, const_rows_ref<T> x, const_rows_ref<T>,
                const_rows_ref<T> dy, matrix<T>& dx) {
    constexpr const char* where = "sar::readout::backward";
    const bool want_dx = dx.size() > 0;
    const csr& m = membership(graph, want_dx ? dx.rows() : graph.num_sources(), where);
    SAR_CHECK(dy.rows() == m.num_rows && dy.cols() == dim_ && (!want_dx || dx.cols() == dim_),
              invalid_argument, where, ": dy ", dy.rows(), " x ", dy.cols(), " for ", m.num_rows,
              " graphs of width ", dim_);
    SAR_CHECK(kind_ != readout_kind::max ||
                  arg_max_.size() == static_cast<std::size_t>(dy.size()),
              invalid_argument, where, ": no matching forward");
    SAR_CHECK(kind_ != readout_kind::attention ||
                  (weights_.size() == static_cast<std::size_t>(m.num_cols) &&
                   x.rows() == m.num_cols && x.cols() == dim_),
              invalid_argument, where, ": no matching forward");
    if (kind_ == readout_kind::attention) store_->grad(gate_).setZero();
    for (node_t g = 0; g < m.num_rows; ++g) {
      const auto nodes = m.row(g);
      if (nodes.empty()) continue;
      const auto d = dy.row(g);
      switch (kind_) {
        case readout_kind::sum:
        case readout_kind::mean:
          if (!want_dx) break;
          for (const node_t v : nodes)
            dx.row(v) += kind_ == readout_kind::sum ? d : (d / static_cast<T>(nodes.size())).eval();
          break;
        case readout_kind::max:
          if (!want_dx) break;
          for (Eigen::Index c = 0; c < dim_; ++c)
            dx(arg_max_[static_cast<std::size_t>(g * dim_ + c)], c) += d(c);
          break;
        case readout_kind::attention: {
          // da_v = <dy_g, x_v>; ds_v = a_v (da_v - sum_u a_u da_u) is the gate's gradient.
          const auto w = store_->value(gate_).col(0);
          auto dw = store_->grad(gate_).col(0);
          T mean = 0;
          for (const node_t v : nodes) mean += weights_[v] * T(d.dot(x.row(v)));
          for (const node_t v : nodes) {
            const T ds = weights_[v] * (T(d.dot(x.row(v))) - mean);
            dw += ds * x.row(v).transpose();
            if (want_dx) dx.row(v) += weights_[v] * d + ds * w.transpose();
          }
          break;
        }
      }
    }
  }

 private:
  /// The membership (graphs x nodes) of graph's one block, checked against `rows` node rows.
  template <class Schedule>
  const csr& membership(Schedule& graph, Eigen::Index rows, const char* where) const {
    SAR_CHECK(store_ != nullptr, invalid_argument, where, ": declare() was not called");
    const graph_block& block = graph.whole_block();
    SAR_CHECK(block.edges != nullptr && !block.compressed(), invalid_argument, where,
              ": needs a schedule of one uncompressed block (a batch's membership)");
    SAR_CHECK(rows == block.edges->num_cols, invalid_argument, where, ": ", rows,
              " node rows for a membership of ", block.edges->num_cols, " nodes");
    return *block.edges;
  }

  readout_kind kind_;
  Eigen::Index dim_;
  parameter_store<T>* store_ = nullptr;
  std::size_t gate_ = 0;
  std::vector<node_t> arg_max_;  // max: per graph and column
  std::vector<T> weights_;       // attention: per node
};

}  // namespace sar
