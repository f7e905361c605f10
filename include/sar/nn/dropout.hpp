// Inverted dropout: in training, each entry is kept with probability 1 - p and scaled by
// 1 / (1 - p); in evaluation (ctx.training == false) the layer is the identity.
// The mask is a pure function of (ctx.seed, ctx.epoch, ctx.layer, global node id, column)
// through counter_rng, so it does not depend on the partition, the rank count or the thread
// count.
//   dropout<T>:       forward keeps the mask as bits (n x ceil(F / 64) words, 1/32 of a float
//                     matrix) so backward needs no random numbers.
//   relu_dropout<T>:  relu and dropout in one pass each way (between graph layers, where the
//                     model would otherwise run two in-place passes over the same buffer each
//                     way). Forward keeps the entries of y > 0 as bits (kept and x > 0), so
//                     backward reads neither x nor y, and a model may write the next layer's
//                     input gradient over y (sar/nn/sequential.hpp).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "sar/core/bf16.hpp"
#include "sar/core/error.hpp"
#include "sar/core/kept_bits.hpp"
#include "sar/core/memory.hpp"
#include "sar/core/rng.hpp"
#include "sar/core/sparse_rows.hpp"
#include "sar/core/types.hpp"
#include "sar/kernels/dense.hpp"
#include "sar/nn/layer.hpp"
#include "sar/nn/parameters.hpp"

namespace sar {

/// The dropout decisions of one layer and epoch, node by node, as bits (1 = kept).
/// A decision compares 16 random bits with round(p * 2^16), so one Philox call (256 bits)
/// covers 16 columns; the probability actually used is dropped_fraction() (within 2^-17 of p).
class dropout_mask {
 public:
  /// Columns one random draw decides (16 bits each).
  static constexpr Eigen::Index columns_per_draw = 16;

  /// Requires 0 <= p < 1.
  dropout_mask(const layer_context& ctx, double p)
      : rng_(ctx.seed, rng_stream::dropout, ctx.layer), epoch_(ctx.epoch),
        threshold_(static_cast<std::uint32_t>(std::lround(p * 65536.0))) {}

  /// The exact drop probability (p rounded to a multiple of 2^-16).
  double dropped_fraction() const { return threshold_ / 65536.0; }
  /// The factor of a kept entry, 1 / (1 - dropped_fraction()).
  double kept_scale() const { return 1.0 / (1.0 - dropped_fraction()); }

  /// Sets bit c of `bits` (ceil(width / 64) words, all written) iff column c of the node with
  /// this global id is kept.
  void node_bits(node_t global_id, Eigen::Index width, std::uint64_t* bits) const {
    std::fill_n(bits, words_for(width), std::uint64_t{0});
    Eigen::Index c0 = 0;
#if defined(__AVX512F__) && defined(__AVX512BW__)
    for (; c0 + 8 * columns_per_draw <= width; c0 += 8 * columns_per_draw)
      kept_lanes8(rng_.bits8(epoch_, static_cast<std::uint64_t>(global_id),
                             static_cast<std::uint64_t>(c0 / columns_per_draw)),
                  bits + c0 / 64);
#endif
    for (; c0 < width; c0 += columns_per_draw) {
      std::uint64_t kept = kept_lanes(draw(global_id, c0));
      if (width - c0 < columns_per_draw) kept &= (std::uint64_t{1} << (width - c0)) - 1;
      bits[c0 / 64] |= kept << (c0 % 64);  // 16 divides 64: a draw never straddles words
    }
  }
  /// Bit k (k < 16) set iff 16-bit lane k of the draw (little-endian order) is >= the threshold.
  std::uint64_t kept_lanes(const counter_rng::bits_t& words) const {
#if defined(__AVX2__)
    // Unsigned 16-bit compare as a signed one on lanes offset by 2^15; the 16 lane masks are
    // packed to bytes (each 128-bit half twice) and read out with one movemask.
    if (threshold_ == 0) return 0xffff;
    const __m256i offset = _mm256_set1_epi16(static_cast<short>(0x8000));
    const auto* draw = reinterpret_cast<const __m256i*>(words.data());
    const __m256i lanes = _mm256_xor_si256(_mm256_loadu_si256(draw), offset);
    const __m256i limit = _mm256_set1_epi16(static_cast<short>((threshold_ - 1) ^ 0x8000u));
    const __m256i keep = _mm256_cmpgt_epi16(lanes, limit);
    const auto m =
        static_cast<std::uint32_t>(_mm256_movemask_epi8(_mm256_packs_epi16(keep, keep)));
    return (m & 0xffu) | ((m >> 8) & 0xff00u);
#else
    std::uint64_t kept = 0;
    for (Eigen::Index k = 0; k < columns_per_draw; ++k)
      kept |= std::uint64_t{lane(words, k) >= threshold_} << k;
    return kept;
#endif
  }
#if defined(__AVX512F__) && defined(__AVX512BW__)
  /// kept[0], kept[1] := kept_lanes of 8 consecutive draws (128 columns) as counter_rng::bits8
  /// gives them (word q of draw k in lane k of vector q).
  void kept_lanes8(const counter_rng::bits8_t& draws, std::uint64_t* kept) const {
    if (threshold_ > 0xffffu) {  // p rounded to 1: nothing kept
      kept[0] = kept[1] = 0;
      return;
    }
    // Transpose to two draws a vector, each draw's four words in order: 16-bit lane e of
    // vector v is then column 32 v + e.
    const __m512i* x = draws.word;
    const __m512i lo01 = _mm512_unpacklo_epi64(x[0], x[1]);
    const __m512i hi01 = _mm512_unpackhi_epi64(x[0], x[1]);
    const __m512i lo23 = _mm512_unpacklo_epi64(x[2], x[3]);
    const __m512i hi23 = _mm512_unpackhi_epi64(x[2], x[3]);
    const __m512i first = _mm512_shuffle_i64x2(lo01, lo23, 0x44);  // 128-bit chunks 0, 1 of each
    const __m512i second = _mm512_shuffle_i64x2(hi01, hi23, 0x44);
    const __m512i third = _mm512_shuffle_i64x2(lo01, lo23, 0xee);  // chunks 2, 3
    const __m512i fourth = _mm512_shuffle_i64x2(hi01, hi23, 0xee);
    const __m512i draws01 = _mm512_shuffle_i64x2(first, second, 0x88);  // chunks 0, 2 of each
    const __m512i draws23 = _mm512_shuffle_i64x2(first, second, 0xdd);  // chunks 1, 3
    const __m512i draws45 = _mm512_shuffle_i64x2(third, fourth, 0x88);
    const __m512i draws67 = _mm512_shuffle_i64x2(third, fourth, 0xdd);
    const __m512i limit = _mm512_set1_epi16(static_cast<short>(threshold_));
    const auto keep = [&](__m512i lanes) {
      return static_cast<std::uint64_t>(_mm512_cmpge_epu16_mask(lanes, limit));
    };
    kept[0] = keep(draws01) | keep(draws23) << 32;
    kept[1] = keep(draws45) | keep(draws67) << 32;
  }
#endif
  /// 16-bit lane k of a draw: the draws a decision compares with the threshold.
  static std::uint32_t lane(const counter_rng::bits_t& words, Eigen::Index k) {
    return static_cast<std::uint32_t>((words[static_cast<std::size_t>(k / 4)] >> (16 * (k % 4))) &
                                      0xffffu);
  }
  /// The draw for the 16 columns starting at `column` (a multiple of 16).
  counter_rng::bits_t draw(node_t global_id, Eigen::Index column) const {
    return rng_.bits(epoch_, static_cast<std::uint64_t>(global_id),
                     static_cast<std::uint64_t>(column / columns_per_draw));
  }
  /// Lanes at or above this value are kept.
  std::uint32_t threshold() const { return threshold_; }
  /// Words of node_bits for `width` columns.
  static Eigen::Index words_for(Eigen::Index width) { return (width + 63) / 64; }

 private:
  counter_rng rng_;
  std::uint64_t epoch_;
  std::uint32_t threshold_;
};

namespace detail {

/// out[c] (+)= g(in[c]) * (bit c of bits set ? scale : 0) for c < width, with g = relu when
/// Relu, else the identity (add: +=, else :=). bits holds ceil(width / 64) words. A NaN input
/// stays NaN, dropped or not (NaN * 0 is NaN).
template <bool Relu, class T>
void apply_kept(const std::uint64_t* bits, const T* in, T scale, T* out, Eigen::Index width,
                bool add) {
  Eigen::Index c = 0;
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<T, float>) {
    const __m512 factor = _mm512_set1_ps(scale);
    for (; c + 16 <= width; c += 16) {
      __m512 v = _mm512_loadu_ps(in + c);
      if constexpr (Relu) v = _mm512_max_ps(_mm512_setzero_ps(), v);  // NaN: v
      v = _mm512_mul_ps(v, kept_factors16(bits, c, factor));
      if (add) v = _mm512_add_ps(_mm512_loadu_ps(out + c), v);
      _mm512_storeu_ps(out + c, v);
    }
  }
#endif
#if defined(__AVX2__)
  if constexpr (std::is_same_v<T, float>) {
    const __m256 factor = _mm256_set1_ps(scale);
    for (; c + 8 <= width; c += 8) {
      __m256 v = _mm256_loadu_ps(in + c);
      if constexpr (Relu) v = _mm256_max_ps(_mm256_setzero_ps(), v);  // NaN: v
      v = _mm256_mul_ps(v, kept_factors8(bits, c, factor));
      if (add) v = _mm256_add_ps(_mm256_loadu_ps(out + c), v);
      _mm256_storeu_ps(out + c, v);
    }
  }
#endif
  for (; c < width; ++c) {
    T v = in[c];
    if constexpr (Relu) v = v < T(0) ? T(0) : v;
    const T factor = kept_factor(bits, c, scale);
    if (add) out[c] += v * factor;
    else out[c] = v * factor;
  }
}

/// bits (ceil(width / 64) words, all written): bit c set iff v[c] > 0 (not for a NaN).
template <class T>
void positive_bits(const T* v, Eigen::Index width, std::uint64_t* bits) {
  for (Eigen::Index w = 0; w * 64 < width; ++w) {
    const Eigen::Index begin = 64 * w, end = std::min(width, begin + 64);
    std::uint64_t word = 0;
    Eigen::Index c = begin;
#if defined(__AVX512F__)
    if constexpr (std::is_same_v<T, float>)
      for (; c + 16 <= end; c += 16)
        word |= std::uint64_t{_mm512_cmp_ps_mask(_mm512_loadu_ps(v + c), _mm512_setzero_ps(),
                                                 _CMP_GT_OQ)} << (c - begin);
#endif
    for (; c < end; ++c) word |= std::uint64_t{v[c] > T(0)} << (c - begin);
    bits[w] = word;
  }
}

/// dropout (Relu = false) and relu_dropout (Relu = true): y := g(x) * mask * s on rows
/// [first, end) of x on the calling thread, or on every row in parallel with y resized when
/// end < 0; s = 1 / (1 - p'), p' = dropped_fraction(), and no mask at all when `masked` is
/// false (relu alone). Keeps in `kept`, unless it is null, the mask (dropout) or the entries
/// of y > 0 (relu_dropout): x.rows() x words_for(x.cols()) words, sized here on all rows and
/// before a row range (which requires y to be x). Otherwise x and y may be the same matrix.
template <bool Relu, class T, class Schedule>
void masked_forward(Schedule& graph, const layer_context& ctx, double p, bool masked,
                    const_rows_ref<T> x, matrix<T>& y, std::vector<std::uint64_t>* kept,
                    Eigen::Index first = 0, Eigen::Index end = -1) {
  const dropout_mask mask(ctx, p);
  const Eigen::Index width = x.cols();
  const Eigen::Index words = dropout_mask::words_for(width);
  const auto scale = static_cast<T>(masked ? mask.kept_scale() : 1.0);
  const bool mask_kept = !Relu && kept != nullptr;
  const auto rows = [&](Eigen::Index b, Eigen::Index e) {
    // The mask of a row when it is not kept (all ones: relu alone).
    std::vector<std::uint64_t> row_bits(mask_kept ? 0 : static_cast<std::size_t>(words),
                                        ~std::uint64_t{0});
    for (Eigen::Index i = b; i < e; ++i) {
      std::uint64_t* bits = mask_kept ? kept->data() + i * words : row_bits.data();
      if (masked) mask.node_bits(graph.node_id(i), width, bits);
      apply_kept<Relu>(bits, x.row(i).data(), scale, y.row(i).data(), width, false);
      if (Relu && kept != nullptr) positive_bits(y.row(i).data(), width, kept->data() + i * words);
    }
  };
  if (end >= 0) return rows(first, end);  // one task's rows
  if (kept != nullptr) kept->resize(static_cast<std::size_t>(x.rows() * words));
  huge_page_resize(y, x.rows(), width);
  for_row_chunks(x.rows(), 8.0 * static_cast<double>(width), rows);
}

/// values[k] := x.values[k] * (kept ? mask.kept_scale() : 0) for the stored entries k of rows
/// [b, e) of x, each decided as mask.node_bits decides (graph.node_id(i), column): one draw per
/// 16-column group of a row that holds an entry, nearly one per entry on bag-of-words rows.
/// A row's draws are made in a loop of their own, where they overlap, and the mask is applied
/// without a branch: 1.6x faster than drawing as the entries need them (CiteSeer-sized rows).
template <class T, class Schedule>
void drop_sparse_entries(const dropout_mask& mask, Schedule& graph, const sparse_rows<T>& x,
                         T* values, Eigen::Index b, Eigen::Index e) {
  constexpr Eigen::Index per_draw = dropout_mask::columns_per_draw;
  const T factor[2] = {T(0), static_cast<T>(mask.kept_scale())};  // dropped, kept
  std::vector<Eigen::Index> groups;  // of the row's entries, in their order, a run once
  std::vector<counter_rng::bits_t> draws;
  for (Eigen::Index i = b; i < e; ++i) {
    const edge_t begin = x.offsets[i], end = x.offsets[i + 1];
    groups.clear();
    for (edge_t k = begin; k < end; ++k)
      if (const Eigen::Index g = x.columns[k] / per_draw; groups.empty() || groups.back() != g)
        groups.push_back(g);
    draws.resize(groups.size());
    const node_t id = graph.node_id(i);
    for (std::size_t j = 0; j < groups.size(); ++j) draws[j] = mask.draw(id, groups[j] * per_draw);
    std::size_t j = 0;
    for (edge_t k = begin; k < end; ++k) {
      if (x.columns[k] / per_draw != groups[j]) ++j;
      const bool kept = dropout_mask::lane(draws[j], x.columns[k] % per_draw) >= mask.threshold();
      values[k] = x.values[k] * factor[kept];  // no branch: kept is random
    }
  }
}

/// What dropout and relu_dropout share: the width, p, and the checks of both.
class dropout_parameters {
 public:
  Eigen::Index input_dim() const { return dim_; }
  Eigen::Index output_dim() const { return dim_; }
  double probability() const { return p_; }

 protected:
  /// Requires dim >= 0 and 0 <= p < 1; throws sar::invalid_argument naming `layer` otherwise.
  dropout_parameters(const char* layer, Eigen::Index dim, double p)
      : layer_(layer), dim_(dim), p_(p) {
    SAR_CHECK(dim >= 0, invalid_argument, "sar::", layer, ": width ", dim);
    SAR_CHECK(p >= 0 && p < 1, invalid_argument, "sar::", layer, ": p = ", p, " outside [0, 1)");
  }
  void check(Eigen::Index cols, const char* what) const {
    SAR_CHECK(cols == dim_, invalid_argument, "sar::", layer_, "::", what, " has ", cols,
              " columns, expected ", dim_);
  }

  const char* layer_;
  Eigen::Index dim_;
  double p_;
};

}  // namespace detail

/// Inverted dropout (see the top of this file). Forward keeps the mask as bits, so backward
/// draws no random numbers.
template <class T>
class dropout : public detail::dropout_parameters {
 public:
  /// Element type of the matrices.
  using scalar = T;
  /// forward and backward may run in place (sar/nn/layer.hpp).
  static constexpr bool in_place = true;
  /// Row i of y depends on row i of x alone (sar/nn/layer.hpp).
  static constexpr bool reads_neighbours = false;

  /// Requires dim >= 0 and 0 <= p < 1; throws sar::invalid_argument otherwise.
  dropout(Eigen::Index dim, double p) : dropout_parameters("dropout", dim, p) {}
  /// No parameters: declares nothing.
  void declare(parameter_store<T>&) {}
  /// Backward reads neither x nor y (it uses the kept mask).
  reads_in_backward backward_reads() const { return {.input = false, .output = false}; }

  /// y := x * mask / (1 - p) in training, y := x otherwise. Requires x.cols() == input_dim()
  /// and a schedule with node_id(row) (the dataset id that keys the mask); x and y may be the
  /// same matrix.
  template <class Schedule>
  void forward(Schedule& graph, const layer_context& ctx, const_rows_ref<T> x, matrix<T>& y) {
    check(x.cols(), "forward: x");
    mask_rows_ = -1;
    if (!ctx.training || p_ == 0) {
      if (x.data() != y.data()) y = x;
      return;
    }
    detail::masked_forward<false>(graph, ctx, p_, true, x, y, &kept_);
    mask_rows_ = x.rows();
    mask_epoch_ = ctx.epoch;
  }

  /// As forward, on sparse input features (sar/core/sparse_rows.hpp): y gets x's structure
  /// and x's values times the mask entries of their (node, column), as forward on the dense
  /// matrix draws them, so the dropped features are the same (a dropped entry is stored as 0).
  /// Keeps no mask: a model runs this layer only before its first layer with parameters,
  /// whose backward computes no input gradient (sar/nn/sequential.hpp).
  template <class Schedule>
  void forward(Schedule& graph, const layer_context& ctx, const sparse_rows<T>& x,
               sparse_rows<T>& y) const {
    check(x.cols(), "forward: x");
    y.num_rows = x.num_rows;
    y.num_cols = x.num_cols;
    y.offsets = x.offsets;
    y.columns = x.columns;
    y.values = x.values;
    if (!ctx.training || p_ == 0) return;
    const dropout_mask mask(ctx, p_);
    for_row_chunks(x.rows(), 64.0, [&](Eigen::Index b, Eigen::Index e) {
      detail::drop_sparse_entries(mask, graph, x, y.values.data(), b, e);
    });
  }

  /// As forward, on features stored as bf16 (sar/core/bf16.hpp): y reads x's rows with, in
  /// training, this layer's mask and factor, so a layer decoding y's rows reads what forward
  /// on the decoded matrix writes (the same entries dropped, the kept ones times the same
  /// factor). Keeps no mask of its own, as on sparse rows. Throws sar::invalid_argument if, in
  /// training, x already has a mask (a second dropout before the first layer).
  template <class Schedule>
  void forward(Schedule& graph, const layer_context& ctx, const bf16_input<T>& x,
               bf16_input<T>& y) const {
    check(x.cols(), "forward: x");
    y.values = x.values;
    if (!ctx.training || p_ == 0) {
      y.kept = x.kept;
      y.scale = x.scale;
      return;
    }
    SAR_CHECK(x.kept.empty(), invalid_argument, "sar::dropout::forward: features stored as "
              "bf16 take one dropout before the first layer with parameters, not two");
    const dropout_mask mask(ctx, p_);
    const Eigen::Index words = dropout_mask::words_for(dim_);
    huge_page_resize(y.kept, static_cast<std::size_t>(x.rows() * words));  // read at random
    for_row_chunks(x.rows(), 8.0 * static_cast<double>(dim_), [&](Eigen::Index b, Eigen::Index e) {
      for (Eigen::Index i = b; i < e; ++i)
        mask.node_bits(graph.node_id(i), dim_, y.kept.data() + i * words);
    });
    y.scale = static_cast<T>(mask.kept_scale());
  }

  /// dx += dy * mask / (1 - p) in training, dx += dy otherwise; when dx is dy, dx := those
  /// (nothing when dx is empty). Requires the training forward of the same ctx to be this
  /// layer's last forward; x and y are not read.
  template <class Schedule>
  void backward(Schedule&, const layer_context& ctx, const_rows_ref<T>, const_rows_ref<T>,
                const_rows_ref<T> dy, matrix<T>& dx) {
    check(dy.cols(), "backward: dy");
    if (dx.size() == 0) return;
    SAR_CHECK(dx.rows() == dy.rows() && dx.cols() == dim_, invalid_argument,
              "sar::dropout::backward: dx is ", dx.rows(), " x ", dx.cols(), ", dy ", dy.rows(),
              " x ", dy.cols());
    const bool assign = dx.data() == dy.data();
    if (!ctx.training || p_ == 0) {
      if (!assign) dx += dy;
      return;
    }
    SAR_CHECK(mask_rows_ == dy.rows() && mask_epoch_ == ctx.epoch, invalid_argument,
              "sar::dropout::backward: no matching training forward (epoch ", ctx.epoch, ")");
    const Eigen::Index words = dropout_mask::words_for(dim_);
    const auto scale = static_cast<T>(dropout_mask(ctx, p_).kept_scale());
    for_row_chunks(dy.rows(), 2.0 * static_cast<double>(dim_), [&](Eigen::Index b, Eigen::Index e) {
      for (Eigen::Index i = b; i < e; ++i)
        detail::apply_kept<false>(kept_.data() + i * words, dy.row(i).data(), scale,
                                  dx.row(i).data(), dim_, !assign);
    });
  }

 private:
  std::vector<std::uint64_t> kept_;  // the last training forward's mask, row-major bits
  Eigen::Index mask_rows_ = -1;      // rows of that forward (-1: none)
  std::uint64_t mask_epoch_ = 0;
};

/// relu then dropout, one pass each way: y := max(x, 0) * mask / (1 - p) in training,
/// max(x, 0) otherwise; the same y as relu<T> followed by dropout<T> (or dropout then relu: a
/// non-negative factor commutes with relu) with the same ctx, up to the sign of zeros. Keeps
/// the entries of y > 0 as bits (1/32 of y in float), so backward reads neither x nor y.
template <class T>
class relu_dropout : public detail::dropout_parameters {
 public:
  /// Element type of the matrices.
  using scalar = T;
  /// forward and backward may run in place (sar/nn/layer.hpp).
  static constexpr bool in_place = true;
  /// Row i of y depends on row i of x alone (sar/nn/layer.hpp).
  static constexpr bool reads_neighbours = false;

  /// Requires dim >= 0 and 0 <= p < 1; throws sar::invalid_argument otherwise.
  relu_dropout(Eigen::Index dim, double p) : dropout_parameters("relu_dropout", dim, p) {}
  /// Row i of y depends on row i of x alone: a model may run the layer inside the layer
  /// before it, on rows as they are finished (sar/nn/layer.hpp).
  static constexpr bool row_wise = true;
  /// No parameters: declares nothing.
  void declare(parameter_store<T>&) {}
  /// Backward reads neither x nor y (it uses the kept bits).
  reads_in_backward backward_reads() const { return {.input = false, .output = false}; }

  /// y := max(x, 0) * mask / (1 - p) in training, max(x, 0) otherwise, on ctx's rows
  /// (rows_of_call; a row range requires x and y to be the same matrix and follows the empty
  /// range [0, 0) of the same forward, which sizes the kept bits: sar/nn/layer.hpp). Requires
  /// x.cols() == input_dim() and a schedule with node_id(row) (the dataset id that keys the
  /// mask); x and y may be the same matrix.
  template <class Schedule>
  void forward(Schedule& graph, const layer_context& ctx, const_rows_ref<T> x, matrix<T>& y) {
    constexpr const char* where = "sar::relu_dropout::forward";
    check(x.cols(), "forward: x");
    const auto [first, end] = rows_of_call(ctx, x.rows(), where);
    const bool all_rows = ctx.end_row < 0;
    SAR_CHECK(all_rows || x.data() == y.data(), invalid_argument, where,
              ": a row range must be in place");
    if (all_rows || end == 0) {  // a new forward: size the bits
      positive_.resize(static_cast<std::size_t>(x.rows() * dropout_mask::words_for(dim_)));
      rows_ = x.rows();
      epoch_ = ctx.epoch;
      training_ = ctx.training;
    }
    SAR_CHECK(rows_ == x.rows(), invalid_argument, where, ": rows [", first, ", ", end, ") of ",
              x.rows(), " without the empty range that starts a forward of that many");
    detail::masked_forward<true>(graph, ctx, p_, ctx.training && p_ > 0, x, y, &positive_, first,
                                 all_rows ? -1 : end);
  }

  /// dx += dy * [y > 0] * s, or dx := that when dx is dy (nothing when dx is empty), with
  /// s = 1 / (1 - p) in training and 1 otherwise. Requires dy shaped like the y of this
  /// layer's last forward, which had the same ctx; neither x nor y is read.
  template <class Schedule>
  void backward(Schedule&, const layer_context& ctx, const_rows_ref<T>, const_rows_ref<T>,
                const_rows_ref<T> dy, matrix<T>& dx) {
    check(dy.cols(), "backward: dy");
    if (dx.size() == 0) return;
    SAR_CHECK(dy.rows() == rows_ && dx.rows() == rows_ && dx.cols() == dim_ &&
                  ctx.epoch == epoch_ && ctx.training == training_,
              invalid_argument, "sar::relu_dropout::backward: dy is ", dy.rows(), " x ",
              dy.cols(), ", dx ", dx.rows(), " x ", dx.cols(), " (epoch ", ctx.epoch,
              ") after a forward of ", rows_, " rows (epoch ", epoch_, ")");
    const bool assign = dx.data() == dy.data();
    const Eigen::Index words = dropout_mask::words_for(dim_);
    const auto scale =
        static_cast<T>(ctx.training && p_ > 0 ? dropout_mask(ctx, p_).kept_scale() : 1.0);
    for_row_chunks(dy.rows(), 2.0 * static_cast<double>(dim_), [&](Eigen::Index b, Eigen::Index e) {
      for (Eigen::Index i = b; i < e; ++i)
        detail::apply_kept<false>(positive_.data() + i * words, dy.row(i).data(), scale,
                                  dx.row(i).data(), dim_, !assign);
    });
  }

 private:
  std::vector<std::uint64_t> positive_;  // the last forward's entries of y > 0, row-major bits
  Eigen::Index rows_ = -1;                // rows of that forward (-1: none)
  std::uint64_t epoch_ = 0;
  bool training_ = false;
};

}  // namespace sar
