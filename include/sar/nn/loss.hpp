// The losses of node-level tasks, masked by the split: softmax cross-entropy (classes),
// mean squared error (regression, several outputs per node) and binary cross-entropy with
// logits (multi-label). Each returns a SUM over the local selected nodes already divided by
// the global normaliser, so a distributed run all-reduces it and a single process uses it as
// it is, and assigns the gradient of that sum. Metrics are in sar/nn/metrics.hpp.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "sar/core/error.hpp"
#include "sar/core/types.hpp"
#include "sar/kernels/dense.hpp"

namespace sar {

/// Which local nodes count: those whose split equals `which`. An empty split selects every
/// node (with which == node_split::none meaning "all").
struct node_selection {
  /// Split of each local node (empty: every node is selected).
  std::span<const node_split> split;
  /// The split that counts.
  node_split which = node_split::train;

  /// Whether local node i counts.
  bool selected(Eigen::Index i) const {
    return split.empty() ? true : split[static_cast<std::size_t>(i)] == which;
  }
  /// Number of selected nodes among the first n (what a single process passes as normaliser;
  /// a distributed run all-reduces it).
  node_t count(Eigen::Index n) const {
    if (split.empty()) return n;
    node_t c = 0;
    for (Eigen::Index i = 0; i < n; ++i) c += selected(i);
    return c;
  }
};

/// Softmax cross-entropy over the selected rows of logits (rows = local nodes, columns =
/// classes), normalised by `normaliser` (the GLOBAL number of selected nodes).
/// Returns sum over local selected i of -log softmax(logits_i)[labels_i] / normaliser, and
/// ASSIGNS dlogits (resized like logits) = (softmax(logits_i) - onehot(labels_i)) / normaliser
/// on selected rows and 0 elsewhere. Log-sum-exp in double: stable for any finite logits.
/// Requires labels.size() == logits.rows(), split empty or of that size, normaliser > 0
/// (ignored when no node is selected anywhere: pass 1). Throws sar::invalid_argument on a size
/// mismatch or when a selected node's label is outside [0, classes); sar::numeric_error when
/// a selected row holds a non-finite logit.
template <class T>
double softmax_cross_entropy(const matrix<T>& logits, std::span<const std::int32_t> labels,
                             const node_selection& selection, double normaliser,
                             matrix<T>& dlogits) {
  const Eigen::Index n = logits.rows(), c = logits.cols();
  SAR_CHECK(static_cast<Eigen::Index>(labels.size()) == n, invalid_argument,
            "sar::softmax_cross_entropy: ", labels.size(), " labels for ", n, " rows");
  SAR_CHECK(selection.split.empty() || static_cast<Eigen::Index>(selection.split.size()) == n,
            invalid_argument, "sar::softmax_cross_entropy: ", selection.split.size(),
            " split entries for ", n, " rows");
  SAR_CHECK(normaliser > 0, invalid_argument, "sar::softmax_cross_entropy: normaliser ",
            normaliser);
  dlogits.resize(n, c);
  const double inv = 1.0 / normaliser;
  // Validate labels first (serially, so the error names the first bad node).
  for (Eigen::Index i = 0; i < n; ++i)
    if (selection.selected(i))
      SAR_CHECK(labels[i] >= 0 && labels[i] < c, invalid_argument,
                "sar::softmax_cross_entropy: node ", i, " is selected but has label ", labels[i],
                " outside [0, ", c, ")");
  const auto sums = reduce_rows(n, 2, [&](Eigen::Index i, double* acc) {
    auto d = dlogits.row(i);
    if (!selection.selected(i) || c == 0) {
      d.setZero();
      return;
    }
    const auto z = logits.row(i);
    double top = static_cast<double>(z(0));
    for (Eigen::Index k = 1; k < c; ++k) top = std::max(top, static_cast<double>(z(k)));
    double total = 0;
    for (Eigen::Index k = 0; k < c; ++k) total += std::exp(static_cast<double>(z(k)) - top);
    const double log_total = std::log(total);
    const std::int32_t label = labels[i];
    for (Eigen::Index k = 0; k < c; ++k) {
      const double p = std::exp(static_cast<double>(z(k)) - top - log_total);
      d(k) = static_cast<T>((p - (k == label ? 1.0 : 0.0)) * inv);
    }
    const double row_loss = log_total + top - static_cast<double>(z(label));
    if (std::isfinite(row_loss)) acc[0] += row_loss * inv;
    else acc[1] += 1;
  });
  SAR_CHECK(sums[1] == 0, numeric_error,
            "sar::softmax_cross_entropy: ", sums[1], " selected rows have non-finite logits");
  return sums[0];
}

namespace detail {
/// Throws sar::invalid_argument unless targets, the split and the normaliser fit outputs.
template <class T, class Y>
void check_loss_arguments(const char* where, const matrix<T>& outputs,
                          const Eigen::MatrixBase<Y>& targets,
                          const node_selection& selection, double normaliser) {
  SAR_CHECK(targets.rows() == outputs.rows() && targets.cols() == outputs.cols(),
            invalid_argument, where, ": targets of ", targets.rows(), " x ", targets.cols(),
            " for outputs of ", outputs.rows(), " x ", outputs.cols());
  SAR_CHECK(selection.split.empty() ||
                static_cast<Eigen::Index>(selection.split.size()) == outputs.rows(),
            invalid_argument, where, ": ", selection.split.size(), " split entries for ",
            outputs.rows(), " rows");
  SAR_CHECK(normaliser > 0, invalid_argument, where, ": normaliser ", normaliser);
}

/// Throws sar::invalid_argument naming `where` and the first selected node whose target is
/// not 0 or 1 (checked serially, so the error names the first one).
template <class Y>
void check_multi_hot(const char* where, const Eigen::MatrixBase<Y>& targets,
                     const node_selection& selection) {
  using Scalar = typename Y::Scalar;
  for (Eigen::Index i = 0; i < targets.rows(); ++i)
    if (selection.selected(i))
      for (Eigen::Index k = 0; k < targets.cols(); ++k)
        SAR_CHECK(targets(i, k) == Scalar(0) || targets(i, k) == Scalar(1), invalid_argument,
                  where, ": node ", i, " is selected but its target ", k, " is ",
                  static_cast<double>(targets(i, k)), " (multi-hot targets are 0 or 1)");
}
}  // namespace detail

/// Mean squared error over the selected rows (regression; rows = local nodes, columns =
/// outputs). Returns sum over local selected i and outputs k of
/// w_k (outputs_ik - targets_ik)^2 / normaliser and ASSIGNS doutputs (resized like outputs) =
/// 2 w_k (outputs_ik - targets_ik) / normaliser on selected rows, 0 elsewhere. For a mean over
/// every value pass normaliser = the GLOBAL number of selected nodes x outputs. weights: empty
/// (every w_k = 1) or one per output (e.g. 1 / variance_k: per-output normalisation).
/// Throws sar::invalid_argument on a shape mismatch or a weight that is negative or not
/// finite; sar::numeric_error naming the row when a selected output or target is not finite.
template <class T, class Y>
double mean_squared_error(const matrix<T>& outputs, const Eigen::MatrixBase<Y>& targets,
                          const node_selection& selection, double normaliser,
                          matrix<T>& doutputs, std::span<const double> weights = {}) {
  const char* where = "sar::mean_squared_error";
  detail::check_loss_arguments(where, outputs, targets, selection, normaliser);
  const Eigen::Index n = outputs.rows(), c = outputs.cols();
  SAR_CHECK(weights.empty() || static_cast<Eigen::Index>(weights.size()) == c, invalid_argument,
            where, ": ", weights.size(), " weights for ", c, " outputs");
  for (std::size_t k = 0; k < weights.size(); ++k)
    SAR_CHECK(std::isfinite(weights[k]) && weights[k] >= 0, invalid_argument, where,
              ": weight ", k, " is ", weights[k]);
  doutputs.resize(n, c);
  const double inv = 1.0 / normaliser;
  auto weight = [&](Eigen::Index k) {
    return weights.empty() ? 1.0 : weights[static_cast<std::size_t>(k)];
  };
  auto error = [&](Eigen::Index i, Eigen::Index k) {
    return static_cast<double>(outputs(i, k)) - static_cast<double>(targets(i, k));
  };
  auto row_loss = [&](Eigen::Index i) {
    double row = 0;
    for (Eigen::Index k = 0; k < c; ++k) row += weight(k) * error(i, k) * error(i, k);
    return row;
  };
  const auto sums = reduce_rows(n, 2, [&](Eigen::Index i, double* acc) {
    auto d = doutputs.row(i);
    if (!selection.selected(i)) {
      d.setZero();
      return;
    }
    for (Eigen::Index k = 0; k < c; ++k) d(k) = static_cast<T>(2 * weight(k) * error(i, k) * inv);
    const double row = row_loss(i);
    if (std::isfinite(row)) acc[0] += row * inv;
    else acc[1] += 1;
  });
  if (sums[1] != 0) {  // name the first bad row
    Eigen::Index i = 0;
    while (i + 1 < n && (!selection.selected(i) || std::isfinite(row_loss(i)))) ++i;
    throw numeric_error(message(where, ": ", sums[1], " selected rows have a non-finite or ",
                                "overflowing error, the first is row ", i));
  }
  return sums[0];
}

/// Binary cross-entropy with logits over the selected rows (multi-label: one independent
/// sigmoid per column). Returns sum over local selected i and labels k of
/// softplus(z_ik) - y_ik z_ik (computed stably as max(z, 0) - y z + log1p(exp(-|z|))) /
/// normaliser and ASSIGNS dlogits = (sigmoid(z_ik) - y_ik) / normaliser on selected rows, 0
/// elsewhere. For a mean over every value pass the GLOBAL number of selected nodes x labels.
/// Throws sar::invalid_argument on a shape mismatch or when a selected target is not 0 or 1
/// (naming the first such node); sar::numeric_error when a selected logit is not finite.
template <class T, class Y>
double binary_cross_entropy_with_logits(const matrix<T>& logits,
                                        const Eigen::MatrixBase<Y>& targets,
                                        const node_selection& selection, double normaliser,
                                        matrix<T>& dlogits) {
  const char* where = "sar::binary_cross_entropy_with_logits";
  detail::check_loss_arguments(where, logits, targets, selection, normaliser);
  const Eigen::Index n = logits.rows(), c = logits.cols();
  detail::check_multi_hot(where, targets, selection);
  dlogits.resize(n, c);
  const double inv = 1.0 / normaliser;
  const auto sums = reduce_rows(n, 2, [&](Eigen::Index i, double* acc) {
    auto d = dlogits.row(i);
    if (!selection.selected(i)) {
      d.setZero();
      return;
    }
    double row = 0;
    for (Eigen::Index k = 0; k < c; ++k) {
      const double z = static_cast<double>(logits(i, k)), y = static_cast<double>(targets(i, k));
      row += std::max(z, 0.0) - y * z + std::log1p(std::exp(-std::abs(z)));
      const double sigmoid = z >= 0 ? 1 / (1 + std::exp(-z)) : std::exp(z) / (1 + std::exp(z));
      d(k) = static_cast<T>((sigmoid - y) * inv);
    }
    if (std::isfinite(row)) acc[0] += row * inv;
    else acc[1] += 1;
  });
  SAR_CHECK(sums[1] == 0, numeric_error, where, ": ", sums[1],
            " selected rows have non-finite logits");
  return sums[0];
}

}  // namespace sar
