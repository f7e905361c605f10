// sar-partition: partition a dataset, relabel it and write the partition store that each rank
// of sar-train reads its own part from. On one process it loads the whole dataset (METIS,
// random or contiguous); under mpirun no rank ever holds the whole graph: every rank reads its
// block of the input, PT-Scotch (or the distributed random / contiguous methods) partitions,
// the nodes move to their parts' ranks and every rank writes its parts' files
// (docs/large-graphs.md). The dataset's link splits (split/<name>/ of .npy pairs) travel
// into the store, so sar-train --partitions --task link finds them there.
//
//   sar-partition --dataset /data/ogbn-arxiv --parts 8 --method metis --out arxiv.8
//   mpirun -np 8 sar-partition --dataset /data/big.npy --parts 16 --method ptscotch --out big.16
//
// Every setting is read and checked before MPI starts; an error on any rank ends every rank
// with the message and exit code 1 (sar::run_mpi_program).
#include <algorithm>
#include <array>
#include <cstdio>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "mpi_program_support.hpp"
#include "sar/comm/mpi.hpp"
#include "sar/graph/io/link_split.hpp"
#include "sar/partition/distributed_partition.hpp"
#include "sar/partition/metis.hpp"
#include "sar/partition/parallel_read.hpp"
#include "sar/partition/partitioners.hpp"
#include "sar/partition/store.hpp"
#include "sar/version.hpp"

namespace {

using sar_programs::clock_type;
using sar_programs::seconds_since;

/// --method's values.
enum class partition_method { metis, ptscotch, random, contiguous };
const sar_programs::choices<partition_method> method_names{{"metis", partition_method::metis},
                                                 {"ptscotch", partition_method::ptscotch},
                                                 {"random", partition_method::random},
                                                 {"contiguous", partition_method::contiguous}};
using balance_kind = sar::ptscotch_options::balance_kind;
/// --balance's values.
const sar_programs::choices<balance_kind> balance_names{
    {"nodes", balance_kind::nodes}, {"nodes+edges", balance_kind::nodes_and_edges}};
using sar_programs::name_of;

struct settings {
  std::string dataset;
  int parts = 0;
  partition_method method = partition_method::metis;
  /// The method's name, as --method spells it.
  const std::string& method_name() const { return sar_programs::name_of(method_names, method); }
  std::string out;
  std::uint64_t seed = 0;
  std::optional<double> imbalance;
  balance_kind balance = balance_kind::nodes;
  sar::coarsening_options coarsening;
  sar_programs::switch_setting sparse_features = sar_programs::switch_setting::automatic;
  sar::dataset_sizes sizes;
};

/// Reads every setting; nullopt to go on, else the exit status (0 after --help/--version).
/// Not collective: runs before MPI starts, and every rank reaches the same verdict.
std::optional<int> parse_settings(int argc, char** argv, settings& s) {
  CLI::App app{"Partition a graph dataset and write a sar partition store (one file set per "
               "part). Under mpirun with P ranks, every rank reads 1/P of the input and no rank "
               "holds the whole graph (--method ptscotch, random or contiguous)",
               "sar-partition"};
  app.add_option("--dataset", s.dataset,
                 "sar .npy dataset directory, OGB raw directory, edge-list file, .mtx file, or "
                 "a generator such as planted:nodes=100000 or rmat:scale=16")
      ->required()
      ->check(sar_programs::not_empty);
  sar_programs::add_dataset_size_options(app, s.sizes);
  sar_programs::add_task_option(app, s.sizes);
  app.add_option("--parts", s.parts, "number of parts (the ranks sar-train runs on)")
      ->required()
      ->check(CLI::Range(1, 1 << 20));
  sar_programs::add_choice(app, "--method", s.method, method_names,
                           "partitioner: metis (one process), ptscotch (any number of processes: "
                           "a small edge cut without one process holding the graph), random, "
                           "contiguous");
  app.add_option("--out", s.out,
                 "output directory (created; an existing partition store there is replaced once "
                 "the new one is complete, any other non-empty directory is refused). Under "
                 "mpirun it must be on a file system every rank sees")
      ->required()
      ->check(sar_programs::not_empty);
  app.add_option("--seed", s.seed, "seed of the random, METIS and PT-Scotch partitioners")
      ->check(sar_programs::non_negative)  // CLI11 would wrap -5 around to 2^64 - 5
      ->capture_default_str();
  app.add_option("--imbalance", s.imbalance,
                 "allowed imbalance: METIS per constraint (nodes, edges, training nodes; "
                 "default 0.05), PT-Scotch on its balance weight (default 0.03)")
      ->check(sar_programs::finite_number)
      ->check(CLI::Range(0.0, 10.0));
  sar_programs::add_choice(app, "--balance", s.balance, balance_names,
                           "PT-Scotch: what the parts are balanced on, nodes or nodes+edges (a "
                           "node weighs 1 + its degree)");
  app.add_option("--cluster-size", s.coarsening.cluster_size,
                 "PT-Scotch: partition the graph of star clusters of at most this many nodes, "
                 "then move single nodes to lower the cut (0: the graph itself). Less memory "
                 "per rank on graphs whose ids carry no locality (docs/large-graphs.md)")
      ->check(CLI::Range(sar::node_t{0}, sar::node_t{1} << 30))
      ->capture_default_str();
  app.add_option("--arc-fraction", s.coarsening.arc_fraction,
                 "PT-Scotch: the fraction of the (clustered) graph's arcs of weight 1 it "
                 "partitions, then single nodes move to lower the cut on the whole graph. Its "
                 "memory per rank falls with the arcs (docs/large-graphs.md)")
      ->check(sar_programs::finite_number)
      ->check(CLI::Range(0.001, 1.0))
      ->capture_default_str();
  sar_programs::add_sparse_features_option(app, s.sparse_features, "the store");
  app.callback([&s] {
    if (s.method != partition_method::ptscotch && s.coarsening.enabled())
      throw CLI::ValidationError("--cluster-size, --arc-fraction",
                                 "apply to --method ptscotch only, not " + s.method_name());
  });
  app.set_version_flag("--version", "sar-partition (sar " SAR_VERSION_STRING ")");
  return sar_programs::parse_command_line(app, argc, argv);
}

/// METIS's default imbalance per constraint.
constexpr double metis_imbalance = 0.05;

/// How the store's meta.json describes the partition ("metis seed=0 imbalance=0.05",
/// "random seed=3", "contiguous", "ptscotch seed=0 imbalance=0.03 balance=nodes"): the
/// one-process and the distributed run of a method describe it alike.
std::string describe_method(const settings& s, double imbalance) {
  std::string text = s.method_name();
  if (s.method != partition_method::contiguous) text += " seed=" + std::to_string(s.seed);
  if (s.method == partition_method::metis || s.method == partition_method::ptscotch) {
    char number[64];
    std::snprintf(number, sizeof number, " imbalance=%g", imbalance);
    text += number;
  }
  if (s.method == partition_method::ptscotch) text += " balance=" + name_of(balance_names, s.balance);
  if (s.method == partition_method::ptscotch && s.coarsening.cluster_size > 1)
    text += " cluster_size=" + std::to_string(s.coarsening.cluster_size);
  if (s.method == partition_method::ptscotch && s.coarsening.arc_fraction < 1) {
    char number[64];
    std::snprintf(number, sizeof number, " arc_fraction=%g", s.coarsening.arc_fraction);
    text += number;
  }
  return text;
}

/// Throws sar::invalid_argument before anything is loaded if `spec` declares more nodes or
/// edges than METIS's indices hold (Debian's METIS: 32-bit), naming the distributed path.
void refuse_beyond_metis(const settings& s) {
  if (s.method != partition_method::metis) return;
  constexpr auto most = static_cast<std::int64_t>(std::numeric_limits<idx_t>::max());
  const auto [nodes, edges] = sar::declared_graph_size(s.dataset);
  SAR_CHECK(nodes <= most && edges <= most, sar::invalid_argument, s.dataset, " declares ", nodes,
            " nodes and ", edges, " edges, beyond the ", sizeof(idx_t) * 8, "-bit indices of "
            "METIS; partition it on several processes without loading it whole: mpirun -np P "
            "sar-partition --method ptscotch ...");
}

/// Says which link splits the store carries (none: nothing).
void print_link_splits(const std::vector<std::string>& names) {
  if (names.empty()) return;
  std::string list;
  for (const std::string& name : names) list += (list.empty() ? "" : ", ") + name;
  std::printf("copied the link split%s %s (split/)\n", names.size() > 1 ? "s" : "", list.c_str());
}

/// The one-process path: load the whole dataset, partition, write.
int run_serial(const settings& s) {
  sar::check_replaceable(s.out, sar::partition_store_kind, "--out");  // before the work
  refuse_beyond_metis(s);
  sar::graph_dataset data = sar_programs::load_dataset_reporting(
      s.dataset, s.sizes, sar_programs::sparse_below(s.sparse_features));
  sar_programs::make_sparse_if_wanted(data, s.sparse_features);
  SAR_CHECK(s.parts <= data.num_nodes(), sar::invalid_argument, "--parts ", s.parts,
            " exceeds the ", data.num_nodes(), " nodes of ", s.dataset,
            " (every part needs a node)");

  auto start = clock_type::now();
  sar_programs::current_phase() = "partitioning";
  std::printf("partitioning into %d parts with %s ...\n", s.parts, s.method_name().c_str());
  std::fflush(stdout);
  std::vector<int> part;
  const double imbalance = s.imbalance.value_or(metis_imbalance);
  if (s.method == partition_method::metis)
    part = sar::partition_metis(data, s.parts, {.seed = s.seed, .imbalance = imbalance});
  else if (s.method == partition_method::random)
    part = sar::partition_random(data.num_nodes(), s.parts, s.seed);
  else
    part = sar::partition_contiguous(data.num_nodes(), s.parts);
  std::printf("partitioned (%.2f s)\n", seconds_since(start));

  start = clock_type::now();
  sar_programs::current_phase() = "writing " + s.out;
  std::printf("writing %s ...\n", s.out.c_str());
  std::fflush(stdout);
  std::vector<std::string> splits;
  const sar::partition_metadata meta = sar::write_partition_store(
      data, part, s.parts, s.out, describe_method(s, imbalance),
      [&](sar::directory_writer& out) { splits = sar::copy_link_splits(out, s.dataset); });
  std::printf("wrote %d parts (%.2f s)\n", s.parts, seconds_since(start));
  print_link_splits(splits);

  std::fputs(sar::format_partition_quality(meta.quality).c_str(), stdout);
  sar_programs::print_peak_memory();
  return 0;
}

/// The distributed path: every rank reads its block, partitions, redistributes, writes its
/// parts. Collective.
int run_distributed(const settings& s, sar::mpi_communicator& comm) {
  const bool root = comm.rank() == 0;
  SAR_CHECK(s.method != partition_method::metis, sar::invalid_argument, "--method metis partitions in one "
            "process; on ", comm.size(), " ranks use --method ptscotch (or random, contiguous)");

  {
    std::exception_ptr failure;  // rank 0 checks the output before any work
    if (root)
      sar::detail::guarded(failure, [&] {
        sar::check_replaceable(s.out, sar::partition_store_kind, "--out");
      });
    sar::detail::agree_on_failure(comm, failure, "sar-partition");
  }
  const auto say = [&](const std::string& line) {
    if (!root) return;
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  };
  sar::phase_meter<sar::mpi_communicator> meter(comm);
  say(sar::message("reading ", s.dataset, " on ", comm.size(), " ranks ..."));
  sar_programs::current_phase() = "reading " + s.dataset;
  sar::dataset_block block =
      sar::read_dataset_block(comm, s.dataset, {.sizes = s.sizes, .features = false});
  const sar::phase_stats read = meter.end("read");
  const sar::node_t n = block.rows.book.num_nodes();
  std::int64_t edges = block.rows.in_edges.num_edges();
  comm.all_reduce(std::span<std::int64_t>(&edges, 1), sar::reduce_op::sum);
  say(sar::message("read ", block.name, ": ", n, " nodes, ", edges, " edges, ",
                   block.rows.feature_dim(), " features, ",
                   sar_programs::outputs_summary(block.rows.task, block.rows.num_outputs()),
                   " (", read.seconds, " s)"));
  SAR_CHECK(s.parts <= n, sar::invalid_argument, "--parts ", s.parts, " exceeds the ", n,
            " nodes of ", s.dataset, " (every part needs a node)");

  sar::partition_metadata about;
  about.dataset = block.name;
  about.feature_dim = block.rows.feature_dim();
  about.num_classes = block.rows.num_classes;
  about.task = block.rows.task;
  about.num_outputs = sar::has_class_ids(block.rows.task) ? 0 : block.rows.num_outputs();
  about.has_labels = !block.rows.labels.empty();
  about.has_split = !block.rows.split.empty();
  sar::distributed_partition_options options{.method = sar::distributed_method_named(s.method_name()),
                                             .parts = s.parts, .seed = s.seed};
  if (s.method == partition_method::ptscotch) {
    options.ptscotch.imbalance = s.imbalance.value_or(options.ptscotch.imbalance);
    options.ptscotch.balance = s.balance;
    options.coarsening = s.coarsening;
  }
  about.method = describe_method(s, options.ptscotch.imbalance);
  say(sar::message("partitioning into ", s.parts, " parts with ", s.method_name(), " ..."));
  sar_programs::current_phase() = "partitioning";
  std::vector<sar::graph_part> mine =
      sar::partition_distributed(comm, std::move(block), options, &meter);
  // --sparse-features: decided alike on every rank, by the density over all parts (as the
  // one-process path decides on the dataset's).
  std::array<double, 2> counts{0, 0};  // non-zeros, entries
  for (const sar::graph_part& p : mine) {
    const auto& values = p.sparse_features.values;
    counts[0] += static_cast<double>(
        p.sparse() ? std::count_if(values.begin(), values.end(), [](float v) { return v != 0; })
                   : (p.features.array() != 0.0f).count());
    counts[1] += static_cast<double>(p.num_local()) * static_cast<double>(p.feature_dim());
  }
  comm.all_reduce(std::span<double>(counts), sar::reduce_op::sum);
  const bool sparse = sar_programs::wants_sparse(s.sparse_features, counts[0], counts[1]);
  for (sar::graph_part& p : mine) sar_programs::hold_features(p, sparse, p.num_local());

  say(sar::message("writing ", s.out, " ..."));
  sar_programs::current_phase() = "writing " + s.out;
  std::vector<std::string> splits;  // rank 0's
  const sar::partition_metadata meta = sar::write_partition_store(
      comm, mine, s.parts, about, s.out,
      [&](sar::directory_writer& out) { splits = sar::copy_link_splits(out, s.dataset); });
  meter.end("write");
  std::int64_t peak = 0;
  for (const auto& phase : meter.phases()) peak = std::max(peak, phase.peak_bytes);
  if (root) {
    std::printf("wrote %d parts\n", s.parts);
    print_link_splits(splits);
    std::fputs(sar::format_partition_quality(meta.quality).c_str(), stdout);
    std::printf("peak memory %.1f MiB (largest rank)\n", static_cast<double>(peak) / (1 << 20));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  settings s;
  if (const auto status = parse_settings(argc, argv, s)) return *status;
  return sar_programs::run_under_mpi("sar-partition", argc, argv,
                                     [&](sar::mpi_communicator& comm) {
                                       if (comm.size() == 1 && s.method != partition_method::ptscotch)
                                         return run_serial(s);
                                       return run_distributed(s, comm);
                                     });
}
