// Cutting a CSR's edges into tiles by source, for the SpMM kernel (sar/kernels/spmm.hpp):
// when the source rows are larger than the cache, a product that makes one pass per tile of
// sources finds most of its gathered rows in the cache. Also the row-chunking helper the
// kernels share.
//   detail::for_edge_balanced_rows  parallel loop over rows in chunks of equal edge count
//   detail::source_tiles            the edges of a CSR in tile-major order
//   detail::spmm_tile_span          how many sources per tile a product should use
//   spmm_tile_cache                 tilings kept between products by a CSR's owner
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/partitioner.h>
#include <tbb/task_arena.h>

#include "sar/core/error.hpp"
#include "sar/core/types.hpp"
#include "sar/graph/csr.hpp"

namespace sar {

namespace detail {

/// Calls body(row_begin, row_end) on chunks of the rows of a CSR given by its row offsets
/// (num_rows + 1 of them, the first not necessarily 0) that hold about equal numbers of edges
/// (plus rows, so empty rows still cost something), in parallel.
template <class Body>
void for_edge_balanced_rows(std::span<const edge_t> offsets, Eigen::Index cols, Body&& body) {
  const auto n = static_cast<node_t>(offsets.size()) - 1;
  if (n <= 0) return;
  const edge_t base = offsets.front(), edges = offsets.back() - base;
  // Work of the whole product in scalar additions (one unit per row for the row itself).
  const double work = (static_cast<double>(edges) + static_cast<double>(n)) *
                      static_cast<double>(std::max<Eigen::Index>(cols, 1));
  constexpr double min_chunk_work = 16384.0;  // below this a task costs more than it saves
  const auto threads = static_cast<std::size_t>(tbb::this_task_arena::max_concurrency());
  const std::size_t chunks = static_cast<std::size_t>(std::clamp<double>(
      work / min_chunk_work, 1.0, static_cast<double>(8 * threads)));
  if (chunks <= 1) {
    body(node_t{0}, n);
    return;
  }
  const double total = static_cast<double>(edges + n);
  // Row where chunk c starts: the first row whose (offset + row) reaches c/chunks of the total.
  const auto chunk_start = [&](std::size_t c) -> node_t {
    if (c == 0) return 0;
    if (c >= chunks) return n;
    const double target = total * static_cast<double>(c) / static_cast<double>(chunks);
    node_t lo = 0, hi = n;  // smallest row r with offsets[r] - base + r >= target
    while (lo < hi) {
      const node_t mid = lo + (hi - lo) / 2;
      if (static_cast<double>(offsets[static_cast<std::size_t>(mid)] - base + mid) < target)
        lo = mid + 1;
      else
        hi = mid;
    }
    return lo;
  };
  tbb::parallel_for(
      tbb::blocked_range<std::size_t>(0, chunks, 1),
      [&](const tbb::blocked_range<std::size_t>& r) {
        for (std::size_t c = r.begin(); c != r.end(); ++c) {
          const node_t begin = chunk_start(c), end = chunk_start(c + 1);
          if (begin < end) body(begin, end);
        }
      },
      tbb::simple_partitioner());
}

/// The same over the rows of a.
template <class Body>
void for_edge_balanced_rows(const csr& a, Eigen::Index cols, Body&& body) {
  for_edge_balanced_rows(std::span<const edge_t>(a.offsets), cols, std::forward<Body>(body));
}

/// The edges of a CSR cut by source into tiles of consecutive sources (tile t: sources
/// [starts[t], starts[t + 1]), the last to the end): tile t holds, for every row, the row's
/// edges into its sources, in CSR order, columns as 32 bits. An edge that follows, in its row,
/// an edge into a later tile goes with that later tile, so taking the tiles in order always
/// takes each row's edges in CSR order (for sorted rows, as every CSR the library builds has,
/// this moves no edge).
class source_tiles {
 public:
  /// Tiles of `span` sources each. Requires a valid CSR with num_cols <= 2^32 and span > 0.
  /// Holds (tiles x rows) row offsets and 4 bytes per edge. Parallel over rows.
  source_tiles(const csr& a, node_t span) : source_tiles(a, equal_starts(a.num_cols, span)) {}

  /// Tiles that start at `starts` (starts[0] == 0, increasing, below num_cols unless
  /// num_cols is 0); otherwise as above.
  source_tiles(const csr& a, std::vector<node_t> starts)
      : rows_(a.num_rows), count_(static_cast<int>(starts.size())) {
    const auto tiles = static_cast<std::size_t>(count_), n = static_cast<std::size_t>(rows_);
    starts.push_back(std::numeric_limits<node_t>::max());  // the last tile's end
    // offsets_[t n + i]: where row i's edges of tile t start; each tile's offsets run on into
    // the next tile's, and the last entry is the end.
    offsets_.assign(tiles * n + 1, 0);
    const edge_t* row_start = a.offsets.data();
    const node_t* column = a.columns.data();
    // Calls run(slot, first, end) for each tile's run of row i's edges [first, end), in order;
    // slot = t n + i for tile t.
    const auto for_each_run = [&](node_t i, auto&& run) {
      std::size_t tile = 0;
      node_t tile_end = starts[1];
      edge_t first = row_start[i];
      const auto slot = [&] { return tile * n + static_cast<std::size_t>(i); };
      for (edge_t e = first; e < row_start[i + 1]; ++e) {
        if (column[e] < tile_end) continue;
        if (e > first) run(slot(), first, e);
        first = e;
        while (column[e] >= tile_end) tile_end = starts[++tile + 1];
      }
      if (row_start[i + 1] > first) run(slot(), first, row_start[i + 1]);
    };
    edge_t* offsets = offsets_.data();
    for_edge_balanced_rows(a, 1, [&](node_t begin, node_t end) {
      for (node_t i = begin; i < end; ++i)
        for_each_run(i, [&](std::size_t slot, edge_t first, edge_t end_edge) {
          offsets[slot + 1] = end_edge - first;
        });
    });
    for (std::size_t k = 1; k < offsets_.size(); ++k) offsets[k] += offsets[k - 1];
    columns_.resize(static_cast<std::size_t>(a.num_edges()));
    std::uint32_t* columns = columns_.data();
    for_edge_balanced_rows(a, 1, [&](node_t begin, node_t end) {
      for (node_t i = begin; i < end; ++i)
        for_each_run(i, [&](std::size_t slot, edge_t first, edge_t end_edge) {
          std::transform(column + first, column + end_edge, columns + offsets[slot],
                         [](node_t c) { return static_cast<std::uint32_t>(c); });
        });
    });
  }

  /// The starts of `span`-source tiles over num_cols sources (one tile when there are none).
  static std::vector<node_t> equal_starts(node_t num_cols, node_t span) {
    std::vector<node_t> starts{0};
    for (node_t s = span; s < num_cols; s += span) starts.push_back(s);
    return starts;
  }

  int count() const { return count_; }
  /// Tile t's row offsets into columns(): rows + 1 of them.
  std::span<const edge_t> offsets(int t) const {
    return {offsets_.data() + static_cast<std::size_t>(t) * static_cast<std::size_t>(rows_),
            static_cast<std::size_t>(rows_) + 1};
  }
  /// Every tile's columns (tile t's row i at offsets(t)[i]).
  const std::uint32_t* columns() const { return columns_.data(); }

 private:
  node_t rows_;
  int count_;
  std::vector<edge_t> offsets_;
  std::vector<std::uint32_t> columns_;
};

/// How much of x one pass of a tiled product gathers from (spmm_rows_add): at most
/// spmm_tile_rows source rows and spmm_tile_bytes, and at least spmm_min_tile_bytes. A narrow
/// row is a whole cache miss for a few bytes, so narrow rows want tiles that sit in a nearer
/// share of the cache than wide rows, whose misses come 8 lines at a time and overlap. On
/// a 200k-node graph with 16, 32 and 64 floats a row this picks a tile count within ~10% of
/// the fastest in bench-spmm-tiles, and the SpMM ran up to 2.6x faster than with tiles of
/// 16 MiB alone (2.1-2.6x at 16 floats); 128 floats keep their 7 tiles (RESULTS.md §6,
/// session 8). Only speed depends on these, never a result.
inline constexpr std::size_t spmm_tile_bytes = std::size_t{16} << 20;
inline constexpr std::size_t spmm_tile_rows = std::size_t{1} << 16;
inline constexpr std::size_t spmm_min_tile_bytes = std::size_t{4} << 20;
/// x up to this size is not tiled: 2 tiles of 6.4 MB of 8-float rows measured 1.2-1.8x on
/// a product of ~20 ms, not worth a tiling's 4 bytes per edge kept beside the CSR.
inline constexpr std::size_t spmm_untiled_bytes = std::size_t{8} << 20;
/// A tile pass reloads and stores every destination row, which pays only when the rows take a
/// few edges from each tile: at most average degree / this many tiles, or none.
inline constexpr double spmm_min_edges_per_tile_row = 2;

/// How many sources per tile a product of a with `row_bytes`-byte source rows should gather
/// from, or 0 for no tiling: the sources fit one tile or spmm_untiled_bytes, a's rows hold too
/// few edges for the tiles it would take, or there are more sources than 32-bit columns can
/// name.
inline node_t spmm_tile_span(const csr& a, std::size_t row_bytes) {
  row_bytes = std::max<std::size_t>(row_bytes, 1);
  const std::size_t budget =
      std::clamp(row_bytes * spmm_tile_rows, spmm_min_tile_bytes, spmm_tile_bytes);
  const auto largest = static_cast<node_t>(std::max<std::size_t>(budget / row_bytes, 1));
  const node_t tiles = (a.num_cols + largest - 1) / largest;  // each within the budget
  const double degree = static_cast<double>(a.num_edges()) / std::max<double>(a.num_rows, 1);
  const double source_bytes = static_cast<double>(a.num_cols) * static_cast<double>(row_bytes);
  if (tiles <= 1 || source_bytes <= static_cast<double>(spmm_untiled_bytes) ||
      static_cast<double>(tiles) * spmm_min_edges_per_tile_row > degree ||
      a.num_cols > node_t{1} << 32)
    return 0;
  return (a.num_cols + tiles - 1) / tiles;  // equal tiles
}

/// The tile spans a product tries before it settles on one (spmm_rows_add with a cache): the
/// tile count c of spmm_tile_span and ceil(c / 2), ceil(3c / 4), ceil(5c / 4), each at least
/// 2 and within spmm_min_edges_per_tile_row, fewest tiles first; empty when spmm_tile_span
/// does not tile. Which count is fastest depends on the host's cache more than on its size
/// (200k x 128 floats: 7-8 tiles on one Zen 3 host, 3-4 on a Zen 5 with the same 32 MiB L3;
/// RESULTS.md §6, session 10).
inline std::vector<node_t> spmm_tile_span_candidates(const csr& a, std::size_t row_bytes) {
  const node_t span = spmm_tile_span(a, row_bytes);
  if (span <= 0) return {};
  const node_t count = (a.num_cols + span - 1) / span;
  const double degree = static_cast<double>(a.num_edges()) / std::max<double>(a.num_rows, 1);
  std::vector<node_t> spans;
  for (const node_t quarters : {2, 3, 4, 5}) {
    const node_t tiles = (count * quarters + 3) / 4;
    if (tiles < 2 || static_cast<double>(tiles) * spmm_min_edges_per_tile_row > degree) continue;
    const node_t s = (a.num_cols + tiles - 1) / tiles;
    if (spans.empty() || spans.back() != s) spans.push_back(s);
  }
  return spans;
}

}  // namespace detail

/// The tilings of one CSR (detail::source_tiles), made on first use for each tile span and
/// kept. The owner of a CSR that is multiplied every epoch (a schedule, for its graph_blocks)
/// keeps one beside it, so products do not cut the edges into tiles again on every call
/// (~20 ms for 4M edges), and so that the tile count its first product of a row width tuned
/// (spmm_rows_add) holds for the next ones. Requires the CSR to stay unchanged while the cache
/// is used with it. Thread-safe.
class spmm_tile_cache {
 public:
  /// The tiling of a by `span` sources, made now if this cache has none yet. Throws
  /// sar::invalid_argument if a is not the CSR of this cache's first call.
  const detail::source_tiles& tiles(const csr& a, node_t span) {
    const std::lock_guard lock(mutex_);
    if (csr_ == nullptr) csr_ = &a;
    SAR_CHECK(csr_ == &a, invalid_argument,
              "sar::spmm_tile_cache: asked for a tiling of another CSR than its own (a cache "
              "belongs to one CSR, e.g. a block's edges or its transposed, not both)");
    for (const auto& [s, t] : tilings_)
      if (s == span) return *t;
    tilings_.emplace_back(span, std::make_unique<const detail::source_tiles>(a, span));
    return *tilings_.back().second;
  }

  /// Products through this cache of rows narrower than `bytes` make no tiling (span 0): a
  /// tiling is kept for the whole run, 4 bytes per edge and 8 per row and tile, as much for a
  /// narrow product as for a wide one, and the narrow one is the cheap one. For runs that want
  /// bytes more than speed (a GCN's 8-wide last layer at 1M nodes, 20M edges: a 132 MB tiling,
  /// 11 % of a bf16 run's peak, for ~4 % of its epoch; bench/RESULTS.md §40). Default 0: every
  /// width may be tiled.
  void set_min_tiled_row_bytes(std::size_t bytes) {
    const std::lock_guard lock(mutex_);
    min_tiled_row_bytes_ = bytes;
  }
  /// See set_min_tiled_row_bytes.
  std::size_t min_tiled_row_bytes() {
    const std::lock_guard lock(mutex_);
    return min_tiled_row_bytes_;
  }

  /// The tile span a product with `row_bytes`-byte source rows settled on, if one has.
  std::optional<node_t> tuned_span(std::size_t row_bytes) {
    const std::lock_guard lock(mutex_);
    for (const auto& [bytes, span] : tuned_)
      if (bytes == row_bytes) return span;
    return std::nullopt;
  }
  /// Records the span products with `row_bytes`-byte source rows use from now on.
  void set_tuned_span(std::size_t row_bytes, node_t span) {
    const std::lock_guard lock(mutex_);
    tuned_.emplace_back(row_bytes, span);
  }

 private:
  std::mutex mutex_;
  const csr* csr_ = nullptr;  // the CSR the tilings are of
  std::vector<std::pair<node_t, std::unique_ptr<const detail::source_tiles>>> tilings_;
  std::vector<std::pair<std::size_t, node_t>> tuned_;  // (row bytes, span)
  std::size_t min_tiled_row_bytes_ = 0;
};

}  // namespace sar
