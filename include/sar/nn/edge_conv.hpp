// Edge-conditioned message passing: the interaction-network step of MeshGraphNets (Pfaff et
// al., ICLR 2021; Battaglia et al., 2016), and a processor of several such steps that carries
// an edge state from step to step.
//
// One step, for destination i, its in-edges e = (j -> i) and their edge input e_ij (the
// graph's edge features, or an edge state):
//   z_e   = x_i W_d + x_j W_s + e_ij W_e + b_1             (hidden width H)
//   m_e   = relu(z_e) W_2 + b_2                            MLP_e([x_i, x_j, e_ij])
//   M_i   = sum_e m_e  (or their mean, message_aggregation::mean: M_i / max(deg_i, 1))
//   y_i   = x_i + relu(x_i V_x + M_i V_m + c_1) V_2 + c_2  x_i + MLP_v([x_i, M_i])
// With an edge output (a processor step that is not the last): e'_ij = e_ij + m_e.
// With layer norm (MeshGraphNets' processor; edge_processor only): m_e = LN(MLP_e(...)) and
// y_i = x_i + LN(MLP_v(...)) (sar/nn/layer_norm.hpp); every step then forms m_e per edge, and
// backward recomputes MLP_e's output of each edge for its normalisation's gradient.
//
// How it runs. x_j W_s + b_1 is computed by each node's owner and gathered (H columns cross the
// network, one exchange per step); x_i W_d is local. Without an edge output no per-edge
// vector is ever stored: forward sums relu(z_e) per destination (s_i, H wide) and forms
// M_i = s_i W_2 + deg_i b_2 after the gather, because W_2 is linear. Backward re-fetches the
// halo (gather_scatter: rematerialisation under the sequential schedule) and recomputes z_e
// twice, once walking destination rows (gradients of x_i W_d and of W_e) and once walking
// source rows through the block's transpose (the gradient of each halo row, summed without
// atomics, so results do not depend on the thread count). With an edge output the per-edge
// m_e is needed anyway (it is the edge state); backward then keeps dz_e in the edge-input
// gradient's rows between the two walks instead of recomputing it.
//
// Edge data lives with the rank that owns the edge's destination (graph_part::edge_features):
// one table row per in-edge, found from a block's edge through graph_block::edge_row, so edge
// data never crosses the network. The schedule provides the table through edge_features()
// (local_schedule, distributed_schedule; a sampled block's local_schedule holds the rows of its
// own edges, docs/sampling.md).
//
// Kept between forward and backward, per node: x_i W_d, x_j W_s + b_1 (all source rows), M_i,
// the node MLP's pre-activation and (without an edge output) s_i: 5 rows of H per node.
// edge_processor keeps each step's input rows and edge state (the state: E x H per step).
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include "sar/core/error.hpp"
#include "sar/core/memory.hpp"
#include "sar/core/types.hpp"
#include "sar/kernels/dense.hpp"
#include "sar/nn/detail/graph_conv.hpp"
#include "sar/nn/layer.hpp"
#include "sar/nn/layer_norm.hpp"
#include "sar/nn/parameters.hpp"
#include "sar/schedule/schedule.hpp"

namespace sar {

/// How a step combines the messages into a node: their sum (MeshGraphNets, PyG's NNConv) or
/// their mean (DGL's NNConv; keeps a node's input the same scale whatever its degree).
enum class message_aggregation { sum, mean };

namespace detail {

/// Rows of an edge table (the graph's edge features, E = float, or an edge state, E = T),
/// one per edge of a rank, found from a block's edges through graph_block::edge_row.
template <class E>
struct edge_table_view {
  const E* data = nullptr;  ///< row-major, `cols` values per row
  Eigen::Index cols = 0;    ///< the edge input's width
  /// The values of table row r.
  const E* row(edge_t r) const { return data + r * cols; }
};

/// The schedule's edge features (a schedule without edge_features() has none), checked to be
/// `width` wide. Throws sar::invalid_argument naming `where` when the schedule has no edge
/// table of that width (every rank of a distributed run has the same width, so every rank
/// throws).
template <class Schedule>
const matrixf& edge_features_of(const Schedule& graph, Eigen::Index width, const char* where) {
  static const matrixf none;
  const matrixf* table_ptr = &none;
  if constexpr (requires { { graph.edge_features() } -> std::convertible_to<const matrixf&>; })
    table_ptr = &graph.edge_features();
  const matrixf& table = *table_ptr;
  SAR_CHECK(table.cols() == width, invalid_argument, where, ": the graph's edge features are ", table.rows(), " x ",
            table.cols(), ", the layer reads ", width, " columns");
  return table;
}

/// Rows of a chunk of the per-chunk gradient partials over `rows` rows: at most 64 chunks,
/// the cut fixed by the row count so sums do not depend on the thread count.
inline Eigen::Index edge_chunk_rows(Eigen::Index rows) {
  return std::max<Eigen::Index>(64, (rows + 63) / 64);
}

/// One message-passing step (see the top of this file): its parameters and what forward keeps
/// for backward. Used by edge_conv (one step reading the graph's edge features) and
/// edge_processor (steps carrying an edge state).
template <class T>
class edge_step {
 public:
  /// node_dim F, edge input width W, hidden width H; parameters are named name + ".<part>";
  /// with_layer_norm: the messages and the node update are normalised (then every forward
  /// needs an edge output).
  edge_step(Eigen::Index node_dim, Eigen::Index edge_dim, Eigen::Index hidden, std::string name,
            message_aggregation aggregation, bool with_layer_norm = false)
      : f_(node_dim), w_(edge_dim), h_(hidden), name_(std::move(name)),
        mean_(aggregation == message_aggregation::mean), norm_(with_layer_norm) {}

  /// Declares, in order: destination_weight (F x H), source_weight (F x H), edge_weight
  /// (W x H), message_bias (1 x H), message_weight (H x H), message_out_bias (1 x H),
  /// node_weight ((F + H) x H: V_x on top of V_m), node_bias (1 x H), update_weight (H x F),
  /// update_bias (1 x F); with layer norm then message_norm.gain, .bias (1 x H, ones and
  /// zeros) and node_norm.gain, .bias (1 x F). Weights Glorot in group 0, biases and the norms
  /// in group 1.
  void declare(parameter_store<T>& store) {
    store_ = &store;
    auto weight = [&](const char* part, Eigen::Index rows, Eigen::Index cols) {
      return store.declare({name_ + "." + part, rows, cols, init_kind::glorot_uniform, 0});
    };
    auto bias = [&](const char* part, Eigen::Index cols) {
      return store.declare({name_ + "." + part, 1, cols, init_kind::zeros, 1});
    };
    w_d_ = weight("destination_weight", f_, h_);
    w_s_ = weight("source_weight", f_, h_);
    w_e_ = weight("edge_weight", w_, h_);
    b_1_ = bias("message_bias", h_);
    w_2_ = weight("message_weight", h_, h_);
    b_2_ = bias("message_out_bias", h_);
    v_1_ = weight("node_weight", f_ + h_, h_);
    c_1_ = bias("node_bias", h_);
    v_2_ = weight("update_weight", h_, f_);
    c_2_ = bias("update_bias", f_);
    if (!norm_) return;
    message_gain_ = store.declare({name_ + ".message_norm.gain", 1, h_, init_kind::ones, 1});
    message_shift_ = bias("message_norm.bias", h_);
    node_gain_ = store.declare({name_ + ".node_norm.gain", 1, f_, init_kind::ones, 1});
    node_shift_ = bias("node_norm.bias", f_);
  }

  /// y := the step's output (n x F, resized); with edge_out (resized to the edge table's rows
  /// x H): e' = e + m for every edge. Requires x: graph.num_sources() x F, edge input W wide
  /// (W == H with edge_out), `table_rows` rows in the edge table. Collective (one gather).
  template <class Schedule, class E>
  void forward(Schedule& graph, const exchange_key& key, const_rows_ref<T> x,
               edge_table_view<E> edges_in, Eigen::Index table_rows, matrix<T>& y,
               matrix<T>* edge_out) {
    const char* where = "sar::edge_conv::forward";
    check_declared(where, store_);
    const Eigen::Index n = graph.num_destinations(), m = graph.num_sources();
    check_shape(where, "x", x.rows(), x.cols(), m, f_);
    SAR_CHECK(edges_in.cols == w_ && (edge_out == nullptr || w_ == h_), invalid_argument, where,
              ": edge input of ", edges_in.cols, " columns for a step reading ", w_,
              edge_out != nullptr ? " and carrying an edge state" : "");
    SAR_CHECK(!norm_ || edge_out != nullptr, invalid_argument, where,
              ": a step with layer norm forms every edge's message: it needs an edge output");
    const auto self = x.topRows(n);
    product<T>(self, store_->value(w_d_), destination_);
    product<T>(x, store_->value(w_s_), source_, store_->value(b_1_).data());
    carries_edges_ = edge_out != nullptr;
    matrix<T>& sum = carries_edges_ ? messages_ : summed_;  // M_i directly, or s_i
    resize_zero(sum, n, h_);
    if (carries_edges_) resize_zero(*edge_out, table_rows, h_);
    const auto w_e = store_->value(w_e_);
    const auto w_2 = store_->value(w_2_);
    const auto b_2 = store_->value(b_2_);
    const T* message_gain = store_->value(message_gain_).data();
    const T* message_shift = store_->value(message_shift_).data();
    graph.gather(key, source_, [&](const graph_block& block, const auto& halo) {
      const csr& edges = *block.edges;
      tbb::parallel_for(tbb::blocked_range<node_t>(0, edges.num_rows), [&](const auto& range) {
        row_vector<T> z(h_), message(h_);
        for (node_t k = range.begin(); k != range.end(); ++k) {
          const node_t i = block.local_row(k);
          for (edge_t e = edges.offsets[k]; e < edges.offsets[k + 1]; ++e) {
            const edge_t r = block.edge_row(e);
            pre_activation(z, i, halo.row(edges.columns[e]), edges_in.row(r), w_e);
            z = z.cwiseMax(T(0));
            if (!carries_edges_) {
              sum.row(i) += z;
              continue;
            }
            message.noalias() = z * w_2;
            message += b_2;
            if (norm_)
              layer_norm_row(message.data(), h_, message_gain, message_shift, message.data());
            sum.row(i) += message;
            for (Eigen::Index c = 0; c < h_; ++c)
              (*edge_out)(r, c) = static_cast<T>(edges_in.row(r)[c]) + message[c];
          }
        }
      });
    });
    const auto degrees = graph.in_degrees();
    if (!carries_edges_) {  // M = s W_2 + deg b_2
      product<T>(summed_, w_2, messages_);
      for (Eigen::Index i = 0; i < n; ++i)
        messages_.row(i) += static_cast<T>(degrees[static_cast<std::size_t>(i)]) * b_2;
    }
    if (mean_) scale_rows<T>(messages_, inverse_degrees<T>(degrees));
    const auto v_1 = store_->value(v_1_);
    huge_page_resize(node_pre_, n, h_);
    dense_product_sum<T>(self, v_1.topRows(f_), messages_, v_1.bottomRows(h_), node_pre_,
                         store_->value(c_1_).data());
    const matrix<T> hidden = node_pre_.cwiseMax(T(0));
    if (!norm_) {
      product<T>(hidden, store_->value(v_2_), y, store_->value(c_2_).data());
      y += self;
      return;
    }
    product<T>(hidden, store_->value(v_2_), node_update_, store_->value(c_2_).data());
    huge_page_resize(y, n, f_);
    const T* gain = store_->value(node_gain_).data();
    const T* shift = store_->value(node_shift_).data();
    for_row_chunks(n, 8.0 * static_cast<double>(f_), [&](Eigen::Index b, Eigen::Index e) {
      for (Eigen::Index i = b; i < e; ++i) {
        layer_norm_row(&node_update_(i, 0), f_, gain, shift, &y(i, 0));
        y.row(i) += self.row(i);
      }
    });
  }

  /// Given dy (n x F) and, with an edge output, its gradient edge_out_grad (table rows x H):
  /// ADDS dLoss/dx into dx when want_dx (m x F), ASSIGNS the parameter gradients and, unless
  /// edge_in_grad is null, ASSIGNS dLoss/d(edge input) to it (resized to table rows x W).
  /// Requires the x and edge input of the matching forward. Collective (one gather_scatter).
  template <class Schedule, class E>
  void backward(Schedule& graph, const exchange_key& key, const_rows_ref<T> x,
                edge_table_view<E> edges_in, Eigen::Index table_rows, const_rows_ref<T> dy,
                const matrix<T>* edge_out_grad, matrix<T>& dx, bool want_dx,
                matrix<T>* edge_in_grad) {
    const char* where = "sar::edge_conv::backward";
    const Eigen::Index n = graph.num_destinations(), m = graph.num_sources();
    check_shape(where, "dy", dy.rows(), dy.cols(), n, f_);
    SAR_CHECK(carries_edges_ == (edge_out_grad != nullptr) &&
                  (!carries_edges_ || edge_in_grad != nullptr),
              invalid_argument, where,
              ": the gradient of an edge output ", carries_edges_ ? "is missing" : "was given",
              " (the forward ", carries_edges_ ? "carried" : "did not carry", " an edge state)");
    SAR_CHECK(edge_out_grad == nullptr ||
                  (edge_out_grad->rows() == table_rows && edge_out_grad->cols() == h_),
              invalid_argument, where, ": the edge output's gradient is ",
              edge_out_grad->rows(), " x ", edge_out_grad->cols(), ", expected ", table_rows,
              " x ", h_);
    const auto self = x.topRows(n);

    // The node MLP (and its output's normalisation).
    const matrix<T> d_update = norm_ ? node_update_gradient(dy) : matrix<T>();
    const_rows_ref<T> du = norm_ ? const_rows_ref<T>(d_update) : dy;
    const matrix<T> hidden = node_pre_.cwiseMax(T(0));
    assign_transposed_product<T>(hidden, du, store_->grad(v_2_));
    column_sums<T>(du, store_->grad(c_2_));
    matrix<T> d_pre;
    product_transposed<T>(du, store_->value(v_2_), d_pre);
    d_pre = d_pre.cwiseProduct((node_pre_.array() > T(0)).template cast<T>().matrix());
    {
      rows_ref<T> grad(store_->grad(v_1_));
      transposed_product<T>(self, messages_, d_pre, grad);
    }
    column_sums<T>(d_pre, store_->grad(c_1_));
    const auto v_1 = store_->value(v_1_);
    matrix<T> d_messages;  // of the messages' sum (also with mean: scaled here)
    product_transposed<T>(d_pre, v_1.bottomRows(h_), d_messages);
    if (mean_) scale_rows<T>(d_messages, inverse_degrees<T>(graph.in_degrees()));

    // The message MLP's output layer, without an edge output: M = s W_2 + deg b_2.
    const auto w_2 = store_->value(w_2_);
    matrix<T> d_summed;
    if (!carries_edges_) {
      assign_transposed_product<T>(summed_, d_messages, store_->grad(w_2_));
      const auto degrees = graph.in_degrees();
      row_vector<double> db_2 = row_vector<double>::Zero(h_);
      for (Eigen::Index i = 0; i < n; ++i)
        db_2 += static_cast<double>(degrees[static_cast<std::size_t>(i)]) *
                d_messages.row(i).template cast<double>();
      store_->grad(b_2_) = db_2.template cast<T>();
      product_transposed<T>(d_messages, w_2, d_summed);
    }

    // The edges: two walks per block (see the top of this file).
    matrix<T> d_destination, d_source;
    resize_zero(d_destination, n, h_);
    resize_zero(d_source, m, h_);
    if (edge_in_grad != nullptr) resize_zero(*edge_in_grad, table_rows, w_);
    matrix<double> dw_e = matrix<double>::Zero(w_, h_), dw_2 = matrix<double>::Zero(h_, h_);
    row_vector<double> db_2 = row_vector<double>::Zero(h_);
    row_vector<double> d_message_norm = row_vector<double>::Zero(norm_ ? 2 * h_ : 0);
    const auto w_e = store_->value(w_e_);
    const auto b_2 = store_->value(b_2_);
    const T* message_gain = store_->value(message_gain_).data();
    graph.gather_scatter(key, source_, d_source, [&](const graph_block& block,
                                                     const auto& halo, auto& dhalo) {
      const csr& edges = *block.edges;
      const Eigen::Index rows = edges.num_rows, chunk = edge_chunk_rows(rows);
      const Eigen::Index chunks = (rows + chunk - 1) / chunk;
      std::vector<matrix<T>> part_w_e(chunks, matrix<T>::Zero(w_, h_));
      std::vector<matrix<T>> part_w_2(carries_edges_ ? chunks : 0, matrix<T>::Zero(h_, h_));
      std::vector<row_vector<T>> part_b_2(carries_edges_ ? chunks : 0, row_vector<T>::Zero(h_));
      // With layer norm: the message norm's gain and bias gradients, per chunk.
      std::vector<row_vector<double>> part_norm(norm_ ? chunks : 0,
                                                row_vector<double>::Zero(2 * h_));
      // Walk 1, destination rows: dz_e; d(x_i W_d) += dz_e; dW_e (+ dW_2, db_2) partials.
      tbb::parallel_for(Eigen::Index{0}, chunks, [&](Eigen::Index c) {
        row_vector<T> z(h_), dz(h_), dm(h_), u(h_);
        for (node_t k = static_cast<node_t>(c * chunk);
             k < static_cast<node_t>(std::min(rows, (c + 1) * chunk)); ++k) {
          const node_t i = block.local_row(k);
          for (edge_t e = edges.offsets[k]; e < edges.offsets[k + 1]; ++e) {
            const edge_t r = block.edge_row(e);
            const E* in = edges_in.row(r);
            pre_activation(z, i, halo.row(edges.columns[e]), in, w_e);
            if (carries_edges_) {
              dm = d_messages.row(i) + edge_out_grad->row(r);
              const row_vector<T> h = z.cwiseMax(T(0));
              if (norm_) {  // dm := the gradient of MLP_e's output, before its normalisation
                u.noalias() = h * w_2;
                u += b_2;
                layer_norm_row_backward(u.data(), h_, message_gain, dm.data(), dm.data(),
                                        part_norm[c].data(), part_norm[c].data() + h_);
              }
              part_w_2[c].noalias() += h.transpose() * dm;
              part_b_2[c] += dm;
              dz.noalias() = dm * w_2.transpose();
              dz = dz.cwiseProduct((z.array() > T(0)).template cast<T>().matrix());
              edge_in_grad->row(r) = dz;  // kept for walk 2 (W == H with an edge output)
            } else {
              dz = d_summed.row(i).cwiseProduct((z.array() > T(0)).template cast<T>().matrix());
              if (edge_in_grad != nullptr) edge_in_grad->row(r).noalias() = dz * w_e.transpose();
            }
            d_destination.row(i) += dz;
            for (Eigen::Index d = 0; d < w_; ++d)
              part_w_e[c].row(d) += static_cast<T>(in[d]) * dz;
          }
        }
      });
      // Walk 2, source rows through the transpose: d(halo row) += sum of its edges' dz_e.
      const csr& transposed = *block.transposed;
      tbb::parallel_for(tbb::blocked_range<node_t>(0, transposed.num_rows), [&](const auto& range) {
        row_vector<T> z(h_);
        for (node_t j = range.begin(); j != range.end(); ++j)
          for (edge_t t = transposed.offsets[j]; t < transposed.offsets[j + 1]; ++t) {
            const edge_t e = block.transposed_edges[t];
            const node_t i = transposed.columns[t];
            if (carries_edges_) {
              dhalo.row(j) += edge_in_grad->row(block.edge_row(e));
              continue;
            }
            pre_activation(z, i, halo.row(j), edges_in.row(block.edge_row(e)), w_e);
            dhalo.row(j) += d_summed.row(i).cwiseProduct(
                (z.array() > T(0)).template cast<T>().matrix());
          }
      });
      // With an edge output: the edge input's gradient, e' = e + m and z's e W_e.
      if (carries_edges_)
        tbb::parallel_for(edge_t{0}, edges.num_edges(), [&](edge_t e) {
          const edge_t r = block.edge_row(e);
          const row_vector<T> dz = edge_in_grad->row(r);
          edge_in_grad->row(r) = edge_out_grad->row(r) + dz * w_e.transpose();
        });
      for (Eigen::Index c = 0; c < chunks; ++c) {
        dw_e += part_w_e[c].template cast<double>();
        if (norm_) d_message_norm += part_norm[c];
        if (!carries_edges_) continue;
        dw_2 += part_w_2[c].template cast<double>();
        db_2 += part_b_2[c].template cast<double>();
      }
    });
    store_->grad(w_e_) = dw_e.cast<T>();
    if (carries_edges_) {
      store_->grad(w_2_) = dw_2.cast<T>();
      store_->grad(b_2_) = db_2.cast<T>();
    }
    if (norm_) {
      store_->grad(message_gain_) = d_message_norm.head(h_).template cast<T>();
      store_->grad(message_shift_) = d_message_norm.tail(h_).template cast<T>();
    }

    // The projections x_i W_d and x_j W_s + b_1.
    assign_transposed_product<T>(self, d_destination, store_->grad(w_d_));
    assign_transposed_product<T>(x, d_source, store_->grad(w_s_));
    column_sums<T>(d_source, store_->grad(b_1_));
    if (!want_dx) return;
    check_input_gradient(where, dx.rows(), dx.cols(), m, f_);
    dense_product_transposed_add<T>(d_source, store_->value(w_s_), dx);
    auto dx_self = dx.topRows(n);
    dx_self += dy;
    dense_product_transposed_add<T>(d_destination, store_->value(w_d_), dx_self);
    dense_product_transposed_add<T>(d_pre, v_1.topRows(f_), dx_self);
  }

 private:
  /// The gradient of the node MLP's output before its normalisation, given dy; ASSIGNS the
  /// node norm's gain and bias gradients.
  matrix<T> node_update_gradient(const_rows_ref<T> dy) {
    const Eigen::Index n = dy.rows();
    matrix<T> d_update(n, f_);
    const T* gain = store_->value(node_gain_).data();
    const std::vector<double> sums = reduce_rows(n, 2 * f_, [&](Eigen::Index i, double* acc) {
      layer_norm_row_backward(&node_update_(i, 0), f_, gain, dy.row(i).data(), &d_update(i, 0), acc,
                              acc + f_);
    });
    for (Eigen::Index j = 0; j < f_; ++j) {
      store_->grad(node_gain_)(0, j) = static_cast<T>(sums[static_cast<std::size_t>(j)]);
      store_->grad(node_shift_)(0, j) = static_cast<T>(sums[static_cast<std::size_t>(f_ + j)]);
    }
    return d_update;
  }

  /// z := x_i W_d + halo_row + in W_e (halo rows hold x_j W_s + b_1).
  template <class Halo, class E, class W>
  void pre_activation(row_vector<T>& z, node_t i, const Halo& halo_row, const E* in,
                      const W& w_e) const {
    z = destination_.row(i) + halo_row;
    for (Eigen::Index d = 0; d < w_; ++d) z += static_cast<T>(in[d]) * w_e.row(d);
  }

  Eigen::Index f_, w_, h_;
  std::string name_;
  parameter_store<T>* store_ = nullptr;
  std::size_t w_d_ = 0, w_s_ = 0, w_e_ = 0, b_1_ = 0, w_2_ = 0, b_2_ = 0, v_1_ = 0, c_1_ = 0,
              v_2_ = 0, c_2_ = 0;
  // With layer norm: the gain and bias of the messages' and of the node update's norm.
  std::size_t message_gain_ = 0, message_shift_ = 0, node_gain_ = 0, node_shift_ = 0;
  bool mean_ = false;
  bool norm_ = false;
  bool carries_edges_ = false;
  // Kept from forward: x_i W_d (n x H), x W_s + b_1 (m x H), s (n x H, without an edge
  // output), M (n x H), the node MLP's pre-activation (n x H) and, with layer norm, its
  // output before the norm (n x F).
  matrix<T> destination_, source_, summed_, messages_, node_pre_, node_update_;
};

}  // namespace detail

/// One edge-conditioned message-passing step reading the graph's edge features (see the top
/// of this file): y_i = x_i + MLP_v([x_i, sum_j MLP_e([x_i, x_j, e_ij])]). input_dim() ==
/// output_dim() == node_dim.
template <class T>
class edge_conv {
 public:
  /// Element type of the matrices and parameters.
  using scalar = T;

  /// node_dim F (input and output), edge_dim: the graph's edge-feature width, hidden H: the
  /// messages' and both MLPs' hidden width (0: F). Throws sar::invalid_argument unless
  /// F >= 1, edge_dim >= 0, hidden >= 0.
  edge_conv(Eigen::Index node_dim, Eigen::Index edge_dim, Eigen::Index hidden = 0,
            message_aggregation aggregation = message_aggregation::sum)
      : step_(node_dim, edge_dim, hidden == 0 ? node_dim : hidden, "edge_conv", aggregation),
        f_(node_dim), w_(edge_dim), h_(hidden == 0 ? node_dim : hidden) {
    SAR_CHECK(node_dim >= 1 && edge_dim >= 0 && hidden >= 0, invalid_argument,
              "sar::edge_conv: node width ", node_dim, ", edge width ", edge_dim, ", hidden ",
              hidden);
  }

  /// Input width F.
  Eigen::Index input_dim() const { return f_; }
  /// Output width F (the update is residual).
  Eigen::Index output_dim() const { return f_; }
  /// The edge features' width it reads.
  Eigen::Index edge_dim() const { return w_; }
  /// The messages' width H.
  Eigen::Index hidden_dim() const { return h_; }
  /// Backward reads x, never y.
  reads_in_backward backward_reads() const { return {.input = true, .output = false}; }

  /// Declares the step's parameters (detail::edge_step::declare, named "edge_conv.*").
  void declare(parameter_store<T>& store) { step_.declare(store); }

  /// y := the step's output. Requires x: graph.num_sources() x F and a schedule whose edge
  /// features are edge_dim() wide. Throws sar::invalid_argument otherwise. Collective.
  template <class Schedule>
  void forward(Schedule& graph, const layer_context& ctx, const_rows_ref<T> x, matrix<T>& y) {
    const matrixf& table = detail::edge_features_of(graph, w_, "sar::edge_conv::forward");
    step_.forward(graph, ctx.exchange(), x, view(table), table.rows(), y, nullptr);
  }

  /// ADDS dLoss/dx into dx (unless empty), ASSIGNS the parameter gradients. Collective.
  template <class Schedule>
  void backward(Schedule& graph, const layer_context& ctx, const_rows_ref<T> x, const_rows_ref<T>,
                const_rows_ref<T> dy, matrix<T>& dx) {
    const char* where = "sar::edge_conv::backward";
    const matrixf& table = detail::edge_features_of(graph, w_, where);
    detail::check_input_gradient(where, dx.rows(), dx.cols(), graph.num_sources(), f_);
    step_.backward(graph, ctx.exchange(), x, view(table), table.rows(), dy, nullptr, dx,
                   dx.rows() == graph.num_sources() && dx.cols() == f_, nullptr);
  }

 private:
  static detail::edge_table_view<float> view(const matrixf& table) {
    return {table.data(), table.cols()};
  }

  detail::edge_step<T> step_;
  Eigen::Index f_, w_, h_;
};

/// Several edge-conditioned steps that carry an edge state (the MeshGraphNets processor, with
/// its edge encoder): e^0 = e W_enc + b_enc (the graph's edge features, H wide after), then
/// for k < steps: x^{k+1}, e^{k+1} = step_k(x^k, e^k) with e^{k+1} = e^k + m^k (see the top of
/// this file); y = x^steps. Steps share nothing. More than one step needs a full-graph
/// schedule (sources = destinations); one step also runs on a bipartite block. With layer norm
/// (MeshGraphNets): e^0 = LN(e W_enc + b_enc) and every step's messages and node update are
/// normalised (the last step's edge output is formed and dropped).
/// Kept for backward: every step's input x^k (k >= 1) and edge state e^k (E x H each).
template <class T>
class edge_processor {
 public:
  /// Element type of the matrices and parameters.
  using scalar = T;

  /// node_dim F, edge_dim: the graph's edge-feature width, hidden H (0: F), steps >= 1;
  /// every step aggregates its messages by `aggregation`; with_layer_norm: see the class
  /// comment. Throws sar::invalid_argument otherwise.
  edge_processor(Eigen::Index node_dim, Eigen::Index edge_dim, Eigen::Index hidden, int steps,
                 message_aggregation aggregation = message_aggregation::sum,
                 bool with_layer_norm = false)
      : f_(node_dim), w_(edge_dim), h_(hidden == 0 ? node_dim : hidden), norm_(with_layer_norm) {
    SAR_CHECK(node_dim >= 1 && edge_dim >= 0 && hidden >= 0 && steps >= 1, invalid_argument,
              "sar::edge_processor: node width ", node_dim, ", edge width ", edge_dim,
              ", hidden ", hidden, ", steps ", steps);
    for (int k = 0; k < steps; ++k)
      steps_.emplace_back(f_, h_, h_, "edge_processor.step" + std::to_string(k), aggregation,
                          norm_);
  }

  /// Input width F.
  Eigen::Index input_dim() const { return f_; }
  /// Output width F.
  Eigen::Index output_dim() const { return f_; }
  /// The edge features' width it reads.
  Eigen::Index edge_dim() const { return w_; }
  /// The edge state's and messages' width H.
  Eigen::Index hidden_dim() const { return h_; }
  /// Number of steps.
  int steps() const { return static_cast<int>(steps_.size()); }
  /// Backward reads x, never y.
  reads_in_backward backward_reads() const { return {.input = true, .output = false}; }

  /// Declares "edge_processor.edge_encoder.weight" (edge_dim x H, Glorot, group 0) and
  /// ".bias" (1 x H, zeros, group 1), with layer norm "edge_processor.edge_encoder_norm.gain"
  /// and ".bias" (1 x H, ones and zeros, group 1), then each step's parameters
  /// ("edge_processor.step<k>.*").
  void declare(parameter_store<T>& store) {
    store_ = &store;
    encoder_weight_ = store.declare({"edge_processor.edge_encoder.weight", w_, h_,
                                     init_kind::glorot_uniform, 0});
    encoder_bias_ =
        store.declare({"edge_processor.edge_encoder.bias", 1, h_, init_kind::zeros, 1});
    if (norm_) {
      encoder_gain_ = store.declare(
          {"edge_processor.edge_encoder_norm.gain", 1, h_, init_kind::ones, 1});
      encoder_shift_ = store.declare(
          {"edge_processor.edge_encoder_norm.bias", 1, h_, init_kind::zeros, 1});
    }
    for (auto& step : steps_) step.declare(store);
  }

  /// y := x^steps (see the class comment). Step k exchanges under ctx.exchange(k). Requires x:
  /// graph.num_sources() x F, edge features edge_dim() wide, a full-graph schedule when
  /// steps() > 1. Throws sar::invalid_argument otherwise. Collective.
  template <class Schedule>
  void forward(Schedule& graph, const layer_context& ctx, const_rows_ref<T> x, matrix<T>& y) {
    const char* where = "sar::edge_processor::forward";
    detail::check_declared(where, store_);
    check_graph(graph, where);
    const matrixf& table = detail::edge_features_of(graph, w_, where);
    const Eigen::Index rows = table.rows();
    states_.resize(steps_.size());
    inputs_.resize(steps_.size());
    encode(table, states_[0]);
    if (norm_) {
      const T* gain = store_->value(encoder_gain_).data();
      const T* shift = store_->value(encoder_shift_).data();
      for_row_chunks(rows, 8.0 * static_cast<double>(h_), [&](Eigen::Index b, Eigen::Index e) {
        for (Eigen::Index r = b; r < e; ++r)
          detail::layer_norm_row(&states_[0](r, 0), h_, gain, shift, &states_[0](r, 0));
      });
    }
    matrix<T> dropped;  // with layer norm, the last step's edge output
    for (std::size_t k = 0; k < steps_.size(); ++k) {
      const bool last = k + 1 == steps_.size();
      const_rows_ref<T> in = k == 0 ? x : const_rows_ref<T>(inputs_[k]);
      matrix<T>& out = last ? y : inputs_[k + 1];
      matrix<T>* edge_out = !last ? &states_[k + 1] : norm_ ? &dropped : nullptr;
      steps_[k].forward(graph, ctx.exchange(static_cast<std::uint32_t>(k)), in,
                        state_view(k), rows, out, edge_out);
    }
  }

  /// ADDS dLoss/dx into dx (unless empty), ASSIGNS the parameter gradients. Collective.
  template <class Schedule>
  void backward(Schedule& graph, const layer_context& ctx, const_rows_ref<T> x, const_rows_ref<T>,
                const_rows_ref<T> dy, matrix<T>& dx) {
    const char* where = "sar::edge_processor::backward";
    detail::check_declared(where, store_);
    const matrixf& table = detail::edge_features_of(graph, w_, where);
    const Eigen::Index rows = table.rows(), m = graph.num_sources();
    detail::check_input_gradient(where, dx.rows(), dx.cols(), m, f_);
    matrix<T> d_out = dy, d_in, d_state, d_state_next;
    if (norm_) d_state_next = matrix<T>::Zero(rows, h_);  // of the last step's dropped edges
    for (std::size_t k = steps_.size(); k-- > 0;) {
      const bool first = k == 0;
      const_rows_ref<T> in = first ? x : const_rows_ref<T>(inputs_[k]);
      if (!first) detail::resize_zero(d_in, m, f_);
      const bool want = !first || (dx.rows() == m && dx.cols() == f_);
      const bool edge_out = k + 1 < steps_.size() || norm_;
      steps_[k].backward(graph, ctx.exchange(static_cast<std::uint32_t>(k)), in, state_view(k),
                         rows, d_out, edge_out ? &d_state_next : nullptr, first ? dx : d_in,
                         want, &d_state);
      std::swap(d_state, d_state_next);
      if (!first) std::swap(d_out, d_in);
    }
    if (norm_) {  // d_state_next := the gradient of the encoder's output before its norm
      matrix<T> encoded;
      encode(table, encoded);
      const T* gain = store_->value(encoder_gain_).data();
      const std::vector<double> sums = reduce_rows(rows, 2 * h_, [&](Eigen::Index r, double* acc) {
        detail::layer_norm_row_backward(&encoded(r, 0), h_, gain, &d_state_next(r, 0),
                                        &d_state_next(r, 0), acc, acc + h_);
      });
      for (Eigen::Index j = 0; j < h_; ++j) {
        store_->grad(encoder_gain_)(0, j) = static_cast<T>(sums[static_cast<std::size_t>(j)]);
        store_->grad(encoder_shift_)(0, j) =
            static_cast<T>(sums[static_cast<std::size_t>(h_ + j)]);
      }
    }
    const matrix<T> features = table.template cast<T>();
    detail::assign_transposed_product<T>(features, d_state_next,
                                         store_->grad(encoder_weight_));
    column_sums<T>(d_state_next, store_->grad(encoder_bias_));
  }

 private:
  template <class Schedule>
  void check_graph(const Schedule& graph, const char* where) const {
    SAR_CHECK(steps_.size() == 1 || graph.num_sources() == graph.num_destinations(),
              invalid_argument, where, ": ", steps_.size(),
              " steps on a bipartite block (", graph.num_destinations(), " destinations of ",
              graph.num_sources(), " sources): a step's output must be the next one's input, "
              "so only one step runs on a sampled block");
  }
  detail::edge_table_view<T> state_view(std::size_t k) const {
    return {states_[k].data(), h_};
  }
  /// out := the edge features' encoding before its norm, table W_enc + b_enc.
  void encode(const matrixf& table, matrix<T>& out) const {
    const matrix<T> features = table.template cast<T>();
    detail::product<T>(features, store_->value(encoder_weight_), out,
                       store_->value(encoder_bias_).data());
  }

  Eigen::Index f_, w_, h_;
  bool norm_ = false;
  std::vector<detail::edge_step<T>> steps_;
  parameter_store<T>* store_ = nullptr;
  std::size_t encoder_weight_ = 0, encoder_bias_ = 0, encoder_gain_ = 0, encoder_shift_ = 0;
  std::vector<matrix<T>> states_;  // e^k, k < steps (the input of step k)
  std::vector<matrix<T>> inputs_;  // x^k for k >= 1 (inputs_[0] unused)
};

}  // namespace sar
