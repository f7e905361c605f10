// Sparse times dense: the aggregation kernel of every linear graph convolution.
//   spmm_add(a, x, out):           out += A x      (row i of out += sum of the rows of x listed
//                                                   in row i of A)
//   spmm_add(a, weights, x, out):  out += A_w x    (edge e of A scales its source row by
//                                                   weights[e])
//   spmm_add(block, halo, out):    the same for one graph_block, honouring its row convention:
//                                  out.row(block.local_row(k)) += sum of halo rows in edges
//                                  row k (out has one row per LOCAL node). What layers call.
//   spmm_add_scaled(block, s, halo, out): the same with halo row j scaled by s[j] (GCN's
//                                  source normalisation, without a scaled copy of the input)
//   spmm_add_transposed(block, dout, dhalo): dhalo += A_block^T dout, the backward.
//   spmm_add_weighted(block, w, halo, out), spmm_add_transposed_weighted(block, w, dout,
//                                  dhalo): the same with a weight per edge (not tiled).
//   spmm_assign(block, halo, out, dst), spmm_assign_scaled(block, src, halo, out, dst):
//                                  out := diag(dst) times the product, for a block that is
//                                  the whole aggregation (no zeroing or scaling pass).
// The transpose product is the same kernel applied to the transposed CSR
// (graph_block::transposed), so no atomics are ever needed.
//
// Parallel over destination rows with oneTBB (inside the caller's task_arena): the rows are
// cut into chunks of about equal edge count (a power-law degree distribution does not leave
// one thread with the hubs), and each destination row is summed by one thread in CSR order,
// so the result is bitwise the same for every thread count.
//
// Why it is fast: on a graph larger than the cache the product is bound by gathering source
// rows from random places in x, not by arithmetic, so the kernel is built to keep many of
// those misses in flight and to add as little work around them as it can:
//  (1) each gathered row is read whole and contiguously (row-major features) and added with
//      SIMD packets over the feature columns;
//  (2) the destination row stays in registers while all its source rows are added (blocks of
//      up to 16 packets, sizes fixed at compile time so the loops are fully unrolled), and is
//      stored once, instead of being read and written in memory for every few source rows;
//  (3) every cache line of the source row 8 edges ahead is prefetched, so the next rows'
//      misses overlap the current ones (kernels/prefetch.hpp);
//  (4) when x is larger than the cache, the sources are cut into cache-sized tiles and the
//      product makes one pass per tile (spmm_rows_add), so most gathers hit the cache.
// Each element gets exactly the additions of a plain loop over the row's edges in CSR order
// (old value + x_j1 + x_j2 + ...), whatever the width and however it is cut into blocks or
// tiles.
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <numeric>
#include <optional>
#include <span>
#include <type_traits>
#include <utility>

#include "sar/core/bf16.hpp"
#include "sar/core/error.hpp"
#include "sar/core/types.hpp"
#include "sar/graph/block.hpp"
#include "sar/graph/csr.hpp"
#include "sar/kernels/prefetch.hpp"
#include "sar/kernels/source_tiles.hpp"

namespace sar {

namespace detail {

/// Is Derived an Eigen dense expression (matrix, Map, Ref, block)?
template <class Derived>
concept eigen_dense = std::is_base_of_v<Eigen::DenseBase<std::remove_cvref_t<Derived>>,
                                        std::remove_cvref_t<Derived>>;

/// Calls f(0), f(1), ..., f(N - 1), unrolled at compile time (so an array indexed by the
/// argument can live in registers).
template <int N, class F>
inline void unrolled(F&& f) {
  [&]<int... K>(std::integer_sequence<int, K...>) {
    (f(K), ...);
  }(std::make_integer_sequence<int, N>());
}

/// Prefetches what the edge `distance` edges ahead in a CSR will read: every cache line of
/// its source row of `rows` and, when per_row is given, per_row[its source]. Gathered rows are
/// random accesses, bound by latency unless several are in flight; an add that waits for a
/// per-row scalar waits as long as for the row.
template <class T, class Index = node_t>
class edge_row_prefetcher {
 public:
  static constexpr edge_t distance = 8;
  /// Requires columns[e] < rows.rows() for every e < end (the caller's last edge + 1).
  edge_row_prefetcher(const_rows_ref<T> rows, const Index* columns, edge_t end,
                      const T* per_row = nullptr)
      : edge_row_prefetcher(rows.data(), static_cast<std::size_t>(rows.outerStride()) * sizeof(T),
                            static_cast<std::size_t>(rows.cols()) * sizeof(T), columns, end,
                            per_row) {}
  /// The same for rows of row_bytes bytes, row j at data + j * stride bytes.
  edge_row_prefetcher(const void* data, std::size_t stride, std::size_t row_bytes,
                      const Index* columns, edge_t end, const T* per_row = nullptr)
      : data_(static_cast<const char*>(data)), stride_(stride), bytes_(row_bytes),
        columns_(columns), per_row_(per_row), end_(end) {}
  /// Prefetches for edge e + distance, if that edge is before the end. Always inlined: GCC
  /// left it out of line in sar-train's scaled SpMM (perf showed the call, 3.5% of a GCN
  /// run), and a call inside an edge loop would spill the vector registers holding the sums.
  [[gnu::always_inline]] void operator()(edge_t e) const {
    if (e + distance >= end_) return;
    const auto j = static_cast<std::size_t>(columns_[e + distance]);
    if (bytes_ > 0) prefetch_bytes(data_ + j * stride_, bytes_);
    if (per_row_ != nullptr) prefetch_line(per_row_ + j);
  }

 private:
  const char* data_;
  std::size_t stride_;
  std::size_t bytes_;
  const Index* columns_;
  const T* per_row_;
  edge_t end_;
};

inline void check_spmm_shapes(const char* where, const csr& a, Eigen::Index x_rows,
                              Eigen::Index x_cols, Eigen::Index out_rows, Eigen::Index out_cols,
                              std::span<const node_t> rows = {}) {
  SAR_CHECK(x_rows == a.num_cols, invalid_argument, where, ": x has ", x_rows,
            " rows but A has ", a.num_cols, " columns");
  if (rows.empty()) {
    SAR_CHECK(out_rows == a.num_rows, invalid_argument, where, ": out has ", out_rows,
              " rows but A has ", a.num_rows, " rows");
  } else {
    SAR_CHECK(static_cast<node_t>(rows.size()) == a.num_rows && rows.front() >= 0 &&
                  rows.back() < out_rows,
              invalid_argument, where, ": compressed block of ", a.num_rows, " rows maps ",
              rows.size(), " rows into [", rows.front(), ", ", rows.back(), "], out has ",
              out_rows, " rows");
  }
  SAR_CHECK(x_cols == out_cols, invalid_argument, where, ": x has ", x_cols,
            " columns but out has ", out_cols);
}

/// One scale per halo row (a source-scaled product).
inline void check_source_scales(const char* where, std::size_t scales, Eigen::Index halo_rows) {
  SAR_CHECK(static_cast<Eigen::Index>(scales) == halo_rows, invalid_argument, where, ": ", scales,
            " scales for ", halo_rows, " halo rows");
}

/// One weight per edge of a (a weighted product). Throws sar::invalid_argument otherwise.
inline void check_edge_weights(const char* where, std::size_t weights, const csr& a) {
  SAR_CHECK(static_cast<edge_t>(weights) == a.num_edges(), invalid_argument, where, ": ",
            weights, " weights for ", a.num_edges(), " edges");
}

/// An assigning product writes every row of out: the block must list every local row.
inline void check_spmm_assign(const char* where, const graph_block& block, std::size_t scales,
                              Eigen::Index out_rows) {
  SAR_CHECK(!block.compressed(), invalid_argument, where,
            ": a compressed block does not write every row of out");
  SAR_CHECK(static_cast<Eigen::Index>(scales) == out_rows, invalid_argument, where, ": ", scales,
            " destination scales for ", out_rows, " rows");
}

/// How row_summer scales a gathered source row: not at all, by weights[e] for edge e, or by
/// weights[j] for source row j.
enum class row_scale { none, by_edge, by_source };

/// Where row_summer reads source rows: a matrix's rows, in place.
template <class T>
class dense_rows {
 public:
  explicit dense_rows(const_rows_ref<T> x) : x_(x) {}
  Eigen::Index cols() const { return x_.cols(); }
  /// Entries [c, c + count) of row j, where they are.
  const T* row(Eigen::Index j, Eigen::Index c, Eigen::Index) const {
    return x_.data() + j * x_.outerStride() + c;
  }
  /// What prefetches the rows (and per_row entries) of edges ahead.
  template <class Index>
  edge_row_prefetcher<T, Index> prefetcher_of(const Index* columns, edge_t end,
                                              const T* per_row) const {
    return {x_, columns, end, per_row};
  }

 private:
  const_rows_ref<T> x_;
};

/// Source rows stored as bf16 (sar/core/bf16.hpp: bf16_input), decoded as they are read into
/// a scratch row of the summer's own (one per thread), so each summed value is bitwise the
/// decoded matrix's.
template <class T>
class bf16_source_rows {
 public:
  /// The widest block row_summer reads at once: 16 packets.
  static constexpr Eigen::Index max_block =
      16 * Eigen::internal::unpacket_traits<typename Eigen::internal::packet_traits<T>::type>::size;
  explicit bf16_source_rows(const bf16_input<T>& x) : x_(&x) {}
  Eigen::Index cols() const { return x_->cols(); }
  /// Entries [c, c + count) of row j, decoded (count <= max_block); valid until the next call.
  const T* row(Eigen::Index j, Eigen::Index c, Eigen::Index count) const {
    x_->decode(j, c, count, scratch_.data());
    return scratch_.data();
  }
  /// Prefetches, for the edge edge_row_prefetcher::distance edges ahead, its stored row, its
  /// mask's words and per_row[its source]: a gathered row's mask is a second random access.
  template <class Index>
  class prefetcher {
   public:
    prefetcher(const bf16_input<T>& x, const Index* columns, edge_t end, const T* per_row)
        : rows_(x.values->values().data(), static_cast<std::size_t>(x.cols()) * 2,
                static_cast<std::size_t>(x.cols()) * 2, columns, end, per_row),
          mask_(x.kept.empty() ? nullptr : x.kept.data()), words_(x.mask_words()),
          columns_(columns), end_(end) {}
    [[gnu::always_inline]] void operator()(edge_t e) const {
      rows_(e);
      constexpr edge_t distance = edge_row_prefetcher<T, Index>::distance;
      if (mask_ != nullptr && e + distance < end_)
        prefetch_line(mask_ + static_cast<Eigen::Index>(columns_[e + distance]) * words_);
    }

   private:
    edge_row_prefetcher<T, Index> rows_;
    const std::uint64_t* mask_;
    Eigen::Index words_;
    const Index* columns_;
    edge_t end_;
  };
  template <class Index>
  prefetcher<Index> prefetcher_of(const Index* columns, edge_t end, const T* per_row) const {
    return {*x_, columns, end, per_row};
  }

 private:
  const bf16_input<T>* x_;
  mutable std::array<T, max_block> scratch_{};
};

/// Sums source rows into one destination row at a time: out.row(d) += x.row(j) (times its
/// row_scale weight) for each edge e = (d, j) of a CSR row, in CSR order. The columns
/// go in blocks of up to 16 SIMD packets whose sums stay in registers over all the row's edges
/// and are stored once; block sizes are compile-time constants (16, 8, 4, 2, 1 packets), so
/// their loops are fully unrolled; columns left over, fewer than a packet, go in one half and
/// one quarter packet where they fill them (8 floats of an AVX-512 build: one AVX packet), and
/// the last few are added in memory.
/// The packets are Eigen's (Eigen::internal's packet primitives, stable since Eigen 3.0): SSE,
/// AVX, AVX-512 or NEON as Eigen is configured, scalars when it does not vectorise. Each lane
/// is one column and every operation is per lane, so each element gets exactly the additions
/// of a plain loop over the edges, in order, whatever the width and the blocks (a scaled row
/// is multiplied and added, which the compiler may fuse into one rounding).
// Packets narrower than Eigen's own are template arguments here; GCC warns that their
// alignment attributes do not enter the argument (as Eigen does, the warning is silenced).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wignored-attributes"
// Rows: where the source rows are read (dense_rows, bf16_source_rows).
template <class T, row_scale Scale, class Index = node_t, class Rows = dense_rows<T>>
class row_summer {
  using packet = typename Eigen::internal::packet_traits<T>::type;
  static constexpr int lanes = Eigen::internal::unpacket_traits<packet>::size;
  static constexpr int max_packets = 16;  // x86-64 with AVX has 16 vector registers

 public:
  /// prefetch_end: the first edge not to prefetch (the end of the caller's rows).
  row_summer(const_rows_ref<T> x, const Index* columns, const T* weights, edge_t prefetch_end)
    requires std::same_as<Rows, dense_rows<T>>
      : row_summer(Rows(x), columns, weights, prefetch_end) {}
  /// The same, on rows read from `rows`.
  row_summer(Rows rows, const Index* columns, const T* weights, edge_t prefetch_end)
      : rows_(std::move(rows)), width_(rows_.cols()), columns_(columns), weights_(weights),
        prefetch_(rows_.prefetcher_of(columns, prefetch_end,
                                      Scale == row_scale::by_source ? weights : nullptr)) {}

  /// destination[0, width) := (destination (0 when assign) + the sum over edges [begin, end))
  /// times *scale (when not null). A row without edges is filled with 0 (assign) or only
  /// scaled, without the summing passes.
  void sum(T* destination, edge_t begin, edge_t end, bool assign = false,
           const T* scale = nullptr) const {
    if (begin == end) {
      if (assign) std::fill_n(destination, width_, T(0));
      else if (scale != nullptr)
        for (Eigen::Index k = 0; k < width_; ++k) destination[k] *= *scale;
      return;
    }
    // Only the first pass over the edges prefetches (the rows of the edges `distance` ahead).
    bool first = true;
    Eigen::Index c = 0;
    const auto block = [&]<int Packets>(std::integral_constant<int, Packets>) {
      add_block<Packets>(destination, c, begin, end, std::exchange(first, false), assign, scale);
      c += Packets * lanes;
    };
    while (width_ - c >= max_packets * lanes) block(std::integral_constant<int, max_packets>());
    const Eigen::Index packets = (width_ - c) / lanes;  // < max_packets
    static_assert(max_packets == 16, "the blocks below cover 0-15 packets");
    if (packets & 8) block(std::integral_constant<int, 8>());
    if (packets & 4) block(std::integral_constant<int, 4>());
    if (packets & 2) block(std::integral_constant<int, 2>());
    if (packets & 1) block(std::integral_constant<int, 1>());
    using half = typename Eigen::internal::unpacket_traits<packet>::half;
    if constexpr (Eigen::internal::unpacket_traits<half>::size < lanes)
      narrower<half>(destination, c, begin, end, first, assign, scale);
    if (c < width_) add_columns(destination, c, begin, end, first, assign, scale);
  }

 private:
  /// Entries [c, c + count) of the source row of edge e.
  const T* source(edge_t e, Eigen::Index c, Eigen::Index count) const {
    return rows_.row(static_cast<Eigen::Index>(columns_[e]), c, count);
  }
  T weight(edge_t e) const {
    return Scale == row_scale::by_edge ? weights_[e] : weights_[columns_[e]];
  }

  /// One block of packet P if the columns from c fill it, then the same with P's half while
  /// that is narrower; advances c past what it summed. Requires P narrower than `packet`.
  template <class P>
  void narrower(T* destination, Eigen::Index& c, edge_t begin, edge_t end, bool& first,
                bool assign, const T* scale) const {
    using traits = Eigen::internal::unpacket_traits<P>;
    constexpr int size = traits::size;
    if (width_ - c >= size) {
      add_block<1, P>(destination, c, begin, end, std::exchange(first, false), assign, scale);
      c += size;
    }
    using half = typename traits::half;
    if constexpr (Eigen::internal::unpacket_traits<half>::size < size)
      narrower<half>(destination, c, begin, end, first, assign, scale);
  }

  /// destination[c, c + Packets * lanes of P) (+)= the sum over edges [begin, end), in
  /// registers, then times *scale unless it is null.
  template <int Packets, class P = packet>
  void add_block(T* destination, Eigen::Index c, edge_t begin, edge_t end, bool prefetching,
                 bool assign, const T* scale) const {
    using namespace Eigen::internal;
    constexpr int lanes = unpacket_traits<P>::size;
    P acc[Packets];
    unrolled<Packets>([&](int j) {
      acc[j] = assign ? pset1<P>(T(0)) : ploadu<P>(destination + c + j * lanes);
    });
    for (edge_t e = begin; e < end; ++e) {
      if (prefetching) prefetch_(e);
      const T* row = source(e, c, Packets * lanes);
      if constexpr (Scale != row_scale::none) {
        const P w = pset1<P>(weight(e));
        unrolled<Packets>([&](int j) {
          acc[j] = padd(acc[j], pmul(w, ploadu<P>(row + j * lanes)));
        });
      } else {
        unrolled<Packets>([&](int j) { acc[j] = padd(acc[j], ploadu<P>(row + j * lanes)); });
      }
    }
    if (scale != nullptr) {
      const P s = pset1<P>(*scale);
      unrolled<Packets>([&](int j) { acc[j] = pmul(acc[j], s); });
    }
    unrolled<Packets>([&](int j) { pstoreu(destination + c + j * lanes, acc[j]); });
  }

  /// destination[c, width) (+)= the sum over edges [begin, end), then times *scale unless it
  /// is null, for fewer columns than a packet holds: added in memory, edge by edge.
  void add_columns(T* destination, Eigen::Index c, edge_t begin, edge_t end, bool prefetching,
                   bool assign, const T* scale) const {
    if (assign) std::fill(destination + c, destination + width_, T(0));
    for (edge_t e = begin; e < end; ++e) {
      if (prefetching) prefetch_(e);
      const T* row = source(e, c, width_ - c);  // row[k - c] is column k
      for (Eigen::Index k = c; k < width_; ++k) {
        if constexpr (Scale != row_scale::none) destination[k] += weight(e) * row[k - c];
        else destination[k] += row[k - c];
      }
    }
    if (scale != nullptr)
      for (Eigen::Index k = c; k < width_; ++k) destination[k] *= *scale;
  }

  Rows rows_;
  Eigen::Index width_;
  const Index* columns_;
  const T* weights_;
  // The rows (and by_source scales) of edges ahead.
  decltype(std::declval<const Rows&>().template prefetcher_of<Index>(nullptr, 0, nullptr)) prefetch_;
};
#pragma GCC diagnostic pop

/// What spmm_rows_add does to a destination row besides adding its sum: with assign, what the
/// row held is not read (the first pass writes it; a row without edges becomes 0); with scale,
/// the finished row is multiplied by scale[its row of out]. Both are bitwise zeroing out
/// before and scaling its rows after, without those two passes over out.
template <class T>
struct spmm_rows_epilogue {
  bool assign = false;
  const T* scale = nullptr;
};

/// The product of spmm_rows_add on all of a, in passes over one tile of each candidate span
/// after a first tile of the sources the candidates leave (which takes the first touch of the
/// output and is not timed); sum_pass(tiling, t) sums tile t. A pass over a tile of
/// span s costs about 1 / (tiles of span s) of the product tiled by s, the destination rows
/// streamed as in the whole product, so the candidate with the least (pass time x tile count)
/// is returned. Candidates that leave no first tile are dropped, fewest tiles first; returns
/// nothing (and sums nothing) when fewer than 2 remain.
template <class SumPass>
std::optional<node_t> try_tile_spans(const csr& a, std::vector<node_t> candidates,
                                     SumPass&& sum_pass) {
  const auto sources = [&] {
    return std::accumulate(candidates.begin(), candidates.end(), node_t{0});
  };
  while (!candidates.empty() && sources() >= a.num_cols) candidates.erase(candidates.begin());
  if (candidates.size() < 2) return std::nullopt;
  std::vector<node_t> starts{0};
  for (node_t start = a.num_cols - sources(); const node_t s : candidates) {
    starts.push_back(start);
    start += s;
  }
  const source_tiles probe(a, starts);
  sum_pass(probe, 0);
  std::vector<double> estimate;  // seconds of the whole product, per candidate
  for (int t = 1; t < probe.count(); ++t) {
    const auto begin = std::chrono::steady_clock::now();
    sum_pass(probe, t);
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - begin;
    const node_t span = candidates[static_cast<std::size_t>(t - 1)];
    estimate.push_back(took.count() * static_cast<double>(a.num_cols) / static_cast<double>(span));
  }
  const auto fastest = std::min_element(estimate.begin(), estimate.end()) - estimate.begin();
  return candidates[static_cast<std::size_t>(fastest)];
}

/// out.row(row_of(i)) += row i of A x (row_of: identity when rows is null), gathered rows
/// scaled as Scale says, then the epilogue; each destination row summed by one thread
/// (row_summer's order). An assigning epilogue requires rows == null (every row written).
///
/// With a tile span (0: none; ignored for by_edge) the product makes one pass per tile of
/// sources (source_tiles), so its gathers hit the cache instead of memory: ~1.5x on a 100 MB
/// x and a 32 MB cache. Each row still gets its edges' additions in CSR order, and its partial
/// sum is stored and reloaded exactly between passes, so the result is bitwise that of one
/// pass. Without a span given, the span is spmm_tile_span's or, with a cache, 0 for rows
/// narrower than its min_tiled_row_bytes() and otherwise tuned: the first
/// product of a row width runs one pass of each of spmm_tile_span_candidates (try_tile_spans)
/// and the cache keeps the fastest for the next products. The tiling comes from `cache` when
/// given, else is made for this call (4 bytes per edge and 8 per row and tile).
template <row_scale Scale, class T>
void spmm_rows_add(const csr& a, const node_t* rows, const T* weights, const_rows_ref<T> x,
                   rows_ref<T> out, spmm_tile_cache* cache = nullptr,
                   std::optional<node_t> tile_span = std::nullopt,
                   spmm_rows_epilogue<T> epilogue = {}) {
  if (x.cols() == 0) return;
  // Sums the rows of the CSR (offsets, columns) into out: one pass of several when tiled.
  const auto sum_rows = [&]<class Index>(std::span<const edge_t> offsets, const Index* columns,
                                         bool first_pass, bool last_pass) {
    const bool assign = epilogue.assign && first_pass;
    const bool scaling = epilogue.scale != nullptr && last_pass;
    for_edge_balanced_rows(offsets, x.cols(), [&](node_t begin, node_t end) {
      const row_summer<T, Scale, Index> summer(x, columns, weights, offsets[end]);
      for (node_t i = begin; i < end; ++i) {
        const node_t row = rows != nullptr ? rows[i] : i;
        T* destination = out.data() + row * out.outerStride();
        summer.sum(destination, offsets[i], offsets[i + 1], assign,
                   scaling ? epilogue.scale + row : nullptr);
      }
    });
  };
  // Pass t of a tiled product.
  const auto sum_pass = [&](const source_tiles& tiles, int t) {
    sum_rows(tiles.offsets(t), tiles.columns(), t == 0, t + 1 == tiles.count());
  };
  const std::size_t row_bytes = static_cast<std::size_t>(x.cols()) * sizeof(T);
  std::optional<node_t> span = Scale == row_scale::by_edge ? 0 : tile_span;
  if (!span && cache != nullptr && row_bytes < cache->min_tiled_row_bytes()) span = 0;
  if (!span && cache != nullptr) {
    span = cache->tuned_span(row_bytes);
    if (!span) {  // the first product of this row width through the cache
      if (const auto fastest =
              try_tile_spans(a, spmm_tile_span_candidates(a, row_bytes), sum_pass)) {
        cache->set_tuned_span(row_bytes, *fastest);
        (void)cache->tiles(a, *fastest);  // made now, while this call is slow anyway
        return;
      }
      span = spmm_tile_span(a, row_bytes);  // nothing to choose from
      cache->set_tuned_span(row_bytes, *span);
    }
  }
  if (!span) span = spmm_tile_span(a, row_bytes);
  if (*span <= 0 || *span >= a.num_cols) {
    sum_rows(std::span<const edge_t>(a.offsets), a.columns.data(), true, true);
    return;
  }
  std::optional<source_tiles> own;
  const source_tiles& tiles = cache != nullptr ? cache->tiles(a, *span) : own.emplace(a, *span);
  for (int t = 0; t < tiles.count(); ++t) sum_pass(tiles, t);
}

}  // namespace detail

/// out += A x. Requires x.rows() == a.num_cols, out.rows() == a.num_rows, equal column counts,
/// out not aliasing x, columns of A inside [0, a.num_cols) (a valid CSR). Throws
/// sar::invalid_argument on a shape mismatch. T is given explicitly (spmm_add<float>(...));
/// the overload below deduces it from any Eigen row-major operands.
template <class T>
void spmm_add(const csr& a, std::type_identity_t<const_rows_ref<T>> x,
              std::type_identity_t<rows_ref<T>> out) {
  detail::check_spmm_shapes("sar::spmm_add", a, x.rows(), x.cols(), out.rows(), out.cols());
  detail::spmm_rows_add<detail::row_scale::none, T>(a, nullptr, nullptr, x, out);
}

/// out += A_block halo for one graph_block: out.row(block.local_row(k)) += sum of the halo rows
/// listed in row k of *block.edges. out has one row per LOCAL node. Requires
/// halo.rows() == block.edges->num_cols, equal column counts, out not aliasing halo, and
/// either an uncompressed block with out.rows() == block.edges->num_rows or compressed rows
/// (strictly increasing) inside [0, out.rows()). Throws sar::invalid_argument on a shape
/// mismatch. Same parallelism and determinism as the CSR form; reuses the tiling the block's
/// schedule keeps (graph_block::edge_tiles).
template <class T>
void spmm_add(const graph_block& block, std::type_identity_t<const_rows_ref<T>> halo,
              std::type_identity_t<rows_ref<T>> out) {
  const csr& a = *block.edges;
  detail::check_spmm_shapes("sar::spmm_add (block)", a, halo.rows(), halo.cols(), out.rows(),
                            out.cols(), block.rows);
  detail::spmm_rows_add<detail::row_scale::none, T>(
      a, block.rows.empty() ? nullptr : block.rows.data(), nullptr, halo, out, block.edge_tiles);
}

/// dhalo += A_block^T dout, the backward of spmm_add(block, ...): dhalo.row(c) += the dout rows
/// of the local destinations of halo row c (rows of *block.transposed). dout has one row per
/// LOCAL node, dhalo one per halo row. Requires dout.rows() == block.transposed->num_cols,
/// dhalo.rows() == block.transposed->num_rows, equal column counts, no aliasing. Throws
/// sar::invalid_argument on a shape mismatch. Reuses graph_block::transposed_tiles.
template <class T>
void spmm_add_transposed(const graph_block& block, std::type_identity_t<const_rows_ref<T>> dout,
                         std::type_identity_t<rows_ref<T>> dhalo) {
  const csr& t = *block.transposed;
  detail::check_spmm_shapes("sar::spmm_add_transposed", t, dout.rows(), dout.cols(),
                            dhalo.rows(), dhalo.cols());
  detail::spmm_rows_add<detail::row_scale::none, T>(t, nullptr, nullptr, dout, dhalo,
                                                    block.transposed_tiles);
}

/// dhalo += A_block^T diag(scale) dout: spmm_add_transposed(block, dout, dhalo) with dout row i
/// multiplied by scale[i] as it is added (the backward of a destination-scaled aggregation
/// without a scaled copy of dout). Requires scale.size() == dout.rows() and what
/// spmm_add_transposed requires. Throws sar::invalid_argument on a mismatch.
template <class T>
void spmm_add_transposed_scaled(const graph_block& block, std::span<const T> scale,
                                std::type_identity_t<const_rows_ref<T>> dout,
                                std::type_identity_t<rows_ref<T>> dhalo) {
  const csr& t = *block.transposed;
  detail::check_spmm_shapes("sar::spmm_add_transposed_scaled", t, dout.rows(), dout.cols(),
                            dhalo.rows(), dhalo.cols());
  detail::check_source_scales("sar::spmm_add_transposed_scaled", scale.size(), dout.rows());
  detail::spmm_rows_add<detail::row_scale::by_source, T>(t, nullptr, scale.data(), dout, dhalo,
                                                         block.transposed_tiles);
}

/// out += A_block,w halo: spmm_add(block, halo, out) with entry e of block.edges scaling its
/// halo row by weights[e] (an edge-weighted aggregation; not tiled). Requires
/// weights.size() == block.edges->num_edges() and what spmm_add(block, ...) requires. Throws
/// sar::invalid_argument on a mismatch.
template <class T>
void spmm_add_weighted(const graph_block& block, std::span<const T> weights,
                       std::type_identity_t<const_rows_ref<T>> halo,
                       std::type_identity_t<rows_ref<T>> out) {
  const csr& a = *block.edges;
  detail::check_spmm_shapes("sar::spmm_add_weighted", a, halo.rows(), halo.cols(), out.rows(),
                            out.cols(), block.rows);
  detail::check_edge_weights("sar::spmm_add_weighted", weights.size(), a);
  detail::spmm_rows_add<detail::row_scale::by_edge, T>(
      a, block.rows.empty() ? nullptr : block.rows.data(), weights.data(), halo, out);
}

/// dhalo += A_block,w^T dout, the backward of spmm_add_weighted: weights[t] scales entry t of
/// block.transposed. Requires weights.size() == block.transposed->num_edges() and what
/// spmm_add_transposed requires. Throws sar::invalid_argument on a mismatch.
template <class T>
void spmm_add_transposed_weighted(const graph_block& block, std::span<const T> weights,
                                  std::type_identity_t<const_rows_ref<T>> dout,
                                  std::type_identity_t<rows_ref<T>> dhalo) {
  const csr& t = *block.transposed;
  detail::check_spmm_shapes("sar::spmm_add_transposed_weighted", t, dout.rows(), dout.cols(),
                            dhalo.rows(), dhalo.cols());
  detail::check_edge_weights("sar::spmm_add_transposed_weighted", weights.size(), t);
  detail::spmm_rows_add<detail::row_scale::by_edge, T>(t, nullptr, weights.data(), dout, dhalo);
}

/// out += A_block diag(scale) halo: as spmm_add(block, halo, out) with halo row j multiplied
/// by scale[j] as it is added (what adding a scaled copy of halo gives, to rounding).
/// Requires scale.size() == halo.rows() and everything spmm_add(block, ...) requires. Throws
/// sar::invalid_argument on a mismatch.
template <class T>
void spmm_add_scaled(const graph_block& block, std::span<const T> scale,
                     std::type_identity_t<const_rows_ref<T>> halo,
                     std::type_identity_t<rows_ref<T>> out) {
  const csr& a = *block.edges;
  detail::check_spmm_shapes("sar::spmm_add_scaled", a, halo.rows(), halo.cols(), out.rows(),
                            out.cols(), block.rows);
  detail::check_source_scales("sar::spmm_add_scaled", scale.size(), halo.rows());
  detail::spmm_rows_add<detail::row_scale::by_source, T>(
      a, block.rows.empty() ? nullptr : block.rows.data(), scale.data(), halo, out,
      block.edge_tiles);
}

/// out := diag(dst) A_block halo: zeroing out, spmm_add(block, halo, out) and scaling row i
/// by dst[i], bitwise, in one pass over out. For a block that is its aggregation's only one
/// (graph_block::whole). Requires an uncompressed block, dst.size() == out.rows(), and what
/// spmm_add(block, ...) requires. Throws sar::invalid_argument otherwise.
template <class T>
void spmm_assign(const graph_block& block, std::type_identity_t<const_rows_ref<T>> halo,
                 std::type_identity_t<rows_ref<T>> out, std::span<const T> dst) {
  const csr& a = *block.edges;
  detail::check_spmm_shapes("sar::spmm_assign", a, halo.rows(), halo.cols(), out.rows(),
                            out.cols());
  detail::check_spmm_assign("sar::spmm_assign", block, dst.size(), out.rows());
  detail::spmm_rows_add<detail::row_scale::none, T>(a, nullptr, nullptr, halo, out,
                                                    block.edge_tiles, std::nullopt,
                                                    {.assign = true, .scale = dst.data()});
}

/// out := diag(dst) A_block diag(src) halo: spmm_assign with halo row j scaled by src[j] as it
/// is added (spmm_add_scaled's product). Requires src.size() == halo.rows() and what
/// spmm_assign requires. Throws sar::invalid_argument otherwise.
template <class T>
void spmm_assign_scaled(const graph_block& block, std::span<const T> src,
                        std::type_identity_t<const_rows_ref<T>> halo,
                        std::type_identity_t<rows_ref<T>> out, std::span<const T> dst) {
  const csr& a = *block.edges;
  detail::check_spmm_shapes("sar::spmm_assign_scaled", a, halo.rows(), halo.cols(), out.rows(),
                            out.cols());
  detail::check_spmm_assign("sar::spmm_assign_scaled", block, dst.size(), out.rows());
  detail::check_source_scales("sar::spmm_assign_scaled", src.size(), halo.rows());
  detail::spmm_rows_add<detail::row_scale::by_source, T>(a, nullptr, src.data(), halo, out,
                                                         block.edge_tiles, std::nullopt,
                                                         {.assign = true, .scale = dst.data()});
}

/// Rows [begin, end) of diag(dst) A diag(src) x, row i of them written to out + (i - begin)
/// out_stride, on the calling thread; x's rows read through `rows` (detail::dense_rows,
/// detail::bf16_source_rows). With edge_weights (one per edge of a, CSR order; then src is
/// not read) the rows of diag(dst) A_w x. Each row is bitwise the one spmm_assign_scaled
/// (with weights: spmm_add_weighted into zeros, then the rows scaled by dst) computes, so a
/// caller can make a product's rows chunk by chunk instead of holding it whole. Requires a
/// valid CSR, 0 <= begin <= end <= a.num_rows, src (or edge_weights) and dst covering a's
/// columns and rows. Does not throw.
template <class T, class Rows>
void spmm_assign_rows(const csr& a, node_t begin, node_t end, const Rows& rows, const T* src,
                      const T* edge_weights, const T* dst, T* out, Eigen::Index out_stride) {
  if (begin >= end) return;
  const auto sum = [&]<detail::row_scale Scale>(const T* weights) {
    const detail::row_summer<T, Scale, node_t, Rows> summer(rows, a.columns.data(), weights,
                                                            a.offsets[end]);
    for (node_t i = begin; i < end; ++i)
      summer.sum(out + (i - begin) * out_stride, a.offsets[i], a.offsets[i + 1], true, dst + i);
  };
  if (edge_weights != nullptr) sum.template operator()<detail::row_scale::by_edge>(edge_weights);
  else sum.template operator()<detail::row_scale::by_source>(src);
}

/// out += A_w x with weights[e] scaling edge e (CSR order). Requires everything spmm_add does
/// and weights.size() == a.num_edges(). Throws sar::invalid_argument on a mismatch.
template <class T>
void spmm_add(const csr& a, std::span<const T> weights, std::type_identity_t<const_rows_ref<T>> x,
              std::type_identity_t<rows_ref<T>> out) {
  detail::check_spmm_shapes("sar::spmm_add (weighted)", a, x.rows(), x.cols(), out.rows(),
                            out.cols());
  detail::check_edge_weights("sar::spmm_add (weighted)", weights.size(), a);
  detail::spmm_rows_add<detail::row_scale::by_edge, T>(a, nullptr, weights.data(), x, out);
}

namespace detail {
/// The scalar of a deducing form's operands: X's, which Out must share; both row-major.
template <class X, class Out>
using spmm_scalar = typename std::remove_cvref_t<X>::Scalar;
template <class X, class Out>
constexpr void check_spmm_operands() {
  static_assert(std::is_same_v<spmm_scalar<X, Out>, typename std::remove_cvref_t<Out>::Scalar>,
                "sar::spmm_add needs its dense operands of one scalar type; cast one of them.");
  static_assert(std::remove_cvref_t<X>::IsRowMajor && std::remove_cvref_t<Out>::IsRowMajor,
                "sar::spmm_add needs row-major operands (sar::matrix<T>): a node's features "
                "must be one contiguous row.");
}
}  // namespace detail

/// Deducing forms: any Eigen row-major dense operands of one scalar type (matrix, Map, Ref,
/// block of rows). out may be an rvalue block (out.middleRows(...)).
template <class X, class Out>
  requires detail::eigen_dense<X> && detail::eigen_dense<Out>
void spmm_add(const csr& a, const X& x, Out&& out) {
  detail::check_spmm_operands<X, Out>();
  spmm_add<detail::spmm_scalar<X, Out>>(a, x, out);
}
template <class X, class Out>
  requires detail::eigen_dense<X> && detail::eigen_dense<Out>
void spmm_add(const graph_block& block, const X& halo, Out&& out) {
  detail::check_spmm_operands<X, Out>();
  spmm_add<detail::spmm_scalar<X, Out>>(block, halo, out);
}
template <class D, class DHalo>
  requires detail::eigen_dense<D> && detail::eigen_dense<DHalo>
void spmm_add_transposed(const graph_block& block, const D& dout, DHalo&& dhalo) {
  detail::check_spmm_operands<D, DHalo>();
  spmm_add_transposed<detail::spmm_scalar<D, DHalo>>(block, dout, dhalo);
}
template <class X, class Out>
  requires detail::eigen_dense<X> && detail::eigen_dense<Out>
void spmm_add(const csr& a, std::span<const detail::spmm_scalar<X, Out>> weights, const X& x,
              Out&& out) {
  detail::check_spmm_operands<X, Out>();
  spmm_add<detail::spmm_scalar<X, Out>>(a, weights, x, out);
}

}  // namespace sar
