// Halo cache policies: whether the exchange engine (distributed_schedule.hpp) fetches a
// call's halo rows over the wire or hands it rows it kept from an earlier call, and what it
// keeps. Kept halos are the received WIRE bytes of every remote block (decoded again on
// use: the same bytes give the same rows under any codec), under the call's exchange_key.
//
// A policy C satisfies sar::halo_cache_policy<C> with three local (not collective) calls,
// made by the engine on every rank in the same order with the same keys:
//   c.take(key, kind) -> std::optional<kept_halo>
//                         the halo kept for this call, if any (ownership passes to the
//                         engine). The engine uses it only if EVERY rank has one and, where
//                         kept_halo::source_hash is set, the call's x still hashes the same;
//                         otherwise it fetches as if nothing were kept.
//   c.keeps(key, kind) -> halo_keep
//                         whether to keep the halo this call uses (fetched or reused), and
//                         whether its later use must check that x is unchanged
//   c.keep(kept_halo)     stores it (called after the call's exchange, when keeps() said so)
//   c.kept_bytes() -> std::size_t   wire bytes held now (for memory accounting)
// The engine calls take() and keeps() for gather and gather_scatter (the calls that read
// halo features) and take() for scatter too, so a policy sees every call.
#pragma once

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include <tbb/parallel_for.h>

#include "sar/core/types.hpp"
#include "sar/schedule/schedule.hpp"

namespace sar {

/// The three calls of an aggregation schedule.
enum class exchange_kind : std::uint8_t { gather, scatter, gather_scatter };

/// The halo of one call as it came off the wire.
struct kept_halo {
  /// The call it was fetched for.
  exchange_key key;
  /// A hash of the local rows of the x that was sent (0: not checked on reuse).
  std::uint64_t source_hash = 0;
  /// blocks[q]: the wire bytes received from rank q (empty for this rank).
  std::vector<std::vector<std::byte>> blocks;

  /// Wire bytes held (the sum over blocks).
  std::size_t bytes() const {
    std::size_t total = 0;
    for (const auto& b : blocks) total += b.size();
    return total;
  }
};

/// What keeps() answers.
enum class halo_keep : std::uint8_t {
  no,
  yes,             ///< keep; reuse it whatever x is then (e.g. rows that are stale by design)
  if_x_unchanged,  ///< keep with a hash of x; reuse only while x hashes the same
};

template <class C>
concept halo_cache_policy =
    requires(C& c, const C& cc, const exchange_key& key, exchange_kind kind, kept_halo halo) {
      { c.take(key, kind) } -> std::same_as<std::optional<kept_halo>>;
      { c.keeps(key, kind) } -> std::same_as<halo_keep>;
      c.keep(std::move(halo));
      { cc.kept_bytes() } -> std::same_as<std::size_t>;
    };

/// The halos kept under distinct exchanges (layer, call): a small list, since a model has a
/// few exchanges per layer. For policies to build on.
class kept_halo_list {
 public:
  /// Removes and returns the halo kept for key's exchange, if any.
  std::optional<kept_halo> take(const exchange_key& key) {
    auto it = std::find_if(kept_.begin(), kept_.end(),
                           [&](const kept_halo& k) { return k.key.same_exchange(key); });
    if (it == kept_.end()) return std::nullopt;
    kept_halo out = std::move(*it);
    kept_.erase(it);
    return out;
  }
  /// Keeps halo, replacing what was kept for the same exchange.
  void put(kept_halo halo) {
    take(halo.key);
    kept_.push_back(std::move(halo));
  }
  /// Drops every kept halo.
  void clear() { kept_.clear(); }
  /// Number of halos kept.
  std::size_t size() const { return kept_.size(); }
  /// Wire bytes kept (the sum over the halos).
  std::size_t bytes() const {
    std::size_t total = 0;
    for (const auto& k : kept_) total += k.bytes();
    return total;
  }

 private:
  std::vector<kept_halo> kept_;
};

/// Keeps nothing: every call fetches (sequential SAR: each remote block freed after use).
struct no_halo_cache {
  /// Nothing is kept: always nullopt.
  std::optional<kept_halo> take(const exchange_key&, exchange_kind) { return std::nullopt; }
  /// Never keeps: always halo_keep::no.
  halo_keep keeps(const exchange_key&, exchange_kind) const { return halo_keep::no; }
  /// Discards `halo` (keeps() never asks for it).
  void keep(kept_halo) {}
  /// Always 0.
  std::size_t kept_bytes() const { return 0; }
};

/// Keeps each forward gather's halo for the gather_scatter of the same key in backward (GAT
/// and max-pool fetch their halo again there), which then fetches no features: memory traded
/// for traffic. Results are exactly those of no_halo_cache: a halo is reused only if x is
/// bitwise unchanged on every rank. The first gather after a backward call (scatter or
/// gather_scatter) starts a new forward pass and drops everything kept, so memory is bounded
/// by one halo per forward gather; kept halos of layers whose backward only scatters (GCN,
/// SAGE) are memory without benefit until then.
class keep_for_backward {
 public:
  /// A gather starts a forward pass: it returns nothing, and after a backward call drops
  /// every kept halo first. A gather_scatter takes the halo kept for its key; a scatter gets
  /// nothing.
  std::optional<kept_halo> take(const exchange_key& key, exchange_kind kind) {
    if (kind == exchange_kind::gather) {
      if (std::exchange(backward_seen_, false)) kept_.clear();
      return std::nullopt;
    }
    backward_seen_ = true;
    if (kind == exchange_kind::scatter) return std::nullopt;
    return kept_.take(key);
  }
  /// Keep every gather's halo, with a hash of x; nothing else.
  halo_keep keeps(const exchange_key&, exchange_kind kind) const {
    return kind == exchange_kind::gather ? halo_keep::if_x_unchanged : halo_keep::no;
  }
  /// Keeps `halo`, replacing one kept for the same exchange.
  void keep(kept_halo halo) { kept_.put(std::move(halo)); }
  /// Wire bytes kept now.
  std::size_t kept_bytes() const { return kept_.bytes(); }
  /// Number of halos kept now.
  std::size_t kept_count() const { return kept_.size(); }
  /// Drops every kept halo (the next gather_scatter fetches on every rank).
  void clear() { kept_.clear(); }

 private:
  kept_halo_list kept_;
  bool backward_seen_ = false;
};

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

/// Keeps every halo for as long as its x is unchanged, across passes and epochs: for an
/// input that never changes (the first graph layer over raw features), which then travels
/// once. Memory: one halo per exchange (layer, call).
class keep_unchanged_input {
 public:
  /// The halo kept for key's exchange (nothing for a scatter).
  std::optional<kept_halo> take(const exchange_key& key, exchange_kind kind) {
    return kind == exchange_kind::scatter ? std::nullopt : kept_.take(key);
  }
  /// Keep every halo, with a hash of x.
  halo_keep keeps(const exchange_key&, exchange_kind) const { return halo_keep::if_x_unchanged; }
  /// Keeps `halo`, replacing one kept for the same exchange.
  void keep(kept_halo halo) { kept_.put(std::move(halo)); }
  /// Wire bytes kept now.
  std::size_t kept_bytes() const { return kept_.bytes(); }

 private:
  kept_halo_list kept_;
};

static_assert(halo_cache_policy<no_halo_cache> && halo_cache_policy<keep_for_backward> &&
              halo_cache_policy<keep_unchanged_input>);

/// Any halo cache policy behind one interface (chosen at run time). Move-only.
class any_halo_cache {
 public:
  /// Holds `policy` (any sar::halo_cache_policy).
  template <halo_cache_policy C>
    requires(!std::is_same_v<std::remove_cvref_t<C>, any_halo_cache>)
  any_halo_cache(C policy)  // NOLINT: implicit, so options take a policy directly
      : self_(std::make_unique<model<C>>(std::move(policy))) {}
  any_halo_cache() : any_halo_cache(no_halo_cache{}) {}
  /// Takes over the held policy.
  any_halo_cache(any_halo_cache&&) noexcept = default;
  /// Takes over the held policy (destroying the one held).
  any_halo_cache& operator=(any_halo_cache&&) noexcept = default;

  /// The held policy's take().
  std::optional<kept_halo> take(const exchange_key& key, exchange_kind kind) {
    return self_->take(key, kind);
  }
  /// The held policy's keeps().
  halo_keep keeps(const exchange_key& key, exchange_kind kind) const {
    return self_->keeps(key, kind);
  }
  /// The held policy's keep().
  void keep(kept_halo halo) { self_->keep(std::move(halo)); }
  /// The held policy's kept_bytes().
  std::size_t kept_bytes() const { return self_->kept_bytes(); }
  /// The held policy if it is a C, else nullptr (like std::function::target).
  template <class C>
  C* target() {
    auto* m = dynamic_cast<model<C>*>(self_.get());
    return m ? &m->policy : nullptr;
  }

 private:
  struct base {
    virtual ~base() = default;
    virtual std::optional<kept_halo> take(const exchange_key&, exchange_kind) = 0;
    virtual halo_keep keeps(const exchange_key&, exchange_kind) const = 0;
    virtual void keep(kept_halo) = 0;
    virtual std::size_t kept_bytes() const = 0;
  };
  template <class C>
  struct model final : base {
    explicit model(C p) : policy(std::move(p)) {}
    std::optional<kept_halo> take(const exchange_key& k, exchange_kind kind) override {
      return policy.take(k, kind);
    }
    halo_keep keeps(const exchange_key& k, exchange_kind kind) const override {
      return policy.keeps(k, kind);
    }
    void keep(kept_halo h) override { policy.keep(std::move(h)); }
    std::size_t kept_bytes() const override { return policy.kept_bytes(); }
    C policy;
  };
  std::unique_ptr<base> self_;
};

}  // namespace sar
