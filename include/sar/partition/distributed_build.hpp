// The distributed graph build: the in-edge CSR of a graph whose edges are spread over the ranks
// in any way, each rank ending with the rows of its own range of destinations. The same graph
// as sar::build_csr builds on one process from all the edges (symmetrised, duplicates merged,
// self-loops as asked), without any rank holding more than its rows plus a bounded round of
// edges in flight. 64-bit ids throughout.
#pragma once

#include <algorithm>
#include <compare>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include "sar/comm/communicator.hpp"
#include "sar/core/error.hpp"
#include "sar/core/types.hpp"
#include "sar/graph/builders.hpp"
#include "sar/graph/csr.hpp"
#include "sar/partition/partition_book.hpp"

namespace sar {

/// Edges sent to their destination's owner per round and rank in build_block_csr (bounds the
/// exchange buffers: 16 bytes per edge, twice when symmetrising).
inline constexpr std::int64_t default_build_round_edges = std::int64_t{1} << 22;

/// What travels with each of a rank's edges through a distributed graph build with edge data
/// (build_block_csr, build_typed_block_csr): the edge's index in the whole input, numbered as
/// build_csr and build_typed_csr number their input so that parallel edges and reverses
/// resolve to the same edge as there, and its row (edge features).
struct edge_rows_share {
  std::span<const edge_t> index;  ///< per edge of this rank: its index in [0, total)
  edge_t total = 0;               ///< the input's edge count over all ranks
  const matrixf& rows;            ///< per edge of this rank: its row
};

namespace detail {
/// The entry of a row under construction with edge data: its column, its edge's code (the
/// order among parallel entries: the input index, total + index for a reverse) and its record.
struct coded_entry {
  node_t column = 0;    ///< source id
  edge_t code = 0;      ///< earliest wins among entries merged
  edge_t record = 0;    ///< index of the record it came from
  /// By column, then code.
  friend bool operator<(const coded_entry& a, const coded_entry& b) {
    return std::pair(a.column, a.code) < std::pair(b.column, b.code);
  }
};
/// The source id of an entry under construction (a plain one is its column).
inline node_t column_of(node_t column) { return column; }
/// See above.
inline node_t column_of(const coded_entry& entry) { return entry.column; }

/// make(record, k) for each record k of `stride` words, bucketed by the row of its first word
/// (a destination id in [first, first + rows)), in record order within a row; assigns each
/// row's first entry to offsets (rows + 1 of them).
template <class Entry, class Make>
std::vector<Entry> bucket_by_row(const std::vector<std::int64_t>& records, std::size_t stride,
                                 node_t first, node_t rows, std::vector<edge_t>& offsets,
                                 Make&& make) {
  const std::size_t m = records.size() / stride;
  offsets.assign(static_cast<std::size_t>(rows) + 1, 0);
  for (std::size_t k = 0; k < m; ++k)
    ++offsets[static_cast<std::size_t>(records[k * stride] - first) + 1];
  for (node_t r = 0; r < rows; ++r) offsets[r + 1] += offsets[r];
  std::vector<Entry> entries(m);
  std::vector<edge_t> cursor(offsets.begin(), offsets.end() - 1);
  for (std::size_t k = 0; k < m; ++k) {
    const std::int64_t* record = records.data() + k * stride;
    entries[static_cast<std::size_t>(cursor[static_cast<std::size_t>(record[0] - first)]++)] =
        make(record, static_cast<edge_t>(k));
  }
  return entries;
}

/// This rank's rows [first, first + rows) of the in-edge CSR from `entries` bucketed by row
/// (bucket_by_row), exactly as build_csr shapes a row: sorted (coded entries by column, then
/// code); duplicates merged if asked (the first kept); self-loops dropped unless kept; one
/// added if asked. With coded entries, assigns to `origins` the record of each stored entry
/// (-1 for an added self-loop).
template <class Entry>
csr shape_rows(std::vector<Entry>& entries, const std::vector<edge_t>& offsets, node_t first,
               node_t rows, node_t num_nodes, const build_options& options,
               std::vector<edge_t>* origins = nullptr) {
  const bool add_loops = options.self_loops == self_loop_policy::add;
  const bool drop_loops = options.self_loops != self_loop_policy::keep;
  std::vector<edge_t> kept(static_cast<std::size_t>(rows), 0);  // per row, before an added loop
  tbb::parallel_for(tbb::blocked_range<node_t>(0, rows), [&](const auto& range) {
    for (node_t r = range.begin(); r != range.end(); ++r) {
      const auto begin = entries.begin() + offsets[r];
      auto end = entries.begin() + offsets[r + 1];
      std::sort(begin, end);
      if (options.deduplicate)
        end = std::unique(begin, end, [](const Entry& a, const Entry& b) {
          return column_of(a) == column_of(b);
        });
      if (drop_loops)
        end = std::remove_if(begin, end, [&](const Entry& e) { return column_of(e) == first + r; });
      kept[static_cast<std::size_t>(r)] = end - begin;
    }
  });
  csr g;
  g.num_rows = rows;
  g.num_cols = num_nodes;
  g.offsets.assign(static_cast<std::size_t>(rows) + 1, 0);
  for (node_t r = 0; r < rows; ++r)
    g.offsets[r + 1] = g.offsets[r] + kept[static_cast<std::size_t>(r)] + (add_loops ? 1 : 0);
  g.columns.resize(static_cast<std::size_t>(g.offsets.back()));
  if (origins) origins->assign(g.columns.size(), -1);
  tbb::parallel_for(tbb::blocked_range<node_t>(0, rows), [&](const auto& range) {
    for (node_t r = range.begin(); r != range.end(); ++r) {
      const auto begin = entries.begin() + offsets[r];
      const auto end = begin + kept[static_cast<std::size_t>(r)];
      auto to = static_cast<std::size_t>(g.offsets[r]);
      bool looped = !add_loops;  // the added loop goes before the first larger column
      for (auto e = begin; e != end; ++e) {
        if (!looped && column_of(*e) > first + r) {
          g.columns[to++] = first + r;
          looped = true;
        }
        if constexpr (std::is_same_v<Entry, coded_entry>)
          if (origins) (*origins)[to] = e->record;
        g.columns[to++] = column_of(*e);
      }
      if (!looped) g.columns[to] = first + r;
    }
  });
  return g;
}

/// Int64 words that hold a row of `cols` floats.
inline std::size_t row_words(Eigen::Index cols) { return static_cast<std::size_t>(cols + 1) / 2; }

/// Appends `code` and row `k` of `rows`, its floats packed two to a word, to `to`.
inline void append_coded_row(std::vector<std::int64_t>& to, edge_t code, const matrixf& rows,
                             std::size_t k) {
  to.push_back(code);
  if (rows.cols() == 0) return;
  const std::size_t at = to.size();
  to.resize(at + row_words(rows.cols()), 0);
  std::memcpy(to.data() + at, rows.row(static_cast<Eigen::Index>(k)).data(),
              sizeof(float) * static_cast<std::size_t>(rows.cols()));
}

/// The rows packed at word `offset` of the records (of `stride` words) that `origins` names,
/// one per entry; zeros for an origin of -1 (an added self-loop).
inline matrixf unpack_rows(const std::vector<std::int64_t>& records, std::size_t stride,
                           std::size_t offset, std::span<const edge_t> origins, Eigen::Index cols) {
  matrixf out = matrixf::Zero(static_cast<Eigen::Index>(origins.size()), cols);
  if (cols == 0) return out;
  for (std::size_t e = 0; e < origins.size(); ++e)
    if (origins[e] >= 0)
      std::memcpy(out.row(static_cast<Eigen::Index>(e)).data(),
                  records.data() + static_cast<std::size_t>(origins[e]) * stride + offset,
                  sizeof(float) * static_cast<std::size_t>(cols));
  return out;
}

/// The width of the rows of `data` every rank agrees on (the widest). Collective. Throws
/// sar::invalid_argument on every rank unless each has an index and a row per edge of its
/// `count` (the rank lacking them named on that rank) and every rank with edges has rows of
/// that width (records are packed by it).
template <communicator Comm>
Eigen::Index agreed_width(Comm& comm, const edge_rows_share& data, std::size_t count,
                          const char* where) {
  const bool fits =
      data.index.size() == count && static_cast<std::size_t>(data.rows.rows()) == count;
  const std::int64_t cols = data.rows.cols();
  // The widest rows, the narrowest of a rank with edges (negated), whether a rank lacks some.
  std::int64_t agreed[3] = {cols, count > 0 ? -cols : std::numeric_limits<std::int64_t>::min(),
                            fits ? 0 : 1};
  comm.all_reduce(std::span<std::int64_t>(agreed, 3), reduce_op::max);
  SAR_CHECK(fits, invalid_argument, where, ": rank ", comm.rank(), ": ", count, " edges, ",
            data.index.size(), " indices, ", data.rows.rows(), " rows");
  SAR_CHECK(agreed[2] == 0, invalid_argument, where, ": another rank lacks an index or a row "
            "per edge (rank ", comm.rank(), " stops too)");
  const bool some_edges = agreed[1] != std::numeric_limits<std::int64_t>::min();
  SAR_CHECK(!some_edges || -agreed[1] == agreed[0], invalid_argument, where, ": rank ",
            comm.rank(), " has rows ", cols, " wide; the ranks' rows are from ", -agreed[1],
            " to ", agreed[0], " wide (every rank with edges needs the same width)");
  return static_cast<Eigen::Index>(agreed[0]);
}

/// Throws sar::invalid_argument on every rank (`where` naming the rank and the edge on the
/// rank that holds it, the others naming none) if any rank's edge_at(k), k < count, has an id
/// outside [0, book.num_nodes()), or the book does not have a range per rank, or round_edges
/// < 1. Collective.
template <communicator Comm, class EdgeAt>
void check_edge_ids(Comm& comm, std::int64_t count, EdgeAt&& edge_at, const partition_book& book,
                    std::int64_t round_edges, const char* where) {
  SAR_CHECK(book.num_parts() == comm.size() && round_edges >= 1, invalid_argument, where,
            ": a book of ", book.num_parts(), " ranges for ", comm.size(), " ranks, rounds of ",
            round_edges, " edges");
  const node_t n = book.num_nodes();
  std::int64_t bad = -1;
  for (std::int64_t k = 0; k < count && bad < 0; ++k) {
    const auto [s, d] = edge_at(k);
    if (s < 0 || s >= n || d < 0 || d >= n) bad = k;
  }
  std::int64_t any = bad >= 0 ? 1 : 0;
  comm.all_reduce(std::span<std::int64_t>(&any, 1), reduce_op::max);
  if (any == 0) return;
  SAR_CHECK(bad < 0, invalid_argument, where, ": rank ", comm.rank(), ": edge ", bad, " (",
            edge_at(bad).first, " -> ", edge_at(bad).second, ") has an id outside [0, ", n, ")");
  throw invalid_argument(message(where, ": another rank holds an edge with an id outside [0, ",
                                 n, ") (rank ", comm.rank(), " stops too)"));
}

/// Sends what emit(k, outgoing) appends to outgoing[q] (a vector of int64 per rank q) for each
/// of this rank's `count` items, in rounds of at most round_items items per rank (every rank
/// as many rounds), and returns everything received, in round and rank order. Collective.
template <communicator Comm, class Emit>
std::vector<std::int64_t> exchange_in_rounds(Comm& comm, std::int64_t count,
                                             std::int64_t round_items, Emit&& emit) {
  std::int64_t rounds = (count + round_items - 1) / round_items;
  comm.all_reduce(std::span<std::int64_t>(&rounds, 1), reduce_op::max);
  std::vector<std::int64_t> received;
  std::vector<std::vector<std::int64_t>> outgoing(static_cast<std::size_t>(comm.size()));
  for (std::int64_t round = 0; round < rounds; ++round) {
    const std::int64_t begin = std::min(count, round * round_items);
    const std::int64_t end = std::min(count, begin + round_items);
    for (auto& bucket : outgoing) bucket.clear();
    for (std::int64_t k = begin; k < end; ++k) emit(k, outgoing);
    for (auto& from_peer : all_to_all_vectors(comm, outgoing))
      received.insert(received.end(), from_peer.begin(), from_peer.end());
  }
  return received;
}

}  // namespace detail

/// This rank's rows of the in-edge CSR (row = destination - book.begin(rank), sorted columns =
/// global source ids) of the graph whose edges are the union over the ranks of `count` edges
/// each, edge k being edge_at(k) = {source, destination} (global ids in [0, book.num_nodes())).
/// The result equals rows [book.begin(rank), book.end(rank)) of build_csr(all edges, options).
/// Edges travel to their destination's owner (and, symmetrising, reversed to their source's
/// owner) in rounds of at most `round_edges` edges per rank.
/// Requires book.num_parts() == comm.size(). Collective. Throws sar::invalid_argument naming
/// the rank and the edge for an id out of range (every rank then throws alike).
template <communicator Comm, class EdgeAt>
csr build_block_csr(Comm& comm, std::int64_t count, EdgeAt&& edge_at, const partition_book& book,
                    const build_options& options,
                    std::int64_t round_edges = default_build_round_edges) {
  detail::check_edge_ids(comm, count, edge_at, book, round_edges, "sar::build_block_csr");
  std::vector<std::int64_t> pairs =  // (destination, source) received, interleaved
      detail::exchange_in_rounds(comm, count, round_edges, [&](std::int64_t k, auto& outgoing) {
        const auto [s, d] = edge_at(k);
        auto& to_destination = outgoing[static_cast<std::size_t>(book.owner(d))];
        to_destination.push_back(d);
        to_destination.push_back(s);
        if (options.symmetrise) {
          auto& to_source = outgoing[static_cast<std::size_t>(book.owner(s))];
          to_source.push_back(s);
          to_source.push_back(d);
        }
      });
  const node_t first = book.begin(comm.rank()), rows = book.size(comm.rank());
  std::vector<edge_t> offsets;
  std::vector<node_t> columns = detail::bucket_by_row<node_t>(
      pairs, 2, first, rows, offsets, [](const std::int64_t* pair, edge_t) { return pair[1]; });
  pairs = {};
  return detail::shape_rows(columns, offsets, first, rows, book.num_nodes(), options);
}

/// build_block_csr of the edges in `edges` (this rank's share; edges.num_nodes is ignored:
/// the book gives the node count).
template <communicator Comm>
csr build_block_csr(Comm& comm, const edge_list& edges, const partition_book& book,
                    const build_options& options,
                    std::int64_t round_edges = default_build_round_edges) {
  return build_block_csr(
      comm, static_cast<std::int64_t>(edges.size()),
      [&](std::int64_t k) {
        return std::pair<node_t, node_t>(edges.src[static_cast<std::size_t>(k)],
                                         edges.dst[static_cast<std::size_t>(k)]);
      },
      book, options, round_edges);
}

/// build_block_csr of `edges` with a row per edge (`data`): also assigns to `entry_rows` each
/// stored entry's row, that of the input edge build_csr's origins name for it (the earliest
/// of parallel edges by data.index, a given edge before a reverse; zeros for an added
/// self-loop), so that the rows equal take_edge_rows of build_csr's. The rows travel with
/// their edges. Collective. Throws as build_block_csr does, and sar::invalid_argument on every
/// rank unless each has data.index and data.rows entries for each of its edges.
template <communicator Comm>
csr build_block_csr(Comm& comm, const edge_list& edges, const edge_rows_share& data,
                    const partition_book& book, const build_options& options,
                    matrixf& entry_rows, std::int64_t round_edges = default_build_round_edges) {
  constexpr const char* where = "sar::build_block_csr";
  const auto count = static_cast<std::int64_t>(edges.size());
  const auto edge_at = [&](std::int64_t k) {
    const auto at = static_cast<std::size_t>(k);
    return std::pair<node_t, node_t>(edges.src[at], edges.dst[at]);
  };
  detail::check_edge_ids(comm, count, edge_at, book, round_edges, where);
  const Eigen::Index cols = detail::agreed_width(comm, data, edges.size(), where);
  const std::size_t stride = 3 + detail::row_words(cols);
  const std::vector<std::int64_t> records =  // (destination, source, code, row words)
      detail::exchange_in_rounds(comm, count, round_edges, [&](std::int64_t k, auto& outgoing) {
        const auto [s, d] = edge_at(k);
        const edge_t index = data.index[static_cast<std::size_t>(k)];
        auto& to_destination = outgoing[static_cast<std::size_t>(book.owner(d))];
        to_destination.insert(to_destination.end(), {d, s});
        detail::append_coded_row(to_destination, index, data.rows, static_cast<std::size_t>(k));
        if (options.symmetrise) {
          auto& to_source = outgoing[static_cast<std::size_t>(book.owner(s))];
          to_source.insert(to_source.end(), {s, d});
          detail::append_coded_row(to_source, data.total + index, data.rows,
                                   static_cast<std::size_t>(k));
        }
      });
  const node_t first = book.begin(comm.rank()), rows = book.size(comm.rank());
  std::vector<edge_t> offsets, origins;
  std::vector<detail::coded_entry> entries = detail::bucket_by_row<detail::coded_entry>(
      records, stride, first, rows, offsets, [](const std::int64_t* record, edge_t k) {
        return detail::coded_entry{record[1], record[2], k};
      });
  csr g = detail::shape_rows(entries, offsets, first, rows, book.num_nodes(), options, &origins);
  entry_rows = detail::unpack_rows(records, stride, 3, origins, cols);
  return g;
}

namespace detail {
/// build_typed_block_csr, with `data` (may be null) the rows that travel with the edges and
/// entry_rows (null without data) each stored entry's.
template <communicator Comm>
csr build_typed_block_csr(Comm& comm, const edge_list& edges, std::span<const std::int32_t> types,
                          const edge_rows_share* data, const partition_book& book,
                          std::vector<std::int32_t>& entry_types, matrixf* entry_rows,
                          std::int64_t round_edges) {
  constexpr const char* where = "sar::build_typed_block_csr";
  const auto count = static_cast<std::int64_t>(edges.size());
  SAR_CHECK(types.size() == edges.size(), invalid_argument, where, ": rank ", comm.rank(),
            ": ", edges.size(), " edges, ", types.size(), " relations");
  const auto edge_at = [&](std::int64_t k) {
    const auto at = static_cast<std::size_t>(k);
    return std::pair<node_t, node_t>(edges.src[at], edges.dst[at]);
  };
  check_edge_ids(comm, count, edge_at, book, round_edges, where);
  const Eigen::Index cols = data ? agreed_width(comm, *data, edges.size(), where) : 0;
  const std::size_t stride = data ? 4 + row_words(cols) : 3;
  const std::vector<std::int64_t> records =  // (destination, source, relation[, code, row])
      exchange_in_rounds(comm, count, round_edges, [&](std::int64_t k, auto& outgoing) {
        const auto [s, d] = edge_at(k);
        const auto at = static_cast<std::size_t>(k);
        auto& to = outgoing[static_cast<std::size_t>(book.owner(d))];
        to.insert(to.end(), {d, s, types[at]});
        if (data) append_coded_row(to, data->index[at], data->rows, at);
      });
  const node_t first = book.begin(comm.rank()), rows = book.size(comm.rank());
  struct typed_entry {  // sorted by (source, relation, code); the first of a pair kept
    node_t source;
    std::int64_t relation, code, record;
    auto operator<=>(const typed_entry&) const = default;
  };
  std::vector<edge_t> offsets;
  std::vector<typed_entry> entries = bucket_by_row<typed_entry>(
      records, stride, first, rows, offsets, [&](const std::int64_t* record, edge_t k) {
        return typed_entry{record[1], record[2], data ? record[3] : 0, k};
      });
  std::vector<edge_t> kept(static_cast<std::size_t>(rows), 0);
  tbb::parallel_for(tbb::blocked_range<node_t>(0, rows), [&](const auto& range) {
    for (node_t r = range.begin(); r != range.end(); ++r) {
      const auto begin = entries.begin() + offsets[r], end = entries.begin() + offsets[r + 1];
      std::sort(begin, end);
      kept[static_cast<std::size_t>(r)] =
          std::unique(begin, end, [](const typed_entry& a, const typed_entry& b) {
            return a.source == b.source && a.relation == b.relation;
          }) - begin;
    }
  });
  csr g;
  g.num_rows = rows;
  g.num_cols = book.num_nodes();
  g.offsets.assign(static_cast<std::size_t>(rows) + 1, 0);
  for (node_t r = 0; r < rows; ++r) g.offsets[r + 1] = g.offsets[r] + kept[static_cast<std::size_t>(r)];
  g.columns.resize(static_cast<std::size_t>(g.offsets.back()));
  entry_types.resize(g.columns.size());
  std::vector<edge_t> origins(data ? g.columns.size() : 0);
  for (node_t r = 0; r < rows; ++r)
    for (edge_t a = 0; a < kept[static_cast<std::size_t>(r)]; ++a) {
      const typed_entry& e = entries[static_cast<std::size_t>(offsets[r] + a)];
      const auto to = static_cast<std::size_t>(g.offsets[r] + a);
      g.columns[to] = e.source;
      entry_types[to] = static_cast<std::int32_t>(e.relation);
      if (data) origins[to] = e.record;
    }
  if (data) *entry_rows = unpack_rows(records, stride, 4, origins, cols);
  return g;
}
}  // namespace detail

/// This rank's rows of the typed in-edge CSR of the graph whose edges are the union over the
/// ranks of `edges` (global ids in [0, book.num_nodes()); edges.num_nodes is ignored), edge k
/// of relation types[k]: rows [book.begin(rank), book.end(rank)) of build_typed_csr of all the
/// edges (each row sorted by (source, relation), a repeat within a relation kept once,
/// self-loops kept), and each entry's relation assigned to entry_types. Edges travel to their
/// destination's owner in rounds of at most round_edges per rank. Requires types.size() ==
/// edges.size(). Collective. Throws sar::invalid_argument as build_block_csr does.
template <communicator Comm>
csr build_typed_block_csr(Comm& comm, const edge_list& edges, std::span<const std::int32_t> types,
                          const partition_book& book, std::vector<std::int32_t>& entry_types,
                          std::int64_t round_edges = default_build_round_edges) {
  return detail::build_typed_block_csr(comm, edges, types, nullptr, book, entry_types, nullptr,
                                       round_edges);
}

/// build_typed_block_csr with a row per edge (`data`): also assigns to `entry_rows` each
/// stored entry's row, that of the input edge build_typed_csr's origins name for it (the
/// earliest of a repeat within a relation, by data.index), the rows travelling with their
/// edges. Collective. Throws as build_typed_block_csr does, and sar::invalid_argument on every
/// rank unless each has data.index and data.rows entries for each of its edges.
template <communicator Comm>
csr build_typed_block_csr(Comm& comm, const edge_list& edges, std::span<const std::int32_t> types,
                          const edge_rows_share& data, const partition_book& book,
                          std::vector<std::int32_t>& entry_types, matrixf& entry_rows,
                          std::int64_t round_edges = default_build_round_edges) {
  return detail::build_typed_block_csr(comm, edges, types, &data, book, entry_types, &entry_rows,
                                       round_edges);
}

/// The symmetric adjacency of this rank's rows of a block-distributed graph (`in_edges`: rows
/// book.begin(rank) + r, columns global ids): every edge in both directions, once, without
/// self-loops. What a graph partitioner needs (PT-Scotch requires exactly this). Collective.
template <communicator Comm>
csr symmetric_adjacency(Comm& comm, const csr& in_edges, const partition_book& book,
                        std::int64_t round_edges = default_build_round_edges) {
  const node_t first = book.begin(comm.rank());
  std::vector<node_t> row_of;  // row of each stored edge, without a copy of the columns
  row_of.reserve(static_cast<std::size_t>(in_edges.num_edges()));
  for (node_t r = 0; r < in_edges.num_rows; ++r)
    row_of.insert(row_of.end(), static_cast<std::size_t>(in_edges.degree(r)), first + r);
  return build_block_csr(
      comm, in_edges.num_edges(),
      [&](std::int64_t k) {
        return std::pair<node_t, node_t>(in_edges.columns[static_cast<std::size_t>(k)],
                                         row_of[static_cast<std::size_t>(k)]);
      },
      book,
      {.symmetrise = true, .deduplicate = true, .self_loops = self_loop_policy::remove},
      round_edges);
}

}  // namespace sar
