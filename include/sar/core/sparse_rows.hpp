// Sparse input features: a matrix stored as compressed sparse rows with values. Bag-of-words
// features (Cora, CiteSeer, PubMed, many industrial graphs) are well under 1% non-zero; a
// model's first layer reads them in this form (x W as a sparse x dense product, its weight
// gradient as x^T dH) and never forms the dense matrix (sar/kernels/sparse_dense.hpp).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "sar/core/error.hpp"
#include "sar/core/types.hpp"

namespace sar {

/// The density (non-zero fraction) up to which sar's programs keep features as sparse rows by
/// default: well above bag-of-words densities (Cora 1.3%, CiteSeer 0.9%), where the sparse first
/// layer was 3.7-15x faster than the dense one (bench/RESULTS.md §29).
inline constexpr double sparse_features_density = 0.05;

/// A rows x cols matrix of which only the listed entries may be non-zero: row i holds the
/// values values[offsets[i] .. offsets[i + 1]) in the columns columns[same range]. Columns
/// within a row are increasing (no duplicates); a stored value may be 0 (dropout keeps the
/// structure and zeroes values).
template <class T>
struct sparse_rows {
  Eigen::Index num_rows = 0;          ///< rows (nodes)
  Eigen::Index num_cols = 0;          ///< columns (the feature width)
  std::vector<edge_t> offsets{0};     ///< num_rows + 1 entries, from 0, non-decreasing
  std::vector<std::int32_t> columns;  ///< offsets.back() entries, increasing within a row
  std::vector<T> values;              ///< one per column entry

  /// Rows, as an Eigen matrix names them.
  Eigen::Index rows() const { return num_rows; }
  /// Columns, as an Eigen matrix names them.
  Eigen::Index cols() const { return num_cols; }
  /// Stored entries.
  edge_t non_zeros() const { return offsets.back(); }
  /// Stored entries over rows x cols (0 for an empty matrix).
  double density() const {
    const double all = static_cast<double>(num_rows) * static_cast<double>(num_cols);
    return all > 0 ? static_cast<double>(non_zeros()) / all : 0.0;
  }
  /// Bytes of the three arrays (their capacity).
  std::size_t memory_bytes() const {
    return offsets.capacity() * sizeof(edge_t) + columns.capacity() * sizeof(std::int32_t) +
           values.capacity() * sizeof(T);
  }
  /// Same shape and entries, bitwise.
  friend bool operator==(const sparse_rows&, const sparse_rows&) = default;

  /// Throws sar::invalid_argument naming `where` and the first broken invariant (shape,
  /// offsets, a column outside [0, cols) or not increasing within its row).
  void validate(const char* where = "sar::sparse_rows::validate") const {
    SAR_CHECK(num_rows >= 0 && num_cols >= 0 && num_cols <= INT32_MAX, invalid_argument, where,
              ": shape ", num_rows, " x ", num_cols);
    SAR_CHECK(offsets.size() == static_cast<std::size_t>(num_rows) + 1 && offsets.front() == 0,
              invalid_argument, where, ": ", offsets.size(), " offsets for ", num_rows,
              " rows (expected rows + 1, from 0)");
    SAR_CHECK(columns.size() == static_cast<std::size_t>(offsets.back()) &&
                  values.size() == columns.size(),
              invalid_argument, where, ": ", columns.size(), " columns and ", values.size(),
              " values, but the offsets end at ", offsets.back());
    for (Eigen::Index i = 0; i < num_rows; ++i)  // first, so that no row reaches past the end
      SAR_CHECK(offsets[i] <= offsets[i + 1], invalid_argument, where,
                ": offsets decrease at row ", i);
    for (Eigen::Index i = 0; i < num_rows; ++i) {
      for (edge_t k = offsets[i]; k < offsets[i + 1]; ++k)
        SAR_CHECK(columns[k] >= 0 && columns[k] < num_cols &&
                      (k == offsets[i] || columns[k - 1] < columns[k]),
                  invalid_argument, where, ": row ", i, " lists column ", columns[k],
                  " (columns must be increasing within [0, ", num_cols, "))");
    }
  }
};

/// The fraction of non-zero entries of `dense` (0 for an empty matrix).
template <class T>
double density(const_rows_ref<T> dense) {
  const double all = static_cast<double>(dense.size());
  if (all == 0) return 0.0;
  std::int64_t non_zero = 0;
  for (Eigen::Index i = 0; i < dense.rows(); ++i)
    for (Eigen::Index j = 0; j < dense.cols(); ++j) non_zero += dense(i, j) != T(0);
  return static_cast<double>(non_zero) / all;
}

/// The non-zero entries of `dense` as sparse rows of U (values converted). Requires
/// dense.cols() <= INT32_MAX; throws sar::invalid_argument otherwise.
template <class U, class T>
sparse_rows<U> to_sparse_rows(const_rows_ref<T> dense) {
  SAR_CHECK(dense.cols() <= INT32_MAX, invalid_argument, "sar::to_sparse_rows: ", dense.cols(),
            " columns");
  sparse_rows<U> s;
  s.num_rows = dense.rows();
  s.num_cols = dense.cols();
  s.offsets.resize(static_cast<std::size_t>(s.num_rows) + 1);
  for (Eigen::Index i = 0; i < dense.rows(); ++i) {
    for (Eigen::Index j = 0; j < dense.cols(); ++j)
      if (dense(i, j) != T(0)) {
        s.columns.push_back(static_cast<std::int32_t>(j));
        s.values.push_back(static_cast<U>(dense(i, j)));
      }
    s.offsets[static_cast<std::size_t>(i) + 1] = static_cast<edge_t>(s.columns.size());
  }
  s.columns.shrink_to_fit();
  s.values.shrink_to_fit();
  return s;
}

/// `sparse` as a dense matrix of U (zeros where no entry is stored).
template <class U, class T>
matrix<U> to_dense(const sparse_rows<T>& sparse) {
  matrix<U> dense = matrix<U>::Zero(sparse.num_rows, sparse.num_cols);
  for (Eigen::Index i = 0; i < sparse.num_rows; ++i)
    for (edge_t k = sparse.offsets[i]; k < sparse.offsets[i + 1]; ++k)
      dense(i, sparse.columns[k]) = static_cast<U>(sparse.values[k]);
  return dense;
}

/// `sparse` with its values converted to U (same structure).
template <class U, class T>
sparse_rows<U> cast_values(const sparse_rows<T>& sparse) {
  sparse_rows<U> s{sparse.num_rows, sparse.num_cols, sparse.offsets, sparse.columns, {}};
  s.values.assign(sparse.values.begin(), sparse.values.end());
  return s;
}

/// The rows `rows` of `sparse`, in that order (a minibatch's input rows). Requires every row
/// in [0, sparse.rows()) (not checked).
template <class T>
sparse_rows<T> select_rows(const sparse_rows<T>& sparse, std::span<const node_t> rows) {
  sparse_rows<T> s;
  s.num_rows = static_cast<Eigen::Index>(rows.size());
  s.num_cols = sparse.num_cols;
  s.offsets.resize(rows.size() + 1);
  for (std::size_t r = 0; r < rows.size(); ++r)
    s.offsets[r + 1] = s.offsets[r] + sparse.offsets[rows[r] + 1] - sparse.offsets[rows[r]];
  s.columns.resize(static_cast<std::size_t>(s.offsets.back()));
  s.values.resize(s.columns.size());
  for (std::size_t r = 0; r < rows.size(); ++r) {
    const auto from = sparse.offsets[rows[r]], to = sparse.offsets[rows[r] + 1];
    std::copy(sparse.columns.begin() + from, sparse.columns.begin() + to,
              s.columns.begin() + s.offsets[r]);
    std::copy(sparse.values.begin() + from, sparse.values.begin() + to,
              s.values.begin() + s.offsets[r]);
  }
  return s;
}

}  // namespace sar
