// The exchange engine: distributed_schedule<Comm> composes four separate pieces
// (docs/exchange-engine.md):
//   distributed_graph  what rows go where (the halo plan) and what the layers need to know of
//                      the halo rows (ids, degrees, blocks), built once
//   ring_transport     moves encoded blocks: the SAR ring with prefetch, or all at once
//   wire codec         rows <-> bytes, one for features and one for gradients
//                      (wire_codec.hpp: plain rows by default)
//   halo cache policy  fetch a call's halo or reuse a kept one (halo_cache.hpp: keep nothing
//                      by default)
// The usual schedules are combinations (exchange_options below):
//   sequential  ring, prefetch 1, no cache: SAR. At most prefetch_depth + 1 remote blocks
//               are alive; backward of GAT / max fetches the halo again (rematerialisation).
//   keep_halo   ring, keep_for_backward: the gather_scatter of a key reuses the halo its
//               gather fetched (memory traded for traffic; results identical).
//   one_shot    every remote block at once, no cache: the usual domain-parallel baseline.
//   low_bit     (Sylvie) lossy codecs on the hidden layers' halos, the first graph layer's
//               halo exact and fetched again only when its input changes, and bounded
//               staleness: with staleness S > 1 every training call of an epoch that is not a
//               multiple of S aggregates the halo rows (and adds the halo gradients) that were
//               sent in the previous epoch's call of the same exchange, while this epoch's
//               travel in the background (ring_transport::run_pipelined). Epoch 0 and every
//               S-th epoch are synchronous; a missing halo is never replaced by zeros.
//               Memory: per exchange (layer, call) and direction, the halo in use, the one in
//               flight and the rows being sent (kept_halo_bytes() counts them).
// Evaluation calls (exchange_key::training false) are synchronous and, with
// exact_evaluation, exact.
// Codecs and policies are chosen at run time (any_wire_codec, any_halo_cache) and work on
// whole blocks, so a schedule is one type per communicator and a layer's visitor still
// inlines into gather / scatter / gather_scatter.
//
// Collectives: gather, scatter, gather_scatter and all_reduce_sum are collective over the
// communicator; every rank makes the same calls in the same order, with the same keys, also
// with zero local rows. Each of gather / scatter / gather_scatter makes one small all_reduce
// before moving data (the ranks agree that every x / dx has num_local rows, that the widths
// are equal, and whether every rank can reuse a kept halo, so a bad argument on one rank ends
// every rank with an exception instead of a hang) and one after (an exception thrown by a
// visitor or a codec on one rank is rethrown there; the other ranks, which completed the
// exchange, throw sar::comm_error naming it). A communication failure inside the exchange
// (sar::comm_error from the communicator) leaves the job unusable; end it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <numeric>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <tbb/parallel_for.h>

#include "sar/comm/communicator.hpp"
#include "sar/core/error.hpp"
#include "sar/core/memory.hpp"
#include "sar/core/types.hpp"
#include "sar/distributed/codecs.hpp"
#include "sar/distributed/distributed_graph.hpp"
#include "sar/distributed/graph_shard.hpp"
#include "sar/distributed/halo_cache.hpp"
#include "sar/distributed/halo_plan.hpp"
#include "sar/distributed/ring_transport.hpp"
#include "sar/distributed/wire_codec.hpp"
#include "sar/partition/graph_part.hpp"
#include "sar/schedule/schedule.hpp"

namespace sar {

/// How a distributed_schedule exchanges halos. Move-only (it holds a codec and a cache).
/// Every rank must pass the same options (codecs and cache are not compared across ranks).
struct exchange_options {
  /// How blocks travel (ring with prefetch, or all at once).
  transport_options transport;
  any_wire_codec feature_codec;   ///< forward halo features (training calls)
  any_wire_codec gradient_codec;  ///< backward halo feature-gradients (training calls)
  /// Fetch or reuse each call's halo (default: keep nothing).
  any_halo_cache cache;
  /// 1: synchronous. S > 1: bounded staleness, epochs not a multiple of S use the previous
  /// epoch's halos (see the top of this file).
  int staleness = 1;
  /// The first graph layer (the lowest exchange_key::layer exchanged) moves plain rows and
  /// keeps its halo while its input is unchanged (raw features: fetched once).
  bool exact_first_layer = false;
  /// Evaluation calls move plain rows whatever the codecs.
  bool exact_evaluation = true;
};

/// SAR: the ring with `prefetch_depth` blocks fetched ahead, nothing kept.
inline exchange_options sequential_exchange(int prefetch_depth = 1) {
  exchange_options o;
  o.transport.prefetch_depth = prefetch_depth;
  return o;
}
/// The ring, with each gather's halo kept for its gather_scatter.
inline exchange_options keep_halo_exchange(int prefetch_depth = 1) {
  exchange_options o = sequential_exchange(prefetch_depth);
  o.cache = keep_for_backward{};
  return o;
}
/// Every remote block at once, nothing kept.
inline exchange_options one_shot_exchange() {
  exchange_options o;
  o.transport.all_at_once = true;
  return o;
}
/// Sylvie's exchange on the ring: halo features in `feature_bits` and gradients in
/// `gradient_bits` per value (make_wire_codec: 32, 16, 8, 4, 2, 1), the first graph layer
/// exact, bounded staleness S. Throws sar::invalid_argument for other bit widths.
inline exchange_options low_bit_exchange(int feature_bits, int gradient_bits, int staleness,
                                         int prefetch_depth = 1) {
  exchange_options o = sequential_exchange(prefetch_depth);
  o.feature_codec = make_wire_codec(feature_bits);
  o.gradient_codec = make_wire_codec(gradient_bits);
  o.staleness = staleness;
  o.exact_first_layer = true;
  return o;
}
/// "sequential" | "keep_halo" | "one_shot" (the ring ones with prefetch_depth).
/// Throws sar::invalid_argument for another name.
inline exchange_options named_exchange(std::string_view name, int prefetch_depth = 1) {
  if (name == "sequential") return sequential_exchange(prefetch_depth);
  if (name == "keep_halo") return keep_halo_exchange(prefetch_depth);
  if (name == "one_shot") return one_shot_exchange();
  throw invalid_argument(message("sar::named_exchange: unknown schedule '", name,
                                 "' (sequential, keep_halo or one_shot)"));
}

namespace detail {
/// A hash of the local rows of x (keep-for-backward's content check), independent of the
/// thread count; never 0 (0 means "not hashed").
template <class T>
std::uint64_t content_hash(const const_rows_ref<T>& x) {
  constexpr Eigen::Index chunk = 2048;
  const Eigen::Index n = x.rows(), f = x.cols();
  const Eigen::Index chunks = (n + chunk - 1) / chunk;
  std::vector<std::uint64_t> part(static_cast<std::size_t>(chunks));
  tbb::parallel_for(Eigen::Index{0}, chunks, [&](Eigen::Index c) {
    std::uint64_t h = 0xcbf29ce484222325ull ^ static_cast<std::uint64_t>(c);
    for (Eigen::Index i = c * chunk; i < std::min(n, (c + 1) * chunk); ++i) {
      const unsigned char* bytes = reinterpret_cast<const unsigned char*>(x.row(i).data());
      for (std::size_t b = 0; b + 8 <= sizeof(T) * f; b += 8) {
        std::uint64_t word;
        std::memcpy(&word, bytes + b, 8);
        h = (h ^ word) * 0x100000001b3ull;
      }
      if ((sizeof(T) * f) % 8) {  // float rows of odd width
        std::uint64_t word = 0;
        std::memcpy(&word, bytes + sizeof(T) * f - 4, 4);
        h = (h ^ word) * 0x100000001b3ull;
      }
    }
    part[c] = h;
  });
  std::uint64_t h = static_cast<std::uint64_t>(n) * 0x9e3779b97f4a7c15ull ^ static_cast<std::uint64_t>(f);
  for (std::uint64_t v : part) h = (h ^ v) * 0x100000001b3ull + 0x9e3779b97f4a7c15ull;
  return h | 1;
}
}  // namespace detail

/// The exchange engine (see the top of this file): an aggregation schedule
/// (sar/schedule/schedule.hpp) over the ranks of Comm, each rank holding its own nodes.
/// Calls that move rows are collective.
template <point_to_point_communicator Comm>
class distributed_schedule {
 public:
  /// The communicator type.
  using communicator_type = Comm;

  /// Collective. Builds (and owns) this rank's distributed_graph from part (its shard, halo
  /// plan and halo metadata). Requires part.part == comm.rank(), part.book.num_parts() ==
  /// comm.size(), options.transport.prefetch_depth >= 0. Throws on every rank if any rank's
  /// part or options are invalid.
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
  /// Moves the schedule; its graph and pipelined halos are held by pointer and stay put.
  distributed_schedule(distributed_schedule&&) = default;
  distributed_schedule& operator=(distributed_schedule&&) = delete;
  /// Completes the pipelined transfers still in flight (every rank destroys its schedule at
  /// the same point of the program, as after the same calls).
  ~distributed_schedule() {
    for (auto& [key, h] : pipelined_) {
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

  /// Sums values element-wise over all ranks, in place. Collective. Not counted as traffic.
  template <reducible_scalar T>
  void all_reduce_sum(std::span<T> values) {
    comm_->all_reduce(values, reduce_op::sum);
    if (comm_->size() > 1) transport_.count_reduction(values.size_bytes());
  }

  /// visit(block, halo) for every block with edges: halo = the rows of x the block's columns
  /// index (x itself for the local block). x: num_local() rows, the same width on every rank.
  /// Collective. Throws sar::invalid_argument on every rank if any rank's x is mis-shaped.
  template <class X, class Visit>
  void gather(const exchange_key& key, const Eigen::MatrixBase<X>& x, Visit&& visit) {
    using T = typename X::Scalar;
    check_scalar<T>();
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
    check_scalar<T>();
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
    check_scalar<T>();
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
  /// Remote blocks fetched ahead on the ring.
  int prefetch_depth() const { return transport_.options().prefetch_depth; }
  /// Name of the feature codec.
  std::string feature_codec_name() const { return feature_codec_.name(); }
  /// Name of the gradient codec.
  std::string gradient_codec_name() const { return gradient_codec_.name(); }
  /// 1: synchronous; S > 1: bounded staleness (see exchange_options::staleness).
  int staleness() const { return staleness_; }
  /// The halo cache policy (e.g. to clear it or reach it through target()).
  any_halo_cache& cache() { return cache_; }
  /// Wire bytes kept now: the cache policy's, the first layer's halo, the pipelined halos.
  std::size_t kept_halo_bytes() const {
    std::size_t total = cache_.kept_bytes() + input_cache_.kept_bytes();
    for (const auto& [key, h] : pipelined_) total += h->bytes();
    return total;
  }
  /// Rows this rank sends per gather (= per feature exchange).
  node_t rows_sent_per_gather() const { return plan().total_send(); }
  /// Rows this rank receives per gather (the halo).
  node_t rows_received_per_gather() const { return plan().total_recv(); }

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

 private:
  template <class MakeGraph>
  distributed_schedule(Comm& comm, exchange_options options, MakeGraph&& make_graph)
      : comm_(&comm),
        transport_(comm, agreed(comm, options)),
        feature_codec_(std::move(options.feature_codec)),
        gradient_codec_(std::move(options.gradient_codec)),
        cache_(std::move(options.cache)),
        staleness_(options.staleness),
        exact_first_layer_(options.exact_first_layer),
        exact_evaluation_(options.exact_evaluation) {
    owned_graph_ = make_graph();
    graph_ = owned_graph_.get();
  }

  /// The transport options, once every rank has checked its own (collective).
  static transport_options agreed(Comm& comm, const exchange_options& o) {
    std::exception_ptr failure;
    detail::guarded(failure, [&] {
      SAR_CHECK(o.transport.prefetch_depth >= 0, invalid_argument, "sar::distributed_schedule: "
                "prefetch_depth ", o.transport.prefetch_depth, " on rank ", comm.rank());
      SAR_CHECK(o.staleness >= 1, invalid_argument, "sar::distributed_schedule: staleness ",
                o.staleness, " on rank ", comm.rank(), " (1 = synchronous)");
    });
    detail::agree_on_failure(comm, failure, "sar::distributed_schedule");
    return o.transport;
  }

  template <class T>
  static void check_scalar() {
    static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>,
                  "sar::distributed_schedule moves float or double rows only.");
  }

  /// What every rank can do in a call (agree_on_call).
  struct call_plan {
    bool reuse = false;  ///< every rank reuses a kept halo
    bool stale = false;  ///< every rank pipelines the call
  };

  /// The call's first collective: every rank checks rows == num_local() and dx_ok (dx shaped
  /// like x), the ranks agree on equal widths and on whether every rank has `hit` / `stale`.
  /// One all_reduce of five int64. Throws on every rank if any rank's arguments are wrong.
  call_plan agree_on_call(const char* where, Eigen::Index rows, Eigen::Index cols, bool dx_ok,
                          bool hit, bool stale) {
    const bool ok = rows == num_local() && dx_ok;
    std::int64_t v[5] = {ok ? comm_->size() : comm_->rank(), cols, -cols, hit ? 1 : 0,
                         stale ? 1 : 0};
    comm_->all_reduce(std::span<std::int64_t>(v, 5), reduce_op::min);
    SAR_CHECK(ok, invalid_argument, where, ": rank ", comm_->rank(), " passes ", rows,
              " rows", dx_ok ? "" : " and a dx not shaped like x", ", expected ", num_local(),
              " rows");
    SAR_CHECK(v[0] == comm_->size(), invalid_argument, where, ": rank ", v[0],
              " passed mis-shaped arguments (rank ", comm_->rank(), " stops too)");
    SAR_CHECK(v[1] == -v[2], invalid_argument, where, ": ranks pass widths from ", v[1], " to ",
              -v[2], " (rank ", comm_->rank(), " has ", cols, ")");
    return {v[3] == 1, v[3] != 1 && v[4] == 1};
  }

  /// Whether key's exchange is the first graph layer's (the lowest layer exchanged so far:
  /// the first call of a forward pass is the first graph layer's).
  bool first_layer(const exchange_key& key) {
    first_layer_ = std::min(first_layer_, key.layer);
    return key.layer == first_layer_;
  }

  /// The pipelined state of key's exchange (created empty on first use, in call order, so
  /// every rank numbers the exchanges alike) and its message tag.
  std::pair<pipelined_halo<typename Comm::request>*, int> pipeline(const exchange_key& key) {
    std::size_t k = 0;
    while (k < pipelined_.size() && !pipelined_[k].first.same_exchange(key)) ++k;
    if (k == pipelined_.size())
      pipelined_.emplace_back(
          key, std::make_unique<pipelined_halo<typename Comm::request>>(comm_->size()));
    return {pipelined_[k].second.get(), pipelined_tag + 2 * static_cast<int>(k)};
  }

  /// One call: decides with the cache policy whether features travel, runs the transport
  /// with this schedule's ends, keeps what the policy asks for, agrees on failures.
  template <class T, class Call>
  void exchange(const exchange_key& key, exchange_kind kind, const const_rows_ref<T>* x,
                rows_ref<T>* dx, Call&& call) {
    static constexpr const char* names[] = {"sar::distributed_schedule::gather",
                                            "sar::distributed_schedule::scatter",
                                            "sar::distributed_schedule::gather_scatter"};
    const char* where = names[static_cast<int>(kind)];
    const int P = comm_->size();
    const bool reads_halo = kind != exchange_kind::scatter;
    const bool dx_ok = kind != exchange_kind::gather_scatter ||
                       (dx->rows() == x->rows() && dx->cols() == x->cols());
    const Eigen::Index rows = x ? x->rows() : dx->rows(), cols = x ? x->cols() : dx->cols();

    const bool first = first_layer(key);
    const bool exact = (!key.training && exact_evaluation_) || (exact_first_layer_ && first);
    any_wire_codec& fc = exact ? plain_ : feature_codec_;
    any_wire_codec& gc = exact ? plain_ : gradient_codec_;
    any_halo_cache& cache = exact_first_layer_ && first ? input_cache_ : cache_;
    // Bounded staleness: a training call whose epoch is not a multiple of S pipelines, once
    // its exchange holds what it needs from an earlier call.
    pipelined_halo<typename Comm::request>* pipe = nullptr;
    int tag = 0;
    if (staleness_ > 1 && key.training) std::tie(pipe, tag) = pipeline(key);
    const bool sends_gradients = kind != exchange_kind::gather;
    const bool stale_ready =
        pipe && key.epoch % static_cast<std::uint64_t>(staleness_) != 0 &&
        (!reads_halo || pipe->has_features || pipe->features_in_flight) &&
        (!sends_gradients || pipe->has_gradients || pipe->gradients_in_flight);

    std::optional<kept_halo> kept = cache.take(key, kind);
    const halo_keep keep = reads_halo ? cache.keeps(key, kind) : halo_keep::no;
    std::uint64_t hash = 0;
    auto hash_of_x = [&] {
      if (hash == 0 && rows == num_local()) hash = detail::content_hash<T>(*x);
      return hash;
    };
    const bool have = reads_halo && kept && kept->blocks.size() == static_cast<std::size_t>(P) &&
                      (kept->source_hash == 0 || kept->source_hash == hash_of_x());
    const call_plan plan = agree_on_call(where, rows, cols, dx_ok, have, stale_ready);
    const bool reuse = plan.reuse;
    if (!reuse) kept.reset();
    std::exception_ptr failure;
    if (plan.stale) {
      ends<T, Call> e{*this, key, kind, x, dx, call, fc, gc, nullptr, nullptr, nullptr, failure};
      transport_.run_pipelined(*pipe, tag, kind == exchange_kind::gather, sends_gradients, e);
      detail::agree_on_failure(*comm_, failure, where);
      return;
    }
    if (pipe) transport_.drain(*pipe);  // a synchronous call supersedes what is in flight
    kept_halo keeping;
    if (keep != halo_keep::no) {
      keeping.key = key;
      keeping.blocks.resize(static_cast<std::size_t>(P));
      if (keep == halo_keep::if_x_unchanged) keeping.source_hash = hash_of_x();
    }

    ends<T, Call> e{*this, key, kind, x, dx, call, fc, gc, kept ? &*kept : nullptr,
                    keep != halo_keep::no ? &keeping : nullptr, pipe, failure};
    transport_.run(reads_halo && !reuse, kind != exchange_kind::gather, e, !key.training);
    detail::agree_on_failure(*comm_, failure, where);
    if (keep != halo_keep::no) cache.keep(std::move(keeping));
  }

  /// The schedule's side of one transport run (ring_transport.hpp lists the calls).
  template <class T, class Call>
  struct ends {
    distributed_schedule& s;
    const exchange_key& key;
    exchange_kind kind;
    const const_rows_ref<T>* x;
    rows_ref<T>* dx;
    Call& call;
    any_wire_codec& fc;  ///< the call's feature codec
    any_wire_codec& gc;  ///< the call's gradient codec
    kept_halo* reused;   ///< the halo every rank reuses, or null
    kept_halo* keeping;  ///< where to keep this call's halo, or null
    /// A synchronous call of a pipelined exchange: what arrives is kept for the next call.
    pipelined_halo<typename Comm::request>* retain;
    std::exception_ptr& failure;

    int rank() const { return s.comm_->rank(); }
    Eigen::Index width() const { return x ? x->cols() : dx->cols(); }
    codec_context context(exchange_direction d, int sender, int receiver,
                          std::span<const node_t> ids) const {
      return {key, d, sender, receiver, ids};
    }

    std::size_t incoming_feature_bytes(int q) {
      return fc.template wire_bytes<T>(s.plan().recv_count[q], width());
    }
    void encode_features(int q, std::vector<std::byte>& wire) {
      detail::guarded(failure, [&] {
        fc.template encode<T>(
            *x, s.plan().send_rows[q],
            context(exchange_direction::features, rank(), q, s.graph_->send_ids(q)), wire);
      });
      fit(wire, fc.template wire_bytes<T>(
                    static_cast<Eigen::Index>(s.plan().send_rows[q].size()), width()));
    }
    std::size_t incoming_gradient_bytes(int q) {
      return gc.template wire_bytes<T>(
          static_cast<Eigen::Index>(s.plan().send_rows[q].size()), width());
    }
    void add_gradients(int q, std::span<const std::byte> wire) {
      detail::guarded(failure, [&] {
        gc.template decode_add<T>(
            wire, s.plan().send_rows[q],
            context(exchange_direction::gradients, q, rank(), s.graph_->send_ids(q)), *dx);
      });
      if (retain) {
        retain->gradients[static_cast<std::size_t>(q)].assign(wire.begin(), wire.end());
        retain->has_gradients = true;
      }
    }

    void visit(int q, std::vector<std::byte>& features, std::vector<std::byte>& gradients) {
      const graph_block& b = s.graph_->block(q);
      if (q == rank()) {  // the local block reads x and adds into dx in place
        if (b.edges->num_edges() > 0)
          detail::guarded(failure, [&] { call(b, kind == exchange_kind::scatter ? nullptr : x, dx); });
        return;
      }
      const Eigen::Index halo_rows = s.plan().recv_count[q], f = width();
      const std::span<const node_t> ids = s.graph_->halo_ids(q);
      std::optional<Eigen::Map<const matrix<T>>> halo;
      if (retain && kind != exchange_kind::scatter) {
        const std::vector<std::byte>& arrived = reused ? reused->blocks[q] : features;
        retain->features[static_cast<std::size_t>(q)] = arrived;
        retain->has_features = true;
      }
      if (kind != exchange_kind::scatter) {
        const std::vector<std::byte>& wire = reused ? reused->blocks[q] : features;
        detail::guarded(failure, [&] {
          halo.emplace(fc.template decode<T>(
              wire, halo_rows, f, context(exchange_direction::features, q, rank(), ids),
              s.scratch<T>()));
        });
      }
      const bool gradients_travel = kind != exchange_kind::gather;
      const bool raw = gc.raw_rows();
      matrix<T>& dscratch = s.gradient_scratch<T>();
      if (gradients_travel) {
        if (raw) {
          gradients.clear();  // so the resize writes zeros everywhere
          huge_page_resize(gradients, static_cast<std::size_t>(halo_rows * f) * sizeof(T));
        } else {
          huge_page_resize(dscratch, halo_rows, f);
          dscratch.setZero();
        }
      }
      Eigen::Map<matrix<T>> dmap(raw ? reinterpret_cast<T*>(gradients.data()) : dscratch.data(),
                                 gradients_travel ? halo_rows : 0, f);
      rows_ref<T> dhalo(dmap);
      if (b.edges->num_edges() > 0 && (halo || kind == exchange_kind::scatter)) {
        detail::guarded(failure, [&] {
          if (halo) {
            const const_rows_ref<T> h(*halo);
            call(b, &h, &dhalo);
          } else {
            call(b, nullptr, &dhalo);
          }
        });
      }
      if (gradients_travel && !raw) {
        detail::guarded(failure, [&] {
          gc.template encode<T>(
              const_rows_ref<T>(dscratch), s.identity_rows(halo_rows),
              context(exchange_direction::gradients, rank(), q, ids), gradients);
        });
        fit(gradients, gc.template wire_bytes<T>(halo_rows, f));
      }
      if (keeping) keeping->blocks[q] = reused ? std::move(reused->blocks[q]) : std::move(features);
    }

    /// A wire a failed (or misbehaving) codec left at another size gets the announced size,
    /// so the peer's receive still matches; the failure is reported after the exchange.
    void fit(std::vector<std::byte>& wire, std::size_t bytes) {
      if (wire.size() == bytes) return;
      detail::guarded(failure, [&] {
        throw invalid_argument(message("sar::distributed_schedule: codec '", fc.name(),
                                       "' / '", gc.name(), "' wrote ", wire.size(),
                                       " bytes where it announced ", bytes, " on rank ",
                                       rank()));
      });
      wire.assign(bytes, std::byte{0});
    }
  };

  template <class T>
  matrix<T>& scratch() {
    if constexpr (std::is_same_v<T, float>) return halo_scratch_f_;
    else return halo_scratch_d_;
  }
  template <class T>
  matrix<T>& gradient_scratch() {
    if constexpr (std::is_same_v<T, float>) return gradient_scratch_f_;
    else return gradient_scratch_d_;
  }
  /// 0, 1, ..., n - 1 (the rows of a whole gradient block, for its codec).
  std::span<const node_t> identity_rows(Eigen::Index n) {
    if (static_cast<Eigen::Index>(identity_.size()) < n) {
      identity_.resize(static_cast<std::size_t>(n));
      std::iota(identity_.begin(), identity_.end(), node_t{0});
    }
    return std::span<const node_t>(identity_).first(static_cast<std::size_t>(n));
  }

  Comm* comm_;
  std::unique_ptr<distributed_graph> owned_graph_;
  const distributed_graph* graph_ = nullptr;
  ring_transport<Comm> transport_;
  any_wire_codec feature_codec_;
  any_wire_codec gradient_codec_;
  any_halo_cache cache_;
  int staleness_ = 1;
  bool exact_first_layer_ = false, exact_evaluation_ = true;
  any_wire_codec plain_;                              // exact calls
  any_halo_cache input_cache_ = keep_unchanged_input{};  // the first layer's, if exact
  std::uint64_t first_layer_ = ~std::uint64_t{0};
  static constexpr int pipelined_tag = 0x5c00;
  std::vector<std::pair<exchange_key, std::unique_ptr<pipelined_halo<typename Comm::request>>>>
      pipelined_;
  matrix<float> halo_scratch_f_, gradient_scratch_f_;  // decoded blocks of non-raw codecs
  matrix<double> halo_scratch_d_, gradient_scratch_d_;
  std::vector<node_t> identity_;
};

}  // namespace sar
