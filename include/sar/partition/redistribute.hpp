// Redistribution after a distributed partitioning: every node, with its in-edges (and their
// edge features and relations), features, label or targets and split, moves from the rank that read it to the rank that owns its part, and is
// relabelled so that part k owns one contiguous range of new ids, exactly as sar::relabel
// numbers them on one process (parts in order; inside a part, nodes in the order of their
// dataset ids). Sources of edges are mapped to new ids through the distributed directory
// (sar/partition/directory.hpp): no rank ever holds an array over all nodes.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <numeric>
#include <span>
#include <utility>
#include <vector>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include "sar/comm/communicator.hpp"
#include "sar/partition/directory.hpp"
#include "sar/core/error.hpp"
#include "sar/core/types.hpp"
#include "sar/graph/builders.hpp"
#include "sar/partition/graph_part.hpp"
#include "sar/partition/partition_book.hpp"

namespace sar {

/// The rank that owns part k of `parts` parts on `ranks` ranks: k * ranks / parts, so rank r
/// owns parts [ceil(r * parts / ranks), ceil((r + 1) * parts / ranks)) (with parts a multiple
/// of ranks, parts / ranks consecutive parts each).
inline int part_owner(int k, int parts, int ranks) {
  return static_cast<int>(static_cast<std::int64_t>(k) * ranks / parts);
}

namespace detail {
/// Sends what fill(q, out) appends for each peer q (count(q) values, known in advance) and
/// returns what every peer sent, back to back by peer, with the per-peer counts. One send
/// buffer, no per-peer copies. Collective.
template <class T, communicator Comm, class Count, class Fill>
std::vector<T> exchange_packed(Comm& comm, Count&& count, Fill&& fill,
                               std::vector<std::int64_t>& received_counts) {
  const int size = comm.size();
  std::vector<std::int64_t> send_counts(static_cast<std::size_t>(size));
  for (int q = 0; q < size; ++q) send_counts[static_cast<std::size_t>(q)] = count(q);
  std::vector<T> send;
  send.reserve(static_cast<std::size_t>(
      std::accumulate(send_counts.begin(), send_counts.end(), std::int64_t{0})));
  for (int q = 0; q < size; ++q) {
    const std::size_t before = send.size();
    fill(q, send);
    SAR_CHECK(static_cast<std::int64_t>(send.size() - before) == send_counts[static_cast<std::size_t>(q)],
              error, "sar::redistribute: internal: counted ", send_counts[static_cast<std::size_t>(q)],
              " values for rank ", q, ", packed ", send.size() - before);
  }
  received_counts = comm.all_to_all(std::span<const std::int64_t>(send_counts));
  std::vector<T> received(static_cast<std::size_t>(
      std::accumulate(received_counts.begin(), received_counts.end(), std::int64_t{0})));
  comm.all_to_all_v(std::span<const T>(send), std::span<const std::int64_t>(send_counts),
                    std::span<T>(received), std::span<const std::int64_t>(received_counts));
  return received;
}
}  // namespace detail

/// The parts this rank owns (part_owner) after partitioning the block-distributed dataset
/// `block` into `parts` parts: block holds this rank's range of dataset ids
/// [block.book.begin(rank), block.book.end(rank)) (block.book: one range per rank) with their
/// in-edges (columns: dataset ids), features (dense, or sparse rows on every rank), labels or
/// targets and split; part[i] is the part of its row i. Ensures: each returned graph_part
/// satisfies its contract (book: the new ranges of all parts; columns: new global ids, sorted;
/// original_ids: dataset ids), in increasing part order, and equals what
/// write_partition_store's relabelling gives on one process for the same partition. `block`
/// is consumed (its memory is released as the parts are built). Requires
/// block.book.num_parts() == comm.size(), part.size() == block's rows, every part in
/// [0, parts), sparse features on every rank or none. Collective. Throws
/// sar::invalid_argument naming the rank otherwise.
template <communicator Comm>
std::vector<graph_part> redistribute(Comm& comm, graph_part&& block, const std::vector<int>& part,
                                     int parts) {
  constexpr const char* where = "sar::redistribute";
  const int size = comm.size(), rank = comm.rank();
  const node_t rows = block.num_local();
  const node_t first = block.book.begin(rank);
  const std::int64_t dim = block.feature_dim();
  const bool sparse = block.sparse();  // features as sparse rows
  SAR_CHECK(block.book.num_parts() == size && static_cast<node_t>(part.size()) == rows &&
                parts >= 1 && block.book.size(rank) == rows,
            invalid_argument, where, ": rank ", rank, " holds ", rows, " rows, ", part.size(),
            " part entries, a book of ", block.book.num_parts(), " ranges for ", size,
            " ranks, ", parts, " parts");
  for (node_t i = 0; i < rows; ++i)
    SAR_CHECK(part[i] >= 0 && part[i] < parts, invalid_argument, where, ": rank ", rank,
              ": node ", first + i, " is in part ", part[i], ", outside [0, ", parts, ")");
  const bool labelled = !block.labels.empty(), with_split = !block.split.empty();
  const std::int32_t num_classes = block.num_classes;
  const task_kind task = block.task;
  const std::int64_t outputs = block.targets.cols();  // 0 for classify
  const std::int64_t dense_dim = sparse ? 0 : dim;    // dense feature columns
  const std::int64_t width = dense_dim + outputs;      // floats per node: features, targets
  const std::int64_t edge_dim = block.edge_features.cols();  // floats per in-edge
  SAR_CHECK(edge_dim == 0 || block.edge_features.rows() == block.in_edges.num_edges(),
            invalid_argument, where, ": rank ", rank, " holds ", block.edge_features.rows(),
            " edge feature rows for ", block.in_edges.num_edges(), " in-edges");
  const graph_schema schema = block.schema;
  const bool typed = schema.heterogeneous();  // edges carry their relations
  SAR_CHECK(!typed || static_cast<edge_t>(block.edge_types.size()) == block.in_edges.num_edges(),
            invalid_argument, where, ": rank ", rank, " holds ", block.edge_types.size(),
            " edge types for ", block.in_edges.num_edges(), " in-edges");
  const std::int64_t per_edge = typed ? 2 : 1;  // record values per edge: source, relation
  std::array<std::int64_t, 2> kinds{sparse ? 1 : 0, sparse ? 0 : 1};  // any sparse, any dense
  comm.all_reduce(std::span<std::int64_t>(kinds), reduce_op::max);
  SAR_CHECK(kinds[0] == 0 || kinds[1] == 0, invalid_argument, where,  // alike on every rank
            ": some ranks hold sparse features and some dense ones");

  // 1. New ids: part k's range starts after parts 0..k-1; inside it, ranks in order (their
  //    dataset-id ranges are in order), and each rank's nodes of k in order.
  std::vector<std::int64_t> counts(static_cast<std::size_t>(size) * parts, 0);  // [rank][part]
  for (node_t i = 0; i < rows; ++i) ++counts[static_cast<std::size_t>(rank) * parts + part[i]];
  comm.all_reduce(std::span<std::int64_t>(counts), reduce_op::sum);
  std::vector<node_t> offsets(static_cast<std::size_t>(parts) + 1, 0);
  std::vector<node_t> next(static_cast<std::size_t>(parts));  // this rank's next id per part
  for (int k = 0; k < parts; ++k) {
    node_t before_me = 0, total = 0;
    for (int r = 0; r < size; ++r) {
      const std::int64_t c = counts[static_cast<std::size_t>(r) * parts + k];
      if (r < rank) before_me += c;
      total += c;
    }
    next[static_cast<std::size_t>(k)] = offsets[static_cast<std::size_t>(k)] + before_me;
    offsets[static_cast<std::size_t>(k) + 1] = offsets[static_cast<std::size_t>(k)] + total;
  }
  counts = {};
  const partition_book new_book(std::move(offsets));
  std::vector<std::int64_t> new_id(static_cast<std::size_t>(rows));
  for (node_t i = 0; i < rows; ++i) new_id[static_cast<std::size_t>(i)] = next[part[i]]++;

  // 2. Every edge's source to its new id (one directory lookup per distinct source).
  const std::vector<std::int64_t> sources =
      directory_lookup(comm, block.book, new_id, block.in_edges.columns);
  block.in_edges.columns = {};

  // 3. Each node's row to the owner of its part: [new id, dataset id, label, split, degree,
  //    sources..., relations... (typed)] as int64; then its features and targets.
  const auto owner = [&](node_t i) { return part_owner(part[i], parts, size); };
  std::vector<std::vector<node_t>> rows_for(static_cast<std::size_t>(size));
  for (node_t i = 0; i < rows; ++i) rows_for[static_cast<std::size_t>(owner(i))].push_back(i);
  std::vector<std::int64_t> received_counts;
  std::vector<std::int64_t> records = detail::exchange_packed<std::int64_t>(
      comm,
      [&](int q) {
        std::int64_t n = 0;
        for (node_t i : rows_for[static_cast<std::size_t>(q)])
          n += 5 + per_edge * block.in_edges.degree(i);
        return n;
      },
      [&](int q, std::vector<std::int64_t>& out) {
        for (node_t i : rows_for[static_cast<std::size_t>(q)]) {
          out.insert(out.end(), {new_id[static_cast<std::size_t>(i)], first + i,
                                 labelled ? block.labels[static_cast<std::size_t>(i)] : -1,
                                 with_split ? static_cast<std::int64_t>(block.split[static_cast<std::size_t>(i)]) : 0,
                                 block.in_edges.degree(i)});
          out.insert(out.end(), sources.begin() + block.in_edges.offsets[i],
                     sources.begin() + block.in_edges.offsets[i + 1]);
          if (typed)
            out.insert(out.end(), block.edge_types.begin() + block.in_edges.offsets[i],
                       block.edge_types.begin() + block.in_edges.offsets[i + 1]);
        }
      },
      received_counts);
  const std::vector<float> float_rows = detail::exchange_packed<float>(
      comm,
      [&](int q) {
        return static_cast<std::int64_t>(rows_for[static_cast<std::size_t>(q)].size()) * width;
      },
      [&](int q, std::vector<float>& out) {
        for (node_t i : rows_for[static_cast<std::size_t>(q)]) {
          out.insert(out.end(), block.features.data() + i * dense_dim,
                     block.features.data() + (i + 1) * dense_dim);
          out.insert(out.end(), block.targets.data() + i * outputs,
                     block.targets.data() + (i + 1) * outputs);
        }
      },
      received_counts);
  const std::vector<float> edge_rows = detail::exchange_packed<float>(
      comm,
      [&](int q) {
        std::int64_t n = 0;
        for (node_t i : rows_for[static_cast<std::size_t>(q)]) n += block.in_edges.degree(i);
        return n * edge_dim;
      },
      [&](int q, std::vector<float>& out) {
        for (node_t i : rows_for[static_cast<std::size_t>(q)])
          out.insert(out.end(), block.edge_features.data() + block.in_edges.offsets[i] * edge_dim,
                     block.edge_features.data() + block.in_edges.offsets[i + 1] * edge_dim);
      },
      received_counts);
  // Sparse features: per row its entry count and columns, then its values.
  const sparse_rows<float>& x = block.sparse_features;
  const auto entries = [&](node_t i) { return sparse ? x.offsets[i + 1] - x.offsets[i] : 0; };
  const std::vector<std::int64_t> sparse_columns = detail::exchange_packed<std::int64_t>(
      comm,
      [&](int q) {
        std::int64_t n = 0;
        for (node_t i : rows_for[static_cast<std::size_t>(q)]) n += sparse ? 1 + entries(i) : 0;
        return n;
      },
      [&](int q, std::vector<std::int64_t>& out) {
        if (sparse)
          for (node_t i : rows_for[static_cast<std::size_t>(q)]) {
            out.push_back(entries(i));
            out.insert(out.end(), x.columns.begin() + x.offsets[i],
                       x.columns.begin() + x.offsets[i + 1]);
          }
      },
      received_counts);
  const std::vector<float> sparse_values = detail::exchange_packed<float>(
      comm,
      [&](int q) {
        std::int64_t n = 0;
        for (node_t i : rows_for[static_cast<std::size_t>(q)]) n += entries(i);
        return n;
      },
      [&](int q, std::vector<float>& out) {
        if (sparse)
          for (node_t i : rows_for[static_cast<std::size_t>(q)])
            out.insert(out.end(), x.values.begin() + x.offsets[i],
                       x.values.begin() + x.offsets[i + 1]);
      },
      received_counts);
  block = graph_part();

  // 4. The parts this rank owns, each row placed by its new id.
  std::vector<graph_part> mine;
  int first_part = 0;
  while (first_part < parts && part_owner(first_part, parts, size) < rank) ++first_part;
  for (int k = first_part; k < parts && part_owner(k, parts, size) == rank; ++k) {
    graph_part& p = mine.emplace_back();
    p.part = k;
    p.book = new_book;
    p.num_classes = num_classes;
    p.task = task;
    p.schema = schema;
    const node_t n = new_book.size(k);
    p.in_edges.num_rows = n;
    p.in_edges.num_cols = new_book.num_nodes();
    p.in_edges.offsets.assign(static_cast<std::size_t>(n) + 1, 0);
    p.features.resize(n, dense_dim);
    if (sparse) {
      p.sparse_features.num_rows = n;
      p.sparse_features.num_cols = dim;
      p.sparse_features.offsets.assign(static_cast<std::size_t>(n) + 1, 0);
    }
    if (!has_class_ids(task)) p.targets.resize(n, outputs);
    p.original_ids.assign(static_cast<std::size_t>(n), -1);
    if (labelled) p.labels.assign(static_cast<std::size_t>(n), -1);
    if (with_split) p.split.assign(static_cast<std::size_t>(n), node_split::none);
  }
  const auto local = [&](std::int64_t id) -> std::pair<graph_part&, std::size_t> {
    graph_part& p = mine[static_cast<std::size_t>(new_book.owner(id) - first_part)];
    return {p, static_cast<std::size_t>(id - new_book.begin(p.part))};
  };
  std::vector<std::size_t> record_at;  // where each received row's record starts
  for (std::size_t at = 0; at < records.size();
       at += 5 + static_cast<std::size_t>(per_edge * records[at + 4])) {
    record_at.push_back(at);
    auto [p, r] = local(records[at]);
    p.in_edges.offsets[r + 1] = records[at + 4];
  }
  // Where each received row's sparse entries start (its count in sparse_columns, its values).
  std::vector<std::int64_t> sparse_at(sparse ? record_at.size() + 1 : 0, 0);
  for (std::size_t k = 0, at = 0; sparse && k < record_at.size(); ++k) {
    const std::int64_t count = sparse_columns[at];
    auto [p, r] = local(records[record_at[k]]);
    p.sparse_features.offsets[r + 1] = count;
    sparse_at[k + 1] = sparse_at[k] + count;
    at += 1 + static_cast<std::size_t>(count);
  }
  for (graph_part& p : mine) {
    if (sparse) {
      auto& offsets = p.sparse_features.offsets;
      for (std::size_t r = 1; r < offsets.size(); ++r) offsets[r] += offsets[r - 1];
      p.sparse_features.columns.resize(static_cast<std::size_t>(offsets.back()));
      p.sparse_features.values.resize(static_cast<std::size_t>(offsets.back()));
    }
    for (node_t r = 0; r < p.num_local(); ++r) p.in_edges.offsets[r + 1] += p.in_edges.offsets[r];
    p.in_edges.columns.resize(static_cast<std::size_t>(p.in_edges.offsets.back()));
    if (edge_dim > 0) p.edge_features.resize(p.in_edges.num_edges(), edge_dim);
    if (typed) p.edge_types.resize(static_cast<std::size_t>(p.in_edges.num_edges()));
  }
  // Where each received row's edge rows start (records and edge rows come in the same order).
  std::vector<std::int64_t> edge_row_at(record_at.size() + 1, 0);
  for (std::size_t k = 0; k < record_at.size(); ++k)
    edge_row_at[k + 1] = edge_row_at[k] + records[record_at[k] + 4];
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, record_at.size()), [&](const auto& range) {
    std::vector<std::pair<node_t, edge_t>> pairs;  // sort scratch, with edge data
    std::vector<edge_t> received;                  // a row's edges, by their received order
    for (std::size_t k = range.begin(); k != range.end(); ++k) {
      const std::int64_t* rec = records.data() + record_at[k];
      auto [p, r] = local(rec[0]);
      p.original_ids[r] = rec[1];
      if (labelled) p.labels[r] = static_cast<std::int32_t>(rec[2]);
      if (with_split) p.split[r] = static_cast<node_split>(rec[3]);
      const auto columns = std::span(p.in_edges.columns).subspan(p.in_edges.offsets[r], rec[4]);
      std::copy_n(rec + 5, rec[4], columns.begin());
      if (edge_dim == 0 && !typed) {
        std::sort(columns.begin(), columns.end());
      } else {  // sorted with their edge rows and relations (parallel edges keep their order)
        received.resize(columns.size());
        std::iota(received.begin(), received.end(), edge_t{0});
        detail::sort_row_with_payload(columns, std::span(received), pairs);
        for (std::size_t a = 0; a < received.size(); ++a) {
          const std::int64_t at = p.in_edges.offsets[r] + static_cast<std::int64_t>(a);
          if (typed)
            p.edge_types[static_cast<std::size_t>(at)] =
                static_cast<std::int32_t>(rec[5 + rec[4] + received[a]]);
          if (edge_dim > 0)
            std::copy_n(edge_rows.data() + (edge_row_at[k] + received[a]) * edge_dim, edge_dim,
                        p.edge_features.data() + at * edge_dim);
        }
      }
      const auto row = float_rows.begin() + static_cast<std::ptrdiff_t>(k) * width;
      std::copy(row, row + dense_dim,
                p.features.data() + static_cast<std::ptrdiff_t>(r) * dense_dim);
      std::copy(row + dense_dim, row + width,
                p.targets.data() + static_cast<std::ptrdiff_t>(r) * outputs);
      if (sparse) {  // the count, then the columns (k + 1 counts precede row k's columns)
        sparse_rows<float>& to = p.sparse_features;
        const auto count = sparse_at[k + 1] - sparse_at[k];
        std::copy_n(sparse_columns.begin() + sparse_at[k] + static_cast<std::int64_t>(k) + 1, count,
                    to.columns.begin() + to.offsets[r]);
        std::copy_n(sparse_values.begin() + sparse_at[k], count, to.values.begin() + to.offsets[r]);
      }
    }
  });
  return mine;
}

}  // namespace sar
