// The metrics of node-level tasks, masked by the split: accuracy (classes), RMSE / MAE / R^2
// (regression) and micro-F1 / ROC-AUC (multi-label). Each returns SUMS over the local
// selected nodes: a distributed run all-reduces them (one span of doubles or counts) and then
// reads the metric, a single process reads it directly, and the result does not depend on how
// the nodes are split over ranks (up to the order of floating-point sums).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <utility>
#include <vector>

#include "sar/core/error.hpp"
#include "sar/core/types.hpp"
#include "sar/kernels/dense.hpp"
#include "sar/nn/loss.hpp"

namespace sar {

/// The median of `values` (the upper one of an even count; 0 if empty): of epoch or step
/// times, say.
inline double median(std::vector<double> values) {
  if (values.empty()) return 0.0;
  const auto middle = values.begin() + static_cast<std::ptrdiff_t>(values.size() / 2);
  std::nth_element(values.begin(), middle, values.end());
  return *middle;
}

/// Correct and total selected nodes: local sums, which a distributed run all-reduces.
struct accuracy_counts {
  /// Selected nodes whose arg-max is their label.
  node_t correct = 0;
  /// Selected nodes.
  node_t total = 0;
  /// correct / total; 0 when total is 0.
  double fraction() const { return total > 0 ? static_cast<double>(correct) / total : 0.0; }
};

/// Counts the selected rows whose arg-max (the first, on ties) equals the label.
/// Requires labels.size() == logits.rows() and split empty or of that size; throws
/// sar::invalid_argument otherwise. Selected nodes with label -1 count as wrong.
template <class T>
accuracy_counts accuracy(const matrix<T>& logits, std::span<const std::int32_t> labels,
                         const node_selection& selection) {
  const Eigen::Index n = logits.rows();
  SAR_CHECK(static_cast<Eigen::Index>(labels.size()) == n, invalid_argument, "sar::accuracy: ",
            labels.size(), " labels for ", n, " rows");
  SAR_CHECK(selection.split.empty() || static_cast<Eigen::Index>(selection.split.size()) == n,
            invalid_argument, "sar::accuracy: ", selection.split.size(), " split entries for ",
            n, " rows");
  const auto sums = reduce_rows(n, 2, [&](Eigen::Index i, double* acc) {
    if (!selection.selected(i)) return;
    acc[1] += 1;
    if (logits.cols() == 0) return;
    Eigen::Index best = 0;
    logits.row(i).maxCoeff(&best);
    acc[0] += (best == labels[i]);
  });
  return {static_cast<node_t>(sums[0]), static_cast<node_t>(sums[1])};
}


/// The sums regression metrics are read from: the selected nodes, and per output k the
/// squared and absolute errors and the targets' first two moments about `shift_k`.
struct regression_sums {
  /// Outputs per node.
  Eigen::Index outputs = 0;
  /// [selected nodes, then per output k: squared error, absolute error, sum of (y - shift),
  /// sum of (y - shift)^2]: what a distributed run all-reduces (sum) in place.
  std::vector<double> sums;

  /// Selected nodes.
  double count() const { return sums.empty() ? 0 : sums[0]; }
  /// The sums of outputs and targets both multiplied by scale[k] per output (e.g. back to the
  /// original units of standardised targets). Requires scale of `outputs` entries (throws
  /// sar::invalid_argument).
  void rescale(std::span<const double> scale) {
    SAR_CHECK(static_cast<Eigen::Index>(scale.size()) == outputs, invalid_argument,
              "sar::regression_sums::rescale: ", scale.size(), " factors for ", outputs,
              " outputs");
    for (Eigen::Index k = 0; k < outputs; ++k) {
      const double s = scale[static_cast<std::size_t>(k)];
      for (int which = 0; which < 4; ++which)
        sums[static_cast<std::size_t>(1 + 4 * k + which)] *= which == 0 || which == 3 ? s * s : s;
    }
  }
  /// Root mean squared error over every selected value (NaN without values).
  double rmse() const { return std::sqrt(total(0) / values()); }
  /// Mean absolute error over every selected value (NaN without values).
  double mae() const { return total(1) / values(); }
  /// R^2 = 1 - SSE_k / SST_k, averaged over the outputs whose targets vary (scikit-learn's
  /// uniform average); NaN if none does.
  double r2() const {
    double total_r2 = 0;
    int counted = 0;
    for (Eigen::Index k = 0; k < outputs; ++k) {
      const double n = count(), mean = at(k, 2) / n;
      const double sst = at(k, 3) - n * mean * mean;
      if (!(sst > 0)) continue;
      total_r2 += 1 - at(k, 0) / sst;
      ++counted;
    }
    return counted > 0 ? total_r2 / counted : std::numeric_limits<double>::quiet_NaN();
  }

 private:
  double at(Eigen::Index k, int which) const {
    return sums[static_cast<std::size_t>(1 + 4 * k + which)];
  }
  double total(int which) const {
    double t = 0;
    for (Eigen::Index k = 0; k < outputs; ++k) t += at(k, which);
    return t;
  }
  double values() const {
    const double v = count() * static_cast<double>(outputs);
    return v > 0 ? v : std::numeric_limits<double>::quiet_NaN();
  }
};

/// The regression sums of the selected rows of outputs against targets (same shape). shift:
/// empty (0) or one value per output, the same on every rank (e.g. the training targets' mean:
/// it keeps R^2's sums free of cancellation when targets are far from 0). Throws
/// sar::invalid_argument on a shape mismatch.
template <class T, class Y>
regression_sums regression_metrics(const matrix<T>& outputs,
                                   const Eigen::MatrixBase<Y>& targets,
                                   const node_selection& selection,
                                   std::span<const double> shift = {}) {
  const Eigen::Index n = outputs.rows(), c = outputs.cols();
  detail::check_loss_arguments("sar::regression_metrics", outputs, targets, selection, 1.0);
  SAR_CHECK(shift.empty() || static_cast<Eigen::Index>(shift.size()) == c, invalid_argument,
            "sar::regression_metrics: ", shift.size(), " shifts for ", c, " outputs");
  const auto shift_of = [&](Eigen::Index k) {
    return shift.empty() ? 0.0 : shift[static_cast<std::size_t>(k)];
  };
  auto sums = reduce_rows(n, 1 + 4 * c, [&](Eigen::Index i, double* acc) {
    if (!selection.selected(i)) return;
    acc[0] += 1;
    for (Eigen::Index k = 0; k < c; ++k) {
      const double y = static_cast<double>(targets(i, k));
      const double e = static_cast<double>(outputs(i, k)) - y, centred = y - shift_of(k);
      double* a = acc + 1 + 4 * k;
      a[0] += e * e;
      a[1] += std::abs(e);
      a[2] += centred;
      a[3] += centred * centred;
    }
  });
  return {c, std::move(sums)};
}

/// The sums multi-label metrics are read from: true and false positives and false negatives
/// at logit 0 (micro-F1), and per label a histogram of the selected logits of positive and of
/// negative nodes (ROC-AUC).
struct multilabel_sums {
  /// Labels per node.
  Eigen::Index labels = 0;
  /// Histogram bins per label and class (bins cover logits in [-logit_range, logit_range];
  /// the outer bins take everything beyond).
  int bins = 0;
  /// [tp, fp, fn, then per label: `bins` counts of positives, `bins` counts of negatives]:
  /// what a distributed run all-reduces (sum) in place.
  std::vector<double> sums;

  /// Logits beyond +-logit_range share the outer bins.
  static constexpr double logit_range = 16;

  /// 2 tp / (2 tp + fp + fn) over every label (NaN without positives or predictions).
  double micro_f1() const {
    const double tp = sums[0], fp = sums[1], fn = sums[2];
    return 2 * tp + fp + fn > 0 ? 2 * tp / (2 * tp + fp + fn)
                                : std::numeric_limits<double>::quiet_NaN();
  }
  /// ROC-AUC averaged over the labels with positive and negative selected nodes (OGB's rule
  /// for ogbn-proteins); NaN if none. Logits in one bin count as ties (half a pair), so the
  /// value is exact when no two logits of different classes share a bin (bins of width
  /// 2 logit_range / bins), and otherwise within the fraction of such pairs.
  double roc_auc() const {
    double total = 0;
    int counted = 0;
    for (Eigen::Index k = 0; k < labels; ++k) {
      const double* positive = sums.data() + 3 + 2 * bins * k;
      const double* negative = positive + bins;
      double pairs = 0, negatives_below = 0, positives = 0;
      for (int b = 0; b < bins; ++b) {
        pairs += positive[b] * (negatives_below + 0.5 * negative[b]);
        negatives_below += negative[b];
        positives += positive[b];
      }
      if (positives == 0 || negatives_below == 0) continue;
      total += pairs / (positives * negatives_below);
      ++counted;
    }
    return counted > 0 ? total / counted : std::numeric_limits<double>::quiet_NaN();
  }
};

/// The multi-label sums of the selected rows of logits against multi-hot targets (same shape,
/// values 0 or 1). Requires bins >= 2. Throws sar::invalid_argument on a shape mismatch, bins
/// < 2 or a selected target other than 0 or 1 (naming the node).
template <class T, class Y>
multilabel_sums multilabel_metrics(const matrix<T>& logits, const Eigen::MatrixBase<Y>& targets,
                                   const node_selection& selection, int bins = 4096) {
  using Scalar = typename Y::Scalar;
  const char* where = "sar::multilabel_metrics";
  detail::check_loss_arguments(where, logits, targets, selection, 1.0);
  SAR_CHECK(bins >= 2, invalid_argument, where, ": ", bins, " bins (at least 2)");
  const Eigen::Index n = logits.rows(), c = logits.cols();
  detail::check_multi_hot(where, targets, selection);
  const double range = multilabel_sums::logit_range;
  const auto bin_of = [&](double z) {
    const double t = (std::clamp(z, -range, range) + range) / (2 * range);
    return std::min(bins - 1, static_cast<int>(t * bins));
  };
  auto sums = reduce_rows(n, 3 + 2 * bins * c, [&](Eigen::Index i, double* acc) {
    if (!selection.selected(i)) return;
    for (Eigen::Index k = 0; k < c; ++k) {
      const double z = static_cast<double>(logits(i, k));
      const bool positive = targets(i, k) == Scalar(1), predicted = z > 0;
      acc[0] += positive && predicted;
      acc[1] += !positive && predicted;
      acc[2] += positive && !predicted;
      acc[3 + 2 * bins * k + (positive ? 0 : bins) + bin_of(std::isnan(z) ? 0 : z)] += 1;
    }
  });
  return {c, bins, std::move(sums)};
}

}  // namespace sar
