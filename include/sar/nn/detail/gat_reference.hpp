// The straightforward, unfused GAT: one process, plain loops, every per-edge logit,
// coefficient and dropout scale stored (three E x H arrays), softmax backward written out
// in full (no <dout, out> identity). Used by the tests to check gat_layer, and by
// bench-gat-memory as the "stores all logits" baseline. Not for training.
#pragma once

#include <cmath>
#include <limits>
#include <vector>

#include "sar/core/error.hpp"
#include "sar/core/types.hpp"
#include "sar/schedule/schedule.hpp"
#include "sar/kernels/gat.hpp"
#include "sar/nn/gat.hpp"
#include "sar/nn/layer.hpp"
#include "sar/nn/parameters.hpp"

namespace sar::detail {

/// Same parameters (same declaration order and shapes), options and maths as gat_layer<T>;
/// only runs on a local_schedule (it reads the whole CSR).
template <class T>
class gat_reference {
 public:
  using scalar = T;

  gat_reference(Eigen::Index input_dim, Eigen::Index head_dim, gat_options options = {})
      : input_dim_(input_dim), head_dim_(head_dim), options_(options) {
    check_gat_options("sar::detail::gat_reference", input_dim, head_dim, options);
  }

  Eigen::Index input_dim() const { return input_dim_; }
  Eigen::Index output_dim() const {
    return options_.merge == gat_merge::concat ? options_.heads * head_dim_ : head_dim_;
  }
  void declare(parameter_store<T>& store) {
    ids_.declare(store, input_dim_, head_dim_, output_dim(), options_);
    store_ = &store;
  }

  void forward(local_schedule& graph, const layer_context& ctx, const matrix<T>& x,
               matrix<T>& y) {
    const csr& g = graph.graph();
    const Eigen::Index H = options_.heads, F = head_dim_;
    const node_t n = g.num_rows;
    const edge_t m = g.num_edges();
    const T slope = static_cast<T>(options_.negative_slope);
    const auto W = store_->value(ids_.weight);
    const auto a_l = store_->value(ids_.attention_left);
    const auto a_r = store_->value(ids_.attention_right);
    SAR_CHECK(x.rows() == n && x.cols() == input_dim_, invalid_argument,
              "sar::detail::gat_reference::forward: bad x shape");

    z_ = x * W;
    el_.setZero(n, H);
    er_.setZero(n, H);
    for (node_t i = 0; i < n; ++i)
      for (Eigen::Index h = 0; h < H; ++h)
        for (Eigen::Index f = 0; f < F; ++f) {
          el_(i, h) += a_l(h, f) * z_(i, h * F + f);
          er_(i, h) += a_r(h, f) * z_(i, h * F + f);
        }

    const auto dropout = make_dropout(ctx);
    const matrix<T> ee = edge_terms(graph);  // E x H (zeros without edge features)
    raw_.assign(m * H, T(0));
    alpha_.assign(m * H, T(0));
    scale_.assign(m * H, T(1));
    out_.setZero(n, H * F);
    for (node_t i = 0; i < n; ++i) {
      for (edge_t k = g.offsets[i]; k < g.offsets[i + 1]; ++k) {
        const node_t j = g.columns[k];
        for (Eigen::Index h = 0; h < H; ++h) raw_[k * H + h] = el_(j, h) + er_(i, h) + ee(k, h);
        dropout.scales(graph.node_id(i), graph.node_id(j), H, &scale_[k * H]);
      }
      for (Eigen::Index h = 0; h < H; ++h) {
        T top = -std::numeric_limits<T>::infinity();
        for (edge_t k = g.offsets[i]; k < g.offsets[i + 1]; ++k)
          top = std::max(top, leaky_relu(raw_[k * H + h], slope));
        T total = 0;
        for (edge_t k = g.offsets[i]; k < g.offsets[i + 1]; ++k) {
          alpha_[k * H + h] = std::exp(leaky_relu(raw_[k * H + h], slope) - top);
          total += alpha_[k * H + h];
        }
        for (edge_t k = g.offsets[i]; k < g.offsets[i + 1]; ++k) {
          alpha_[k * H + h] /= total;
          const T beta = alpha_[k * H + h] * scale_[k * H + h];
          for (Eigen::Index f = 0; f < F; ++f)
            out_(i, h * F + f) += beta * z_(g.columns[k], h * F + f);
        }
      }
    }
    if (options_.merge == gat_merge::concat) {
      y = out_;
    } else {
      y.setZero(n, F);
      for (Eigen::Index h = 0; h < H; ++h) y += out_.middleCols(h * F, F) / static_cast<T>(H);
    }
    if (options_.bias) y.rowwise() += store_->value(ids_.bias).row(0);
  }

  void backward(local_schedule& graph, const layer_context&, const matrix<T>& x,
                const matrix<T>&, const matrix<T>& dy, matrix<T>& dx) {
    const csr& g = graph.graph();
    const Eigen::Index H = options_.heads, F = head_dim_;
    const node_t n = g.num_rows;
    const T slope = static_cast<T>(options_.negative_slope);
    const auto W = store_->value(ids_.weight);
    const auto a_l = store_->value(ids_.attention_left);
    const auto a_r = store_->value(ids_.attention_right);

    matrix<T> dout(n, H * F);
    for (Eigen::Index h = 0; h < H; ++h)
      dout.middleCols(h * F, F) =
          options_.merge == gat_merge::concat ? matrix<T>(dy.middleCols(h * F, F))
                                              : matrix<T>(dy / static_cast<T>(H));
    matrix<T> dz = matrix<T>::Zero(n, H * F), del = matrix<T>::Zero(n, H),
              der = matrix<T>::Zero(n, H);
    std::vector<T> dalpha;
    matrix<T> draws = matrix<T>::Zero(g.num_edges(), H);  // dLoss / d raw, per edge
    for (node_t i = 0; i < n; ++i) {
      const edge_t first = g.offsets[i], last = g.offsets[i + 1];
      for (Eigen::Index h = 0; h < H; ++h) {
        // out_i = sum_k alpha_k s_k z_k: d alpha_k = s_k <dout_i, z_k>, dz_k += alpha_k s_k dout_i.
        dalpha.assign(last - first, T(0));
        for (edge_t k = first; k < last; ++k) {
          const node_t j = g.columns[k];
          const T s = scale_[k * H + h];
          for (Eigen::Index f = 0; f < F; ++f) {
            dalpha[k - first] += s * dout(i, h * F + f) * z_(j, h * F + f);
            dz(j, h * F + f) += alpha_[k * H + h] * s * dout(i, h * F + f);
          }
        }
        // Softmax backward in full: de_k = alpha_k (d alpha_k - sum_l alpha_l d alpha_l).
        T weighted = 0;
        for (edge_t k = first; k < last; ++k) weighted += alpha_[k * H + h] * dalpha[k - first];
        for (edge_t k = first; k < last; ++k) {
          const T de = alpha_[k * H + h] * (dalpha[k - first] - weighted);
          const T draw = de * leaky_relu_derivative(raw_[k * H + h], slope);
          del(g.columns[k], h) += draw;
          der(i, h) += draw;
          draws(k, h) = draw;
        }
      }
    }
    auto da_l = store_->grad(ids_.attention_left);
    auto da_r = store_->grad(ids_.attention_right);
    da_l.setZero();
    da_r.setZero();
    for (node_t i = 0; i < n; ++i)
      for (Eigen::Index h = 0; h < H; ++h)
        for (Eigen::Index f = 0; f < F; ++f) {
          da_l(h, f) += del(i, h) * z_(i, h * F + f);
          da_r(h, f) += der(i, h) * z_(i, h * F + f);
          dz(i, h * F + f) += del(i, h) * a_l(h, f) + der(i, h) * a_r(h, f);
        }
    if (options_.edge_dim > 0)
      store_->grad(ids_.attention_edge) = graph.edge_features().cast<T>().transpose() * draws;
    store_->grad(ids_.weight) = x.transpose() * dz;
    if (dx.size() != 0) dx += dz * W.transpose();
    if (options_.bias) store_->grad(ids_.bias) = dy.colwise().sum();
  }

  /// Bytes kept between forward and backward: the three E x H arrays plus z, el, er, out.
  std::size_t saved_bytes() const {
    return sizeof(T) * (raw_.size() + alpha_.size() + scale_.size() +
                        static_cast<std::size_t>(z_.size() + el_.size() + er_.size() + out_.size()));
  }

 private:
  /// ee(k, h) = <f_k, V(:, h)> for every edge k (zeros without edge features).
  matrix<T> edge_terms(const local_schedule& graph) const {
    const edge_t m = graph.graph().num_edges();
    if (options_.edge_dim == 0) return matrix<T>::Zero(m, options_.heads);
    SAR_CHECK(graph.edge_features().rows() == m && graph.edge_features().cols() ==
                  options_.edge_dim, invalid_argument,
              "sar::detail::gat_reference: edge features do not match edge_dim");
    return graph.edge_features().cast<T>() * store_->value(ids_.attention_edge);
  }
  gat_attention_dropout<T> make_dropout(const layer_context& ctx) const {
    if (!ctx.training || options_.attention_dropout == 0) return {};
    return {options_.attention_dropout, ctx.seed, ctx.epoch, ctx.layer};
  }

  Eigen::Index input_dim_, head_dim_;
  gat_options options_;
  parameter_store<T>* store_ = nullptr;
  gat_parameter_ids<T> ids_;
  matrix<T> z_, el_, er_, out_;
  std::vector<T> raw_, alpha_, scale_;  ///< E x H each, edge-major
};

}  // namespace sar::detail
