// One rank's part of a graph for distributed minibatch training (docs/sampling.md): P ranks
// as (P / c) groups x c replicas. Rank r is replica r % c of group r / c and holds part
// r / c of a partition store of P / c parts: the block rows of the adjacency (every in-edge
// of the part's nodes) and their features, labels and split, so each block row lives on c
// ranks. Everything is addressed by dataset id (the id before the store's relabelling), so
// samples and random numbers do not depend on the partition.
//
// A request for rows of A, feature rows, labels or degrees goes to the replica with the
// requester's replica index in the group owning each id (one all-to-all of ids, one of
// answers): the 1.5D product P = Q A fetches the rows of A that Q selects, only where
// needed, and a rank finds the rows of its own group at home. LADIES' importance sums are
// computed where the rows live (the entry (minibatch b, node v) by replica b % c of v's
// group) and the partial sums of all ranks are added in rank order.
//
// Memory per rank: the part's rows (columns as dataset ids), out-degrees of its nodes, its
// nodes' dataset ids, and its block of the map dataset id -> relabelled id (a distributed
// directory: O(n / P), never an array of the graph's node count); layer-wise sampling adds the
// out-degree of every edge's source. A request maps its ids through the directory first (two
// all-to-alls of the distinct ids), then fetches from the owners.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <numeric>
#include <span>
#include <tuple>
#include <utility>
#include <vector>

#include "sar/comm/communicator.hpp"
#include "sar/partition/directory.hpp"
#include "sar/core/bf16.hpp"
#include "sar/core/error.hpp"
#include "sar/core/types.hpp"
#include "sar/graph/csr.hpp"
#include "sar/partition/graph_part.hpp"
#include "sar/sampling/samplers.hpp"

namespace sar {

/// Throws sar::invalid_argument (the same on every rank) unless replication >= 1 divides
/// `ranks` and the store has ranks / replication parts.
inline void check_replication(const char* where, int ranks, int replication, int store_parts) {
  SAR_CHECK(replication >= 1 && ranks % replication == 0, invalid_argument, where,
            ": replication ", replication, " does not divide the ", ranks,
            " ranks (ranks = groups x replication)");
  SAR_CHECK(store_parts == ranks / replication, invalid_argument, where, ": ", ranks,
            " ranks with replication ", replication, " need a partition of ",
            ranks / replication, " parts, not ", store_parts);
}

/// What a rank of a distributed_sampling_graph sent to the other ranks (its own rows, answered
/// at home, are not counted), in bytes unless named otherwise. The id-map lookups that
/// precede each request are not counted (two all-to-alls of the distinct ids).
struct sampling_traffic {
  std::int64_t requests = 0;         ///< distinct ids asked of other ranks
  std::int64_t request_bytes = 0;    ///< their bytes (8 each)
  std::int64_t adjacency_bytes = 0;  ///< rows of A answered (sampling)
  std::int64_t row_bytes = 0;        ///< matrix rows answered (features, layer-wise inference)
  std::int64_t entry_bytes = 0;      ///< vector entries answered (labels, degrees)
  /// Rows sent to the ranks that hold them, with their local rows (8 bytes each): the
  /// gradients of borrowed embedding rows (scatter_rows).
  std::int64_t returned_bytes = 0;
  /// All of it.
  std::int64_t total_bytes() const {
    return request_bytes + adjacency_bytes + row_bytes + entry_bytes + returned_bytes;
  }
};

/// One rank's part of a graph for distributed minibatch training (see the top of this
/// file): a sar::minibatch_graph whose calls that fetch rows or reduce are collective.
template <communicator Comm>
class distributed_sampling_graph {
 public:
  /// Collective. Takes part.in_edges, part.edge_features and part.edge_types (left empty):
  /// the graph the sampler walks, with the model's self-loops, and its edge table (one row and
  /// one relation per in-edge; 0 columns, no schema: none). An edge's id is its group's first
  /// edge id (the groups' edges numbered one after the other) plus its entry in the group's
  /// rows sorted by dataset id (a pair's edges of several relations in their stored order).
  /// layer_wise: keep what LADIES' importances need. Throws sar::invalid_argument naming the
  /// rank (check_replication; part.part not this rank's group; original ids not a
  /// permutation of the nodes; edge tables of different widths or kinds).
  distributed_sampling_graph(Comm& comm, graph_part& part, int replication, bool layer_wise)
      : comm_(&comm), replication_(replication), book_(part.book) {
    constexpr const char* where = "sar::distributed_sampling_graph";
    check_replication(where, comm.size(), replication, book_.num_parts());
    group_ = comm.rank() / replication;
    replica_ = comm.rank() % replication;
    SAR_CHECK(part.part == group_, invalid_argument, where, ": rank ", comm.rank(),
              " holds part ", part.part, " but its group is ", group_);
    const node_t n = book_.num_nodes();
    ids_ = part.original_ids;
    if (ids_.empty())
      for (node_t r = 0; r < part.num_local(); ++r) ids_.push_back(part.first_global() + r);
    for (std::size_t r = 0; r < ids_.size(); ++r) row_of_.emplace_back(ids_[r], static_cast<node_t>(r));
    std::sort(row_of_.begin(), row_of_.end());

    // The id maps, each kept in blocks over the ranks (each group's replica 0 gives its rows).
    std::vector<std::int64_t> relabelled, dataset;
    if (replica_ == 0)
      for (std::size_t r = 0; r < ids_.size(); ++r) {
        relabelled.push_back(part.first_global() + static_cast<node_t>(r));
        dataset.push_back(ids_[r]);
      }
    try {
      global_of_ = id_directory(comm, n, dataset, relabelled, id_directory::pairs::unique);
    } catch (const invalid_argument& e) {
      throw invalid_argument(message(where, ": the parts' original ids are not a permutation of "
                                     "the nodes (", e.what(), ")"));
    }
    rows_ = std::move(part.in_edges);
    part.in_edges = {};
    {
      const id_directory dataset_of(comm, n, relabelled, dataset, id_directory::pairs::unique);
      const auto columns = dataset_of.lookup(comm, std::span<const node_t>(rows_.columns));
      std::copy(columns.begin(), columns.end(), rows_.columns.begin());
    }
    take_edge_table(comm, part);
    if (!has_edge_table())  // (else take_edge_table sorted them with their table)
      for (node_t r = 0; r < rows_.num_rows; ++r)
        std::sort(rows_.columns.begin() + rows_.offsets[r], rows_.columns.begin() + rows_.offsets[r + 1]);

    // Out-degrees: every group counts its columns once.
    std::vector<std::int64_t> sources, ones;
    if (replica_ == 0) {
      sources.assign(rows_.columns.begin(), rows_.columns.end());
      ones.assign(sources.size(), 1);
    }
    const id_directory out(comm, n, sources, ones, id_directory::pairs::summed);
    sources = {};
    ones = {};
    const auto degrees = out.lookup(comm, std::span<const node_t>(ids_));
    out_degree_.assign(degrees.begin(), degrees.end());
    if (layer_wise) {
      const auto column_degrees = out.lookup(comm, std::span<const node_t>(rows_.columns));
      column_out_degree_.assign(column_degrees.begin(), column_degrees.end());
    }
  }

  // --- What the sampler reads (sar/sampling/samplers.hpp, sampling_graph_of) ---
  /// Number of nodes of the whole graph.
  node_t num_nodes() const { return book_.num_nodes(); }

  /// The rows of A of `ids` (dataset ids), columns as dataset ids, with edge ids if the
  /// graph has an edge table, and with `relations` each entry's relation if it has them.
  /// Collective (every rank passes the same `relations`).
  adjacency_rows rows(std::span<const node_t> ids, bool relations = false) {
    const bool edge_ids = has_edge_table();
    const bool typed = relations && typed_;
    const std::size_t head = edge_ids ? 2 : 1;  // an answer: count, [first edge id,] columns,
    const std::size_t per_entry = typed ? 2 : 1;  // [relations]
    const route r = send(ids);
    const auto got = answer<std::int64_t>(r, traffic_.adjacency_bytes,
                                          [&](std::vector<std::int64_t>& reply, node_t row) {
      const auto cols = rows_.row(row);
      reply.push_back(static_cast<std::int64_t>(cols.size()));
      if (edge_ids) reply.push_back(edge_begin_[static_cast<std::size_t>(group_)] + rows_.offsets[row]);
      reply.insert(reply.end(), cols.begin(), cols.end());
      if (typed)
        reply.insert(reply.end(), edge_types_.begin() + rows_.offsets[row],
                     edge_types_.begin() + rows_.offsets[row + 1]);
    });
    std::vector<std::vector<std::size_t>> start(got.size());  // per peer: where answer k starts
    for (std::size_t q = 0; q < got.size(); ++q)
      for (std::size_t at = 0; at < got[q].size();
           at += head + per_entry * static_cast<std::size_t>(got[q][at]))
        start[q].push_back(at);
    adjacency_rows out;
    sparse_matrix& a = out.a;
    a.pattern.num_rows = static_cast<node_t>(ids.size());
    a.pattern.num_cols = num_nodes();
    a.pattern.offsets.assign(1, 0);
    for (std::size_t i = 0; i < ids.size(); ++i) {
      const auto& chunk = got[r.peer[i]];
      const std::size_t at = start[r.peer[i]][r.slot[i]];
      const auto columns = chunk.begin() + static_cast<std::ptrdiff_t>(at + head);
      a.pattern.columns.insert(a.pattern.columns.end(), columns, columns + chunk[at]);
      a.pattern.offsets.push_back(static_cast<edge_t>(a.pattern.columns.size()));
      if (edge_ids) out.first_edge.push_back(chunk[at + 1]);
      if (typed)
        for (auto t = columns + chunk[at]; t != columns + 2 * chunk[at]; ++t)
          out.types.push_back(static_cast<std::int32_t>(*t));
    }
    a.values.assign(a.pattern.columns.size(), 1.0);
    return out;
  }

  /// LADIES' importances of the minibatches' levels (rows of `levels`, the same on every
  /// rank). Collective; the same result on every rank.
  ladies_importance importance(const sparse_matrix& levels) {
    SAR_CHECK(column_out_degree_.size() == rows_.columns.size(), error,
              "sar::distributed_sampling_graph::importance: made without layer_wise");
    // This rank's partial sums: (minibatch, source, out-degree) and the value.
    std::vector<std::int64_t> keys;
    std::vector<double> values;
    for (node_t b = 0; b < levels.rows(); ++b) {
      if (b % replication_ != replica_) continue;
      struct entry {
        node_t source, out_degree;
        double value;
      };
      std::vector<entry> entries;  // in order of v
      for (node_t v : levels.row_columns(b)) {
        const node_t row = local_row(v);
        if (row < 0) continue;
        for (edge_t e = rows_.offsets[row]; e < rows_.offsets[row + 1]; ++e)
          entries.push_back({rows_.columns[e], column_out_degree_[e],
                             detail::squared_normalised(rows_.degree(row), column_out_degree_[e])});
      }
      std::stable_sort(entries.begin(), entries.end(),
                       [](const entry& x, const entry& y) { return x.source < y.source; });
      for (std::size_t i = 0; i < entries.size();) {
        const entry& first = entries[i];
        double sum = 0;
        for (; i < entries.size() && entries[i].source == first.source; ++i) sum += entries[i].value;
        keys.insert(keys.end(), {b, first.source, first.out_degree});
        values.push_back(sum);
      }
    }
    const auto all_keys = all_gather(keys);
    const auto all_values = all_gather(values);
    // Sum the partials of every rank in rank order, per minibatch and source.
    std::vector<std::vector<std::tuple<node_t, std::size_t, std::size_t>>> parts(
        static_cast<std::size_t>(levels.rows()));  // (source, rank, index)
    for (std::size_t q = 0; q < all_values.size(); ++q)
      for (std::size_t i = 0; i < all_values[q].size(); ++i)
        parts[all_keys[q][3 * i]].emplace_back(all_keys[q][3 * i + 1], q, i);
    ladies_importance out;
    sparse_matrix& w = out.weights;
    w.pattern.num_rows = levels.rows();
    w.pattern.num_cols = num_nodes();
    w.pattern.offsets.assign(1, 0);
    for (auto& p : parts) {
      std::stable_sort(p.begin(), p.end(), [](const auto& x, const auto& y) {
        return std::get<0>(x) < std::get<0>(y);
      });
      for (std::size_t i = 0; i < p.size();) {
        const node_t j = std::get<0>(p[i]);
        double sum = 0;
        node_t degree = 0;
        for (; i < p.size() && std::get<0>(p[i]) == j; ++i) {
          const auto [source, q, k] = p[i];
          sum += all_values[q][k];
          degree = all_keys[q][3 * k + 2];
        }
        w.pattern.columns.push_back(j);
        w.values.push_back(sum);
        out.out_degree.push_back(degree);
      }
      w.pattern.offsets.push_back(static_cast<edge_t>(w.pattern.columns.size()));
    }
    return out;
  }

  // --- What the minibatch loop reads (sar/train/minibatch.hpp) ---
  /// This rank.
  int rank() const { return comm_->rank(); }
  /// Number of ranks.
  int size() const { return comm_->size(); }
  /// Ranks per group c (each part lives on c ranks).
  int replication() const { return replication_; }
  /// The communicator the ranks share.
  Comm& communicator() const { return *comm_; }
  /// Whether this rank's nodes count in metrics (replica 0 of each group).
  bool counts_in_evaluation() const { return replica_ == 0; }
  /// Number of nodes of this rank's part.
  node_t num_local() const { return rows_.num_rows; }
  /// The local row of node `id` (dataset id), or -1 if another group owns it.
  node_t local_row(node_t id) const {
    const auto it = std::lower_bound(row_of_.begin(), row_of_.end(), std::pair<node_t, node_t>{id, -1});
    return it != row_of_.end() && it->first == id ? it->second : -1;
  }
  /// In-edges of this rank's nodes, columns as dataset ids (sorted).
  const csr& local_rows() const { return rows_; }
  /// Dataset id of each local row.
  std::span<const node_t> local_ids() const { return ids_; }

  /// The dataset ids of this rank's training nodes (by `split` of the local rows), ascending;
  /// none on a replica (replica() > 0), so the ranks' lists are disjoint.
  std::vector<node_t> training_nodes(std::span<const node_split> split) const {
    std::vector<node_t> mine;
    if (replica_ == 0)
      for (std::size_t r = 0; r < split.size(); ++r)
        if (split[r] == node_split::train) mine.push_back(ids_[r]);
    std::sort(mine.begin(), mine.end());
    return mine;
  }
  /// per_peer[r] to rank r; returns what each rank sent this one, in rank order. Collective.
  template <wire_scalar V>
  std::vector<std::vector<V>> all_to_all(const std::vector<std::vector<V>>& per_peer) {
    return all_to_all_vectors(*comm_, per_peer);
  }

  /// Rows `ids` (dataset ids) of a matrix whose rows are the local nodes (every rank's has
  /// `cols` columns). Collective.
  template <class T>
  matrix<T> gather(const_rows_ref<T> local, std::span<const node_t> ids) {
    return fetch_rows<T>(send(ids), local.cols(),
                         [&](node_t row) { return local.row(row).data(); });
  }
  /// Rows `ids` (dataset ids) of bf16 rows over the local nodes (the same columns on every
  /// rank), decoded to T: they travel as bf16, two bytes a value. Collective.
  template <class T>
  matrix<T> gather_decoded(const bf16_rows& local, std::span<const node_t> ids) {
    const route r = send(ids);
    const auto bytes = static_cast<std::size_t>(local.cols()) * sizeof(std::uint16_t);
    const auto got = answer<std::byte>(r, traffic_.row_bytes,
                                       [&](std::vector<std::byte>& reply, node_t row) {
      const auto* values = reinterpret_cast<const std::byte*>(local.row(row));
      reply.insert(reply.end(), values, values + bytes);
    });
    matrix<T> out(static_cast<Eigen::Index>(ids.size()), local.cols());
    std::vector<std::uint16_t> row(static_cast<std::size_t>(local.cols()));
    for (std::size_t i = 0; i < ids.size(); ++i) {  // (received bytes: copied to align them)
      if (bytes > 0) std::memcpy(row.data(), got[r.peer[i]].data() + r.slot[i] * bytes, bytes);
      decode_bf16(row.data(), local.cols(), out.row(static_cast<Eigen::Index>(i)).data());
    }
    return out;
  }
  /// Rows `ids` (dataset ids) of a matrix over the local nodes whose local row r is the `cols`
  /// values at row_of(r) (a const T*; the same cols on every rank). Collective.
  template <class T, class RowOf>
  matrix<T> gather_rows(std::span<const node_t> ids, Eigen::Index cols, RowOf&& row_of) {
    return fetch_rows<T>(send(ids), cols, row_of);
  }
  /// Sends row i of `rows` (the same columns on every rank) to every replica of the group
  /// that owns node ids[i] (dataset ids, each in [0, num_nodes())), then calls add(local row,
  /// const T* values) for each row sent to this rank: the senders in rank order, each one's
  /// rows in the order of its ids, so the replicas of a group add the same rows in the same
  /// order. Collective (two all-to-alls after the id map's).
  template <class T, class Add>
  void scatter_rows(std::span<const node_t> ids, const_rows_ref<T> rows, Add&& add) {
    check_ids(ids, num_nodes(), "node");
    SAR_CHECK(rows.rows() == static_cast<Eigen::Index>(ids.size()), invalid_argument,
              "sar::distributed_sampling_graph::scatter_rows: rank ", comm_->rank(), ": ",
              rows.rows(), " rows for ", ids.size(), " ids");
    const std::vector<std::int64_t> global = global_of_.lookup(*comm_, ids);
    const auto ranks = static_cast<std::size_t>(comm_->size());
    const auto cols = static_cast<std::size_t>(rows.cols());
    std::vector<std::vector<std::int64_t>> at(ranks);  // local rows at each rank
    std::vector<std::vector<T>> values(ranks);
    for (std::size_t i = 0; i < ids.size(); ++i) {
      const int group = book_.owner(global[i]);
      for (int replica = 0; replica < replication_; ++replica) {
        const auto q = static_cast<std::size_t>(group * replication_ + replica);
        at[q].push_back(global[i] - book_.begin(group));
        const T* row = rows.row(static_cast<Eigen::Index>(i)).data();
        values[q].insert(values[q].end(), row, row + cols);
      }
    }
    for (std::size_t q = 0; q < ranks; ++q)
      if (static_cast<int>(q) != comm_->rank())
        traffic_.returned_bytes += static_cast<std::int64_t>(
            at[q].size() * sizeof(std::int64_t) + values[q].size() * sizeof(T));
    const auto got_at = all_to_all_vectors(*comm_, at);
    const auto got_values = all_to_all_vectors(*comm_, values);
    for (std::size_t q = 0; q < ranks; ++q)
      for (std::size_t k = 0; k < got_at[q].size(); ++k)
        add(static_cast<node_t>(got_at[q][k]), got_values[q].data() + k * cols);
  }
  /// The edge table's features of local_rows() (a row per entry, in order; 0 x 0 on every
  /// rank: none).
  const matrixf& edge_features() const { return edge_features_; }
  /// The edge table's relations of local_rows() (one per entry, in order; empty: none).
  std::span<const std::int32_t> edge_types() const { return edge_types_; }
  /// Whether the graph has an edge table (features or relations; the same on every rank).
  bool has_edge_table() const { return edge_features_.cols() > 0 || typed_; }
  /// The edge table's rows of edge ids `ids` (as rows() gave them), in that order. Collective.
  /// Throws sar::invalid_argument naming the rank for an id outside the graph's edges.
  edge_rows gather_edges(std::span<const edge_t> ids) {
    const route r = send_edges(ids);
    edge_rows out{fetch_rows<float>(r, edge_features_.cols(),
                                    [&](node_t entry) { return edge_features_.row(entry).data(); }),
                  {}};
    if (typed_) {
      const auto got = answer<std::int64_t>(r, traffic_.entry_bytes,
                                            [&](std::vector<std::int64_t>& reply, node_t entry) {
        reply.push_back(edge_types_[static_cast<std::size_t>(entry)]);
      });
      for (std::size_t i = 0; i < ids.size(); ++i)
        out.types.push_back(static_cast<std::int32_t>(got[r.peer[i]][r.slot[i]]));
    }
    return out;
  }
  /// Entries `ids` of a vector over the local nodes. Collective.
  template <class V>
  std::vector<V> gather(std::span<const V> local, std::span<const node_t> ids) {
    const route r = send(ids);
    const auto got = answer<std::int64_t>(r, traffic_.entry_bytes,
                                          [&](std::vector<std::int64_t>& reply, node_t row) {
      reply.push_back(static_cast<std::int64_t>(local[row]));
    });
    std::vector<V> out;
    for (std::size_t i = 0; i < ids.size(); ++i) out.push_back(static_cast<V>(got[r.peer[i]][r.slot[i]]));
    return out;
  }
  /// Out-degrees of `ids`. Collective.
  std::vector<node_t> out_degrees(std::span<const node_t> ids) {
    return gather(std::span<const node_t>(out_degree_), ids);
  }

  /// Sums values element-wise over all ranks, in place. Collective.
  template <reducible_scalar V>
  void all_reduce_sum(std::span<V> values) { comm_->all_reduce(values, reduce_op::sum); }
  /// The largest `value` of all ranks. Collective.
  std::int64_t all_reduce_max(std::int64_t value) {
    comm_->all_reduce(std::span<std::int64_t>(&value, 1), reduce_op::max);
    return value;
  }

  /// What this rank has sent to other ranks so far, by kind (sampling_traffic).
  const sampling_traffic& sent() const { return traffic_; }

  /// Bytes of the rows, edge table, ids, degrees and id map this rank keeps.
  std::size_t memory_bytes() const {
    return rows_.memory_bytes() + static_cast<std::size_t>(edge_features_.size()) * sizeof(float) +
           edge_types_.capacity() * sizeof(std::int32_t) +
           (ids_.capacity() + 2 * row_of_.capacity() + out_degree_.capacity() +
            column_out_degree_.capacity()) * sizeof(node_t) + global_of_.memory_bytes();
  }

 private:
  /// Requests sent: asked[q] = the local rows rank q asks of this rank; the i-th id went to
  /// rank peer[i] as its slot[i]-th request.
  struct route {
    std::vector<std::vector<std::int64_t>> asked;
    std::vector<int> peer;
    std::vector<std::size_t> slot;
  };
  /// Requests for the rows of nodes `ids` (dataset ids), found through the id map. Collective.
  route send(std::span<const node_t> ids) {
    return send_to_owners(ids, num_nodes(), "node", [&](std::span<const node_t> distinct) {
      const std::vector<std::int64_t> global = global_of_.lookup(*comm_, distinct);
      std::vector<std::pair<int, std::int64_t>> at;  // (group, local row)
      at.reserve(global.size());
      for (const std::int64_t g : global) at.emplace_back(book_.owner(g), g - book_.begin(book_.owner(g)));
      return at;
    });
  }
  /// Requests for the edge-table rows of edge ids `ids`. Collective.
  route send_edges(std::span<const edge_t> ids) {
    return send_to_owners(ids, edge_begin_.back(), "edge", [&](std::span<const edge_t> distinct) {
      std::vector<std::pair<int, std::int64_t>> at;  // (group, local entry)
      at.reserve(distinct.size());
      for (const edge_t e : distinct) {
        const auto group = static_cast<int>(
            std::upper_bound(edge_begin_.begin(), edge_begin_.end(), e) - edge_begin_.begin() - 1);
        at.emplace_back(group, e - edge_begin_[static_cast<std::size_t>(group)]);
      }
      return at;
    });
  }
  /// Each distinct id of `ids` (each in [0, count), else sar::invalid_argument naming the
  /// rank and the `kind` of id) is asked for once, however often `ids` repeats it, of the
  /// replica of its group that has this rank's replica index; locate(distinct ids) gives each
  /// its (group, local index). A rank's own rows are answered at home (its all-to-all slot to
  /// itself is a copy, not a transfer). Collective.
  template <class Locate>
  route send_to_owners(std::span<const std::int64_t> ids, std::int64_t count, const char* kind,
                       Locate&& locate) {
    check_ids(ids, count, kind);
    std::vector<std::int64_t> distinct(ids.begin(), ids.end());
    std::sort(distinct.begin(), distinct.end());
    distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
    const std::vector<std::pair<int, std::int64_t>> at = locate(std::span<const std::int64_t>(distinct));
    std::vector<std::vector<std::int64_t>> per_peer(static_cast<std::size_t>(comm_->size()));
    std::vector<int> peer(distinct.size());
    std::vector<std::size_t> slot(distinct.size());
    for (std::size_t k = 0; k < distinct.size(); ++k) {
      const int q = at[k].first * replication_ + replica_;
      peer[k] = q;
      slot[k] = per_peer[q].size();
      per_peer[q].push_back(at[k].second);
    }
    for (std::size_t q = 0; q < per_peer.size(); ++q)
      if (static_cast<int>(q) != comm_->rank()) {
        traffic_.requests += static_cast<std::int64_t>(per_peer[q].size());
        traffic_.request_bytes += static_cast<std::int64_t>(per_peer[q].size() * sizeof(std::int64_t));
      }
    route r;
    r.peer.reserve(ids.size());
    r.slot.reserve(ids.size());
    for (const std::int64_t v : ids) {
      const auto k = static_cast<std::size_t>(
          std::lower_bound(distinct.begin(), distinct.end(), v) - distinct.begin());
      r.peer.push_back(peer[k]);
      r.slot.push_back(slot[k]);
    }
    r.asked = all_to_all_vectors(*comm_, per_peer);
    return r;
  }
  /// Answers the requests of route r (reply_to(reply, row) appends what peer q gets for local
  /// row `row` to reply) and returns what every rank answered this one, per peer. Collective.
  template <wire_scalar W, class ReplyTo>
  std::vector<std::vector<W>> answer(const route& r, std::int64_t& counted, ReplyTo&& reply_to) {
    std::vector<std::vector<W>> replies(r.asked.size());
    for (std::size_t q = 0; q < r.asked.size(); ++q) {
      for (std::int64_t row : r.asked[q]) reply_to(replies[q], row);
      if (static_cast<int>(q) != comm_->rank())
        counted += static_cast<std::int64_t>(replies[q].size() * sizeof(W));
    }
    return all_to_all_vectors(*comm_, replies);
  }
  /// Throws sar::invalid_argument naming the rank and the `kind` of id unless every id is in
  /// [0, count).
  void check_ids(std::span<const std::int64_t> ids, std::int64_t count, const char* kind) const {
    for (const std::int64_t v : ids)
      SAR_CHECK(v >= 0 && v < count, invalid_argument, "sar::distributed_sampling_graph: rank ",
                comm_->rank(), " asked for ", kind, " ", v, " outside [0, ", count, ")");
  }
  /// The rows answered for the requests of route r: local row `row` is the `width` values at
  /// row_of(row) (the same width on every rank). Collective.
  template <class T, class RowOf>
  matrix<T> fetch_rows(const route& r, Eigen::Index width, RowOf&& row_of) {
    const auto cols = static_cast<std::size_t>(width);
    const auto got = answer<T>(r, traffic_.row_bytes, [&](std::vector<T>& reply, node_t row) {
      if (cols == 0) return;  // (a matrix of no columns may have no rows either)
      const T* values = row_of(row);
      reply.insert(reply.end(), values, values + cols);
    });
    matrix<T> out(static_cast<Eigen::Index>(r.peer.size()), width);
    for (std::size_t i = 0; i < r.peer.size(); ++i)
      for (std::size_t c = 0; c < cols; ++c)
        out(static_cast<Eigen::Index>(i), c) = got[r.peer[i]][r.slot[i] * cols + c];
    return out;
  }
  /// Takes part's edge table (one row and relation per entry of rows_, whose columns are
  /// dataset ids now) and sorts rows_ with it by dataset id (ties in their stored order),
  /// and numbers the groups' edges. Throws as the constructor says. Collective.
  void take_edge_table(Comm& comm, graph_part& part) {
    constexpr const char* where = "sar::distributed_sampling_graph";
    matrixf& table = part.edge_features;
    const auto [narrowest, widest] = min_max_over_ranks(comm, static_cast<std::int64_t>(table.cols()));
    SAR_CHECK(narrowest == widest, invalid_argument, where, ": rank ", comm.rank(), " has ",
              table.cols(), " edge features per edge, other ranks from ", narrowest, " to ",
              widest);
    typed_ = part.schema.heterogeneous();
    const auto [untyped, typed] = min_max_over_ranks(comm, typed_ ? 1 : 0);
    SAR_CHECK(untyped == typed, invalid_argument, where, ": rank ", comm.rank(), "'s part is ",
              typed_ ? "heterogeneous" : "homogeneous", ", another rank's is not");
    const auto counts = all_gather(std::vector<std::int64_t>{rows_.num_edges()});
    edge_begin_.assign(1, 0);
    for (int g = 0; g < book_.num_parts(); ++g)  // each group's replica 0 counts its edges
      edge_begin_.push_back(edge_begin_.back() + counts[static_cast<std::size_t>(g * replication_)][0]);
    if (widest == 0 && !typed_) return;
    std::exception_ptr failure;  // a bad table on one rank ends every rank
    try {
      SAR_CHECK((widest == 0 || table.rows() == rows_.num_edges()) &&
                    (!typed_ || static_cast<edge_t>(part.edge_types.size()) == rows_.num_edges()),
                invalid_argument, where, ": rank ", comm.rank(), " has ", table.rows(),
                " edge feature rows and ", part.edge_types.size(), " edge types for ",
                rows_.num_edges(), " edges");
      // The order of each row's entries once sorted by column (dataset id), ties as stored.
      std::vector<edge_t> order(static_cast<std::size_t>(rows_.num_edges()));
      for (node_t r = 0; r < rows_.num_rows; ++r) {
        const auto first = order.begin() + rows_.offsets[r];
        const auto last = order.begin() + rows_.offsets[r + 1];
        std::iota(first, last, rows_.offsets[r]);
        std::sort(first, last, [&](edge_t a, edge_t b) {
          return std::pair(rows_.columns[a], a) < std::pair(rows_.columns[b], b);
        });
      }
      std::vector<node_t> columns(order.size());
      for (std::size_t k = 0; k < order.size(); ++k)
        columns[k] = rows_.columns[static_cast<std::size_t>(order[k])];
      rows_.columns = std::move(columns);
      if (widest > 0) edge_features_ = sar::gather_rows<float>(table, order);
      if (typed_)
        for (const edge_t e : order) edge_types_.push_back(part.edge_types[static_cast<std::size_t>(e)]);
      table = matrixf();
      part.edge_types = {};
    } catch (const error&) {
      failure = std::current_exception();
    }
    detail::agree_on_failure(comm, failure, where);
  }
  /// Every rank's `mine`, in rank order. Collective.
  template <class V>
  std::vector<std::vector<V>> all_gather(const std::vector<V>& mine) {
    return all_to_all(std::vector<std::vector<V>>(comm_->size(), mine));
  }
  Comm* comm_;
  int replication_ = 1, group_ = 0, replica_ = 0;
  partition_book book_;
  std::vector<node_t> ids_;           // local row -> dataset id
  csr rows_;                          // local rows; columns: dataset ids
  matrixf edge_features_;             // a row per entry of rows_ (0 x 0: none)
  std::vector<std::int32_t> edge_types_;  // a relation per entry of rows_ (empty: none)
  bool typed_ = false;                // the graph has relations (the same on every rank)
  std::vector<edge_t> edge_begin_;    // the first edge id of each group, then the edge count
  std::vector<std::pair<node_t, node_t>> row_of_;  // (dataset id, local row), sorted
  id_directory global_of_;            // dataset id -> relabelled id, in blocks over the ranks
  std::vector<node_t> out_degree_;    // of the local rows
  std::vector<node_t> column_out_degree_;  // layer-wise: of each edge's source
  sampling_traffic traffic_;
};

}  // namespace sar
