// Row-parallel dense helpers for layers: products, transposed products, and deterministic
// column reductions. Everything is chunked over rows with oneTBB; products and reductions use
// a split fixed by the row count (for_product_chunks, parallel_deterministic_reduce), so
// results do not depend on the thread count.
#pragma once

#include <algorithm>
#include <cstddef>
#include <type_traits>
#include <vector>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/parallel_reduce.h>
#include <tbb/partitioner.h>

#include "sar/core/error.hpp"
#include "sar/core/types.hpp"
#include "sar/dist/schedule.hpp"
#include "sar/kernels/row_gemm.hpp"

namespace sar {

namespace detail {
/// Whether T's products run on the row_gemm micro-kernels (float with AVX2 + FMA).
template <class T>
inline constexpr bool uses_row_gemm = std::is_same_v<T, float> && row_gemm_available;
}  // namespace detail

/// Rows per task so that a task does at least ~16k scalar operations.
inline Eigen::Index row_grain(double work_per_row) {
  constexpr double min_task_work = 16384.0;
  return static_cast<Eigen::Index>(std::max(1.0, min_task_work / std::max(1.0, work_per_row)));
}

/// Calls body(begin, end) on disjoint chunks covering [0, rows), in parallel.
template <class Body>
void for_row_chunks(Eigen::Index rows, double work_per_row, Body&& body) {
  if (rows <= 0) return;
  const Eigen::Index grain = row_grain(work_per_row);
  if (rows <= grain) {
    body(Eigen::Index{0}, rows);
    return;
  }
  tbb::parallel_for(tbb::blocked_range<Eigen::Index>(0, rows, grain),
                    [&](const tbb::blocked_range<Eigen::Index>& r) { body(r.begin(), r.end()); });
}

/// m := 0, in parallel over rows.
template <class T>
void set_zero(rows_ref<T> m) {
  for_row_chunks(m.rows(), static_cast<double>(m.cols()),
                 [&](Eigen::Index b, Eigen::Index e) { m.middleRows(b, e - b).setZero(); });
}

/// m.row(i) *= s[i] for every row, in parallel. Requires s.size() == m.rows().
template <class T>
void scale_rows(rows_ref<T> m, const column_vector<T>& s) {
  for_row_chunks(m.rows(), static_cast<double>(m.cols()), [&](Eigen::Index b, Eigen::Index e) {
    m.middleRows(b, e - b).array().colwise() *= s.segment(b, e - b).array();
  });
}

/// m.row(i) += v for every row, in parallel. Requires v: 1 x m.cols().
template <class T>
void add_to_rows(rows_ref<T> m, const_rows_ref<T> v) {
  for_row_chunks(m.rows(), static_cast<double>(m.cols()), [&](Eigen::Index b, Eigen::Index e) {
    m.middleRows(b, e - b).rowwise() += v.row(0);
  });
}

/// Rows per call of a row-chunked product (see for_product_chunks).
inline constexpr Eigen::Index product_chunk_rows = 512;

/// Calls body(begin, end) on the chunks [k c, (k + 1) c) of [0, rows) with c =
/// product_chunk_rows, in parallel. Products are cut this way, never by the scheduler: Eigen
/// rounds a row of a product differently depending on where the row sits in its call (edge
/// rows take other kernels), so only a cut fixed by the row count keeps results independent
/// of the thread count.
template <class Body>
void for_product_chunks(Eigen::Index rows, Body&& body) {
  if (rows <= 0) return;
  constexpr Eigen::Index c = product_chunk_rows;
  const Eigen::Index chunks = (rows + c - 1) / c;
  if (chunks == 1) {
    body(Eigen::Index{0}, rows);
    return;
  }
  tbb::parallel_for(tbb::blocked_range<Eigen::Index>(0, chunks, 1),
                    [&](const tbb::blocked_range<Eigen::Index>& r) {
                      for (Eigen::Index k = r.begin(); k != r.end(); ++k)
                        body(k * c, std::min(rows, (k + 1) * c));
                    });
}

/// Sums per-row contributions into `width` doubles: add_row(i, acc) adds row i's contribution
/// into acc[0 .. width). The split into chunks is fixed by rows and width, so the result is
/// bitwise the same for every thread count.
template <class AddRow>
std::vector<double> reduce_rows(Eigen::Index rows, Eigen::Index width, AddRow&& add_row) {
  using acc_t = std::vector<double>;
  const Eigen::Index grain = row_grain(static_cast<double>(std::max<Eigen::Index>(width, 1)));
  if (rows <= grain) {
    acc_t acc(static_cast<std::size_t>(width), 0.0);
    for (Eigen::Index i = 0; i < rows; ++i) add_row(i, acc.data());
    return acc;
  }
  return tbb::parallel_deterministic_reduce(
      tbb::blocked_range<Eigen::Index>(0, rows, grain), acc_t(static_cast<std::size_t>(width), 0.0),
      [&](const tbb::blocked_range<Eigen::Index>& r, acc_t acc) {
        for (Eigen::Index i = r.begin(); i != r.end(); ++i) add_row(i, acc.data());
        return acc;
      },
      [](acc_t a, const acc_t& b) {
        for (std::size_t k = 0; k < a.size(); ++k) a[k] += b[k];
        return a;
      },
      tbb::simple_partitioner());
}

/// y = x w (+ b) (Add = false) or y += x w (+ b) (Add = true), parallel over fixed chunks of
/// rows of x (bitwise the same on every thread count); b, unless null, holds w.cols() values
/// added to every row (in the product's epilogue, no extra pass). Requires y sized
/// x.rows() x w.cols(), x.cols() == w.rows(), y not aliasing x or w.
template <bool Add = false, class T>
void dense_product(const_rows_ref<T> x, const_rows_ref<T> w, rows_ref<T> y,
                   const T* b = nullptr) {
  SAR_CHECK(x.cols() == w.rows() && y.rows() == x.rows() && y.cols() == w.cols(),
            invalid_argument, "sar::dense_product: shapes ", x.rows(), "x", x.cols(), " * ",
            w.rows(), "x", w.cols(), " -> ", y.rows(), "x", y.cols());
#if SAR_ROW_GEMM
  if constexpr (detail::uses_row_gemm<T>) {
    detail::packed_right packed;
    packed.pack(w.data(), w.outerStride(), w.rows(), w.cols(), b);
    for_product_chunks(x.rows(), [&](Eigen::Index begin, Eigen::Index end) {
      const detail::gemm_left rows{x.data() + begin * x.outerStride(), x.outerStride(), 1};
      detail::row_gemm(end - begin, rows, packed, w.rows(), y.data() + begin * y.outerStride(),
                       y.outerStride(), Add);
    });
    return;
  }
#endif
  for_product_chunks(x.rows(), [&](Eigen::Index begin, Eigen::Index end) {
    auto rows = y.middleRows(begin, end - begin);
    if constexpr (Add)
      rows.noalias() += x.middleRows(begin, end - begin) * w;
    else
      rows.noalias() = x.middleRows(begin, end - begin) * w;
    if (b != nullptr) rows.rowwise() += Eigen::Map<const row_vector<T>>(b, w.cols());
  });
}

/// y += x w^T, parallel over fixed chunks of rows of x. Requires y sized x.rows() x w.rows(),
/// x.cols() == w.cols().
template <class T>
void dense_product_transposed_add(const_rows_ref<T> x, const_rows_ref<T> w, rows_ref<T> y) {
  SAR_CHECK(x.cols() == w.cols() && y.rows() == x.rows() && y.cols() == w.rows(),
            invalid_argument, "sar::dense_product_transposed_add: shapes ", x.rows(), "x",
            x.cols(), " * (", w.rows(), "x", w.cols(), ")^T -> ", y.rows(), "x", y.cols());
  if constexpr (detail::uses_row_gemm<T>) {
    const matrix<T> w_transposed = w.transpose();
    dense_product<true, T>(x, w_transposed, y);
    return;
  }
  for_product_chunks(x.rows(), [&](Eigen::Index b, Eigen::Index e) {
    y.middleRows(b, e - b).noalias() += x.middleRows(b, e - b) * w.transpose();
  });
}

/// out = a^T b (a: n x p, b: n x q, out: p x q), a deterministic reduction over row chunks.
template <class T>
void transposed_product(const_rows_ref<T> a, const_rows_ref<T> b, rows_ref<T> out) {
  SAR_CHECK(a.rows() == b.rows() && out.rows() == a.cols() && out.cols() == b.cols(),
            invalid_argument, "sar::transposed_product: shapes (", a.rows(), "x", a.cols(),
            ")^T * ", b.rows(), "x", b.cols(), " -> ", out.rows(), "x", out.cols());
  const Eigen::Index n = a.rows();
  // Chunks of at least 4096 rows: each partial product is then a GEMM with a long inner
  // dimension, which Eigen runs near its peak (64-row chunks reached ~60% of it on a
  // 200k x 128 x 128 product: packing and the join of ~3000 partial results dominated).
  const Eigen::Index grain =
      std::max<Eigen::Index>(4096, row_grain(static_cast<double>(a.cols() * b.cols())));
  // acc += a^T b over rows [begin, begin + len).
  const auto add_rows = [&](Eigen::Index begin, Eigen::Index len, rows_ref<T> acc) {
#if SAR_ROW_GEMM
    if constexpr (detail::uses_row_gemm<T>) {
      detail::row_gemm_transposed_add(a.data() + begin * a.outerStride(), a.outerStride(),
                                      b.data() + begin * b.outerStride(), b.outerStride(),
                                      acc.data(), acc.outerStride(), len, a.cols(), b.cols());
      return;
    }
#endif
    acc.noalias() += a.middleRows(begin, len).transpose() * b.middleRows(begin, len);
  };
  if (n <= grain) {
    out.setZero();
    add_rows(0, n, out);
    return;
  }
  out = tbb::parallel_deterministic_reduce(
      tbb::blocked_range<Eigen::Index>(0, n, grain),
      matrix<T>(matrix<T>::Zero(a.cols(), b.cols())),
      [&](const tbb::blocked_range<Eigen::Index>& r, matrix<T> acc) {
        add_rows(r.begin(), static_cast<Eigen::Index>(r.size()), acc);
        return acc;
      },
      [](matrix<T> x, const matrix<T>& y) {
        x += y;
        return x;
      },
      tbb::simple_partitioner());
}

/// out = the column sums of a (out: 1 x a.cols()), accumulated in double.
template <class T>
void column_sums(const_rows_ref<T> a, rows_ref<T> out) {
  SAR_CHECK(out.rows() == 1 && out.cols() == a.cols(), invalid_argument,
            "sar::column_sums: ", a.cols(), " columns into ", out.rows(), "x", out.cols());
  const Eigen::Index f = a.cols();
  if (f == 0) return;
  const auto sums = reduce_rows(a.rows(), f, [&](Eigen::Index i, double* acc) {
    const T* row = a.data() + i * a.outerStride();
    for (Eigen::Index j = 0; j < f; ++j) acc[j] += static_cast<double>(row[j]);
  });
  for (Eigen::Index j = 0; j < f; ++j) out(0, j) = static_cast<T>(sums[static_cast<std::size_t>(j)]);
}

}  // namespace sar
