// Wire codecs: how halo rows become bytes on the wire and bytes become rows again. The
// exchange engine (distributed_schedule.hpp) calls a codec for every block it sends or
// receives and never looks inside the bytes, so a new format (fp16, b-bit stochastic
// rounding, ...) is a new type, not an edit of the engine.
//
// A codec C moves rows of T (float, double) when sar::wire_codec_for<C, T> holds:
//   c.name() -> std::string               what metrics and logs call it ("fp32", ...)
//   c.template wire_bytes<T>(rows, cols) -> std::size_t
//                                         the exact size of `rows` encoded rows of `cols`
//                                         values; a function of the shape only, because the
//                                         receiver sizes its buffer before the bytes arrive
//   c.encode(x, rows, ctx, wire)          wire := x's rows `rows` (in that order), resized
//                                         to wire_bytes<T>(rows.size(), x.cols())
//   c.decode(wire, rows, cols, ctx, scratch) -> Eigen::Map<const matrix<T>>
//                                         the block the bytes stand for: a view of the wire
//                                         itself where the format allows it (no copy), else
//                                         decoded into scratch (resized by the codec); valid
//                                         while wire and scratch are
//   c.decode_add(wire, rows, ctx, dx)     dx's rows `rows` += the decoded rows (rows unique)
// Optional: C::raw_rows (static constexpr bool) when the wire bytes ARE the rows as
// row-major T (no metadata): the engine then lets a visitor write gradients straight into the
// wire buffer instead of encoding a copy.
// ctx (codec_context) says which exchange, direction and peer the rows belong to and the
// dataset id of every row in wire order, so a codec that rounds at random can key its
// random numbers by (seed, epoch, layer, direction, node id, column) and be reproducible on
// any number of ranks and threads. A codec may throw (e.g. on non-finite input); the
// engine completes the exchange and rethrows on every rank.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include "sar/core/error.hpp"
#include "sar/core/memory.hpp"
#include "sar/core/types.hpp"
#include "sar/schedule/schedule.hpp"

namespace sar {

/// Which way rows travel: forward features to the ranks that aggregate them, or backward
/// feature-gradients to the ranks that own the rows.
enum class exchange_direction : std::uint8_t { features = 0, gradients = 1 };

/// What a codec is told about the rows it encodes or decodes.
struct codec_context {
  /// The exchange the rows belong to.
  exchange_key key;
  /// Features forward or gradients backward.
  exchange_direction direction = exchange_direction::features;
  int sender = 0;    ///< the rank that encodes the rows
  int receiver = 0;  ///< the rank that decodes them
  /// The dataset id of every row in wire order (sender and receiver see the same ids).
  std::span<const node_t> ids;
};

template <class C, class T>
concept wire_codec_for =
    requires(C& c, const const_rows_ref<T>& x, std::span<const node_t> rows,
             const codec_context& ctx, std::vector<std::byte>& wire,
             std::span<const std::byte> received, Eigen::Index n, matrix<T>& scratch,
             rows_ref<T>& dx) {
      { c.name() } -> std::convertible_to<std::string>;
      { c.template wire_bytes<T>(n, n) } -> std::same_as<std::size_t>;
      c.encode(x, rows, ctx, wire);
      { c.decode(received, n, n, ctx, scratch) } -> std::same_as<Eigen::Map<const matrix<T>>>;
      c.decode_add(received, rows, ctx, dx);
    };

/// A codec for float or double rows (at least one of them).
template <class C>
concept wire_codec = wire_codec_for<C, float> || wire_codec_for<C, double>;

/// Whether C declares C::raw_rows = true (see the top of this header).
template <class C>
inline constexpr bool raw_rows_v = [] {
  if constexpr (requires { { C::raw_rows } -> std::convertible_to<bool>; })
    return static_cast<bool>(C::raw_rows);
  else
    return false;
}();

/// Rows as they are: contiguous row-major T, no metadata (fp32 for float rows, fp64 for
/// double). Exact; decode is a view of the received bytes (no copy).
struct plain_codec {
  /// The wire bytes are the rows themselves (see the top of this file).
  static constexpr bool raw_rows = true;
  /// "plain".
  std::string name() const { return "plain"; }
  /// rows * cols * sizeof(T).
  template <class T>
  std::size_t wire_bytes(Eigen::Index rows, Eigen::Index cols) const {
    return static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols) * sizeof(T);
  }
  /// wire := x's rows `rows` (in that order), copied as they are.
  template <class T>
  void encode(const const_rows_ref<T>& x, std::span<const node_t> rows, const codec_context&,
              std::vector<std::byte>& wire) const {
    const Eigen::Index f = x.cols();
    const std::size_t row_bytes = sizeof(T) * static_cast<std::size_t>(f);
    huge_page_resize(wire, rows.size() * row_bytes);
    if (f == 0) return;
    tbb::parallel_for(tbb::blocked_range<std::size_t>(0, rows.size(), 1024), [&](const auto& r) {
      for (std::size_t k = r.begin(); k != r.end(); ++k)
        std::memcpy(wire.data() + k * row_bytes, x.row(rows[k]).data(), row_bytes);
    });
  }
  /// A view of the received bytes as a rows x cols matrix (no copy; scratch is not used).
  template <class T>
  Eigen::Map<const matrix<T>> decode(std::span<const std::byte> wire, Eigen::Index rows,
                                     Eigen::Index cols, const codec_context&, matrix<T>&) const {
    return {reinterpret_cast<const T*>(wire.data()), rows, cols};
  }
  /// dx's rows `rows` += the received rows (rows unique).
  template <class T>
  void decode_add(std::span<const std::byte> wire, std::span<const node_t> rows,
                  const codec_context&, rows_ref<T>& dx) const {
    const Eigen::Index f = dx.cols();
    if (f == 0) return;
    const T* values = reinterpret_cast<const T*>(wire.data());
    tbb::parallel_for(tbb::blocked_range<std::size_t>(0, rows.size(), 1024), [&](const auto& r) {
      for (std::size_t k = r.begin(); k != r.end(); ++k)
        dx.row(rows[k]) += Eigen::Map<const row_vector<T>>(values + k * f, f);
    });
  }
};
static_assert(wire_codec_for<plain_codec, float> && wire_codec_for<plain_codec, double>);

/// Any wire codec behind one interface (what a schedule holds, so that the codec is chosen
/// at run time without a new schedule type). Move-only; a call for a scalar type the held
/// codec does not move throws sar::invalid_argument.
class any_wire_codec {
 public:
  /// Holds `codec` (any sar::wire_codec).
  template <wire_codec C>
    requires(!std::is_same_v<std::remove_cvref_t<C>, any_wire_codec>)
  any_wire_codec(C codec)  // NOLINT: implicit, so options take a codec directly
      : self_(std::make_unique<model<C>>(std::move(codec))) {}
  any_wire_codec() : any_wire_codec(plain_codec{}) {}
  /// Takes over the held codec.
  any_wire_codec(any_wire_codec&&) noexcept = default;
  /// Takes over the held codec (destroying the one held).
  any_wire_codec& operator=(any_wire_codec&&) noexcept = default;

  /// The held codec's name().
  std::string name() const { return self_->name(); }
  /// Whether the held codec's wire bytes are the rows themselves (raw_rows_v).
  bool raw_rows() const { return self_->raw_rows(); }
  /// The held codec's wire_bytes<T>().
  template <class T>
  std::size_t wire_bytes(Eigen::Index rows, Eigen::Index cols) const {
    return self_->wire_bytes(rows, cols, tag<T>{});
  }
  /// The held codec's encode().
  template <class T>
  void encode(const const_rows_ref<T>& x, std::span<const node_t> rows, const codec_context& ctx,
              std::vector<std::byte>& wire) {
    self_->encode(x, rows, ctx, wire);
  }
  /// The held codec's decode().
  template <class T>
  Eigen::Map<const matrix<T>> decode(std::span<const std::byte> wire, Eigen::Index rows,
                                     Eigen::Index cols, const codec_context& ctx,
                                     matrix<T>& scratch) {
    return self_->decode(wire, rows, cols, ctx, scratch);
  }
  /// The held codec's decode_add().
  template <class T>
  void decode_add(std::span<const std::byte> wire, std::span<const node_t> rows,
                  const codec_context& ctx, rows_ref<T>& dx) {
    self_->decode_add(wire, rows, ctx, dx);
  }
  /// The held codec if it is a C, else nullptr.
  template <class C>
  C* target() {
    auto* m = dynamic_cast<model<C>*>(self_.get());
    return m ? &m->codec : nullptr;
  }

 private:
  template <class T>
  struct tag {};
  // One set of entry points per scalar type (virtual functions cannot be templates).
  template <class T>
  struct entry_points {
    virtual ~entry_points() = default;
    virtual std::size_t wire_bytes(Eigen::Index, Eigen::Index, tag<T>) const = 0;
    virtual void encode(const const_rows_ref<T>&, std::span<const node_t>, const codec_context&,
                        std::vector<std::byte>&) = 0;
    virtual Eigen::Map<const matrix<T>> decode(std::span<const std::byte>, Eigen::Index,
                                               Eigen::Index, const codec_context&,
                                               matrix<T>&) = 0;
    virtual void decode_add(std::span<const std::byte>, std::span<const node_t>,
                            const codec_context&, rows_ref<T>&) = 0;
  };
  struct base : entry_points<float>, entry_points<double> {
    using entry_points<float>::wire_bytes, entry_points<double>::wire_bytes;
    using entry_points<float>::encode, entry_points<double>::encode;
    using entry_points<float>::decode, entry_points<double>::decode;
    using entry_points<float>::decode_add, entry_points<double>::decode_add;
    virtual std::string name() const = 0;
    virtual bool raw_rows() const = 0;
  };
  template <class C>
  struct model final : base {
    explicit model(C c) : codec(std::move(c)) {}
    std::string name() const override { return codec.name(); }
    bool raw_rows() const override { return raw_rows_v<C>; }
    std::size_t wire_bytes(Eigen::Index r, Eigen::Index c, tag<float>) const override {
      return supported<float>().template wire_bytes<float>(r, c);
    }
    std::size_t wire_bytes(Eigen::Index r, Eigen::Index c, tag<double>) const override {
      return supported<double>().template wire_bytes<double>(r, c);
    }
    void encode(const const_rows_ref<float>& x, std::span<const node_t> rows,
                const codec_context& ctx, std::vector<std::byte>& wire) override {
      supported<float>().encode(x, rows, ctx, wire);
    }
    void encode(const const_rows_ref<double>& x, std::span<const node_t> rows,
                const codec_context& ctx, std::vector<std::byte>& wire) override {
      supported<double>().encode(x, rows, ctx, wire);
    }
    Eigen::Map<const matrix<float>> decode(std::span<const std::byte> wire, Eigen::Index r,
                                           Eigen::Index c, const codec_context& ctx,
                                           matrix<float>& scratch) override {
      return supported<float>().decode(wire, r, c, ctx, scratch);
    }
    Eigen::Map<const matrix<double>> decode(std::span<const std::byte> wire, Eigen::Index r,
                                            Eigen::Index c, const codec_context& ctx,
                                            matrix<double>& scratch) override {
      return supported<double>().decode(wire, r, c, ctx, scratch);
    }
    void decode_add(std::span<const std::byte> wire, std::span<const node_t> rows,
                    const codec_context& ctx, rows_ref<float>& dx) override {
      supported<float>().decode_add(wire, rows, ctx, dx);
    }
    void decode_add(std::span<const std::byte> wire, std::span<const node_t> rows,
                    const codec_context& ctx, rows_ref<double>& dx) override {
      supported<double>().decode_add(wire, rows, ctx, dx);
    }
    /// The codec, if it moves T rows; else throws (the call is never made for such a T
    /// unless a schedule of that T was given this codec).
    template <class T>
    C& supported() const {
      if constexpr (wire_codec_for<C, T>) {
        return const_cast<C&>(codec);
      } else {
        throw invalid_argument(message("sar::any_wire_codec: codec '", codec.name(),
                                       "' does not move ", sizeof(T) == 4 ? "float" : "double",
                                       " rows"));
      }
    }
    C codec;
  };
  std::unique_ptr<base> self_;
};

}  // namespace sar
