// Simple partitioners (random, contiguous) and the quality report of any partition.
// A partition is a std::vector<int> giving the part of every node, each in [0, parts).
// The partitioners (these and partition_metis) never return an empty part: a part is a
// rank's share of the work, and a run with idle ranks is a mistake (too many parts), so they
// refuse with check_no_empty_parts. A partition made otherwise may have empty parts;
// nothing downstream assumes otherwise.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "sar/core/error.hpp"
#include "sar/core/rng.hpp"
#include "sar/core/types.hpp"
#include "sar/graph/csr.hpp"

namespace sar {

/// Checks that `part` has `n` entries, each in [0, parts), and parts >= 1.
/// Throws sar::invalid_argument naming `where` and the first offending entry.
inline void validate_partition(const std::vector<int>& part, node_t n, int parts,
                               const char* where = "sar::validate_partition") {
  SAR_CHECK(parts >= 1, invalid_argument, where, ": parts = ", parts, ", expected >= 1");
  SAR_CHECK(static_cast<node_t>(part.size()) == n, invalid_argument, where, ": partition has ",
            part.size(), " entries for ", n, " nodes");
  const auto bad =
      std::find_if(part.begin(), part.end(), [&](int p) { return p < 0 || p >= parts; });
  SAR_CHECK(bad == part.end(), invalid_argument, where, ": node ", bad - part.begin(),
            " is in part ", bad == part.end() ? 0 : *bad, ", outside [0, ", parts, ")");
}

/// Throws sar::invalid_argument "<where>: <k> of the <parts> parts would be empty (...);
/// ... use fewer parts" if some part has no node: sizes[p] = nodes in part p, of `nodes`.
inline void check_part_sizes(std::span<const std::int64_t> sizes, std::int64_t nodes,
                             const char* where) {
  const auto parts = static_cast<std::int64_t>(sizes.size());
  const auto empty = std::count(sizes.begin(), sizes.end(), 0);
  SAR_CHECK(empty == 0, invalid_argument, where, ": ", empty, " of the ", parts,
            " parts would be empty (the ", nodes, " nodes went to only ", parts - empty,
            " parts): every part is one rank's work, so use fewer parts");
}

/// check_part_sizes for the partition `part` into `parts`. Requires every entry of `part` in
/// [0, parts) (validate_partition).
inline void check_no_empty_parts(const std::vector<int>& part, int parts, const char* where) {
  std::vector<std::int64_t> sizes(static_cast<std::size_t>(parts), 0);
  for (int p : part) ++sizes[static_cast<std::size_t>(p)];
  check_part_sizes(sizes, static_cast<std::int64_t>(part.size()), where);
}

/// Every node in a uniformly random part, drawn from counter_rng(seed, partition_random) keyed
/// by the node id: deterministic, independent of threads and of the order of evaluation.
/// Requires n >= 0, parts >= 1. Throws sar::invalid_argument otherwise, or if a part would
/// be empty (parts > n, or chance with parts close to n: check_no_empty_parts).
inline std::vector<int> partition_random(node_t n, int parts, std::uint64_t seed) {
  constexpr const char* where = "sar::partition_random";
  SAR_CHECK(n >= 0, invalid_argument, where, ": negative node count ", n);
  SAR_CHECK(parts >= 1, invalid_argument, where, ": parts = ", parts, ", expected >= 1");
  SAR_CHECK(parts <= n, invalid_argument, where, ": ", parts, " parts for ", n,
            " nodes: every part needs a node, so use at most ", n, " parts");
  const counter_rng rng(seed, rng_stream::partition_random);
  std::vector<int> part(static_cast<std::size_t>(n));
  for (node_t i = 0; i < n; ++i)
    part[i] = static_cast<int>(rng.below(static_cast<std::uint64_t>(parts),
                                         static_cast<std::uint64_t>(i)));
  check_no_empty_parts(part, parts, where);
  return part;
}

/// The part partition_contiguous(n, parts) gives node `id` (in [0, n)): the largest p with
/// floor(n p / parts) <= id, computed alone (128-bit: any node_t n).
inline int contiguous_part_of(node_t id, node_t n, int parts) {
  return static_cast<int>((static_cast<__int128>(parts) * (id + 1) - 1) / n);
}

/// Part p gets the id range [p*n/parts, (p+1)*n/parts): sizes differ by at most one.
/// Requires n >= 0 and 1 <= parts <= n (throws sar::invalid_argument otherwise: a part
/// would be empty).
inline std::vector<int> partition_contiguous(node_t n, int parts) {
  constexpr const char* where = "sar::partition_contiguous";
  SAR_CHECK(n >= 0, invalid_argument, where, ": negative node count ", n);
  SAR_CHECK(parts >= 1, invalid_argument, where, ": parts = ", parts, ", expected >= 1");
  SAR_CHECK(parts <= n, invalid_argument, where, ": ", parts, " parts for ", n,
            " nodes: every part needs a node, so use at most ", n, " parts");
  std::vector<int> part(static_cast<std::size_t>(n));
  const auto bound = [&](int p) {  // 128-bit product: no overflow for any node_t n
    return static_cast<node_t>(static_cast<__int128>(n) * p / parts);
  };
  for (int p = 0; p < parts; ++p)
    std::fill(part.begin() + bound(p), part.begin() + bound(p + 1), p);
  return part;
}

/// How good a partition is. Edges are the directed (stored) edges of the CSR; a part's edges
/// are the in-edges of its nodes (what the rank owning it stores).
struct partition_quality {
  /// Number of parts.
  int num_parts = 0;
  /// Number of nodes of the graph.
  node_t num_nodes = 0;
  /// Number of (directed, stored) edges of the graph.
  edge_t num_edges = 0;
  edge_t edge_cut = 0;             ///< edges whose endpoints lie in different parts
  double edge_cut_fraction = 0.0;  ///< edge_cut / num_edges (0 if there are no edges)
  std::vector<node_t> part_nodes;  ///< per part
  std::vector<edge_t> part_edges;  ///< per part: in-edges of its nodes
  std::vector<node_t> part_train;  ///< per part: training nodes
  double node_balance = 1.0;       ///< max over parts / mean over parts (1 = perfect)
  double edge_balance = 1.0;       ///< same for part_edges (1 if there are no edges)
  double train_balance = 1.0;      ///< same for part_train (1 if there are no training nodes)
};

namespace detail {
template <class T>
double balance_of(const std::vector<T>& per_part) {
  if (per_part.empty()) return 1.0;
  long double total = 0;
  T largest = 0;
  for (T v : per_part) {
    total += v;
    largest = std::max(largest, v);
  }
  if (total == 0) return 1.0;
  return static_cast<double>(largest / (total / per_part.size()));
}
}  // namespace detail

/// Quality of `part` on `graph` (requires a square graph; `split` empty or one per node).
/// Throws sar::invalid_argument if the sizes disagree or a part index is out of range.
inline partition_quality evaluate_partition(const csr& graph, const std::vector<int>& part,
                                            int parts, const std::vector<node_split>& split) {
  constexpr const char* where = "sar::evaluate_partition";
  SAR_CHECK(graph.num_rows == graph.num_cols, invalid_argument, where, ": graph is ",
            graph.num_rows, " x ", graph.num_cols, ", expected square");
  validate_partition(part, graph.num_rows, parts, where);
  SAR_CHECK(split.empty() || static_cast<node_t>(split.size()) == graph.num_rows,
            invalid_argument, where, ": ", split.size(), " split entries for ", graph.num_rows,
            " nodes");
  partition_quality q;
  q.num_parts = parts;
  q.num_nodes = graph.num_rows;
  q.num_edges = graph.num_edges();
  q.part_nodes.assign(parts, 0);
  q.part_edges.assign(parts, 0);
  q.part_train.assign(parts, 0);
  for (node_t i = 0; i < graph.num_rows; ++i) {
    const int p = part[i];
    ++q.part_nodes[p];
    q.part_edges[p] += graph.degree(i);
    if (!split.empty() && split[i] == node_split::train) ++q.part_train[p];
    for (node_t j : graph.row(i)) q.edge_cut += (part[j] != p);
  }
  q.edge_cut_fraction =
      q.num_edges == 0 ? 0.0 : static_cast<double>(q.edge_cut) / static_cast<double>(q.num_edges);
  q.node_balance = detail::balance_of(q.part_nodes);
  q.edge_balance = detail::balance_of(q.part_edges);
  q.train_balance = detail::balance_of(q.part_train);
  return q;
}

/// A short human-readable report: a summary line, then one line per part (at most
/// `max_part_lines` of them; the rest are elided; 0 = the summary line only).
inline std::string format_partition_quality(const partition_quality& q, int max_part_lines = 16) {
  char line[256];
  std::string out;
  std::snprintf(line, sizeof line,
                "edge cut %lld of %lld edges (%.2f%%); balance (max/mean): nodes %.3f, edges %.3f, "
                "train %.3f\n",
                static_cast<long long>(q.edge_cut), static_cast<long long>(q.num_edges),
                100.0 * q.edge_cut_fraction, q.node_balance, q.edge_balance, q.train_balance);
  out += line;
  const int shown = std::min(q.num_parts, std::max(max_part_lines, 0));
  for (int p = 0; p < shown; ++p) {
    std::snprintf(line, sizeof line, "  part %d: %lld nodes, %lld edges, %lld train\n", p,
                  static_cast<long long>(q.part_nodes[p]), static_cast<long long>(q.part_edges[p]),
                  static_cast<long long>(q.part_train[p]));
    out += line;
  }
  if (shown > 0 && shown < q.num_parts) out += "  ... (" + std::to_string(q.num_parts - shown) + " more parts)\n";
  return out;
}

}  // namespace sar
