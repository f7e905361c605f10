// Node regression: a row of floats per node (several outputs), mean squared error over every
// value, scored by R^2 (also RMSE and MAE, in the targets' original units).
#pragma once

#include <span>
#include <string>
#include <utility>
#include <vector>

#include "sar/core/task_kind.hpp"
#include "sar/nn/loss.hpp"
#include "sar/nn/metrics.hpp"

namespace sar {

/// The regress task (the seam: sar/nn/tasks.hpp). Its functions read a node_task's targets and
/// scale (the factor each output was divided by when standardised; empty: 1).
struct regress_task {
  /// Its row of task_table.
  static constexpr task_kind kind = task_kind::regress;

  /// The loss's normaliser: every selected value.
  static double normaliser(double nodes, Eigen::Index width) {
    return nodes * static_cast<double>(width);
  }

  /// Mean squared error over the selected rows, its gradient assigned to doutputs.
  template <class T, class Targets>
  static double loss(const Targets& t, const matrix<T>& outputs, const node_selection& selection,
                     double normaliser, matrix<T>& doutputs) {
    return mean_squared_error(outputs, t.targets, selection, normaliser, doutputs);
  }

  /// regression_sums::sums of the selected rows.
  template <class T, class Targets>
  static std::vector<double> metric_sums(const Targets& t, const matrix<T>& outputs,
                                         const node_selection& selection) {
    return regression_metrics(outputs, t.targets, selection).sums;
  }

  /// {r2, rmse, mae} (RMSE and MAE times the scale) from metric_sums' all-reduced sums.
  template <class Targets>
  static std::vector<std::pair<std::string, double>> named_metrics(const Targets& t,
                                                                   std::span<const double> sums,
                                                                   Eigen::Index width) {
    regression_sums r{width, std::vector<double>(sums.begin(), sums.end())};
    if (!t.scale.empty()) r.rescale(t.scale);
    return {{"r2", r.r2()}, {"rmse", r.rmse()}, {"mae", r.mae()}};
  }
};

}  // namespace sar
