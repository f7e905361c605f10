// The kinds of node-level task (what a model's outputs are compared with) and their names:
// the vocabulary the readers, stores and training loops share (sar/nn/task.hpp has the
// losses and metrics of each).
#pragma once

#include <string>
#include <string_view>

#include "sar/core/error.hpp"

namespace sar {

/// What a node-level model predicts: a class per node (classify), a row of floats per node
/// (regress) or a row of 0/1 per node, one sigmoid per label (multilabel).
enum class task_kind { classify, regress, multilabel };

namespace detail {
/// Each task's name and its score's (indexed by task_kind).
struct task_names {
  const char* task;   ///< "classify", ...
  const char* score;  ///< "acc", ...
};
inline constexpr task_names task_names_of[] = {
    {"classify", "acc"}, {"regress", "r2"}, {"multilabel", "rocauc"}};
}  // namespace detail

/// "classify", "regress" or "multilabel".
inline const char* task_name(task_kind kind) {
  return detail::task_names_of[static_cast<int>(kind)].task;
}

/// The task named `name` (task_name's). Throws sar::invalid_argument for another name.
inline task_kind parse_task(std::string_view name) {
  for (task_kind k : {task_kind::classify, task_kind::regress, task_kind::multilabel})
    if (name == task_name(k)) return k;
  throw invalid_argument(message("sar::parse_task: unknown task '", name,
                                 "' (classify, regress or multilabel)"));
}

namespace detail {
/// The task named `name` in the metadata file `file` (a .npy dataset's or a store's). Throws
/// sar::io_error naming `where` and the file for another name.
inline task_kind task_in_metadata(std::string_view name, const std::string& file,
                                  const char* where) {
  try {
    return parse_task(name);
  } catch (const invalid_argument&) {
    throw io_error(message(where, ": ", file, ": unknown task '", name,
                           "' (classify, regress or multilabel)"));
  }
}
}  // namespace detail

/// The short name of a task's score in reports and metrics keys ("test_" + it): "acc", "r2"
/// or "rocauc".
inline const char* score_name(task_kind kind) {
  return detail::task_names_of[static_cast<int>(kind)].score;
}

}  // namespace sar
