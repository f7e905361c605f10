// sar-convert: load any dataset load_dataset understands and write it as a sar .npy dataset
// directory (docs/npy-dataset.md), which sar programs and Python (numpy.load) read fast.
//
//   sar-convert --dataset planted:nodes=200000,degree=20,features=128 --out planted-200k
//   sar-convert --dataset ../shared/data/cora --out cora-npy --verify
#include <cstdio>
#include <string>

#include <CLI/CLI.hpp>

#include "program_support.hpp"
#include "sar/graph/io/npy.hpp"
#include "sar/version.hpp"

namespace {

using sar_programs::clock_type;
using sar_programs::seconds_since;

/// Bytes of the arrays written for `data` (without headers and meta.json).
double array_mebibytes(const sar::graph_dataset& data) {
  const double bytes =
      8.0 * static_cast<double>(data.graph.offsets.size() + data.graph.columns.size()) +
      4.0 * static_cast<double>(data.features.size() + data.labels.size() +
                                data.targets.size()) +
      static_cast<double>(data.split.size());
  return bytes / (1024.0 * 1024.0);
}

bool same_dataset(const sar::graph_dataset& a, const sar::graph_dataset& b) {
  return a.name == b.name && a.graph == b.graph && a.labels == b.labels &&
         a.num_classes == b.num_classes && a.split == b.split &&
         a.features.rows() == b.features.rows() && a.features.cols() == b.features.cols() &&
         (a.features.array() == b.features.array()).all() && a.task == b.task &&
         a.targets.rows() == b.targets.rows() && a.targets.cols() == b.targets.cols() &&
         (a.targets.array() == b.targets.array()).all();
}

int run(int argc, char** argv) {
  CLI::App app{"Convert a graph dataset to a sar .npy dataset directory (meta.json, indptr.npy, "
               "indices.npy, features.npy, labels.npy or targets.npy, split.npy), readable by "
               "numpy.load",
               "sar-convert"};
  std::string dataset;
  std::string out;
  bool verify = false;
  sar::dataset_sizes sizes;
  app.add_option("--dataset", dataset,
                 "OGB raw directory, sar .npy dataset directory, edge-list file, .mtx file, or a "
                 "generator such as planted:nodes=200000,degree=20,features=128 or rmat:scale=16")
      ->required()
      ->check(sar_programs::not_empty);
  sar_programs::add_dataset_size_options(app, sizes);
  sar_programs::add_task_option(app, sizes);
  app.add_option("--out", out,
                 "output directory (created; an existing .npy dataset there is replaced once the new "
                 "one is complete, any other non-empty directory is refused)")
      ->required()
      ->check(sar_programs::not_empty);
  app.add_flag("--verify", verify, "read the written directory back and compare it exactly");
  app.set_version_flag("--version", "sar-convert (sar " SAR_VERSION_STRING ")");
  if (const auto status = sar_programs::parse_command_line(app, argc, argv)) return *status;

  sar::check_replaceable(out, sar::npy_dataset_kind, "--out");  // before loading
  const sar::graph_dataset data = sar_programs::load_dataset_reporting(dataset, sizes);

  auto start = clock_type::now();
  sar_programs::current_phase() = "writing " + out;
  std::printf("writing %s ...\n", out.c_str());
  std::fflush(stdout);
  sar::write_npy_dataset(out, data);
  double seconds = seconds_since(start);
  std::printf("wrote %.1f MiB of arrays (%.2f s, %.0f MiB/s)\n", array_mebibytes(data), seconds,
              array_mebibytes(data) / seconds);

  if (verify) {
    start = clock_type::now();
    sar_programs::current_phase() = "reading " + out + " back";
    std::printf("reading %s back ...\n", out.c_str());
    std::fflush(stdout);
    const sar::graph_dataset back = sar::read_npy_dataset(out, {.sizes = sizes});
    seconds = seconds_since(start);
    std::printf("read %.1f MiB of arrays (%.2f s, %.0f MiB/s)\n", array_mebibytes(back), seconds,
                array_mebibytes(back) / seconds);
    if (!same_dataset(data, back)) {
      std::fflush(stdout);
      std::fprintf(stderr, "sar-convert: %s read back differs from the dataset written\n",
                   out.c_str());
      return 1;
    }
    std::printf("verified: identical to the dataset written\n");
  }
  sar_programs::print_peak_memory();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return sar_programs::run_reporting_errors("sar-convert", run, argc, argv);
}
