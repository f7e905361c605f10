// Products of sparse rows (sar/core/sparse_rows.hpp) with dense matrices: what a model's first
// layer computes on sparse input features, x W forward and x^T dH for the weight gradient.
// The work is proportional to the stored entries times the dense width, not to rows x cols.
//
// Both are bound by moving rows of the dense operands through the cache, not by arithmetic
// (bench/RESULTS.md §45): x W gathers, for row i of the result, the rows of W that row i of x
// lists, and sums them in registers, writing the row once; x^T dH adds each row of dH, held in
// registers, into the rows of the result that its row of x lists. Every element of either
// result is one multiply-add chain in a fixed order (FMA where row_gemm's vectors are
// available), whoever computes it, so the results are bitwise the same for every thread count.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include "sar/core/error.hpp"
#include "sar/core/sparse_rows.hpp"
#include "sar/core/types.hpp"
#include "sar/kernels/dense.hpp"
#include "sar/kernels/row_gemm.hpp"

namespace sar {

namespace detail {

/// out[0, q) = start[0, q) (0 when start is null) + the sum over the entries k < count of a
/// sparse row, in stored order, of values[k] * w[columns[k] * stride + (0 .. q)]: one
/// multiply-add chain per element. Requires every listed row of w to hold q values, start and
/// out q values each, out overlapping neither start nor w. Does not throw.
template <class T>
void gather_row_scalar(const T* values, const std::int32_t* columns, edge_t count, const T* w,
                       Eigen::Index stride, Eigen::Index q, const T* start, T* out) {
  if (start == nullptr) std::fill_n(out, q, T(0));
  else std::copy_n(start, q, out);
  for (edge_t k = 0; k < count; ++k) {
    const T v = values[k];
    const T* row = w + static_cast<Eigen::Index>(columns[k]) * stride;
    for (Eigen::Index j = 0; j < q; ++j) out[j] += v * row[j];
  }
}

/// out[columns[k] * out_stride + (0 .. q)] += values[k] * g[0 .. q) for the entries k < count
/// of a sparse row, in stored order (g: the row of the dense operand that goes with it).
/// Requires every listed row of out to hold q values, not overlapping g. Does not throw.
template <class T>
void scatter_row_scalar(const T* values, const std::int32_t* columns, edge_t count, const T* g,
                        Eigen::Index q, T* out, Eigen::Index out_stride) {
  for (edge_t k = 0; k < count; ++k) {
    const T v = values[k];
    T* row = out + static_cast<Eigen::Index>(columns[k]) * out_stride;
    for (Eigen::Index j = 0; j < q; ++j) row[j] += v * g[j];
  }
}

#if SAR_ROW_GEMM
/// The widest panel the vector kernels keep in registers: 8 vectors of gemm_simd::lanes.
inline constexpr int sparse_panel_vectors = 8;

/// gather_row_scalar for floats on columns [0, V L) of w and out (L = gemm_simd::lanes): the
/// V vectors of the sum stay in registers over all entries and are stored once; each element
/// is one FMA chain. Unless Full, only `mask`'s lanes of the last vector are read and written.
template <int V, bool Full>
void gather_panel(const float* values, const std::int32_t* columns, edge_t count, const float* w,
                  Eigen::Index stride, const float* start, float* out, gemm_simd::mask mask) {
  using simd = gemm_simd;
  constexpr int L = simd::lanes;
  // The pragmas keep acc in registers (as in row_gemm_block).
  simd::vector acc[V];
#pragma GCC unroll 8
  for (int v = 0; v < V; ++v) {
    const bool whole = Full || v + 1 < V;
    acc[v] = start == nullptr ? simd::zero()
             : whole          ? simd::load(start + L * v)
                              : simd::load(start + L * v, mask);
  }
  for (edge_t k = 0; k < count; ++k) {
    const simd::vector x = simd::broadcast(values + k);
    const float* row = w + static_cast<Eigen::Index>(columns[k]) * stride;
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v) {
      const bool whole = Full || v + 1 < V;
      acc[v] = simd::fma(x, whole ? simd::load(row + L * v) : simd::load(row + L * v, mask),
                         acc[v]);
    }
  }
#pragma GCC unroll 8
  for (int v = 0; v < V; ++v) {
    if (Full || v + 1 < V) simd::store(out + L * v, acc[v]);
    else simd::store(out + L * v, mask, acc[v]);
  }
}

/// scatter_row_scalar for floats on columns [0, V L) of g and out: g's V vectors are loaded
/// once into registers; each entry's row of out is read, one FMA per element, and written.
/// Unless Full, only `mask`'s lanes of the last vector are read and written.
template <int V, bool Full>
void scatter_panel(const float* values, const std::int32_t* columns, edge_t count,
                   const float* g, float* out, Eigen::Index out_stride, gemm_simd::mask mask) {
  using simd = gemm_simd;
  constexpr int L = simd::lanes;
  simd::vector gv[V];
#pragma GCC unroll 8
  for (int v = 0; v < V; ++v)
    gv[v] = Full || v + 1 < V ? simd::load(g + L * v) : simd::load(g + L * v, mask);
  for (edge_t k = 0; k < count; ++k) {
    const simd::vector x = simd::broadcast(values + k);
    float* row = out + static_cast<Eigen::Index>(columns[k]) * out_stride;
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v) {
      if (Full || v + 1 < V) {
        simd::store(row + L * v, simd::fma(x, gv[v], simd::load(row + L * v)));
      } else {
        simd::store(row + L * v, mask, simd::fma(x, gv[v], simd::load(row + L * v, mask)));
      }
    }
  }
}

/// Calls body.template operator()<V, Full>(first, mask) for each panel of up to
/// sparse_panel_vectors vectors of [0, q): first is the panel's first column, V its vectors,
/// Full whether all V L lanes are columns, else mask selects the last vector's.
template <class Body>
void for_each_panel(Eigen::Index q, Body&& body) {
  constexpr int L = gemm_simd::lanes;
  for (Eigen::Index first = 0; first < q; first += sparse_panel_vectors * L) {
    const auto width =
        static_cast<int>(std::min<Eigen::Index>(q - first, sparse_panel_vectors * L));
    const int vectors = (width + L - 1) / L;
    const gemm_simd::mask mask = gemm_simd::first_lanes(width - (vectors - 1) * L);
    const auto panel = [&]<int V>() {
      if (width == V * L) body.template operator()<V, true>(first, mask);
      else body.template operator()<V, false>(first, mask);
    };
    switch (vectors) {
      case 1: panel.template operator()<1>(); break;
      case 2: panel.template operator()<2>(); break;
      case 3: panel.template operator()<3>(); break;
      case 4: panel.template operator()<4>(); break;
      case 5: panel.template operator()<5>(); break;
      case 6: panel.template operator()<6>(); break;
      case 7: panel.template operator()<7>(); break;
      default: panel.template operator()<8>(); break;
    }
  }
}
#endif

/// Row i of y = a w (+ bias): gather_row_scalar, in registers for float where row_gemm's
/// vectors are available (the same chain per element either way).
template <class T>
void gather_row(const sparse_rows<T>& a, Eigen::Index i, const_rows_ref<T> w, const T* bias,
                T* out) {
  const edge_t k = a.offsets[i], count = a.offsets[i + 1] - k;
  const T* values = a.values.data() + k;
  const std::int32_t* columns = a.columns.data() + k;
#if SAR_ROW_GEMM
  if constexpr (uses_row_gemm<T>) {
    for_each_panel(w.cols(), [&]<int V, bool Full>(Eigen::Index first, gemm_simd::mask mask) {
      gather_panel<V, Full>(values, columns, count, w.data() + first, w.outerStride(),
                            bias == nullptr ? nullptr : bias + first, out + first, mask);
    });
    return;
  }
#endif
  gather_row_scalar(values, columns, count, w.data(), w.outerStride(), w.cols(), bias, out);
}

/// acc += (a's rows [begin, end), columns [c0, c1))^T b's rows [begin, end): for each row i in
/// order, b's row i scattered into the rows of acc that row i of a lists in [c0, c1)
/// (scatter_row_scalar; in registers for float where row_gemm's vectors are available). Every
/// element of acc's rows [c0, c1) is one chain over the rows in increasing order, whatever
/// the ranges [c0, c1) are cut into. Requires a valid (sparse_rows::validate), acc: a.cols() x
/// b.cols(), not overlapping b. Does not throw.
template <class T>
void scatter_rows(const sparse_rows<T>& a, const_rows_ref<T> b, Eigen::Index begin,
                  Eigen::Index end, std::int32_t c0, std::int32_t c1, rows_ref<T> acc) {
  const std::int32_t* columns = a.columns.data();
  const bool whole_rows = c0 == 0 && c1 == a.cols();
  const auto each_row = [&](auto&& add) {
    for (Eigen::Index i = begin; i < end; ++i) {
      const std::int32_t* lo = columns + a.offsets[i];
      const std::int32_t* hi = columns + a.offsets[i + 1];
      if (!whole_rows) {  // the row's entries in [c0, c1): columns increase within a row
        lo = std::lower_bound(lo, hi, c0);
        hi = std::lower_bound(lo, hi, c1);
      }
      if (lo != hi) add(i, lo - columns, hi - lo);
    }
  };
#if SAR_ROW_GEMM
  if constexpr (uses_row_gemm<T>) {
    for_each_panel(b.cols(), [&]<int V, bool Full>(Eigen::Index first, gemm_simd::mask mask) {
      each_row([&](Eigen::Index i, edge_t k, edge_t count) {
        scatter_panel<V, Full>(a.values.data() + k, columns + k, count,
                               b.data() + i * b.outerStride() + first, acc.data() + first,
                               acc.outerStride(), mask);
      });
    });
    return;
  }
#endif
  each_row([&](Eigen::Index i, edge_t k, edge_t count) {
    scatter_row_scalar(a.values.data() + k, columns + k, count, b.data() + i * b.outerStride(),
                       b.cols(), acc.data(), acc.outerStride());
  });
}

/// Cuts the columns of a into `ranges` ranges with about equal entries in rows [begin, end)
/// (counted on every 4th row): ensures ranges + 1 increasing cuts from 0 to a.cols() (a range
/// may be empty). The cut changes no result (see scatter_rows), only the balance.
template <class T>
std::vector<std::int32_t> balanced_column_cuts(const sparse_rows<T>& a, Eigen::Index begin,
                                               Eigen::Index end, Eigen::Index ranges) {
  const auto p = static_cast<std::int32_t>(a.cols());
  if (ranges == 1) return {0, p};
  std::vector<edge_t> counts(static_cast<std::size_t>(p) + 1, 0);
  for (Eigen::Index i = begin; i < end; i += 4)
    for (edge_t k = a.offsets[i]; k < a.offsets[i + 1]; ++k) ++counts[a.columns[k] + 1];
  for (std::size_t c = 1; c < counts.size(); ++c) counts[c] += counts[c - 1];
  std::vector<std::int32_t> cuts(static_cast<std::size_t>(ranges) + 1, p);
  cuts[0] = 0;
  for (Eigen::Index r = 1; r < ranges; ++r) {
    const edge_t target = counts.back() * r / ranges;
    cuts[r] = static_cast<std::int32_t>(
        std::lower_bound(counts.begin(), counts.end(), target) - counts.begin());
    cuts[r] = std::clamp(cuts[r], cuts[r - 1], p);
  }
  return cuts;
}
}  // namespace detail

/// y = a w (+ b); b, unless null, holds w.cols() values added to every row; finish, unless
/// null, is called on each chunk of rows of y once it is written. Row i of y is gathered in
/// registers from the rows of w that row i of a lists: one multiply-add chain per element,
/// from b (or 0) over the entries in stored order, so the result is bitwise the same for
/// every thread count. Requires y sized a.rows() x w.cols() (never resized) and aliasing
/// neither operand; finish runs concurrently on disjoint chunks, which the scheduler cuts.
/// Throws sar::invalid_argument on a shape mismatch, y untouched.
template <class T>
void sparse_product(const sparse_rows<T>& a, const_rows_ref<T> w, rows_ref<T> y,
                    const T* bias = nullptr, const row_finisher* finish = nullptr) {
  SAR_CHECK(a.cols() == w.rows() && y.rows() == a.rows() && y.cols() == w.cols(),
            invalid_argument, "sar::sparse_product: shapes ", a.rows(), "x", a.cols(),
            " (sparse) * ", w.rows(), "x", w.cols(), " -> ", y.rows(), "x", y.cols());
  const Eigen::Index n = a.rows();
  const double entries_per_row =
      n > 0 ? static_cast<double>(a.non_zeros()) / static_cast<double>(n) : 0.0;
  for_row_chunks(n, (entries_per_row + 1) * static_cast<double>(w.cols()),
                 [&](Eigen::Index begin, Eigen::Index end) {
                   for (Eigen::Index i = begin; i < end; ++i)
                     detail::gather_row<T>(a, i, w, bias, y.data() + i * y.outerStride());
                   if (finish != nullptr) (*finish)(begin, end);
                 });
}

/// out = a^T b (a: n x p sparse, b: n x q, out: p x q), a deterministic reduction over fixed
/// chunks of 4096 rows (detail::reduce_row_chunks: the chunks in parallel, joined in a fixed
/// tree). Within a chunk each row of b, in order, is added into the rows of the chunk's sum
/// that its row of a lists (detail::scatter_rows), the columns cut into ranges that run in
/// parallel when there are fewer chunks than threads (each range reads all of the chunk's
/// rows of b, and owns its rows of the sum). The chunks are fixed and a range's cut changes no
/// element's chain, so the result is bitwise the same for every thread count.
/// Assigns out (never resized; all 0 when n == 0); requires out aliasing neither operand and
/// a valid (sparse_rows::validate). Throws sar::invalid_argument on a shape mismatch, out
/// untouched.
template <class T>
void transposed_product(const sparse_rows<T>& a, const_rows_ref<T> b, rows_ref<T> out) {
  SAR_CHECK(a.rows() == b.rows() && out.rows() == a.cols() && out.cols() == b.cols(),
            invalid_argument, "sar::transposed_product: shapes (", a.rows(), "x", a.cols(),
            " sparse)^T * ", b.rows(), "x", b.cols(), " -> ", out.rows(), "x", out.cols());
  constexpr Eigen::Index chunk_rows = detail::reduction_chunk_rows;
  const Eigen::Index chunks = (a.rows() + chunk_rows - 1) / chunk_rows;
  // Column ranges per chunk: the threads the chunks leave idle, each range at least 64
  // columns wide; one range when a chunk has less than ~4M multiply-adds (each range reads all
  // of the chunk's rows of b and waits for a thread: on CiteSeer at width 16, 1.7M, two ranges
  // took longer than one).
  const Eigen::Index threads = std::max(1, tbb::this_task_arena::max_concurrency());
  const double chunk_work = static_cast<double>(a.non_zeros()) /
                            static_cast<double>(std::max<Eigen::Index>(chunks, 1)) *
                            static_cast<double>(b.cols());
  const Eigen::Index ranges =
      chunk_work < 4.0e6 ? 1
                         : std::clamp<Eigen::Index>(threads / std::max<Eigen::Index>(chunks, 1), 1,
                                                    std::max<Eigen::Index>(a.cols() / 64, 1));
  // acc (zero) += the rows [begin, end) of a^T b, over column ranges in parallel; each range
  // zeroes its rows of acc first when `zero`.
  const auto add_rows = [&](Eigen::Index begin, Eigen::Index end, rows_ref<T> acc, bool zero) {
    const std::vector<std::int32_t> cuts = detail::balanced_column_cuts(a, begin, end, ranges);
    const auto range = [&](Eigen::Index r) {
      if (zero) acc.middleRows(cuts[r], cuts[r + 1] - cuts[r]).setZero();
      detail::scatter_rows<T>(a, b, begin, end, cuts[r], cuts[r + 1], acc);
    };
    if (ranges == 1) range(0);
    else tbb::parallel_for(Eigen::Index{0}, ranges, range);
  };
  if (chunks <= 1) {  // straight into out (as reduce_row_chunks does), zeroed in parallel
    add_rows(0, a.rows(), out, true);
    return;
  }
  detail::reduce_row_chunks<T>(a.rows(), out, [&](Eigen::Index begin, Eigen::Index end,
                                                  rows_ref<T> acc) {
    add_rows(begin, end, acc, false);  // acc starts at zero
  });
}

}  // namespace sar
