// The parallel readers: under mpirun every rank reads its block of a dataset, about 1/P of
// it, and nothing else. Rank r of P gets the dataset ids [r n / P, (r + 1) n / P) (block_book)
// with their in-edges, exactly the rows of the graph load_dataset builds, with their features,
// labels and split: the input of the distributed pipeline (sar::partition_distributed).
//
//   .npy dataset     positioned reads of the rows' ranges of every array; the ranks combine
//                    their pieces' CRC-32 into each array's (crc32_combine)
//   OGB raw          gzip is not seekable: every rank decompresses each file and parses only
//                    its share (its rows of the per-node files, every P-th chunk of the edge
//                    file and the same lines of edge-feat; heterogeneous: its rows of each node
//                    type's files, every P-th chunk of each relation's edge file, typed edges
//                    built at their destinations): reading time is the whole file's
//                    decompression on every rank, memory its share plus buffers
//   edge list, .mtx  every P-th chunk of lines (plain or gzip, as above); line numbers in
//                    errors stay exact
//   generators       built whole on every rank, then cut (tests and demos; write large graphs
//                    as a .npy dataset)
// Edges read by a rank travel to their destination's rank in the distributed graph build
// (sar::build_block_csr: symmetrised, deduplicated, self-loops as the serial loader keeps
// them), their edge features with them. A rank's memory while reading is O((n + E) / P) plus
// buffers.
//
// The checks that need the whole input (an edge count against its declaration, the
// mostly-empty node-id and class ranges, the largest id or label, checksums) are the serial
// loaders' own (finish_edge_list, finish_npy_dataset, ...), totalled across the ranks
// (ranks_totals). A failure on one rank stops every rank: that rank
// throws its error, the others sar::comm_error naming it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <limits>
#include <numeric>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <zlib.h>

#include "sar/comm/communicator.hpp"
#include "sar/partition/directory.hpp"
#include "sar/core/error.hpp"
#include "sar/graph/io/load.hpp"
#include "sar/partition/distributed_build.hpp"
#include "sar/partition/graph_part.hpp"

namespace sar {

/// How read_dataset_block reads.
struct block_read_options {
  /// Node and class counts the caller states (as load_dataset's `sizes`).
  dataset_sizes sizes{};
  /// Check the CRC-32 of a .npy dataset's arrays (false skips it).
  bool verify_checksums = true;
  /// Edges in flight per rank and round of the graph build.
  std::int64_t round_edges = default_build_round_edges;
  /// false: a .npy dataset's feature rows are left unread (features 0 x F), for
  /// read_block_rest to read once the memory-hungry partitioning is done; other inputs read
  /// them anyway.
  bool features = true;
};

/// The totals of the checks over a whole input (whole_input_totals' members) for readers of
/// its shares, one per rank of `comm`: every member is collective and gives the same result on
/// every rank.
template <communicator Comm>
struct ranks_totals {
  Comm& comm;  ///< the readers

  /// The sum of `value` over the ranks.
  std::int64_t sum(std::int64_t value) {
    comm.all_reduce(std::span<std::int64_t>(&value, 1), reduce_op::sum);
    return value;
  }
  /// The largest `value` over the ranks, and the smallest `line` among the ranks holding it.
  std::pair<std::int64_t, std::int64_t> max_with_line(std::int64_t value, std::int64_t line) {
    const std::int64_t largest = min_max_over_ranks(comm, value).second;
    const std::int64_t mine = value == largest ? line : std::numeric_limits<std::int64_t>::max();
    return {largest, min_max_over_ranks(comm, mine).first};
  }
  /// The CRC-32 of the ranks' pieces (`crc` of `bytes` here) of one file, in rank order.
  std::uint32_t crc32(std::uint32_t crc, std::uint64_t bytes) {
    const std::vector<std::int64_t> mine{crc, static_cast<std::int64_t>(bytes)};
    uLong combined = 0;
    for (const auto& piece :
         all_to_all_vectors(comm, std::vector<std::vector<std::int64_t>>(
                                      static_cast<std::size_t>(comm.size()), mine)))
      combined = crc32_combine64(combined, static_cast<uLong>(piece[0]),
                                 static_cast<z_off64_t>(piece[1]));
    return static_cast<std::uint32_t>(combined);
  }
  /// How many distinct values in [0, range) the ranks' arrays hold: each value is counted by
  /// the rank owning it in block_book(range, P), so no rank holds more than its own values
  /// and its block's.
  template <class T>
  std::int64_t count_distinct(std::int64_t range,
                              std::initializer_list<std::span<const T>> arrays) {
    const partition_book book = block_book(range, comm.size());
    std::vector<std::vector<std::int64_t>> outgoing(static_cast<std::size_t>(comm.size()));
    for (const auto& a : arrays)
      for (const T v : a)
        if (v >= 0 && static_cast<std::int64_t>(v) < range)
          outgoing[static_cast<std::size_t>(book.owner(static_cast<node_t>(v)))].push_back(v);
    for (auto& bucket : outgoing) {
      std::sort(bucket.begin(), bucket.end());
      bucket.erase(std::unique(bucket.begin(), bucket.end()), bucket.end());
    }
    std::vector<std::int64_t> mine;
    for (auto& from_peer : all_to_all_vectors(comm, outgoing))
      mine.insert(mine.end(), from_peer.begin(), from_peer.end());
    std::sort(mine.begin(), mine.end());
    return sum(static_cast<std::int64_t>(std::unique(mine.begin(), mine.end()) - mine.begin()));
  }
};

namespace detail::parallel_read {

/// Throws sar::io_error on every rank unless every rank read the same node count `n` from
/// `file` (a file replaced while the ranks read it). Collective.
template <communicator Comm>
void check_same_count(Comm& comm, std::int64_t n, const std::string& file) {
  const auto [lowest, highest] = min_max_over_ranks(comm, n);
  SAR_CHECK(lowest == highest, io_error, "sar::read_dataset_block: the ranks read node counts ",
            "from ", lowest, " to ", highest, " in ", file, " (was it replaced while they read "
            "it? every rank must read the same dataset)");
}

/// Throws sar::io_error on every rank unless every rank found `file` (has) or none did.
/// Collective.
template <communicator Comm>
void check_same_files(Comm& comm, bool has, const std::string& file) {
  const auto [lowest, highest] = min_max_over_ranks(comm, std::int64_t{has ? 1 : 0});
  SAR_CHECK(lowest == highest, io_error, "sar::read_dataset_block: some ranks find ", file,
            " and others do not (every rank must read the same dataset)");
}

/// Appends to `index` the input index of each edge in `ranges` (a share's edges in their
/// file, edge k on line k + 1), `offset` added: what the rows travelling with the edges are
/// ordered by (edge_rows_share::index).
inline void append_edge_indices(std::vector<edge_t>& index, std::span<const io::row_range> ranges,
                                edge_t offset) {
  for (const io::row_range& r : ranges)
    for (std::int64_t k = r.begin; k < r.end; ++k) index.push_back(offset + k);
}

/// Rank `rank`'s rows of the whole dataset `data`, as a block of `book`.
inline graph_part slice(const graph_dataset& data, const partition_book& book, int rank) {
  graph_part out;
  out.part = rank;
  out.book = book;
  out.num_classes = data.num_classes;
  out.task = data.task;
  const node_t first = book.begin(rank), rows = book.size(rank);
  csr& g = out.in_edges;
  g.num_rows = rows;
  g.num_cols = data.num_nodes();
  const edge_t base = data.graph.offsets[static_cast<std::size_t>(first)];
  g.offsets.resize(static_cast<std::size_t>(rows) + 1);
  for (node_t r = 0; r <= rows; ++r) g.offsets[r] = data.graph.offsets[first + r] - base;
  g.columns.assign(data.graph.columns.begin() + base,
                   data.graph.columns.begin() + base + g.offsets.back());
  if (data.edge_feature_dim() > 0)
    out.edge_features = data.edge_features.middleRows(base, g.offsets.back());
  out.schema = data.schema;
  if (data.schema.heterogeneous())
    out.edge_types.assign(data.edge_types.begin() + base, data.edge_types.begin() + base + g.offsets.back());
  out.features = data.features.middleRows(first, rows);
  if (data.sparse()) {
    std::vector<node_t> ids(static_cast<std::size_t>(rows));
    std::iota(ids.begin(), ids.end(), first);
    out.sparse_features = select_rows(data.sparse_features, std::span<const node_t>(ids));
  }
  if (!data.labels.empty())
    out.labels.assign(data.labels.begin() + first, data.labels.begin() + first + rows);
  if (!has_class_ids(data.task)) out.targets = data.targets.middleRows(first, rows);
  if (!data.split.empty())
    out.split.assign(data.split.begin() + first, data.split.begin() + first + rows);
  return out;
}

/// Rows rows_of(n) of the .npy dataset `dir` (its `arrays`), read by every rank and checked
/// across them: the same node count on every rank, then finish_npy_dataset (CRC-32, class
/// range). Collective; `where` names the caller in the error the other ranks throw.
template <communicator Comm, class RowsOf>
npy_dataset_share read_npy_rows(Comm& comm, const std::filesystem::path& dir,
                                const block_read_options& options, npy_arrays arrays,
                                const char* where, RowsOf&& rows_of) {
  std::exception_ptr failure;
  npy_dataset_share read;
  detail::guarded(failure, [&] {
    const npy_read_options how{
        .verify_checksums = options.verify_checksums, .sizes = options.sizes, .arrays = arrays};
    read = read_npy_dataset_share(dir, how, rows_of);
  });
  detail::agree_on_failure(comm, failure, where);
  check_same_count(comm, read.num_nodes, (dir / "meta.json").string());
  ranks_totals<Comm> totals{comm};
  finish_npy_dataset(read, dir, totals);
  return read;
}

}  // namespace detail::parallel_read

/// What read_dataset_block returns: the dataset's name and this rank's rows.
struct dataset_block {
  std::string name;  ///< as load_dataset names the dataset
  graph_part rows;   ///< part = rank, book = block_book(n, P), columns dataset ids
  std::string spec;                   ///< what was read (read_block_rest reads the rest)
  block_read_options read_options{};  ///< and how
  /// Whether read_block_rest can read the rows' features and in-edges again by positioned
  /// reads (a .npy dataset), so that they may be left unread or freed meanwhile.
  bool rereadable = false;
};

/// This rank's block of the dataset `spec` (load_dataset's specs and sizes): its name, and
/// rows with part = rank, book = block_book(n, P), in_edges = rows [book.begin(rank),
/// book.end(rank)) of the graph load_dataset(spec, options.sizes) builds (columns dataset ids)
/// with their features (unless options.features is false: see there), labels or targets and
/// split, task and num_classes as load_dataset gives them, and original_ids = the rows' ids.
/// Collective. Throws what load_dataset throws for the same input (the rank that found it;
/// the other ranks sar::comm_error naming that rank), on every rank.
template <communicator Comm>
dataset_block read_dataset_block(Comm& comm, const std::string& spec,
                                 const block_read_options& options = {}) {
  namespace fs = std::filesystem;
  namespace pr = detail::parallel_read;
  constexpr const char* where = "sar::read_dataset_block";
  const int rank = comm.rank(), size = comm.size();
  std::exception_ptr failure;
  const auto agree = [&] { detail::agree_on_failure(comm, failure, where); };
  ranks_totals<Comm> totals{comm};  // the checks over the whole input
  // A node count every rank knows (each reads the same metadata or agrees on a maximum).
  const auto book_of = [&](node_t n) { return block_book(n, size); };
  dataset_block block;
  block.spec = spec;
  block.read_options = options;
  graph_part& out = block.rows;

  const std::size_t colon = spec.find(':');
  const std::string kind = spec.substr(0, colon);
  const fs::path path(spec);
  std::error_code ec;
  if (kind == "planted" || kind == "rmat" || !fs::exists(path, ec)) {
    graph_dataset whole;
    detail::guarded(failure, [&] { whole = load_dataset(spec, options.sizes); });
    agree();
    const partition_book book = book_of(whole.num_nodes());
    out = pr::slice(whole, book, rank);
    block.name = whole.name;
  } else if (fs::is_directory(path, ec) && fs::exists(path / "meta.json", ec)) {
    // .npy: every rank reads meta.json (n) and its rows.
    npy_dataset_share read = pr::read_npy_rows(
        comm, path, options, options.features ? npy_arrays::all : npy_arrays::without_features,
        where, [&](node_t n) {
          out.book = book_of(n);
          return std::pair<node_t, node_t>{out.book.begin(rank), out.book.end(rank)};
        });
    block.name = read.rows.name;
    out.in_edges = std::move(read.rows.graph);
    out.edge_features = std::move(read.rows.edge_features);
    out.schema = std::move(read.rows.schema);
    out.edge_types = std::move(read.rows.edge_types);
    out.features = std::move(read.rows.features);
    out.sparse_features = std::move(read.rows.sparse_features);
    out.labels = std::move(read.rows.labels);
    out.split = std::move(read.rows.split);
    out.num_classes = read.rows.num_classes;
    out.task = read.rows.task;
    out.targets = std::move(read.rows.targets);
    block.rereadable = true;
  } else if (fs::is_directory(path, ec) && is_ogb_heterogeneous(path)) {
    // OGB raw, heterogeneous: every rank streams every file, keeping its rows of each node
    // type's files and every P-th chunk of each relation's edge file.
    namespace ogb = detail::ogb;
    const ogb_options how{.sizes = options.sizes};
    const fs::path type_file = path / "raw" / "num-node-dict";
    node_t n = 0;
    detail::guarded(failure, [&] { n = ogb::declared_size(path).first; });
    agree();
    pr::check_same_count(comm, n, type_file.string());
    const partition_book book = book_of(n);
    ogb::heterogeneous_share read;
    detail::guarded(failure, [&] {
      read = ogb::read_heterogeneous_share(path, how,
                                           {.first = book.begin(rank), .last = book.end(rank),
                                            .edges = {.index = rank, .count = size}});
    });
    agree();
    ogb::check_heterogeneous_share(read, how, totals);
    // Edge features: each rank's rows of each relation's edge-feat, in its edges' order.
    std::vector<std::int64_t> relation_edges = read.edges_read;  // over the ranks
    comm.all_reduce(std::span<std::int64_t>(relation_edges), reduce_op::sum);
    std::optional<matrixf> per_edge;
    detail::guarded(failure, [&] {
      per_edge = ogb::read_relation_edge_rows(read, relation_edges, path);
    });
    agree();
    pr::check_same_files(comm, per_edge.has_value(),
                         (path / "raw" / "relations" / "*" / "edge-feat").string());
    detail::guarded(failure, [&] { ogb::read_heterogeneous_rows(read, path, how); });
    agree();
    ogb::finish_heterogeneous_rows(read, path, totals);
    graph_dataset& rows = read.rows;
    block.name = rows.name;
    out.book = book;
    if (per_edge) {
      std::vector<edge_t> index;  // relation r's edge k: k + the edges of relations before r
      edge_t offset = 0;
      for (std::size_t r = 0; r < relation_edges.size(); ++r) {
        pr::append_edge_indices(index, read.edge_ranges[r], offset);
        offset += relation_edges[r];
      }
      out.in_edges = build_typed_block_csr(
          comm, read.edges, read.edge_relations,
          {.index = index, .total = offset, .rows = *per_edge}, book, out.edge_types,
          out.edge_features, options.round_edges);
    } else {
      out.in_edges = build_typed_block_csr(comm, read.edges, read.edge_relations, book,
                                           out.edge_types, options.round_edges);
    }
    out.schema = std::move(rows.schema);
    out.features = std::move(rows.features);
    out.labels = std::move(rows.labels);
    out.split = std::move(rows.split);
    out.num_classes = rows.num_classes;
    out.task = rows.task;
  } else if (fs::is_directory(path, ec)) {
    // OGB raw: every rank streams every file, keeping its rows and every P-th edge chunk.
    const ogb_options ogb{.sizes = options.sizes};
    node_t n = 0;
    detail::guarded(failure, [&] {
      n = detail::ogb::read_count(detail::ogb::require_csv(path / "raw", "num-node-list"));
    });
    agree();
    pr::check_same_count(comm, n, (path / "raw" / "num-node-list").string());
    const partition_book book = book_of(n);
    ogb_raw_share read;
    detail::guarded(failure, [&] {
      read = read_ogb_raw_share(path, ogb,
                                {.first = book.begin(rank), .last = book.end(rank),
                                 .edges = {.index = rank, .count = size}});
    });
    agree();
    finish_ogb_raw(read, ogb, totals);
    // Edge features: this rank's rows of edge-feat, those of its edges' lines.
    std::optional<fs::path> edge_feature_file;
    detail::guarded(failure, [&] {
      edge_feature_file = detail::ogb::find_csv(path / "raw", "edge-feat");
    });
    agree();
    pr::check_same_files(comm, edge_feature_file.has_value(),
                         (path / "raw" / "edge-feat.csv.gz").string());
    graph_dataset& rows = read.rows;
    block.name = rows.name;
    out.book = book;
    if (edge_feature_file) {
      const edge_t total = totals.sum(static_cast<std::int64_t>(read.edges.size()));
      matrixf per_edge;
      detail::guarded(failure, [&] {
        per_edge = detail::ogb::read_edge_rows(*edge_feature_file, total, read.edge_ranges,
                                               read.edge_file);
      });
      agree();
      std::vector<edge_t> index;
      pr::append_edge_indices(index, read.edge_ranges, 0);
      out.in_edges = build_block_csr(comm, read.edges,
                                     {.index = index, .total = total, .rows = per_edge}, book,
                                     ogb_build_options(ogb), out.edge_features,
                                     options.round_edges);
    } else {
      out.in_edges = build_block_csr(comm, read.edges, book, ogb_build_options(ogb),
                                     options.round_edges);
    }
    out.features = std::move(rows.features);
    out.labels = std::move(rows.labels);
    out.split = std::move(rows.split);
    out.num_classes = rows.num_classes;
    out.task = rows.task;
    out.targets = std::move(rows.targets);
  } else {
    // Edge list or Matrix Market: every P-th chunk of lines.
    detail::check_graph_only_sizes(spec, options.sizes);
    const std::string name = path.filename().string();
    const bool mtx = name.ends_with(".mtx") || name.ends_with(".mtx.gz");
    const io::chunk_share share{.index = rank, .count = size};
    edge_list edges;
    if (mtx) {
      matrix_market_share read;
      detail::guarded(failure, [&] {
        read = read_matrix_market_share(path, options.sizes.num_nodes, share);
      });
      agree();
      finish_matrix_market(read, path, options.sizes.num_nodes, totals);
      edges = std::move(read.edges);
    } else {
      edge_list_share read;
      detail::guarded(failure, [&] {
        read = read_edge_list_share(path, options.sizes.num_nodes, share);
      });
      agree();
      read.edges.num_nodes = finish_edge_list(read, path, options.sizes.num_nodes, totals);
      edges = std::move(read.edges);
    }
    const partition_book book = book_of(edges.num_nodes);
    out.book = book;
    out.in_edges = build_block_csr(comm, edges, book, {.symmetrise = true}, options.round_edges);
    out.features.resize(book.size(rank), 0);
    block.name = path.stem().string();
  }
  out.part = rank;
  const node_t first = out.book.begin(rank);
  out.original_ids.resize(static_cast<std::size_t>(out.book.size(rank)));
  for (std::size_t r = 0; r < out.original_ids.size(); ++r)
    out.original_ids[r] = first + static_cast<node_t>(r);
  return block;
}

/// Reads what `block` (as read_dataset_block returned it) lacks of its rows, if it is
/// rereadable (a .npy dataset): the features left unread (block_read_options::features false)
/// and the in-edges if they were freed meanwhile (in_edges = csr{}), by positioned reads
/// with their CRC-32 checked across the ranks. Does nothing to a block lacking nothing.
/// Collective. Throws what read_dataset_block throws for the files, and sar::io_error if the
/// dataset changed since (another node count, another CRC-32).
template <communicator Comm>
void read_block_rest(Comm& comm, dataset_block& block) {
  graph_part& rows = block.rows;
  const int rank = comm.rank();
  const node_t count = rows.book.size(rank);
  std::int64_t lacks[2] = {rows.features.rows() != count ? 1 : 0,
                           rows.in_edges.num_rows != count ? 1 : 0};
  comm.all_reduce(std::span<std::int64_t>(lacks, 2), reduce_op::max);
  if (lacks[0] == 0 && lacks[1] == 0) return;
  SAR_CHECK(block.rereadable, invalid_argument, "sar::read_block_rest: ", block.spec,
            " lacks its rows' ", lacks[0] ? "features" : "in-edges", " but cannot be read again");
  npy_dataset_share read = detail::parallel_read::read_npy_rows(
      comm, block.spec, block.read_options,
      lacks[1] ? npy_arrays::all : npy_arrays::features_only, "sar::read_block_rest",
      [&](node_t n) {
        SAR_CHECK(n == rows.book.num_nodes(), io_error, "sar::read_block_rest: ", block.spec,
                  " now declares ", n, " nodes, not the ", rows.book.num_nodes(),
                  " read before (was it replaced while the ranks read it?)");
        return std::pair<node_t, node_t>{rows.book.begin(rank), rows.book.end(rank)};
      });
  rows.features = std::move(read.rows.features);
  rows.sparse_features = std::move(read.rows.sparse_features);
  if (lacks[1]) {
    rows.in_edges = std::move(read.rows.graph);
    rows.edge_features = std::move(read.rows.edge_features);
    rows.edge_types = std::move(read.rows.edge_types);
  }
}

}  // namespace sar
