// The distributed aggregation schedules (ALGORITHMS.md §1-2; docs/schedules.md): one class
// template, distributed_schedule<Exchange, Comm>, whose Exchange policy is chosen at compile
// time:
//   exchange::sequential  SAR. Ring order: round r sends X[send_rows[p+r]] to rank p+r and
//                         receives the block of rank p-r; round 0 is the local block, read in
//                         place. The transfers of the next `prefetch_depth` rounds run while a
//                         block is visited; at most prefetch_depth + 1 remote blocks are alive,
//                         each one's buffer is reused by a later round (a pool of at most d + 1
//                         slots, freed at the end of the call). Backward of GAT / max fetches
//                         the halo again (rematerialisation).
//   exchange::keep_halo   The same ring, but the halos a gather receives are kept until the
//                         matching gather_scatter, which then fetches nothing (memory traded for
//                         traffic). See "keep_halo matching" below.
//   exchange::one_shot    Every halo at once (one all_to_all_v of rows per gather), then every
//                         block, then all freed: the usual domain-parallel baseline.
// All three satisfy the interface of local_schedule (sar/dist/schedule.hpp), so every layer
// runs under them unchanged. Blocks have COMPRESSED rows (graph_block::rows, from graph_shard):
// layers must use the block-aware kernels (spmm_add(block, ...), the GAT kernels).
//
// Collectives: gather, scatter, gather_scatter and all_reduce_sum are collective over the
// communicator; every rank makes the same calls in the same order, also with zero local rows.
// Each of gather / scatter / gather_scatter makes one small all_reduce before moving data (the
// ranks agree that every x / dx has num_local rows and that the widths are equal, so a bad
// argument on one rank ends every rank with an exception instead of a hang) and one after
// (an exception thrown by a visitor on one rank is rethrown there; the other ranks, which
// completed the exchange with that rank's blocks left unvisited, throw sar::comm_error naming
// it). A communication failure inside the exchange (sar::comm_error from the communicator)
// leaves the job unusable; end it.
//
// keep_halo matching: a gather keeps its halos under the key (address, rows, columns, stride,
// scalar type) of x and a hash of x's local rows. A gather_scatter whose x has a kept key with
// an unchanged hash ON EVERY RANK (agreed in the call's first all_reduce) reuses the kept
// halos and drops them; otherwise it re-fetches, exactly like sequential. So results are
// always those of sequential; only the traffic differs. A gather of the same key replaces the
// kept entry; the first gather after any scatter / gather_scatter starts a new forward pass
// and drops every kept entry (a sequential model gathers once per layer in forward, consumes
// in backward); clear_kept_halos() drops them explicitly. Kept halos of layers whose backward
// only scatters (GCN, SAGE) are memory without benefit until the next forward.
//
// Wire format: rows travel as contiguous packed row-major T, in the plan's order, no ids. The
// packing (detail::plain_wire: encode rows of x, decode a received halo, decode-add received
// gradients into dx) is the one place a codec (fp16, b-bit stochastic) plugs in.
#pragma once

#include <algorithm>
#include <concepts>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include "sar/comm/communicator.hpp"
#include "sar/core/error.hpp"
#include "sar/core/memory.hpp"
#include "sar/core/types.hpp"
#include "sar/dist/graph_shard.hpp"
#include "sar/dist/halo_plan.hpp"
#include "sar/dist/schedule.hpp"
#include "sar/partition/graph_part.hpp"

namespace sar {

/// Exchange policies of distributed_schedule (see the top of this header).
namespace exchange {
struct sequential {};
struct keep_halo {};
struct one_shot {};
}  // namespace exchange

template <class E>
concept exchange_policy = std::same_as<E, exchange::sequential> ||
                          std::same_as<E, exchange::keep_halo> ||
                          std::same_as<E, exchange::one_shot>;

struct schedule_options {
  /// Ring schedules: remote transfers started ahead of the block being visited (d >= 0).
  /// At most d + 1 remote blocks are alive at once. Ignored by one_shot.
  int prefetch_depth = 1;
};

/// Halo payload bytes this rank sent to other ranks through the schedule (what the wire
/// carried: rows x width x sizeof(T) for plain floats). all_reduce_sum and the set-up
/// exchanges are not counted.
struct schedule_traffic {
  std::int64_t calls = 0;            ///< gather / scatter / gather_scatter calls
  std::int64_t last_call_bytes = 0;  ///< bytes of the last call
  std::int64_t feature_bytes = 0;    ///< total feature rows sent (gather, gather_scatter)
  std::int64_t gradient_bytes = 0;   ///< total gradient rows sent (scatter, gather_scatter)
  std::int64_t total_bytes() const { return feature_bytes + gradient_bytes; }
};

namespace detail {

/// The ranks agree on whether any of them failed (collective: one all_reduce). Rethrows the
/// local failure; on the other ranks throws sar::comm_error naming the first failing rank.
template <communicator Comm>
void agree_on_failure(Comm& comm, std::exception_ptr failure, const char* where) {
  std::int64_t first = failure ? comm.rank() : comm.size();
  comm.all_reduce(std::span<std::int64_t>(&first, 1), reduce_op::min);
  if (failure) std::rethrow_exception(failure);
  SAR_CHECK(first == comm.size(), comm_error, where, ": rank ", first, " failed (rank ",
            comm.rank(), " stops too)");
}

/// Plain row-major floats on the wire: the only place rows are packed and unpacked.
/// A codec replaces these three functions (and the wire element type).
struct plain_wire {
  /// wire := x rows `rows`, back to back (rows.size() x x.cols()).
  template <class T>
  static void encode_rows(const const_rows_ref<T>& x, std::span<const node_t> rows,
                          std::vector<T>& wire) {
    const Eigen::Index f = x.cols();
    wire.resize(rows.size() * static_cast<std::size_t>(f));
    if (f == 0) return;
    tbb::parallel_for(tbb::blocked_range<std::size_t>(0, rows.size(), 1024), [&](const auto& r) {
      for (std::size_t k = r.begin(); k != r.end(); ++k)
        std::memcpy(wire.data() + k * f, x.row(rows[k]).data(), sizeof(T) * f);
    });
  }
  /// The halo block (rows x cols) a received wire buffer stands for: no copy.
  template <class T>
  static Eigen::Map<const matrix<T>> decode_halo(const std::vector<T>& wire, Eigen::Index rows,
                                                 Eigen::Index cols) {
    return {wire.data(), rows, cols};
  }
  /// dx rows `rows` += the received rows (rows are unique: parallel without races).
  template <class T>
  static void decode_add_rows(std::span<const T> wire, std::span<const node_t> rows,
                              rows_ref<T>& dx) {
    const Eigen::Index f = dx.cols();
    if (f == 0) return;
    tbb::parallel_for(tbb::blocked_range<std::size_t>(0, rows.size(), 1024), [&](const auto& r) {
      for (std::size_t k = r.begin(); k != r.end(); ++k)
        dx.row(rows[k]) += Eigen::Map<const row_vector<T>>(wire.data() + k * f, f);
    });
  }
};

/// A hash of the local rows of x (content check of keep_halo), independent of thread count.
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
  return h;
}

}  // namespace detail

template <class Exchange, point_to_point_communicator Comm>
  requires exchange_policy<Exchange>
class distributed_schedule {
 public:
  using exchange_type = Exchange;
  using communicator_type = Comm;
  static constexpr bool is_sequential = std::same_as<Exchange, exchange::sequential>;
  static constexpr bool is_keep_halo = std::same_as<Exchange, exchange::keep_halo>;
  static constexpr bool is_one_shot = std::same_as<Exchange, exchange::one_shot>;

  /// Collective. Keeps references to comm, shard and plan (they must outlive the schedule and
  /// not change). Computes the out-degrees with one reverse exchange along the plan.
  /// Requires comm.rank() == shard.rank() == plan.rank, comm.size() == shard.num_parts() ==
  /// plan.num_parts, a plan built for this shard (recv_count[q] == shard.sources(q).size(),
  /// send rows inside [0, num_local), and what every rank sends equals what its peer expects),
  /// options.prefetch_depth >= 0. Throws sar::invalid_argument / sar::comm_error on EVERY rank
  /// if any rank breaks a requirement (the failing rank names the value).
  distributed_schedule(Comm& comm, const graph_shard& shard, const halo_plan& plan,
                       schedule_options options = {})
      : comm_(&comm), shard_(&shard), plan_(&plan), options_(options) {
    set_up();
  }

  /// Collective. Builds (and owns) this rank's graph_shard from part and its halo_plan
  /// (build_halo_plan), then as above. Requires part.part == comm.rank() and
  /// part.book.num_parts() == comm.size(). Throws on every rank if any rank's part is invalid.
  distributed_schedule(Comm& comm, const graph_part& part, schedule_options options = {})
      : comm_(&comm), options_(options) {
    std::exception_ptr failure;
    try {
      SAR_CHECK(part.part == comm.rank() && part.book.num_parts() == comm.size(),
                invalid_argument, "sar::distributed_schedule: rank ", comm.rank(), " of ",
                comm.size(), " got part ", part.part, " of ", part.book.num_parts());
      owned_shard_ = std::make_unique<graph_shard>(part);
    } catch (...) {
      failure = std::current_exception();
    }
    detail::agree_on_failure(comm, failure, "sar::distributed_schedule");
    owned_plan_ = std::make_unique<halo_plan>(build_halo_plan(comm, *owned_shard_));
    shard_ = owned_shard_.get();
    plan_ = owned_plan_.get();
    set_up();
  }

  distributed_schedule(const distributed_schedule&) = delete;
  distributed_schedule& operator=(const distributed_schedule&) = delete;
  distributed_schedule(distributed_schedule&&) = default;
  distributed_schedule& operator=(distributed_schedule&&) = default;

  // --- the schedule interface (as local_schedule) ---
  node_t num_local() const { return shard_->num_local(); }
  node_t first_global() const { return shard_->first_global(); }
  /// The dataset id of local row `row` (keys random numbers; see graph_block).
  node_t node_id(node_t row) const { return shard_->node_ids()[static_cast<std::size_t>(row)]; }
  node_t num_global() const { return shard_->book().num_nodes(); }
  /// Global in-degree of every local node (all in-edges live on the owner).
  std::span<const node_t> in_degrees() const { return shard_->in_degree(); }
  /// Global out-degree of every local node (edges out of it into ANY rank), from the set-up
  /// exchange.
  std::span<const node_t> out_degrees() const { return out_degrees_; }

  /// Sums values element-wise over all ranks, in place. Collective. Not counted as traffic.
  template <wire_scalar T>
  void all_reduce_sum(std::span<T> values) {
    comm_->all_reduce(values, reduce_op::sum);
  }

  /// visit(block, halo) for every block with edges: halo = the rows of x the block's columns
  /// index (x itself for the local block). x: num_local() rows, the same width on every rank.
  /// Collective. Throws sar::invalid_argument on every rank if any rank's x is mis-shaped.
  template <class X, class Visit>
  void gather(const Eigen::MatrixBase<X>& x, Visit&& visit) {
    using T = typename X::Scalar;
    check_scalar<T>();
    const const_rows_ref<T> xr(x);
    if constexpr (is_keep_halo) {
      if (backward_seen_) clear_kept_halos();
      backward_seen_ = false;
    }
    agree_on_call("sar::distributed_schedule::gather", xr.rows(), xr.cols(), true, false);
    auto call = [&](const graph_block& b, const const_rows_ref<T>* halo, rows_ref<T>*) {
      visit(b, *halo);
    };
    if constexpr (is_keep_halo) {
      kept_halos<T> entry = key_of(xr);
      entry.blocks.resize(plan_->num_parts);
      run<T>(kind::gather, &xr, nullptr, call, nullptr, &entry);
      auto& kept = kept_of<T>();
      std::erase_if(kept, [&](const kept_halos<T>& k) { return k.same_key(entry); });
      kept_blocks_ += static_cast<int>(plan_->num_parts - 1);
      kept.push_back(std::move(entry));
    } else {
      run<T>(kind::gather, &xr, nullptr, call, nullptr, nullptr);
    }
  }

  /// visit(block, dhalo) for every block with edges; the visitor ADDS into dhalo (zeroed for
  /// remote blocks; dx itself for the local block); remote dhalo rows are sent to their owners
  /// and ADDED into dx. dx: num_local() rows. Collective; throws as gather.
  template <class DX, class Visit>
  void scatter(Eigen::MatrixBase<DX>& dx, Visit&& visit) {
    using T = typename DX::Scalar;
    check_scalar<T>();
    rows_ref<T> dxr(dx.derived());
    if constexpr (is_keep_halo) backward_seen_ = true;
    agree_on_call("sar::distributed_schedule::scatter", dxr.rows(), dxr.cols(), true, false);
    auto call = [&](const graph_block& b, const const_rows_ref<T>*, rows_ref<T>* dhalo) {
      visit(b, *dhalo);
    };
    run<T>(kind::scatter, nullptr, &dxr, call, nullptr, nullptr);
  }

  /// visit(block, halo, dhalo): both at once. The halo is fetched again (rematerialised), or
  /// for keep_halo taken from the matching gather when every rank has it. Collective.
  template <class X, class DX, class Visit>
  void gather_scatter(const Eigen::MatrixBase<X>& x, Eigen::MatrixBase<DX>& dx, Visit&& visit) {
    using T = typename X::Scalar;
    static_assert(std::is_same_v<T, typename DX::Scalar>,
                  "sar::distributed_schedule::gather_scatter needs x and dx of one scalar type.");
    check_scalar<T>();
    const const_rows_ref<T> xr(x);
    rows_ref<T> dxr(dx.derived());
    constexpr const char* where = "sar::distributed_schedule::gather_scatter";
    auto call = [&](const graph_block& b, const const_rows_ref<T>* halo, rows_ref<T>* dhalo) {
      visit(b, *halo, *dhalo);
    };
    if constexpr (is_keep_halo) {
      backward_seen_ = true;
      auto& kept = kept_of<T>();
      const kept_halos<T> key = key_of(xr);
      auto found = std::find_if(kept.begin(), kept.end(), [&](const kept_halos<T>& k) {
        return k.same_key(key) && k.hash == key.hash;
      });
      const bool all_hit =
          agree_on_call(where, xr.rows(), xr.cols(), dx_shape_ok(xr, dxr), found != kept.end());
      if (all_hit) {
        kept_halos<T> entry = std::move(*found);
        kept.erase(found);
        kept_blocks_ -= static_cast<int>(plan_->num_parts - 1);
        run<T>(kind::gather_scatter, &xr, &dxr, call, &entry, nullptr);
        return;
      }
      // Not every rank has it (or x changed somewhere): stale, drop it and fetch again.
      if (found != kept.end()) {
        kept.erase(found);
        kept_blocks_ -= static_cast<int>(plan_->num_parts - 1);
      }
    } else {
      agree_on_call(where, xr.rows(), xr.cols(), dx_shape_ok(xr, dxr), false);
    }
    run<T>(kind::gather_scatter, &xr, &dxr, call, nullptr, nullptr);
  }

  // --- accessors beyond the interface ---
  Comm& communicator() const { return *comm_; }
  const graph_shard& shard() const { return *shard_; }
  const halo_plan& plan() const { return *plan_; }
  int prefetch_depth() const { return options_.prefetch_depth; }
  /// Rows this rank sends per gather (= per feature exchange); bytes = rows x width x sizeof(T).
  node_t rows_sent_per_gather() const { return plan_->total_send(); }
  /// Rows this rank receives per gather (the halo).
  node_t rows_received_per_gather() const { return plan_->total_recv(); }

  const schedule_traffic& traffic() const { return traffic_; }
  /// Starts a new count (e.g. per epoch); not collective.
  void reset_traffic() { traffic_ = {}; }

  /// Remote blocks whose buffers are alive now / at most since the last reset (the ring's
  /// open slots, one_shot's P - 1 blocks during a call, plus keep_halo's kept blocks).
  int live_blocks() const { return open_blocks_ + kept_blocks_; }
  int peak_live_blocks() const { return peak_live_; }
  void reset_peak_live_blocks() { peak_live_ = live_blocks(); }

  /// keep_halo: kept gathers and their bytes; drops them all (not collective: the next
  /// gather_scatter of a dropped x re-fetches on every rank).
  std::size_t kept_halo_count() const {
    return std::get<0>(kept_).size() + std::get<1>(kept_).size();
  }
  std::size_t kept_halo_bytes() const {
    std::size_t total = 0;
    auto add = [&](const auto& list) {
      for (const auto& e : list)
        for (const auto& b : e.blocks) total += b.size() * sizeof(b[0]);
    };
    add(std::get<0>(kept_));
    add(std::get<1>(kept_));
    return total;
  }
  void clear_kept_halos() {
    std::get<0>(kept_).clear();
    std::get<1>(kept_).clear();
    kept_blocks_ = 0;
  }

 private:
  enum class kind { gather, scatter, gather_scatter };
  static constexpr int feature_tag = 0x5a01;
  static constexpr int gradient_tag = 0x5a02;

  template <class T>
  static void check_scalar() {
    static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>,
                  "sar::distributed_schedule moves float or double rows only.");
  }

  /// A gather's halos kept for its gather_scatter (keep_halo).
  template <class T>
  struct kept_halos {
    const void* data = nullptr;
    Eigen::Index rows = 0, cols = 0, stride = 0;
    std::uint64_t hash = 0;
    std::vector<std::vector<T>> blocks;  ///< wire buffer of the block from each rank
    bool same_key(const kept_halos& o) const {
      return data == o.data && rows == o.rows && cols == o.cols && stride == o.stride;
    }
  };
  template <class T>
  static kept_halos<T> key_of(const const_rows_ref<T>& x) {
    kept_halos<T> k;
    k.data = x.data();
    k.rows = x.rows();
    k.cols = x.cols();
    k.stride = x.outerStride();
    k.hash = detail::content_hash<T>(x);
    return k;
  }
  template <class T>
  std::vector<kept_halos<T>>& kept_of() {
    if constexpr (std::is_same_v<T, float>) return std::get<0>(kept_);
    else return std::get<1>(kept_);
  }

  template <class T>
  static bool dx_shape_ok(const const_rows_ref<T>& x, const rows_ref<T>& dx) {
    return dx.rows() == x.rows() && dx.cols() == x.cols();
  }

  /// The call's first collective: every rank checks rows == num_local() and dx_ok (dx shaped
  /// like x), the ranks agree on equal widths and on whether every rank has `hit`. One
  /// all_reduce of four int64. Throws on every rank if any rank's arguments are wrong.
  bool agree_on_call(const char* where, Eigen::Index rows, Eigen::Index cols, bool dx_ok,
                     bool hit) {
    const bool ok = rows == num_local() && dx_ok;
    std::int64_t v[4] = {ok ? comm_->size() : comm_->rank(), cols, -cols, hit ? 1 : 0};
    comm_->all_reduce(std::span<std::int64_t>(v, 4), reduce_op::min);
    SAR_CHECK(ok, invalid_argument, where, ": rank ", comm_->rank(), " passes ", rows,
              " rows", dx_ok ? "" : " and a dx not shaped like x", ", expected ", num_local(),
              " rows");
    SAR_CHECK(v[0] == comm_->size(), invalid_argument, where, ": rank ", v[0],
              " passed mis-shaped arguments (rank ", comm_->rank(), " stops too)");
    SAR_CHECK(v[1] == -v[2], invalid_argument, where, ": ranks pass widths from ", v[1], " to ",
              -v[2], " (rank ", comm_->rank(), " has ", cols, ")");
    return v[3] == 1;
  }

  void note_open(int delta) {
    open_blocks_ += delta;
    peak_live_ = std::max(peak_live_, live_blocks());
  }

  /// One remote round's buffers (a slot of the ring's pool) and requests.
  template <class T>
  struct slot {
    int round = 0;  ///< 0: idle
    std::vector<T> send_features, halo, dhalo, recv_gradients;
    typename Comm::request send_f, recv_f, send_g, recv_g;
  };

  template <class T, class Call>
  void run(kind k, const const_rows_ref<T>* x, rows_ref<T>* dx, Call& call,
           kept_halos<T>* use_kept, kept_halos<T>* keep_into) {
    std::exception_ptr failure;
    const std::int64_t before = traffic_.total_bytes();
    if constexpr (is_one_shot) run_one_shot<T>(k, x, dx, call, failure);
    else run_ring<T>(k, x, dx, call, use_kept, keep_into, failure);
    ++traffic_.calls;
    traffic_.last_call_bytes = traffic_.total_bytes() - before;
    detail::agree_on_failure(*comm_, failure, "sar::distributed_schedule (a block visitor)");
  }

  template <class F>
  static void guarded(std::exception_ptr& failure, F&& f) {
    if (failure) return;  // after a failure the exchange completes, visits are skipped
    try {
      f();
    } catch (...) {
      failure = std::current_exception();
    }
  }

  template <class T, class Call>
  void visit_local(kind k, const const_rows_ref<T>* x, rows_ref<T>* dx, Call& call,
                   std::exception_ptr& failure) {
    const graph_block& b = blocks_[comm_->rank()];
    if (b.edges->num_edges() == 0) return;
    guarded(failure, [&] { call(b, k == kind::scatter ? nullptr : x, dx); });
  }

  template <class T, class Call>
  void run_ring(kind k, const const_rows_ref<T>* x, rows_ref<T>* dx, Call& call,
                kept_halos<T>* use_kept, kept_halos<T>* keep_into, std::exception_ptr& failure) {
    const int p = comm_->rank(), P = comm_->size();
    const int d = std::min(options_.prefetch_depth, std::max(P - 1, 0));  // no overflow below
    const bool features = k != kind::scatter && use_kept == nullptr;
    const bool gradients = k != kind::gather;
    const Eigen::Index f = x ? x->cols() : dx->cols();
    const int num_slots = P > 1 ? std::min(d + 1, P - 1) : 0;
    std::vector<slot<T>> slots(static_cast<std::size_t>(num_slots));
    auto slot_of = [&](int r) -> slot<T>& { return slots[static_cast<std::size_t>((r - 1) % num_slots)]; };
    auto source_of = [&](int r) { return (p - r + P) % P; };
    auto target_of = [&](int r) { return (p + r) % P; };

    // Completes a slot's transfers; adds received gradients into dx (in round order).
    auto retire = [&](slot<T>& s) {
      if (s.round == 0) return;
      comm_->wait(s.send_f);
      comm_->wait(s.recv_f);
      comm_->wait(s.send_g);
      comm_->wait(s.recv_g);
      if (gradients) {
        const auto& rows = plan_->send_rows[target_of(s.round)];
        detail::plain_wire::decode_add_rows<T>(s.recv_gradients, rows, *dx);
      }
      s.round = 0;
      note_open(-1);
    };
    // Starts round r's transfers that do not depend on its visit.
    auto open = [&](int r) {
      slot<T>& s = slot_of(r);
      retire(s);
      s.round = r;
      note_open(+1);
      const int to = target_of(r), from = source_of(r);
      const auto& rows = plan_->send_rows[to];
      const std::size_t n_send = rows.size() * static_cast<std::size_t>(f);
      if (features) {
        huge_page_resize(s.halo, static_cast<std::size_t>(plan_->recv_count[from]) * f);
        if (!s.halo.empty()) s.recv_f = comm_->irecv(std::span<T>(s.halo), from, feature_tag);
        if (n_send > 0) {
          detail::plain_wire::encode_rows<T>(*x, rows, s.send_features);
          s.send_f = comm_->isend(std::span<const T>(s.send_features), to, feature_tag);
          traffic_.feature_bytes += static_cast<std::int64_t>(n_send * sizeof(T));
        }
      }
      if (gradients) {
        huge_page_resize(s.recv_gradients, n_send);
        if (n_send > 0)
          s.recv_g = comm_->irecv(std::span<T>(s.recv_gradients), to, gradient_tag);
      }
    };
    // Visits round r's block, then sends its gradient back to the owner.
    auto visit = [&](int r) {
      slot<T>& s = slot_of(r);
      const int from = source_of(r);
      const Eigen::Index halo_rows = plan_->recv_count[from];
      if (features) comm_->wait(s.recv_f);
      const std::vector<T>& wire = use_kept ? use_kept->blocks[from] : s.halo;
      const bool has_halo = k != kind::scatter;
      const const_rows_ref<T> halo(
          detail::plain_wire::decode_halo<T>(wire, has_halo ? halo_rows : 0, f));
      if (gradients) {
        s.dhalo.clear();  // so the resize writes zeros everywhere
        huge_page_resize(s.dhalo, static_cast<std::size_t>(halo_rows) * f);
      }
      Eigen::Map<matrix<T>> dmap(s.dhalo.data(), gradients ? halo_rows : 0, f);
      rows_ref<T> dhalo(dmap);
      const graph_block& b = blocks_[from];
      if (b.edges->num_edges() > 0)
        guarded(failure, [&] { call(b, has_halo ? &halo : nullptr, &dhalo); });
      if (gradients && !s.dhalo.empty()) {
        s.send_g = comm_->isend(std::span<const T>(s.dhalo), from, gradient_tag);
        traffic_.gradient_bytes += static_cast<std::int64_t>(s.dhalo.size() * sizeof(T));
      }
      if (keep_into) {
        keep_into->blocks[from] = std::move(s.halo);
        s.halo = {};
      }
    };

    for (int r = 1; r <= std::min(d, P - 1); ++r) open(r);
    visit_local<T>(k, x, dx, call, failure);  // round 0 overlaps the first transfers
    for (int r = 1; r < P; ++r) {
      if (r + d <= P - 1) open(r + d);
      visit(r);
    }
    for (int r = std::max(1, P - num_slots); r < P; ++r) retire(slot_of(r));
  }

  template <class T, class Call>
  void run_one_shot(kind k, const const_rows_ref<T>* x, rows_ref<T>* dx, Call& call,
                    std::exception_ptr& failure) {
    const int p = comm_->rank(), P = comm_->size();
    const bool features = k != kind::scatter;
    const bool gradients = k != kind::gather;
    const Eigen::Index f = x ? x->cols() : dx->cols();
    std::vector<std::int64_t> send_counts(P), recv_counts(P), recv_offset(P + 1, 0);
    std::vector<node_t> all_send_rows;
    all_send_rows.reserve(static_cast<std::size_t>(plan_->total_send()));
    for (int q = 0; q < P; ++q) {
      send_counts[q] = static_cast<std::int64_t>(plan_->send_rows[q].size()) * f;
      recv_counts[q] = static_cast<std::int64_t>(plan_->recv_count[q]) * f;
      recv_offset[q + 1] = recv_offset[q] + recv_counts[q];
      all_send_rows.insert(all_send_rows.end(), plan_->send_rows[q].begin(),
                           plan_->send_rows[q].end());
    }
    note_open(P - 1);
    std::vector<T> halos, dhalos;
    if (features) {
      std::vector<T> out;
      detail::plain_wire::encode_rows<T>(*x, all_send_rows, out);
      huge_page_resize(halos, static_cast<std::size_t>(recv_offset[P]));
      comm_->all_to_all_v(std::span<const T>(out), std::span<const std::int64_t>(send_counts),
                          std::span<T>(halos), std::span<const std::int64_t>(recv_counts));
      traffic_.feature_bytes += static_cast<std::int64_t>(out.size() * sizeof(T));
    }
    if (gradients) huge_page_resize(dhalos, static_cast<std::size_t>(recv_offset[P]));  // zeros: new
    visit_local<T>(k, x, dx, call, failure);
    for (int r = 1; r < P; ++r) {
      const int q = (p - r + P) % P;
      const graph_block& b = blocks_[q];
      if (b.edges->num_edges() == 0) continue;
      const Eigen::Index rows = plan_->recv_count[q];
      const const_rows_ref<T> halo(
          Eigen::Map<const matrix<T>>(halos.data() + (features ? recv_offset[q] : 0),
                                      features ? rows : 0, f));
      Eigen::Map<matrix<T>> dmap(dhalos.data() + (gradients ? recv_offset[q] : 0),
                                 gradients ? rows : 0, f);
      rows_ref<T> dhalo(dmap);
      guarded(failure, [&] { call(b, k == kind::scatter ? nullptr : &halo, &dhalo); });
    }
    halos = {};
    if (gradients) {
      std::vector<T> in(all_send_rows.size() * static_cast<std::size_t>(f));
      comm_->all_to_all_v(std::span<const T>(dhalos), std::span<const std::int64_t>(recv_counts),
                          std::span<T>(in), std::span<const std::int64_t>(send_counts));
      traffic_.gradient_bytes += static_cast<std::int64_t>(
          (recv_offset[P] - recv_counts[p]) * static_cast<std::int64_t>(sizeof(T)));
      detail::plain_wire::decode_add_rows<T>(in, all_send_rows, *dx);
    }
    note_open(-(P - 1));
  }

  void set_up() {
    constexpr const char* where = "sar::distributed_schedule";
    Comm& comm = *comm_;
    const graph_shard& shard = *shard_;
    const halo_plan& plan = *plan_;
    const int p = comm.rank(), P = comm.size();
    std::exception_ptr failure;
    try {
      SAR_CHECK(options_.prefetch_depth >= 0, invalid_argument, where, ": prefetch_depth ",
                options_.prefetch_depth, " on rank ", p);
      SAR_CHECK(shard.rank() == p && shard.num_parts() == P && plan.rank == p &&
                    plan.num_parts == P && plan.send_rows.size() == static_cast<std::size_t>(P) &&
                    plan.recv_count.size() == static_cast<std::size_t>(P),
                invalid_argument, where, ": communicator rank ", p, " of ", P, ", shard of part ",
                shard.rank(), " of ", shard.num_parts(), ", plan of rank ", plan.rank, " of ",
                plan.num_parts);
      SAR_CHECK(plan.send_rows[p].empty() && plan.recv_count[p] == 0, invalid_argument, where,
                ": rank ", p, "'s plan sends to or receives from itself");
      for (int q = 0; q < P; ++q) {
        SAR_CHECK(plan.recv_count[q] == static_cast<node_t>(shard.sources(q).size()),
                  invalid_argument, where, ": rank ", p, "'s plan expects ", plan.recv_count[q],
                  " rows from rank ", q, " but the shard's block has ", shard.sources(q).size(),
                  " columns");
        for (node_t row : plan.send_rows[q])
          SAR_CHECK(row >= 0 && row < shard.num_local(), invalid_argument, where, ": rank ", p,
                    "'s plan sends local row ", row, " to rank ", q, " (", shard.num_local(),
                    " local rows)");
      }
    } catch (...) {
      failure = std::current_exception();
    }
    detail::agree_on_failure(comm, failure, where);

    // What each rank sends must be what its peer expects (else messages would not match).
    std::vector<std::int64_t> sizes(P);
    for (int q = 0; q < P; ++q) sizes[q] = static_cast<std::int64_t>(plan.send_rows[q].size());
    const std::vector<std::int64_t> incoming = comm.all_to_all(std::span<const std::int64_t>(sizes));
    try {
      for (int q = 0; q < P; ++q)
        SAR_CHECK(incoming[q] == plan.recv_count[q], comm_error, where, ": rank ", q,
                  " will send ", incoming[q], " rows to rank ", p, ", which expects ",
                  plan.recv_count[q], " (plans of different shards?)");
    } catch (...) {
      failure = std::current_exception();
    }
    detail::agree_on_failure(comm, failure, where);

    blocks_.resize(P);
    for (int q = 0; q < P; ++q) {
      const shard_block& sb = shard.block(q);
      graph_block& b = blocks_[q];
      b.edges = &sb.adjacency;
      b.transposed = &sb.transposed;
      for (spmm_tile_cache** tiles : {&b.edge_tiles, &b.transposed_tiles})
        *tiles = tile_caches_.emplace_back(std::make_unique<spmm_tile_cache>()).get();
      b.destination_ids = shard.node_ids();
      b.rows = sb.rows;
    }

    // Dataset ids of the halo rows (owners send their rows' ids once, along the plan).
    halo_ids_ = to_halo_rows(comm, plan, [&](node_t row) { return shard.node_ids()[row]; });
    for (int q = 0; q < P; ++q)
      blocks_[q].source_ids = q == p ? std::span<const node_t>(shard.node_ids())
                                     : std::span<const node_t>(halo_ids_[q]);

    // Out-degrees: local block counts, plus one reverse exchange of per-halo-row counts.
    const node_t n = shard.num_local();
    out_degrees_.assign(static_cast<std::size_t>(n), 0);
    const csr& local_t = shard.block(p).transposed;
    for (node_t c = 0; c < std::min<node_t>(local_t.num_rows, n); ++c)
      out_degrees_[c] = local_t.degree(c);
    std::vector<std::int64_t> send_counts(P), recv_counts(P), counts;
    counts.reserve(static_cast<std::size_t>(plan.total_recv()));
    for (int q = 0; q < P; ++q) {
      send_counts[q] = plan.recv_count[q];
      recv_counts[q] = static_cast<std::int64_t>(plan.send_rows[q].size());
      if (q == p) continue;
      const csr& t = shard.block(q).transposed;
      for (node_t c = 0; c < plan.recv_count[q]; ++c) counts.push_back(t.degree(c));
    }
    std::vector<std::int64_t> received(static_cast<std::size_t>(plan.total_send()));
    comm.all_to_all_v(std::span<const std::int64_t>(counts),
                      std::span<const std::int64_t>(send_counts), std::span<std::int64_t>(received),
                      std::span<const std::int64_t>(recv_counts));
    std::size_t at = 0;
    for (int q = 0; q < P; ++q)
      for (node_t row : plan.send_rows[q]) out_degrees_[row] += received[at++];

    // Out-degrees of the halo rows, sent by their owners the same way.
    halo_degrees_ = to_halo_rows(comm, plan, [&](node_t row) { return out_degrees_[row]; });
    for (int q = 0; q < P; ++q)
      blocks_[q].source_degrees = q == p ? std::span<const node_t>(out_degrees_)
                                         : std::span<const node_t>(halo_degrees_[q]);
  }

  /// Sends value(row) for every row of the plan's send lists to the rank that receives it;
  /// returns, for each rank q, the values of block q's halo rows in halo order. Collective.
  template <class Value>
  static std::vector<std::vector<node_t>> to_halo_rows(Comm& comm, const halo_plan& plan,
                                                       Value&& value) {
    const int P = plan.num_parts;
    std::vector<std::int64_t> send_counts(P), recv_counts(P), values;
    values.reserve(static_cast<std::size_t>(plan.total_send()));
    for (int q = 0; q < P; ++q) {
      send_counts[q] = static_cast<std::int64_t>(plan.send_rows[q].size());
      recv_counts[q] = plan.recv_count[q];
      for (node_t row : plan.send_rows[q]) values.push_back(value(row));
    }
    std::vector<std::int64_t> received(static_cast<std::size_t>(plan.total_recv()));
    comm.all_to_all_v(std::span<const std::int64_t>(values),
                      std::span<const std::int64_t>(send_counts), std::span<std::int64_t>(received),
                      std::span<const std::int64_t>(recv_counts));
    std::vector<std::vector<node_t>> out(static_cast<std::size_t>(P));
    std::size_t at = 0;
    for (int q = 0; q < P; ++q) {
      out[q].assign(received.begin() + at, received.begin() + at + recv_counts[q]);
      at += static_cast<std::size_t>(recv_counts[q]);
    }
    return out;
  }

  Comm* comm_;
  std::unique_ptr<graph_shard> owned_shard_;
  std::unique_ptr<halo_plan> owned_plan_;
  const graph_shard* shard_ = nullptr;
  const halo_plan* plan_ = nullptr;
  schedule_options options_;
  std::vector<graph_block> blocks_;
  std::vector<std::unique_ptr<spmm_tile_cache>> tile_caches_;  // the blocks' SpMM tilings
  std::vector<std::vector<node_t>> halo_ids_;  // [q]: dataset ids of block q's halo rows
  std::vector<node_t> out_degrees_;
  std::vector<std::vector<node_t>> halo_degrees_;  // [q]: out-degrees of block q's halo rows
  schedule_traffic traffic_;
  int open_blocks_ = 0, kept_blocks_ = 0, peak_live_ = 0;
  bool backward_seen_ = false;
  std::tuple<std::vector<kept_halos<float>>, std::vector<kept_halos<double>>> kept_;
};

template <point_to_point_communicator Comm>
using sequential_schedule = distributed_schedule<exchange::sequential, Comm>;
template <point_to_point_communicator Comm>
using keep_halo_schedule = distributed_schedule<exchange::keep_halo, Comm>;
template <point_to_point_communicator Comm>
using one_shot_schedule = distributed_schedule<exchange::one_shot, Comm>;

}  // namespace sar
