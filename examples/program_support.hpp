// What the one-process command-line programs (sar-convert, sar-partition) share: timing,
// loading a dataset with progress lines on stdout, the peak-memory line, and main()'s error
// report.
#pragma once

#include <chrono>
#include <cstdio>
#include <exception>
#include <string>

#include "sar/core/memory.hpp"
#include "sar/graph/io/load.hpp"

namespace sar_programs {

using clock_type = std::chrono::steady_clock;

/// Seconds elapsed since `start`.
inline double seconds_since(clock_type::time_point start) {
  return std::chrono::duration<double>(clock_type::now() - start).count();
}

/// sar::load_dataset(spec), printing "loading <spec> ..." before and a one-line summary of the
/// dataset with the time taken after. Throws what load_dataset throws.
inline sar::graph_dataset load_dataset_reporting(const std::string& spec) {
  const auto start = clock_type::now();
  std::printf("loading %s ...\n", spec.c_str());
  std::fflush(stdout);
  sar::graph_dataset data = sar::load_dataset(spec);
  std::printf("loaded %s: %lld nodes, %lld edges, %lld features, %d classes, %lld train nodes "
              "(%.2f s)\n",
              data.name.c_str(), static_cast<long long>(data.num_nodes()),
              static_cast<long long>(data.graph.num_edges()),
              static_cast<long long>(data.features.cols()), data.num_classes,
              static_cast<long long>(data.count(sar::node_split::train)), seconds_since(start));
  return data;
}

/// Prints "peak memory <MiB> MiB" (the process's peak resident set) on stdout.
inline void print_peak_memory() {
  std::printf("peak memory %.1f MiB\n",
              static_cast<double>(sar::peak_memory_bytes()) / (1024.0 * 1024.0));
}

/// Returns run(argc, argv); an exception escaping it is printed as "<program>: <what>" on
/// stderr (after flushing stdout) and gives exit status 1.
inline int run_reporting_errors(const char* program, int (*run)(int, char**), int argc,
                                char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "%s: %s\n", program, e.what());
    return 1;
  }
}

}  // namespace sar_programs
