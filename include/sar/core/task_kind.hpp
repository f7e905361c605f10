// The kinds of task and what each asks of the data: the vocabulary the readers, stores and
// training loops share. One row per task in `task_table`; the loss and metrics of each are its
// file under sar/nn/tasks/ (the registry: sar/nn/tasks.hpp). A new task is a row here, its file
// there and one line in the registry. Node-level tasks predict per node of one graph;
// graph-level ones per graph of a collection (sar/graph/graph_collection.hpp).
#pragma once

#include <cmath>
#include <cstddef>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sar/core/error.hpp"

namespace sar {

/// What a model predicts: a class per node (classify), a row of floats per node (regress), a
/// row of 0/1 per node, one sigmoid per label (multilabel), or a class or a row of floats per
/// graph of a collection (graph_classify, graph_regress).
enum class task_kind { classify, regress, multilabel, graph_classify, graph_regress };

/// What a task's rows are: the nodes of one graph, or the graphs of a collection.
enum class task_level { node, graph };

/// What a task's targets are, as the readers and stores hold them.
enum class target_form {
  class_ids,  ///< one int32 class per node (-1 = unlabelled); the model's width is num_classes
  real_rows,  ///< a row of finite floats per node
  binary_rows ///< a row of 0/1 floats per node
};

/// One task's facts (a row of task_table).
struct task_facts {
  task_kind kind;            ///< its id
  std::string_view name;     ///< --task's value, stores' and model files' "task"
  std::string_view score;    ///< its score's short name ("test_" + it in metrics)
  target_form form;          ///< what its targets are
  std::string_view ogb_stem; ///< the OGB raw file of its targets ("node-label", ...)
  bool standardised;         ///< whether training standardises its targets by default
  std::string_view output;   ///< what one output is, after the count 1 ("class", ...)
  std::string_view outputs;  ///< what its outputs are, after another count ("classes", ...)
  task_level level = task_level::node;  ///< whether it predicts per node or per graph
};

/// Every task, indexed by task_kind.
inline constexpr task_facts task_table[] = {
    {task_kind::classify, "classify", "acc", target_form::class_ids, "node-label", false,
     "class", "classes"},
    {task_kind::regress, "regress", "r2", target_form::real_rows, "node-target", true,
     "regression target", "regression targets"},
    {task_kind::multilabel, "multilabel", "rocauc", target_form::binary_rows, "node-label",
     false, "label (multi-label)", "labels (multi-label)"},
    {task_kind::graph_classify, "graph-classify", "acc", target_form::class_ids, "graph-label",
     false, "class", "classes", task_level::graph},
    {task_kind::graph_regress, "graph-regress", "r2", target_form::real_rows, "graph-target",
     true, "regression target", "regression targets", task_level::graph},
};

static_assert([] {
  for (std::size_t k = 0; k < std::size(task_table); ++k)
    if (static_cast<std::size_t>(task_table[k].kind) != k) return false;
  return true;
}(), "sar::task_table's rows must be in task_kind's order");

/// The row of task_table for `kind`.
constexpr const task_facts& facts_of(task_kind kind) {
  return task_table[static_cast<int>(kind)];
}

/// Whether a task predicts per graph of a collection (graph_classify, graph_regress).
constexpr bool is_graph_level(task_kind kind) { return facts_of(kind).level == task_level::graph; }

/// "classify", "regress", "multilabel", "graph-classify" or "graph-regress".
inline const char* task_name(task_kind kind) { return facts_of(kind).name.data(); }

/// The short name of a task's score in reports and metrics keys ("test_" + it): "acc", "r2"
/// or "rocauc".
inline const char* score_name(task_kind kind) { return facts_of(kind).score.data(); }

/// Whether a task's targets are class ids (labels, num_classes) rather than rows of floats.
constexpr bool has_class_ids(task_kind kind) {
  return facts_of(kind).form == target_form::class_ids;
}

/// Whether a target row of `kind` may hold v (finite; 0 or 1 for binary rows).
inline bool valid_target(task_kind kind, float v) {
  return facts_of(kind).form == target_form::binary_rows ? v == 0.0f || v == 1.0f
                                                         : std::isfinite(v);
}

/// What valid_target asks, for messages: "a finite number" or "0 or 1".
constexpr const char* target_rule(task_kind kind) {
  return facts_of(kind).form == target_form::binary_rows ? "0 or 1" : "a finite number";
}

/// The names of every task of `level` ("classify, regress or multilabel"), or of every task
/// without one, for messages.
inline std::string task_choices(std::optional<task_level> level = std::nullopt) {
  std::vector<std::string_view> names;
  for (const task_facts& t : task_table)
    if (!level || t.level == *level) names.push_back(t.name);
  std::string s;
  for (std::size_t k = 0; k < names.size(); ++k)
    s.append(k == 0 ? "" : k + 1 == names.size() ? " or " : ", ").append(names[k]);
  return s;
}

/// The task named `name` (task_name's), or none.
inline std::optional<task_kind> task_named(std::string_view name) {
  for (const task_facts& t : task_table)
    if (name == t.name) return t.kind;
  return std::nullopt;
}

/// The task named `name` (task_name's). Throws sar::invalid_argument for another name.
inline task_kind parse_task(std::string_view name) {
  const std::optional<task_kind> kind = task_named(name);
  SAR_CHECK(kind, invalid_argument, "sar::parse_task: unknown task '", name, "' (",
            task_choices(), ")");
  return *kind;
}

namespace detail {
/// The task of `level` named `name` in the metadata file `file` (a .npy dataset's or a store's:
/// node; a graph collection's: graph). Throws sar::io_error naming `where` and the file for
/// another name.
inline task_kind task_in_metadata(std::string_view name, const std::string& file,
                                  const char* where, task_level level = task_level::node) {
  const std::optional<task_kind> kind = task_named(name);
  SAR_CHECK(kind && facts_of(*kind).level == level, io_error, where, ": ", file, ": unknown task '",
            name, "' (", task_choices(level), ")");
  return *kind;
}
}  // namespace detail

}  // namespace sar
