// The task of a node-level model: what its outputs are compared with, by which loss, and what
// is reported. Each kind is a file of sar/nn/tasks/ (the registry: sar/nn/tasks.hpp); the
// built-in ones, as DGL and PyG users know them:
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

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sar/core/error.hpp"
#include "sar/core/task_kind.hpp"
#include "sar/core/types.hpp"
#include "sar/nn/loss.hpp"
#include "sar/nn/metrics.hpp"
#include "sar/nn/tasks.hpp"

namespace sar {

/// The per-output mean and deviation regression targets were standardised with
/// (standardise_targets): a prediction p in standard units is p * scale + mean in the
/// original ones.
struct target_standardisation {
  std::vector<double> mean;   ///< per output
  std::vector<double> scale;  ///< per output: the deviation (1 where it is 0)
};

/// Standardises regression targets (local nodes x outputs) in place: each output minus the
/// training nodes' mean, divided by their (population) deviation, 1 where that is 0 or not
/// finite. Both are totalled over the ranks by `sum_over_ranks`, called twice with a
/// std::span<double> to sum element-wise (identity on one process, an all-reduce on P ranks:
/// collective then; a third time for the check below). Returns them. Throws
/// sar::invalid_argument if the split does not match the targets' rows, no rank has a training
/// node, or standardising would merge most of an output's distinct training targets into equal
/// floats (a few extreme targets, such as one of 3e38 among values near 1, swamp the mean and
/// deviation: the rest would train as one value), naming the output, its mean and deviation.
template <class SumOverRanks>
target_standardisation standardise_targets(matrixf& targets, std::span<const node_split> split,
                                           SumOverRanks&& sum_over_ranks) {
  constexpr const char* where = "sar::standardise_targets";
  SAR_CHECK(static_cast<Eigen::Index>(split.size()) == targets.rows(), invalid_argument, where,
            ": ", split.size(), " split entries for ", targets.rows(), " rows of targets");
  const auto outputs = static_cast<std::size_t>(targets.cols());
  std::vector<double> sums(outputs + 1, 0.0);  // per output; the training nodes last
  for (Eigen::Index i = 0; i < targets.rows(); ++i)
    if (split[static_cast<std::size_t>(i)] == node_split::train) {
      for (std::size_t c = 0; c < outputs; ++c) sums[c] += targets(i, static_cast<Eigen::Index>(c));
      sums.back() += 1;
    }
  sum_over_ranks(std::span<double>(sums));
  const double count = sums.back();
  SAR_CHECK(count > 0, invalid_argument, where, ": no training node on any rank");
  target_standardisation t;
  for (std::size_t c = 0; c < outputs; ++c) t.mean.push_back(sums[c] / count);
  std::vector<double> squares(outputs, 0.0);  // two passes: no cancellation
  for (Eigen::Index i = 0; i < targets.rows(); ++i)
    if (split[static_cast<std::size_t>(i)] == node_split::train)
      for (std::size_t c = 0; c < outputs; ++c) {
        const double d = targets(i, static_cast<Eigen::Index>(c)) - t.mean[c];
        squares[c] += d * d;
      }
  sum_over_ranks(std::span<double>(squares));
  for (std::size_t c = 0; c < outputs; ++c) {
    const double deviation = std::sqrt(squares[c] / count);
    t.scale.push_back(deviation > 0 && std::isfinite(deviation) ? deviation : 1.0);
  }
  const auto standard = [&](float v, std::size_t c) {
    return static_cast<float>((v - t.mean[c]) / t.scale[c]);
  };
  // Per output: the distinct training targets (adjacent in each rank's sorted order) that
  // standardising makes equal, and how many there are.
  std::vector<double> merged(2 * outputs, 0.0);
  std::vector<float> column;
  double largest = 0;  // this rank's largest training |target|, for the message
  for (std::size_t c = 0; c < outputs; ++c) {
    column.clear();
    for (Eigen::Index i = 0; i < targets.rows(); ++i)
      if (split[static_cast<std::size_t>(i)] == node_split::train)
        column.push_back(targets(i, static_cast<Eigen::Index>(c)));
    std::sort(column.begin(), column.end());
    for (std::size_t k = 1; k < column.size(); ++k)
      if (column[k] != column[k - 1]) {
        merged[2 * c + 1] += 1;
        merged[2 * c] += standard(column[k], c) == standard(column[k - 1], c);
      }
    for (const float v : column) largest = std::max(largest, std::abs(static_cast<double>(v)));
  }
  sum_over_ranks(std::span<double>(merged));
  for (std::size_t c = 0; c < outputs; ++c)
    SAR_CHECK(merged[2 * c] <= merged[2 * c + 1] / 2, invalid_argument, where,
              ": standardising output ", c, " with the training mean ", t.mean[c],
              " and deviation ", t.scale[c], " would make ", merged[2 * c], " of ",
              merged[2 * c + 1], " pairs of neighbouring distinct training targets equal in "
              "float32: a few "
              "extreme targets swamp the rest (the largest |target| on this rank is ", largest,
              "); remove or clip them, or train on the raw targets");
  for (Eigen::Index i = 0; i < targets.rows(); ++i)
    for (std::size_t c = 0; c < outputs; ++c) {
      float& v = targets(i, static_cast<Eigen::Index>(c));
      v = standard(v, c);
    }
  return t;
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

  /// Throws sar::invalid_argument naming `where` unless the targets fit n local nodes and a
  /// model of `width` outputs (classify: n labels, the selected ones checked by the loss;
  /// regress / multilabel: n x width targets, scale empty or of width entries).
  void check(node_t n, Eigen::Index width, const char* where) const {
    if (has_class_ids(kind)) {
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
    return with_task(kind, [&]<class Task>() { return Task::normaliser(nodes, width); });
  }

  /// The task's loss over the selected rows of outputs (a local sum divided by `normaliser`)
  /// and its gradient, ASSIGNED to doutputs (sar/nn/loss.hpp; throws as the loss does).
  template <class T>
  double loss(const matrix<T>& outputs, const node_selection& selection, double normaliser,
              matrix<T>& doutputs) const {
    return with_task(kind, [&]<class Task>() {
      return Task::loss(*this, outputs, selection, normaliser, doutputs);
    });
  }

  /// The metric sums of the selected rows (what a distributed run all-reduces), flat:
  /// classify [correct, total]; regress regression_sums::sums; multilabel
  /// multilabel_sums::sums. The same length on every rank for one width.
  template <class T>
  std::vector<double> metric_sums(const matrix<T>& outputs,
                                  const node_selection& selection) const {
    return with_task(kind,
                     [&]<class Task>() { return Task::metric_sums(*this, outputs, selection); });
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
    return with_task(kind,
                     [&]<class Task>() { return Task::named_metrics(*this, sums, width); });
  }
};

}  // namespace sar
