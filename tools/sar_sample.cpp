// sar-sample: writes the sampled blocks of chosen minibatches to a directory of .npy arrays,
// to inspect what minibatch training sees or to feed it to another framework. The seeds are
// those sar-train --minibatch B --seed S trains on in that epoch (the same shuffled training
// nodes and sampler keys), so a sample here is the sample there.
//
//   sar-sample --dataset ../shared/data/cora --minibatch 64 --fanouts 25,10
//              --minibatches 0,1 --out cora-samples
//
// Layout (docs/sampling.md, "sar-sample"): OUT/sample.json, and per minibatch m a directory
// OUT/minibatch-<m> (m zero-padded to 6 digits) holding, for every block l from the input
// (l = 0 feeds the first graph layer), block-<l>-indptr.npy (int64, destinations + 1),
// block-<l>-indices.npy (int64, the source row of each edge), block-<l>-destination-ids.npy
// and block-<l>-source-ids.npy (int64 dataset ids; the destinations are the first sources),
// and for LADIES block-<l>-source-scales.npy and block-<l>-destination-scales.npy (float64;
// GCN's y_i = r_i sum_j c_j x_j). The whole output is written into a temporary sibling and
// renamed into place: a failure leaves the previous output as it was.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "program_support.hpp"
#include "sar/io/safe_directory.hpp"
#include "sar/graph/builders.hpp"
#include "sar/io/npy_file.hpp"
#include "sar/sampling/samplers.hpp"
#include "sar/train/minibatch.hpp"
#include "sar/version.hpp"

namespace {

namespace fs = std::filesystem;
using sar_programs::clock_type;
using sar_programs::seconds_since;

constexpr sar::directory_kind kind{"sar-sample", "sample.json"};
constexpr int format_version = 2;  // 2: sample.json lists a manifest and is sealed

/// Writes `values` (1-D) as the .npy file `relative` of `out`.
template <class T>
void write_array(sar::directory_writer& out, const std::string& relative,
                 std::span<const T> values) {
  const std::int64_t shape[] = {static_cast<std::int64_t>(values.size())};
  out.add_file(relative, [&](const fs::path& file) {
    return sar::write_npy(file, std::is_same_v<T, double> ? sar::npy_dtype::float64
                                                          : sar::npy_dtype::int64,
                          shape, values.data());
  });
}

/// Writes one sample's blocks into the directory `name` of `out`.
void write_sample(sar::directory_writer& out, const std::string& name,
                  const sar::minibatch_sample& s) {
  out.make_directory(name);
  for (std::size_t l = 0; l < s.blocks.size(); ++l) {
    const sar::sampled_block& b = s.blocks[l];
    const std::string prefix = name + "/block-" + std::to_string(l) + "-";
    write_array<sar::node_t>(out, prefix + "indptr.npy", b.edges.offsets);
    write_array<sar::node_t>(out, prefix + "indices.npy", b.edges.columns);
    write_array<sar::node_t>(out, prefix + "destination-ids.npy",
                             std::span(s.ids).first(static_cast<std::size_t>(b.edges.num_rows)));
    write_array<sar::node_t>(out, prefix + "source-ids.npy", b.ids);
    if (!b.source_scales.empty()) {
      write_array<double>(out, prefix + "source-scales.npy", b.source_scales);
      write_array<double>(out, prefix + "destination-scales.npy", b.destination_scales);
    }
  }
}

int run(int argc, char** argv) {
  CLI::App app{"Write the sampled blocks of chosen minibatches (GraphSAGE node-wise or LADIES "
               "layer-wise) as .npy arrays: per block its CSR and the dataset ids of its "
               "destinations and sources",
               "sar-sample"};
  std::string dataset = "planted", out;
  sar::sampler_kind sampler = sar::sampler_kind::node_wise;
  enum class self_loops { automatic, add, keep } loops = self_loops::automatic;
  sar::node_t batch_size = 64;
  std::vector<sar::node_t> fanouts{25, 10}, chosen{0};
  std::uint64_t seed = 0, epoch = 0;
  sar::dataset_sizes sizes;
  app.add_option("--dataset", dataset, "OGB raw directory, .npy dataset, graph file or "
                 "generator spec (as sar-train)")
      ->check(sar_programs::not_empty)->capture_default_str();
  sar_programs::add_dataset_size_options(app, sizes);
  sar_programs::add_choice(app, "--sampler", sampler, sar_programs::sampler_names,
                           "sage (node-wise) | ladies (layer-wise)");
  app.add_option("--fanouts", fanouts, "per layer from the input: neighbours per node (sage; "
                 "-1 = all) or nodes per layer (ladies)")->delimiter(',')->capture_default_str();
  app.add_option("--minibatch", batch_size, "seeds per minibatch")
      ->check(sar_programs::positive)->capture_default_str();
  app.add_option("--minibatches", chosen, "which minibatches of the epoch, e.g. 0,5,9")
      ->delimiter(',')->capture_default_str();
  app.add_option("--epoch", epoch, "the epoch (keys the shuffle and the darts)")
      ->check(sar_programs::non_negative)->capture_default_str();
  app.add_option("--seed", seed, "seed, as sar-train --seed")
      ->check(sar_programs::non_negative)->capture_default_str();
  const sar_programs::choices<self_loops> loop_names{
      {"auto", self_loops::automatic}, {"add", self_loops::add}, {"keep", self_loops::keep}};
  sar_programs::add_choice(app, "--self-loops", loops, loop_names,
                           "auto (ladies: add, as for GCN; sage: keep) | add | keep");
  app.add_option("--out", out, "output directory (created; an earlier sar-sample output there "
                 "is replaced, anything else refused)")
      ->required()->check(sar_programs::not_empty);
  app.set_version_flag("--version", "sar-sample (sar " SAR_VERSION_STRING ")");
  if (const auto status = sar_programs::parse_command_line(app, argc, argv)) return *status;

  sar::check_replaceable(out, kind, "--out");  // before the long work
  sar::graph_dataset data = sar_programs::load_dataset_reporting(dataset, sizes);
  const bool add = loops == self_loops::add ||
                   (loops == self_loops::automatic && sampler == sar::sampler_kind::layer_wise);
  const sar::csr graph = sar::with_self_loops(
      data.graph, add ? sar::self_loop_policy::add : sar::self_loop_policy::keep);
  const sar::sampler_options options{
      .kind = sampler,
      .fanouts = fanouts, .seed = seed};

  std::vector<sar::node_t> training;
  for (std::size_t v = 0; v < data.split.size(); ++v)
    if (data.split[v] == sar::node_split::train) training.push_back(static_cast<sar::node_t>(v));
  SAR_CHECK(!training.empty(), sar::invalid_argument, "dataset ", data.name,
            " has no training nodes to draw seeds from");
  SAR_CHECK(batch_size <= static_cast<sar::node_t>(training.size()), sar::invalid_argument,
            "--minibatch ", batch_size, " exceeds the ", training.size(), " training nodes");
  const auto order = sar::shuffled_nodes(training, seed, epoch);
  const auto batches = static_cast<sar::node_t>((order.size() + batch_size - 1) / batch_size);
  std::vector<std::vector<sar::node_t>> seeds;
  for (sar::node_t m : chosen) {
    SAR_CHECK(m >= 0 && m < batches, sar::invalid_argument, "--minibatches: ", m,
              " outside [0, ", batches, ") (the minibatches of an epoch)");
    const auto begin = order.begin() + m * batch_size;
    seeds.emplace_back(begin, begin + std::min<sar::node_t>(batch_size, order.end() - begin));
  }

  const auto start = clock_type::now();
  sar_programs::current_phase() = "sampling into " + out;
  sar::bulk_sampler bulk(graph, options);
  nlohmann::json meta = {{"format", kind.format}, {"version", format_version},
                         {"dataset", data.name},
                         {"sampler", sar_programs::name_of(sar_programs::sampler_names, sampler)},
                         {"fanouts", fanouts},
                         {"minibatch_size", batch_size}, {"epoch", epoch}, {"seed", seed},
                         {"self_loops", add ? "add" : "keep"},
                         {"minibatches", nlohmann::json::array()}};
  sar::replace_directory(out, kind, [&](sar::directory_writer& to) {
    for (std::size_t i = 0; i < chosen.size(); ++i) {
      // Each minibatch drawn alone is the sample sar-train draws in its bulk (same keys).
      const auto sample = bulk.sample(std::span(seeds).subspan(i, 1), epoch,
                                      static_cast<std::uint64_t>(chosen[i]))[0];
      char name[32];
      std::snprintf(name, sizeof name, "minibatch-%06lld", static_cast<long long>(chosen[i]));
      write_sample(to, name, sample);
      meta["minibatches"].push_back({{"minibatch", chosen[i]}, {"directory", name},
                                     {"seeds", sample.level_sizes.back()},
                                     {"level_sizes", sample.level_sizes}});
      std::printf("minibatch %lld: levels", static_cast<long long>(chosen[i]));
      for (sar::node_t size : sample.level_sizes)
        std::printf(" %lld", static_cast<long long>(size));
      std::printf("\n");
      std::fflush(stdout);
    }
    to.write_metadata(meta);
  }, "--out");
  std::printf("wrote %zu minibatches to %s (%.2f s)\n", chosen.size(), out.c_str(),
              seconds_since(start));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return sar_programs::run_reporting_errors("sar-sample", run, argc, argv);
}
