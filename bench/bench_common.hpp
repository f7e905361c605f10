// Helpers the kernel benchmarks share: timing, medians, the planted test graph, random
// operands. Header-only, for bench/*.cpp.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <random>
#include <vector>

#include "sar/core/types.hpp"
#include "sar/graph/builders.hpp"
#include "sar/graph/generators.hpp"

namespace bench {

/// Seconds of one run of f.
template <class F>
double time_once(F&& f) {
  const auto start = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

/// The median of v (the mean of the two middle values for an even count). Requires v not
/// empty.
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

/// Median seconds of `repeats` runs of f after one warm-up run.
template <class F>
double median_seconds(int repeats, F&& f) {
  f();
  std::vector<double> times;
  for (int r = 0; r < repeats; ++r) times.push_back(time_once(f));
  return median(times);
}

/// The planted-partition graph of `nodes` nodes and average degree `degree`, without
/// features, with one self-loop added to every node (GCN's A + I).
inline sar::csr planted_graph(sar::node_t nodes, double degree) {
  sar::planted_partition_options options;
  options.num_nodes = nodes;
  options.average_degree = degree;
  options.feature_dim = 0;
  return sar::with_self_loops(sar::make_planted_partition(options).graph,
                              sar::self_loop_policy::add);
}

/// Fills m with values uniform in [-1, 1) from a generator seeded with `seed`.
template <class Matrix>
void fill_uniform(Matrix& m, std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (Eigen::Index i = 0; i < m.size(); ++i) m.data()[i] = u(gen);
}

}  // namespace bench
