// How the SpMM's source tiling pays off against the feature width: for each width, the
// forward product sar::detail::spmm_rows_add (what sar::spmm_add runs) on the
// planted-partition graph with self-loops, cut into 1 (untiled), 2, 3, ... tiles of equal
// source span, and which count the library picks by itself (sar::detail::spmm_tile_span).
// Rounds are interleaved (one run of every count per round) and each count's speed-up is the
// median over rounds of untiled time / its time, so a host whose speed drifts slows all
// counts alike. Every result is checked to be bitwise the untiled one's. Prints a table and,
// with --json-out, the same as JSON.
//
//   bench-spmm-tiles --widths 8,16,32,64,128 --tiles 1,2,3,4,6,7,8,10 --threads 2
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <tbb/task_arena.h>

#include "bench_common.hpp"
#include "sar/core/memory.hpp"
#include "sar/kernels/spmm.hpp"
#include "sar/version.hpp"

using bench::median;

int main(int argc, char** argv) {
  CLI::App app{"bench-spmm-tiles: forward SpMM time per number of source tiles and feature "
               "width, with the library's own choice marked"};
  sar::node_t nodes = 200000;
  double degree = 20;
  std::vector<int> widths{8, 16, 32, 64, 128}, tile_counts{1, 2, 3, 4, 6, 7, 8, 10};
  int threads = 2, repeats = 9;
  std::string json_out;
  app.add_option("--nodes", nodes, "planted-partition graph nodes")->capture_default_str();
  app.add_option("--degree", degree, "average degree (before self-loops)")->capture_default_str();
  app.add_option("--widths", widths, "feature widths (floats a row)")->delimiter(',');
  app.add_option("--tiles", tile_counts, "tile counts to time (1: untiled, always included)")
      ->delimiter(',');
  app.add_option("--threads", threads, "threads (one task_arena)")
      ->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--repeats", repeats, "rounds (the median is reported)")
      ->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--json-out", json_out, "write the results as JSON to this file");
  app.set_version_flag("--version", "bench-spmm-tiles (sar " SAR_VERSION_STRING ")");
  CLI11_PARSE(app, argc, argv);

  try {
    for (int w : widths)
      if (w < 1) throw std::invalid_argument("--widths: every width must be >= 1, got " +
                                             std::to_string(w));
    for (int t : tile_counts)
      if (t < 1) throw std::invalid_argument("--tiles: every count must be >= 1, got " +
                                             std::to_string(t));
    if (std::find(tile_counts.begin(), tile_counts.end(), 1) == tile_counts.end())
      tile_counts.insert(tile_counts.begin(), 1);

    const sar::csr graph = bench::planted_graph(nodes, degree);
    const sar::node_t n = graph.num_cols;
    sar::spmm_tile_cache cache;  // kept tilings, as a schedule keeps them
    std::printf("graph: planted, %lld nodes, %lld edges with self-loops; %d threads; median of "
                "%d rounds; * = the library's choice\n\n",
                static_cast<long long>(n), static_cast<long long>(graph.num_edges()), threads,
                repeats);
    std::printf("%6s %10s %6s %8s %10s %9s\n", "width", "x MB", "tiles", "span", "ms",
                "speed-up");

    nlohmann::json log;
    log["graph"] = {{"generator", "planted"}, {"nodes", n}, {"edges", graph.num_edges()}};
    log["threads"] = threads;
    log["repeats"] = repeats;
    log["widths"] = nlohmann::json::array();
    tbb::task_arena arena(threads);
    for (const int width : widths) {
      sar::matrixf x, out, untiled;
      sar::huge_page_resize(x, n, width);
      sar::huge_page_resize(out, graph.num_rows, width);
      bench::fill_uniform(x, 11);
      const auto span_of = [&](int tiles) -> sar::node_t {
        return tiles == 1 ? 0 : (n + tiles - 1) / tiles;
      };
      const auto product = [&](sar::node_t span) {
        sar::detail::spmm_rows_add<sar::detail::row_scale::none, float>(
            graph, nullptr, nullptr, x, out, &cache, span, {.assign = true});
      };
      const sar::node_t chosen = sar::detail::spmm_tile_span(graph, width * sizeof(float));
      std::vector<std::vector<double>> times(tile_counts.size());
      arena.execute([&] {
        product(0);
        untiled = out;
        for (int round = -1; round < repeats; ++round)  // round -1: warm-up, tilings made
          for (std::size_t k = 0; k < tile_counts.size(); ++k) {
            const double seconds = bench::time_once([&] { product(span_of(tile_counts[k])); });
            if (round >= 0) times[k].push_back(seconds);
            if (out != untiled)
              throw std::runtime_error("tiled SpMM differs from the untiled one (width " +
                                       std::to_string(width) + ", " +
                                       std::to_string(tile_counts[k]) + " tiles)");
          }
      });
      nlohmann::json entry = {{"width", width}, {"chosen_span", chosen}};
      for (std::size_t k = 0; k < tile_counts.size(); ++k) {
        std::vector<double> speedups;
        for (std::size_t r = 0; r < times[k].size(); ++r)
          speedups.push_back(times[0][r] / times[k][r]);
        const sar::node_t span = span_of(tile_counts[k]);
        const bool is_chosen = span == chosen;
        std::printf("%6d %10.1f %5d%s %8lld %10.2f %8.2fx\n", width,
                    static_cast<double>(x.size()) * sizeof(float) / 1e6, tile_counts[k],
                    is_chosen ? "*" : " ", static_cast<long long>(span), median(times[k]) * 1e3,
                    median(speedups));
        entry["runs"].push_back({{"tiles", tile_counts[k]}, {"span", span},
                                 {"chosen", is_chosen}, {"ms", median(times[k]) * 1e3},
                                 {"speedup_vs_untiled", median(speedups)}});
      }
      if (std::none_of(tile_counts.begin(), tile_counts.end(),
                       [&](int t) { return span_of(t) == chosen; }))
        std::printf("%6d  (the library's choice, span %lld, is not among --tiles)\n", width,
                    static_cast<long long>(chosen));
      log["widths"].push_back(entry);
    }
    if (!json_out.empty()) std::ofstream(json_out) << log.dump(2) << "\n";
  } catch (const std::exception& e) {
    std::cerr << "bench-spmm-tiles: " << e.what() << "\n";
    return 1;
  }
}
