// Shared plumbing of the optimisers: per-group decay lookup and parallel ranges of the flat
// parameter buffer.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include "sar/core/error.hpp"
#include "sar/nn/parameters.hpp"

namespace sar::detail {

inline void check_decay(const char* where, const std::vector<double>& decay) {
  for (std::size_t g = 0; g < decay.size(); ++g)
    SAR_CHECK(decay[g] >= 0, invalid_argument, where, ": weight decay ", decay[g], " of group ",
              g);
}

/// Sizes a per-value state vector on the first step; later steps must see the same size.
template <class T>
void size_state(const char* where, std::vector<T>& state, std::size_t size, std::uint64_t steps) {
  if (state.empty() && steps == 0) state.assign(size, T(0));
  SAR_CHECK(state.size() == size, invalid_argument, where, ": the store holds ", size,
            " values but the optimiser state ", state.size(), " (reset() after changing it)");
}

/// Calls f(begin, end, decay) on ranges of the flat buffer, each inside one parameter (so one
/// decay), in parallel for large parameters.
template <class T, class F>
void for_each_parameter_range(const parameter_store<T>& store, const std::vector<double>& decay,
                              F&& f) {
  constexpr std::size_t grain = 1 << 14;
  for (std::size_t p = 0; p < store.size(); ++p) {
    const int group = store.shape(p).group;
    SAR_CHECK(group >= 0, invalid_argument, "sar optimiser: parameter '", store.shape(p).name,
              "' has negative group ", group);
    const T d = static_cast<T>(static_cast<std::size_t>(group) < decay.size()
                                   ? decay[static_cast<std::size_t>(group)]
                                   : 0.0);
    const auto begin = static_cast<std::size_t>(store.offset(p));
    const auto end = begin + static_cast<std::size_t>(store.shape(p).rows * store.shape(p).cols);
    if (end - begin <= grain) {
      f(begin, end, d);
      continue;
    }
    tbb::parallel_for(tbb::blocked_range<std::size_t>(begin, end, grain),
                      [&](const tbb::blocked_range<std::size_t>& r) { f(r.begin(), r.end(), d); });
  }
}

/// Calls f(values, grads, arrays, begin, end) on ranges of each row table of the store (flat
/// pointers to its values, gradients and `count` (<= 2) per-value arrays the optimiser keeps
/// in the table, zero on first use), in parallel for large tables.
template <class T, class F>
void for_each_table_range(parameter_store<T>& store, std::size_t count, F&& f) {
  constexpr std::size_t grain = 1 << 14;
  for (std::size_t k = 0; k < store.table_count(); ++k) {
    row_table<T>& table = store.table(k);
    const auto rows = table.values.rows(), cols = table.values.cols();
    if (table.moments.size() != count) table.moments.assign(count, matrix<T>::Zero(rows, cols));
    std::array<T*, 2> arrays{};
    for (std::size_t a = 0; a < count; ++a) arrays[a] = table.moments[a].data();
    const auto size = static_cast<std::size_t>(rows * cols);
    tbb::parallel_for(tbb::blocked_range<std::size_t>(0, size, grain),
                      [&](const tbb::blocked_range<std::size_t>& r) {
                        f(table.values.data(), table.grads.data(), arrays.data(), r.begin(),
                          r.end());
                      });
  }
}

}  // namespace sar::detail
