// The task of a node-level model: what its outputs are compared with, by which loss, and what
// is reported. Three kinds, as DGL and PyG users know them:
//   classify    one class id per node (int32, -1 = unlabelled); softmax cross-entropy;
//               score: accuracy
//   regress     a row of floats per node (several outputs); mean squared error over every
//               value; score: R^2 (also RMSE and MAE, in the targets' original units)
//   multilabel  a row of 0/1 per node, one sigmoid per label; binary cross-entropy with
//               logits over every value; score: ROC-AUC averaged over labels, as OGB does for
//               ogbn-proteins (also micro-F1 at logit 0)
// A node_task views the local nodes' targets where they are; its loss and metric sums are
// local SUMS (sar/nn/loss.hpp, sar/nn/metrics.hpp), so a distributed loop all-reduces them.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sar/core/error.hpp"
#include "sar/core/types.hpp"
#include "sar/nn/loss.hpp"
#include "sar/nn/metrics.hpp"

namespace sar {

/// What a node-level model predicts (see the top of this file).
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

/// The short name of a task's score in reports and metrics keys ("test_" + it): "acc", "r2"
/// or "rocauc".
inline const char* score_name(task_kind kind) {
  return detail::task_names_of[static_cast<int>(kind)].score;
}

/// The local nodes' targets of a task and what follows from them: the loss, the metric sums
/// and the score. A view: labels, targets and scale must outlive it.
struct node_task {
  /// The kind of task.
  task_kind kind = task_kind::classify;
  /// classify: the class of each local node (-1 = unlabelled).
  std::span<const std::int32_t> labels;
  /// regress / multilabel: one row per local node, one column per output (row-major).
  Eigen::Map<const matrixf> targets{nullptr, 0, 0};
  /// regress: the factor each output's targets were divided by when standardised (their
  /// training deviation), so RMSE and MAE are reported in the original units; empty: 1.
  std::span<const double> scale;

  /// Histogram bins per label of the multi-label ROC-AUC (multilabel_sums).
  static constexpr int auc_bins = 4096;

  /// Throws sar::invalid_argument naming `where` unless the targets fit n local nodes and a
  /// model of `width` outputs (classify: n labels, the selected ones checked by the loss;
  /// regress / multilabel: n x width targets, scale empty or of width entries).
  void check(node_t n, Eigen::Index width, const char* where) const {
    if (kind == task_kind::classify) {
      SAR_CHECK(static_cast<node_t>(labels.size()) == n, invalid_argument, where, ": ",
                labels.size(), " labels for ", n, " local nodes");
      return;
    }
    SAR_CHECK(targets.rows() == n && targets.cols() == width, invalid_argument, where, ": ",
              task_name(kind), " targets of ", targets.rows(), " x ", targets.cols(), " for ", n,
              " local nodes and a model of ", width, " outputs");
    SAR_CHECK(scale.empty() || static_cast<Eigen::Index>(scale.size()) == width,
              invalid_argument, where, ": ", scale.size(), " scale factors for ", width,
              " outputs");
  }

  /// The loss's normaliser for `nodes` selected nodes (over all ranks) and outputs of
  /// `width`: the nodes (classify) or every value (regress, multilabel).
  double normaliser(double nodes, Eigen::Index width) const {
    return kind == task_kind::classify ? nodes : nodes * static_cast<double>(width);
  }

  /// The task's loss over the selected rows of outputs (a local sum divided by `normaliser`)
  /// and its gradient, ASSIGNED to doutputs (sar/nn/loss.hpp; throws as the loss does).
  template <class T>
  double loss(const matrix<T>& outputs, const node_selection& selection, double normaliser,
              matrix<T>& doutputs) const {
    switch (kind) {
      case task_kind::classify:
        return softmax_cross_entropy(outputs, labels, selection, normaliser, doutputs);
      case task_kind::regress:
        return mean_squared_error(outputs, targets, selection, normaliser, doutputs);
      case task_kind::multilabel:
        return binary_cross_entropy_with_logits(outputs, targets, selection, normaliser,
                                                doutputs);
    }
    return 0;
  }

  /// The metric sums of the selected rows (what a distributed run all-reduces), flat:
  /// classify [correct, total]; regress regression_sums::sums; multilabel
  /// multilabel_sums::sums. The same length on every rank for one width.
  template <class T>
  std::vector<double> metric_sums(const matrix<T>& outputs,
                                  const node_selection& selection) const {
    switch (kind) {
      case task_kind::classify: {
        const accuracy_counts a = accuracy(outputs, labels, selection);
        return {static_cast<double>(a.correct), static_cast<double>(a.total)};
      }
      case task_kind::regress:
        return regression_metrics(outputs, targets, selection).sums;
      case task_kind::multilabel:
        return multilabel_metrics(outputs, targets, selection, auc_bins).sums;
    }
    return {};
  }

  /// The score of a split from its (all-reduced) metric sums: accuracy, R^2 or ROC-AUC; NaN
  /// for a split without nodes.
  double score(std::span<const double> sums, Eigen::Index width) const {
    return named_metrics(sums, width).front().second;
  }

  /// Every metric of a split from its metric sums, the score first, named as in reports:
  /// classify {acc}; regress {r2, rmse, mae} (RMSE and MAE times `scale`); multilabel
  /// {rocauc, f1} (micro-F1). NaN for a split without nodes.
  std::vector<std::pair<std::string, double>> named_metrics(std::span<const double> sums,
                                                            Eigen::Index width) const {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    switch (kind) {
      case task_kind::classify:
        return {{"acc", sums[1] > 0 ? sums[0] / sums[1] : nan}};
      case task_kind::regress: {
        regression_sums r{width, std::vector<double>(sums.begin(), sums.end())};
        if (!scale.empty()) r.rescale(scale);
        return {{"r2", r.r2()}, {"rmse", r.rmse()}, {"mae", r.mae()}};
      }
      case task_kind::multilabel: {
        const multilabel_sums m{width, auc_bins, std::vector<double>(sums.begin(), sums.end())};
        return {{"rocauc", m.roc_auc()}, {"f1", m.micro_f1()}};
      }
    }
    return {};
  }
};

}  // namespace sar
