// Sampling without replacement by inverse transform ("darts"), for every row of a weight
// matrix at once (docs/algorithms.md §7). A row that needs t more picks throws t darts into
// the cumulative sums (double precision) of its remaining weights; each dart picks the entry
// whose interval it lands in, a second dart on a picked entry is void; the picked weights are
// set to zero and the row throws again until it has its picks. The picks are exactly those
// of successive sampling (draw one entry with probability proportional to weight, remove it,
// repeat): the distinct entries first hit by a sequence of independent draws are.
//
// Dart n of a row is word n % 4 of counter_rng(seed, sampling).bits(epoch, minibatch, node,
// (layer << 40) | n / 4): a pure function of the row's key, so a row's picks do not depend on
// the other rows drawn with it (the bulk), the thread count or the rank count.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>

#include "sar/core/error.hpp"
#include "sar/core/rng.hpp"
#include "sar/core/types.hpp"
#include "sar/sampling/spgemm.hpp"

namespace sar {

/// What a row's darts are keyed by (see the top of this header).
struct dart_key {
  /// The epoch the minibatch belongs to.
  std::uint64_t epoch = 0;
  std::uint64_t minibatch = 0;  ///< the minibatch's number in its epoch
  std::uint64_t node = 0;       ///< dataset id of the row's vertex (node-wise), or ~0
  std::uint64_t layer = 0;      ///< below 2^24
};

/// How many entries of a row with `positive` positive weights are picked for `want`
/// (want < 0: all of them).
inline edge_t picks_for(node_t want, edge_t positive) {
  return want < 0 ? positive : std::min<edge_t>(want, positive);
}

/// For every row r of `weights` (values >= 0), picks picks_for(want[r], positive entries of
/// row r) distinct entries with positive weight, by darts keyed by key_of(r). Returns the
/// picked entries in their order in the row (columns as in weights, values = their weights);
/// with `entries`, also assigns the index in weights of each picked entry (a row may repeat a
/// column: the entries tell its copies apart). Requires want.size() == weights.rows(); throws
/// sar::invalid_argument otherwise or for a negative or non-finite weight. Parallel over rows.
template <class KeyOf>
sparse_matrix sample_rows(const sparse_matrix& weights, std::span<const node_t> want,
                          std::uint64_t seed, KeyOf&& key_of,
                          std::vector<edge_t>* entries = nullptr) {
  constexpr const char* where = "sar::sample_rows";
  const node_t rows = weights.rows();
  SAR_CHECK(want.size() == static_cast<std::size_t>(rows), invalid_argument, where, ": ",
            want.size(), " pick counts for ", rows, " rows");
  // Positive weights per row (-1: the row holds a bad weight), then offsets.
  std::vector<edge_t> positive(static_cast<std::size_t>(rows));
  tbb::parallel_for(tbb::blocked_range<node_t>(0, rows), [&](const auto& range) {
    for (node_t r = range.begin(); r != range.end(); ++r) {
      edge_t count = 0;
      bool bad = false;
      for (double v : weights.row_values(r)) {
        count += v > 0;
        bad |= !(v >= 0 && v < INFINITY);
      }
      positive[r] = bad ? -1 : count;
    }
  });
  sparse_matrix picked;
  picked.pattern.num_rows = rows;
  picked.pattern.num_cols = weights.cols();
  picked.pattern.offsets.assign(static_cast<std::size_t>(rows) + 1, 0);
  for (node_t r = 0; r < rows; ++r) {
    if (positive[r] < 0) {
      const auto w = weights.row_values(r);
      const auto e = std::find_if(w.begin(), w.end(),
                                  [](double v) { return !(v >= 0 && v < INFINITY); });
      throw invalid_argument(message(where, ": weight ", *e, " at entry ",
                                     weights.pattern.offsets[r] + (e - w.begin())));
    }
    picked.pattern.offsets[r + 1] =
        picked.pattern.offsets[r] + picks_for(want[r], positive[r]);
  }
  picked.pattern.columns.resize(static_cast<std::size_t>(picked.pattern.offsets.back()));
  picked.values.resize(picked.pattern.columns.size());
  if (entries != nullptr) entries->resize(picked.pattern.columns.size());

  const counter_rng rng(seed, rng_stream::sampling);
  tbb::parallel_for(tbb::blocked_range<node_t>(0, rows), [&](const auto& range) {
    std::vector<char> chosen;
    std::vector<double> cumulative;
    std::vector<std::uint32_t> open;  // unit weights: the entries not chosen yet
    for (node_t r = range.begin(); r != range.end(); ++r) {
      const auto cols = weights.row_columns(r);
      const auto w = weights.row_values(r);
      const std::size_t d = cols.size();
      const edge_t first = picked.pattern.offsets[r];
      const edge_t total_picks = picked.pattern.offsets[r + 1] - first;
      chosen.assign(d, 0);
      const bool all = total_picks == positive[r];
      const dart_key key = all ? dart_key{} : key_of(r);
      counter_rng::bits_t words{};
      std::uint64_t dart = 0;
      const auto next_unit = [&] {
        if (dart % 4 == 0)
          words = rng.bits(key.epoch, key.minibatch, key.node, (key.layer << 40) | (dart / 4));
        return counter_rng::to_unit(words[dart++ % 4]);
      };
      if (all) {  // every candidate: no randomness needed
        for (std::size_t e = 0; e < d; ++e) chosen[e] = w[e] > 0;
      } else if (std::all_of(w.begin(), w.end(), [](double v) { return v == 1.0; })) {
        // Unit weights: the cumulative sums are the counts 1, 2, ... of the open entries, so
        // a dart x lands in the floor(x)-th open entry; the same picks as below, without the
        // sums and the search.
        for (edge_t missing = total_picks; missing > 0;) {
          open.clear();
          for (std::size_t e = 0; e < d; ++e)
            if (!chosen[e]) open.push_back(static_cast<std::uint32_t>(e));
          const auto sum = static_cast<double>(open.size());
          for (edge_t q = 0, darts = missing; q < darts; ++q) {
            const auto j = std::min(static_cast<std::size_t>(next_unit() * sum), open.size() - 1);
            if (!chosen[open[j]]) {
              chosen[open[j]] = 1;
              --missing;
            }
          }
        }
      } else {
        cumulative.resize(d);
        for (edge_t missing = total_picks; missing > 0;) {
          double sum = 0;
          std::size_t last_positive = 0;
          for (std::size_t e = 0; e < d; ++e) {
            if (!chosen[e] && w[e] > 0) {
              sum += w[e];
              last_positive = e;
            }
            cumulative[e] = sum;
          }
          for (edge_t q = 0, darts = missing; q < darts; ++q) {
            const double x = next_unit() * sum;
            // The entry whose interval [cumulative[e - 1], cumulative[e]) holds x: positive
            // and not chosen before this round (its interval would be empty).
            std::size_t e = static_cast<std::size_t>(
                std::upper_bound(cumulative.begin(), cumulative.end(), x) - cumulative.begin());
            if (e >= d) e = last_positive;  // x rounded up to the sum
            if (!chosen[e]) {
              chosen[e] = 1;
              --missing;
            }
          }
        }
      }
      edge_t at = first;
      for (std::size_t e = 0; e < d; ++e)
        if (chosen[e]) {
          picked.pattern.columns[at] = cols[e];
          picked.values[at] = w[e];
          if (entries != nullptr)
            (*entries)[static_cast<std::size_t>(at)] = weights.pattern.offsets[r] + static_cast<edge_t>(e);
          ++at;
        }
    }
  });
  return picked;
}

}  // namespace sar
