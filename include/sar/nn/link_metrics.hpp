// Link prediction's metrics with the conventions of OGB's link evaluators, computed where the
// scores are: each rank holds the scores of the pairs it scored, and only counts, each rank's
// K highest negative scores and (for AUC) one peer's positive scores at a time travel.
//
//   Hits@K  against one shared set of negatives (ogbl-collab): the fraction of positives that
//           score above the K-th highest negative score (a tie does not count); 1 when there
//           are fewer than K negatives.
//   MRR     against each positive's own negatives (ogbl-citation2): rank = 1 + (#negatives
//           above + #negatives above or equal) / 2, so a tie counts half (OGB >= 1.3); the mean
//           of 1 / rank, and Hits@1/3/10 as the fraction of ranks <= 1, 3, 10.
//   AUC     the probability that a positive outscores a shared negative, a tie counting half
//           (scikit-learn's roc_auc_score, which OGB uses).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "sar/comm/communicator.hpp"
#include "sar/core/error.hpp"

namespace sar {

/// The scores one rank made, for link_metrics (all as seen by that rank; any may be empty).
struct link_scores {
  std::span<const double> positives;         ///< one score per held-out positive pair
  std::span<const double> shared_negatives;  ///< scores of the shared negative pairs (Hits\@K, AUC)
  /// Scores of each positive's own negatives, row-major: positives.size() rows of
  /// negatives_per_positive (MRR); empty for none.
  std::span<const double> own_negatives;
  int negatives_per_positive = 0;  ///< columns of own_negatives
};

/// What link_metrics reports over all ranks (NaN where the data for it is absent).
struct link_report {
  double auc = std::numeric_limits<double>::quiet_NaN();  ///< area under the ROC curve
  std::vector<std::pair<int, double>> hits;               ///< (K, Hits\@K) for each K asked
  double mrr = std::numeric_limits<double>::quiet_NaN();  ///< mean reciprocal rank
  /// Hits\@1, \@3, \@10 of the per-positive ranks (with MRR).
  double mrr_hits[3] = {std::numeric_limits<double>::quiet_NaN(),
                        std::numeric_limits<double>::quiet_NaN(),
                        std::numeric_limits<double>::quiet_NaN()};

  /// The figures by name ("auc", "hits\@K", "mrr"), the absent ones left out: the metrics-JSON
  /// keys after a "valid_" or "test_" prefix.
  std::vector<std::pair<std::string, double>> named() const {
    std::vector<std::pair<std::string, double>> out;
    if (!std::isnan(auc)) out.emplace_back("auc", auc);
    for (const auto& [k, value] : hits) out.emplace_back("hits@" + std::to_string(k), value);
    if (!std::isnan(mrr)) out.emplace_back("mrr", mrr);
    return out;
  }
};

/// Whether `name` is a figure link evaluation reports: "auc", "mrr" (when the held-out sets
/// have per-source negatives) or "hits\@K" for a K of `hits_at` (the names of
/// link_report::named; what link_options::select_by may choose).
inline bool names_link_figure(const std::string& name, std::span<const int> hits_at) {
  return name == "auc" || name == "mrr" || std::ranges::any_of(hits_at, [&](int k) {
           return name == "hits@" + std::to_string(k);
         });
}

namespace detail {
inline void check_scores(std::span<const double> scores, const char* what) {
  for (std::size_t i = 0; i < scores.size(); ++i)
    SAR_CHECK(!std::isnan(scores[i]), numeric_error, "sar::link_metrics: ", what, " score ", i,
              " is NaN");
}
}  // namespace detail

/// The k-th highest of all ranks' `scores` together (k >= 1), or -infinity when they hold fewer
/// than k. Collective: each rank sends its k highest to every rank (k values per peer).
/// Throws sar::invalid_argument for k < 1.
template <communicator Comm>
double kth_highest(Comm& comm, std::span<const double> scores, int k) {
  SAR_CHECK(k >= 1, invalid_argument, "sar::kth_highest: k = ", k, " (at least 1)");
  const auto kk = static_cast<std::size_t>(k);
  std::vector<double> top;  // a min-heap of the k highest so far
  top.reserve(std::min(kk, scores.size()));
  for (const double s : scores) {
    if (top.size() < kk) {
      top.push_back(s);
      std::push_heap(top.begin(), top.end(), std::greater<>());
    } else if (s > top.front()) {
      std::pop_heap(top.begin(), top.end(), std::greater<>());
      top.back() = s;
      std::push_heap(top.begin(), top.end(), std::greater<>());
    }
  }
  top.resize(kk, -std::numeric_limits<double>::infinity());
  const auto p = static_cast<std::size_t>(comm.size());
  std::vector<double> send(kk * p), all(kk * p);
  for (std::size_t q = 0; q < p; ++q) std::copy(top.begin(), top.end(), send.begin() + q * kk);
  const std::vector<std::int64_t> counts(p, static_cast<std::int64_t>(kk));
  comm.all_to_all_v(std::span<const double>(send), counts, std::span<double>(all), counts);
  std::nth_element(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(kk - 1), all.end(),
                   std::greater<>());
  return all[kk - 1];
}

/// AUC's numerator over all ranks: the sum over every positive of (the negatives below it +
/// half those equal to it), all ranks' negatives counted. Collective: each rank's positive
/// scores visit every other rank in turn (size() - 1 exchanges), so a rank holds its own scores
/// and one peer's positives at a time.
template <communicator Comm>
double auc_numerator(Comm& comm, std::span<const double> positives,
                     std::span<const double> negatives) {
  std::vector<double> sorted(negatives.begin(), negatives.end());
  std::sort(sorted.begin(), sorted.end());
  const auto count = [&](std::span<const double> visiting) {
    double sum = 0;
    for (const double s : visiting) {
      const auto low = std::lower_bound(sorted.begin(), sorted.end(), s);
      const auto high = std::upper_bound(low, sorted.end(), s);
      sum += static_cast<double>(low - sorted.begin()) + 0.5 * static_cast<double>(high - low);
    }
    return sum;
  };
  double sum = count(positives);
  const int p = comm.size(), r = comm.rank();
  if (p > 1) {
    const std::vector<std::int64_t> sizes =
        comm.all_to_all(std::vector<std::int64_t>(static_cast<std::size_t>(p),
                                                  static_cast<std::int64_t>(positives.size())));
    std::vector<double> visiting;
    for (int step = 1; step < p; ++step) {
      const int to = (r + step) % p, from = (r - step + p) % p;
      std::vector<std::int64_t> send_counts(static_cast<std::size_t>(p), 0);
      std::vector<std::int64_t> recv_counts(static_cast<std::size_t>(p), 0);
      send_counts[static_cast<std::size_t>(to)] = static_cast<std::int64_t>(positives.size());
      recv_counts[static_cast<std::size_t>(from)] = sizes[static_cast<std::size_t>(from)];
      visiting.resize(static_cast<std::size_t>(sizes[static_cast<std::size_t>(from)]));
      comm.all_to_all_v(positives, send_counts, std::span<double>(visiting), recv_counts);
      sum += count(visiting);
    }
  }
  return sum;
}

/// Hits\@K (each K of `ks`, K >= 1) and AUC against the shared negatives, and MRR with Hits\@1/3/10
/// against each positive's own negatives, over all ranks' scores (see the top of this file;
/// a figure whose pairs are absent on every rank is NaN / left out). Collective. Throws
/// sar::invalid_argument when own_negatives does not hold negatives_per_positive scores per
/// positive, or for a K < 1, and sar::numeric_error for a NaN score (on the rank that has it).
template <communicator Comm>
link_report link_metrics(Comm& comm, const link_scores& s,
                         std::span<const int> ks = std::span<const int>()) {
  constexpr const char* where = "sar::link_metrics";
  const auto per = static_cast<std::size_t>(std::max(0, s.negatives_per_positive));
  SAR_CHECK(s.negatives_per_positive >= 0 && s.own_negatives.size() == s.positives.size() * per,
            invalid_argument, where, ": ", s.own_negatives.size(), " own negative scores for ",
            s.positives.size(), " positives of ", s.negatives_per_positive, " negatives each");
  detail::check_scores(s.positives, "positive");
  detail::check_scores(s.shared_negatives, "negative");
  detail::check_scores(s.own_negatives, "own negative");

  // Counts, all reduced at once: positives, shared negatives, rows with own negatives, the
  // AUC numerator, the MRR sums (1/rank, rank <= 1, 3, 10), then one count per K.
  std::vector<double> sums(8 + ks.size(), 0.0);
  sums[0] = static_cast<double>(s.positives.size());
  sums[1] = static_cast<double>(s.shared_negatives.size());
  sums[3] = auc_numerator(comm, s.positives, s.shared_negatives);
  if (per > 0) {
    for (std::size_t i = 0; i < s.positives.size(); ++i) {
      double above = 0, equal = 0;
      for (std::size_t j = 0; j < per; ++j) {
        const double negative = s.own_negatives[i * per + j];
        above += negative > s.positives[i];
        equal += negative == s.positives[i];
      }
      const double rank = 1 + above + 0.5 * equal;  // (optimistic + pessimistic) / 2 + 1
      sums[2] += 1;
      sums[4] += 1 / rank;
      sums[5] += rank <= 1;
      sums[6] += rank <= 3;
      sums[7] += rank <= 10;
    }
  }
  std::vector<double> thresholds(ks.size());
  for (std::size_t i = 0; i < ks.size(); ++i) {
    thresholds[i] = kth_highest(comm, s.shared_negatives, ks[i]);
    for (const double positive : s.positives) sums[8 + i] += positive > thresholds[i];
  }
  comm.all_reduce(std::span<double>(sums), reduce_op::sum);

  link_report report;
  const double positives = sums[0], negatives = sums[1], ranked = sums[2];
  if (positives > 0 && negatives > 0) report.auc = sums[3] / (positives * negatives);
  if (ranked > 0) {
    report.mrr = sums[4] / ranked;
    for (int i = 0; i < 3; ++i) report.mrr_hits[i] = sums[static_cast<std::size_t>(5 + i)] / ranked;
  }
  if (positives > 0 && negatives > 0)
    for (std::size_t i = 0; i < ks.size(); ++i)
      report.hits.emplace_back(ks[i], negatives < ks[i] ? 1.0 : sums[8 + i] / positives);
  return report;
}

}  // namespace sar
