// The ends of one exchange call: what a transport (ring_transport.hpp lists the callbacks)
// asks of the engine for each peer, answered with the halo plan (distributed_graph), the
// call's codecs and cache decisions, and the layer's visitor. Used by distributed_schedule;
// local to one rank (the transport does the communication).
//
// Failures: a callback that throws (codec or visitor) records the exception in `failure` and
// leaves its wire at the announced size, so the peers' receives still match; the engine
// agrees on the failure after the exchange. With `failure` set before the call, no callback
// reads x, dx or the codecs: the rank still sends and receives blocks of the announced sizes.
#pragma once

#include <exception>
#include <numeric>
#include <optional>
#include <span>
#include <type_traits>
#include <vector>

#include "sar/core/error.hpp"
#include "sar/core/function_ref.hpp"
#include "sar/core/memory.hpp"
#include "sar/core/types.hpp"
#include "sar/distributed/distributed_graph.hpp"
#include "sar/distributed/halo_cache.hpp"
#include "sar/distributed/ring_transport.hpp"
#include "sar/distributed/wire_codec.hpp"

namespace sar {

/// Buffers an engine reuses across calls: decoded blocks of codecs that are not raw rows, and
/// the rows 0 .. n-1 of a whole gradient block.
class halo_scratch {
 public:
  /// Decoded feature rows (float or double).
  template <class T>
  matrix<T>& features() {
    if constexpr (std::is_same_v<T, float>) return features_f_;
    else return features_d_;
  }
  /// Gradient rows before encoding (float or double).
  template <class T>
  matrix<T>& gradients() {
    if constexpr (std::is_same_v<T, float>) return gradients_f_;
    else return gradients_d_;
  }
  /// 0, 1, ..., n - 1.
  std::span<const node_t> identity_rows(Eigen::Index n) {
    if (static_cast<Eigen::Index>(identity_.size()) < n) {
      identity_.resize(static_cast<std::size_t>(n));
      std::iota(identity_.begin(), identity_.end(), node_t{0});
    }
    return std::span<const node_t>(identity_).first(static_cast<std::size_t>(n));
  }

 private:
  matrix<float> features_f_, gradients_f_;
  matrix<double> features_d_, gradients_d_;
  std::vector<node_t> identity_;
};

/// A layer's visitor of one exchange: call(block, halo*, dhalo*), halo null for a scatter,
/// dhalo null for a gather's local block. A reference, so the engine is compiled once per
/// scalar type rather than once per visitor (it calls it once per block).
template <class T>
using exchange_visitor =
    function_ref<void(const graph_block&, const const_rows_ref<T>*, rows_ref<T>*)>;

/// One call's ends.
template <class T, class Request>
struct exchange_ends {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>,
                "sar::distributed_schedule moves float or double rows only.");
  const distributed_graph& graph;  ///< the halo plan and blocks
  halo_scratch& scratch;            ///< the engine's reusable buffers
  const exchange_key& key;          ///< the call's key (for the codecs' context)
  exchange_kind kind;               ///< gather, scatter or gather_scatter
  const const_rows_ref<T>* x;  ///< null for a scatter
  rows_ref<T>* dx;             ///< null for a gather
  /// Values per row of the call (the agreed width; the exchange's for a call on its own).
  Eigen::Index width;
  exchange_visitor<T> call;  ///< the layer's visitor
  any_wire_codec& fc;  ///< the call's feature codec
  any_wire_codec& gc;  ///< the call's gradient codec
  kept_halo* reused;   ///< the halo every rank reuses, or null
  kept_halo* keeping;  ///< where to keep this call's halo, or null
  /// A synchronous call of a pipelined exchange: what arrives is kept for the next call.
  pipelined_halo<Request>* retain;
  std::exception_ptr& failure;  ///< the first exception of a callback on this rank

  /// This rank.
  int rank() const { return graph.rank(); }
  /// The codec context of a block between sender and receiver with rows `ids`.
  codec_context context(exchange_direction d, int sender, int receiver,
                        std::span<const node_t> ids) const {
    return {key, d, sender, receiver, ids};
  }

  /// Bytes of the feature block q sends here.
  std::size_t incoming_feature_bytes(int q) {
    return fc.template wire_bytes<T>(graph.plan().recv_count[q], width);
  }
  /// wire := the rows q needs from this rank, encoded.
  void encode_features(int q, std::vector<std::byte>& wire) {
    const auto& rows = graph.plan().send_rows[q];
    detail::guarded(failure, [&] {
      fc.template encode<T>(*x, rows, context(exchange_direction::features, rank(), q,
                                              graph.send_ids(q)), wire);
    });
    fit(wire, fc.template wire_bytes<T>(static_cast<Eigen::Index>(rows.size()), width));
  }
  /// Bytes of the gradient block q returns here.
  std::size_t incoming_gradient_bytes(int q) {
    return gc.template wire_bytes<T>(
        static_cast<Eigen::Index>(graph.plan().send_rows[q].size()), width);
  }
  /// dx's rows sent to q += the gradients q returned (kept too, for a pipelined exchange).
  void add_gradients(int q, std::span<const std::byte> wire) {
    detail::guarded(failure, [&] {
      gc.template decode_add<T>(
          wire, graph.plan().send_rows[q],
          context(exchange_direction::gradients, q, rank(), graph.send_ids(q)), *dx);
    });
    if (retain) {
      retain->gradients[static_cast<std::size_t>(q)].assign(wire.begin(), wire.end());
      retain->has_gradients = true;
    }
  }

  /// Visits block q with the rows that arrived (or are reused); gradients := the encoded
  /// gradient of q's rows when gradients travel. Keeps what the cache or pipeline asks for.
  void visit(int q, std::vector<std::byte>& features, std::vector<std::byte>& gradients) {
    const graph_block& b = graph.block(q);
    if (q == rank()) {  // the local block reads x and adds into dx in place
      if (b.edges->num_edges() > 0)
        detail::guarded(failure, [&] { call(b, kind == exchange_kind::scatter ? nullptr : x, dx); });
      return;
    }
    const Eigen::Index halo_rows = graph.plan().recv_count[q], f = width;
    const std::span<const node_t> ids = graph.halo_ids(q);
    const bool reads_halo = kind != exchange_kind::scatter;
    const std::vector<std::byte>& arrived = reused ? reused->blocks[q] : features;
    std::optional<Eigen::Map<const matrix<T>>> halo;
    if (reads_halo) {
      if (retain) {
        retain->features[static_cast<std::size_t>(q)] = arrived;
        retain->has_features = true;
      }
      detail::guarded(failure, [&] {
        halo.emplace(fc.template decode<T>(arrived, halo_rows, f,
                                           context(exchange_direction::features, q, rank(), ids),
                                           scratch.features<T>()));
      });
    }
    const bool gradients_travel = kind != exchange_kind::gather;
    const bool raw = gc.raw_rows();
    matrix<T>& dscratch = scratch.gradients<T>();
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
    if (b.edges->num_edges() > 0 && (halo || !reads_halo)) {
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
        gc.template encode<T>(const_rows_ref<T>(dscratch), scratch.identity_rows(halo_rows),
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
      throw invalid_argument(message("sar::distributed_schedule: codec '", fc.name(), "' / '",
                                     gc.name(), "' wrote ", wire.size(),
                                     " bytes where it announced ", bytes, " on rank ", rank()));
    });
    wire.assign(bytes, std::byte{0});
  }
};

}  // namespace sar
