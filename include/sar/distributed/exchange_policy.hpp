// The exchange policy: how each call of the exchange engine (distributed_schedule.hpp) runs,
// decided from three options and the call's exchange_key alone. It neither communicates nor
// keeps state, so it is tested without MPI. For one call it answers:
//   exact        plain rows in both directions instead of the configured codecs: evaluation
//                calls (exact_evaluation) and the calls that move the model's input rows
//                for the first graph layer (exact_first_layer)
//   input_cache  those input calls' own cache (keep_unchanged_input: the model's features
//                travel once while they hash the same) instead of the configured cache policy
//                (exact_first_layer)
//   pipelined    the exchange keeps pipelined state, its transfers outliving the call:
//                training calls under bounded staleness S > 1
//   stale        the call visits the rows (and adds the gradients) the exchange's previous
//                call sent, while its own travel: a pipelined call whose epoch is not a
//                multiple of S, once the pipelined state holds or has in flight every
//                direction the call needs (a missing halo is never replaced by zeros). The
//                engine goes stale only when every rank can.
// Epoch 0 and every S-th epoch are synchronous. The input calls are named by the model and
// the layer (exchange_key::first_layer_input: x itself, behind no layer with parameters),
// never guessed from the keys seen; rows a layer computes (x W, messages) always travel under
// the configured codecs, so exact_first_layer costs one transfer of the features, not an exact
// exchange every epoch.
//
// exchange_options gathers the choices of the engine's pieces: transport, codecs, cache, and
// this policy. The factories below are the usual combinations.
#pragma once

#include <cstdint>
#include <exception>
#include <span>
#include <string_view>
#include <utility>

#include "sar/comm/communicator.hpp"
#include "sar/core/error.hpp"
#include "sar/distributed/codecs.hpp"
#include "sar/distributed/halo_cache.hpp"
#include "sar/distributed/ring_transport.hpp"
#include "sar/distributed/wire_codec.hpp"
#include "sar/schedule/schedule.hpp"

namespace sar {

/// What an exchange's pipelined state can give a stale call.
struct pipelined_supply {
  bool features = false;   ///< halo rows arrived or in flight
  bool gradients = false;  ///< returned gradients arrived or in flight
};

/// The per-call decisions of the exchange engine (see the top of this file). Plain data;
/// every rank must hold the same.
struct exchange_policy {
  /// 1: synchronous. S > 1: bounded staleness (training epochs not a multiple of S are stale).
  int staleness = 1;
  /// The first graph layer's input rows (exchange_key::first_layer_input) move plain and
  /// are kept while unchanged.
  bool exact_first_layer = false;
  /// Evaluation calls move plain rows whatever the codecs.
  bool exact_evaluation = true;

  /// How one call runs, before the pipelined state is consulted.
  struct call_mode {
    bool exact = false;        ///< plain rows both ways
    bool input_cache = false;  ///< the input rows' cache, not the configured one
    bool pipelined = false;    ///< the exchange keeps pipelined state
  };

  /// The mode of a call with `key`.
  call_mode mode(const exchange_key& key) const {
    const bool input = exact_first_layer && key.first_layer_input;
    return {.exact = input || (!key.training && exact_evaluation),
            .input_cache = input,
            .pipelined = staleness > 1 && key.training};
  }

  /// Whether a call of `kind` with `key` is stale, given what its exchange's pipelined state
  /// supplies: pipelined, an epoch not a multiple of S, and every direction it needs supplied
  /// (gather: features; scatter: gradients; gather_scatter: both).
  bool stale(const exchange_key& key, exchange_kind kind, pipelined_supply supply) const {
    if (!mode(key).pipelined || key.epoch % static_cast<std::uint64_t>(staleness) == 0)
      return false;
    const bool reads_halo = kind != exchange_kind::scatter;
    const bool returns_gradients = kind != exchange_kind::gather;
    return (!reads_halo || supply.features) && (!returns_gradients || supply.gradients);
  }
};

/// What every rank can do in a call (agree_on_call).
struct call_agreement {
  bool reuse = false;  ///< every rank reuses a kept halo
  bool stale = false;  ///< every rank goes stale
};

/// A call's first collective: the ranks agree that every rank passes `rows` == its
/// `expected_rows` and dx_ok (dx, if any, shaped like x), that the widths `cols` are equal,
/// and whether EVERY rank can reuse a kept halo (`hit`) and go stale (`stale`; reuse wins).
/// One all_reduce of five int64. Collective. Throws sar::invalid_argument on every rank,
/// naming `where` and the rank at fault.
template <communicator Comm>
call_agreement agree_on_call(Comm& comm, const char* where, std::int64_t rows,
                             std::int64_t expected_rows, bool dx_ok, std::int64_t cols, bool hit,
                             bool stale) {
  const bool ok = rows == expected_rows && dx_ok;
  std::int64_t v[5] = {ok ? comm.size() : comm.rank(), cols, -cols, hit ? 1 : 0, stale ? 1 : 0};
  comm.all_reduce(std::span<std::int64_t>(v, 5), reduce_op::min);
  SAR_CHECK(ok, invalid_argument, where, ": rank ", comm.rank(), " passes ", rows, " rows",
            dx_ok ? "" : " and a dx not shaped like x", ", expected ", expected_rows, " rows");
  SAR_CHECK(v[0] == comm.size(), invalid_argument, where, ": rank ", v[0],
            " passed mis-shaped arguments (rank ", comm.rank(), " stops too)");
  SAR_CHECK(v[1] == -v[2], invalid_argument, where, ": ranks pass widths from ", v[1], " to ",
            -v[2], " (rank ", comm.rank(), " has ", cols, ")");
  return {v[3] == 1, v[3] != 1 && v[4] == 1};
}

/// A stale call's check of its arguments on this rank alone (it makes no collective): `rows`
/// == `expected_rows`, dx_ok, and `cols` == its exchange's width `expected_cols`. Throws
/// sar::invalid_argument naming `where`, `rank` and the shapes.
inline void check_stale_call(const char* where, int rank, std::int64_t rows,
                             std::int64_t expected_rows, bool dx_ok, std::int64_t cols,
                             std::int64_t expected_cols) {
  SAR_CHECK(rows == expected_rows && dx_ok && cols == expected_cols, invalid_argument, where,
            ": rank ", rank, " passes ", rows, " rows and ", cols, " columns",
            dx_ok ? "" : " and a dx not shaped like x", " to a stale call, expected ",
            expected_rows, " rows and ", expected_cols, " columns");
}

/// How a distributed_schedule exchanges halos: one choice per piece. Move-only (it holds a
/// codec and a cache). Every rank must pass the same options: each rank's are validated
/// (check_exchange_options), but none is compared across ranks.
struct exchange_options {
  /// How blocks travel (ring with prefetch, or all at once).
  transport_options transport;
  any_wire_codec feature_codec;   ///< forward halo features (training calls)
  any_wire_codec gradient_codec;  ///< backward halo feature-gradients (training calls)
  /// Fetch or reuse each call's halo (default: keep nothing).
  any_halo_cache cache;
  /// Exactness, the first graph layer, staleness.
  exchange_policy policy;
};

/// Every rank checks its own options: the transport's (transport_options::check) and
/// staleness >= 1. Collective. Throws sar::invalid_argument on every rank if one rank's are
/// invalid (that rank's message names it and the values).
template <communicator Comm>
void check_exchange_options(Comm& comm, const exchange_options& o) {
  constexpr const char* where = "sar::distributed_schedule";
  std::exception_ptr failure;
  detail::guarded(failure, [&] {
    o.transport.check(where, comm.rank());
    SAR_CHECK(o.policy.staleness >= 1, invalid_argument, where, ": staleness ",
              o.policy.staleness, " (>= 1) on rank ", comm.rank());
  });
  detail::agree_on_failure(comm, failure, where);
}

/// The failures of calls that make no collective of their own (stale calls): kept on this
/// rank until the schedule's next collective agrees on them.
class deferred_failures {
 public:
  /// A call ran on its own; `failure` is its exception on this rank, if any (the first kept).
  void record(std::exception_ptr failure) {
    pending_ = true;
    if (!first_) first_ = std::move(failure);
  }
  /// If calls ran on their own since the last agreement: the ranks agree on their failures.
  /// Collective (every rank made the same calls). Throws on every rank, naming `where`, if
  /// one rank's failed.
  template <communicator Comm>
  void agree(Comm& comm, const char* where) {
    if (!std::exchange(pending_, false)) return;
    detail::agree_on_failure(comm, std::exchange(first_, nullptr), where);
  }

 private:
  bool pending_ = false;
  std::exception_ptr first_;
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
  o.policy = {.staleness = staleness, .exact_first_layer = true};
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

}  // namespace sar
