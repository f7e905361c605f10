// Fused graph-attention (GAT) kernels over one graph_block, with the softmax computed online
// across blocks (docs/algorithms.md §4). They never hold a per-edge matrix: per-edge logits and
// coefficients are recomputed from per-node quantities wherever they are needed.
//
// Layout shared by every kernel (H heads of F features, HF = H * F):
//   halo   rows of [z_j | el_j], width HF + H: head h of z_j is columns [h F, (h+1) F),
//          el_j(h) = <a_l(h), z_j(h)> is column HF + h. Indexed by the block's columns.
//   er     n x H, er_i(h) = <a_r(h), z_i(h)>, local destination rows.
//   e_ij(h) = LeakyReLU(el_j(h) + er_i(h)); alpha_ij(h) = softmax over every in-neighbour j
//   of i (over ALL blocks); with attention dropout the coefficient used is
//   beta_ij(h) = alpha_ij(h) * d_ij(h), d in {0, 1/(1-rate)}, while the softmax normaliser
//   still runs over all in-edges. out_i(h) = sum_j beta_ij(h) z_j(h).
// With edge features (PyG's GATConv edge_dim) the logit gains an edge term,
//   e_ij(h) = LeakyReLU(el_j(h) + er_i(h) + ee_ij(h)),  ee_ij(h) = <f_ij, V(:, h)>,
// f_ij the edge's row of the block's edge table and V (edge_dim x H) a parameter; it is
// recomputed from f_ij wherever a logit is (gat_edge_term).
// The forward kernel parallelises over destination rows, the backward one over source rows
// (for the halo's gradient, through block.transposed); d er is per node, from sums the
// forward keeps. No atomics anywhere, so results do not depend on the thread count.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <type_traits>
#include <vector>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include "sar/core/error.hpp"
#include "sar/core/memory.hpp"
#include "sar/core/rng.hpp"
#include "sar/core/types.hpp"
#include "sar/graph/block.hpp"
#include "sar/kernels/dense.hpp"
#include "sar/kernels/prefetch.hpp"
#include "sar/kernels/spmm.hpp"

namespace sar {

/// H heads of F features each.
struct gat_dims {
  /// Number of heads H.
  Eigen::Index heads = 1;
  /// Features per head F.
  Eigen::Index features = 1;
  Eigen::Index width() const { return heads * features; }  ///< HF: columns of z
  Eigen::Index halo_width() const { return heads * features + heads; }  ///< [z | el]
};

/// Attention-dropout scales d_ij(h), a pure function of (seed, epoch, layer, global
/// destination id, global source id, head): the same on every rank, thread and partition.
/// Inactive (every scale 1) when default-constructed or when rate == 0.
template <class T>
class gat_attention_dropout {
 public:
  /// Sub-stream of rng_stream::dropout reserved for attention coefficients.
  static constexpr std::uint64_t sub_stream = 0x47415441;  // "GATA"

  gat_attention_dropout() = default;
  /// Requires 0 <= rate < 1 (throws sar::invalid_argument otherwise).
  gat_attention_dropout(double rate, std::uint64_t seed, std::uint64_t epoch, std::uint64_t layer)
      : rng_(seed, rng_stream::dropout, sub_stream), rate_(rate), epoch_(epoch),
        layer_key_(layer << 16), keep_scale_(static_cast<T>(1.0 / (1.0 - rate))) {
    SAR_CHECK(rate >= 0 && rate < 1, invalid_argument,
              "sar::gat_attention_dropout: rate = ", rate, " outside [0, 1)");
  }

  /// Whether any coefficient is dropped (rate > 0).
  bool active() const { return rate_ > 0; }
  /// The drop rate.
  double rate() const { return rate_; }

  /// Writes the scales of heads [0, heads) of edge source -> destination into out[0..heads).
  /// One Philox call serves four heads. Requires heads <= 2^18.
  void scales(node_t destination, node_t source, Eigen::Index heads, T* out) const {
    if (!active()) {
      for (Eigen::Index h = 0; h < heads; ++h) out[h] = T(1);
      return;
    }
    for (Eigen::Index h0 = 0; h0 < heads; h0 += 4) {
      const auto words = rng_.bits(epoch_, layer_key_ | static_cast<std::uint64_t>(h0 / 4),
                                   static_cast<std::uint64_t>(destination),
                                   static_cast<std::uint64_t>(source));
      for (Eigen::Index k = 0; k < 4 && h0 + k < heads; ++k)
        out[h0 + k] = counter_rng::to_unit(words[k]) < rate_ ? T(0) : keep_scale_;
    }
  }

 private:
  counter_rng rng_{0, rng_stream::dropout, sub_stream};
  double rate_ = 0;
  std::uint64_t epoch_ = 0;
  std::uint64_t layer_key_ = 0;
  T keep_scale_ = T(1);
};

namespace detail {
/// Prefetches, for the edge edge_row_prefetcher::distance edges ahead in a CSR, the id of its
/// column: ids[columns[e + distance]] (a block's source or destination ids, read at random
/// rows; a distributed block has them, a whole graph's are its row numbers). Nothing when
/// ids is empty.
class edge_id_prefetcher {
 public:
  /// Requires columns[e] < ids.size() for every e < end (when ids is not empty).
  edge_id_prefetcher(std::span<const node_t> ids, const node_t* columns, edge_t end)
      : ids_(ids.empty() ? nullptr : ids.data()), columns_(columns), end_(end) {}
  [[gnu::always_inline]] void operator()(edge_t e) const {
    constexpr edge_t distance = edge_row_prefetcher<float>::distance;
    if (ids_ != nullptr && e + distance < end_) prefetch_line(ids_ + columns_[e + distance]);
  }

 private:
  const node_t* ids_;
  const node_t* columns_;
  edge_t end_;
};

template <class T>
inline T leaky_relu(T v, T slope) {
  return v > T(0) ? v : slope * v;
}
template <class T>
inline T leaky_relu_derivative(T v, T slope) {
  return v > T(0) ? T(1) : slope;
}
template <class T>
using array_map = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;
template <class T>
using const_array_map = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;

/// a[f] += x v[f] and b[f] += y v[f] for f < F, in one pass over v (vectorised by the
/// compiler). Requires a, b and v not to overlap.
template <class T>
inline void add_scaled_twice(T* __restrict a, T x, T* __restrict b, T y, const T* __restrict v,
                             Eigen::Index F) {
  for (Eigen::Index f = 0; f < F; ++f) {
    a[f] += x * v[f];
    b[f] += y * v[f];
  }
}

/// A per-thread buffer of per-edge values, sized in whole SIMD packets for exp_in_place.
template <class T>
class edge_values {
  using packet = typename Eigen::internal::packet_traits<T>::type;
  static constexpr std::size_t lanes = Eigen::internal::unpacket_traits<packet>::size;

 public:
  /// Ensures room for `count` values (rounded up to whole packets, the padding zeroed);
  /// returns the first.
  T* resize(std::size_t count) {
    const std::size_t padded = (count + lanes - 1) / lanes * lanes;
    values_.resize(padded);
    std::fill(values_.begin() + static_cast<std::ptrdiff_t>(count), values_.end(), T(0));
    count_ = count;
    return values_.data();
  }
  /// values[k] := exp(values[k]) for every k < count, with Eigen's vectorised exp applied to
  /// whole packets, so that a result depends on its argument only, not on its position.
  void exp_in_place() {
    using namespace Eigen::internal;
    for (std::size_t k = 0; k < count_; k += lanes)
      pstoreu(values_.data() + k, pexp(ploadu<packet>(values_.data() + k)));
  }
  T operator[](std::size_t k) const { return values_[k]; }

 private:
  std::vector<T> values_;
  std::size_t count_ = 0;
};

/// Throws sar::invalid_argument unless block's rows fit n local rows (row convention of
/// graph_block: uncompressed blocks have exactly n rows).
inline void check_gat_block_rows(const char* where, const graph_block& block, Eigen::Index n) {
  const csr& edges = *block.edges;
  if (block.rows.empty())
    SAR_CHECK(edges.num_rows == n, invalid_argument, where, ": block has ", edges.num_rows,
              " rows, expected ", n, " local rows");
  else
    SAR_CHECK(static_cast<node_t>(block.rows.size()) == edges.num_rows &&
                  block.rows.front() >= 0 && block.rows.back() < n,
              invalid_argument, where, ": compressed block of ", edges.num_rows, " rows maps ",
              block.rows.size(), " rows up to local row ", block.rows.back(), " of ", n);
}
}  // namespace detail

/// The edge term of the attention logits: ee_ij(h) = <f_ij, V(:, h)> for the edge-table row
/// f_ij of an edge (graph_block::edge_features). Inactive (no term) when default-constructed.
template <class T>
struct gat_edge_term {
  const T* weights = nullptr;  ///< V, edge_dim x H, row-major
  Eigen::Index dim = 0;        ///< edge_dim

  /// Whether the logits have an edge term.
  bool active() const { return weights != nullptr; }
  /// Throws sar::invalid_argument naming `where` if active and block's edge table is missing
  /// or not `dim` wide.
  void check(const char* where, const graph_block& block) const {
    if (!active()) return;
    SAR_CHECK(block.edge_features != nullptr && block.edge_features->cols() == dim,
              invalid_argument, where, ": attention reads ", dim, " features per edge, but the "
              "graph has ", block.edge_features != nullptr ? block.edge_features->cols() : 0,
              " (a schedule built with its graph's edge features, full batch)");
  }
  /// out[h] := ee(h) of entry `entry` of block.edges, every head h < H. Requires active() and
  /// check(block) passed.
  void terms(const graph_block& block, edge_t entry, Eigen::Index H, T* out) const {
    for (Eigen::Index h = 0; h < H; ++h) out[h] = T(0);
    const float* f = block.edge_features->row(block.edge_row(entry)).data();
    for (Eigen::Index d = 0; d < dim; ++d) {
      const T fd = static_cast<T>(f[d]);
      const T* v = weights + d * H;
      for (Eigen::Index h = 0; h < H; ++h) out[h] += fd * v[h];
    }
  }
};

/// The online-softmax state of n destination rows, indexed by local row. Besides the running
/// max m, sum and acc of the softmax it keeps the same sums weighted by the LeakyReLU slope
/// l_ij(h) = LeakyReLU'(el_j(h) + er_i(h)), from which the backward gets d er_i without a
/// pass over the edges (see gat_backward_er):
///   slope_sum_i(h) = sum_j exp(e_ij - m_i) l_ij
///   slope_acc_i(h) = sum_j exp(e_ij - m_i) l_ij d_ij z_j(h)
template <class T>
struct gat_softmax_state {
  /// \var max
  /// Running max m_i(h) of the logits seen so far (n x H); after gat_softmax_finish, the
  /// log-normaliser m + log sum.
  /// \var sum
  /// sum_j exp(e_ij - m_i) over the edges seen so far (n x H).
  matrix<T> max, sum, slope_sum;  ///< n x H
  /// \var acc
  /// sum_j exp(e_ij - m_i) d_ij z_j(h) (n x HF); after gat_softmax_finish, divided by sum.
  matrix<T> acc, slope_acc;       ///< n x HF

  /// Ensures the state of n rows that have seen no edge: max = -inf, sums 0. Filled in
  /// parallel over rows (fresh buffers are also first touched by several threads).
  void reset(node_t n, gat_dims dims) {
    const Eigen::Index H = dims.heads, HF = dims.width();
    max.resize(n, H);
    sum.resize(n, H);
    slope_sum.resize(n, H);
    huge_page_resize(acc, n, HF);
    huge_page_resize(slope_acc, n, HF);
    for_row_chunks(n, 2.0 * static_cast<double>(HF + H), [&](Eigen::Index b, Eigen::Index e) {
      max.middleRows(b, e - b).setConstant(-std::numeric_limits<T>::infinity());
      sum.middleRows(b, e - b).setZero();
      slope_sum.middleRows(b, e - b).setZero();
      acc.middleRows(b, e - b).setZero();
      slope_acc.middleRows(b, e - b).setZero();
    });
  }
};

/// Folds one block's in-edges into the running state of every destination row:
///   m' = max(m, max_j e_ij); c = exp(m - m'); sum = c sum + sum_j exp(e_ij - m');
///   acc = c acc + sum_j exp(e_ij - m') d_ij z_j; m = m'; likewise slope_sum, slope_acc.
/// Requires halo.rows() == block.edges->num_cols, halo.cols() == dims.halo_width(), er (n x H)
/// and the state of n rows (after state.reset(n, dims)), n = the number of local rows (equal
/// to block.edges->num_rows for an uncompressed block; compressed rows inside [0, n)).
/// Parallel over destination rows, no atomics. Rows without edges in this block are left
/// untouched. Throws sar::invalid_argument on a shape mismatch. Not collective.
/// With an active edge term the logits include it (the block must carry its edge table).
template <class T>
void gat_forward_block(const graph_block& block, const_rows_ref<T> halo, const_rows_ref<T> er,
                       gat_dims dims, T slope, const gat_attention_dropout<T>& dropout,
                       gat_softmax_state<T>& state, const gat_edge_term<T>& edge_term = {}) {
  const csr& edges = *block.edges;
  const Eigen::Index H = dims.heads, F = dims.features, HF = dims.width();
  SAR_CHECK(halo.rows() == edges.num_cols && halo.cols() == dims.halo_width(), invalid_argument,
            "sar::gat_forward_block: halo is ", halo.rows(), " x ", halo.cols(), ", expected ",
            edges.num_cols, " x ", dims.halo_width());
  const Eigen::Index n = er.rows();
  detail::check_gat_block_rows("sar::gat_forward_block", block, n);
  edge_term.check("sar::gat_forward_block", block);
  auto &max = state.max, &sum = state.sum, &slope_sum = state.slope_sum;
  auto &acc = state.acc, &slope_acc = state.slope_acc;
  SAR_CHECK(er.cols() == H && max.rows() == n && max.cols() == H && sum.rows() == n &&
                sum.cols() == H && slope_sum.rows() == n && slope_sum.cols() == H &&
                acc.rows() == n && acc.cols() == HF && slope_acc.rows() == n &&
                slope_acc.cols() == HF,
            invalid_argument, "sar::gat_forward_block: er or the softmax state mis-shaped for ",
            n, " rows and ", H, " heads");
  tbb::parallel_for(tbb::blocked_range<node_t>(0, edges.num_rows), [&](const auto& range) {
    detail::edge_values<T> p;  // logits, then exp(e - m'), of one row's edges: degree x H
    std::vector<T> block_max(H), scale(H);
    std::vector<T> pre;  // el_j + er_i + ee_ij of one row's edges (degree x H), for the slopes
    const detail::edge_row_prefetcher<T> prefetch(halo, edges.columns.data(),
                                                  edges.offsets[range.end()]);
    // The halo rows' ids key the attention dropout: read at random rows too.
    const detail::edge_id_prefetcher prefetch_id(block.source_ids, edges.columns.data(),
                                                 edges.offsets[range.end()]);
    for (node_t k = range.begin(); k != range.end(); ++k) {
      const auto sources = edges.row(k);
      const node_t i = block.local_row(k);
      if (sources.empty()) continue;
      const std::size_t degree = sources.size();
      T* logits = p.resize(degree * H);
      // 1. Logits of this block's in-edges and their maximum per head; the halo rows of the
      // edges ahead are prefetched (for this step and step 3).
      std::fill(block_max.begin(), block_max.end(), -std::numeric_limits<T>::infinity());
      pre.resize(degree * static_cast<std::size_t>(H));
      for (std::size_t e = 0; e < degree; ++e) {
        const edge_t entry = edges.offsets[k] + static_cast<edge_t>(e);
        prefetch(entry);
        prefetch_id(entry);
        const T* el = halo.row(sources[e]).data() + HF;
        T* pre_e = pre.data() + e * H;
        // Without an edge term pre_e starts at +0 (so it is never -0, as before).
        if (edge_term.active()) edge_term.terms(block, entry, H, pre_e);
        else std::fill(pre_e, pre_e + H, T(0));
        for (Eigen::Index h = 0; h < H; ++h) {
          pre_e[h] += el[h] + er(i, h);
          const T logit = detail::leaky_relu(pre_e[h], slope);
          logits[e * H + h] = logit;
          block_max[h] = std::max(block_max[h], logit);
        }
      }
      // 2. Rescale the running state to the new maximum.
      T* acc_row = acc.row(i).data();
      T* slope_acc_row = slope_acc.row(i).data();
      for (Eigen::Index h = 0; h < H; ++h) {
        const T old_max = max(i, h), new_max = std::max(old_max, block_max[h]);
        const T c = old_max == -std::numeric_limits<T>::infinity() ? T(0)
                                                                    : std::exp(old_max - new_max);
        if (c != T(1)) {
          sum(i, h) *= c;
          slope_sum(i, h) *= c;
          detail::array_map<T>(acc_row + h * F, F) *= c;
          detail::array_map<T>(slope_acc_row + h * F, F) *= c;
        }
        max(i, h) = new_max;
      }
      for (std::size_t e = 0; e < degree; ++e)
        for (Eigen::Index h = 0; h < H; ++h) logits[e * H + h] -= max(i, h);
      p.exp_in_place();
      // 3. Accumulate p = exp(e - m) into sum, p d z_j into acc (vectorised over F), and the
      // same times the slope l into slope_sum and slope_acc.
      const node_t destination = block.destination_id(i);
      for (std::size_t e = 0; e < degree; ++e) {
        const node_t j = sources[e];
        dropout.scales(destination, block.source_id(j), H, scale.data());
        const T* z = halo.row(j).data();
        for (Eigen::Index h = 0; h < H; ++h) {
          const T p_e = p[e * H + h];
          const T p_slope = p_e * detail::leaky_relu_derivative(pre[e * H + h], slope);
          sum(i, h) += p_e;
          slope_sum(i, h) += p_slope;
          if (scale[h] != T(0))
            detail::add_scaled_twice(acc_row + h * F, p_e * scale[h], slope_acc_row + h * F,
                                     p_slope * scale[h], z + h * F, F);
        }
      }
    }
  });
}

/// Ends the online softmax: acc, slope_sum and slope_acc (head h of row i) /= sum(i, h), and
/// max(i, h) := the log-normaliser max(i, h) + log(sum(i, h)), so that alpha_ij(h) =
/// exp(e_ij(h) - max(i, h)) afterwards. Rows with sum 0 (no in-edge in any block: isolated
/// nodes) get acc = slope_acc = 0, slope_sum = 0 and log-normaliser 0. Requires a state that
/// gat_forward_block has filled. Parallel over rows. Not collective.
template <class T>
void gat_softmax_finish(gat_dims dims, gat_softmax_state<T>& state) {
  const Eigen::Index H = dims.heads, F = dims.features;
  tbb::parallel_for(tbb::blocked_range<Eigen::Index>(0, state.acc.rows()), [&](const auto& range) {
    for (Eigen::Index i = range.begin(); i != range.end(); ++i)
      for (Eigen::Index h = 0; h < H; ++h) {
        const T s = state.sum(i, h);
        auto acc = state.acc.row(i).segment(h * F, F);
        auto slope_acc = state.slope_acc.row(i).segment(h * F, F);
        if (s > T(0)) {
          acc /= s;
          slope_acc /= s;
          state.slope_sum(i, h) /= s;
          state.max(i, h) += std::log(s);
        } else {
          acc.setZero();
          slope_acc.setZero();
          state.slope_sum(i, h) = T(0);
          state.max(i, h) = T(0);
        }
      }
  });
}

/// What the backward kernels read for the local destination rows (all n rows, local ids).
/// The per-node scalars are packed in one row so that the per-source pass, which visits
/// destinations in random order, touches one cache line per edge for them.
template <class T>
struct gat_backward_rows {
  /// n x 3H: [er_i | log-normaliser m_i + log s_i of the forward | <dout_i(h), out_i(h)>],
  /// out WITH attention dropout (the out the forward produced).
  const_rows_ref<T> node_terms;
  const_rows_ref<T> dout;  ///< n x HF, dLoss/dout per head
};

namespace detail {
/// Edge (i, j), head h, with alpha = alpha_ij(h), scale = d_ij(h) and the edge term ee =
/// ee_ij(h): returns beta_ij(h) and de_ij(h) LeakyReLU'(el_j(h) + er_i(h) + ee), where de =
/// beta <dout_i, z_j> - alpha <dout_i, out_i> (see gat_backward_block). z_j is the halo row of
/// j.
template <class T>
struct gat_edge_grad {
  T beta;
  T dlogit;  ///< gradient of el_j + er_i
};
template <class T>
inline gat_edge_grad<T> gat_edge_backward(const gat_backward_rows<T>& rows, node_t i,
                                          Eigen::Index h, Eigen::Index F, const T* z_j,
                                          T alpha, T scale, T slope, T ee) {
  const T* terms = rows.node_terms.row(i).data();
  const Eigen::Index H = rows.node_terms.cols() / 3;
  const T beta = alpha * scale;
  T de = -alpha * terms[2 * H + h];
  if (beta != T(0))
    de += beta * (const_array_map<T>(rows.dout.row(i).data() + h * F, F) *
                  const_array_map<T>(z_j + h * F, F))
                     .sum();
  const T pre = z_j[H * F + h] + terms[h];
  return {beta, de * leaky_relu_derivative(ee == T(0) ? pre : pre + ee, slope)};
}
}  // namespace detail

/// Backward of one block, after the forward has finished over ALL blocks. With
/// alpha_ij = exp(e_ij - m_i - log s_i) (recomputed), beta_ij = alpha_ij d_ij and out_i =
/// sum_j beta_ij z_j (so sum_k alpha_ik d_ik <dout_i, z_k> = <dout_i, out_i>):
///   dz_j   += beta_ij dout_i
///   de_ij   = alpha_ij (d_ij <dout_i, z_j> - <dout_i, out_i>)
///   d el_j += de_ij LeakyReLU'(el_j + er_i)
/// (d er_i, the same sum over j instead, comes from gat_backward_er.) ADDS dz_j and d el_j
/// into dhalo (same layout as halo). With an active edge term the logits include it, and
/// dedge (one row of H per row of the block's edge table, row-major) gets each edge's
/// de_ij LeakyReLU'(.) at its table row (ASSIGNED: every edge of a block has its own row). Requires block.transposed (the transpose of
/// block.edges, entries = local rows), halo and dhalo of block.edges->num_cols rows and
/// dims.halo_width() columns, node_terms and dout indexed by LOCAL row (n rows, the block's
/// rows inside [0, n)). Parallel over source rows through block.transposed; no atomics.
/// Throws sar::invalid_argument on a shape mismatch. Not collective.
template <class T>
void gat_backward_block(const graph_block& block, const_rows_ref<T> halo, rows_ref<T> dhalo,
                        const gat_backward_rows<T>& rows, gat_dims dims, T slope,
                        const gat_attention_dropout<T>& dropout,
                        const gat_edge_term<T>& edge_term = {}, T* dedge = nullptr) {
  const csr& edges = *block.edges;
  const Eigen::Index H = dims.heads, F = dims.features, HF = dims.width();
  SAR_CHECK(block.transposed != nullptr && block.transposed->num_rows == edges.num_cols,
            invalid_argument, "sar::gat_backward_block: block has no matching transposed CSR");
  SAR_CHECK(halo.rows() == edges.num_cols && halo.cols() == dims.halo_width() &&
                dhalo.rows() == halo.rows() && dhalo.cols() == halo.cols(),
            invalid_argument, "sar::gat_backward_block: halo ", halo.rows(), " x ", halo.cols(),
            ", dhalo ", dhalo.rows(), " x ", dhalo.cols(), ", expected ", edges.num_cols, " x ",
            dims.halo_width());
  const Eigen::Index n = rows.node_terms.rows();
  detail::check_gat_block_rows("sar::gat_backward_block", block, n);
  edge_term.check("sar::gat_backward_block", block);
  SAR_CHECK(!edge_term.active() || block.edge_features->rows() == 0 || dedge != nullptr,
            invalid_argument, "sar::gat_backward_block: an edge term without its gradient "
            "buffer");
  SAR_CHECK(rows.node_terms.cols() == 3 * H && rows.dout.cols() == HF && rows.dout.rows() == n &&
                block.transposed->num_cols == n,
            invalid_argument, "sar::gat_backward_block: node_terms, dout or the transposed "
            "block mis-shaped for ", n, " local rows");
  const csr& by_source = *block.transposed;

  // Per source (halo) row j: dz_j and d el_j. The rows of the destinations ahead are
  // prefetched (node_terms and dout are read at random rows).
  // Compiled twice: without an edge term the loops are those of plain GAT.
  const auto per_source = [&]<bool EdgeTerm>(std::bool_constant<EdgeTerm>) {
    tbb::parallel_for(tbb::blocked_range<node_t>(0, by_source.num_rows), [&](const auto& range) {
      detail::edge_values<T> alpha;
      std::vector<T> scale(H), ee;  // ee: the edge terms of one source's edges (count x H)
      const edge_t end = by_source.offsets[range.end()];
      const detail::edge_row_prefetcher<T> prefetch_terms(rows.node_terms,
                                                          by_source.columns.data(), end);
      const detail::edge_row_prefetcher<T> prefetch_dout(rows.dout, by_source.columns.data(),
                                                         end);
      const detail::edge_id_prefetcher prefetch_id(block.destination_ids,
                                                   by_source.columns.data(), end);
      for (node_t j = range.begin(); j != range.end(); ++j) {
        const auto destinations = by_source.row(j);
        if (destinations.empty()) continue;
        const T* z = halo.row(j).data();
        const edge_t first = by_source.offsets[j];
        // alpha_ij(h) = exp(LeakyReLU(el_j(h) + er_i(h) [+ ee_ij(h)]) - log-normaliser_i(h)).
        T* logits = alpha.resize(destinations.size() * static_cast<std::size_t>(H));
        if constexpr (EdgeTerm) ee.resize(destinations.size() * static_cast<std::size_t>(H));
        for (std::size_t e = 0; e < destinations.size(); ++e) {
          const edge_t edge = first + static_cast<edge_t>(e);
          prefetch_terms(edge);
          prefetch_dout(edge);
          prefetch_id(edge);
          const T* terms = rows.node_terms.row(destinations[e]).data();  // [er | log-norm. | ..]
          [[maybe_unused]] T* ee_e = nullptr;
          if constexpr (EdgeTerm) {
            ee_e = ee.data() + e * H;
            edge_term.terms(block, block.transposed_edges[edge], H, ee_e);
          }
          for (Eigen::Index h = 0; h < H; ++h) {
            T pre = z[HF + h] + terms[h];
            if constexpr (EdgeTerm) pre += ee_e[h];
            logits[e * H + h] = detail::leaky_relu(pre, slope) - terms[H + h];
          }
        }
        alpha.exp_in_place();
        T* dz = dhalo.row(j).data();
        const node_t source = block.source_id(j);
        for (std::size_t e = 0; e < destinations.size(); ++e) {
          const node_t i = destinations[e];
          dropout.scales(block.destination_id(i), source, H, scale.data());
          T* dedge_e = nullptr;
          if constexpr (EdgeTerm)
            dedge_e = dedge + block.edge_row(
                                  block.transposed_edges[first + static_cast<edge_t>(e)]) * H;
          for (Eigen::Index h = 0; h < H; ++h) {
            T ee_h = T(0);
            if constexpr (EdgeTerm) ee_h = ee[e * H + h];
            const auto g = detail::gat_edge_backward(rows, i, h, F, z, alpha[e * H + h], scale[h],
                                                     slope, ee_h);
            if (g.beta != T(0))
              detail::array_map<T>(dz + h * F, F) +=
                  g.beta * detail::const_array_map<T>(rows.dout.row(i).data() + h * F, F);
            dz[HF + h] += g.dlogit;
            if constexpr (EdgeTerm) dedge_e[h] = g.dlogit;
          }
        }
      }
    });
  };
  if (edge_term.active()) per_source(std::true_type{});
  else per_source(std::false_type{});
}

/// d er_i(h) := sum_j de_ij(h) LeakyReLU'(el_j(h) + er_i(h)) over ALL in-edges of i, which
/// with the forward's slope sums (after gat_softmax_finish) is
///   <dout_i(h), slope_acc_i(h)> - <dout_i(h), out_i(h)> slope_sum_i(h).
/// Requires slope_sum and der n x H, slope_acc n x HF, rows as for gat_backward_block (all
/// indexed by local row); resizes der. Parallel over rows (each row's result is independent
/// of the split). Not collective.
template <class T>
void gat_backward_er(gat_dims dims, const gat_backward_rows<T>& rows,
                     const_rows_ref<T> slope_sum, const_rows_ref<T> slope_acc, matrix<T>& der) {
  const Eigen::Index H = dims.heads, F = dims.features, n = rows.node_terms.rows();
  SAR_CHECK(rows.node_terms.cols() == 3 * H && rows.dout.rows() == n &&
                rows.dout.cols() == dims.width() && slope_sum.rows() == n &&
                slope_sum.cols() == H && slope_acc.rows() == n && slope_acc.cols() == dims.width(),
            invalid_argument, "sar::gat_backward_er: node_terms, dout, slope_sum or slope_acc "
            "mis-shaped for ", n, " rows and ", H, " heads");
  der.resize(n, H);
  for_row_chunks(n, 2.0 * static_cast<double>(dims.width()), [&](Eigen::Index b, Eigen::Index e) {
    for (Eigen::Index i = b; i != e; ++i) {
      const T* dout = rows.dout.row(i).data();
      const T* acc = slope_acc.row(i).data();
      for (Eigen::Index h = 0; h < H; ++h)
        der(i, h) = (detail::const_array_map<T>(dout + h * F, F) *
                     detail::const_array_map<T>(acc + h * F, F))
                        .sum() -
                    rows.node_terms(i, 2 * H + h) * slope_sum(i, h);
    }
  });
}

}  // namespace sar
