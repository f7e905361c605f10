// Link prediction's decoders: a decoder scores a pair of nodes (u, v) from their embeddings
// h_u, h_v (rows of the encoder's output) and, on a heterogeneous graph, the pair's relation.
// Each is a policy type under the concept link_decoder, listed in link_decoders:
//
//   dot       s = h_u . h_v                                        (GAE; no parameters)
//   mlp       s = relu((h_u * h_v) W1 + b1) w2 + b2                (OGB's LinkPredictor; * is
//             elementwise, W1 d x d)
//   distmult  s = sum_j h_u[j] r[j] h_v[j], one learnt diagonal r per relation (Yang et al.
//             2015; R-GCN's link decoder)
//
// Contract (the layer contract of sar/nn/layer.hpp, on pairs): declare() declares the
// parameters; score() writes one score per pair and keeps nothing; backward() ASSIGNS the
// parameter gradients and ADDS the embedding gradients into dh. All three are symmetric in
// (u, v). The embeddings are one matrix, or two (pair_embeddings: the sources' rows and the
// destinations', so a rank need not copy its own rows beside a peer's). Not collective: the
// caller fetches remote embeddings and reduces the gradients.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <tbb/parallel_for.h>

#include "sar/core/error.hpp"
#include "sar/core/type_list.hpp"
#include "sar/core/types.hpp"
#include "sar/nn/parameters.hpp"

namespace sar {

/// Pairs of rows of an embedding matrix: pair i joins rows source[i] and destination[i], of
/// relation relation[i] (empty: every pair of relation 0).
struct row_pairs {
  std::span<const node_t> source;         ///< row of each pair's first node
  std::span<const node_t> destination;    ///< row of each pair's second node
  std::span<const std::int32_t> relation;  ///< each pair's relation, or empty
  /// Number of pairs.
  std::size_t size() const { return source.size(); }
  /// Relation of pair i.
  std::int32_t relation_of(std::size_t i) const { return relation.empty() ? 0 : relation[i]; }
};

/// The embeddings a decoder reads: pair i's source is row source[i] of `sources`, its
/// destination row destination[i] of `destinations`: one matrix (the usual case, converted from
/// it), or two (a rank's own rows and a peer's, sar/train/link_prediction.hpp).
template <class T>
struct pair_embeddings {
  const_rows_ref<T> sources;       ///< rows the sources index
  const_rows_ref<T> destinations;  ///< rows the destinations index
  /// Both ends in `h`.
  template <class Rows>
  pair_embeddings(const Rows& h) : sources(h), destinations(h) {}  // NOLINT: a conversion
  /// Sources in `s`, destinations in `d`.
  pair_embeddings(const_rows_ref<T> s, const_rows_ref<T> d) : sources(s), destinations(d) {}
};

/// Where a decoder's backward adds the embeddings' gradients: matrices of the shapes of
/// pair_embeddings' (one matrix when the embeddings are one; none: a gradient of size 0).
template <class T>
struct pair_gradients {
  matrix<T>* sources;       ///< gradients of the source rows
  matrix<T>* destinations;  ///< gradients of the destination rows
  /// Both in `dh`.
  pair_gradients(matrix<T>& dh) : sources(&dh), destinations(&dh) {}  // NOLINT: a conversion
  /// Sources' in `ds`, destinations' in `dd`.
  pair_gradients(matrix<T>& ds, matrix<T>& dd) : sources(&ds), destinations(&dd) {}
};

/// What a decoder is built for.
struct decoder_shape {
  Eigen::Index dim = 0;  ///< embedding width d
  int relations = 1;     ///< relations (distmult learns one diagonal each)
};

namespace detail {
template <class T>
void check_pairs(const char* where, const pair_embeddings<T>& h, const row_pairs& pairs,
                 Eigen::Index dim, int relations) {
  SAR_CHECK(h.sources.cols() == dim && h.destinations.cols() == dim, invalid_argument, where,
            ": embeddings have ", h.sources.cols(), " and ", h.destinations.cols(),
            " columns, the decoder ", dim);
  SAR_CHECK(pairs.destination.size() == pairs.size() &&
                (pairs.relation.empty() || pairs.relation.size() == pairs.size()),
            invalid_argument, where, ": ", pairs.size(), " sources, ", pairs.destination.size(),
            " destinations, ", pairs.relation.size(), " relations");
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    SAR_CHECK(pairs.source[i] >= 0 && pairs.source[i] < h.sources.rows() &&
                  pairs.destination[i] >= 0 && pairs.destination[i] < h.destinations.rows(),
              invalid_argument, where, ": pair ", i, " (", pairs.source[i], ", ",
              pairs.destination[i], ") outside the ", h.sources.rows(), " and ",
              h.destinations.rows(), " embedding rows");
    SAR_CHECK(pairs.relation_of(i) >= 0 && pairs.relation_of(i) < relations, invalid_argument,
              where, ": pair ", i, " has relation ", pairs.relation_of(i), " of ", relations);
  }
}
}  // namespace detail

/// s = h_u . h_v: no parameters.
template <class T>
class dot_decoder {
 public:
  using scalar = T;  ///< element type
  static constexpr std::string_view name = "dot";  ///< the --decoder name
  static constexpr std::string_view summary =
      "dot product of the two embeddings (GAE)";  ///< --help

  /// Any width >= 1.
  explicit dot_decoder(decoder_shape shape) : dim_(shape.dim), relations_(shape.relations) {}
  /// Declares nothing.
  void declare(parameter_store<T>&) {}

  /// scores[i] := h_u . h_v of pair i. Requires scores.size() == pairs.size(); throws
  /// sar::invalid_argument for a pair outside h.
  void score(const pair_embeddings<T>& h, const row_pairs& pairs, std::span<T> scores) const {
    detail::check_pairs<T>("sar::dot_decoder::score", h, pairs, dim_, relations_);
    tbb::parallel_for(std::size_t{0}, pairs.size(), [&](std::size_t i) {
      scores[i] = h.sources.row(pairs.source[i]).dot(h.destinations.row(pairs.destination[i]));
    });
  }
  /// dh_u += ds h_v, dh_v += ds h_u. Requires dh of h's shapes.
  void backward(const pair_embeddings<T>& h, const row_pairs& pairs, std::span<const T> dscores,
                pair_gradients<T> dh) {
    detail::check_pairs<T>("sar::dot_decoder::backward", h, pairs, dim_, relations_);
    if (dh.sources->size() == 0) return;
    for (std::size_t i = 0; i < pairs.size(); ++i) {
      const node_t u = pairs.source[i], v = pairs.destination[i];
      dh.sources->row(u) += dscores[i] * h.destinations.row(v);
      dh.destinations->row(v) += dscores[i] * h.sources.row(u);
    }
  }

 private:
  Eigen::Index dim_;
  int relations_;
};

/// s = sum_j h_u[j] r[j] h_v[j], r the pair's relation's learnt diagonal (initialised to 1,
/// so it starts as the dot product).
template <class T>
class distmult_decoder {
 public:
  using scalar = T;  ///< element type
  static constexpr std::string_view name = "distmult";  ///< the --decoder name
  static constexpr std::string_view summary =
      "h_u diag(r) h_v, one learnt diagonal per relation (DistMult)";  ///< --help

  /// One diagonal of width shape.dim per relation.
  explicit distmult_decoder(decoder_shape shape) : dim_(shape.dim), relations_(shape.relations) {
    SAR_CHECK(dim_ >= 1 && relations_ >= 1, invalid_argument, "sar::distmult_decoder: width ",
              dim_, ", relations ", relations_);
  }
  /// Declares r (relations x d, ones).
  void declare(parameter_store<T>& store) {
    store_ = &store;
    diagonal_ = store.declare({"decoder.relation", relations_, dim_, init_kind::ones, 0});
  }

  /// scores[i] := sum_j h_u[j] r[j] h_v[j]. Same requirements as dot_decoder::score.
  void score(const pair_embeddings<T>& h, const row_pairs& pairs, std::span<T> scores) const {
    detail::check_pairs<T>("sar::distmult_decoder::score", h, pairs, dim_, relations_);
    const auto& r = store_->value(diagonal_);
    tbb::parallel_for(std::size_t{0}, pairs.size(), [&](std::size_t i) {
      scores[i] = (h.sources.row(pairs.source[i]).array() * r.row(pairs.relation_of(i)).array() *
                   h.destinations.row(pairs.destination[i]).array())
                      .sum();
    });
  }
  /// dr := sum ds h_u * h_v per relation; dh_u += ds r * h_v, dh_v += ds r * h_u.
  void backward(const pair_embeddings<T>& h, const row_pairs& pairs, std::span<const T> dscores,
                pair_gradients<T> dh) {
    detail::check_pairs<T>("sar::distmult_decoder::backward", h, pairs, dim_, relations_);
    const auto& r = store_->value(diagonal_);
    auto dr = store_->grad(diagonal_);
    dr.setZero();
    for (std::size_t i = 0; i < pairs.size(); ++i) {
      const node_t u = pairs.source[i], v = pairs.destination[i];
      const auto rel = pairs.relation_of(i);
      dr.row(rel).array() += dscores[i] * h.sources.row(u).array() * h.destinations.row(v).array();
      if (dh.sources->size() == 0) continue;
      dh.sources->row(u).array() += dscores[i] * r.row(rel).array() * h.destinations.row(v).array();
      dh.destinations->row(v).array() += dscores[i] * r.row(rel).array() * h.sources.row(u).array();
    }
  }

 private:
  Eigen::Index dim_;
  int relations_;
  parameter_store<T>* store_ = nullptr;
  std::size_t diagonal_ = 0;
};

/// s = relu((h_u * h_v) W1 + b1) w2 + b2, * elementwise: OGB's LinkPredictor with one hidden
/// layer of width d.
template <class T>
class mlp_decoder {
 public:
  using scalar = T;  ///< element type
  static constexpr std::string_view name = "mlp";  ///< the --decoder name
  static constexpr std::string_view summary =
      "an MLP on the elementwise product of the embeddings (OGB's LinkPredictor)";  ///< --help

  /// W1: d x d, w2: d x 1.
  explicit mlp_decoder(decoder_shape shape) : dim_(shape.dim), relations_(shape.relations) {
    SAR_CHECK(dim_ >= 1, invalid_argument, "sar::mlp_decoder: width ", dim_);
  }
  /// Declares W1, b1, w2, b2 (Glorot; biases zero).
  void declare(parameter_store<T>& store) {
    store_ = &store;
    w1_ = store.declare({"decoder.hidden.weight", dim_, dim_, init_kind::glorot_uniform, 0});
    b1_ = store.declare({"decoder.hidden.bias", 1, dim_, init_kind::zeros, 0});
    w2_ = store.declare({"decoder.output.weight", dim_, 1, init_kind::glorot_uniform, 0});
    b2_ = store.declare({"decoder.output.bias", 1, 1, init_kind::zeros, 0});
  }

  /// scores[i] := the MLP of pair i. Same requirements as dot_decoder::score.
  void score(const pair_embeddings<T>& h, const row_pairs& pairs, std::span<T> scores) const {
    detail::check_pairs<T>("sar::mlp_decoder::score", h, pairs, dim_, relations_);
    matrix<T> hidden;
    hidden_layer(h, pairs, hidden);
    const matrix<T> out = hidden * store_->value(w2_);
    for (std::size_t i = 0; i < pairs.size(); ++i)
      scores[i] = out(static_cast<Eigen::Index>(i), 0) + store_->value(b2_)(0, 0);
  }
  /// The MLP's backward: its parameter gradients assigned, dh_u += dz * h_v, dh_v += dz * h_u
  /// for dz the gradient of the product z = h_u * h_v.
  void backward(const pair_embeddings<T>& h, const row_pairs& pairs, std::span<const T> dscores,
                pair_gradients<T> dh) {
    detail::check_pairs<T>("sar::mlp_decoder::backward", h, pairs, dim_, relations_);
    const auto m = static_cast<Eigen::Index>(pairs.size());
    matrix<T> hidden;
    const matrix<T> z = hidden_layer(h, pairs, hidden);
    const Eigen::Map<const matrix<T>> ds(dscores.data(), m, 1);
    store_->grad(w2_) = hidden.transpose() * ds;
    store_->grad(b2_)(0, 0) = ds.sum();
    matrix<T> dhidden = ds * store_->value(w2_).transpose();
    dhidden.array() *= (hidden.array() > T(0)).template cast<T>();
    store_->grad(w1_) = z.transpose() * dhidden;
    store_->grad(b1_) = dhidden.colwise().sum();
    if (dh.sources->size() == 0) return;
    const matrix<T> dz = dhidden * store_->value(w1_).transpose();
    for (Eigen::Index i = 0; i < m; ++i) {
      const node_t u = pairs.source[static_cast<std::size_t>(i)];
      const node_t v = pairs.destination[static_cast<std::size_t>(i)];
      dh.sources->row(u).array() += dz.row(i).array() * h.destinations.row(v).array();
      dh.destinations->row(v).array() += dz.row(i).array() * h.sources.row(u).array();
    }
  }

 private:
  /// hidden := relu(z W1 + b1); returns z (one row h_u * h_v per pair).
  matrix<T> hidden_layer(const pair_embeddings<T>& h, const row_pairs& pairs,
                         matrix<T>& hidden) const {
    matrix<T> z(static_cast<Eigen::Index>(pairs.size()), dim_);
    tbb::parallel_for(std::size_t{0}, pairs.size(), [&](std::size_t i) {
      z.row(static_cast<Eigen::Index>(i)) =
          h.sources.row(pairs.source[i]).cwiseProduct(h.destinations.row(pairs.destination[i]));
    });
    hidden = z * store_->value(w1_);
    hidden.rowwise() += store_->value(b1_).row(0);
    hidden = hidden.cwiseMax(T(0));
    return z;
  }

  Eigen::Index dim_;
  int relations_;
  parameter_store<T>* store_ = nullptr;
  std::size_t w1_ = 0, b1_ = 0, w2_ = 0, b2_ = 0;
};

/// A link decoder (see the top of this file).
template <class D>
concept link_decoder =
    requires(D& d, const D& cd, parameter_store<typename D::scalar>& store,
             const pair_embeddings<typename D::scalar>& h, const row_pairs& pairs,
             std::span<typename D::scalar> scores, std::span<const typename D::scalar> dscores,
             pair_gradients<typename D::scalar> dh) {
      { D::name } -> std::convertible_to<std::string_view>;
      { D::summary } -> std::convertible_to<std::string_view>;
      d.declare(store);
      cd.score(h, pairs, scores);
      d.backward(h, pairs, dscores, dh);
    } && std::constructible_from<D, decoder_shape>;

/// The registry: every built-in decoder, for element type T.
template <class T>
using link_decoders = type_list<dot_decoder<T>, mlp_decoder<T>, distmult_decoder<T>>;

/// The names of the built-in decoders, in the registry's order.
inline std::vector<std::string> link_decoder_names() {
  std::vector<std::string> names;
  for_each_type(link_decoders<float>{}, [&]<class D>() { names.emplace_back(D::name); });
  return names;
}

}  // namespace sar
