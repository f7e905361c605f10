// The seam between layers and communication. A layer states its per-edge maths as a visitor
// over graph blocks (sar/graph/block.hpp); an aggregation schedule decides how each block's
// source rows (the "halo") reach it: all local (local_schedule, one process), or one remote
// rank at a time over MPI (distributed_schedule, sar/distributed/: the sequential SAR ring,
// keep-for-backward, all-at-once; docs/exchange-engine.md).
//
// Every schedule offers the same three collective calls, each naming its exchange with an
// exchange_key (below) that the layer takes from its context (layer_context::exchange):
//   gather(key, x, visit):             visit(block, halo) for every block; halo = the rows of x
//                                      (the layer's per-node input, num_sources() rows) that
//                                      the block's columns index. Forward aggregation.
//   scatter(key, dx, visit):           visit(block, dhalo) for every block; the visitor ADDS
//                                      the gradient of the block's source rows into dhalo; the
//                                      schedule delivers it to the owners and ADDS it into dx.
//                                      Backward of aggregations that need no source features.
//   gather_scatter(key, x, dx, visit): visit(block, halo, dhalo): both at once, the halo
//                                      fetched again (rematerialised) unless the schedule kept
//                                      it from the gather of the same key. Backward of GAT, max.
// Visitors run one block at a time (blocks may be freed after the visit) and must not keep
// references to a halo. Within a call, block order is the schedule's; results must not
// depend on it beyond floating-point summation order. A schedule may skip blocks without
// edges. Blocks may have compressed rows (graph_block): per-destination state is indexed by
// destination row, edges row k belongs to destination row block.local_row(k); the block-aware
// kernels (spmm_add(block, ...), the GAT kernels) do this mapping.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>

#include "sar/core/types.hpp"
#include "sar/graph/block.hpp"

namespace sar {

/// Names one exchange of a forward or backward pass. A schedule's halo cache keys what it
/// keeps by (layer, call): a layer's backward passes the key of the forward gather whose
/// halo it needs again, so keep-for-backward can hand it back without a fetch, and a stale
/// cache can find the previous epoch's rows of the same exchange. Wire codecs that round at
/// random key their random numbers by (seed, epoch, layer), so a run is reproducible.
struct exchange_key {
  std::uint64_t layer = 0;  ///< the layer's position in its model
  std::uint32_t call = 0;   ///< which of the layer's exchanges (0, 1, ... in its own order)
  /// Seed of the run; keys random numbers (with epoch and layer).
  std::uint64_t seed = 0;
  /// Epoch; keys random numbers (with seed and layer).
  std::uint64_t epoch = 0;
  bool training = true;     ///< false in evaluation passes
  /// The rows exchanged are the model's input as its first graph layer reads it (x itself,
  /// behind parameter-free layers only; layer_context::input_exchange): an exchange policy may
  /// treat them apart (exchange_policy.hpp). Never set for rows a layer computes (x W,
  /// attention terms, messages): those travel under the configured codecs.
  bool first_layer_input = false;

  /// Whether two keys name the same exchange (seed, epoch, mode and role aside).
  bool same_exchange(const exchange_key& o) const { return layer == o.layer && call == o.call; }
};

namespace detail {
// Visitors that accept any halo, to state the schedule concept.
struct gather_probe {
  void operator()(const graph_block&, const auto&) const {}
};
struct gather_scatter_probe {
  void operator()(const graph_block&, const auto&, auto&) const {}
};
}  // namespace detail

/// What a layer may ask of its graph:
///   num_destinations(), num_sources()   rows of a layer's output y and input x (equal in
///                                       full-batch schedules; see graph_block)
///   node_id(row)                        the dataset id of source row `row` (= destination
///                                       row `row` when row < num_destinations()): keys
///                                       random numbers
///   in_degrees()                        global in-degree of every destination
///   out_degrees()                       global out-degree of every source
///   all_reduce_sum(span<T>)             sums over the schedule's ranks, in place (collective)
///   gather / scatter / gather_scatter   see the top of this header (collective)
template <class S>
concept aggregation_schedule =
    requires(S& s, const S& cs, const exchange_key& key, const matrix<float>& x,
             matrix<float>& dx, std::span<float> values, std::span<double> dvalues) {
      { cs.num_destinations() } -> std::convertible_to<node_t>;
      { cs.num_sources() } -> std::convertible_to<node_t>;
      { cs.node_id(node_t{}) } -> std::convertible_to<node_t>;
      { cs.in_degrees() } -> std::convertible_to<std::span<const node_t>>;
      { cs.out_degrees() } -> std::convertible_to<std::span<const node_t>>;
      s.all_reduce_sum(values);
      s.all_reduce_sum(dvalues);
      s.gather(key, x, detail::gather_probe{});
      s.scatter(key, dx, detail::gather_probe{});
      s.gather_scatter(key, x, dx, detail::gather_scatter_probe{});
    };

/// A graph given layer by layer: a sampled minibatch or a slice of layer-wise inference
/// (sar/sampling/). Its rows form nested levels, level 0 the input rows (all of them), level
/// j + 1 the first rows of level j. Block j (j < num_blocks()) is a schedule whose sources are
/// level j and whose destinations are level j + 1; level(j) (j <= num_blocks()) is a schedule
/// of level j's rows as sources and destinations, without edges. A model runs its k-th layer
/// that reads neighbours on block(k) and the layers between on the level they see
/// (sar/nn/sequential.hpp).
template <class G>
concept layered_graph = requires(G& g, std::size_t j) {
  typename G::schedule_type;
  { g.num_blocks() } -> std::convertible_to<std::size_t>;
  { g.block(j) } -> std::same_as<typename G::schedule_type&>;
  { g.level(j) } -> std::same_as<typename G::schedule_type&>;
};

/// The schedule type a model's layers see on graph G: G itself, or a layered graph's blocks'.
template <class G>
struct schedule_type {
  /// G itself.
  using type = G;
};
/// For a layered graph: the schedule type of its blocks.
template <layered_graph G>
struct schedule_type<G> {
  /// G::schedule_type.
  using type = typename G::schedule_type;
};
template <class G>
using schedule_type_t = typename schedule_type<G>::type;

/// A schedule whose gathers visit one whole block (graph_block::whole) that a layer may also
/// read without a gather: one process (local_schedule). A layer reading its input row by row
/// from elsewhere than a matrix (sar::bf16_input) aggregates on such a schedule alone.
template <class S>
concept whole_block_schedule = requires(const S& s) {
  { s.whole_block() } -> std::same_as<const graph_block&>;
};

}  // namespace sar
