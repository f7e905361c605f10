// Helpers shared by the graph convolutions (gcn.hpp, sage.hpp): degree scalings, dense
// products parallel over node rows, argument checks. Not part of the public interface.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <span>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/parallel_reduce.h>
#include <tbb/task_arena.h>

#include "sar/core/error.hpp"
#include "sar/core/types.hpp"
#include "sar/dist/schedule.hpp"

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

/// Number of row chunks worth running in parallel for `work` scalar operations.
inline Eigen::Index row_chunks(Eigen::Index rows, double work) {
  constexpr double min_chunk_work = 32768.0;
  const auto threads = static_cast<double>(tbb::this_task_arena::max_concurrency());
  return static_cast<Eigen::Index>(std::clamp(work / min_chunk_work, 1.0,
                                              std::min(4.0 * threads,
                                                       static_cast<double>(std::max<Eigen::Index>(rows, 1)))));
}

/// out (+)= a * b, parallel over row chunks of a. out must already have a.rows() x b.cols()
/// when accumulate is true; it is resized otherwise. Rows are independent, so the result does
/// not depend on the thread count.
template <class T>
void matmul(const_rows_ref<T> a, const_rows_ref<T> b, matrix<T>& out, bool accumulate = false) {
  if (!accumulate) out.resize(a.rows(), b.cols());
  const Eigen::Index n = a.rows();
  const Eigen::Index chunks =
      row_chunks(n, static_cast<double>(n) * static_cast<double>(a.cols() * b.cols()));
  tbb::parallel_for(Eigen::Index{0}, chunks, [&](Eigen::Index c) {
    const Eigen::Index begin = n * c / chunks, end = n * (c + 1) / chunks;
    if (begin == end) return;
    auto rows = out.middleRows(begin, end - begin);
    if (accumulate) rows.noalias() += a.middleRows(begin, end - begin) * b;
    else rows.noalias() = a.middleRows(begin, end - begin) * b;
  });
}

/// a^T b (a: n x p, b: n x q), summed over fixed row chunks (fixed so the summation order,
/// hence the result, does not depend on the thread count). Returns a p x q matrix.
template <class T>
matrix<T> matmul_tn(const_rows_ref<T> a, const_rows_ref<T> b) {
  const Eigen::Index n = a.rows();
  const Eigen::Index chunks =
      row_chunks(n, static_cast<double>(n) * static_cast<double>(a.cols() * b.cols()));
  std::vector<matrix<T>> partial(static_cast<std::size_t>(chunks));
  tbb::parallel_for(Eigen::Index{0}, chunks, [&](Eigen::Index c) {
    const Eigen::Index begin = n * c / chunks, end = n * (c + 1) / chunks;
    partial[static_cast<std::size_t>(c)].noalias() =
        a.middleRows(begin, end - begin).transpose() * b.middleRows(begin, end - begin);
  });
  matrix<T> sum = std::move(partial[0]);
  for (std::size_t c = 1; c < partial.size(); ++c) sum += partial[c];
  return sum;
}

/// Rows of m scaled by s (m_i *= s_i).
template <class T>
void scale_rows(matrix<T>& m, const column_vector<T>& s) {
  m.array().colwise() *= s.array();
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

}  // namespace sar::detail
