// Node classification: one class id per node (int32, -1 = unlabelled), softmax cross-entropy,
// scored by accuracy.
#pragma once

#include <limits>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "sar/core/task_kind.hpp"
#include "sar/nn/loss.hpp"
#include "sar/nn/metrics.hpp"

namespace sar {

/// The classify task (the seam: sar/nn/tasks.hpp). Its functions read a node_task's labels.
struct classify_task {
  /// Its row of task_table.
  static constexpr task_kind kind = task_kind::classify;

  /// The loss's normaliser: the selected nodes.
  static double normaliser(double nodes, Eigen::Index) { return nodes; }

  /// Softmax cross-entropy over the selected rows, its gradient assigned to doutputs.
  template <class T, class Targets>
  static double loss(const Targets& t, const matrix<T>& outputs, const node_selection& selection,
                     double normaliser, matrix<T>& doutputs) {
    return softmax_cross_entropy(outputs, t.labels, selection, normaliser, doutputs);
  }

  /// [correct, total] over the selected rows.
  template <class T, class Targets>
  static std::vector<double> metric_sums(const Targets& t, const matrix<T>& outputs,
                                         const node_selection& selection) {
    const accuracy_counts a = accuracy(outputs, t.labels, selection);
    return {static_cast<double>(a.correct), static_cast<double>(a.total)};
  }

  /// {acc} from metric_sums' all-reduced sums; NaN without nodes.
  template <class Targets>
  static std::vector<std::pair<std::string, double>> named_metrics(const Targets&,
                                                                   std::span<const double> sums,
                                                                   Eigen::Index) {
    return {{"acc", sums[1] > 0 ? sums[0] / sums[1] : std::numeric_limits<double>::quiet_NaN()}};
  }
};

}  // namespace sar
