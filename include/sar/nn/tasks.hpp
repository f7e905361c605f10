// The registry of tasks: one line per task in builtin_tasks, each the file under
// sar/nn/tasks/ with its loss and metrics, and its row of sar/core/task_kind.hpp's task_table
// (its name, score and what its targets are, for the readers and stores). node_task
// (sar/nn/task.hpp) dispatches through it.
#pragma once

#include <concepts>
#include <iterator>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "sar/core/error.hpp"
#include "sar/core/task_kind.hpp"
#include "sar/core/type_list.hpp"
#include "sar/core/types.hpp"
#include "sar/nn/tasks/classify.hpp"
#include "sar/nn/tasks/graph_classify.hpp"
#include "sar/nn/tasks/graph_regress.hpp"
#include "sar/nn/tasks/multilabel.hpp"
#include "sar/nn/tasks/regress.hpp"

namespace sar {

/// What a task provides (classify_task is the model): its loss and metrics over a model's
/// output rows (nodes, or graphs for a graph-level task). Task::loss, metric_sums and
/// named_metrics are templates over the output type and the targets' view (a node_task).
template <class Task>
concept row_task = requires(double nodes, Eigen::Index width) {
  { Task::kind } -> std::convertible_to<task_kind>;
  { Task::normaliser(nodes, width) } -> std::same_as<double>;
};

/// The built-in tasks, one per row of task_table.
using builtin_tasks = type_list<classify_task, regress_task, multilabel_task,
                                graph_classify_task, graph_regress_task>;
static_assert([]<class... T>(type_list<T...>) {
  return sizeof...(T) == std::size(task_table) && (row_task<T> && ...);
}(builtin_tasks{}), "sar::builtin_tasks needs one sar::row_task per row of sar::task_table");

/// f.template operator()<Task>() for the task of `kind`, and its result.
template <class Function>
auto with_task(task_kind kind, Function&& f) {
  auto found = with_first(builtin_tasks{}, [&]<class Task>() { return Task::kind == kind; }, f);
  SAR_CHECK(found, invalid_argument, "sar::with_task: no task of kind ", static_cast<int>(kind));
  if constexpr (!std::is_same_v<decltype(found), bool>) return *std::move(found);
}

}  // namespace sar
