// Fully connected layer y = x W + b, applied to every node independently (no aggregation).
// Keeps nothing between forward and backward.
#pragma once

#include <string>
#include <utility>

#include "sar/core/error.hpp"
#include "sar/core/memory.hpp"
#include "sar/core/types.hpp"
#include "sar/kernels/dense.hpp"
#include "sar/kernels/sparse_dense.hpp"
#include "sar/nn/layer.hpp"
#include "sar/nn/parameters.hpp"

namespace sar {

/// Settings of a linear layer.
struct linear_options {
  /// Learn a bias b (1 x output_dim, zeros).
  bool bias = true;
  int weight_group = 0;  ///< optimiser group of W (weight decay is set per group)
  int bias_group = 0;    ///< optimiser group of b
  /// How W is initialised (b starts at zero).
  init_kind init = init_kind::glorot_uniform;
  std::string name = "linear";  ///< parameters are named name + ".weight" / ".bias"
};

/// Fully connected layer y = x W + b on each node's row (see the top of this file).
template <class T>
class linear {
 public:
  /// Element type of the matrices and parameters.
  using scalar = T;
  /// Row i of y depends on row i of x alone (sar/nn/layer.hpp).
  static constexpr bool reads_neighbours = false;

  /// Requires input_dim, output_dim >= 0; throws sar::invalid_argument otherwise.
  linear(Eigen::Index input_dim, Eigen::Index output_dim, linear_options options = {})
      : in_(input_dim), out_(output_dim), options_(std::move(options)) {
    SAR_CHECK(in_ >= 0 && out_ >= 0, invalid_argument, "sar::linear: dimensions ", in_, " -> ",
              out_);
  }

  /// Input width (features per node).
  Eigen::Index input_dim() const { return in_; }
  /// Output width.
  Eigen::Index output_dim() const { return out_; }
  /// Whether it has a bias b.
  bool has_bias() const { return options_.bias; }
  /// Backward reads x, never y.
  reads_in_backward backward_reads() const { return {.input = true, .output = false}; }

  /// Declares W (input_dim x output_dim) and, with a bias, b (1 x output_dim, zeros).
  void declare(parameter_store<T>& store) {
    store_ = &store;
    weight_ = store.declare({options_.name + ".weight", in_, out_, options_.init,
                             options_.weight_group});
    if (options_.bias)
      bias_ = store.declare({options_.name + ".bias", 1, out_, init_kind::zeros,
                             options_.bias_group});
  }
  /// Index of W in the store (valid after declare()).
  std::size_t weight_index() const { return weight_; }
  /// Index of b in the store (valid after declare() with a bias).
  std::size_t bias_index() const { return bias_; }

  /// y := x W + b. Requires declare() and an allocated store, x.cols() == input_dim().
  template <class Schedule>
  void forward(Schedule&, const layer_context&, const_rows_ref<T> x, matrix<T>& y) {
    check_ready("sar::linear::forward", x);
    huge_page_resize(y, x.rows(), out_);
    dense_product<false, T>(x, store_->value(weight_), y,
                            options_.bias ? store_->value(bias_).data() : nullptr);
  }

  /// dW := x^T dy, db := column sums of dy, dx += dy W^T (skipped when dx is empty).
  template <class Schedule>
  void backward(Schedule&, const layer_context&, const_rows_ref<T> x, const_rows_ref<T>,
                const_rows_ref<T> dy, matrix<T>& dx) {
    assign_weight_gradients(x, dy);
    if (dx.size() == 0) return;
    SAR_CHECK(dx.rows() == x.rows() && dx.cols() == in_, invalid_argument,
              "sar::linear::backward: dx is ", dx.rows(), " x ", dx.cols(), ", expected ",
              x.rows(), " x ", in_);
    dense_product_transposed_add<T>(dy, store_->value(weight_), dx);
  }

  /// As forward, on sparse input features (sar/core/sparse_rows.hpp): x W as a sparse x dense
  /// product.
  template <class Schedule>
  void forward(Schedule&, const layer_context&, const sparse_rows<T>& x, matrix<T>& y) {
    check_ready("sar::linear::forward", x);
    huge_page_resize(y, x.rows(), out_);
    sparse_product<T>(x, store_->value(weight_), y,
                      options_.bias ? store_->value(bias_).data() : nullptr);
  }
  /// As backward, after the forward on sparse input features; dx must be empty (no input
  /// gradient of features).
  template <class Schedule>
  void backward(Schedule&, const layer_context&, const sparse_rows<T>& x, const_rows_ref<T>,
                const_rows_ref<T> dy, matrix<T>& dx) {
    detail::check_sparse_backward("sar::linear::backward", dx);
    assign_weight_gradients(x, dy);
  }

 private:
  /// dW := x^T dy, db := column sums of dy (x dense or sparse rows), after the checks.
  void assign_weight_gradients(const auto& x, const_rows_ref<T> dy) {
    check_ready("sar::linear::backward", x);
    SAR_CHECK(dy.rows() == x.rows() && dy.cols() == out_, invalid_argument,
              "sar::linear::backward: dy is ", dy.rows(), " x ", dy.cols(), ", expected ",
              x.rows(), " x ", out_);
    transposed_product<T>(x, dy, store_->grad(weight_));
    if (options_.bias) column_sums<T>(dy, store_->grad(bias_));
  }

  void check_ready(const char* where, const auto& x) const {
    SAR_CHECK(store_ != nullptr, invalid_argument, where, ": declare() was not called");
    SAR_CHECK(x.cols() == in_, invalid_argument, where, ": x has ", x.cols(),
              " columns, expected ", in_);
  }

  Eigen::Index in_, out_;
  linear_options options_;
  parameter_store<T>* store_ = nullptr;
  std::size_t weight_ = 0, bias_ = 0;
};

}  // namespace sar
