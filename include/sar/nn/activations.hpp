// Element-wise activations: relu, leaky_relu, elu. Width-preserving (input_dim == output_dim),
// no parameters, nothing kept between forward and backward; backward reads only y (each
// slope is a function of the output), and both passes can run in place.
#pragma once

#include <cmath>

#include "sar/core/error.hpp"
#include "sar/core/types.hpp"
#include "sar/kernels/dense.hpp"
#include "sar/nn/layer.hpp"
#include "sar/nn/parameters.hpp"

namespace sar {

/// An element-wise layer y = f(x), dx += dy * f'(x) (Op::value(x), Op::slope(y) = f'(x)).
template <class T, class Op>
class pointwise_layer {
 public:
  using scalar = T;
  static constexpr bool in_place = true;

  /// Requires dim >= 0 (the width of x and y); throws sar::invalid_argument otherwise.
  explicit pointwise_layer(Eigen::Index dim, Op op = {}) : dim_(dim), op_(op) {
    SAR_CHECK(dim >= 0, invalid_argument, "sar::", Op::name, ": width ", dim);
  }
  Eigen::Index input_dim() const { return dim_; }
  Eigen::Index output_dim() const { return dim_; }
  void declare(parameter_store<T>&) {}
  const Op& op() const { return op_; }
  reads_in_backward backward_reads() const { return {.input = false, .output = true}; }

  /// y := f(x). Requires x.cols() == input_dim(); x and y may be the same matrix.
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

  /// dx += dy * f'(x), or dx := dy * f'(x) when dx is dy (nothing when dx is empty).
  /// Requires y from the matching forward and dy shaped like y; x is not read.
  template <class Schedule>
  void backward(Schedule&, const layer_context&, const matrix<T>&, const matrix<T>& y,
                const matrix<T>& dy, matrix<T>& dx) {
    check(y, "backward");
    if (dx.size() == 0) return;
    SAR_CHECK(dy.rows() == y.rows() && dy.cols() == y.cols() && dx.rows() == y.rows() &&
                  dx.cols() == y.cols(),
              invalid_argument, "sar::", Op::name, "::backward: y, dy, dx shapes differ");
    const T *out = y.data(), *grad = dy.data();
    T* dxp = dx.data();
    const bool assign = &dx == &dy;
    for_row_chunks(y.rows(), static_cast<double>(dim_), [&](Eigen::Index b, Eigen::Index e) {
      if (assign) {
        for (Eigen::Index k = b * dim_; k < e * dim_; ++k) dxp[k] = grad[k] * op_.slope(out[k]);
      } else {
        for (Eigen::Index k = b * dim_; k < e * dim_; ++k) dxp[k] += grad[k] * op_.slope(out[k]);
      }
    });
  }

 private:
  void check(const matrix<T>& m, const char* what) const {
    SAR_CHECK(m.cols() == dim_, invalid_argument, "sar::", Op::name, "::", what, ": ",
              what[0] == 'f' ? "x" : "y", " has ", m.cols(), " columns, expected ", dim_);
  }
  Eigen::Index dim_;
  Op op_;
};

namespace detail {
struct relu_op {
  static constexpr const char* name = "relu";
  template <class T> T value(T x) const { return x > T(0) ? x : T(0); }
  template <class T> T slope(T y) const { return y > T(0) ? T(1) : T(0); }
};
struct leaky_relu_op {
  static constexpr const char* name = "leaky_relu";
  double negative_slope = 0.01;
  template <class T> T value(T x) const { return x > T(0) ? x : static_cast<T>(negative_slope) * x; }
  template <class T> T slope(T y) const {  // y > 0 exactly when x > 0 (negative_slope >= 0)
    return y > T(0) ? T(1) : static_cast<T>(negative_slope);
  }
};
struct elu_op {
  static constexpr const char* name = "elu";
  double alpha = 1.0;
  template <class T> T value(T x) const {
    return x > T(0) ? x : static_cast<T>(alpha) * std::expm1(x);
  }
  template <class T> T slope(T y) const {  // y > 0 exactly when x > 0; else f' = y + alpha
    return y > T(0) ? T(1) : y + static_cast<T>(alpha);
  }
};
}  // namespace detail

/// y = max(x, 0); the gradient at 0 is 0.
template <class T>
class relu : public pointwise_layer<T, detail::relu_op> {
 public:
  explicit relu(Eigen::Index dim) : pointwise_layer<T, detail::relu_op>(dim) {}
};

/// y = x for x > 0, negative_slope * x otherwise. Throws sar::invalid_argument for a
/// negative slope.
template <class T>
class leaky_relu : public pointwise_layer<T, detail::leaky_relu_op> {
 public:
  explicit leaky_relu(Eigen::Index dim, double negative_slope = 0.01)
      : pointwise_layer<T, detail::leaky_relu_op>(dim, detail::leaky_relu_op{negative_slope}) {
    SAR_CHECK(negative_slope >= 0, invalid_argument, "sar::leaky_relu: negative_slope ",
              negative_slope, " < 0");
  }
};

/// y = x for x > 0, alpha * (exp(x) - 1) otherwise. Throws sar::invalid_argument for
/// alpha <= 0.
template <class T>
class elu : public pointwise_layer<T, detail::elu_op> {
 public:
  explicit elu(Eigen::Index dim, double alpha = 1.0)
      : pointwise_layer<T, detail::elu_op>(dim, detail::elu_op{alpha}) {
    SAR_CHECK(alpha > 0, invalid_argument, "sar::elu: alpha ", alpha, " <= 0");
  }
};

}  // namespace sar
