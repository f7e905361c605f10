// The exchange engine: distributed_schedule<Comm, Transport> composes five pieces and does
// nothing else (docs/exchange-engine.md):
//   distributed_graph  the halo plan: which rows go where; the halo rows' ids, degrees, blocks
//   transport          moves encoded blocks (ring_transport.hpp: the SAR ring with prefetch or
//                      all at once; pipelined for staleness, paced, a progress thread)
//   wire codec         rows <-> bytes, for features and for gradients (wire_codec.hpp)
//   halo cache policy  fetch a call's halo or reuse a kept one (halo_cache.hpp)
//   exchange policy    per call: exact or coded, which cache, synchronous or stale
//                      (exchange_policy.hpp, with exchange_options and the usual combinations)
// exchange_ends.hpp answers the transport's callbacks. Codecs and caches are chosen at run
// time and work on whole blocks, so a layer's visitor still inlines into the calls.
//
// Collectives: gather, scatter, gather_scatter and all_reduce_sum; every rank makes the same
// calls in the same order with the same keys, also with zero local rows. A call agrees on
// shapes, reuse and staleness before it moves data and on failures after (a bad argument or a
// visitor's exception on one rank throws on every rank). A stale call whose halo no cache
// keeps makes no collective: its shapes are checked against its exchange's earlier calls and
// its failures are agreed on at the schedule's next collective (deferred_failures), so only
// bulk transfers are in flight during a stale epoch. A sar::comm_error inside the exchange
// leaves the job unusable; end it.
#pragma once

#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "sar/comm/communicator.hpp"
#include "sar/core/error.hpp"
#include "sar/core/types.hpp"
#include "sar/distributed/distributed_graph.hpp"
#include "sar/distributed/exchange_ends.hpp"
#include "sar/distributed/exchange_policy.hpp"
#include "sar/distributed/graph_shard.hpp"
#include "sar/distributed/halo_cache.hpp"
#include "sar/distributed/halo_plan.hpp"
#include "sar/distributed/ring_transport.hpp"
#include "sar/distributed/wire_codec.hpp"
#include "sar/partition/graph_part.hpp"
#include "sar/schedule/schedule.hpp"

namespace sar {

/// The exchange engine (see the top of this file): an aggregation schedule
/// (sar/schedule/schedule.hpp) over the ranks of Comm, each rank holding its own nodes.
/// Calls that move rows are collective.
template <point_to_point_communicator Comm, class Transport = ring_transport<Comm>>
  requires halo_transport<Transport, Comm>
class distributed_schedule {
 public:
  using communicator_type = Comm;     ///< the communicator type
  using transport_type = Transport;  ///< the transport type

  /// Collective. Builds (and owns) this rank's distributed_graph from part. Requires
  /// part.part == comm.rank(), part.book.num_parts() == comm.size() and valid options
  /// (check_exchange_options). Throws on every rank if any rank's part or options are invalid.
  distributed_schedule(Comm& comm, const graph_part& part, exchange_options options = {})
      : distributed_schedule(comm, std::move(options), [&] {
          return std::make_unique<distributed_graph>(comm, part);
        }) {}

  /// Collective. As above from a shard and its plan, which must outlive the schedule.
  distributed_schedule(Comm& comm, const graph_shard& shard, const halo_plan& plan,
                       exchange_options options = {})
      : distributed_schedule(comm, std::move(options), [&] {
          return std::make_unique<distributed_graph>(comm, shard, plan);
        }) {}

  /// Collective (agrees on the options). Shares `graph`, which must outlive the schedule:
  /// several schedules (other codecs or caches) over one graph cost no set-up exchange.
  distributed_schedule(Comm& comm, const distributed_graph& graph, exchange_options options = {})
      : distributed_schedule(comm, std::move(options), [] { return nullptr; }) {
    graph_ = &graph;
    SAR_CHECK(graph.rank() == comm.rank() && graph.num_parts() == comm.size(), invalid_argument,
              "sar::distributed_schedule: graph of rank ", graph.rank(), " of ",
              graph.num_parts(), " on rank ", comm.rank(), " of ", comm.size());
  }

  distributed_schedule(const distributed_schedule&) = delete;
  distributed_schedule& operator=(const distributed_schedule&) = delete;
  /// Moves the schedule (its graph and pipelined halos are held by pointer and stay put).
  distributed_schedule(distributed_schedule&&) = default;
  distributed_schedule& operator=(distributed_schedule&&) = delete;
  /// Completes the pipelined transfers still in flight (every rank destroys its schedule at
  /// the same point of the program, as after the same calls).
  ~distributed_schedule() {
    for (pipelined_halo<request>* h : pipelined_.all()) {
      try {
        transport_.drain(*h);
      } catch (...) {  // a broken job: nothing left to complete
      }
    }
  }

  // --- the schedule interface (sar/schedule/schedule.hpp) ---
  /// Rows a layer writes: this rank's nodes.
  node_t num_destinations() const { return graph_->num_local(); }
  /// Rows a layer reads locally: this rank's nodes (halo rows come through the blocks).
  node_t num_sources() const { return graph_->num_local(); }
  /// Number of nodes this rank owns.
  node_t num_local() const { return graph_->num_local(); }
  /// Global id of local row 0.
  node_t first_global() const { return graph_->first_global(); }
  /// Number of nodes of the whole graph.
  node_t num_global() const { return graph_->num_global(); }
  /// The dataset id of local row `row` (keys random numbers; see graph_block).
  node_t node_id(node_t row) const { return graph_->node_id(row); }
  /// Global in-degree of every local node.
  std::span<const node_t> in_degrees() const { return graph_->in_degrees(); }
  /// Global out-degree of every local node.
  std::span<const node_t> out_degrees() const { return graph_->out_degrees(); }
  /// This rank's edge table: one feature row per in-edge of its nodes (blocks find their
  /// edges' rows through graph_block::edge_rows), or 0 x 0 when the graph has none.
  const matrixf& edge_features() const { return graph_->edge_features(); }
  /// This rank's edge types: one relation per in-edge of its nodes (found as the features
  /// are), or empty when the graph is homogeneous.
  std::span<const std::int32_t> edge_types() const { return graph_->edge_types(); }

  /// Sums values element-wise over all ranks, in place. Collective. Not counted as traffic.
  /// Throws on every rank first if a stale call since the last agreement failed on one.
  template <reducible_scalar T>
  void all_reduce_sum(std::span<T> values) {
    deferred_.agree(*comm_, "sar::distributed_schedule (a stale call before all_reduce_sum)");
    comm_->all_reduce(values, reduce_op::sum);
    if (comm_->size() > 1) transport_.count_reduction(values.size_bytes());
  }

  /// visit(block, halo) for every block with edges: halo = the rows of x the block's columns
  /// index (x itself for the local block). x: num_local() rows, the same width on every rank.
  /// Collective. Throws sar::invalid_argument on every rank if any rank's x is mis-shaped.
  template <class X, class Visit>
  void gather(const exchange_key& key, const Eigen::MatrixBase<X>& x, Visit&& visit) {
    using T = typename X::Scalar;
    const const_rows_ref<T> xr(x);
    exchange<T>(key, exchange_kind::gather, &xr, nullptr,
                [&](const graph_block& b, const const_rows_ref<T>* halo, rows_ref<T>*) {
                  visit(b, *halo);
                });
  }

  /// visit(block, dhalo) for every block with edges; the visitor ADDS into dhalo (zeroed for
  /// remote blocks; dx itself for the local block); remote dhalo rows are sent to their owners
  /// and ADDED into dx. dx: num_local() rows. Collective; throws as gather.
  template <class DX, class Visit>
  void scatter(const exchange_key& key, Eigen::MatrixBase<DX>& dx, Visit&& visit) {
    using T = typename DX::Scalar;
    rows_ref<T> dxr(dx.derived());
    exchange<T>(key, exchange_kind::scatter, nullptr, &dxr,
                [&](const graph_block& b, const const_rows_ref<T>*, rows_ref<T>* dhalo) {
                  visit(b, *dhalo);
                });
  }

  /// visit(block, halo, dhalo): both at once. The halo is fetched again (rematerialised),
  /// unless the cache policy kept it from the gather of the same key on every rank.
  /// Collective; throws as gather.
  template <class X, class DX, class Visit>
  void gather_scatter(const exchange_key& key, const Eigen::MatrixBase<X>& x,
                      Eigen::MatrixBase<DX>& dx, Visit&& visit) {
    using T = typename X::Scalar;
    static_assert(std::is_same_v<T, typename DX::Scalar>,
                  "sar::distributed_schedule::gather_scatter needs x and dx of one scalar type.");
    const const_rows_ref<T> xr(x);
    rows_ref<T> dxr(dx.derived());
    exchange<T>(key, exchange_kind::gather_scatter, &xr, &dxr,
                [&](const graph_block& b, const const_rows_ref<T>* halo, rows_ref<T>* dhalo) {
                  visit(b, *halo, *dhalo);
                });
  }

  // --- accessors beyond the interface ---
  /// The communicator it runs on.
  Comm& communicator() const { return *comm_; }
  /// The graph it exchanges over (owned or shared).
  const distributed_graph& graph() const { return *graph_; }
  /// This rank's graph_shard.
  const graph_shard& shard() const { return graph_->shard(); }
  /// This rank's halo_plan.
  const halo_plan& plan() const { return graph_->plan(); }
  /// The transport options.
  const transport_options& transport() const { return transport_.options(); }
  /// Name of the feature codec.
  std::string feature_codec_name() const { return feature_codec_.name(); }
  /// Name of the gradient codec.
  std::string gradient_codec_name() const { return gradient_codec_.name(); }
  /// The per-call decisions (staleness 1: synchronous; S > 1: bounded staleness).
  const exchange_policy& policy() const { return policy_; }
  /// The halo cache policy (e.g. to clear it or reach it through target()).
  any_halo_cache& cache() { return cache_; }
  /// Wire bytes kept now: the cache policy's, the first layer's halo, the pipelined halos.
  std::size_t kept_halo_bytes() const {
    return cache_.kept_bytes() + input_cache_.kept_bytes() + pipelined_.bytes();
  }

  /// Bytes sent through this schedule since the last reset_traffic(), by kind.
  const schedule_traffic& traffic() const { return transport_.traffic(); }
  /// Starts a new count (e.g. per epoch); not collective.
  void reset_traffic() { transport_.reset_traffic(); }
  /// Remote blocks whose buffers the transport holds now / at most since the last reset
  /// (the ring's open slots; every remote block during an all-at-once call).
  int live_blocks() const { return transport_.live_blocks(); }
  /// The most remote blocks alive at once since the last reset_peak_live_blocks().
  int peak_live_blocks() const { return transport_.peak_live_blocks(); }
  /// Starts a new peak from the blocks alive now.
  void reset_peak_live_blocks() { transport_.reset_peak_live_blocks(); }

  /// The transport's progress polls so far (ring_transport.hpp).
  long progress_polls() const { return transport_.progress_polls(); }

 private:
  using request = typename Comm::request;

  template <class MakeGraph>
  distributed_schedule(Comm& comm, exchange_options options, MakeGraph&& make_graph)
      : comm_(&comm),
        transport_(comm, (check_exchange_options(comm, options), options.transport)),
        feature_codec_(std::move(options.feature_codec)),
        gradient_codec_(std::move(options.gradient_codec)),
        cache_(std::move(options.cache)),
        policy_(options.policy) {
    owned_graph_ = make_graph();
    graph_ = owned_graph_.get();
  }

  /// One call: the policy picks codecs, cache and staleness; the ranks agree on shapes, reuse
  /// and staleness; the transport runs with this call's ends; the cache keeps what it asks
  /// for; the ranks agree on failures.
  template <class T>
  void exchange(const exchange_key& key, exchange_kind kind, const const_rows_ref<T>* x,
                rows_ref<T>* dx, exchange_visitor<T> call) {
    static constexpr const char* names[] = {"sar::distributed_schedule::gather",
                                            "sar::distributed_schedule::scatter",
                                            "sar::distributed_schedule::gather_scatter"};
    const char* where = names[static_cast<int>(kind)];
    const int P = comm_->size();
    const bool reads_halo = kind != exchange_kind::scatter;
    const bool dx_ok = kind != exchange_kind::gather_scatter ||
                       (dx->rows() == x->rows() && dx->cols() == x->cols());
    const Eigen::Index rows = x ? x->rows() : dx->rows(), cols = x ? x->cols() : dx->cols();

    const exchange_policy::call_mode mode = policy_.mode(key);
    any_wire_codec& fc = mode.exact ? plain_ : feature_codec_;
    any_wire_codec& gc = mode.exact ? plain_ : gradient_codec_;
    any_halo_cache& cache = mode.input_cache ? input_cache_ : cache_;
    pipelined_halo<request>* pipe = nullptr;
    int tag = 0;
    if (mode.pipelined) std::tie(pipe, tag) = pipelined_.of(key, P);
    const bool stale = pipe && policy_.stale(key, kind, {pipe->features_supplied(),
                                                         pipe->gradients_supplied()});
    std::optional<kept_halo> kept = cache.take(key, kind);
    using ends = exchange_ends<T, request>;
    std::exception_ptr failure;
    auto run_stale = [&] {  // rows that arrived for the previous call, in its width
      ends e{*graph_, scratch_, key, kind, x, dx, pipe->width, call, fc, gc, nullptr, nullptr,
             nullptr, failure};
      transport_.run_pipelined(*pipe, tag, kind == exchange_kind::gather,
                               kind != exchange_kind::gather, e);
    };

    if (stale && !kept) {  // on its own: no agreement (see the top of this file)
      detail::guarded(failure, [&] {
        check_stale_call(where, comm_->rank(), rows, num_local(), dx_ok, cols, pipe->width);
      });
      run_stale();
      deferred_.record(failure);
      return;
    }

    deferred_.agree(*comm_, where);
    const halo_keep keep = reads_halo ? cache.keeps(key, kind) : halo_keep::no;
    std::uint64_t hash = 0;
    auto hash_of_x = [&] {
      if (hash == 0 && rows == num_local()) hash = detail::content_hash<T>(*x);
      return hash;
    };
    const bool have = reads_halo && kept && kept->blocks.size() == static_cast<std::size_t>(P) &&
                      (kept->source_hash == 0 || kept->source_hash == hash_of_x());
    const call_agreement plan =
        agree_on_call(*comm_, where, rows, num_local(), dx_ok, cols, have, stale);
    if (!plan.reuse) kept.reset();
    if (pipe) pipe->width = cols;
    if (plan.stale) {
      run_stale();
      detail::agree_on_failure(*comm_, failure, where);
      return;
    }
    if (pipe) transport_.drain(*pipe);  // a synchronous call supersedes what is in flight
    kept_halo keeping{key, keep == halo_keep::if_x_unchanged ? hash_of_x() : 0,
                      std::vector<std::vector<std::byte>>(keep == halo_keep::no ? 0 : P)};
    ends e{*graph_, scratch_, key, kind, x, dx, cols, call, fc, gc, kept ? &*kept : nullptr,
           keep != halo_keep::no ? &keeping : nullptr, pipe, failure};
    transport_.run(reads_halo && !plan.reuse, kind != exchange_kind::gather, e, !key.training);
    detail::agree_on_failure(*comm_, failure, where);
    if (keep != halo_keep::no) cache.keep(std::move(keeping));
  }

  Comm* comm_;
  std::unique_ptr<distributed_graph> owned_graph_;
  const distributed_graph* graph_ = nullptr;
  Transport transport_;
  any_wire_codec feature_codec_;
  any_wire_codec gradient_codec_;
  any_halo_cache cache_;
  exchange_policy policy_;
  any_wire_codec plain_;                                 // exact calls
  any_halo_cache input_cache_ = keep_unchanged_input{};  // the first graph layer's, if exact
  pipelined_exchanges<request> pipelined_;
  halo_scratch scratch_;
  deferred_failures deferred_;  // of the stale calls since the schedule's last collective
};

}  // namespace sar
