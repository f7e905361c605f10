// sar-convert: load any dataset load_dataset understands and write it as a sar .npy dataset
// directory (docs/npy-dataset.md), which sar programs and Python (numpy.load) read fast.
//
//   sar-convert --dataset planted:nodes=200000,degree=20,features=128 --out planted-200k
//   sar-convert --dataset ../shared/data/cora --out cora-npy --verify
//   sar-convert --dataset ogbn_mag --add-reverse --out mag-npy   # heterogeneous: node types,
//                                                                 # relations and their reverses
//   sar-convert --dataset ../shared/data/cora --split-edges 0.05,0.10 --out cora-links
//                                   # link prediction: held-out edges, negatives in split/random
#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "program_support.hpp"
#include "sar/graph/edge_split.hpp"
#include "sar/graph/heterogeneous.hpp"
#include "sar/graph/io/link_split.hpp"
#include "sar/graph/io/npy.hpp"
#include "sar/version.hpp"

namespace {

using sar_programs::clock_type;
using sar_programs::seconds_since;

/// Bytes of the arrays written for `data` (without headers and meta.json).
double array_mebibytes(const sar::graph_dataset& data) {
  const double bytes =
      8.0 * static_cast<double>(data.graph.offsets.size() + data.graph.columns.size()) +
      8.0 * static_cast<double>(data.sparse_features.non_zeros()) +
      4.0 * static_cast<double>(data.features.size() + data.labels.size() +
                                data.targets.size() + data.edge_features.size() +
                                data.edge_types.size()) +
      static_cast<double>(data.split.size());
  return bytes / (1024.0 * 1024.0);
}

/// Whether two matrices are equal, shape and values.
bool same_matrix(const sar::matrixf& a, const sar::matrixf& b) {
  return a.rows() == b.rows() && a.cols() == b.cols() && (a.array() == b.array()).all();
}

bool same_dataset(const sar::graph_dataset& a, const sar::graph_dataset& b) {
  return a.name == b.name && a.graph == b.graph && a.labels == b.labels &&
         a.num_classes == b.num_classes && a.split == b.split &&
         same_matrix(a.features, b.features) && a.sparse_features == b.sparse_features &&
         a.task == b.task &&
         same_matrix(a.targets, b.targets) && same_matrix(a.edge_features, b.edge_features) &&
         a.schema == b.schema && a.edge_types == b.edge_types;
}

bool same_split_of(const sar::link_split& a, const sar::link_split& b) {
  return a.train == b.train && a.valid == b.valid && a.test == b.test &&
         a.valid_negatives == b.valid_negatives && a.test_negatives == b.test_negatives &&
         a.per_source == b.per_source &&
         a.valid_target_negatives == b.valid_target_negatives &&
         a.test_target_negatives == b.test_target_negatives;
}

/// Prints a heterogeneous dataset's node types (count, feature columns) and relations (edges).
void print_schema(const sar::graph_dataset& data) {
  const sar::graph_schema& schema = data.schema;
  std::printf("node types:");
  for (const sar::node_type& t : schema.node_types)
    std::printf(" %s (%lld nodes, %lld features)", t.name.c_str(),
                static_cast<long long>(t.count), static_cast<long long>(t.feature_dim));
  std::vector<long long> edges(schema.relations.size(), 0);
  for (const std::int32_t r : data.edge_types) ++edges[static_cast<std::size_t>(r)];
  std::printf("\nrelations:");
  for (std::int32_t r = 0; r < schema.num_relations(); ++r)
    std::printf(" %s (%lld edges)", schema.canonical_name(r).c_str(),
                edges[static_cast<std::size_t>(r)]);
  std::printf("\n");
}

int run(int argc, char** argv) {
  CLI::App app{"Convert a graph dataset to a sar .npy dataset directory (meta.json, indptr.npy, "
               "indices.npy, features.npy, labels.npy or targets.npy, split.npy, and for a "
               "heterogeneous graph edge_types.npy with the node types and relations in "
               "meta.json), readable by numpy.load",
               "sar-convert"};
  std::string dataset;
  std::string out;
  sar_programs::switch_setting sparse_features = sar_programs::switch_setting::automatic;
  bool verify = false;
  bool add_reverse = false;
  sar::dataset_sizes sizes;
  std::vector<double> split_edges;
  sar::edge_split_options split_options;
  std::string split_name = "random";
  app.add_option("--dataset", dataset,
                 "OGB raw directory (homogeneous, or heterogeneous as ogbn-mag), sar .npy dataset "
                 "directory, edge-list file, .mtx file, or a generator such as "
                 "planted:nodes=200000,degree=20,features=128 or rmat:scale=16")
      ->required()
      ->check(sar_programs::not_empty);
  sar_programs::add_dataset_size_options(app, sizes);
  sar_programs::add_task_option(app, sizes);
  app.add_option(
         "--out", out,
         "output directory (created; an existing .npy dataset there is replaced once the new "
         "one is complete, any other non-empty directory is refused)")
      ->required()
      ->check(sar_programs::not_empty);
  app.add_flag("--add-reverse", add_reverse,
               "heterogeneous datasets only: add the reverse of every relation (DGL's "
               "AddReverse): (s, r, d) gets (d, rev_r, s) with every edge reversed and the same "
               "edge features");
  sar_programs::add_sparse_features_option(app, sparse_features, "features_indptr.npy, "
                                           "features_indices.npy and features_data.npy");
  auto* splitting =
      app.add_option("--split-edges", split_edges,
                     "VALID,TEST: hold out these fractions of the undirected edges for link "
                     "prediction (removed from the graph both ways; written to split/NAME/ with "
                     "shared negatives, docs/link-prediction.md)")
          ->delimiter(',')
          ->expected(2);
  app.add_option("--negatives", split_options.negatives,
                 "--split-edges: shared negative pairs per held-out set (default: as many as its "
                 "positives)")
      ->check(CLI::PositiveNumber)
      ->needs(splitting);
  app.add_option("--per-source-negatives", split_options.per_source_negatives,
                 "--split-edges: also this many negative destinations per held-out positive "
                 "(for MRR; default 0: none)")
      ->check(CLI::NonNegativeNumber)
      ->needs(splitting);
  app.add_option("--seed", split_options.seed, "--split-edges: keys every draw (default 0)")
      ->needs(splitting);
  app.add_option("--split-name", split_name, "--split-edges: the folder under split/ "
                 "(default random)")
      ->check(sar_programs::not_empty)
      ->needs(splitting);
  app.add_flag("--verify", verify, "read the written directory back and compare it exactly");
  app.set_version_flag("--version", "sar-convert (sar " SAR_VERSION_STRING ")");
  if (const auto status = sar_programs::parse_command_line(app, argc, argv)) return *status;

  sar::check_replaceable(out, sar::npy_dataset_kind, "--out");  // before loading
  sar::graph_dataset data = sar_programs::load_dataset_reporting(
      dataset, sizes, sar_programs::sparse_below(sparse_features));
  sar_programs::make_sparse_if_wanted(data, sparse_features);
  if (add_reverse) {
    SAR_CHECK(data.schema.heterogeneous(), sar::invalid_argument, "--add-reverse: ",
              dataset, " is a homogeneous graph (no node types and relations to reverse)");
    sar::add_reverse_relations(data);
    std::printf("added the reverse relations: %lld edges\n",
                static_cast<long long>(data.graph.num_edges()));
  }
  if (data.schema.heterogeneous()) print_schema(data);
  std::optional<sar::link_split> split;
  if (!split_edges.empty()) {
    split_options.valid = split_edges[0];
    split_options.test = split_edges[1];
    sar_programs::current_phase() = "splitting the edges";
    split = sar::split_edges(data, split_options);
    std::printf("held out %zu validation and %zu test edges; %zu train edges remain, %zu and %zu "
                "shared negatives%s\n",
                split->valid.size(), split->test.size(), split->train.size(),
                split->valid_negatives.size(), split->test_negatives.size(),
                split->per_source > 0
                    ? sar::message(", ", split->per_source, " negatives per positive").c_str()
                    : "");
  }

  auto start = clock_type::now();
  sar_programs::current_phase() = "writing " + out;
  std::printf("writing %s ...\n", out.c_str());
  std::fflush(stdout);
  sar::write_npy_dataset(out, data, [&](sar::directory_writer& writer) {
    if (split) sar::write_link_split(writer, *split, split_name);
  });
  double seconds = seconds_since(start);
  std::printf("wrote %.1f MiB of arrays (%.2f s, %.0f MiB/s)\n", array_mebibytes(data), seconds,
              array_mebibytes(data) / seconds);

  if (verify) {
    start = clock_type::now();
    sar_programs::current_phase() = "reading " + out + " back";
    std::printf("reading %s back ...\n", out.c_str());
    std::fflush(stdout);
    const sar::graph_dataset back = sar::read_npy_dataset(out, {.sizes = sizes});  // as written
    seconds = seconds_since(start);
    std::printf("read %.1f MiB of arrays (%.2f s, %.0f MiB/s)\n", array_mebibytes(back), seconds,
                array_mebibytes(back) / seconds);
    const bool same_split =
        !split || same_split_of(*split, sar::read_link_split(
                                    out, split_name, back.num_nodes(), 0, 1,
                                    std::max(1, static_cast<int>(back.schema.num_relations()))));
    if (!same_dataset(data, back) || !same_split) {
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
