// The types of a heterogeneous graph: its node types and its relations (DGL's canonical edge
// types, PyG's edge types). sar holds a heterogeneous graph as one graph over all its nodes,
// as DGL's to_homogeneous does: the nodes of type t are the dataset ids [type_begin(t),
// type_begin(t + 1)), types in order, so a node's type follows from its dataset id (and stays
// known after partitioning, which keeps dataset ids as original ids); every stored edge
// carries the index of its relation (graph_dataset::edge_types). An empty schema is a
// homogeneous graph. docs/heterogeneous.md.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "sar/core/error.hpp"
#include "sar/core/types.hpp"

namespace sar {

/// One node type: its name, how many nodes it has, and how many of the dataset's feature
/// columns its nodes fill. Every node has a row of the dataset's one feature matrix, as wide as
/// the widest type; a type's rows hold its features in their first feature_dim columns and
/// zeros after (a featureless type: feature_dim 0, rows of zeros; models give it a learnable
/// embedding or its own input projection instead).
struct node_type {
  std::string name;        ///< e.g. "paper"
  node_t count = 0;        ///< nodes of this type (>= 0)
  std::int64_t feature_dim = 0;  ///< leading feature columns this type fills (0: featureless)
  /// Member-wise equality.
  friend bool operator==(const node_type&, const node_type&) = default;
};

/// One relation: edges from nodes of source_type to nodes of destination_type (indices into
/// graph_schema::node_types), named `name` ("cites", "writes", "rev_writes").
struct relation {
  std::int32_t source_type = 0;       ///< the type of the edges' sources
  std::string name;                   ///< unique with its two types
  std::int32_t destination_type = 0;  ///< the type of the edges' destinations
  /// Member-wise equality.
  friend bool operator==(const relation&, const relation&) = default;
};

/// The node types and relations of a heterogeneous graph (see the top of this file).
struct graph_schema {
  std::vector<node_type> node_types;  ///< in id order; empty: a homogeneous graph
  std::vector<relation> relations;    ///< edge_types index this list

  /// Member-wise equality.
  friend bool operator==(const graph_schema&, const graph_schema&) = default;

  /// Whether the graph has types (an empty schema: homogeneous).
  bool heterogeneous() const { return !node_types.empty(); }
  /// Number of node types.
  std::int32_t num_node_types() const { return static_cast<std::int32_t>(node_types.size()); }
  /// Number of relations.
  std::int32_t num_relations() const { return static_cast<std::int32_t>(relations.size()); }
  /// The first dataset id of type t (t in [0, num_node_types()]; t = num_node_types() gives
  /// the node count).
  node_t type_begin(std::int32_t t) const {
    node_t begin = 0;
    for (std::int32_t u = 0; u < t; ++u) begin += node_types[static_cast<std::size_t>(u)].count;
    return begin;
  }
  /// The first dataset id of every type, then the node count (num_node_types() + 1 entries).
  std::vector<node_t> type_begins() const {
    std::vector<node_t> out{0};
    for (const node_type& t : node_types) out.push_back(out.back() + t.count);
    return out;
  }
  /// The type of dataset id `id` (requires 0 <= id < the node count).
  std::int32_t type_of(node_t id) const { return type_in(type_begins(), id); }
  /// The type of dataset id `id` given type_begins() (O(log types)).
  static std::int32_t type_in(std::span<const node_t> begins, node_t id) {
    return static_cast<std::int32_t>(std::upper_bound(begins.begin(), begins.end(), id) -
                                     begins.begin() - 1);
  }
  /// The index of the relation named `name` ("rel", or "src___rel___dst" when several
  /// relations share the name), -1 if none.
  std::int32_t find_relation(const std::string& name) const {
    std::int32_t found = -1;
    for (std::int32_t r = 0; r < num_relations(); ++r)
      if (relations[static_cast<std::size_t>(r)].name == name || canonical_name(r) == name) {
        if (found >= 0 && canonical_name(r) != name) return -1;  // ambiguous short name
        found = r;
      }
    return found;
  }
  /// "source___name___destination", as OGB names a relation's directory.
  std::string canonical_name(std::int32_t r) const {
    const relation& rel = relations[static_cast<std::size_t>(r)];
    return node_types[static_cast<std::size_t>(rel.source_type)].name + "___" + rel.name + "___" +
           node_types[static_cast<std::size_t>(rel.destination_type)].name;
  }

  /// Throws sar::invalid_argument naming `where` unless the schema is empty or: its types
  /// have distinct non-empty names, non-negative counts summing to `num_nodes` and feature
  /// widths in [0, feature_columns], it has at least one relation, and every relation names
  /// existing types and differs from the others (name with its two types).
  void validate(node_t num_nodes, std::int64_t feature_columns, const char* where) const {
    if (!heterogeneous()) {
      SAR_CHECK(relations.empty(), invalid_argument, where, ": ", relations.size(),
                " relations but no node types");
      return;
    }
    node_t total = 0;
    for (std::size_t t = 0; t < node_types.size(); ++t) {
      SAR_CHECK(!node_types[t].name.empty() && node_types[t].count >= 0 &&
                    node_types[t].feature_dim >= 0 && node_types[t].feature_dim <= feature_columns,
                invalid_argument, where, ": node type ", t, " ('", node_types[t].name, "') has ",
                node_types[t].count, " nodes with ", node_types[t].feature_dim,
                " features (the dataset's feature rows have ", feature_columns, ")");
      for (std::size_t u = 0; u < t; ++u)
        SAR_CHECK(node_types[u].name != node_types[t].name, invalid_argument, where,
                  ": two node types named '", node_types[t].name, "'");
      total += node_types[t].count;
    }
    SAR_CHECK(total == num_nodes, invalid_argument, where, ": the node types have ", total,
              " nodes in all, the graph ", num_nodes);
    SAR_CHECK(!relations.empty(), invalid_argument, where, ": node types but no relation");
    for (std::int32_t r = 0; r < num_relations(); ++r) {
      const relation& rel = relations[static_cast<std::size_t>(r)];
      const auto known = [&](std::int32_t t) { return t >= 0 && t < num_node_types(); };
      SAR_CHECK(known(rel.source_type) && known(rel.destination_type) && !rel.name.empty(),
                invalid_argument, where, ": relation ", r, " ('", rel.name, "') joins node types ",
                rel.source_type, " and ", rel.destination_type, " of ", num_node_types());
      for (std::int32_t s = 0; s < r; ++s)
        SAR_CHECK(!(relations[static_cast<std::size_t>(s)] == rel), invalid_argument, where,
                  ": relation ", canonical_name(r), " listed twice");
    }
  }

  /// Throws sar::invalid_argument naming `where` unless `edge_types` holds one relation per
  /// entry of the in-edge CSR given by (offsets, columns) whose rows are the dataset ids
  /// [first_row, first_row + rows) and whose columns are dataset ids, each relation joining
  /// the entry's source type to its row's type. `column_id(c)` maps a column to its dataset
  /// id (identity for a dataset's own graph).
  template <class ColumnId>
  void check_edges(std::span<const edge_t> offsets, std::span<const node_t> columns,
                   node_t first_row, std::span<const std::int32_t> edge_types,
                   ColumnId&& column_id, const char* where) const {
    SAR_CHECK(edge_types.size() == columns.size(), invalid_argument, where, ": ",
              edge_types.size(), " edge types for ", columns.size(), " edges");
    const std::vector<node_t> begins = type_begins();
    for (std::size_t row = 0; row + 1 < offsets.size(); ++row) {
      const std::int32_t to = type_in(begins, first_row + static_cast<node_t>(row));
      for (edge_t e = offsets[row]; e < offsets[row + 1]; ++e) {
        const std::int32_t r = edge_types[static_cast<std::size_t>(e)];
        SAR_CHECK(r >= 0 && r < num_relations(), invalid_argument, where, ": edge ", e,
                  " has relation ", r, " of ", num_relations());
        const relation& rel = relations[static_cast<std::size_t>(r)];
        const node_t source = column_id(columns[static_cast<std::size_t>(e)]);
        const std::int32_t from = type_in(begins, source);
        SAR_CHECK(from == rel.source_type && to == rel.destination_type, invalid_argument, where,
                  ": edge ", e, " (node ", source, " of type '",
                  node_types[static_cast<std::size_t>(from)].name, "' -> node ",
                  first_row + static_cast<node_t>(row), " of type '",
                  node_types[static_cast<std::size_t>(to)].name, "') has relation ",
                  canonical_name(r));
      }
    }
  }
};

}  // namespace sar
