// Products of sparse rows (sar/core/sparse_rows.hpp) with dense matrices: what a model's first
// layer computes on sparse input features, x W forward and x^T dH for the weight gradient.
// The work is proportional to the stored entries times the dense width, not to rows x cols.
#pragma once

#include <algorithm>

#include "sar/core/error.hpp"
#include "sar/core/sparse_rows.hpp"
#include "sar/core/types.hpp"
#include "sar/kernels/dense.hpp"

namespace sar {

/// y = a w (+ b); b, unless null, holds w.cols() values added to every row; finish, unless
/// null, is called on each chunk of rows of y once it is written. Row i sums its entries in
/// stored order, so the result is bitwise the same for every thread count. Requires y sized
/// a.rows() x w.cols() (never resized) and aliasing neither operand. Throws
/// sar::invalid_argument on a shape mismatch, y untouched.
template <class T>
void sparse_product(const sparse_rows<T>& a, const_rows_ref<T> w, rows_ref<T> y,
                    const T* bias = nullptr, const row_finisher* finish = nullptr) {
  SAR_CHECK(a.cols() == w.rows() && y.rows() == a.rows() && y.cols() == w.cols(),
            invalid_argument, "sar::sparse_product: shapes ", a.rows(), "x", a.cols(),
            " (sparse) * ", w.rows(), "x", w.cols(), " -> ", y.rows(), "x", y.cols());
  const Eigen::Index q = w.cols();
  for_product_chunks(a.rows(), [&](Eigen::Index begin, Eigen::Index end) {
    for (Eigen::Index i = begin; i < end; ++i) {
      T* out = y.data() + i * y.outerStride();
      if (bias != nullptr) std::copy_n(bias, q, out);
      else std::fill_n(out, q, T(0));
      for (edge_t k = a.offsets[i]; k < a.offsets[i + 1]; ++k) {
        const T v = a.values[k];
        const T* row = w.data() + a.columns[k] * w.outerStride();
        for (Eigen::Index j = 0; j < q; ++j) out[j] += v * row[j];
      }
    }
    if (finish != nullptr) (*finish)(begin, end);
  });
}

/// out = a^T b (a: n x p sparse, b: n x q, out: p x q), a deterministic reduction over fixed
/// chunks of 4096 rows (detail::reduce_row_chunks: parallel above one chunk, bitwise the same
/// for every thread count).
/// Assigns out (never resized; all 0 when n == 0); requires out aliasing neither operand.
/// Throws sar::invalid_argument on a shape mismatch, out untouched.
template <class T>
void transposed_product(const sparse_rows<T>& a, const_rows_ref<T> b, rows_ref<T> out) {
  SAR_CHECK(a.rows() == b.rows() && out.rows() == a.cols() && out.cols() == b.cols(),
            invalid_argument, "sar::transposed_product: shapes (", a.rows(), "x", a.cols(),
            " sparse)^T * ", b.rows(), "x", b.cols(), " -> ", out.rows(), "x", out.cols());
  const Eigen::Index q = b.cols();
  detail::reduce_row_chunks<T>(a.rows(), out, [&](Eigen::Index begin, Eigen::Index end,
                                                  rows_ref<T> acc) {
    for (Eigen::Index i = begin; i < end; ++i) {
      const T* g = b.data() + i * b.outerStride();
      for (edge_t k = a.offsets[i]; k < a.offsets[i + 1]; ++k) {
        const T v = a.values[k];
        T* row = acc.data() + a.columns[k] * acc.outerStride();
        for (Eigen::Index j = 0; j < q; ++j) row[j] += v * g[j];
      }
    }
  });
}

}  // namespace sar
