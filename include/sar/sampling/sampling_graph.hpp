// What a bulk sampler reads of a graph (the concept sampling_graph_of: rows of A by dataset
// id, with their edge ids and relations, and LADIES' importance sums), and the whole graph in
// one process as such a graph (sampling_graph). The ranks' version, which fetches rows from
// the ranks that own them, is sar/sampling/distributed_sampling_graph.hpp; the samplers are
// sar/sampling/samplers.hpp.
#pragma once

#include <algorithm>
#include <concepts>
#include <cstdint>
#include <span>
#include <vector>

#include "sar/core/bf16.hpp"
#include "sar/core/error.hpp"
#include "sar/core/sparse_rows.hpp"
#include "sar/core/types.hpp"
#include "sar/graph/builders.hpp"
#include "sar/graph/csr.hpp"
#include "sar/kernels/dense.hpp"
#include "sar/sampling/spgemm.hpp"

namespace sar {

namespace detail {
/// Â_ij^2 = 1 / (in_i out_j), degrees clamped to 1: the same double on every rank.
inline double squared_normalised(node_t in_degree, node_t out_degree) {
  return 1.0 / (static_cast<double>(std::max<node_t>(in_degree, 1)) *
                static_cast<double>(std::max<node_t>(out_degree, 1)));
}
}  // namespace detail

/// The rows `ids` of m, in that order (m of no columns, e.g. an edge table of relations
/// alone: ids.size() x 0, m not read).
template <class T>
matrix<T> gather_rows(const_rows_ref<T> m, std::span<const node_t> ids) {
  matrix<T> out(static_cast<Eigen::Index>(ids.size()), m.cols());
  if (m.cols() == 0) return out;
  for_row_chunks(out.rows(), static_cast<double>(m.cols()), [&](Eigen::Index b, Eigen::Index e) {
    for (Eigen::Index r = b; r < e; ++r) out.row(r) = m.row(ids[static_cast<std::size_t>(r)]);
  });
  return out;
}

/// LADIES' importances of k minibatches: row b of `weights` holds, for every candidate source
/// j (sorted), p_j = sum over the minibatch's level of Â_ij^2; out_degree[e] is the
/// out-degree of the candidate of entry e.
struct ladies_importance {
  /// Row b: the importances p_j of minibatch b's candidate sources j.
  sparse_matrix weights;
  /// Out-degree of the candidate of each entry of weights.
  std::vector<node_t> out_degree;
};

/// Rows of A as a sampling graph answers them: row r of `a` lists the in-neighbours of the
/// r-th id asked for (dataset ids, sorted; values 1). Where the graph has an edge table (edge
/// features or relations), the rows are its stored rows, one entry per stored edge (a pair
/// joined by two relations twice), and entry j of row r is edge first_edge[r] + j (an edge
/// id: the row of the graph's edge table holding that edge's features and relation);
/// first_edge is empty otherwise (and a repeated pair is one entry).
struct adjacency_rows {
  sparse_matrix a;                ///< the rows of A
  std::vector<edge_t> first_edge; ///< the edge id of each row's first entry (empty: no table)
  /// The relation of each entry of a, where they were asked for and the graph has relations
  /// (else empty).
  std::vector<std::int32_t> types;
};

/// Rows of a graph's edge table (sampling_graph_of::gather_edges): features (0 columns: the
/// graph has none) and relations (empty: the graph has none), one per edge asked for.
struct edge_rows {
  matrixf features;                   ///< one row per edge
  std::vector<std::int32_t> types;    ///< one relation per edge
};

/// What a bulk sampler reads of a graph:
///   num_nodes()                            the graph's nodes (dataset ids [0, num_nodes()))
///   rows(span<const node_t> ids, bool relations)
///                                          -> adjacency_rows: row r = the in-neighbours of
///                                          ids[r], with edge ids where the graph has an
///                                          edge table, and with relations, where it has
///                                          them, each entry's relation
///   importance(const sparse_matrix& levels) -> ladies_importance, for levels' rows (one per
///                                          minibatch: ones at its level's ids, sorted)
/// rows and importance are collective on a distributed graph (every rank calls them alike).
template <class G>
concept sampling_graph_of = requires(G& g, std::span<const node_t> ids, const sparse_matrix& q) {
  { g.num_nodes() } -> std::same_as<node_t>;
  { g.rows(ids, true) } -> std::same_as<adjacency_rows>;
  { g.importance(q) } -> std::same_as<ladies_importance>;
};

/// The whole graph in one process as a sampling graph. graph: in-edges (row = destination),
/// square; it and the edge table, if given, must outlive this object. An edge's id is its
/// entry in the graph (its row of the edge table). LADIES' Â o Â (values 1 / (in_i out_j)) is
/// built on the first importance() call.
class sampling_graph {
 public:
  /// Throws sar::invalid_argument for a non-square graph.
  explicit sampling_graph(const csr& graph) : graph_(&graph) {
    SAR_CHECK(graph.num_cols == graph.num_rows, invalid_argument, "sar::sampling_graph: the "
              "graph is ", graph.num_rows, " x ", graph.num_cols, " (square expected)");
  }
  /// With an edge table: one feature row per entry of the graph (0 columns: none) and one
  /// relation per entry (empty: none; a heterogeneous graph's edge types). Throws
  /// sar::invalid_argument as above, or if the table is neither empty nor one per entry.
  sampling_graph(const csr& graph, const matrixf& edge_features,
                 std::span<const std::int32_t> edge_types = {})
      : sampling_graph(graph) {
    SAR_CHECK((edge_features.cols() == 0 || edge_features.rows() == graph.num_edges()) &&
                  (edge_types.empty() || static_cast<edge_t>(edge_types.size()) == graph.num_edges()),
              invalid_argument, "sar::sampling_graph: ", edge_features.rows(),
              " edge feature rows and ", edge_types.size(), " edge types for ",
              graph.num_edges(), " edges");
    if (edge_features.cols() > 0) edge_features_ = &edge_features;
    edge_types_ = edge_types;
  }
  /// Number of nodes.
  node_t num_nodes() const { return graph_->num_rows; }

  /// Row r = the in-neighbours of ids[r] (sorted; values 1), with edge ids where the graph
  /// has an edge table (then as stored: see adjacency_rows), and with `relations` each
  /// entry's relation where the graph has them.
  adjacency_rows rows(std::span<const node_t> ids, bool relations = false) const {
    if (edge_features_ == nullptr && edge_types_.empty())
      return {spgemm(selection_matrix(ids, num_nodes()), sparse_view(*graph_)), {}, {}};
    adjacency_rows out;
    sparse_matrix& a = out.a;
    a.pattern.num_rows = static_cast<node_t>(ids.size());
    a.pattern.num_cols = num_nodes();
    a.pattern.offsets.assign(1, 0);
    for (const node_t v : ids) {
      SAR_CHECK(v >= 0 && v < num_nodes(), invalid_argument, "sar::sampling_graph::rows: node ",
                v, " outside [0, ", num_nodes(), ")");
      const auto row = graph_->row(v);
      a.pattern.columns.insert(a.pattern.columns.end(), row.begin(), row.end());
      a.pattern.offsets.push_back(static_cast<edge_t>(a.pattern.columns.size()));
      out.first_edge.push_back(graph_->offsets[v]);
      if (relations && !edge_types_.empty())
        out.types.insert(out.types.end(), edge_types_.begin() + graph_->offsets[v],
                         edge_types_.begin() + graph_->offsets[v + 1]);
    }
    a.values.assign(a.pattern.columns.size(), 1.0);
    return out;
  }

  /// The edge table's features (0 x 0: none): one row per entry of the graph.
  const matrixf& edge_features() const { return edge_features_ ? *edge_features_ : no_edges_; }
  /// The edge table's relations (empty: none): one per entry of the graph.
  std::span<const std::int32_t> edge_types() const { return edge_types_; }
  /// Whether the graph has an edge table (features or relations).
  bool has_edge_table() const { return edge_features_ != nullptr || !edge_types_.empty(); }
  /// The edge table's rows of edge ids `ids`, in that order.
  edge_rows gather_edges(std::span<const edge_t> ids) const {
    edge_rows out{sar::gather_rows<float>(edge_features(), ids), {}};
    if (!edge_types_.empty())
      for (const edge_t e : ids) out.types.push_back(edge_types_[static_cast<std::size_t>(e)]);
    return out;
  }

  /// LADIES' importances for levels' rows (builds Â o Â on the first call).
  ladies_importance importance(const sparse_matrix& levels) {
    const csr& g = *graph_;
    const std::vector<node_t>& out_degree = all_out_degrees();
    if (squared_.size() != static_cast<std::size_t>(g.num_edges())) {
      const std::vector<node_t> in_degree = in_degrees(g);
      squared_.resize(static_cast<std::size_t>(g.num_edges()));
      for (node_t i = 0; i < g.num_rows; ++i)
        for (edge_t e = g.offsets[i]; e < g.offsets[i + 1]; ++e)
          squared_[e] = detail::squared_normalised(in_degree[i], out_degree[g.columns[e]]);
    }
    ladies_importance out{spgemm(levels, sparse_view(g, squared_)), {}};
    out.out_degree = gather(std::span<const node_t>(out_degree), out.weights.pattern.columns);
    return out;
  }

  // What the minibatch loop reads (sar/train/minibatch.hpp; the same names as
  // distributed_sampling_graph, where they are collective): one process holds every node,
  // row = dataset id.
  /// Always 0.
  int rank() const { return 0; }
  /// Always 1.
  int size() const { return 1; }
  /// Always true: every node counts in metrics.
  bool counts_in_evaluation() const { return true; }
  /// Number of nodes (all of them are local).
  node_t num_local() const { return num_nodes(); }
  /// The local row of node `id`: `id` itself.
  node_t local_row(node_t id) const { return id; }
  /// The whole graph.
  const csr& local_rows() const { return *graph_; }
  /// Empty: no id map is needed.
  std::span<const node_t> local_ids() const { return {}; }  // row r is node r
  /// The nodes whose split is train, ascending.
  std::vector<node_t> training_nodes(std::span<const node_split> split) const {
    std::vector<node_t> out;
    for (std::size_t v = 0; v < split.size(); ++v)
      if (split[v] == node_split::train) out.push_back(static_cast<node_t>(v));
    return out;
  }
  /// `per_peer` itself: one process is its only peer.
  template <class V>
  std::vector<std::vector<V>> all_to_all(std::vector<std::vector<V>> per_peer) const {
    return per_peer;
  }
  /// The rows `ids` of `local` (gather_rows).
  template <class T>
  matrix<T> gather(const_rows_ref<T> local, std::span<const node_t> ids) const {
    return sar::gather_rows<T>(local, ids);
  }
  /// The rows `ids` of a matrix over the nodes whose row r is the `cols` values at row_of(r)
  /// (a const T*).
  template <class T, class RowOf>
  matrix<T> gather_rows(std::span<const node_t> ids, Eigen::Index cols, RowOf&& row_of) const {
    matrix<T> out(static_cast<Eigen::Index>(ids.size()), cols);
    for (std::size_t i = 0; i < ids.size() && cols > 0; ++i)
      out.row(static_cast<Eigen::Index>(i)) =
          Eigen::Map<const Eigen::Matrix<T, 1, Eigen::Dynamic>>(row_of(ids[i]), cols);
    return out;
  }
  /// Calls add(ids[i], row i of `rows` as a const T*) for each i in order: one process holds
  /// every row.
  template <class T, class Add>
  void scatter_rows(std::span<const node_t> ids, const_rows_ref<T> rows, Add&& add) const {
    for (std::size_t i = 0; i < ids.size(); ++i)
      add(ids[i], rows.row(static_cast<Eigen::Index>(i)).data());
  }
  /// The rows `ids` of bf16 rows `local`, decoded to T.
  template <class T>
  matrix<T> gather_decoded(const bf16_rows& local, std::span<const node_t> ids) const {
    matrix<T> out(static_cast<Eigen::Index>(ids.size()), local.cols());
    for (std::size_t i = 0; i < ids.size(); ++i)
      decode_bf16(local.row(ids[i]), local.cols(), out.row(static_cast<Eigen::Index>(i)).data());
    return out;
  }
  /// The rows `ids` of sparse rows `local` (select_rows).
  template <class T>
  sparse_rows<T> gather(const sparse_rows<T>& local, std::span<const node_t> ids) const {
    return select_rows(local, ids);
  }
  /// The entries `ids` of `local`.
  template <class V>
  std::vector<V> gather(std::span<const V> local, std::span<const node_t> ids) const {
    std::vector<V> out;
    out.reserve(ids.size());
    for (node_t v : ids) out.push_back(local[v]);
    return out;
  }
  /// Out-degrees of `ids` (every node's counted on first use).
  std::vector<node_t> out_degrees(std::span<const node_t> ids) {
    return gather(std::span<const node_t>(all_out_degrees()), ids);
  }
  /// Nothing to sum over: leaves the values unchanged.
  template <class V>
  void all_reduce_sum(std::span<V>) const {}
  /// Returns `value`.
  std::int64_t all_reduce_max(std::int64_t value) const { return value; }
  /// The graph's bytes and what this object derived from it.
  std::size_t memory_bytes() const {
    return graph_->memory_bytes() + out_degree_.capacity() * sizeof(node_t) +
           squared_.capacity() * sizeof(double);
  }

 private:
  /// Every node's out-degree, counted on first use.
  const std::vector<node_t>& all_out_degrees() {
    if (out_degree_.size() != static_cast<std::size_t>(num_nodes()))
      out_degree_ = sar::out_degrees(*graph_);
    return out_degree_;
  }

  const csr* graph_;
  const matrixf* edge_features_ = nullptr;
  std::span<const std::int32_t> edge_types_;
  inline static const matrixf no_edges_{};
  std::vector<node_t> out_degree_;
  std::vector<double> squared_;  // Â o Â, one value per edge
};

static_assert(sampling_graph_of<sampling_graph>);

}  // namespace sar
