// Building and reshaping heterogeneous graphs (sar/graph/schema.hpp): the typed CSR of edges
// that carry relations, reverse relations added on request (DGL's AddReverse), and the
// homogeneous graph a relation-blind model sees (types erased).
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include "sar/core/error.hpp"
#include "sar/graph/builders.hpp"
#include "sar/graph/csr.hpp"
#include "sar/graph/dataset.hpp"
#include "sar/graph/schema.hpp"

namespace sar {

/// The in-edge CSR (row = destination) of typed edges: edge k is src[k] -> dst[k] of relation
/// types[k]. Each row is sorted by (source, relation); an edge repeated within its relation is
/// kept once (its earliest copy), the same pair in two relations stays in both; self-loops
/// stay as given. Assigns each entry's relation to `entry_types` and, with `origins`, the
/// index of the input edge it came from (for take_edge_rows). Deterministic, parallel over
/// rows. Throws sar::invalid_argument naming the first edge with an id outside [0, num_nodes)
/// or as many types as edges.
inline csr build_typed_csr(const edge_list& edges, std::span<const std::int32_t> types,
                           std::vector<std::int32_t>& entry_types,
                           std::vector<edge_t>* origins = nullptr) {
  constexpr const char* where = "sar::build_typed_csr";
  const node_t n = edges.num_nodes;
  const std::size_t m = edges.size();
  SAR_CHECK(types.size() == m && edges.dst.size() == m, invalid_argument, where, ": ", m,
            " sources, ", edges.dst.size(), " destinations, ", types.size(), " relations");
  for (std::size_t k = 0; k < m; ++k)
    SAR_CHECK(edges.src[k] >= 0 && edges.src[k] < n && edges.dst[k] >= 0 && edges.dst[k] < n,
              invalid_argument, where, ": edge ", k, " (", edges.src[k], " -> ", edges.dst[k],
              ") has an id outside [0, ", n, ")");
  // Bucket the edges by destination (in input order), then sort and deduplicate each row.
  std::vector<edge_t> counts(static_cast<std::size_t>(n), 0);
  for (std::size_t k = 0; k < m; ++k) ++counts[static_cast<std::size_t>(edges.dst[k])];
  std::vector<edge_t> raw_offsets;
  detail::exclusive_scan(counts, raw_offsets);
  std::vector<edge_t> bucketed(m);  // input edge indices by destination
  {
    std::vector<edge_t> cursor(raw_offsets.begin(), raw_offsets.end() - 1);
    for (std::size_t k = 0; k < m; ++k)
      bucketed[static_cast<std::size_t>(cursor[static_cast<std::size_t>(edges.dst[k])]++)] =
          static_cast<edge_t>(k);
  }
  const auto key = [&](edge_t k) {
    return std::tuple(edges.src[static_cast<std::size_t>(k)], types[static_cast<std::size_t>(k)], k);
  };
  tbb::parallel_for(tbb::blocked_range<node_t>(0, n), [&](const auto& range) {
    for (node_t i = range.begin(); i != range.end(); ++i) {
      const auto first = bucketed.begin() + raw_offsets[i], last = bucketed.begin() + raw_offsets[i + 1];
      std::sort(first, last, [&](edge_t a, edge_t b) { return key(a) < key(b); });
      const auto end = std::unique(first, last, [&](edge_t a, edge_t b) {
        return std::get<0>(key(a)) == std::get<0>(key(b)) && std::get<1>(key(a)) == std::get<1>(key(b));
      });
      counts[static_cast<std::size_t>(i)] = end - first;
    }
  });
  csr out;
  out.num_rows = out.num_cols = n;
  detail::exclusive_scan(counts, out.offsets);
  out.columns.resize(static_cast<std::size_t>(out.offsets.back()));
  entry_types.resize(out.columns.size());
  if (origins != nullptr) origins->resize(out.columns.size());
  tbb::parallel_for(tbb::blocked_range<node_t>(0, n), [&](const auto& range) {
    for (node_t i = range.begin(); i != range.end(); ++i)
      for (edge_t a = 0; a < counts[static_cast<std::size_t>(i)]; ++a) {
        const edge_t k = bucketed[static_cast<std::size_t>(raw_offsets[i] + a)];
        const auto to = static_cast<std::size_t>(out.offsets[i] + a);
        out.columns[to] = edges.src[static_cast<std::size_t>(k)];
        entry_types[to] = types[static_cast<std::size_t>(k)];
        if (origins != nullptr) (*origins)[to] = k;
      }
  });
  return out;
}

/// Adds to a heterogeneous `data` the reverse of every relation (DGL's AddReverse): relation
/// (s, name, d) gets (d, "rev_" + name, s), holding every edge reversed, with the same edge
/// features. Relations already named "rev_..." are reversed too (their reverse is a new
/// relation "rev_rev_..."). Throws sar::invalid_argument for a homogeneous dataset or one
/// whose relations include a reverse name already.
inline void add_reverse_relations(graph_dataset& data) {
  constexpr const char* where = "sar::add_reverse_relations";
  SAR_CHECK(data.schema.heterogeneous(), invalid_argument, where,
            ": the dataset has no node types and relations");
  graph_schema& schema = data.schema;
  const std::int32_t relations = schema.num_relations();
  for (std::int32_t r = 0; r < relations; ++r) {
    relation reverse = schema.relations[static_cast<std::size_t>(r)];
    std::swap(reverse.source_type, reverse.destination_type);
    reverse.name = "rev_" + reverse.name;
    for (const relation& other : schema.relations)
      SAR_CHECK(!(other == reverse), invalid_argument, where, ": relation ", reverse.name,
                " exists already");
    schema.relations.push_back(std::move(reverse));
  }
  const csr& g = data.graph;
  edge_list edges;
  edges.num_nodes = g.num_rows;
  std::vector<std::int32_t> types;
  for (int direction = 0; direction < 2; ++direction)
    for (node_t i = 0; i < g.num_rows; ++i)
      for (edge_t e = g.offsets[i]; e < g.offsets[i + 1]; ++e) {
        if (direction == 0) edges.push_back(g.columns[e], i);
        else edges.push_back(i, g.columns[e]);
        types.push_back(data.edge_types[static_cast<std::size_t>(e)] + direction * relations);
      }
  std::vector<edge_t> origins;
  const bool edge_data = data.edge_features.cols() > 0;
  data.graph = build_typed_csr(edges, types, data.edge_types, edge_data ? &origins : nullptr);
  if (edge_data) {
    const edge_t m = static_cast<edge_t>(types.size() / 2);
    for (edge_t& k : origins) k %= m;  // a reverse takes its edge's row
    data.edge_features = take_edge_rows(data.edge_features, origins, where);
  }
}

/// The homogeneous graph of a heterogeneous graph (types erased), in place: the same nodes,
/// every pair joined by any relation joined once (rows sorted by source, as build_typed_csr
/// and the partition store keep them), the schema and edge types dropped, and the edge
/// features dropped (an edge of several relations would need one row). What a relation-blind
/// model (GCN, SAGE, GAT) trains on. Does nothing to a homogeneous graph.
inline void erase_types(csr& graph, graph_schema& schema, std::vector<std::int32_t>& edge_types,
                        matrixf& edge_features) {
  if (!schema.heterogeneous()) return;
  std::vector<edge_t> counts(static_cast<std::size_t>(graph.num_rows));
  for (node_t i = 0; i < graph.num_rows; ++i) {  // rows sorted by source: repeats are neighbours
    const auto first = graph.columns.begin() + graph.offsets[i];
    counts[static_cast<std::size_t>(i)] =
        std::unique(first, graph.columns.begin() + graph.offsets[i + 1]) - first;
  }
  csr out;
  out.num_rows = graph.num_rows;
  out.num_cols = graph.num_cols;
  detail::exclusive_scan(counts, out.offsets);
  out.columns.resize(static_cast<std::size_t>(out.offsets.back()));
  for (node_t i = 0; i < graph.num_rows; ++i)
    std::copy_n(graph.columns.begin() + graph.offsets[i], counts[static_cast<std::size_t>(i)],
                out.columns.begin() + out.offsets[i]);
  graph = std::move(out);
  schema = {};
  edge_types.clear();
  edge_features = matrixf();
}

/// erase_types on a dataset's graph.
inline void erase_types(graph_dataset& data) {
  erase_types(data.graph, data.schema, data.edge_types, data.edge_features);
}

}  // namespace sar
