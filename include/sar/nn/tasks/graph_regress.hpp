// Graph regression: a row of floats per graph of a collection, mean squared error over every
// value, scored by R^2 (also RMSE and MAE in the targets' original units): regress's loss and
// metrics, per graph.
#pragma once

#include "sar/core/task_kind.hpp"
#include "sar/nn/tasks/regress.hpp"

namespace sar {

/// The graph-regress task (the seam: sar/nn/tasks.hpp): regress_task's functions on one row
/// per graph (a graph_task's targets and scale).
struct graph_regress_task : regress_task {
  /// Its row of task_table.
  static constexpr task_kind kind = task_kind::graph_regress;
};

}  // namespace sar
