// sar-partition: load a dataset, partition it (METIS, random or contiguous), relabel it and
// write the partition store that each rank of sar-train reads its own part from.
//
//   sar-partition --dataset /data/ogbn-arxiv --parts 8 --method metis --out arxiv.8
#include <cstdio>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "program_support.hpp"
#include "sar/partition/metis.hpp"
#include "sar/partition/partitioners.hpp"
#include "sar/partition/store.hpp"
#include "sar/version.hpp"

namespace {

using sar_programs::clock_type;
using sar_programs::seconds_since;

int run(int argc, char** argv) {
  CLI::App app{"Partition a graph dataset and write a sar partition store (one file set per part)",
               "sar-partition"};
  std::string dataset;
  int parts = 0;
  std::string method = "metis";
  std::string out;
  std::uint64_t seed = 0;
  double imbalance = 0.05;
  sar::dataset_sizes sizes;
  app.add_option("--dataset", dataset,
                 "OGB raw directory, edge-list file, .mtx file, or a generator such as "
                 "planted:nodes=100000 or rmat:scale=16")
      ->required()
      ->check(sar_programs::not_empty);
  sar_programs::add_dataset_size_options(app, sizes);
  app.add_option("--parts", parts, "number of parts (= ranks)")
      ->required()
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--method", method, "partitioner")
      ->check(CLI::IsMember({"metis", "random", "contiguous"}))
      ->capture_default_str();
  app.add_option("--out", out,
                 "output directory (created; an existing partition store there is replaced once "
                 "the new one is complete, any other non-empty directory is refused)")
      ->required()
      ->check(sar_programs::not_empty);
  app.add_option("--seed", seed, "seed of the random and METIS partitioners")
      ->check(sar_programs::non_negative)  // CLI11 would wrap -5 around to 2^64 - 5
      ->capture_default_str();
  app.add_option("--imbalance", imbalance,
                 "METIS: allowed imbalance per constraint (nodes, edges, training nodes)")
      ->check(sar_programs::finite_number)
      ->check(CLI::Range(0.0, 10.0))
      ->capture_default_str();
  app.set_version_flag("--version", "sar-partition (sar " SAR_VERSION_STRING ")");
  if (const auto status = sar_programs::parse_command_line(app, argc, argv)) return *status;

  sar::check_replaceable(out, sar::partition_store_kind, "--out");  // before the work
  const sar::graph_dataset data = sar_programs::load_dataset_reporting(dataset, sizes);
  SAR_CHECK(parts <= data.num_nodes(), sar::invalid_argument, "--parts ", parts,
            " exceeds the ", data.num_nodes(), " nodes of ", dataset,
            " (every part needs a node)");

  auto start = clock_type::now();
  sar_programs::current_phase() = "partitioning";
  std::printf("partitioning into %d parts with %s ...\n", parts, method.c_str());
  std::fflush(stdout);
  std::vector<int> part;
  std::string description = method;
  if (method == "metis") {
    part = sar::partition_metis(data, parts, {.seed = seed, .imbalance = imbalance});
    char text[64];
    std::snprintf(text, sizeof text, " imbalance=%g", imbalance);
    description += " seed=" + std::to_string(seed) + text;
  } else if (method == "random") {
    part = sar::partition_random(data.num_nodes(), parts, seed);
    description += " seed=" + std::to_string(seed);
  } else {
    part = sar::partition_contiguous(data.num_nodes(), parts);
  }
  std::printf("partitioned (%.2f s)\n", seconds_since(start));

  start = clock_type::now();
  sar_programs::current_phase() = "writing " + out;
  std::printf("writing %s ...\n", out.c_str());
  std::fflush(stdout);
  const sar::partition_metadata meta =
      sar::write_partition_store(data, part, parts, out, description);
  std::printf("wrote %d parts (%.2f s)\n", parts, seconds_since(start));

  std::fputs(sar::format_partition_quality(meta.quality).c_str(), stdout);
  sar_programs::print_peak_memory();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return sar_programs::run_reporting_errors("sar-partition", run, argc, argv);
}
