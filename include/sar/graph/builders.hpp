// Building CSR graphs from edge lists, in parallel with oneTBB, deterministically
// (the result does not depend on the number of threads).
#pragma once

#include <algorithm>
#include <atomic>
#include <numeric>
#include <span>
#include <tuple>
#include <utility>
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

/// Sorts one CSR row's column keys and permutes payload[a] along with keys[a]: the pairs
/// (keys[a], payload[a]) end in increasing order, so equal keys (parallel edges) keep the
/// order of an increasing payload. `pairs` is scratch, reused across rows. Requires
/// keys.size() == payload.size().
inline void sort_row_with_payload(std::span<node_t> keys, std::span<edge_t> payload,
                                  std::vector<std::pair<node_t, edge_t>>& pairs) {
  pairs.clear();
  for (std::size_t a = 0; a < keys.size(); ++a) pairs.emplace_back(keys[a], payload[a]);
  std::sort(pairs.begin(), pairs.end());
  for (std::size_t a = 0; a < keys.size(); ++a) std::tie(keys[a], payload[a]) = pairs[a];
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
/// With `origins` (for edge data: take_edge_rows): assigns, for each stored entry, the index
/// k of the input edge it came from: the edge itself or, when symmetrising, the edge it
/// reverses; among parallel edges merged by deduplicate the earliest given edge wins, and a
/// given edge wins over a reversed one; a self-loop added by self_loop_policy::add is -1.
/// Throws sar::invalid_argument naming the first edge whose id is outside [0, num_nodes).
inline csr build_csr(const edge_list& edges, const build_options& options = {},
                     std::vector<edge_t>* origins = nullptr) {
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
  // With origins, each entry's code: k for input edge k, m + k for its reverse (so sorting by
  // (column, code) puts the earliest given edge first among equal columns, reverses after).
  std::vector<edge_t> raw_codes(origins != nullptr ? raw_columns.size() : 0);
  std::vector<edge_t> cursor(raw_offsets.begin(), raw_offsets.end() - 1);
  auto place = [&](node_t row, node_t column, edge_t code) {
    const edge_t at = std::atomic_ref(cursor[row]).fetch_add(1, std::memory_order_relaxed);
    raw_columns[at] = column;
    if (origins != nullptr) raw_codes[at] = code;
  };
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, m), [&](const auto& r) {
    for (std::size_t k = r.begin(); k != r.end(); ++k) {
      const auto code = static_cast<edge_t>(k);
      place(edges.dst[k], edges.src[k], code);
      if (options.symmetrise) place(edges.src[k], edges.dst[k], code + static_cast<edge_t>(m));
    }
  });
  cursor = {};

  // 2. Per row: sort, deduplicate, apply the self-loop policy; count what remains.
  const bool add_loops = options.self_loops == self_loop_policy::add;
  const bool drop_loops = options.self_loops != self_loop_policy::keep;
  tbb::parallel_for(tbb::blocked_range<node_t>(0, n), [&](const auto& r) {
    std::vector<std::pair<node_t, edge_t>> entries;  // (column, code) of one row, with origins
    for (node_t i = r.begin(); i != r.end(); ++i) {
      auto first = raw_columns.begin() + raw_offsets[i];
      auto last = raw_columns.begin() + raw_offsets[i + 1];
      if (origins == nullptr) {
        std::sort(first, last);
        if (options.deduplicate) last = std::unique(first, last);
        if (drop_loops) last = std::remove(first, last, i);
        counts[i] = (last - first) + (add_loops ? 1 : 0);
        continue;
      }
      const auto codes = raw_codes.begin() + raw_offsets[i];
      entries.clear();
      for (auto c = first; c != last; ++c) entries.emplace_back(*c, codes[c - first]);
      std::sort(entries.begin(), entries.end());
      auto end = entries.end();
      if (options.deduplicate)
        end = std::unique(entries.begin(), end,
                          [](const auto& a, const auto& b) { return a.first == b.first; });
      if (drop_loops)
        end = std::remove_if(entries.begin(), end, [&](const auto& e) { return e.first == i; });
      for (auto e = entries.begin(); e != end; ++e) {
        first[e - entries.begin()] = e->first;
        codes[e - entries.begin()] = e->second;
      }
      counts[i] = (end - entries.begin()) + (add_loops ? 1 : 0);
    }
  });

  // 3. Compact into the final arrays.
  csr out;
  out.num_rows = n;
  out.num_cols = n;
  detail::exclusive_scan(counts, out.offsets);
  out.columns.resize(out.offsets.back());
  if (origins != nullptr) origins->resize(out.columns.size());
  tbb::parallel_for(tbb::blocked_range<node_t>(0, n), [&](const auto& r) {
    for (node_t i = r.begin(); i != r.end(); ++i) {
      const auto first = raw_columns.begin() + raw_offsets[i];
      const edge_t kept = counts[i] - (add_loops ? 1 : 0);
      const edge_t split = add_loops ? std::lower_bound(first, first + kept, i) - first : kept;
      const edge_t to = out.offsets[i];
      std::copy(first, first + split, out.columns.begin() + to);  // columns stay sorted
      if (add_loops) out.columns[to + split] = i;
      std::copy(first + split, first + kept, out.columns.begin() + to + split + (add_loops ? 1 : 0));
      if (origins == nullptr) continue;
      const auto codes = raw_codes.begin() + raw_offsets[i];
      auto origin = origins->begin() + to;
      for (edge_t e = 0; e < kept; ++e)
        origin[e + (add_loops && e >= split ? 1 : 0)] = codes[e] % static_cast<edge_t>(m);
      if (add_loops) origin[split] = -1;
    }
  });
  return out;
}

/// The rows of `per_input_edge` (one row per input edge of build_csr or entry of
/// with_self_loops' input) that its `origins` name, one per stored entry; rows of entries
/// with origin -1 (added self-loops) are `loop_fill` in every column.
/// Throws sar::invalid_argument naming `where` if an origin is outside the input's rows.
inline matrixf take_edge_rows(const matrixf& per_input_edge, std::span<const edge_t> origins,
                              const char* where = "sar::take_edge_rows", float loop_fill = 0) {
  matrixf out(static_cast<Eigen::Index>(origins.size()), per_input_edge.cols());
  for (std::size_t e = 0; e < origins.size(); ++e) {
    SAR_CHECK(origins[e] >= -1 && origins[e] < per_input_edge.rows(), invalid_argument, where,
              ": entry ", e, " comes from edge ", origins[e], " of ", per_input_edge.rows());
    if (origins[e] < 0) out.row(static_cast<Eigen::Index>(e)).setConstant(loop_fill);
    else out.row(static_cast<Eigen::Index>(e)) = per_input_edge.row(origins[e]);
  }
  return out;
}

/// The same graph with exactly one self-loop per row (add) or none (remove); keep returns a
/// copy. Row i's own node is column first_column + i (0 for a whole graph; a part's first
/// global id for a graph_part's in-edges). Requires sorted rows; they stay sorted.
/// With `origins`: assigns the entry of `graph` each stored entry is, -1 for an added loop (a
/// row that had self-loops keeps its first), for take_edge_rows.
inline csr with_self_loops(const csr& graph, self_loop_policy policy, node_t first_column = 0,
                           std::vector<edge_t>* origins = nullptr) {
  if (policy == self_loop_policy::keep) {
    if (origins != nullptr) {
      origins->resize(static_cast<std::size_t>(graph.num_edges()));
      std::iota(origins->begin(), origins->end(), edge_t{0});
    }
    return graph;
  }
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
  if (origins != nullptr) origins->resize(out.columns.size());
  tbb::parallel_for(tbb::blocked_range<node_t>(0, graph.num_rows), [&](const auto& r) {
    for (node_t i = r.begin(); i != r.end(); ++i) {
      const node_t self = first_column + i;
      const auto row = graph.row(i);
      const auto first = row.begin() + (std::lower_bound(row.begin(), row.end(), self) - row.begin());
      auto last = first;
      while (last != row.end() && *last == self) ++last;
      const edge_t from = graph.offsets[i];  // entry of row.begin() in graph
      edge_t to = out.offsets[i];
      const auto copy = [&](auto begin, auto end) {
        for (auto it = begin; it != end; ++it, ++to) {
          out.columns[to] = *it;
          if (origins != nullptr) (*origins)[to] = from + (it - row.begin());
        }
      };
      copy(row.begin(), first);
      if (add) {
        out.columns[to] = self;
        if (origins != nullptr) (*origins)[to] = first != last ? from + (first - row.begin()) : -1;
        ++to;
      }
      copy(last, row.end());
    }
  });
  return out;
}

/// with_self_loops on `graph` in place, its edge table (one row per entry; empty: none)
/// following the entries: a row that loses a loop loses its row, an added loop's row is
/// `loop_fill` in every column. Throws sar::invalid_argument if the table has rows but not one
/// per entry.
inline void apply_self_loops(csr& graph, matrixf& edge_features, self_loop_policy policy,
                             node_t first_column = 0, float loop_fill = 0) {
  if (policy == self_loop_policy::keep) return;
  if (edge_features.rows() == 0 && edge_features.cols() == 0) {
    graph = with_self_loops(graph, policy, first_column);
    return;
  }
  SAR_CHECK(edge_features.rows() == graph.num_edges(), invalid_argument,
            "sar::apply_self_loops: ", edge_features.rows(), " edge feature rows for ",
            graph.num_edges(), " edges");
  std::vector<edge_t> origins;
  graph = with_self_loops(graph, policy, first_column, &origins);
  edge_features = take_edge_rows(edge_features, origins, "sar::apply_self_loops", loop_fill);
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

/// The transpose: row j lists the rows i that list j, in increasing order. With `entries`:
/// assigns, for each entry of the result, the entry of `graph` it transposes (to carry
/// per-edge data).
inline csr transpose(const csr& graph, std::vector<edge_t>* entries = nullptr) {
  csr out;
  out.num_rows = graph.num_cols;
  out.num_cols = graph.num_rows;
  std::vector<edge_t> counts(graph.num_cols, 0);
  for (node_t c : graph.columns) ++counts[c];
  detail::exclusive_scan(counts, out.offsets);
  out.columns.resize(graph.num_edges());
  if (entries != nullptr) entries->resize(out.columns.size());
  std::vector<edge_t> cursor(out.offsets.begin(), out.offsets.end() - 1);
  for (node_t i = 0; i < graph.num_rows; ++i)  // serial: rows come out sorted
    for (edge_t e = graph.offsets[i]; e < graph.offsets[i + 1]; ++e) {
      const edge_t to = cursor[graph.columns[e]]++;
      out.columns[to] = i;
      if (entries != nullptr) (*entries)[to] = e;
    }
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
