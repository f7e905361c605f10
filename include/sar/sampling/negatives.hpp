// Negative sampling for link prediction: K negative destinations per positive pair, drawn by
// corrupting its destination, keyed by (seed, epoch, edge id, k) so that an edge draws the
// same negatives on whichever rank scores it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "sar/core/error.hpp"
#include "sar/core/rng.hpp"
#include "sar/core/types.hpp"

namespace sar {

/// k negative destinations for each edge of `edge_ids`, row-major edge_ids.size() x k, each
/// uniform in [0, num_nodes) (DGL's Uniform sampler: as there, a negative may be an edge by
/// chance, with probability about degree / num_nodes). Throws sar::invalid_argument for k < 1
/// or num_nodes < 1, or for k above num_nodes (naming both). Not collective.
inline std::vector<node_t> uniform_negatives(std::uint64_t seed, std::uint64_t epoch,
                                             std::span<const edge_t> edge_ids, int k,
                                             node_t num_nodes) {
  SAR_CHECK(k >= 1 && num_nodes >= 1 && k <= num_nodes, invalid_argument,
            "sar::uniform_negatives: ", k, " negatives per positive among ", num_nodes,
            " nodes (need 1 <= negatives <= nodes)");
  const counter_rng rng(seed, rng_stream::link_negatives, 1);
  const auto per = static_cast<std::size_t>(k);
  std::vector<node_t> out(edge_ids.size() * per);
  for (std::size_t i = 0; i < edge_ids.size(); ++i)
    for (std::size_t j = 0; j < per; ++j)
      out[i * per + j] = static_cast<node_t>(rng.below(static_cast<std::uint64_t>(num_nodes),
                                                       epoch,
                                                       static_cast<std::uint64_t>(edge_ids[i]), j));
  return out;
}

}  // namespace sar
