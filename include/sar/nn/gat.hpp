// Graph attention layer (GAT, Velickovic et al.), fused: the attention softmax is computed
// online block by block (docs/algorithms.md §4), so the layer runs unchanged under the local
// schedule and under the distributed SAR schedules, and never stores a per-edge matrix.
//
//   z_i = x_i W (H heads of F features), el_j(h) = <a_l(h), z_j(h)>, er_i(h) = <a_r(h), z_i(h)>
//   alpha_ij(h) = softmax_j LeakyReLU(el_j(h) + er_i(h) [+ ee_ij(h)]) over the in-neighbours
//   j of i, with edge_dim > 0: ee_ij(h) = <f_ij, V(:, h)> for the edge's feature row f_ij
//   (PyG's GATConv(edge_dim): its lin_edge and att_edge multiply into one V, edge_dim x H)
//   out_i(h) = sum_j alpha_ij(h) d_ij(h) z_j(h)      (d: attention dropout, 1 when off)
//   y_i = concat_h out_i(h) (+ b)   or   y_i = mean_h out_i(h) (+ b)
// A node without in-edges (isolated, and no self-loop) gets out_i = 0, i.e. y_i = b. Add
// self-loops to the graph (build_options::self_loops = add) for the usual GAT behaviour.
//
// Communication: forward gathers [z | el] once per block (H F + H columns); backward gathers
// it again (rematerialisation) and scatters its gradient to the owners (gather_scatter).
// With edge features backward also fills one row of H per edge (dLoss/d ee) for dV.
// Kept between forward and backward, all O(local nodes): [z | el] (n x (HF + H)), er, the
// softmax log-normaliser m + log s and slope_sum (n x H each), slope_acc (n x HF: with
// slope_sum it gives d er without a second pass over the edges, see gat_softmax_state) and,
// with merge = mean, the per-head output (n x HF; with concat it is recovered from y - b).
// See saved_bytes().
#pragma once

#include <cstdint>
#include <limits>
#include <utility>

#include "sar/core/error.hpp"
#include "sar/core/memory.hpp"
#include "sar/core/sparse_rows.hpp"
#include "sar/core/types.hpp"
#include "sar/schedule/schedule.hpp"
#include "sar/kernels/dense.hpp"
#include "sar/kernels/gat.hpp"
#include "sar/kernels/sparse_dense.hpp"
#include "sar/nn/layer.hpp"
#include "sar/nn/parameters.hpp"

namespace sar {

/// How the H heads are combined into the output.
enum class gat_merge {
  concat,  ///< output_dim = H * F (hidden layers)
  mean,    ///< output_dim = F (output layers)
};

/// Settings of a gat_layer.
struct gat_options {
  /// Number of attention heads H (in [1, 2^18]).
  Eigen::Index heads = 1;
  /// How the heads are combined (concat: output_dim = H F; mean: F).
  gat_merge merge = gat_merge::concat;
  double negative_slope = 0.2;     ///< LeakyReLU slope of the attention logits
  double attention_dropout = 0.0;  ///< rate on the normalised coefficients, training only
  /// Learn a bias b (1 x output_dim, zeros).
  bool bias = true;
  /// Edge features the attention logits read (0: none); the schedule's graph must then carry
  /// an edge table this wide (forward and backward throw sar::invalid_argument otherwise).
  Eigen::Index edge_dim = 0;
};

namespace detail {
/// Throws sar::invalid_argument naming `where` for sizes or rates out of range.
inline void check_gat_options(const char* where, Eigen::Index input_dim, Eigen::Index head_dim,
                              const gat_options& o) {
  SAR_CHECK(input_dim > 0 && head_dim > 0, invalid_argument, where, ": input_dim = ", input_dim,
            ", head_dim = ", head_dim, " (both must be positive)");
  SAR_CHECK(o.heads > 0 && o.heads <= (Eigen::Index{1} << 18), invalid_argument, where,
            ": heads = ", o.heads);
  SAR_CHECK(o.attention_dropout >= 0 && o.attention_dropout < 1, invalid_argument, where,
            ": attention_dropout = ", o.attention_dropout, " outside [0, 1)");
  SAR_CHECK(o.negative_slope >= 0, invalid_argument, where, ": negative_slope = ",
            o.negative_slope);
  SAR_CHECK(o.edge_dim >= 0 && o.edge_dim <= (Eigen::Index{1} << 24), invalid_argument, where,
            ": edge_dim = ", o.edge_dim);
}

/// Declares the GAT parameters in their fixed order: weight (F_in x HF, Glorot),
/// attention_left and attention_right (H x F, Glorot), attention_edge (edge_dim x H, Glorot)
/// if edge_dim > 0, bias (1 x output_dim, zeros) if any.
template <class T>
struct gat_parameter_ids {
  std::size_t weight = 0, attention_left = 0, attention_right = 0, attention_edge = 0, bias = 0;
  void declare(parameter_store<T>& store, Eigen::Index input_dim, Eigen::Index head_dim,
               Eigen::Index output_dim, const gat_options& o) {
    weight = store.declare({"gat.weight", input_dim, o.heads * head_dim, init_kind::glorot_uniform});
    attention_left =
        store.declare({"gat.attention_left", o.heads, head_dim, init_kind::glorot_uniform});
    attention_right =
        store.declare({"gat.attention_right", o.heads, head_dim, init_kind::glorot_uniform});
    if (o.edge_dim > 0)
      attention_edge =
          store.declare({"gat.attention_edge", o.edge_dim, o.heads, init_kind::glorot_uniform});
    if (o.bias) bias = store.declare({"gat.bias", 1, output_dim, init_kind::zeros});
  }
};
}  // namespace detail

/// Graph attention layer with H heads of head_dim features (see the top of this file).
template <class T>
class gat_layer {
 public:
  /// Element type of the matrices and parameters.
  using scalar = T;

  /// head_dim = F, features per head. Throws sar::invalid_argument for non-positive sizes, a
  /// dropout rate outside [0, 1) or a negative slope.
  gat_layer(Eigen::Index input_dim, Eigen::Index head_dim, gat_options options = {})
      : input_dim_(input_dim), dims_{options.heads, head_dim}, options_(options) {
    detail::check_gat_options("sar::gat_layer", input_dim, head_dim, options);
  }

  /// Input width F_in.
  Eigen::Index input_dim() const { return input_dim_; }
  /// Output width: H F with concat, F with mean.
  Eigen::Index output_dim() const {
    return options_.merge == gat_merge::concat ? dims_.width() : dims_.features;
  }
  /// Number of heads H.
  Eigen::Index heads() const { return dims_.heads; }
  /// Features per head F.
  Eigen::Index head_dim() const { return dims_.features; }
  /// The options it was built with.
  const gat_options& options() const { return options_; }

  /// Registers weight, attention_left, attention_right, (with edge_dim) attention_edge and
  /// (optionally) bias. Once per store.
  void declare(parameter_store<T>& store) {
    ids_.declare(store, input_dim_, dims_.features, output_dim(), options_);
    store_ = &store;
  }

  /// y := GAT(x). Requires declare() on an allocated store, x of graph.num_sources() rows (the
  /// first num_destinations() of them the destinations' own) and input_dim() columns (throws
  /// sar::invalid_argument otherwise). Resizes y to graph.num_destinations() x output_dim().
  /// Collective: one graph.gather of [z | el].
  template <class Schedule>
  void forward(Schedule& graph, const layer_context& ctx, const_rows_ref<T> x, matrix<T>& y) {
    forward_rows(graph, ctx, x, y);
  }
  /// As forward, on sparse input features (sar/core/sparse_rows.hpp): z = x W as a sparse x
  /// dense product. Same requirements, throws and collective calls.
  template <class Schedule>
  void forward(Schedule& graph, const layer_context& ctx, const sparse_rows<T>& x, matrix<T>& y) {
    forward_rows(graph, ctx, x, y);
  }

  /// Given the x, y of the matching forward and dy: assigns every parameter gradient and adds
  /// dLoss/dx into dx (skipped when dx is empty).
  /// Requires the forward of the same x and ctx to be the last one run by this layer, y and
  /// dy of graph.num_destinations() x output_dim(), dx empty or x-shaped (throws
  /// sar::invalid_argument otherwise).
  /// Collective: one graph.gather_scatter of [z | el] and its gradient.
  template <class Schedule>
  void backward(Schedule& graph, const layer_context& ctx, const_rows_ref<T> x,
                const_rows_ref<T> y, const_rows_ref<T> dy, matrix<T>& dx) {
    backward_rows(graph, ctx, x, y, dy, dx);
  }
  /// As backward, after the forward on sparse input features; dx must be empty (no input
  /// gradient of features). Same throws and collective calls.
  template <class Schedule>
  void backward(Schedule& graph, const layer_context& ctx, const sparse_rows<T>& x,
                const_rows_ref<T> y, const_rows_ref<T> dy, matrix<T>& dx) {
    detail::check_sparse_backward("sar::gat_layer::backward", dx);
    backward_rows(graph, ctx, x, y, dy, dx);
  }

  /// Bytes this layer keeps between forward and backward (all O(local nodes)).
  std::size_t saved_bytes() const {
    return sizeof(T) * static_cast<std::size_t>(z_el_.size() + er_.size() +
                                                log_normaliser_.size() + slope_sum_.size() +
                                                slope_acc_.size() + out_.size());
  }

 private:
  /// forward on x dense or sparse rows.
  template <class Schedule, class X>
  void forward_rows(Schedule& graph, const layer_context& ctx, const X& x, matrix<T>& y) {
    check_input("sar::gat_layer::forward", graph, x);
    const Eigen::Index H = dims_.heads, F = dims_.features, HF = dims_.width();
    const node_t m = static_cast<node_t>(x.rows()), n = graph.num_destinations();
    const auto W = store_->value(ids_.weight);
    const auto a_l = store_->value(ids_.attention_left);
    const auto a_r = store_->value(ids_.attention_right);

    huge_page_resize(z_el_, m, dims_.halo_width());
    if constexpr (std::is_same_v<X, sparse_rows<T>>) sparse_product<T>(x, W, z_el_.leftCols(HF));
    else dense_product<false, T>(x, W, z_el_.leftCols(HF));
    er_.resize(n, H);
    // el (every source) and er (every destination) of every head in one row-parallel pass.
    for_row_chunks(m, 2.0 * static_cast<double>(HF), [&](Eigen::Index b, Eigen::Index e) {
      for (Eigen::Index i = b; i != e; ++i) {
        const auto z_i = z_el_.row(i);
        for (Eigen::Index h = 0; h < H; ++h) {
          z_el_(i, HF + h) = z_i.segment(h * F, F).cwiseProduct(a_l.row(h)).sum();
          if (i < n) er_(i, h) = z_i.segment(h * F, F).cwiseProduct(a_r.row(h)).sum();
        }
      }
    });

    const auto dropout = make_dropout(ctx);
    gat_softmax_state<T> state;  // in the buffers the last forward kept (none kept twice)
    state.max.swap(log_normaliser_);
    state.slope_sum.swap(slope_sum_);
    state.slope_acc.swap(slope_acc_);
    state.acc.swap(out_);
    state.reset(n, dims_);
    graph.gather(ctx.exchange(), z_el_, [&](const graph_block& block, const auto& halo) {
      gat_forward_block<T>(block, halo, er_, dims_, slope(), dropout, state, edge_term());
    });
    gat_softmax_finish<T>(dims_, state);
    log_normaliser_ = std::move(state.max);
    slope_sum_ = std::move(state.slope_sum);
    slope_acc_ = std::move(state.slope_acc);
    out_ = std::move(state.acc);

    const bool concat = options_.merge == gat_merge::concat;
    if (concat) {
      y = std::move(out_);  // backward recovers out from y - b, so it is not kept twice
      out_ = matrix<T>();
    } else {
      huge_page_resize(y, n, F);
    }
    // y = mean_h out(h) (merge = mean) and + b, in one row-parallel pass.
    for_row_chunks(n, static_cast<double>(HF), [&](Eigen::Index b, Eigen::Index e) {
      auto y_rows = y.middleRows(b, e - b);
      if (!concat) {
        const auto out_rows = out_.middleRows(b, e - b);
        y_rows = out_rows.leftCols(F);
        for (Eigen::Index h = 1; h < H; ++h) y_rows += out_rows.middleCols(h * F, F);
        y_rows /= static_cast<T>(H);
      }
      if (options_.bias) y_rows.rowwise() += store_->value(ids_.bias).row(0);
    });
    forward_rows_ = m;
  }

  /// backward on x dense or sparse rows.
  template <class Schedule, class X>
  void backward_rows(Schedule& graph, const layer_context& ctx, const X& x, const_rows_ref<T> y,
                     const_rows_ref<T> dy, matrix<T>& dx) {
    constexpr const char* where = "sar::gat_layer::backward";
    check_input(where, graph, x);
    SAR_CHECK(forward_rows_ == x.rows(), invalid_argument, where,
              ": no matching forward (forward saw ", forward_rows_, " rows, x has ", x.rows(), ")");
    const node_t m = static_cast<node_t>(x.rows()), n = graph.num_destinations();
    SAR_CHECK(y.rows() == n && y.cols() == output_dim() && dy.rows() == n &&
                  dy.cols() == output_dim(),
              invalid_argument, where, ": y is ", y.rows(), " x ", y.cols(), ", dy is ",
              dy.rows(), " x ", dy.cols(), ", expected ", n, " x ", output_dim());
    SAR_CHECK(dx.size() == 0 || (dx.rows() == x.rows() && dx.cols() == x.cols()),
              invalid_argument, where, ": dx is ", dx.rows(), " x ", dx.cols(),
              ", expected empty or ", x.rows(), " x ", x.cols());
    const Eigen::Index H = dims_.heads, F = dims_.features, HF = dims_.width();

    // dLoss/dout per head, and the per-node terms [er | log-normaliser | <dout(h), out(h)>]
    // (the last is the softmax term: no extra pass over the edges), in one row-parallel pass.
    const bool mean = options_.merge == gat_merge::mean;
    matrix<T> dout_mean;
    if (mean) huge_page_resize(dout_mean, n, HF);
    const_rows_ref<T> dout = mean ? const_rows_ref<T>(dout_mean) : dy;
    matrix<T> node_terms(n, 3 * H);
    const row_vector<T> bias = options_.bias ? row_vector<T>(store_->value(ids_.bias).row(0))
                                             : row_vector<T>::Zero(output_dim());
    for_row_chunks(n, 2.0 * static_cast<double>(HF), [&](Eigen::Index b, Eigen::Index e) {
      for (Eigen::Index i = b; i != e; ++i) {
        node_terms.row(i).head(H) = er_.row(i);
        node_terms.row(i).segment(H, H) = log_normaliser_.row(i);
        for (Eigen::Index h = 0; h < H; ++h) {
          T& dout_out = node_terms(i, 2 * H + h);
          if (mean) {
            auto dout_h = dout_mean.row(i).segment(h * F, F);
            dout_h = dy.row(i) / static_cast<T>(H);
            dout_out = dout_h.cwiseProduct(out_.row(i).segment(h * F, F)).sum();
          } else {  // concat: out = y - b
            const auto out_h = y.row(i).segment(h * F, F) - bias.segment(h * F, F);
            dout_out = dy.row(i).segment(h * F, F).cwiseProduct(out_h).sum();
          }
        }
      }
    });

    // Per block: dz_j and d el_j into d[z | el] (delivered to the owners); d er_i locally from
    // the forward's slope sums.
    matrix<T> dz_el(m, dims_.halo_width());
    set_zero<T>(dz_el);
    const gat_backward_rows<T> rows{node_terms, dout};
    const auto dropout = make_dropout(ctx);
    const matrixf* edge_table = nullptr;  // the blocks' (with edge_dim > 0)
    matrix<T> dedge;                      // dLoss/d ee, one row of H per edge-table row
    graph.gather_scatter(ctx.exchange(), z_el_, dz_el,
                         [&](const graph_block& block, const auto& halo, auto& dhalo) {
                           const auto term = edge_term();
                           term.check(where, block);
                           if (term.active() && edge_table == nullptr) {
                             edge_table = block.edge_features;
                             dedge = matrix<T>::Zero(edge_table->rows(), H);
                           }
                           gat_backward_block<T>(block, halo, dhalo, rows, dims_, slope(),
                                                 dropout, term, dedge.data());
                         });
    if (options_.edge_dim > 0) {  // dV = F^T dLoss/d ee over the rank's edges
      auto dv = store_->grad(ids_.attention_edge);
      if (edge_table == nullptr) dv.setZero();
      else transposed_product<T>(edge_table->cast<T>(), dedge, rows_ref<T>(dv));
    }
    matrix<T> der;
    gat_backward_er<T>(dims_, rows, slope_sum_, slope_acc_, der);

    // Local chain rule: el = z a_l, er = z a_r (per head), z = x W.
    const auto W = store_->value(ids_.weight);
    const auto a_l = store_->value(ids_.attention_left);
    const auto a_r = store_->value(ids_.attention_right);
    auto da_l = store_->grad(ids_.attention_left);
    auto da_r = store_->grad(ids_.attention_right);
    auto dz = dz_el.leftCols(HF);
    // d a_l(h) = sum_i d el_i(h) z_i(h), d a_r(h) = sum_i d er_i(h) z_i(h): a deterministic
    // reduction (fixed split, in double) over rows, one pass over z for all heads.
    const auto da = reduce_rows(m, 2 * HF, [&](Eigen::Index i, double* acc) {
      const T* z = z_el_.row(i).data();
      for (Eigen::Index h = 0; h < H; ++h) {
        const double del = dz_el(i, HF + h), der_h = i < n ? der(i, h) : 0.0;
        double* acc_l = acc + h * F;
        double* acc_r = acc + HF + h * F;
        for (Eigen::Index f = 0; f < F; ++f) {
          acc_l[f] += del * static_cast<double>(z[h * F + f]);
          acc_r[f] += der_h * static_cast<double>(z[h * F + f]);
        }
      }
    });
    for (Eigen::Index h = 0; h < H; ++h)
      for (Eigen::Index f = 0; f < F; ++f) {
        da_l(h, f) = static_cast<T>(da[static_cast<std::size_t>(h * F + f)]);
        da_r(h, f) = static_cast<T>(da[static_cast<std::size_t>(HF + h * F + f)]);
      }
    // dz(h) += d el(h) a_l(h) + d er(h) a_r(h), row-parallel, one pass over dz for all heads.
    for_row_chunks(m, 2.0 * static_cast<double>(HF), [&](Eigen::Index b, Eigen::Index e) {
      for (Eigen::Index i = b; i != e; ++i)
        for (Eigen::Index h = 0; h < H; ++h) {
          dz.row(i).segment(h * F, F) += dz_el(i, HF + h) * a_l.row(h);
          if (i < n) dz.row(i).segment(h * F, F) += der(i, h) * a_r.row(h);
        }
    });
    transposed_product<T>(x, dz, rows_ref<T>(store_->grad(ids_.weight)));
    if (dx.size() != 0) dense_product_transposed_add<T>(dz, W, dx);
    if (options_.bias) column_sums<T>(dy, rows_ref<T>(store_->grad(ids_.bias)));
  }

  template <class Schedule>
  void check_input(const char* where, const Schedule& graph, const auto& x) const {
    SAR_CHECK(store_ != nullptr, invalid_argument, where, ": declare() was not called");
    SAR_CHECK(x.rows() == static_cast<Eigen::Index>(graph.num_sources()) && x.cols() == input_dim_,
              invalid_argument, where, ": x is ", x.rows(), " x ", x.cols(), ", expected ",
              graph.num_sources(), " x ", input_dim_);
  }
  T slope() const { return static_cast<T>(options_.negative_slope); }
  /// The logits' edge term (inactive without edge features).
  gat_edge_term<T> edge_term() const {
    if (options_.edge_dim == 0) return {};
    return {store_->value(ids_.attention_edge).data(), options_.edge_dim};
  }
  gat_attention_dropout<T> make_dropout(const layer_context& ctx) const {
    if (!ctx.training || options_.attention_dropout == 0) return {};
    return {options_.attention_dropout, ctx.seed, ctx.epoch, ctx.layer};
  }

  Eigen::Index input_dim_;
  gat_dims dims_;
  gat_options options_;
  parameter_store<T>* store_ = nullptr;
  detail::gat_parameter_ids<T> ids_;
  // Saved by forward for backward.
  matrix<T> z_el_, er_, log_normaliser_, slope_sum_, slope_acc_, out_;  // out_: merge = mean
  Eigen::Index forward_rows_ = -1;
};

}  // namespace sar
