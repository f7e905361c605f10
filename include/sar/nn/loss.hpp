// Masked softmax cross-entropy and accuracy for node classification. Both return SUMS over the
// local selected nodes (a loss contribution already divided by the global normaliser, a
// correct/total count), so a distributed run all-reduces them and a single process uses them
// as they are.
#pragma once

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

}  // namespace sar
