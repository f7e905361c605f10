// P ranks: the relational graph (sar/schedule/relational_graph.hpp) of a rank's part of a
// heterogeneous graph: a distributed schedule over every in-edge with its relation, and one
// per relation over that relation's in-edges alone, each with its own halo plan.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <tuple>
#include <vector>

#include "sar/core/error.hpp"
#include "sar/distributed/distributed_schedule.hpp"
#include "sar/partition/graph_part.hpp"
#include "sar/schedule/relational_graph.hpp"

namespace sar {

/// The relational graph of this rank's `part` (heterogeneous: part.edge_types one relation
/// per in-edge, in [0, relations)), each of its relations + 1 schedules made with the exchange
/// options `options()` returns (a fresh set per schedule: codecs and caches are per schedule).
/// Collective (every rank builds relations + 1 schedules, in the same order). Throws
/// sar::invalid_argument on every rank for a homogeneous part, and what distributed_schedule
/// throws.
template <class Comm>
relational_graph<distributed_schedule<Comm>> make_relational_graph(
    Comm& comm, const graph_part& part, std::int32_t relations,
    const std::function<exchange_options()>& options) {
  using schedule = distributed_schedule<Comm>;
  const std::int64_t typed = part.schema.heterogeneous() ? 1 : 0;
  SAR_CHECK(min_max_over_ranks(comm, typed).first == 1 && relations >= 1, invalid_argument,
            "sar::make_relational_graph: rank ", comm.rank(), " holds a ",
            typed ? "heterogeneous" : "homogeneous", " part (every rank's must be "
            "heterogeneous) for ", relations, " relations");
  std::vector<std::unique_ptr<schedule>> per_relation;
  for (std::int32_t r = 0; r < relations; ++r) {
    graph_part only;  // relation r's in-edges of the part's nodes, nothing else
    only.part = part.part;
    only.book = part.book;
    only.original_ids = part.original_ids;
    only.features.resize(part.num_local(), 0);
    std::tie(only.in_edges, only.edge_features) =
        relation_edges(part.in_edges, part.edge_types, part.edge_features, r);
    per_relation.push_back(std::make_unique<schedule>(comm, only, options()));
  }
  return relational_graph<schedule>(std::make_unique<schedule>(comm, part, options()),
                                    std::move(per_relation));
}

}  // namespace sar
