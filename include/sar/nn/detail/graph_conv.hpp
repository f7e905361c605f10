// Helpers shared by the graph convolutions (gcn.hpp, sage.hpp): degree scalings, dense
// products (through sar/kernels/dense.hpp), argument checks. Not part of the public interface.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <span>

#include "sar/core/error.hpp"
#include "sar/core/types.hpp"
#include "sar/dist/schedule.hpp"
#include "sar/kernels/dense.hpp"

namespace sar::detail {

/// 1 / sqrt(max(d, 1)) per node (an isolated node without a self-loop keeps a zero row
/// instead of producing inf * 0).
template <class T>
column_vector<T> inverse_sqrt_degrees(std::span<const node_t> degrees) {
  column_vector<T> s(static_cast<Eigen::Index>(degrees.size()));
  for (std::size_t i = 0; i < degrees.size(); ++i)
    s[static_cast<Eigen::Index>(i)] =
        T(1) / std::sqrt(static_cast<T>(std::max<node_t>(degrees[i], 1)));
  return s;
}

/// 1 / max(d + extra_i, 1) per node; extra may be empty (then 0).
template <class T>
column_vector<T> inverse_degrees(std::span<const node_t> degrees,
                                 const column_vector<T>& extra = {}) {
  column_vector<T> s(static_cast<Eigen::Index>(degrees.size()));
  for (std::size_t i = 0; i < degrees.size(); ++i) {
    const auto k = static_cast<Eigen::Index>(i);
    const T d = static_cast<T>(degrees[i]) + (extra.size() ? extra[k] : T(0));
    s[k] = T(1) / std::max(d, T(1));
  }
  return s;
}

/// out := a b (+ bias unless null: b.cols() values per row), out resized; parallel over rows
/// (sar/kernels/dense.hpp).
template <class T>
void product(const_rows_ref<T> a, const_rows_ref<T> b, matrix<T>& out, const T* bias = nullptr) {
  out.resize(a.rows(), b.cols());
  dense_product<false, T>(a, b, out, bias);
}

/// m resized to rows x cols and zeroed in parallel.
template <class T>
void resize_zero(matrix<T>& m, Eigen::Index rows, Eigen::Index cols) {
  m.resize(rows, cols);
  set_zero<T>(m);
}

/// out := a b^T (out resized), parallel over rows.
template <class T>
void product_transposed(const_rows_ref<T> a, const_rows_ref<T> b, matrix<T>& out) {
  out.resize(a.rows(), b.rows());
  dense_product_transposed<false, T>(a, b, out);
}

/// grad := a^T b into a parameter-gradient view (assigned), deterministic over threads.
template <class T, class View>
void assign_transposed_product(const_rows_ref<T> a, const_rows_ref<T> b, View&& grad) {
  rows_ref<T> out(grad);
  transposed_product<T>(a, b, out);
}

/// Checks x against (rows, cols); names the layer and the argument.
inline void check_shape(const char* where, const char* what, Eigen::Index rows, Eigen::Index cols,
                        Eigen::Index want_rows, Eigen::Index want_cols) {
  SAR_CHECK(rows == want_rows && cols == want_cols, invalid_argument, where, ": ", what, " is ",
            rows, " x ", cols, ", expected ", want_rows, " x ", want_cols);
}

/// dx must be empty or shaped like x.
inline void check_input_gradient(const char* where, Eigen::Index rows, Eigen::Index cols,
                                 Eigen::Index want_rows, Eigen::Index want_cols) {
  SAR_CHECK(rows * cols == 0 || (rows == want_rows && cols == want_cols), invalid_argument, where,
            ": dx is ", rows, " x ", cols, ", expected empty or ", want_rows, " x ", want_cols);
}

/// Checks the store pointer a layer keeps after declare().
template <class Store>
void check_declared(const char* where, const Store* store) {
  SAR_CHECK(store != nullptr, invalid_argument, where,
            ": the layer's parameters were never declared (call declare(store) and "
            "store.allocate() first)");
}

/// The checks every graph layer's backward starts with: declared, x (n x in; unless reads_x is
/// false) and dy (n x out) shaped, dx empty or n x in. Returns whether the input gradient is wanted: unless dx is
/// 0 x 0 (on a rank without nodes a 0 x in dx IS wanted, so every rank makes the same
/// collective calls). Throws sar::invalid_argument naming `where` otherwise.
template <class Store>
bool check_backward(const char* where, const Store* store, Eigen::Index n, Eigen::Index in,
                    Eigen::Index out, const auto& x, const auto& dy, const auto& dx,
                    bool reads_x = true) {
  check_declared(where, store);
  if (reads_x) check_shape(where, "x", x.rows(), x.cols(), n, in);
  check_shape(where, "dy", dy.rows(), dy.cols(), n, out);
  check_input_gradient(where, dx.rows(), dx.cols(), n, in);
  return dx.rows() == n && dx.cols() == in;
}

}  // namespace sar::detail
