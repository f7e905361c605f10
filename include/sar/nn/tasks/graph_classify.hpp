// Graph classification: one class id per graph of a collection, softmax cross-entropy over the
// graphs' pooled rows, scored by accuracy (classify's loss and metrics, per graph).
#pragma once

#include "sar/core/task_kind.hpp"
#include "sar/nn/tasks/classify.hpp"

namespace sar {

/// The graph-classify task (the seam: sar/nn/tasks.hpp): classify_task's functions on one row
/// per graph (a graph_task's labels).
struct graph_classify_task : classify_task {
  /// Its row of task_table.
  static constexpr task_kind kind = task_kind::graph_classify;
};

}  // namespace sar
