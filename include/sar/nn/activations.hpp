// Element-wise activations: relu, leaky_relu, elu. Width-preserving (input_dim == output_dim),
// no parameters, nothing kept between forward and backward (backward reads x and y).
#pragma once

#include <cmath>

#include "sar/core/error.hpp"
#include "sar/core/types.hpp"
#include "sar/kernels/dense.hpp"
#include "sar/nn/layer.hpp"
#include "sar/nn/parameters.hpp"

namespace sar {

/// An element-wise layer y = f(x), dx += dy * f'(x) (Op::value(x), Op::slope(x, y)).
template <class T, class Op>
class pointwise_layer {
 public:
  using scalar = T;

  /// Requires dim >= 0 (the width of x and y); throws sar::invalid_argument otherwise.
  explicit pointwise_layer(Eigen::Index dim, Op op = {}) : dim_(dim), op_(op) {
    SAR_CHECK(dim >= 0, invalid_argument, "sar::", Op::name, ": width ", dim);
  }
  Eigen::Index input_dim() const { return dim_; }
  Eigen::Index output_dim() const { return dim_; }
  void declare(parameter_store<T>&) {}
  const Op& op() const { return op_; }

  /// y := f(x). Requires x.cols() == input_dim().
  template <class Schedule>
  void forward(Schedule&, const layer_context&, const matrix<T>& x, matrix<T>& y) {
    check(x, "forward");
    y.resize(x.rows(), x.cols());
    const T* in = x.data();
    T* out = y.data();
    for_row_chunks(x.rows(), static_cast<double>(dim_), [&](Eigen::Index b, Eigen::Index e) {
      for (Eigen::Index k = b * dim_; k < e * dim_; ++k) out[k] = op_.value(in[k]);
    });
  }

  /// dx += dy * f'(x) (nothing when dx is empty). Requires y from forward(x), dy shaped like y.
  template <class Schedule>
  void backward(Schedule&, const layer_context&, const matrix<T>& x, const matrix<T>& y,
                const matrix<T>& dy, matrix<T>& dx) {
    check(x, "backward");
    if (dx.size() == 0) return;
    SAR_CHECK(y.rows() == x.rows() && y.cols() == x.cols() && dy.rows() == x.rows() &&
                  dy.cols() == x.cols() && dx.rows() == x.rows() && dx.cols() == x.cols(),
              invalid_argument, "sar::", Op::name, "::backward: x, y, dy, dx shapes differ");
    const T *in = x.data(), *out = y.data(), *grad = dy.data();
    T* dxp = dx.data();
    for_row_chunks(x.rows(), static_cast<double>(dim_), [&](Eigen::Index b, Eigen::Index e) {
      for (Eigen::Index k = b * dim_; k < e * dim_; ++k)
        dxp[k] += grad[k] * op_.slope(in[k], out[k]);
    });
  }

 private:
  void check(const matrix<T>& x, const char* what) const {
    SAR_CHECK(x.cols() == dim_, invalid_argument, "sar::", Op::name, "::", what, ": x has ",
              x.cols(), " columns, expected ", dim_);
  }
  Eigen::Index dim_;
  Op op_;
};

namespace detail {
struct relu_op {
  static constexpr const char* name = "relu";
  template <class T> T value(T x) const { return x > T(0) ? x : T(0); }
  template <class T> T slope(T x, T) const { return x > T(0) ? T(1) : T(0); }
};
struct leaky_relu_op {
  static constexpr const char* name = "leaky_relu";
  double negative_slope = 0.01;
  template <class T> T value(T x) const { return x > T(0) ? x : static_cast<T>(negative_slope) * x; }
  template <class T> T slope(T x, T) const {
    return x > T(0) ? T(1) : static_cast<T>(negative_slope);
  }
};
struct elu_op {
  static constexpr const char* name = "elu";
  double alpha = 1.0;
  template <class T> T value(T x) const {
    return x > T(0) ? x : static_cast<T>(alpha) * std::expm1(x);
  }
  template <class T> T slope(T x, T y) const {
    return x > T(0) ? T(1) : y + static_cast<T>(alpha);
  }
};
}  // namespace detail

/// y = max(x, 0); the gradient at 0 is 0.
template <class T>
class relu : public pointwise_layer<T, detail::relu_op> {
 public:
  explicit relu(Eigen::Index dim) : pointwise_layer<T, detail::relu_op>(dim) {}
};

/// y = x for x > 0, negative_slope * x otherwise.
template <class T>
class leaky_relu : public pointwise_layer<T, detail::leaky_relu_op> {
 public:
  explicit leaky_relu(Eigen::Index dim, double negative_slope = 0.01)
      : pointwise_layer<T, detail::leaky_relu_op>(dim, detail::leaky_relu_op{negative_slope}) {}
};

/// y = x for x > 0, alpha * (exp(x) - 1) otherwise.
template <class T>
class elu : public pointwise_layer<T, detail::elu_op> {
 public:
  explicit elu(Eigen::Index dim, double alpha = 1.0)
      : pointwise_layer<T, detail::elu_op>(dim, detail::elu_op{alpha}) {}
};

}  // namespace sar
