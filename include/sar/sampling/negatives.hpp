// Negative sampling for link prediction: K negative destinations per positive pair, drawn by
// corrupting its destination, keyed by (seed, epoch, edge id, k) so that an edge draws the
// same negatives on whichever rank scores it. Destinations are uniform over the nodes (DGL's
// Uniform, a.k.a. PerSourceUniform) or in proportion to a weight per node (DGL's
// degree^0.75 sampler of its link-prediction guide, word2vec's unigram^0.75).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "sar/core/error.hpp"
#include "sar/core/rng.hpp"
#include "sar/core/types.hpp"

namespace sar {

/// Where negative destinations are drawn from: uniformly over [0, num_nodes), or node v with
/// probability weights[v] / sum (the weights of every node, by dataset id: the same table on
/// every rank, 8 bytes per node).
class negative_distribution {
 public:
  /// Uniform over num_nodes nodes.
  explicit negative_distribution(node_t num_nodes) : nodes_(num_nodes) {}
  /// In proportion to `weights` (one per node, finite, >= 0, some > 0). Throws
  /// sar::invalid_argument naming the first bad weight.
  explicit negative_distribution(std::span<const double> weights)
      : nodes_(static_cast<node_t>(weights.size())) {
    cumulative_.reserve(weights.size());
    double sum = 0;
    for (std::size_t v = 0; v < weights.size(); ++v) {
      SAR_CHECK(std::isfinite(weights[v]) && weights[v] >= 0, invalid_argument,
                "sar::negative_distribution: node ", v, " has weight ", weights[v]);
      sum += weights[v];
      cumulative_.push_back(sum);
    }
    SAR_CHECK(sum > 0, invalid_argument, "sar::negative_distribution: no node of the ",
              weights.size(), " has a positive weight");
  }
  /// Nodes drawn from.
  node_t num_nodes() const { return nodes_; }
  /// Whether every node is as likely.
  bool uniform() const { return cumulative_.empty(); }
  /// The node of the draw keyed by (epoch, edge, j) of `rng`.
  node_t draw(const counter_rng& rng, std::uint64_t epoch, std::uint64_t edge,
              std::uint64_t j) const {
    if (uniform())
      return static_cast<node_t>(rng.below(static_cast<std::uint64_t>(nodes_), epoch, edge, j));
    const double u = rng.uniform(epoch, edge, j) * cumulative_.back();
    // The first node whose cumulative weight exceeds u (never one of weight 0).
    const auto at = std::upper_bound(cumulative_.begin(), cumulative_.end(), u);
    return static_cast<node_t>(std::min<std::ptrdiff_t>(at - cumulative_.begin(),
                                                        static_cast<std::ptrdiff_t>(nodes_) - 1));
  }

 private:
  node_t nodes_ = 0;
  std::vector<double> cumulative_;  // empty: uniform
};

/// The weights degree^power of nodes of the degrees `degrees` (DGL's guide: in-degrees,
/// power 0.75).
inline std::vector<double> degree_weights(std::span<const node_t> degrees, double power = 0.75) {
  std::vector<double> w(degrees.size());
  for (std::size_t v = 0; v < w.size(); ++v) w[v] = std::pow(static_cast<double>(degrees[v]), power);
  return w;
}

/// k negative destinations for each edge of `edge_ids`, row-major edge_ids.size() x k, drawn
/// from `from` keyed by (seed, epoch, edge id, j). As in DGL, a negative may be an edge by
/// chance (with probability about degree / num_nodes when uniform). Throws
/// sar::invalid_argument for k < 1 or k above the nodes (naming both). Not collective.
inline std::vector<node_t> draw_negatives(std::uint64_t seed, std::uint64_t epoch,
                                          std::span<const edge_t> edge_ids, int k,
                                          const negative_distribution& from) {
  const node_t n = from.num_nodes();
  SAR_CHECK(k >= 1 && n >= 1 && k <= n, invalid_argument, "sar::draw_negatives: ", k,
            " negatives per positive among ", n, " nodes (need 1 <= negatives <= nodes)");
  const counter_rng rng(seed, rng_stream::link_negatives, 1);
  const auto per = static_cast<std::size_t>(k);
  std::vector<node_t> out(edge_ids.size() * per);
  for (std::size_t i = 0; i < edge_ids.size(); ++i)
    for (std::size_t j = 0; j < per; ++j)
      out[i * per + j] = from.draw(rng, epoch, static_cast<std::uint64_t>(edge_ids[i]), j);
  return out;
}

/// draw_negatives uniform over [0, num_nodes).
inline std::vector<node_t> uniform_negatives(std::uint64_t seed, std::uint64_t epoch,
                                             std::span<const edge_t> edge_ids, int k,
                                             node_t num_nodes) {
  return draw_negatives(seed, epoch, edge_ids, k, negative_distribution(num_nodes));
}

}  // namespace sar
