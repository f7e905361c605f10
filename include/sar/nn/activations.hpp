// Element-wise activations: relu, leaky_relu, elu. Width-preserving (input_dim == output_dim),
// no parameters, nothing kept between forward and backward; backward reads only y (each
// slope is a function of the output), and both passes can run in place.
#pragma once

#include <cmath>

#include "sar/core/error.hpp"
#include "sar/core/memory.hpp"
#include "sar/core/types.hpp"
#include "sar/kernels/dense.hpp"
#include "sar/nn/layer.hpp"
#include "sar/nn/parameters.hpp"

namespace sar {

/// An element-wise layer y = f(x), dx += dy * f'(x) (Op::value(x), Op::slope(y) = f'(x)).
template <class T, class Op>
class pointwise_layer {
 public:
  /// Element type of the matrices.
  using scalar = T;
  /// forward and backward may run in place (sar/nn/layer.hpp).
  static constexpr bool in_place = true;
  /// Row i of y depends on row i of x alone (sar/nn/layer.hpp).
  static constexpr bool reads_neighbours = false;

  /// Requires dim >= 0 (the width of x and y); throws sar::invalid_argument otherwise.
  explicit pointwise_layer(Eigen::Index dim, Op op = {}) : dim_(dim), op_(op) {
    SAR_CHECK(dim >= 0, invalid_argument, "sar::", Op::name, ": width ", dim);
  }
  /// Input width (features per node).
  Eigen::Index input_dim() const { return dim_; }
  /// Output width: the input width.
  Eigen::Index output_dim() const { return dim_; }
  /// No parameters: declares nothing.
  void declare(parameter_store<T>&) {}
  /// The element-wise function (its value and slope).
  const Op& op() const { return op_; }
  /// Backward reads y, never x.
  reads_in_backward backward_reads() const { return {.input = false, .output = true}; }

  /// y := f(x). Requires x.cols() == input_dim(); x and y may be the same matrix.
  template <class Schedule>
  void forward(Schedule&, const layer_context&, const_rows_ref<T> x, matrix<T>& y) {
    check(x, "forward");
    huge_page_resize(y, x.rows(), x.cols());
    for_row_chunks(x.rows(), static_cast<double>(dim_), [&](Eigen::Index b, Eigen::Index e) {
      y.middleRows(b, e - b).array() = op_.value(x.middleRows(b, e - b).array());
    });
  }

  /// dx += dy * f'(x), or dx := dy * f'(x) when dx is dy (nothing when dx is empty).
  /// Requires y from the matching forward and dy shaped like y; x is not read.
  template <class Schedule>
  void backward(Schedule&, const layer_context&, const_rows_ref<T>, const_rows_ref<T> y,
                const_rows_ref<T> dy, matrix<T>& dx) {
    check(y, "backward");
    if (dx.size() == 0) return;
    SAR_CHECK(dy.rows() == y.rows() && dy.cols() == y.cols() && dx.rows() == y.rows() &&
                  dx.cols() == y.cols(),
              invalid_argument, "sar::", Op::name, "::backward: y, dy, dx shapes differ");
    const bool assign = dx.data() == dy.data();
    // Eigen array expressions: branch-free and vectorised (a data-dependent branch per
    // element mispredicts half the time on ReLU outputs).
    for_row_chunks(y.rows(), static_cast<double>(dim_), [&](Eigen::Index b, Eigen::Index e) {
      const auto term = dy.middleRows(b, e - b).array() * op_.slope(y.middleRows(b, e - b).array());
      if (assign) dx.middleRows(b, e - b).array() = term;
      else dx.middleRows(b, e - b).array() += term;
    });
  }

 private:
  void check(const_rows_ref<T> m, const char* what) const {
    SAR_CHECK(m.cols() == dim_, invalid_argument, "sar::", Op::name, "::", what, ": ",
              what[0] == 'f' ? "x" : "y", " has ", m.cols(), " columns, expected ", dim_);
  }
  Eigen::Index dim_;
  Op op_;
};

namespace detail {
// value(x) = f(x) and slope(y) = f'(x) as Eigen array expressions; the slope is a function of
// the output y (y > 0 exactly when x > 0 for these three).
struct relu_op {
  static constexpr const char* name = "relu";
  template <class A> auto value(const A& x) const { return x.cwiseMax(typename A::Scalar(0)); }
  template <class A> auto slope(const A& y) const {
    return (y > typename A::Scalar(0)).template cast<typename A::Scalar>();
  }
};
struct leaky_relu_op {
  static constexpr const char* name = "leaky_relu";
  double negative_slope = 0.01;
  template <class A> auto value(const A& x) const {
    using T = typename A::Scalar;
    return (x > T(0)).select(x, static_cast<T>(negative_slope) * x);
  }
  template <class A> auto slope(const A& y) const {
    using T = typename A::Scalar;
    return (y > T(0)).select(A::Constant(y.rows(), y.cols(), T(1)), static_cast<T>(negative_slope));
  }
};
struct elu_op {
  static constexpr const char* name = "elu";
  double alpha = 1.0;
  template <class A> auto value(const A& x) const {  // max(x, 0) + alpha expm1(min(x, 0))
    using T = typename A::Scalar;  // (not a select: Eigen 3.4 does not vectorise select)
    return x.cwiseMax(T(0)) + static_cast<T>(alpha) * x.cwiseMin(T(0)).expm1();
  }
  template <class A> auto slope(const A& y) const {  // f' = y + alpha where x <= 0
    using T = typename A::Scalar;
    return (y > T(0)).select(T(1), y + static_cast<T>(alpha));
  }
};
}  // namespace detail

/// y = max(x, 0); the gradient at 0 is 0.
template <class T>
class relu : public pointwise_layer<T, detail::relu_op> {
 public:
  /// Width `dim` (>= 0); throws sar::invalid_argument otherwise.
  explicit relu(Eigen::Index dim) : pointwise_layer<T, detail::relu_op>(dim) {}
};

/// y = x for x > 0, negative_slope * x otherwise. Throws sar::invalid_argument for a
/// negative slope.
template <class T>
class leaky_relu : public pointwise_layer<T, detail::leaky_relu_op> {
 public:
  /// Width `dim` (>= 0) and the slope for negative x (>= 0); throws sar::invalid_argument
  /// otherwise.
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
  /// Width `dim` (>= 0) and alpha (> 0); throws sar::invalid_argument otherwise.
  explicit elu(Eigen::Index dim, double alpha = 1.0)
      : pointwise_layer<T, detail::elu_op>(dim, detail::elu_op{alpha}) {
    SAR_CHECK(alpha > 0, invalid_argument, "sar::elu: alpha ", alpha, " <= 0");
  }
};

}  // namespace sar
