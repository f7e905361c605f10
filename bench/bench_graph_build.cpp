// Times the data path on an R-MAT graph (default 1M nodes, 20M edges): generate, write an
// edge-list file, load it back, build the symmetric CSR, partition (METIS, random), write a
// partition store and read one part. Prints one line per stage with the time and the
// process's current and peak resident memory, and optionally a JSON summary.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "sar/core/memory.hpp"
#include "sar/graph/generators.hpp"
#include "sar/graph/io/edge_list.hpp"
#include "sar/partition/metis.hpp"
#include "sar/partition/partitioners.hpp"
#include "sar/partition/store.hpp"
#include "sar/version.hpp"

namespace {

struct stage_timer {
  nlohmann::json& log;
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();

  void done(const std::string& stage, const std::string& detail = "") {
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double gib = 1024.0 * 1024 * 1024;
    std::printf("%-22s %8.2f s   rss %6.2f GiB   peak %6.2f GiB   %s\n", stage.c_str(), seconds,
                sar::current_memory_bytes() / gib, sar::peak_memory_bytes() / gib, detail.c_str());
    std::fflush(stdout);
    log[stage] = {{"seconds", seconds}, {"peak_memory_bytes", sar::peak_memory_bytes()}};
    start = std::chrono::steady_clock::now();
  }
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench-graph-build: time loading, building and partitioning an R-MAT graph"};
  int scale = 20;
  sar::edge_t edges_wanted = 20'000'000;
  int parts = 8;
  std::string work_dir = "bench-graph-build.tmp";
  std::string json_out;
  app.add_option("--scale", scale, "R-MAT scale: 2^scale nodes")->capture_default_str();
  app.add_option("--edges", edges_wanted, "R-MAT edges drawn (before symmetrising)")
      ->capture_default_str();
  app.add_option("--parts", parts, "partitions for METIS and random")->capture_default_str();
  app.add_option("--work-dir", work_dir, "scratch directory (removed at the end)")
      ->capture_default_str();
  app.add_option("--json", json_out, "write the stage timings to this JSON file");
  app.set_version_flag("--version", "bench-graph-build (sar " SAR_VERSION_STRING ")");
  CLI11_PARSE(app, argc, argv);

  try {
    namespace fs = std::filesystem;
    fs::remove_all(work_dir);
    fs::create_directories(work_dir);
    nlohmann::json log;
    log["scale"] = scale;
    log["edges_drawn"] = edges_wanted;
    log["parts"] = parts;
    stage_timer timer{log};

    const fs::path edge_file = fs::path(work_dir) / "rmat.txt";
    {
      const sar::edge_list drawn = sar::make_rmat({.scale = scale, .num_edges = edges_wanted});
      timer.done("generate");
      std::ofstream out(edge_file);
      std::string buffer;
      for (std::size_t k = 0; k < drawn.size(); ++k)
        buffer += std::to_string(drawn.src[k]) + ' ' + std::to_string(drawn.dst[k]) + '\n';
      out << buffer;
      timer.done("write edge list", std::to_string(fs::file_size(edge_file) >> 20) + " MiB");
    }

    sar::graph_dataset data;
    data.name = "rmat";
    {
      const sar::edge_list loaded = sar::read_edge_list(edge_file, sar::node_t{1} << scale);
      timer.done("load edge list", std::to_string(loaded.size()) + " edges");
      data.graph = sar::build_csr(loaded, {.symmetrise = true});
      timer.done("build csr", std::to_string(data.graph.num_edges()) + " directed edges, " +
                                  std::to_string(data.graph.num_rows) + " nodes");
    }
    data.features.resize(data.graph.num_rows, 0);
    log["nodes"] = data.graph.num_rows;
    log["directed_edges"] = data.graph.num_edges();

    const auto metis = sar::partition_metis(data, parts);
    const auto metis_quality = sar::evaluate_partition(data.graph, metis, parts, data.split);
    timer.done("partition metis",
               "edge cut " + std::to_string(metis_quality.edge_cut_fraction));
    const auto random = sar::partition_random(data.graph.num_rows, parts, 1);
    const auto random_quality = sar::evaluate_partition(data.graph, random, parts, data.split);
    timer.done("partition random",
               "edge cut " + std::to_string(random_quality.edge_cut_fraction));
    log["metis_edge_cut_fraction"] = metis_quality.edge_cut_fraction;
    log["random_edge_cut_fraction"] = random_quality.edge_cut_fraction;

    const fs::path store = fs::path(work_dir) / "store";
    sar::write_partition_store(data, metis, parts, store, "metis");
    timer.done("write store");
    const sar::graph_part part = sar::read_partition_part(store, 0);
    timer.done("read part 0", std::to_string(part.in_edges.num_edges()) + " in-edges");

    fs::remove_all(work_dir);
    if (!json_out.empty()) std::ofstream(json_out) << log.dump(2) << '\n';
  } catch (const std::exception& e) {
    std::cerr << "bench-graph-build: " << e.what() << '\n';
    return 1;
  }
}
