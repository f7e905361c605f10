// Compressed sparse rows: the one graph format of sar.
// Convention: row i lists the SOURCES of the edges INTO node i (in-edges), so aggregation is
// out_i = sum over columns j of row i of x_j. For a symmetric graph rows are also out-edges.
#pragma once

#include <algorithm>
#include <span>
#include <vector>

#include "sar/core/error.hpp"
#include "sar/core/types.hpp"

namespace sar {

/// A sparse graph or matrix in compressed sparse rows: row i lists the sources (columns) of
/// the edges into node i (see the top of this file).
struct csr {
  /// Number of rows (destinations).
  node_t num_rows = 0;
  /// Number of columns (sources); columns are in [0, num_cols).
  node_t num_cols = 0;
  std::vector<edge_t> offsets{0};  ///< num_rows + 1 entries, offsets[0] = 0, non-decreasing
  std::vector<node_t> columns;     ///< offsets.back() entries, each in [0, num_cols)

  /// Number of edges (stored entries).
  edge_t num_edges() const { return offsets.back(); }
  /// Number of entries of row `row` (its in-degree).
  node_t degree(node_t row) const { return offsets[row + 1] - offsets[row]; }
  /// The columns of row i (its sources), in stored order.
  std::span<const node_t> row(node_t i) const {
    return {columns.data() + offsets[i], static_cast<std::size_t>(degree(i))};
  }
  /// Bytes the two arrays hold allocated (their capacity, not their size).
  std::size_t memory_bytes() const {
    return offsets.capacity() * sizeof(edge_t) + columns.capacity() * sizeof(node_t);
  }
  /// Same shape and the same arrays, entry for entry.
  friend bool operator==(const csr&, const csr&) = default;

  /// Throws sar::invalid_argument naming `where` and the first broken invariant.
  void validate(const char* where = "sar::csr::validate") const {
    SAR_CHECK(num_rows >= 0 && num_cols >= 0, invalid_argument, where, ": negative shape ",
              num_rows, " x ", num_cols);
    SAR_CHECK(offsets.size() == static_cast<std::size_t>(num_rows) + 1, invalid_argument, where,
              ": offsets has ", offsets.size(), " entries, expected ", num_rows + 1);
    SAR_CHECK(offsets.front() == 0, invalid_argument, where, ": offsets[0] = ", offsets.front());
    for (node_t i = 0; i < num_rows; ++i)
      SAR_CHECK(offsets[i] <= offsets[i + 1], invalid_argument, where, ": offsets decrease at row ",
                i);
    SAR_CHECK(columns.size() == static_cast<std::size_t>(offsets.back()), invalid_argument, where,
              ": ", columns.size(), " columns but offsets end at ", offsets.back());
    const auto bad = std::find_if(columns.begin(), columns.end(),
                                  [&](node_t c) { return c < 0 || c >= num_cols; });
    SAR_CHECK(bad == columns.end(), invalid_argument, where, ": column ",
              bad == columns.end() ? 0 : *bad, " at edge ", bad - columns.begin(),
              " outside [0, ", num_cols, ")");
  }
};

}  // namespace sar
