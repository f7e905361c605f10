// Layer normalisation per row (Ba et al., 2016), as PyTorch's nn.LayerNorm over the last
// dimension and Sonnet's LayerNorm in MeshGraphNets:
//   y_i = gain * (x_i - mean(x_i)) / sqrt(var(x_i) + eps) + bias   (var biased, over the row)
// A row's statistics are its own, so the layer needs no communication and gives the same rows
// on any rank count. Backward, per row with xhat = (x - mean) * inv and g = dy * gain:
//   dx = inv * (g - mean(g) - xhat * mean(g * xhat)),  dgain = sum_i dy_i * xhat_i,
//   dbias = sum_i dy_i.
// detail::layer_norm_row and layer_norm_row_backward do one row; edge_conv.hpp normalises each
// edge's message with them. Nothing is kept between forward and backward (backward recomputes
// a row's statistics from x).
#pragma once

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "sar/core/error.hpp"
#include "sar/core/memory.hpp"
#include "sar/core/types.hpp"
#include "sar/kernels/dense.hpp"
#include "sar/nn/layer.hpp"
#include "sar/nn/parameters.hpp"

namespace sar {

namespace detail {

/// The epsilon added to a row's variance (PyTorch's and Sonnet's default).
inline constexpr double layer_norm_epsilon = 1e-5;

/// The mean of row u (width w) and 1 / sqrt(its biased variance + eps), in double.
template <class T>
std::pair<double, double> row_statistics(const T* u, Eigen::Index w) {
  double mean = 0, var = 0;
  for (Eigen::Index c = 0; c < w; ++c) mean += static_cast<double>(u[c]);
  mean /= static_cast<double>(w);
  for (Eigen::Index c = 0; c < w; ++c) {
    const double d = static_cast<double>(u[c]) - mean;
    var += d * d;
  }
  return {mean, 1.0 / std::sqrt(var / static_cast<double>(w) + layer_norm_epsilon)};
}

/// out := gain * (u - mean(u)) / sqrt(var(u) + eps) + bias for one row u (gain, bias and out
/// w wide; out may be u). Statistics in double.
template <class T>
void layer_norm_row(const T* u, Eigen::Index w, const T* gain, const T* bias, T* out) {
  const auto [mean, inv] = row_statistics(u, w);
  for (Eigen::Index c = 0; c < w; ++c)
    out[c] = static_cast<T>((static_cast<double>(u[c]) - mean) * inv) * gain[c] + bias[c];
}

/// For one row u (width w) of a layer_norm_row with `gain` and its output's gradient dout:
/// du := the input gradient (du may be dout, not u), dgain[c] += dout[c] * xhat[c] and
/// dbias[c] += dout[c] (double accumulators).
template <class T>
void layer_norm_row_backward(const T* u, Eigen::Index w, const T* gain, const T* dout, T* du,
                             double* dgain, double* dbias) {
  const auto [mean, inv] = row_statistics(u, w);
  double mean_g = 0, mean_gx = 0;
  for (Eigen::Index c = 0; c < w; ++c) {
    const double xhat = (static_cast<double>(u[c]) - mean) * inv;
    const double g = static_cast<double>(dout[c]) * static_cast<double>(gain[c]);
    dgain[c] += static_cast<double>(dout[c]) * xhat;
    dbias[c] += static_cast<double>(dout[c]);
    mean_g += g;
    mean_gx += g * xhat;
  }
  mean_g /= static_cast<double>(w);
  mean_gx /= static_cast<double>(w);
  for (Eigen::Index c = 0; c < w; ++c) {
    const double xhat = (static_cast<double>(u[c]) - mean) * inv;
    const double g = static_cast<double>(dout[c]) * static_cast<double>(gain[c]);
    du[c] = static_cast<T>(inv * (g - mean_g - xhat * mean_gx));
  }
}

}  // namespace detail

/// Layer normalisation of each row (see the top of this file); gain (ones) and bias (zeros),
/// 1 x dim each, named name + ".gain" / ".bias", in optimiser group 1 (no weight decay).
template <class T>
class layer_norm {
 public:
  /// Element type of the matrices and parameters.
  using scalar = T;
  /// Output row i depends on input row i only.
  static constexpr bool reads_neighbours = false;
  /// Backward assigns dLoss/dx (sar/nn/layer.hpp).
  static constexpr bool assigns_input_gradient = true;
  /// Backward reads each row of x before it writes that row of dx (sar/nn/layer.hpp).
  static constexpr bool gradient_over_input = true;

  /// Width dim >= 1; throws sar::invalid_argument otherwise.
  explicit layer_norm(Eigen::Index dim, std::string name = "layer_norm")
      : dim_(dim), name_(std::move(name)) {
    SAR_CHECK(dim >= 1, invalid_argument, "sar::layer_norm: width ", dim);
  }

  /// Input width.
  Eigen::Index input_dim() const { return dim_; }
  /// Output width: the input width.
  Eigen::Index output_dim() const { return dim_; }
  /// Backward reads x, never y.
  reads_in_backward backward_reads() const { return {.input = true, .output = false}; }

  /// Declares gain (ones) and bias (zeros).
  void declare(parameter_store<T>& store) {
    store_ = &store;
    gain_ = store.declare({name_ + ".gain", 1, dim_, init_kind::ones, 1});
    bias_ = store.declare({name_ + ".bias", 1, dim_, init_kind::zeros, 1});
  }

  /// y := each row of x normalised. Throws sar::invalid_argument unless x is dim wide. Local.
  template <class Schedule>
  void forward(Schedule&, const layer_context&, const_rows_ref<T> x, matrix<T>& y) {
    check(x.cols(), "forward");
    huge_page_resize(y, x.rows(), dim_);
    const T* gain = store_->value(gain_).data();
    const T* bias = store_->value(bias_).data();
    for_row_chunks(x.rows(), 8.0 * static_cast<double>(dim_), [&](Eigen::Index b, Eigen::Index e) {
      for (Eigen::Index i = b; i < e; ++i)
        detail::layer_norm_row(x.row(i).data(), dim_, gain, bias, &y(i, 0));
    });
  }

  /// ASSIGNS dgain, dbias (sums over the rows, the same for every thread count) and, unless
  /// dx is empty, dx := the input gradient (dx may be x's storage). Throws
  /// sar::invalid_argument for shapes other than x's. Local.
  template <class Schedule>
  void backward(Schedule&, const layer_context&, const_rows_ref<T> x, const_rows_ref<T>,
                const_rows_ref<T> dy, matrix<T>& dx) {
    check(x.cols(), "backward");
    const Eigen::Index n = x.rows(), f = dim_;
    SAR_CHECK(dy.rows() == n && dy.cols() == f, invalid_argument,
              "sar::layer_norm::backward: dy is ", dy.rows(), " x ", dy.cols(), ", expected ", n,
              " x ", f);
    const bool want_dx = dx.rows() == n && dx.cols() == f;
    SAR_CHECK(want_dx || dx.size() == 0, invalid_argument, "sar::layer_norm::backward: dx is ",
              dx.rows(), " x ", dx.cols(), ", expected ", n, " x ", f, " or empty");
    const T* gain = store_->value(gain_).data();
    // One pass: row i's contributions to dgain and dbias, then its dx (row i of x is read
    // before row i of dx is written).
    const std::vector<double> sums = reduce_rows(n, 2 * f, [&](Eigen::Index i, double* acc) {
      row_vector<T> row(f);
      detail::layer_norm_row_backward(x.row(i).data(), f, gain, dy.row(i).data(), row.data(), acc, acc + f);
      if (want_dx) dx.row(i) = row;
    });
    auto dgain = store_->grad(gain_);
    auto dbias = store_->grad(bias_);
    for (Eigen::Index j = 0; j < f; ++j) {
      dgain(0, j) = static_cast<T>(sums[static_cast<std::size_t>(j)]);
      dbias(0, j) = static_cast<T>(sums[static_cast<std::size_t>(f + j)]);
    }
  }

 private:
  void check(Eigen::Index cols, const char* what) const {
    SAR_CHECK(store_ != nullptr, invalid_argument, "sar::layer_norm::", what,
              ": declare() was not called");
    SAR_CHECK(cols == dim_, invalid_argument, "sar::layer_norm::", what, ": x has ", cols,
              " columns, expected ", dim_);
  }

  Eigen::Index dim_;
  std::string name_;
  parameter_store<T>* store_ = nullptr;
  std::size_t gain_ = 0, bias_ = 0;
};

}  // namespace sar
