// A sampled minibatch as a layered graph (sar/schedule/schedule.hpp): the schedules a model
// runs on, one bipartite block per graph layer and one edgeless schedule per level for the
// layers between (sar/nn/sequential.hpp picks which layer sees which).
#pragma once

#include <cstddef>
#include <deque>
#include <span>
#include <utility>
#include <vector>

#include "sar/core/error.hpp"
#include "sar/core/types.hpp"
#include "sar/sampling/samplers.hpp"
#include "sar/schedule/local_schedule.hpp"

namespace sar {

/// A sampled minibatch as a sar::layered_graph (see the top of this file). Not copyable
/// (its schedules point into themselves).
class sampled_minibatch {
 public:
  /// The schedule its blocks and levels are.
  using schedule_type = local_schedule;

  /// Takes a sample (sar/sampling/samplers.hpp). Throws sar::invalid_argument if its levels
  /// and blocks disagree (block l must be level_sizes[l + 1] x level_sizes[l]).
  explicit sampled_minibatch(minibatch_sample sample) : ids_(std::move(sample.ids)) {
    constexpr const char* where = "sar::sampled_minibatch";
    const auto& sizes = sample.level_sizes;
    SAR_CHECK(sizes.size() == sample.blocks.size() + 1 && !sizes.empty() &&
                  sizes.front() == static_cast<node_t>(ids_.size()),
              invalid_argument, where, ": ", sample.blocks.size(), " blocks, ", sizes.size(),
              " levels, ", ids_.size(), " ids");
    for (std::size_t l = 0; l < sample.blocks.size(); ++l)
      SAR_CHECK(sample.blocks[l].edges.num_rows == sizes[l + 1] &&
                    sample.blocks[l].edges.num_cols == sizes[l],
                invalid_argument, where, ": block ", l, " is ", sample.blocks[l].edges.num_rows,
                " x ", sample.blocks[l].edges.num_cols, ", expected ", sizes[l + 1], " x ",
                sizes[l]);
    for (auto& b : sample.blocks) blocks_.emplace_back(std::move(b));
    for (node_t rows : sizes) {
      sampled_block level;
      level.edges.num_rows = level.edges.num_cols = rows;
      level.edges.offsets.assign(static_cast<std::size_t>(rows) + 1, 0);
      level.ids.assign(ids_.begin(), ids_.begin() + rows);
      levels_.emplace_back(std::move(level));
    }
  }

  /// Number of blocks (graph layers sampled).
  std::size_t num_blocks() const { return blocks_.size(); }
  /// Block l: level l (sources) -> level l + 1 (destinations). Throws std::out_of_range for
  /// l >= num_blocks().
  local_schedule& block(std::size_t l) { return blocks_.at(l); }
  /// Level l's rows as an edgeless schedule (l <= num_blocks()). Throws std::out_of_range
  /// otherwise.
  local_schedule& level(std::size_t l) { return levels_.at(l); }
  /// Dataset ids of the input rows (level 0); the first num_seeds() are the seeds.
  std::span<const node_t> ids() const { return ids_; }
  /// Number of seeds (the last level's rows).
  node_t num_seeds() const { return levels_.back().num_destinations(); }

 private:
  std::vector<node_t> ids_;
  std::deque<local_schedule> blocks_, levels_;  // a deque: schedules point into themselves
};

static_assert(layered_graph<sampled_minibatch>);

}  // namespace sar
