// Multi-label node classification: a row of 0/1 per node, one sigmoid per label, binary
// cross-entropy with logits over every value, scored by ROC-AUC averaged over labels as OGB
// does for ogbn-proteins (also micro-F1 at logit 0).
#pragma once

#include <span>
#include <string>
#include <utility>
#include <vector>

#include "sar/core/task_kind.hpp"
#include "sar/nn/loss.hpp"
#include "sar/nn/metrics.hpp"

namespace sar {

/// The multilabel task (the seam: sar/nn/tasks.hpp). Its functions read a node_task's targets.
struct multilabel_task {
  /// Its row of task_table.
  static constexpr task_kind kind = task_kind::multilabel;
  /// Histogram bins per label of the ROC-AUC (multilabel_sums).
  static constexpr int auc_bins = 4096;

  /// The loss's normaliser: every selected value.
  static double normaliser(double nodes, Eigen::Index width) {
    return nodes * static_cast<double>(width);
  }

  /// Binary cross-entropy with logits over the selected rows, its gradient assigned to
  /// doutputs.
  template <class T, class Targets>
  static double loss(const Targets& t, const matrix<T>& outputs, const node_selection& selection,
                     double normaliser, matrix<T>& doutputs) {
    return binary_cross_entropy_with_logits(outputs, t.targets, selection, normaliser, doutputs);
  }

  /// multilabel_sums::sums of the selected rows.
  template <class T, class Targets>
  static std::vector<double> metric_sums(const Targets& t, const matrix<T>& outputs,
                                         const node_selection& selection) {
    return multilabel_metrics(outputs, t.targets, selection, auc_bins).sums;
  }

  /// {rocauc, f1} from metric_sums' all-reduced sums.
  template <class Targets>
  static std::vector<std::pair<std::string, double>> named_metrics(const Targets&,
                                                                   std::span<const double> sums,
                                                                   Eigen::Index width) {
    const multilabel_sums m{width, auc_bins, std::vector<double>(sums.begin(), sums.end())};
    return {{"rocauc", m.roc_auc()}, {"f1", m.micro_f1()}};
  }
};

}  // namespace sar
