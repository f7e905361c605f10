// Building CSR graphs from edge lists, in parallel with oneTBB, deterministically
// (the result does not depend on the number of threads).
#pragma once

#include <atomic>
#include <vector>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/parallel_scan.h>

#include "sar/core/error.hpp"
#include "sar/graph/csr.hpp"

namespace sar {

/// Directed edges src[k] -> dst[k] over nodes [0, num_nodes).
struct edge_list {
  /// Nodes are [0, num_nodes).
  node_t num_nodes = 0;
  /// Source of edge k.
  std::vector<node_t> src;
  /// Destination of edge k.
  std::vector<node_t> dst;
  /// Number of edges.
  std::size_t size() const { return src.size(); }
  /// Appends the edge s -> d.
  void push_back(node_t s, node_t d) {
    src.push_back(s);
    dst.push_back(d);
  }
};

enum class self_loop_policy {
  /// What build_csr does with self-loops.
  keep,    ///< leave self-loops as they come
  remove,  ///< drop every self-loop
  add,     ///< exactly one self-loop per node (GCN's A + I)
};

/// How build_csr shapes the graph.
struct build_options {
  bool symmetrise = false;  ///< add the reverse of every edge
  bool deduplicate = true;  ///< merge parallel edges
  /// What to do with self-loops.
  self_loop_policy self_loops = self_loop_policy::keep;
};

namespace detail {
/// Exclusive prefix sum of counts[0..n) into offsets[0..n] (offsets[0] = 0), in parallel.
inline void exclusive_scan(const std::vector<edge_t>& counts, std::vector<edge_t>& offsets) {
  const std::size_t n = counts.size();
  offsets.assign(n + 1, 0);
  tbb::parallel_scan(
      tbb::blocked_range<std::size_t>(0, n), edge_t{0},
      [&](const tbb::blocked_range<std::size_t>& r, edge_t sum, bool final_scan) {
        for (std::size_t i = r.begin(); i != r.end(); ++i) {
          sum += counts[i];
          if (final_scan) offsets[i + 1] = sum;
        }
        return sum;
      },
      [](edge_t a, edge_t b) { return a + b; });
}
}  // namespace detail

/// About the bytes build_csr allocates at its peak for `num_nodes` nodes and `num_edges`
/// edges: row counts and offsets, and the columns (twice as many edges when symmetrising),
/// for allocate_checked and check_memory. Doubles: no overflow for any count.
inline double build_csr_bytes(double num_nodes, double num_edges,
                              const build_options& options = {}) {
  return 3 * sizeof(edge_t) * (num_nodes + 1) +
         2 * sizeof(node_t) * num_edges * (options.symmetrise ? 2 : 1);
}
/// build_csr_bytes for build_csr(edges, options).
inline double build_csr_bytes(const edge_list& edges, const build_options& options = {}) {
  return build_csr_bytes(static_cast<double>(edges.num_nodes), static_cast<double>(edges.size()),
                         options);
}

/// Builds the in-edge CSR (row = destination, sorted columns = sources) of `edges`.
/// Throws sar::invalid_argument naming the first edge whose id is outside [0, num_nodes).
inline csr build_csr(const edge_list& edges, const build_options& options = {}) {
  const node_t n = edges.num_nodes;
  const std::size_t m = edges.size();
  SAR_CHECK(n >= 0, invalid_argument, "sar::build_csr: negative node count ", n);
  SAR_CHECK(edges.dst.size() == m, invalid_argument, "sar::build_csr: ", m, " sources but ",
            edges.dst.size(), " destinations");
  for (std::size_t k = 0; k < m; ++k)
    SAR_CHECK(edges.src[k] >= 0 && edges.src[k] < n && edges.dst[k] >= 0 && edges.dst[k] < n,
              invalid_argument, "sar::build_csr: edge ", k, " (", edges.src[k], " -> ",
              edges.dst[k], ") has an id outside [0, ", n, ")");

  // 1. Count entries per row, scatter them (order within a row is fixed by the sort below).
  std::vector<edge_t> counts(n, 0);
  auto count = [&](node_t row) { std::atomic_ref(counts[row]).fetch_add(1, std::memory_order_relaxed); };
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, m), [&](const auto& r) {
    for (std::size_t k = r.begin(); k != r.end(); ++k) {
      count(edges.dst[k]);
      if (options.symmetrise) count(edges.src[k]);
    }
  });
  std::vector<edge_t> raw_offsets;
  detail::exclusive_scan(counts, raw_offsets);
  std::vector<node_t> raw_columns(raw_offsets.back());
  std::vector<edge_t> cursor(raw_offsets.begin(), raw_offsets.end() - 1);
  auto place = [&](node_t row, node_t column) {
    raw_columns[std::atomic_ref(cursor[row]).fetch_add(1, std::memory_order_relaxed)] = column;
  };
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, m), [&](const auto& r) {
    for (std::size_t k = r.begin(); k != r.end(); ++k) {
      place(edges.dst[k], edges.src[k]);
      if (options.symmetrise) place(edges.src[k], edges.dst[k]);
    }
  });
  cursor = {};

  // 2. Per row: sort, deduplicate, apply the self-loop policy; count what remains.
  const bool add_loops = options.self_loops == self_loop_policy::add;
  const bool drop_loops = options.self_loops != self_loop_policy::keep;
  tbb::parallel_for(tbb::blocked_range<node_t>(0, n), [&](const auto& r) {
    for (node_t i = r.begin(); i != r.end(); ++i) {
      auto first = raw_columns.begin() + raw_offsets[i];
      auto last = raw_columns.begin() + raw_offsets[i + 1];
      std::sort(first, last);
      if (options.deduplicate) last = std::unique(first, last);
      if (drop_loops) last = std::remove(first, last, i);
      counts[i] = (last - first) + (add_loops ? 1 : 0);
    }
  });

  // 3. Compact into the final arrays.
  csr out;
  out.num_rows = n;
  out.num_cols = n;
  detail::exclusive_scan(counts, out.offsets);
  out.columns.resize(out.offsets.back());
  tbb::parallel_for(tbb::blocked_range<node_t>(0, n), [&](const auto& r) {
    for (node_t i = r.begin(); i != r.end(); ++i) {
      const auto first = raw_columns.begin() + raw_offsets[i];
      const edge_t kept = counts[i] - (add_loops ? 1 : 0);
      auto to = out.columns.begin() + out.offsets[i];
      if (!add_loops) {
        std::copy(first, first + kept, to);
        continue;
      }
      auto split = std::lower_bound(first, first + kept, i);  // keep columns sorted
      to = std::copy(first, split, to);
      *to++ = i;
      std::copy(split, first + kept, to);
    }
  });
  return out;
}

/// The same graph with exactly one self-loop per row (add) or none (remove); keep returns a
/// copy. Row i's own node is column first_column + i (0 for a whole graph; a part's first
/// global id for a graph_part's in-edges). Requires sorted rows; they stay sorted.
inline csr with_self_loops(const csr& graph, self_loop_policy policy, node_t first_column = 0) {
  if (policy == self_loop_policy::keep) return graph;
  const bool add = policy == self_loop_policy::add;
  std::vector<edge_t> counts(graph.num_rows);
  tbb::parallel_for(tbb::blocked_range<node_t>(0, graph.num_rows), [&](const auto& r) {
    for (node_t i = r.begin(); i != r.end(); ++i) {
      const auto row = graph.row(i);
      counts[i] = static_cast<edge_t>(row.size()) -
                  std::count(row.begin(), row.end(), first_column + i) + (add ? 1 : 0);
    }
  });
  csr out;
  out.num_rows = graph.num_rows;
  out.num_cols = graph.num_cols;
  detail::exclusive_scan(counts, out.offsets);
  out.columns.resize(out.offsets.back());
  tbb::parallel_for(tbb::blocked_range<node_t>(0, graph.num_rows), [&](const auto& r) {
    for (node_t i = r.begin(); i != r.end(); ++i) {
      const node_t self = first_column + i;
      const auto row = graph.row(i);
      auto to = out.columns.begin() + out.offsets[i];
      auto split = std::lower_bound(row.begin(), row.end(), self);
      to = std::copy(row.begin(), split, to);
      if (add) *to++ = self;
      while (split != row.end() && *split == self) ++split;
      std::copy(split, row.end(), to);
    }
  });
  return out;
}

/// In-degree of every row (number of stored entries).
inline std::vector<node_t> in_degrees(const csr& graph) {
  std::vector<node_t> degrees(graph.num_rows);
  for (node_t i = 0; i < graph.num_rows; ++i) degrees[i] = graph.degree(i);
  return degrees;
}

/// Out-degree of every column (number of rows that list it).
inline std::vector<node_t> out_degrees(const csr& graph) {
  std::vector<node_t> degrees(graph.num_cols, 0);
  for (node_t c : graph.columns) ++degrees[c];
  return degrees;
}

/// The transpose: row j lists the rows i that list j, in increasing order.
inline csr transpose(const csr& graph) {
  csr out;
  out.num_rows = graph.num_cols;
  out.num_cols = graph.num_rows;
  std::vector<edge_t> counts(graph.num_cols, 0);
  for (node_t c : graph.columns) ++counts[c];
  detail::exclusive_scan(counts, out.offsets);
  out.columns.resize(graph.num_edges());
  std::vector<edge_t> cursor(out.offsets.begin(), out.offsets.end() - 1);
  for (node_t i = 0; i < graph.num_rows; ++i)  // serial: rows come out sorted
    for (node_t c : graph.row(i)) out.columns[cursor[c]++] = i;
  return out;
}

/// True if every edge i <- j has its reverse j <- i (requires sorted rows).
inline bool is_symmetric(const csr& graph) {
  if (graph.num_rows != graph.num_cols) return false;
  for (node_t i = 0; i < graph.num_rows; ++i)
    for (node_t j : graph.row(i)) {
      const auto r = graph.row(j);
      if (!std::binary_search(r.begin(), r.end(), i)) return false;
    }
  return true;
}

}  // namespace sar
