// The layer contract. A layer is a plain class with a hand-written forward and backward over
// row-major Eigen matrices (one row per local node), reaching neighbours only through an
// aggregation schedule (sar/schedule/schedule.hpp), so the same layer runs on one process and
// under every distributed schedule.
//
// For a layer L with scalar type T = L::scalar and a schedule S:
//   l.input_dim(), l.output_dim()      feature widths.
//   l.declare(store)                   registers its parameters in a parameter_store<T>
//                                      (once, before store.allocate()); afterwards the layer
//                                      reads them as views store.value(i) / store.grad(i).
//   l.forward(graph, ctx, x, y)        y := f(x). y is resized by the layer. x has
//                                      graph.num_sources() rows and input_dim() columns.
//                                      Inputs (x here, x, y and dy in backward) are taken as
//                                      const_rows_ref<T>: a view that binds without a copy to
//                                      a matrix<T>, a block of its rows or an Eigen::Map of a
//                                      caller's row-major memory (a model's first layer reads
//                                      the caller's features where they are). A layer that
//                                      takes const matrix<T>& instead still works, but copies.
//   l.backward(graph, ctx, x, y, dy, dx)
//                                      given the x and y of the matching forward (same ctx) and
//                                      dy = dLoss/dy: ADDS dLoss/dx into dx and ASSIGNS
//                                      dLoss/dparameters into the store's gradient views.
//                                      dx must be sized like x, or be EMPTY (0 x 0): then the
//                                      input gradient is not wanted (first layer) and the layer
//                                      skips computing it. A rank without local nodes passes
//                                      0 x input_dim() when it wants it, so that every rank
//                                      makes the same collective calls.
// "Added" makes skip connections and halo rows compose; "assigned" means no zeroing step.
// Optional, so that a model can release or reuse activation buffers (sar/nn/sequential.hpp):
//   l.backward_reads() -> sar::reads_in_backward  which of x and y backward reads (absent: both);
//                                      one it does not read may be passed EMPTY to backward.
//   L::in_place (static constexpr bool) forward accepts x and y being the same matrix, and
//                                      backward dy and dx being the same matrix, in which case
//                                      it ASSIGNS dLoss/dx to it (element-wise layers). "The
//                                      same" is x.data() == y.data() (x is a view).
//   L::assigns_input_gradient (static constexpr bool)
//                                      backward ASSIGNS dLoss/dx to a dx sized like x and does
//                                      not read what dx held, so a model passes it unzeroed
//                                      (one write of dx instead of a zeroing, a read and a
//                                      write; graph convolutions, whose scatter still adds the
//                                      remote rows' part after the local one is assigned).
//   L::output_over_input (static constexpr bool)
//                                      forward reads x (and sends its rows) only before it
//                                      writes y, within the call: a model may pass as y the
//                                      matrix x views, when no backward reads x and x has as
//                                      many entries as y (y's shape is set by the layer).
//   L::gradient_over_input (static constexpr bool)
//                                      with assigns_input_gradient: backward reads x only
//                                      before it writes dx, within the call: a model may pass
//                                      as dx the matrix x views, when no backward after it
//                                      reads that matrix.
// Optional, so that a model can fuse a row-wise layer into the forward of the layer before it
// (run on the rows while they are in the cache instead of in a pass of its own):
//   L::row_wise (static constexpr bool) an in_place layer whose output row i depends on input
//                                      row i alone, whose forward computes rows
//                                      [ctx.first_row, ctx.end_row) only when ctx.end_row >= 0
//                                      (in place; may be called concurrently on disjoint ranges).
//                                      A model calls it first with the empty range [0, 0), on
//                                      its own thread, before the ranges of the same forward:
//                                      there the layer sizes what it keeps for x.rows() rows.
//   L::finishes_rows (static constexpr bool)
//                                      when ctx.finish_rows is set, forward calls it on
//                                      disjoint row ranges covering y, each as soon as its rows
//                                      are final, possibly from several threads, and reads
//                                      nothing from them afterwards. A model sets it to run the
//                                      next (row_wise) layer there, when no backward reads the
//                                      rows before that layer changes them.
// Optional, for layered graphs (sampled minibatches, sar/schedule/schedule.hpp):
//   L::reads_neighbours (static constexpr bool, default true)
//                                      false for a layer whose output row i depends on no
//                                      other node's row (activations, dropout, linear, batch
//                                      norm): it runs on a level's rows, y with x's rows;
//                                      one that reads neighbours runs on the next block.
// Optional, for sparse input features (sar/core/sparse_rows.hpp; a dynamic_sequential detects
// them, sar/nn/any_layer.hpp):
//   l.forward(graph, ctx, const sparse_rows<T>& x, matrix<T>& y) and
//   l.backward(graph, ctx, const sparse_rows<T>& x, y, dy, dx)
//                                      a model's first layer with parameters reading the
//                                      features as sparse rows; dx is always empty (features
//                                      have no gradient).
//   l.forward(graph, ctx, const sparse_rows<T>& x, sparse_rows<T>& y)
//                                      a layer without parameters that may run before it on
//                                      the sparse rows (dropout); it has no backward there.
// Optional, for checkpoints (sar/train/checkpoint.hpp):
//   l.state() -> std::vector<std::span<double>>
//                                      what the layer learns besides its parameters and needs
//                                      after a restart (batch norm's running statistics);
//                                      same sizes on every call.
// What a layer keeps between forward and backward is stated in its header (e.g. GAT keeps
// the per-node softmax max and sum, never a per-edge matrix). Random numbers (dropout) come
// from counter_rng keyed by (ctx.seed, ctx.epoch, ctx.layer, global node id, column), so they
// do not depend on the partition, the rank count or the thread count.
// All calls that reach the schedule are collective over the schedule's ranks.
#pragma once

#include <concepts>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "sar/core/error.hpp"
#include "sar/core/types.hpp"
#include "sar/schedule/schedule.hpp"
#include "sar/kernels/dense.hpp"
#include "sar/nn/parameters.hpp"

namespace sar {

/// What a forward/backward pass needs to know besides its data.
struct layer_context {
  /// True in training; false in evaluation (dropout off, batch norm on its running statistics).
  bool training = true;
  /// Seed of the run; keys the layers' random numbers (with epoch and layer).
  std::uint64_t seed = 0;
  /// Epoch; keys the layers' random numbers (with seed and layer).
  std::uint64_t epoch = 0;
  std::uint64_t layer = 0;  ///< position in the model; keys the layer's random numbers
  /// Set by a model for its first layer that reads neighbours when no layer before it has
  /// parameters: that layer's x is the model's input (input_exchange).
  bool first_graph_layer = false;
  /// Set by a model for a layer with finishes_rows (see above); null: nothing to call.
  const row_finisher* finish_rows = nullptr;
  /// \var first_row
  /// Set by a model for a row_wise layer's forward: the rows to compute; end_row < 0: all.
  /// \var end_row
  /// End of that range (exclusive); < 0: all rows.
  Eigen::Index first_row = 0, end_row = -1;

  /// The key of this layer's exchange number `call` (0, 1, ... in the layer's own order),
  /// passed to every gather / scatter / gather_scatter. A backward that needs the halo of a
  /// forward gather again passes that gather's key (so a keep-for-backward cache finds it).
  exchange_key exchange(std::uint32_t call = 0) const {
    return {.layer = layer, .call = call, .seed = seed, .epoch = epoch, .training = training};
  }
  /// exchange(call) for an exchange whose rows are the layer's input x itself (and whose
  /// scatter returns dx): in the first graph layer that is the model's input, which an exchange
  /// policy may move exactly, once while unchanged (exchange_key::first_layer_input). Rows the
  /// layer computes take exchange(call), so the configured codecs are never bypassed unasked.
  exchange_key input_exchange(std::uint32_t call = 0) const {
    exchange_key key = exchange(call);
    key.first_layer_input = first_graph_layer;
    return key;
  }
};

/// The rows [first, end) a row_wise layer computes in a call with ctx on `rows` rows: ctx's
/// range (one task's work: the layer computes it on the calling thread), or all of them when
/// ctx.end_row < 0. Throws sar::invalid_argument naming `where` if the range is not inside
/// [0, rows).
inline std::pair<Eigen::Index, Eigen::Index> rows_of_call(const layer_context& ctx,
                                                          Eigen::Index rows, const char* where) {
  if (ctx.end_row < 0) return {0, rows};
  SAR_CHECK(0 <= ctx.first_row && ctx.first_row <= ctx.end_row && ctx.end_row <= rows,
            invalid_argument, where, ": rows [", ctx.first_row, ", ", ctx.end_row,
            ") of a matrix of ", rows);
  return {ctx.first_row, ctx.end_row};
}

/// For a layer with finishes_rows, on a path that finishes all rows at once: calls
/// ctx.finish_rows, if it is set, on the product chunks of [0, rows) in parallel (a row range
/// is one task's work).
inline void finish_all_rows(const layer_context& ctx, Eigen::Index rows) {
  if (ctx.finish_rows != nullptr) for_product_chunks(rows, *ctx.finish_rows);
}

/// Which of its forward's input x and output y a layer's backward reads.
struct reads_in_backward {
  /// Whether backward reads x.
  bool input = true;
  /// Whether backward reads y.
  bool output = true;
};

/// A layer type's optional flags (see the contract above): what L declares, and for what it
/// does not, the default of a layer without them.
struct layer_flags {
  bool assigns_input_gradient = false;  ///< L::assigns_input_gradient
  bool output_over_input = false;       ///< L::output_over_input
  bool gradient_over_input = false;     ///< L::gradient_over_input
  bool in_place = false;                ///< L::in_place
  bool row_wise = false;                ///< L::row_wise
  bool reads_neighbours = true;         ///< L::reads_neighbours
  bool finishes_rows = false;           ///< L::finishes_rows
};

/// The flags L declares, read once for every flag.
template <class L>
constexpr layer_flags flags_of() {
  layer_flags f;
#define SAR_READ_FLAG(flag)                                                   \
  if constexpr (requires { { L::flag } -> std::convertible_to<bool>; }) \
    f.flag = static_cast<bool>(L::flag);
  SAR_READ_FLAG(assigns_input_gradient)
  SAR_READ_FLAG(output_over_input)
  SAR_READ_FLAG(gradient_over_input)
  SAR_READ_FLAG(in_place)
  SAR_READ_FLAG(row_wise)
  SAR_READ_FLAG(reads_neighbours)
  SAR_READ_FLAG(finishes_rows)
#undef SAR_READ_FLAG
  return f;
}

/// Whether L declares L::assigns_input_gradient = true.
template <class L>
inline constexpr bool assigns_input_gradient_v = flags_of<L>().assigns_input_gradient;
/// Whether L declares L::output_over_input = true.
template <class L>
inline constexpr bool output_over_input_v = flags_of<L>().output_over_input;
/// Whether L declares L::gradient_over_input = true.
template <class L>
inline constexpr bool gradient_over_input_v = flags_of<L>().gradient_over_input;
/// Whether L declares L::in_place = true.
template <class L>
inline constexpr bool in_place_v = flags_of<L>().in_place;
/// Whether L declares L::row_wise = true.
template <class L>
inline constexpr bool row_wise_v = flags_of<L>().row_wise;
/// Whether L reads neighbours: unless it declares L::reads_neighbours = false.
template <class L>
inline constexpr bool reads_neighbours_v = flags_of<L>().reads_neighbours;
/// Whether L declares L::finishes_rows = true.
template <class L>
inline constexpr bool finishes_rows_v = flags_of<L>().finishes_rows;

/// l.state() if L has it (see the contract above), else nothing.
template <class L>
std::vector<std::span<double>> state_of(L& l) {
  if constexpr (requires { { l.state() } -> std::convertible_to<std::vector<std::span<double>>>; })
    return l.state();
  else
    return {};
}

namespace detail {
/// The backward of a layer on sparse input features computes no input gradient: throws
/// sar::invalid_argument naming `where` unless dx is empty.
inline void check_sparse_backward(const char* where, const auto& dx) {
  SAR_CHECK(dx.size() == 0, invalid_argument, where, ": input features given sparse or as bf16 "
            "have no input gradient, but dx is ", dx.rows(), " x ", dx.cols(),
            " (pass an empty dx)");
}
}  // namespace detail

template <class L, class Schedule>
concept layer = requires(L& l, const L& cl, Schedule& graph, const layer_context& ctx,
                         parameter_store<typename L::scalar>& store,
                         const_rows_ref<typename L::scalar> x, matrix<typename L::scalar>& y,
                         const_rows_ref<typename L::scalar> dy, matrix<typename L::scalar>& dx) {
  typename L::scalar;
  { cl.input_dim() } -> std::convertible_to<Eigen::Index>;
  { cl.output_dim() } -> std::convertible_to<Eigen::Index>;
  l.declare(store);
  l.forward(graph, ctx, x, y);
  l.backward(graph, ctx, x, const_rows_ref<typename L::scalar>(y), dy, dx);
};

}  // namespace sar
