// METIS k-way partitioning. This is the only sar header that includes metis.h, so a user who
// does not partition needs neither the header nor -lmetis.
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

#include <metis.h>
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include "sar/core/error.hpp"
#include "sar/graph/builders.hpp"
#include "sar/graph/dataset.hpp"
#include "sar/partition/partitioners.hpp"

namespace sar {

/// Settings of partition_metis.
struct metis_options {
  std::uint64_t seed = 0;         ///< METIS_OPTION_SEED (reduced modulo 2^31): same seed, same result
  double imbalance = 0.05;        ///< allowed imbalance per constraint: max part weight <= (1+x) * mean
  bool balance_edges = true;      ///< constraint 2: in-degree (edges a part stores)
  bool balance_train = true;      ///< constraint 3: training nodes (if the dataset has a train split)
  int num_cuts = 1;               ///< METIS_OPTION_NCUTS: best of this many attempts
};

namespace detail {

/// Where a graph beyond METIS's indices goes.
inline constexpr const char* beyond_metis =
    " (partition it with PT-Scotch on several processes: sar::partition_distributed, or "
    "mpirun -np P sar-partition --method ptscotch)";

/// The symmetric, loop-free, duplicate-free adjacency METIS needs, as idx_t arrays.
struct metis_graph {
  std::vector<idx_t> xadj;
  std::vector<idx_t> adjncy;
};

/// Union of `graph` and its transpose without self-loops (rows sorted and deduplicated).
/// Throws sar::invalid_argument if the node or edge count does not fit METIS's idx_t.
inline metis_graph symmetric_metis_graph(const csr& graph) {
  constexpr auto idx_max = static_cast<std::int64_t>(std::numeric_limits<idx_t>::max());
  const node_t n = graph.num_rows;
  SAR_CHECK(n <= idx_max, invalid_argument, "sar::partition_metis: ", n,
            " nodes do not fit METIS's ", sizeof(idx_t) * 8, "-bit idx_t", detail::beyond_metis);
  const csr reverse = transpose(graph);  // rows sorted by construction
  std::vector<edge_t> counts(static_cast<std::size_t>(n), 0);
  // Merges the sorted row of `graph` (copied and sorted: input rows need not be sorted) with the
  // row of `reverse`; calls emit(j) once per distinct neighbour j != i, in increasing order.
  auto for_each_neighbour = [&](node_t i, std::vector<node_t>& scratch, auto&& emit) {
    const auto a = graph.row(i);
    scratch.assign(a.begin(), a.end());
    std::sort(scratch.begin(), scratch.end());
    const auto b = reverse.row(i);
    std::size_t x = 0, y = 0;
    node_t last = -1;
    while (x < scratch.size() || y < b.size()) {
      node_t j;
      if (y == b.size() || (x < scratch.size() && scratch[x] <= b[y]))
        j = scratch[x++];
      else
        j = b[y++];
      if (j != i && j != last) emit(j);
      last = j;
    }
  };
  tbb::parallel_for(tbb::blocked_range<node_t>(0, n), [&](const auto& r) {
    std::vector<node_t> scratch;
    for (node_t i = r.begin(); i != r.end(); ++i) {
      edge_t c = 0;
      for_each_neighbour(i, scratch, [&](node_t) { ++c; });
      counts[i] = c;
    }
  });
  std::vector<edge_t> offsets;
  exclusive_scan(counts, offsets);
  SAR_CHECK(offsets.back() <= idx_max, invalid_argument, "sar::partition_metis: the symmetrised graph has ",
            offsets.back(), " adjacency entries, which do not fit METIS's ", sizeof(idx_t) * 8,
            "-bit idx_t", detail::beyond_metis);
  metis_graph out;
  out.xadj.assign(offsets.begin(), offsets.end());
  out.adjncy.resize(static_cast<std::size_t>(offsets.back()));
  tbb::parallel_for(tbb::blocked_range<node_t>(0, n), [&](const auto& r) {
    std::vector<node_t> scratch;
    for (node_t i = r.begin(); i != r.end(); ++i) {
      idx_t* to = out.adjncy.data() + offsets[i];
      for_each_neighbour(i, scratch, [&](node_t j) { *to++ = static_cast<idx_t>(j); });
    }
  });
  return out;
}

inline const char* metis_status_name(int status) {
  switch (status) {
    case METIS_ERROR_INPUT: return "METIS_ERROR_INPUT (erroneous inputs or options)";
    case METIS_ERROR_MEMORY: return "METIS_ERROR_MEMORY (out of memory)";
    case METIS_ERROR: return "METIS_ERROR";
    default: return "unknown METIS status";
  }
}

}  // namespace detail

/// METIS_PartGraphKway on the symmetrised, loop-free version of `data.graph` (built here; the
/// dataset graph may be directed and have self-loops), with multi-constraint vertex weights:
/// 1 per node, the node's in-degree (options.balance_edges, and only if the graph has edges),
/// and 1 per training node (options.balance_train, and only if the split has training nodes).
/// Minimises the edge cut. Deterministic for a given options.seed.
/// Requires 1 <= parts <= the node count and 0 <= options.imbalance. parts == 1 returns
/// without calling METIS. Never returns an empty part (check_no_empty_parts).
/// Throws sar::invalid_argument for bad arguments, sizes beyond METIS's idx_t, or parts METIS
/// left empty (naming how many: it cannot split a graph into nearly as many parts as nodes),
/// and sar::error naming the METIS status code if METIS fails.
inline std::vector<int> partition_metis(const graph_dataset& data, int parts,
                                        const metis_options& options = {}) {
  constexpr const char* where = "sar::partition_metis";
  SAR_CHECK(parts >= 1, invalid_argument, where, ": parts = ", parts, ", expected >= 1");
  SAR_CHECK(options.imbalance >= 0.0, invalid_argument, where, ": imbalance = ", options.imbalance,
            ", expected >= 0");
  SAR_CHECK(options.num_cuts >= 1, invalid_argument, where, ": num_cuts = ", options.num_cuts,
            ", expected >= 1");
  const csr& graph = data.graph;
  SAR_CHECK(graph.num_rows == graph.num_cols, invalid_argument, where, ": graph is ",
            graph.num_rows, " x ", graph.num_cols, ", expected square");
  SAR_CHECK(data.split.empty() || static_cast<node_t>(data.split.size()) == graph.num_rows,
            invalid_argument, where, ": ", data.split.size(), " split entries for ",
            graph.num_rows, " nodes");
  const node_t n = graph.num_rows;
  SAR_CHECK(parts <= n, invalid_argument, where, ": ", parts, " parts for ", n,
            " nodes: every part needs a node, so use at most ", n, " parts");
  if (parts == 1) return std::vector<int>(static_cast<std::size_t>(n), 0);
  constexpr auto idx_max = static_cast<std::int64_t>(std::numeric_limits<idx_t>::max());
  SAR_CHECK(parts <= idx_max, invalid_argument, where, ": parts = ", parts, " too large");
  SAR_CHECK(graph.num_edges() <= idx_max, invalid_argument, where, ": ", graph.num_edges(),
            " edges: the total in-degree weight does not fit METIS's ", sizeof(idx_t) * 8,
            "-bit idx_t", detail::beyond_metis);

  detail::metis_graph adjacency = detail::symmetric_metis_graph(graph);

  // Vertex weights, interleaved: vwgt[i * ncon + c]. A constraint whose total is zero is left
  // out (METIS rejects it).
  const bool use_edges = options.balance_edges && graph.num_edges() > 0;
  const bool use_train = options.balance_train && data.count(node_split::train) > 0;
  idx_t ncon = 1 + (use_edges ? 1 : 0) + (use_train ? 1 : 0);
  std::vector<idx_t> vwgt(static_cast<std::size_t>(n) * ncon);
  for (node_t i = 0; i < n; ++i) {
    idx_t* w = vwgt.data() + i * ncon;
    *w++ = 1;
    if (use_edges) *w++ = static_cast<idx_t>(graph.degree(i));
    if (use_train) *w++ = data.split[i] == node_split::train ? 1 : 0;
  }
  std::vector<real_t> ubvec(static_cast<std::size_t>(ncon),
                            static_cast<real_t>(1.0 + options.imbalance));

  idx_t metis_options[METIS_NOPTIONS];
  METIS_SetDefaultOptions(metis_options);
  metis_options[METIS_OPTION_OBJTYPE] = METIS_OBJTYPE_CUT;
  metis_options[METIS_OPTION_NUMBERING] = 0;
  metis_options[METIS_OPTION_SEED] = static_cast<idx_t>(options.seed % (std::uint64_t{1} << 31));
  metis_options[METIS_OPTION_NCUTS] = static_cast<idx_t>(options.num_cuts);

  idx_t nvtxs = static_cast<idx_t>(n);
  idx_t nparts = static_cast<idx_t>(parts);
  idx_t objval = 0;
  std::vector<idx_t> result(static_cast<std::size_t>(n), 0);
  const int status = METIS_PartGraphKway(
      &nvtxs, &ncon, adjacency.xadj.data(),
      adjacency.adjncy.empty() ? nullptr : adjacency.adjncy.data(), vwgt.data(),
      /*vsize=*/nullptr, /*adjwgt=*/nullptr, &nparts, /*tpwgts=*/nullptr, ubvec.data(),
      metis_options, &objval, result.data());
  SAR_CHECK(status == METIS_OK, error, where, ": METIS_PartGraphKway returned ", status, " = ",
            detail::metis_status_name(status), " for ", n, " nodes, ", adjacency.adjncy.size(),
            " adjacency entries, ", parts, " parts, ", ncon, " constraints");
  std::vector<int> part(result.begin(), result.end());
  for (node_t i = 0; i < n; ++i)
    SAR_CHECK(part[i] >= 0 && part[i] < parts, error, where, ": METIS put node ", i,
              " in part ", part[i], ", outside [0, ", parts, ")");
  check_no_empty_parts(part, parts, where);
  return part;
}

}  // namespace sar
