// Sparse times dense: the aggregation kernel of every linear graph convolution.
//   spmm_add(a, x, out):           out += A x      (row i of out += sum of the rows of x listed
//                                                   in row i of A)
//   spmm_add(a, weights, x, out):  out += A_w x    (edge e of A scales its source row by
//                                                   weights[e])
//   spmm_add(block, halo, out):    the same for one graph_block, honouring its row convention:
//                                  out.row(block.local_row(k)) += sum of halo rows in edges
//                                  row k (out has one row per LOCAL node). What layers call.
// The transpose product (backward, dx += A^T dout) is the same kernel applied to the
// transposed CSR (graph_block::transposed), so no atomics are ever needed.
//
// Parallel over destination rows with oneTBB: the rows are cut into chunks of about equal
// edge count (a power-law degree distribution does not leave one thread with the hubs), and
// each destination row is summed by one thread in CSR order, so the result is bitwise the
// same for every thread count. Each row's sum runs over contiguous feature rows with Eigen's
// vectorised row operations, four source rows per pass over the destination row.
#pragma once

#include <algorithm>
#include <cstddef>
#include <span>
#include <type_traits>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/partitioner.h>
#include <tbb/task_arena.h>

#include "sar/core/error.hpp"
#include "sar/core/types.hpp"
#include "sar/dist/schedule.hpp"
#include "sar/graph/csr.hpp"

namespace sar {

namespace detail {

/// Is Derived an Eigen dense expression (matrix, Map, Ref, block)?
template <class Derived>
concept eigen_dense = std::is_base_of_v<Eigen::DenseBase<std::remove_cvref_t<Derived>>,
                                        std::remove_cvref_t<Derived>>;

/// Calls body(row_begin, row_end) on chunks of [0, a.num_rows) that hold about equal numbers
/// of edges (plus rows, so empty rows still cost something), in parallel.
template <class Body>
void for_edge_balanced_rows(const csr& a, Eigen::Index cols, Body&& body) {
  const node_t n = a.num_rows;
  if (n == 0) return;
  // Work of the whole product in scalar additions (one unit per row for the row itself).
  const double work = (static_cast<double>(a.num_edges()) + static_cast<double>(n)) *
                      static_cast<double>(std::max<Eigen::Index>(cols, 1));
  constexpr double min_chunk_work = 16384.0;  // below this a task costs more than it saves
  const auto threads = static_cast<std::size_t>(tbb::this_task_arena::max_concurrency());
  const std::size_t chunks = static_cast<std::size_t>(std::clamp<double>(
      work / min_chunk_work, 1.0, static_cast<double>(8 * threads)));
  if (chunks <= 1) {
    body(node_t{0}, n);
    return;
  }
  const double total = static_cast<double>(a.num_edges() + n);
  // Row where chunk c starts: the first row whose (offset + row) reaches c/chunks of the total.
  const auto chunk_start = [&](std::size_t c) -> node_t {
    if (c == 0) return 0;
    if (c >= chunks) return n;
    const double target = total * static_cast<double>(c) / static_cast<double>(chunks);
    node_t lo = 0, hi = n;  // smallest row r with offsets[r] + r >= target
    while (lo < hi) {
      const node_t mid = lo + (hi - lo) / 2;
      if (static_cast<double>(a.offsets[mid] + mid) < target) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  };
  tbb::parallel_for(
      tbb::blocked_range<std::size_t>(0, chunks, 1),
      [&](const tbb::blocked_range<std::size_t>& r) {
        for (std::size_t c = r.begin(); c != r.end(); ++c) {
          const node_t begin = chunk_start(c), end = chunk_start(c + 1);
          if (begin < end) body(begin, end);
        }
      },
      tbb::simple_partitioner());
}

/// Prefetches the rows of x listed in cols[0, count) (count <= 0: nothing), every cache line.
template <class X>
inline void prefetch_rows(const X& x, const node_t* cols, edge_t count) {
  const auto bytes = static_cast<std::size_t>(x.cols()) * sizeof(typename X::Scalar);
  for (edge_t k = 0; k < count; ++k) {
    const char* row = reinterpret_cast<const char*>(x.data() + cols[k] * x.outerStride());
#if defined(__GNUC__) || defined(__clang__)
    for (std::size_t line = 0; line < bytes; line += 64) __builtin_prefetch(row + line, 0, 1);
#else
    (void)row;
    (void)bytes;
#endif
  }
}

inline void check_spmm_shapes(const char* where, const csr& a, Eigen::Index x_rows,
                              Eigen::Index x_cols, Eigen::Index out_rows, Eigen::Index out_cols,
                              std::span<const node_t> rows = {}) {
  SAR_CHECK(x_rows == a.num_cols, invalid_argument, where, ": x has ", x_rows,
            " rows but A has ", a.num_cols, " columns");
  if (rows.empty()) {
    SAR_CHECK(out_rows == a.num_rows, invalid_argument, where, ": out has ", out_rows,
              " rows but A has ", a.num_rows, " rows");
  } else {
    SAR_CHECK(static_cast<node_t>(rows.size()) == a.num_rows && rows.front() >= 0 &&
                  rows.back() < out_rows,
              invalid_argument, where, ": compressed block of ", a.num_rows, " rows maps ",
              rows.size(), " rows into [", rows.front(), ", ", rows.back(), "], out has ",
              out_rows, " rows");
  }
  SAR_CHECK(x_cols == out_cols, invalid_argument, where, ": x has ", x_cols,
            " columns but out has ", out_cols);
}

/// out.row(row_of(i)) += row i of A x (row_of: identity when rows is null).
template <class T>
void spmm_rows_add(const csr& a, const node_t* rows, const_rows_ref<T> x, rows_ref<T> out) {
  if (x.cols() == 0) return;
  const edge_t* offsets = a.offsets.data();
  const node_t* columns = a.columns.data();
  // Gathered source rows are random accesses: prefetch the rows a few edges ahead when a row
  // spans at least one cache line (latency, not bandwidth, bounds a random gather).
  const bool prefetch = x.cols() * static_cast<Eigen::Index>(sizeof(T)) >= 64;
  constexpr edge_t prefetch_distance = 8;
  for_edge_balanced_rows(a, x.cols(), [&](node_t begin, node_t end) {
    const edge_t end_edge = offsets[end];
    for (node_t i = begin; i < end; ++i) {
      edge_t e = offsets[i];
      const edge_t stop = offsets[i + 1];
      if (e == stop) continue;
      auto acc = out.row(rows ? rows[i] : i);
      for (; e + 4 <= stop; e += 4) {
        if (prefetch) prefetch_rows(x, columns + e + prefetch_distance,
                                    std::min<edge_t>(4, end_edge - e - prefetch_distance));
        acc += (x.row(columns[e]) + x.row(columns[e + 1])) +
               (x.row(columns[e + 2]) + x.row(columns[e + 3]));
      }
      switch (stop - e) {
        case 3: acc += (x.row(columns[e]) + x.row(columns[e + 1])) + x.row(columns[e + 2]); break;
        case 2: acc += x.row(columns[e]) + x.row(columns[e + 1]); break;
        case 1: acc += x.row(columns[e]); break;
        default: break;
      }
    }
  });
}

}  // namespace detail

/// out += A x. Requires x.rows() == a.num_cols, out.rows() == a.num_rows, equal column counts,
/// out not aliasing x, columns of A inside [0, a.num_cols) (a valid CSR). Throws
/// sar::invalid_argument on a shape mismatch. T is given explicitly (spmm_add<float>(...));
/// the overload below deduces it from any Eigen row-major operands.
template <class T>
void spmm_add(const csr& a, std::type_identity_t<const_rows_ref<T>> x,
              std::type_identity_t<rows_ref<T>> out) {
  detail::check_spmm_shapes("sar::spmm_add", a, x.rows(), x.cols(), out.rows(), out.cols());
  detail::spmm_rows_add<T>(a, nullptr, x, out);
}

/// out += A_block halo for one graph_block: out.row(block.local_row(k)) += sum of the halo rows
/// listed in row k of *block.edges. out has one row per LOCAL node. Requires
/// halo.rows() == block.edges->num_cols, equal column counts, out not aliasing halo, and
/// either an uncompressed block with out.rows() == block.edges->num_rows or compressed rows
/// (strictly increasing) inside [0, out.rows()). Throws sar::invalid_argument on a shape
/// mismatch. Same parallelism and determinism as the CSR form.
template <class T>
void spmm_add(const graph_block& block, std::type_identity_t<const_rows_ref<T>> halo,
              std::type_identity_t<rows_ref<T>> out) {
  const csr& a = *block.edges;
  detail::check_spmm_shapes("sar::spmm_add (block)", a, halo.rows(), halo.cols(), out.rows(),
                            out.cols(), block.rows);
  detail::spmm_rows_add<T>(a, block.rows.empty() ? nullptr : block.rows.data(), halo, out);
}

/// out += A_w x with weights[e] scaling edge e (CSR order). Requires everything spmm_add does
/// and weights.size() == a.num_edges(). Throws sar::invalid_argument on a mismatch.
template <class T>
void spmm_add(const csr& a, std::span<const T> weights, std::type_identity_t<const_rows_ref<T>> x,
              std::type_identity_t<rows_ref<T>> out) {
  detail::check_spmm_shapes("sar::spmm_add (weighted)", a, x.rows(), x.cols(), out.rows(),
                            out.cols());
  SAR_CHECK(static_cast<edge_t>(weights.size()) == a.num_edges(), invalid_argument,
            "sar::spmm_add (weighted): ", weights.size(), " weights for ", a.num_edges(),
            " edges");
  if (x.cols() == 0) return;
  const edge_t* offsets = a.offsets.data();
  const node_t* columns = a.columns.data();
  const T* w = weights.data();
  detail::for_edge_balanced_rows(a, x.cols(), [&](node_t begin, node_t end) {
    for (node_t i = begin; i < end; ++i) {
      edge_t e = offsets[i];
      const edge_t stop = offsets[i + 1];
      if (e == stop) continue;
      auto acc = out.row(i);
      for (; e + 2 <= stop; e += 2)
        acc += w[e] * x.row(columns[e]) + w[e + 1] * x.row(columns[e + 1]);
      if (e < stop) acc += w[e] * x.row(columns[e]);
    }
  });
}

/// Deducing forms: any Eigen row-major dense operands of one scalar type (matrix, Map, Ref,
/// block of rows). out may be an rvalue block (out.middleRows(...)).
template <class X, class Out>
  requires detail::eigen_dense<X> && detail::eigen_dense<Out>
void spmm_add(const csr& a, const X& x, Out&& out) {
  using T = typename std::remove_cvref_t<X>::Scalar;
  static_assert(std::is_same_v<T, typename std::remove_cvref_t<Out>::Scalar>,
                "sar::spmm_add needs x and out of the same scalar type; cast one of them.");
  static_assert(std::remove_cvref_t<X>::IsRowMajor && std::remove_cvref_t<Out>::IsRowMajor,
                "sar::spmm_add needs row-major operands (sar::matrix<T>): a node's features "
                "must be one contiguous row.");
  spmm_add<T>(a, x, out);
}
template <class X, class Out>
  requires detail::eigen_dense<X> && detail::eigen_dense<Out>
void spmm_add(const graph_block& block, const X& halo, Out&& out) {
  using T = typename std::remove_cvref_t<X>::Scalar;
  static_assert(std::is_same_v<T, typename std::remove_cvref_t<Out>::Scalar>,
                "sar::spmm_add needs halo and out of the same scalar type; cast one of them.");
  static_assert(std::remove_cvref_t<X>::IsRowMajor && std::remove_cvref_t<Out>::IsRowMajor,
                "sar::spmm_add needs row-major operands (sar::matrix<T>): a node's features "
                "must be one contiguous row.");
  spmm_add<T>(block, halo, out);
}
template <class X, class Out>
  requires detail::eigen_dense<X> && detail::eigen_dense<Out>
void spmm_add(const csr& a, std::span<const typename std::remove_cvref_t<X>::Scalar> weights,
              const X& x, Out&& out) {
  using T = typename std::remove_cvref_t<X>::Scalar;
  static_assert(std::is_same_v<T, typename std::remove_cvref_t<Out>::Scalar>,
                "sar::spmm_add needs weights, x and out of the same scalar type.");
  spmm_add<T>(a, weights, x, out);
}

}  // namespace sar
