// What verifying the partition store's checksums costs (bench/RESULTS.md §12): reads every
// part of a store --repeats times with and without verify_checksums and prints the median
// seconds of a whole read of the store for each, and the ratio.
//
//   build/bench/bench-store-read --store DIR [--repeats 5]
//   (write one with: build/tools/sar-partition --dataset planted:nodes=1000000 --parts 4
//    --method contiguous --out DIR)
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "bench_common.hpp"
#include "sar/partition/store.hpp"
#include "sar/version.hpp"

int main(int argc, char** argv) {
  CLI::App app{"bench-store-read: partition store read time with and without checksums"};
  std::string store;
  int repeats = 5;
  app.add_option("--store", store, "partition store directory (sar-partition --out)")
      ->required();
  app.add_option("--repeats", repeats, "reads of the whole store per setting")
      ->check(CLI::PositiveNumber)->capture_default_str();
  app.set_version_flag("--version", "bench-store-read (sar " SAR_VERSION_STRING ")");
  CLI11_PARSE(app, argc, argv);
  try {
    const sar::partition_metadata meta = sar::read_partition_metadata(store);
    double bytes = 0;
    std::vector<double> seconds[2];
    for (int r = 0; r < repeats; ++r)
      for (const bool verify : {false, true}) {
        const auto start = std::chrono::steady_clock::now();
        for (int p = 0; p < meta.num_parts; ++p) {
          const sar::graph_part part =
              sar::read_partition_part(store, p, {.verify_checksums = verify});
          if (r == 0 && !verify)
            bytes += static_cast<double>(part.in_edges.memory_bytes() +
                                         part.features.size() * sizeof(float) +
                                         part.original_ids.size() * sizeof(sar::node_t));
        }
        seconds[verify].push_back(
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      }
    const double plain = bench::median(seconds[0]), checked = bench::median(seconds[1]);
    std::printf("store %s: %d parts, %lld nodes, %lld edges, %.1f MiB of arrays\n",
                store.c_str(), meta.num_parts, static_cast<long long>(meta.num_nodes),
                static_cast<long long>(meta.num_edges), bytes / 1048576.0);
    std::printf("read without checksums %.3f s (%.2f GB/s), with %.3f s (%.2f GB/s): %.2fx\n",
                plain, bytes / plain / 1e9, checked, bytes / checked / 1e9, checked / plain);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench-store-read: %s\n", e.what());
    return 1;
  }
  return 0;
}
