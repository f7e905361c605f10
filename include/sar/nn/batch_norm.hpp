// Batch normalisation per feature over ALL nodes of the graph (every rank's local rows):
//   training:   y = gamma * (x - mean) / sqrt(var + eps) + beta, mean and (biased) var over
//               the nodes of this pass; running statistics updated with momentum
//               (running = (1 - momentum) * running + momentum * batch, the running variance
//               unbiased, N / (N - 1));
//   evaluation: the same with the running mean and variance.
// Statistics are accumulated in double and merged across ranks through the schedule's ONE
// reduction hook, graph.all_reduce_sum(std::span<double>) (a no-op on one process): forward
// reduces (count, sum) and then the centred sum of squares (two passes: no cancellation);
// backward reduces (sum dy, sum dy * xhat). Both are collective: every rank calls them, also
// with zero local rows. Parameter gradients are the LOCAL sums (the trainer's gradient
// all-reduce adds the ranks); only the input gradient uses the global sums.
// Kept between forward and backward: the per-feature mean and 1/sqrt(var + eps) used by the
// last forward (2 x dim doubles). Backward reads x, never y, and assigns the input gradient,
// entry by entry after its sums: a model may run an activation in place over y and write dx
// over x (sar/nn/sequential.hpp).
#pragma once

#include <cmath>
#include <span>
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

/// Settings of a batch_norm layer.
struct batch_norm_options {
  double momentum = 0.1;  ///< weight of the new batch in the running statistics
  double epsilon = 1e-5;  ///< added to the variance
  bool affine = true;     ///< learn gamma (init 1) and beta (init 0)
  int group = 1;          ///< optimiser group of gamma and beta (no weight decay by default)
  /// Parameters are named name + ".gamma" and name + ".beta".
  std::string name = "batch_norm";
};

/// Batch normalisation per feature over the nodes of every rank (see the top of this file).
/// A layer (sar/nn/layer.hpp) whose training forward and backward are collective.
template <class T>
class batch_norm {
 public:
  /// Element type of the matrices and parameters.
  using scalar = T;
  /// Output row i depends on no other node's row (only on the batch statistics).
  static constexpr bool reads_neighbours = false;
  /// Backward assigns dLoss/dx (sar/nn/layer.hpp).
  static constexpr bool assigns_input_gradient = true;
  /// Backward reads each entry of x before it writes that entry of dx (sar/nn/layer.hpp).
  static constexpr bool gradient_over_input = true;

  /// Requires dim >= 0, 0 <= momentum <= 1, epsilon >= 0; throws sar::invalid_argument.
  explicit batch_norm(Eigen::Index dim, batch_norm_options options = {})
      : dim_(dim), options_(std::move(options)),
        running_mean_(static_cast<std::size_t>(std::max<Eigen::Index>(dim, 0)), 0.0),
        running_var_(running_mean_.size(), 1.0), mean_(running_mean_.size(), 0.0),
        inv_std_(running_mean_.size(), 1.0) {
    SAR_CHECK(dim >= 0, invalid_argument, "sar::batch_norm: width ", dim);
    SAR_CHECK(options_.momentum >= 0 && options_.momentum <= 1, invalid_argument,
              "sar::batch_norm: momentum ", options_.momentum, " outside [0, 1]");
    SAR_CHECK(options_.epsilon >= 0, invalid_argument, "sar::batch_norm: epsilon ",
              options_.epsilon);
  }

  /// Input width (features per node).
  Eigen::Index input_dim() const { return dim_; }
  /// Output width: the input width.
  Eigen::Index output_dim() const { return dim_; }
  /// Evaluation-mode statistics (state, not parameters: checkpoints hold them through state()).
  std::span<double> running_mean() { return running_mean_; }
  /// The running variance (unbiased).
  std::span<double> running_var() { return running_var_; }
  /// The running mean (const).
  std::span<const double> running_mean() const { return running_mean_; }
  /// The running variance (const).
  std::span<const double> running_var() const { return running_var_; }
  /// The layer's state besides its parameters (see sar/nn/layer.hpp): the running mean, then
  /// the running variance.
  std::vector<std::span<double>> state() { return {running_mean_, running_var_}; }

  /// With affine: gamma (1 x dim, ones) and beta (1 x dim, zeros).
  void declare(parameter_store<T>& store) {
    store_ = &store;
    if (!options_.affine) return;
    gamma_ = store.declare({options_.name + ".gamma", 1, dim_, init_kind::ones, options_.group});
    beta_ = store.declare({options_.name + ".beta", 1, dim_, init_kind::zeros, options_.group});
  }

  /// Backward reads x (through xhat), never y.
  reads_in_backward backward_reads() const { return {.input = true, .output = false}; }

  /// Collective in training mode. Throws sar::invalid_argument when x.cols() != dim or, in
  /// training mode, when the graph has no nodes at all.
  template <class Schedule>
  void forward(Schedule& graph, const layer_context& ctx, const_rows_ref<T> x, matrix<T>& y) {
    check(x, "forward");
    const Eigen::Index n = x.rows(), f = dim_;
    if (ctx.training) {
      // Pass 1: (count, sum) -> global mean.
      std::vector<double> sums = reduce_rows(n, f, [&](Eigen::Index i, double* acc) {
        for (Eigen::Index j = 0; j < f; ++j) acc[j] += static_cast<double>(x(i, j));
      });
      sums.push_back(static_cast<double>(n));
      graph.all_reduce_sum(std::span<double>(sums));
      const double count = sums.back();
      SAR_CHECK(count > 0, invalid_argument,
                "sar::batch_norm::forward: no nodes to take statistics over");
      for (Eigen::Index j = 0; j < f; ++j) mean_[j] = sums[j] / count;
      // Pass 2: centred sum of squares -> global biased variance.
      std::vector<double> m2 = reduce_rows(n, f, [&](Eigen::Index i, double* acc) {
        for (Eigen::Index j = 0; j < f; ++j) {
          const double d = static_cast<double>(x(i, j)) - mean_[j];
          acc[j] += d * d;
        }
      });
      graph.all_reduce_sum(std::span<double>(m2));
      const double m = options_.momentum;
      for (Eigen::Index j = 0; j < f; ++j) {
        const double var = m2[j] / count;
        inv_std_[j] = 1.0 / std::sqrt(var + options_.epsilon);
        const double unbiased = count > 1 ? m2[j] / (count - 1) : var;
        running_mean_[j] = (1 - m) * running_mean_[j] + m * mean_[j];
        running_var_[j] = (1 - m) * running_var_[j] + m * unbiased;
      }
    } else {
      for (Eigen::Index j = 0; j < f; ++j) {
        mean_[j] = running_mean_[j];
        inv_std_[j] = 1.0 / std::sqrt(running_var_[j] + options_.epsilon);
      }
    }
    // y = xhat * gamma + beta = x * scale + shift.
    std::vector<T> scale(f), shift(f);
    for (Eigen::Index j = 0; j < f; ++j) {
      const double g = options_.affine ? static_cast<double>(store_->value(gamma_)(0, j)) : 1.0;
      const double b = options_.affine ? static_cast<double>(store_->value(beta_)(0, j)) : 0.0;
      scale[j] = static_cast<T>(g * inv_std_[j]);
      shift[j] = static_cast<T>(b - g * inv_std_[j] * mean_[j]);
    }
    huge_page_resize(y, n, f);
    for_row_chunks(n, static_cast<double>(f), [&](Eigen::Index b, Eigen::Index e) {
      for (Eigen::Index i = b; i < e; ++i)
        for (Eigen::Index j = 0; j < f; ++j) y(i, j) = x(i, j) * scale[j] + shift[j];
    });
  }

  /// dgamma := sum(dy * xhat), dbeta := sum(dy) over local nodes; dx := the input gradient
  /// (training: through the batch statistics, collective; evaluation: dy * gamma * inv_std).
  /// Requires the x of the matching forward, same ctx; dx may be x's storage.
  template <class Schedule>
  void backward(Schedule& graph, const layer_context& ctx, const_rows_ref<T> x, const_rows_ref<T>,
                const_rows_ref<T> dy, matrix<T>& dx) {
    check(x, "backward");
    const Eigen::Index n = x.rows(), f = dim_;
    SAR_CHECK(dy.rows() == n && dy.cols() == f, invalid_argument,
              "sar::batch_norm::backward: dy is ", dy.rows(), " x ", dy.cols(), ", expected ", n,
              " x ", f);
    const auto xhat = [&](Eigen::Index i, Eigen::Index j) {
      return (static_cast<double>(x(i, j)) - mean_[j]) * inv_std_[j];
    };
    // Local (sum dy, sum dy * xhat), interleaved per feature.
    std::vector<double> sums = reduce_rows(n, 2 * f, [&](Eigen::Index i, double* acc) {
      for (Eigen::Index j = 0; j < f; ++j) {
        const double g = static_cast<double>(dy(i, j));
        acc[2 * j] += g;
        acc[2 * j + 1] += g * xhat(i, j);
      }
    });
    if (options_.affine) {
      auto dgamma = store_->grad(gamma_);
      auto dbeta = store_->grad(beta_);
      for (Eigen::Index j = 0; j < f; ++j) {
        dbeta(0, j) = static_cast<T>(sums[2 * j]);
        dgamma(0, j) = static_cast<T>(sums[2 * j + 1]);
      }
    }
    // Not wanted: empty, except the 0 x dim dx of a rank without nodes, which must still join
    // the collective reduction below.
    if (dx.size() == 0 && !(dx.rows() == n && dx.cols() == f)) return;
    SAR_CHECK(dx.rows() == n && dx.cols() == f, invalid_argument,
              "sar::batch_norm::backward: dx is ", dx.rows(), " x ", dx.cols(), ", expected ", n,
              " x ", f);
    std::vector<double> gain(f);  // gamma * inv_std
    for (Eigen::Index j = 0; j < f; ++j)
      gain[j] = (options_.affine ? static_cast<double>(store_->value(gamma_)(0, j)) : 1.0) *
                inv_std_[j];
    if (!ctx.training) {
      for_row_chunks(n, static_cast<double>(f), [&](Eigen::Index b, Eigen::Index e) {
        for (Eigen::Index i = b; i < e; ++i)
          for (Eigen::Index j = 0; j < f; ++j) dx(i, j) = static_cast<T>(dy(i, j) * gain[j]);
      });
      return;
    }
    sums.push_back(static_cast<double>(n));
    graph.all_reduce_sum(std::span<double>(sums));
    const double count = sums.back();
    for_row_chunks(n, static_cast<double>(f), [&](Eigen::Index b, Eigen::Index e) {
      for (Eigen::Index i = b; i < e; ++i)
        for (Eigen::Index j = 0; j < f; ++j) {
          const double g = static_cast<double>(dy(i, j));
          dx(i, j) = static_cast<T>(
              gain[j] * (g - (sums[2 * j] + xhat(i, j) * sums[2 * j + 1]) / count));
        }
    });
  }

 private:
  void check(const_rows_ref<T> x, const char* what) const {
    SAR_CHECK(store_ != nullptr, invalid_argument, "sar::batch_norm::", what,
              ": declare() was not called");
    SAR_CHECK(x.cols() == dim_, invalid_argument, "sar::batch_norm::", what, ": x has ",
              x.cols(), " columns, expected ", dim_);
  }

  Eigen::Index dim_;
  batch_norm_options options_;
  std::vector<double> running_mean_, running_var_;
  std::vector<double> mean_, inv_std_;  // what the last forward used
  parameter_store<T>* store_ = nullptr;
  std::size_t gamma_ = 0, beta_ = 0;
};

}  // namespace sar
