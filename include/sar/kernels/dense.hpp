// Row-parallel dense helpers for layers: products, transposed products, and deterministic
// column reductions. Everything is chunked over rows with oneTBB; products and reductions use
// a split fixed by the row count (for_product_chunks, parallel_deterministic_reduce), so
// results do not depend on the thread count.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <span>
#include <type_traits>
#include <vector>

#include <tbb/blocked_range.h>
#include <tbb/enumerable_thread_specific.h>
#include <tbb/parallel_for.h>
#include <tbb/parallel_reduce.h>
#include <tbb/partitioner.h>

#include "sar/core/error.hpp"
#include "sar/core/function_ref.hpp"
#include "sar/core/types.hpp"
#include "sar/kernels/row_gemm.hpp"

namespace sar {

namespace detail {
/// Whether T's products run on the row_gemm micro-kernels (float with AVX-512F or AVX2 + FMA).
template <class T>
inline constexpr bool uses_row_gemm = std::is_same_v<T, float> && row_gemm_available;

/// The loops of for_row_chunks and for_product_chunks. They take the body by reference, so
/// oneTBB's machinery is compiled once, not once per loop body; one indirect call per chunk
/// of at least a grain's work costs nothing next to the chunk.
using chunk_body = function_ref<void(Eigen::Index, Eigen::Index)>;

/// body(b, e) on the scheduler's chunks of [0, rows), each at least `grain` rows.
inline void parallel_row_chunks(Eigen::Index rows, Eigen::Index grain, chunk_body body) {
  tbb::parallel_for(tbb::blocked_range<Eigen::Index>(0, rows, grain),
                    [&](const tbb::blocked_range<Eigen::Index>& r) { body(r.begin(), r.end()); });
}

/// body(k c, min(rows, (k + 1) c)) for every k, in parallel.
inline void parallel_fixed_chunks(Eigen::Index rows, Eigen::Index c, chunk_body body) {
  tbb::parallel_for(tbb::blocked_range<Eigen::Index>(0, (rows + c - 1) / c, 1),
                    [&](const tbb::blocked_range<Eigen::Index>& r) {
                      for (Eigen::Index k = r.begin(); k != r.end(); ++k)
                        body(k * c, std::min(rows, (k + 1) * c));
                    });
}
}  // namespace detail

/// Rows per task so that a task does at least ~16k scalar operations. work_per_row: scalar
/// operations per row (below 1 counts as 1). Ensures a result >= 1; does not throw.
inline Eigen::Index row_grain(double work_per_row) {
  constexpr double min_task_work = 16384.0;
  return static_cast<Eigen::Index>(std::max(1.0, min_task_work / std::max(1.0, work_per_row)));
}

/// Calls body(begin, end) on disjoint chunks covering [0, rows), in parallel; no call when
/// rows <= 0, one call on the calling thread when rows fit one grain (row_grain). The chunks
/// are the scheduler's, so they vary between runs and thread counts: body must give the same
/// result however [0, rows) is cut (element-wise work), and be safe to run concurrently on
/// disjoint ranges. An exception from body propagates to the caller.
template <class Body>
void for_row_chunks(Eigen::Index rows, double work_per_row, Body&& body) {
  if (rows <= 0) return;
  const Eigen::Index grain = row_grain(work_per_row);
  if (rows <= grain) {
    body(Eigen::Index{0}, rows);
    return;
  }
  detail::parallel_row_chunks(rows, grain, body);
}

/// m := 0 (assigns, keeps m's shape), in parallel over rows; bitwise the same for every thread
/// count. Does not throw.
template <class T>
void set_zero(rows_ref<T> m) {
  for_row_chunks(m.rows(), static_cast<double>(m.cols()),
                 [&](Eigen::Index b, Eigen::Index e) { m.middleRows(b, e - b).setZero(); });
}

/// m.row(i) *= s[i] for every row (in place, keeps m's shape), in parallel; bitwise the same
/// for every thread count. Requires s.size() == m.rows() (not checked; Eigen asserts only in
/// debug builds). Does not throw.
template <class T>
void scale_rows(rows_ref<T> m, const column_vector<T>& s) {
  for_row_chunks(m.rows(), static_cast<double>(m.cols()), [&](Eigen::Index b, Eigen::Index e) {
    m.middleRows(b, e - b).array().colwise() *= s.segment(b, e - b).array();
  });
}

/// m.row(i) += v for every row (adds in place, keeps m's shape), in parallel; bitwise the same
/// for every thread count. Requires v: 1 x m.cols() (not checked: only v.row(0) is read), v
/// not aliasing m. Does not throw.
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
/// of the thread count. No call when rows <= 0, one call on the calling thread when rows <= c.
/// body runs concurrently on disjoint chunks; an exception from it propagates to the caller.
template <class Body>
void for_product_chunks(Eigen::Index rows, Body&& body) {
  if (rows <= 0) return;
  constexpr Eigen::Index c = product_chunk_rows;
  const Eigen::Index chunks = (rows + c - 1) / c;
  if (chunks == 1) {
    body(Eigen::Index{0}, rows);
    return;
  }
  detail::parallel_fixed_chunks(rows, c, body);
}

/// Sums per-row contributions into `width` doubles: add_row(i, acc) adds row i's contribution
/// into acc[0 .. width). The split into chunks is fixed by rows and width, so the result is
/// bitwise the same for every thread count. Requires width >= 0; add_row(i, acc) must only add
/// into acc and be deterministic itself (calls run concurrently on separate accumulators).
/// Ensures a vector of width values, all 0 when rows <= 0, in parallel
/// (parallel_deterministic_reduce) above one grain. An exception from add_row propagates.
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

namespace detail {
/// The rows [begin, end) of x as a view: the left operand of a row-chunked product read in
/// place.
template <class T>
struct rows_in_place {
  const_rows_ref<T> x;
  const_rows_ref<T> operator()(Eigen::Index begin, Eigen::Index end) const {
    return x.middleRows(begin, end - begin);
  }
};

/// The left operand of a row-chunked product made chunk by chunk: fill(begin, end, out)
/// writes rows [begin, end) of a rows x cols matrix into out (row-major, stride cols), a
/// buffer of the calling thread's that is reused by its next chunk.
template <class T, class Fill>
class rows_filled {
 public:
  rows_filled(Eigen::Index cols, Fill& fill) : cols_(cols), fill_(fill) {}
  const_rows_ref<T> operator()(Eigen::Index begin, Eigen::Index end) const {
    matrix<T>& buffer = buffers_.local();
    if (buffer.rows() < end - begin || buffer.cols() != cols_) buffer.resize(end - begin, cols_);
    fill_(begin, end, buffer.data());
    return buffer.topRows(end - begin);
  }

 private:
  Eigen::Index cols_;
  Fill& fill_;
  mutable tbb::enumerable_thread_specific<matrix<T>> buffers_;
};

/// y (+)= x1 w1 (+ x2 w2 when x2 is not null) (+ b) on `rows` rows, x1's rows [begin, end)
/// given by left1(begin, end) (rows_in_place, rows_filled): the body of dense_product,
/// dense_product_sum and dense_product_of_rows, shapes checked by them. With row_gemm both
/// terms are one product of [x1 | x2] and [w1 ; w2], so y is written once. A chunk's result
/// depends on its rows' values only, not on where they are read from.
template <bool Add, class T, class Left>
void product_rows(Eigen::Index num_rows, const Left& left1, const_rows_ref<T> w1,
                  const const_rows_ref<T>* x2, const const_rows_ref<T>* w2, rows_ref<T> y,
                  const T* b, const row_finisher* finish) {
#if SAR_ROW_GEMM
  if constexpr (uses_row_gemm<T>) {
    packed_right packed;
    if (x2 == nullptr) {
      packed.pack(w1.data(), w1.outerStride(), w1.rows(), w1.cols(), b);
    } else {
      matrix<T> stacked(w1.rows() + w2->rows(), w1.cols());
      stacked << w1, *w2;
      packed.pack(stacked.data(), stacked.outerStride(), stacked.rows(), stacked.cols(), b);
    }
    const Eigen::Index steps = w1.rows() + (x2 != nullptr ? w2->rows() : 0);
    for_product_chunks(num_rows, [&](Eigen::Index begin, Eigen::Index end) {
      const const_rows_ref<T> x1 = left1(begin, end);
      gemm_left rows{x1.data(), x1.outerStride(), 1};
      if (x2 != nullptr) {
        rows.rest = x2->data() + begin * x2->outerStride();
        rows.split = w1.rows();
        rows.rest_row_stride = x2->outerStride();
      }
      row_gemm(end - begin, rows, packed, steps, y.data() + begin * y.outerStride(),
               y.outerStride(), Add);
      if (finish != nullptr) (*finish)(begin, end);
    });
    return;
  }
#endif
  for_product_chunks(num_rows, [&](Eigen::Index begin, Eigen::Index end) {
    auto rows = y.middleRows(begin, end - begin);
    if constexpr (Add)
      rows.noalias() += left1(begin, end) * w1;
    else
      rows.noalias() = left1(begin, end) * w1;
    if (x2 != nullptr) rows.noalias() += x2->middleRows(begin, end - begin) * *w2;
    if (b != nullptr) rows.rowwise() += Eigen::Map<const row_vector<T>>(b, w1.cols());
    if (finish != nullptr) (*finish)(begin, end);
  });
}
}  // namespace detail

/// y = x w (+ b) (Add = false) or y += x w (+ b) (Add = true), parallel over fixed chunks of
/// rows of x (bitwise the same on every thread count); b, unless null, holds w.cols() values
/// added to every row (in the product's epilogue, no extra pass); finish, unless null, is
/// called on each chunk of rows of y as soon as it is written (while it is in the cache).
/// Requires y sized x.rows() x w.cols() (never resized), x.cols() == w.rows(), y not aliasing
/// x or w, b (not checked) null or w.cols() values; finish runs concurrently on disjoint
/// chunks. Throws sar::invalid_argument on a shape mismatch, y untouched.
template <bool Add = false, class T>
void dense_product(const_rows_ref<T> x, const_rows_ref<T> w, rows_ref<T> y,
                   const T* b = nullptr, const row_finisher* finish = nullptr) {
  SAR_CHECK(x.cols() == w.rows() && y.rows() == x.rows() && y.cols() == w.cols(),
            invalid_argument, "sar::dense_product: shapes ", x.rows(), "x", x.cols(), " * ",
            w.rows(), "x", w.cols(), " -> ", y.rows(), "x", y.cols());
  detail::product_rows<Add, T>(x.rows(), detail::rows_in_place<T>{x}, w, nullptr, nullptr, y, b,
                               finish);
}

/// y = x1 w1 + x2 w2 (+ b): the product of [x1 | x2] and [w1 ; w2] without forming either, in
/// one pass over y; otherwise as dense_product. Requires y sized x1.rows() x w1.cols(),
/// x2.rows() == x1.rows(), x1.cols() == w1.rows(), x2.cols() == w2.rows(),
/// w2.cols() == w1.cols(), y aliasing no operand. Assigns y (never resized); bitwise the same
/// for every thread count. Throws sar::invalid_argument on a shape mismatch, y untouched.
template <class T>
void dense_product_sum(const_rows_ref<T> x1, const_rows_ref<T> w1, const_rows_ref<T> x2,
                       const_rows_ref<T> w2, rows_ref<T> y, const T* b = nullptr,
                       const row_finisher* finish = nullptr) {
  SAR_CHECK(x1.cols() == w1.rows() && x2.cols() == w2.rows() && x2.rows() == x1.rows() &&
                w2.cols() == w1.cols() && y.rows() == x1.rows() && y.cols() == w1.cols(),
            invalid_argument, "sar::dense_product_sum: shapes ", x1.rows(), "x", x1.cols(), " * ",
            w1.rows(), "x", w1.cols(), " + ", x2.rows(), "x", x2.cols(), " * ", w2.rows(), "x",
            w2.cols(), " -> ", y.rows(), "x", y.cols());
  detail::product_rows<false, T>(x1.rows(), detail::rows_in_place<T>{x1}, w1, &x2, &w2, y, b,
                                 finish);
}

/// y = x w (+ b) for a rows x w.rows() matrix x that is never formed whole: fill(begin, end,
/// out) writes its rows [begin, end) (row-major, stride w.rows()) into a per-thread buffer of
/// up to product_chunk_rows rows, just before they are multiplied. Bitwise dense_product on
/// x, with its requirements and finish; fill runs concurrently on disjoint chunks. Requires y
/// sized rows x w.cols(); throws sar::invalid_argument otherwise, y untouched.
template <class T, class Fill>
void dense_product_of_rows(Eigen::Index rows, Fill&& fill, const_rows_ref<T> w, rows_ref<T> y,
                           const T* b = nullptr, const row_finisher* finish = nullptr) {
  SAR_CHECK(y.rows() == rows && y.cols() == w.cols(), invalid_argument,
            "sar::dense_product_of_rows: shapes ", rows, "x", w.rows(), " * ", w.rows(), "x",
            w.cols(), " -> ", y.rows(), "x", y.cols());
  const detail::rows_filled<T, std::remove_reference_t<Fill>> left(w.rows(), fill);
  detail::product_rows<false, T>(rows, left, w, nullptr, nullptr, y, b, finish);
}

/// y = x w^T (Add = false) or y += x w^T (Add = true), parallel over fixed chunks of rows of
/// x (bitwise the same on every thread count); copies w^T first (w is meant to be a small
/// weight matrix). Requires y sized x.rows() x w.rows() (never resized), x.cols() == w.cols(),
/// y not aliasing x. Throws sar::invalid_argument on a shape mismatch, y untouched.
template <bool Add, class T>
void dense_product_transposed(const_rows_ref<T> x, const_rows_ref<T> w, rows_ref<T> y) {
  SAR_CHECK(x.cols() == w.cols() && y.rows() == x.rows() && y.cols() == w.rows(),
            invalid_argument, "sar::dense_product_transposed: shapes ", x.rows(), "x", x.cols(),
            " * (", w.rows(), "x", w.cols(), ")^T -> ", y.rows(), "x", y.cols());
  const matrix<T> w_transposed = w.transpose();  // w is a small weight matrix
  dense_product<Add, T>(x, w_transposed, y);
}

/// y += x w^T: dense_product_transposed<true>, with its requirements, determinism and throws.
template <class T>
void dense_product_transposed_add(const_rows_ref<T> x, const_rows_ref<T> w, rows_ref<T> y) {
  dense_product_transposed<true, T>(x, w, y);
}

namespace detail {
/// Rows per chunk of a deterministic reduction over rows. 4096: each partial transposed
/// product is then a GEMM with a long inner dimension, which Eigen runs near its peak (64-row
/// chunks reached ~60% of it on a 200k x 128 x 128 product: packing and the join of ~3000
/// partial results dominated). Fixed, so that the sums do not depend on the threads.
inline constexpr Eigen::Index reduction_chunk_rows = 4096;

/// out := the sum, over the chunks [begin, end) of reduction_chunk_rows rows of [0, rows), of
/// what add_rows(begin, end, acc) adds to a zero acc shaped as out, joined in a fixed tree
/// (tbb::parallel_deterministic_reduce): bitwise the same for every thread count. One chunk
/// runs on the calling thread straight into out. add_rows runs concurrently on disjoint chunks.
template <class T, class AddRows>
void reduce_row_chunks(Eigen::Index rows, rows_ref<T> out, AddRows&& add_rows) {
  constexpr Eigen::Index grain = reduction_chunk_rows;
  if (rows <= grain) {
    out.setZero();
    add_rows(Eigen::Index{0}, rows, out);
    return;
  }
  out = tbb::parallel_deterministic_reduce(
      tbb::blocked_range<Eigen::Index>(0, rows, grain),
      matrix<T>(matrix<T>::Zero(out.rows(), out.cols())),
      [&](const tbb::blocked_range<Eigen::Index>& r, matrix<T> acc) {
        add_rows(r.begin(), r.end(), rows_ref<T>(acc));
        return acc;
      },
      [](matrix<T> x, const matrix<T>& y) {
        x += y;
        return x;
      },
      tbb::simple_partitioner());
}

/// acc += [a_0 | a_1 | ...]^T b for one chunk of rows (every operand that chunk's rows).
template <class T>
void add_transposed_chunk(std::span<const const_rows_ref<T>> a, const_rows_ref<T> b,
                          rows_ref<T> acc) {
#if SAR_ROW_GEMM
  if constexpr (uses_row_gemm<T>) {
    std::vector<transposed_left> parts;
    for (const auto& part : a) parts.push_back({part.data(), part.outerStride(), part.cols()});
    row_gemm_transposed_add(parts, b.data(), b.outerStride(), acc.data(), acc.outerStride(),
                            b.rows(), b.cols());
    return;
  }
#endif
  Eigen::Index first = 0;
  for (const auto& part : a) {
    acc.middleRows(first, part.cols()).noalias() += part.transpose() * b;
    first += part.cols();
  }
}

/// out = [a_0 | a_1 | ...]^T b, a deterministic reduction over row chunks: the body of
/// transposed_product, shapes checked by it.
template <class T>
void transposed_product_parts(std::span<const const_rows_ref<T>> a, const_rows_ref<T> b,
                              rows_ref<T> out) {
  reduce_row_chunks<T>(b.rows(), out, [&](Eigen::Index begin, Eigen::Index end, rows_ref<T> acc) {
    std::vector<const_rows_ref<T>> rows;
    for (const auto& part : a) rows.push_back(part.middleRows(begin, end - begin));
    add_transposed_chunk<T>(rows, b.middleRows(begin, end - begin), acc);
  });
}
}  // namespace detail

/// out = a^T b (a: n x p, b: n x q, out: p x q), a deterministic reduction over fixed chunks
/// of 4096 rows (parallel above one chunk; bitwise the same for every thread count). Assigns
/// out (never resized; all 0 when n == 0); requires out not aliasing a or b. Throws
/// sar::invalid_argument on a shape mismatch, out untouched.
template <class T>
void transposed_product(const_rows_ref<T> a, const_rows_ref<T> b, rows_ref<T> out) {
  SAR_CHECK(a.rows() == b.rows() && out.rows() == a.cols() && out.cols() == b.cols(),
            invalid_argument, "sar::transposed_product: shapes (", a.rows(), "x", a.cols(),
            ")^T * ", b.rows(), "x", b.cols(), " -> ", out.rows(), "x", out.cols());
  const std::array<const_rows_ref<T>, 1> parts{a};
  detail::transposed_product_parts<T>(parts, b, out);
}

/// out = a^T b for an n x out.rows() matrix a that is never formed whole: fill(begin, end,
/// rows) writes its rows [begin, end) (row-major, stride out.rows()) into a per-thread buffer
/// of up to 4096 rows, just before they are used. Bitwise transposed_product on a, with its
/// determinism; fill runs concurrently on disjoint chunks. Throws sar::invalid_argument unless
/// out.cols() == b.cols(), out untouched.
template <class T, class Fill>
void transposed_product_of_rows(Fill&& fill, const_rows_ref<T> b, rows_ref<T> out) {
  SAR_CHECK(out.cols() == b.cols(), invalid_argument, "sar::transposed_product_of_rows: shapes (",
            b.rows(), "x", out.rows(), ")^T * ", b.rows(), "x", b.cols(), " -> ", out.rows(), "x",
            out.cols());
  const detail::rows_filled<T, std::remove_reference_t<Fill>> a(out.rows(), fill);
  detail::reduce_row_chunks<T>(b.rows(), out,
                               [&](Eigen::Index begin, Eigen::Index end, rows_ref<T> acc) {
                                 const std::array<const_rows_ref<T>, 1> rows{a(begin, end)};
                                 detail::add_transposed_chunk<T>(
                                     rows, b.middleRows(begin, end - begin), acc);
                               });
}

/// out = [a1 | a2]^T b (out: (p1 + p2) x q, a1^T b on top), with one read of b for both and
/// each half bitwise transposed_product's. Requires a1, a2, b of equal rows, out sized
/// (a1.cols() + a2.cols()) x b.cols() (never resized) and aliasing no operand. Assigns out;
/// throws sar::invalid_argument on a shape mismatch, out untouched.
template <class T>
void transposed_product(const_rows_ref<T> a1, const_rows_ref<T> a2, const_rows_ref<T> b,
                        rows_ref<T> out) {
  SAR_CHECK(a1.rows() == b.rows() && a2.rows() == b.rows() &&
                out.rows() == a1.cols() + a2.cols() && out.cols() == b.cols(),
            invalid_argument, "sar::transposed_product: shapes (", a1.rows(), "x", a1.cols(),
            " | ", a2.rows(), "x", a2.cols(), ")^T * ", b.rows(), "x", b.cols(), " -> ",
            out.rows(), "x", out.cols());
  const std::array<const_rows_ref<T>, 2> parts{a1, a2};
  detail::transposed_product_parts<T>(parts, b, out);
}

/// out = the column sums of a (out: 1 x a.cols()), accumulated in double and rounded to T
/// once. Assigns out (never resized; all 0 when a has no rows), in parallel via reduce_rows,
/// bitwise the same for every thread count. Throws sar::invalid_argument unless out is
/// 1 x a.cols(), out untouched.
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
