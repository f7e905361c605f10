// Sparse matrices with values and their product: the engine of matrix-based bulk sampling
// (docs/algorithms.md §7). Row-wise (Gustavson) SpGEMM over oneTBB: each output row is
// accumulated in a per-thread dense buffer, its columns sorted (a row of a with one entry,
// as in sampling's selections, copies its row of b instead), and the rows of a chunk
// written to the chunk's own buffers before one parallel copy into the result, so offsets
// are 64-bit and nothing is counted twice. An output entry sums its contributions in the
// order of a's row (then b's), whatever the threads: the product is deterministic.
#pragma once

#include <algorithm>
#include <cstddef>
#include <functional>
#include <span>
#include <utility>
#include <vector>

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/enumerable_thread_specific.h>
#include <oneapi/tbb/parallel_for.h>

#include "sar/core/error.hpp"
#include "sar/core/types.hpp"
#include "sar/graph/csr.hpp"

namespace sar {

/// A sparse matrix: a CSR pattern (columns sorted within each row for what spgemm returns)
/// and one value per entry.
struct sparse_matrix {
  /// The rows, columns and entries.
  csr pattern;
  std::vector<double> values;  ///< pattern.num_edges() entries

  /// Number of rows.
  node_t rows() const { return pattern.num_rows; }
  /// Number of columns.
  node_t cols() const { return pattern.num_cols; }
  /// Number of stored entries.
  edge_t nonzeros() const { return pattern.num_edges(); }
  /// The columns of row i.
  std::span<const node_t> row_columns(node_t i) const { return pattern.row(i); }
  /// The values of row i (aligned with row_columns(i)).
  std::span<const double> row_values(node_t i) const {
    return {values.data() + pattern.offsets[i], static_cast<std::size_t>(pattern.degree(i))};
  }
  /// Same pattern and values.
  friend bool operator==(const sparse_matrix&, const sparse_matrix&) = default;

  /// Throws sar::invalid_argument naming `where` if the pattern is broken or the value count
  /// differs from its entry count.
  void validate(const char* where) const {
    pattern.validate(where);
    SAR_CHECK(values.size() == static_cast<std::size_t>(pattern.num_edges()), invalid_argument,
              where, ": ", values.size(), " values for ", pattern.num_edges(), " entries");
  }
};

/// A sparse matrix without a copy: a pattern and its values, or no values (every entry 1:
/// a graph's adjacency as it is stored).
struct sparse_view {
  /// The rows, columns and entries (not owned: it must outlive the view).
  const csr& pattern;
  std::span<const double> values = {};  ///< empty: all ones

  /// A view of `p` with values `v` (empty: all ones).
  sparse_view(const csr& p, std::span<const double> v = {}) : pattern(p), values(v) {}
  /// A view of `m` (implicit, so a sparse_matrix passes where a view is taken).
  sparse_view(const sparse_matrix& m) : pattern(m.pattern), values(m.values) {}  // NOLINT

  /// Number of rows.
  node_t rows() const { return pattern.num_rows; }
  /// Number of columns.
  node_t cols() const { return pattern.num_cols; }
  /// The value of entry e (1 without values).
  double value(edge_t e) const { return values.empty() ? 1.0 : values[e]; }
};

/// A selection matrix: row r has a single 1 in column columns[r] (num_cols columns).
/// Throws sar::invalid_argument for a column outside [0, num_cols).
inline sparse_matrix selection_matrix(std::span<const node_t> columns, node_t num_cols) {
  sparse_matrix q;
  q.pattern.num_rows = static_cast<node_t>(columns.size());
  q.pattern.num_cols = num_cols;
  q.pattern.offsets.resize(columns.size() + 1);
  for (std::size_t r = 0; r <= columns.size(); ++r) q.pattern.offsets[r] = static_cast<edge_t>(r);
  q.pattern.columns.assign(columns.begin(), columns.end());
  q.values.assign(columns.size(), 1.0);
  q.pattern.validate("sar::selection_matrix");
  return q;
}

/// c = a b. Requires a.cols() == b.rows() (throws sar::invalid_argument otherwise). Output
/// columns are sorted within each row; entries whose contributions sum to exactly zero are
/// kept (the pattern is the structural product). Parallel over rows. A row of a with one
/// entry (a selection, as sampling's Q) copies its row of b, scaled, when that row is strictly
/// increasing; other rows accumulate in a dense row of b.cols() entries per thread, made on
/// first use.
inline sparse_matrix spgemm(sparse_view a, sparse_view b) {
  constexpr const char* where = "sar::spgemm";
  SAR_CHECK(a.cols() == b.rows(), invalid_argument, where, ": ", a.rows(), " x ", a.cols(),
            " times ", b.rows(), " x ", b.cols());
  const node_t rows = a.rows();
  // Rows in chunks of about equal work (entries of b visited), each chunk one task.
  std::vector<edge_t> work(static_cast<std::size_t>(rows) + 1, 0);
  for (node_t i = 0; i < rows; ++i) {
    edge_t w = 1;
    for (node_t k : a.pattern.row(i)) w += b.pattern.degree(k);
    work[i + 1] = work[i] + w;
  }
  const edge_t grain = std::max<edge_t>(work.back() / 256, 4096);
  std::vector<node_t> chunk_begin{0};
  for (node_t i = 0; i < rows; ++i)
    if (work[i + 1] - work[chunk_begin.back()] >= grain) chunk_begin.push_back(i + 1);
  if (chunk_begin.back() != rows) chunk_begin.push_back(rows);
  const std::size_t chunks = chunk_begin.size() - 1;

  struct chunk_out {
    std::vector<edge_t> row_nonzeros;
    std::vector<node_t> columns;
    std::vector<double> values;
  };
  std::vector<chunk_out> out(chunks);
  struct accumulator {
    std::vector<double> value;
    std::vector<char> seen;
    std::vector<node_t> touched;
  };
  tbb::enumerable_thread_specific<accumulator> accumulators;
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, chunks, 1), [&](const auto& range) {
    for (std::size_t c = range.begin(); c != range.end(); ++c) {
      chunk_out& o = out[c];
      std::size_t copied = 0;  // entries of the rows copied whole (below): exact
      for (node_t i = chunk_begin[c]; i < chunk_begin[c + 1]; ++i)
        if (a.pattern.degree(i) == 1)
          copied += static_cast<std::size_t>(
              b.pattern.degree(a.pattern.columns[a.pattern.offsets[i]]));
      o.columns.reserve(copied);
      o.values.reserve(copied);
      for (node_t i = chunk_begin[c]; i < chunk_begin[c + 1]; ++i) {
        if (a.pattern.degree(i) == 1) {
          const edge_t e = a.pattern.offsets[i];
          const auto row = b.pattern.row(a.pattern.columns[e]);
          if (std::adjacent_find(row.begin(), row.end(), std::greater_equal<>()) == row.end()) {
            const edge_t f0 = b.pattern.offsets[a.pattern.columns[e]];
            o.row_nonzeros.push_back(static_cast<edge_t>(row.size()));
            o.columns.insert(o.columns.end(), row.begin(), row.end());
            for (std::size_t f = 0; f < row.size(); ++f)
              o.values.push_back(a.value(e) * b.value(f0 + static_cast<edge_t>(f)));
            continue;
          }
        }
        accumulator& acc = accumulators.local();
        if (acc.value.size() != static_cast<std::size_t>(b.cols())) {
          acc.value.assign(static_cast<std::size_t>(b.cols()), 0.0);
          acc.seen.assign(static_cast<std::size_t>(b.cols()), 0);
        }
        for (edge_t e = a.pattern.offsets[i]; e < a.pattern.offsets[i + 1]; ++e) {
          const node_t k = a.pattern.columns[e];
          const double a_value = a.value(e);
          for (edge_t f = b.pattern.offsets[k]; f < b.pattern.offsets[k + 1]; ++f) {
            const node_t j = b.pattern.columns[f];
            if (!acc.seen[j]) {
              acc.seen[j] = 1;
              acc.touched.push_back(j);
            }
            acc.value[j] += a_value * b.value(f);
          }
        }
        std::sort(acc.touched.begin(), acc.touched.end());
        o.row_nonzeros.push_back(static_cast<edge_t>(acc.touched.size()));
        for (node_t j : acc.touched) {
          o.columns.push_back(j);
          o.values.push_back(acc.value[j]);
          acc.value[j] = 0.0;
          acc.seen[j] = 0;
        }
        acc.touched.clear();
      }
    }
  });

  sparse_matrix c;
  c.pattern.num_rows = rows;
  c.pattern.num_cols = b.cols();
  c.pattern.offsets.assign(static_cast<std::size_t>(rows) + 1, 0);
  std::vector<edge_t> chunk_offset(chunks + 1, 0);
  for (std::size_t k = 0; k < chunks; ++k) {
    chunk_offset[k + 1] = chunk_offset[k] + static_cast<edge_t>(out[k].columns.size());
    edge_t at = chunk_offset[k];
    for (node_t i = chunk_begin[k]; i < chunk_begin[k + 1]; ++i) {
      at += out[k].row_nonzeros[static_cast<std::size_t>(i - chunk_begin[k])];
      c.pattern.offsets[i + 1] = at;
    }
  }
  c.pattern.columns.resize(static_cast<std::size_t>(chunk_offset.back()));
  c.values.resize(static_cast<std::size_t>(chunk_offset.back()));
  tbb::parallel_for(std::size_t{0}, chunks, [&](std::size_t k) {
    std::copy(out[k].columns.begin(), out[k].columns.end(),
              c.pattern.columns.begin() + chunk_offset[k]);
    std::copy(out[k].values.begin(), out[k].values.end(), c.values.begin() + chunk_offset[k]);
  });
  return c;
}

}  // namespace sar
