// sar-train: trains GCN, GraphSAGE or GAT, either on one process from a dataset (an OGB raw
// directory, a graph file, or the built-in planted-partition graph) or on P MPI ranks from a
// partition store written by sar-partition (each rank reads only its own part), with the
// sequential (SAR), keep_halo or one_shot schedule, or Sylvie's low-bit / bounded-stale
// exchange (--halo-bits, --gradient-bits, --staleness). Reports per-epoch progress, the accuracy
// at the best validation epoch, epoch time, bytes sent and peak memory (largest over ranks).
// Every setting (the options and the environment variables SAR_WATCHDOG_SECONDS and
// SAR_TRAIN_INJECT_FAILURE) is read and checked in parse_settings, before MPI starts: a bad
// one ends every rank with the message and exit code 1. An error on any rank later ends
// every rank with the message and exit code 1 too (sar::run_mpi_program).
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string_view>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <tbb/task_arena.h>

#include "../mpi_program_support.hpp"
#include "sar/comm/mpi.hpp"
#include "sar/core/log.hpp"
#include "sar/io/output_file.hpp"
#include "sar/graph/edge_split.hpp"
#include "sar/graph/heterogeneous.hpp"
#include "sar/graph/io/link_split.hpp"
#include "sar/nn/link_decoders.hpp"
#include "sar/nn/readout.hpp"
#include "sar/nn/link_metrics.hpp"
#include "sar/graph/io/load.hpp"
#include "sar/partition/distributed_partition.hpp"
#include "sar/partition/parallel_read.hpp"
#include "sar/partition/store.hpp"
#include "sar/sampling/distributed_sampling_graph.hpp"
#include "sar/train/checkpoint.hpp"
#include "sar/train/model_file.hpp"
#include "sar/version.hpp"
#include "graph_training.hpp"
#include "sar_train.hpp"

namespace {

using sar_train::program_options;

/// "default: gcn 16, sage 64, ...": a setting's default in every model family (its paper's).
template <class Setting>
std::string family_defaults(Setting setting) {
  std::string out;
  sar::for_each_family([&]<class F>() {
    out += sar::message(out.empty() ? "default: " : ", ", F::name, " ",
                        setting(sar::paper_defaults(F::name)));
  });
  return out;
}

/// --partition's values.
const sar_programs::choices<sar::distributed_method> partition_names{
    {"ptscotch", sar::distributed_method::ptscotch},
    {"random", sar::distributed_method::random},
    {"contiguous", sar::distributed_method::contiguous}};

/// Throws sar::invalid_argument unless the dataset `what` has features, a split and what its
/// task predicts (`outputs` classes or targets; `has_targets`: labels or targets present).
void check_trainable(const std::string& what, sar::task_kind task, std::int64_t outputs,
                     bool has_targets, bool has_split, std::int64_t features) {
  const bool classify = sar::has_class_ids(task);
  SAR_CHECK(outputs > 0 && has_targets && has_split && features > 0, sar::invalid_argument,
            "sar-train: ", what, " has no features, ", classify ? "labels" : "targets",
            " or split to train on",
            classify && !has_targets ? " (a regression or multi-label dataset needs --task "
                                       "regress or --task multilabel)"
                                     : "");
}

/// `config` for the data of this rank (a dataset or a part: its graph, edge features, schema
/// and edge types): rgcn takes the data's schema (and refuses a homogeneous graph); the
/// other models see a heterogeneous graph with its types erased (sar::erase_types, logged on
/// rank 0); then with_edge_width. Throws sar::invalid_argument as with_edge_width does.
/// Collective.
sar::model_config with_graph(sar::model_config config, sar::csr& graph,
                             sar::graph_schema& schema, std::vector<std::int32_t>& edge_types,
                             sar::matrixf& edge_features, sar::mpi_communicator& comm);

/// `config` with the edge-feature width a model that reads them (mpnn, gcn --edge-weight,
/// gat --edge-attention) reads: the data's (`edge_features`: this rank's rows; the widest over
/// the ranks, as a rank without edges may hold none). A model that reads none leaves config
/// as it is (sar::prepare_model_graph releases the table). Throws sar::invalid_argument for
/// an edge weight column the data lack. Collective.
sar::model_config with_edge_width(sar::model_config config, const sar::matrixf& edge_features,
                                  sar::mpi_communicator& comm) {
  std::int64_t width = edge_features.cols();
  comm.all_reduce(std::span<std::int64_t>(&width, 1), sar::reduce_op::max);
  if (!sar::reads_edge_features(config)) return config;
  config.edge_dim = width;
  SAR_CHECK(config.edge_weight < width, sar::invalid_argument, "sar-train: --edge-weight ",
            config.edge_weight, ", but the dataset has ", width, " features per edge");
  SAR_CHECK(!config.edge_attention || width > 0, sar::invalid_argument,
            "sar-train: --edge-attention, but the dataset has no edge features");
  SAR_CHECK(width > 0, sar::invalid_argument, "sar-train: --model ", config.family,
            " reads edge features, but the dataset has none (a heterogeneous dataset seen with "
            "its types erased has none either: an edge of several relations would need several "
            "rows); gcn, sage and gat need none");
  return config;
}

sar::model_config with_graph(sar::model_config config, sar::csr& graph,
                             sar::graph_schema& schema, std::vector<std::int32_t>& edge_types,
                             sar::matrixf& edge_features, sar::mpi_communicator& comm) {
  if (sar::reads_graph_types(config)) {
    SAR_CHECK(schema.heterogeneous(), sar::invalid_argument, "sar-train: --model ",
              config.family, " needs a heterogeneous dataset (node types and relations: an OGB "
              "heterogeneous directory, a .npy dataset with a schema, or planted-hetero); this "
              "one has one node type");
    config.schema = schema;
  } else if (schema.heterogeneous()) {
    if (comm.rank() == 0)
      sar::log_info(sar::message("--model ", config.family,
                                 " sees the ", schema.num_node_types(), " node types and ",
                                 schema.num_relations(), " relations as one graph (types "
                                 "erased; --model rgcn keeps them)"));
    sar::erase_types(graph, schema, edge_types, edge_features);
  }
  return with_edge_width(config, edge_features, comm);
}

/// How --partition ptscotch coarsens the graph PT-Scotch sees (--cluster-size, --arc-fraction).
sar::coarsening_options coarsening_of(const program_options& p) {
  return {.cluster_size = p.cluster_size, .arc_fraction = p.arc_fraction};
}

/// The link split p.link.split of --dataset, for a graph of `num_nodes` nodes and `relations`
/// relations (share `share` of `shares`: read_link_split), from the partition store or
/// --dataset. Throws sar::invalid_argument when it has none, what read_link_split throws for a
/// bad one.
sar::link_split link_split_of(const program_options& p, sar::node_t num_nodes, int relations,
                              int share = 0, int shares = 1) {
  SAR_CHECK(sar::has_link_split(p.split_home(), p.link.split), sar::invalid_argument,
            "sar-train --task link: ", sar::link_split_dir(p.split_home(), p.link.split).string(),
            " holds no link split (train_edge.npy, valid_edge.npy, ...): write one with "
            "sar-convert --split-edges VALID,TEST, or split in memory with --split-edges (a "
            "partition store carries the splits of the dataset sar-partition read)");
  sar_programs::current_phase() = "reading the link split " + p.link.split;
  return sar::read_link_split(p.split_home(), p.link.split, num_nodes, share, shares,
                              relations);
}

/// `split` as the model `config` reads it: without relations when the model erases the
/// graph's types (said on rank 0), for its decoder scores relation 0 only.
sar::link_split as_model_reads(sar::link_split split, const sar::model_config& config,
                               sar::mpi_communicator& comm) {
  if (sar::link_relations(config) > 1) return split;
  std::int64_t typed = split.typed();
  comm.all_reduce(std::span<std::int64_t>(&typed, 1), sar::reduce_op::max);
  if (typed && comm.rank() == 0)
    sar::log_info(sar::message("the split's relations are not read: --model ", config.family,
                               " erases the graph's types (rgcn keeps them)"));
  for (sar::node_pairs* pairs : {&split.train, &split.valid, &split.test, &split.valid_negatives,
                                 &split.test_negatives})
    pairs->relation = {};
  return split;
}

/// One process, --task link: the split (read, or made by --split-edges, which removes the
/// held-out edges from data.graph), then the run.
template <class T>
nlohmann::json run_links_single(const program_options& p, const sar::model_config& config,
                                sar::graph_dataset& data, sar::mpi_communicator& comm) {
  sar::link_split split;
  if (!p.link.split_edges.empty()) {
    sar_programs::current_phase() = "splitting the edges";
    split = sar::split_edges(data, {.valid = p.link.split_edges[0],
                                    .test = p.link.split_edges[1], .seed = p.seed});
  } else {
    split = link_split_of(p, data.num_nodes(), std::max(1, static_cast<int>(
                                                    data.schema.num_relations())));
  }
  sar::log_info(sar::message("link split: ", split.train.size(), " train, ", split.valid.size(),
                             " valid and ", split.test.size(), " test positives; ",
                             split.valid_negatives.size(), " and ", split.test_negatives.size(),
                             " shared negatives",
                             split.per_source > 0
                                 ? sar::message(", ", split.per_source, " per source")
                                 : std::string()));
  const sar::model_config model =
      with_graph(config, data.graph, data.schema, data.edge_types, data.edge_features, comm);
  sar_programs::current_phase() = "building the model and training";
  return sar_train::train_links_single<T>(p, model, data,
                                         as_model_reads(std::move(split), model, comm), comm);
}

template <class T>
nlohmann::json run(const program_options& p, const sar::model_config& config,
                   sar::mpi_communicator& comm) {
  using sar_programs::switch_setting;
  if (p.graph_level()) return sar_train::train_graphs<T>(p, config, comm);
  const bool normalise_on = p.normalise == switch_setting::on;
  if (!p.distributed()) {
    SAR_CHECK(comm.size() == 1, sar::invalid_argument, "sar-train: ", comm.size(),
              " ranks but neither --partitions nor --partition; write a partition store with "
              "sar-partition --parts ", comm.size(), " and pass it with --partitions, or "
              "partition --dataset in memory with --partition ptscotch");
    const std::string& spec = p.dataset;
    sar_programs::current_phase() = "loading " + spec;
    sar::log_info("loading " + spec + " ...");
    // Sparse features stay sparse from the first byte (--sparse-features); mapped ones are not
    // read here (train_single maps them).
    std::error_code no_file;
    SAR_CHECK(!p.map_features ||
                  std::filesystem::is_regular_file(std::filesystem::path(spec) / "meta.json",
                                                   no_file),
              sar::invalid_argument, "sar-train: --map-features reads the features.npy of a "
              ".npy dataset directory (sar-convert --out writes one); ", spec, " is not one");
    sar::graph_dataset data =
        p.map_features
            ? sar::read_npy_dataset(spec, {.verify_checksums = !p.skip_checksums,
                                           .sizes = p.sizes,
                                           .arrays = sar::npy_arrays::without_features})
            : sar::load_dataset(spec, p.sizes, sar_programs::sparse_below(p.sparse_features));
    if (!p.link.on)
      check_trainable(sar::message("dataset '", spec, "'"), data.task, data.num_outputs(),
                      !data.labels.empty() || !sar::has_class_ids(data.task),
                      !data.split.empty(), data.feature_dim());
    program_options with = p;  // and the normalisation decided
    const auto normalise = [&](auto& features) {
      sar_programs::check_finite_features(features, "sar-train: " + spec);
      with.row_normalised =
          normalise_on || (p.normalise == switch_setting::automatic &&
                           sar_programs::smallest_feature(features) >= 0);
      if (with.row_normalised) sar_programs::row_normalise(features);
    };
    if (data.sparse()) normalise(data.sparse_features);
    else normalise(data.features);
    sar::log_info(sar::message("loaded ", data.name, ": ", data.num_nodes(), " nodes, ",
                               data.graph.num_edges(), " edges, ", data.feature_dim(),
                               data.sparse() ? sar::message(" sparse features (",
                                                            data.sparse_features.non_zeros(),
                                                            " non-zeros)")
                                             : std::string(" features"),
                               ", ",
                               sar_programs::outputs_summary(data.task, data.num_outputs()), ", ",
                               data.count(sar::node_split::train), " training nodes"));
    sar_programs::current_phase() = "building the model and training";
    if (p.link.on) return run_links_single<T>(with, config, data, comm);
    return sar_train::train_single<T>(
        with, with_graph(config, data.graph, data.schema, data.edge_types, data.edge_features, comm),
        data, comm);
  }

  const bool sampled = p.sampled_graph();
  sar::graph_part part;
  std::vector<sar::node_t> part_breaks;  // out of core: where this rank's store parts begin
  std::string name, source;
  if (p.partition) {
    // No store: every rank reads its block of --dataset, the ranks partition it (one part
    // per rank) and move the nodes to their parts, as sar-partition does.
    sar_programs::current_phase() = "reading and partitioning " + p.dataset;
    sar::dataset_block block = sar::read_dataset_block(
        comm, p.dataset,
        {.sizes = p.sizes, .verify_checksums = !p.skip_checksums, .features = false});
    if (!p.link.on)
      check_trainable(sar::message("dataset '", p.dataset, "'"), block.rows.task,
                      block.rows.num_outputs(),
                      !block.rows.labels.empty() || !sar::has_class_ids(block.rows.task),
                      !block.rows.split.empty(), block.rows.feature_dim());
    SAR_CHECK(comm.size() <= block.rows.book.num_nodes(), sar::invalid_argument, "sar-train: ",
              comm.size(), " ranks for the ", block.rows.book.num_nodes(), " nodes of ",
              p.dataset, " (every rank needs a node)");
    name = block.name;
    source = sar::message("--dataset ", p.dataset, " partitioned by ",
                          sar_programs::name_of(partition_names, *p.partition));
    std::vector<sar::graph_part> mine = sar::partition_distributed(
        comm, std::move(block),
        {.method = *p.partition, .seed = p.seed,
         .coarsening = coarsening_of(p)});
    part = std::move(mine.front());
  } else {
    sar_programs::current_phase() = "reading " + p.partitions;
    const auto meta = sar::read_partition_metadata(p.partitions);
    // Every rank must read the same store (e.g. not differing local copies on two nodes).
    const auto [lowest, highest] = sar::min_max_over_ranks(comm, meta.identity);
    SAR_CHECK(lowest == highest, sar::invalid_argument, "sar-train: rank ", comm.rank(), " read ",
              p.partitions, "/meta.json with CRC-32 ", meta.identity,
              ", but the ranks' copies differ (CRC-32 from ", lowest, " to ", highest,
              "): every rank must read the same partition store");
    // Out of core, each rank may hold several consecutive parts and visit them one by one.
    if (p.memory_budget > 0)
      SAR_CHECK(meta.num_parts % comm.size() == 0, sar::invalid_argument, "sar-train: the "
                "partition store ", p.partitions, " has ", meta.num_parts, " parts, which ",
                comm.size(), " ranks cannot share equally out of core (run it with a number of "
                "ranks that divides ", meta.num_parts, ")");
    else if (sampled)  // P ranks = (P / c) block rows x c replicas
      sar::check_replication("sar-train", comm.size(), p.replication, meta.num_parts);
    else
      SAR_CHECK(meta.num_parts == comm.size(), sar::invalid_argument, "sar-train: the partition "
                "store ", p.partitions, " has ", meta.num_parts, " parts but this run has ",
                comm.size(), " ranks (run it with mpirun -np ", meta.num_parts, ")");
    SAR_CHECK(!p.sizes.task || *p.sizes.task == meta.task, sar::invalid_argument,
              "sar-train: --task ", sar::task_name(p.sizes.task.value_or(meta.task)), ", but the "
              "partition store ", p.partitions, " holds a ", sar::task_name(meta.task),
              " dataset");
    if (!p.link.on)
      check_trainable(sar::message("the partition store ", p.partitions), meta.task,
                      sar::has_class_ids(meta.task) ? meta.num_classes : meta.num_outputs,
                      meta.has_labels || !sar::has_class_ids(meta.task), meta.has_split,
                      meta.feature_dim);
    // Sparse features stay sparse unless off, or minibatches gather them (dense rows).
    const sar::partition_read_options read{
        .verify_checksums = !p.skip_checksums,
        .sparse_features = p.sparse_features != switch_setting::off && !sampled};
    const int parts_per_rank = p.memory_budget > 0 ? meta.num_parts / comm.size() : 1;
    part = parts_per_rank > 1
               ? sar::read_partition_parts(p.partitions, comm.rank() * parts_per_rank,
                                           parts_per_rank, read, &part_breaks)
               : sar::read_partition_part(p.partitions, comm.rank() / p.replication, read);
    name = meta.dataset;
    source = sar::message("partition store ", p.partitions, ": ", meta.num_edges, " edges over ",
                          meta.num_parts, " parts");
  }
  const int relations = std::max(1, static_cast<int>(part.schema.num_relations()));
  const sar::model_config model =
      with_graph(config, part.in_edges, part.schema, part.edge_types, part.edge_features, comm);
  sar::prepare_model_graph(model, part.in_edges, part.edge_features, part.first_global());
  program_options with = p;  // and the normalisation decided
  const auto normalise = [&](auto& features) {
    sar_programs::check_finite_features(features,
                                        sar::message("sar-train: ", source, ", part ", part.part));
    // "auto" must decide alike on every rank: is any feature negative anywhere?
    double negative = sar_programs::smallest_feature(features) < 0 ? 1.0 : 0.0;
    comm.all_reduce(std::span<double>(&negative, 1), sar::reduce_op::max);
    with.row_normalised =
        normalise_on || (p.normalise == switch_setting::automatic && negative == 0);
    if (with.row_normalised) sar_programs::row_normalise(features);
  };
  if (part.sparse()) normalise(part.sparse_features);
  else normalise(part.features);
  if (comm.rank() == 0)
    sar::log_info(sar::message(source, ": ", name, ", ", part.book.num_nodes(), " nodes on ",
                               comm.size(), " ranks; ",
                               p.memory_budget > 0 ? std::string("out of core")
                               : sampled     ? sar::message("minibatches, replication ",
                                                          p.replication)
                               : p.low_bit() ? sar::message("schedule low-bit: halos ",
                                                            p.halo_bits, " bits, gradients ",
                                                            p.gradient_bits, " bits, staleness ",
                                                            p.staleness, ", progress every ",
                                                            p.progress_us, " us, paced in ",
                                                            p.pace_kib, " KiB chunks")
                                             : "schedule " + sar_programs::name_of(
                                                                   sar_programs::schedule_names,
                                                                   p.schedule)));
  sar_programs::current_phase() = "building the model and training";
  if (p.link.on)
    return sar_train::train_links_distributed<T>(  // each rank reads a share
        with, model, part, name,
        as_model_reads(
            link_split_of(p, part.book.num_nodes(), relations, comm.rank(), comm.size()),
            model, comm),
        comm);
  if (sampled)
    return sar_train::train_sampled_distributed<T>(with, model, part, name, comm,
                                                   std::move(part_breaks));
  return sar_train::train_distributed<T>(with, model, part, name, comm);
}

/// SAR_TRAIN_INJECT_FAILURE's value (sar_train::injected_failure). Throws
/// sar::invalid_argument naming the variable and the value unless it is EPOCH:RANK[:HOW], two
/// non-negative integers and stop, hang or wait.
sar_train::injected_failure parse_injected_failure(std::string_view text) {
  using how = sar_train::injected_failure::kind;
  sar_train::injected_failure f;
  const auto number = [&](std::string_view field, int& out) {
    const auto [end, ec] = std::from_chars(field.data(), field.data() + field.size(), out);
    return ec == std::errc() && end == field.data() + field.size() && out >= 0;
  };
  const auto first = text.find(':'), second = text.find(':', first + 1);
  const std::string_view kind =
      second == std::string_view::npos ? std::string_view() : text.substr(second + 1);
  const bool valid = first != std::string_view::npos &&
                     number(text.substr(0, first), f.epoch) &&
                     number(text.substr(first + 1, second - first - 1), f.rank) &&
                     (second == std::string_view::npos || kind == "stop" || kind == "hang" ||
                      kind == "wait");
  SAR_CHECK(valid, sar::invalid_argument, "SAR_TRAIN_INJECT_FAILURE='", text,
            "' is not EPOCH:RANK[:stop|:hang|:wait] (a test hook; unset it)");
  f.how = second == std::string_view::npos ? how::error
          : kind == "stop"                 ? how::stop
          : kind == "hang"                 ? how::hang
                                           : how::wait;
  return f;
}

/// The settings of the command line that are not program_options fields as they are: the
/// model's (their defaults are the family's) and those whose default depends on others.
struct option_overrides {
  std::optional<int> layers, epochs, patience, progress_us, pace_kib;
  std::optional<Eigen::Index> hidden, heads;
  std::optional<double> dropout, input_dropout, attention_dropout, learning_rate, weight_decay;
  std::optional<double> watchdog;
  bool batch_norm = false;
  bool no_edge_state = false;
  bool layer_norm = false;
  bool mean_messages = true;
  Eigen::Index edge_weight = -1;
  bool edge_attention = false;
  Eigen::Index rgcn_bases = 0, rgcn_blocks = 0;
  bool node_embeddings = false;
};

/// Adds the options of the group "Link prediction" (--task link).
void add_link_options(CLI::App& app, program_options& p) {
  app.option_defaults()->group("Link prediction");
  app.add_option("--decoder", p.link.decoder,
                 "how a pair of node embeddings is scored: dot (their dot product, GAE), mlp (an "
                 "MLP on their elementwise product, OGB's LinkPredictor) or distmult (a learnt "
                 "diagonal between them)")
      ->check(CLI::IsMember(sar::link_decoder_names()))
      ->capture_default_str();
  app.add_option("--negatives", p.link.negatives,
                 "negative pairs per positive each epoch: the positive's source with a uniform "
                 "destination, keyed by (--seed, epoch, edge)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  sar_programs::add_choice(app, "--negative-sampler", p.link.sampler,
                           sar_programs::negative_sampler_names,
                           "where negative destinations come from: uniform over the nodes, or "
                           "degree (in proportion to in-degree^0.75, as DGL's link-prediction "
                           "guide and word2vec draw them)");
  app.add_option("--split", p.link.split,
                 "the split to train on: --dataset's split/NAME/ (link: train_edge.npy, "
                 "valid_edge.npy, ..., which sar-convert --split-edges writes; graph-level "
                 "tasks: train.npy, valid.npy and test.npy of graph indices, by default the "
                 "only folder there)")
      ->check(sar_programs::not_empty)
      ->capture_default_str();
  app.add_option("--split-edges", p.link.split_edges,
                 "VALID,TEST: one process only: split --dataset's edges in memory instead "
                 "(seeded by --seed; as sar-convert --split-edges)")
      ->delimiter(',')
      ->expected(2);
  app.add_option("--hits-at", p.link.hits_at,
                 "the K of the Hits@K reported (against the shared negatives)")
      ->delimiter(',')
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--select-by", p.link.select_by,
                 "the validation figure that picks the best epoch (its test figures are "
                 "reported): auc, hits@K for a K of --hits-at, or mrr (with per-source "
                 "negatives)")
      ->capture_default_str();
  app.add_flag("--allow-leak", p.link.allow_leak,
               "keep held-out positives that are edges of the message-passing graph (for "
               "datasets whose convention is to, such as ogbl-collab with validation edges as "
               "input); refused by default");
}

/// Adds the options of the group "Graph-level tasks" (--task graph-classify / graph-regress).
void add_graph_options(CLI::App& app, program_options& p) {
  app.option_defaults()->group("Graph-level tasks");
  app.add_option("--readout", p.graphs.readout,
                 "how each graph's node rows pool into one row: sum, mean, max, or attention "
                 "(a learnt gate's softmax over the graph's nodes)")
      ->check(CLI::IsMember(std::vector<std::string>(std::begin(sar::readout_names),
                                                     std::end(sar::readout_names))))
      ->capture_default_str();
  app.add_option("--batch-graphs", p.graphs.batch_graphs,
                 "graphs per minibatch (over all ranks: each takes its share)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--folds", p.graphs.folds,
                 "without a split folder (or with --folds given): a seeded k-fold of this many "
                 "folds, stratified by class; a tenth of the rest validates")
      ->check(CLI::Range(2, 1 << 20))
      ->capture_default_str();
  app.add_option("--fold", p.graphs.fold, "the fold that tests (0-based, below --folds)")
      ->check(sar_programs::non_negative)
      ->capture_default_str();
}

/// Adds the options of the group "Data": the dataset or store, its sizes, task and features.
void add_data_options(CLI::App& app, program_options& p) {
  app.option_defaults()->group("Data");
  app.add_option("--dataset", p.dataset,
                 "OGB raw directory, edge-list or .mtx file, or a generator spec: "
                 "planted[:nodes=N,classes=C,degree=D,features=F,...], rmat[:scale=S,...] or "
                 "planted-hetero[:nodes=N,authors=A,...] (a heterogeneous graph)")
      ->capture_default_str();
  app.add_option("--nodes", p.nodes, "size of the built-in planted graph (with --dataset planted)")
      ->check(sar_programs::non_negative);
  sar_programs::add_dataset_size_options(app, p.sizes);
  std::vector<std::string> tasks = sar_programs::task_names();
  for (const std::string& name : sar_programs::task_names(sar::task_level::graph))
    tasks.push_back(name);
  tasks.push_back("link");
  app.add_option_function<std::string>(
         "--task",
         [&p](const std::string& name) {
           p.link.on = name == "link";
           if (!p.link.on) p.sizes.task = sar::parse_task(name);
         },
         "what to predict: classify (one class per node: an OGB directory's raw/node-label), "
         "regress (rows of floats: raw/node-target), multilabel (rows of 0/1: a multi-column "
         "raw/node-label), link (which node pairs are edges: the options of \"Link "
         "prediction\"), or graph-classify / graph-regress (a class or rows of floats per graph "
         "of a TU dataset: the options of \"Graph-level tasks\"). Default: what a .npy dataset "
         "or partition store declares, else classify")
      ->check(CLI::IsMember(tasks));
  app.add_flag("--raw-targets", p.raw_targets,
               "regress: train on the targets as given; by default each output is standardised "
               "with the training nodes' mean and deviation (RMSE and MAE are reported in the "
               "original units either way)");
  app.add_option("--partitions", p.partitions,
                 "partition store from sar-partition: train on its parts, one per MPI rank "
                 "(run under mpirun -np <parts>); --dataset is then ignored")
      ->check(sar_programs::not_empty);
  sar_programs::add_choice(
      app, "--partition", p.partition, partition_names,
      "train on --dataset over the MPI ranks without a partition store: every rank reads 1/P "
      "of it, the ranks partition it into one part per rank (ptscotch: a small edge cut; "
      "random; contiguous) and move the nodes to their parts, as mpirun sar-partition does");
  app.add_option("--cluster-size", p.cluster_size,
                 "with --partition ptscotch: partition the graph of star clusters of at most "
                 "this many nodes, then move single nodes to lower the cut, as sar-partition "
                 "--cluster-size does (0: the graph itself)")
      ->check(CLI::Range(sar::node_t{0}, sar::node_t{1} << 30));
  app.add_option("--arc-fraction", p.arc_fraction,
                 "with --partition ptscotch: the fraction of the (clustered) graph's arcs of "
                 "weight 1 PT-Scotch partitions, as sar-partition --arc-fraction does")
      ->check(sar_programs::finite_number)
      ->check(CLI::Range(0.001, 1.0));
  app.add_flag("--skip-checksums", p.skip_checksums,
               "with --partitions or --partition: do not verify the CRC-32 of the part's files (faster start; "
               "a corrupt or foreign file then goes unnoticed)");
  sar_programs::add_choice(app, "--normalise-features", p.normalise, sar_programs::switch_names,
                           "row-normalise features: auto (if all are non-negative) | on | off");
  sar_programs::add_choice(app, "--sparse-features", p.sparse_features,
                           sar_programs::switch_names,
                           "train on the features as a sparse matrix (the first layer applies "
                           "its weight as a sparse product): auto (if at most 5% are non-zero "
                           "and the model's first layer can) | on | off; not for minibatches on "
                           "several ranks");
}

/// Adds the options of the group "Model": the model family and its settings.
void add_model_options(CLI::App& app, program_options& p, option_overrides& o) {
  app.option_defaults()->group("Model");
  app.add_option("--model", p.model, sar::family_choices())
      ->check(CLI::IsMember(sar::family_names()))->capture_default_str();
  app.add_option("--rgcn-bases", o.rgcn_bases, "rgcn: share each layer's relation weights "
                 "through this many bases (the R-GCN paper's basis decomposition; 0: none)")
      ->check(sar_programs::non_negative);
  app.add_option("--rgcn-blocks", o.rgcn_blocks, "rgcn: block-diagonal relation weights of this "
                 "many blocks (dividing --hidden and the classes; 0: none)")
      ->check(sar_programs::non_negative);
  app.add_flag("--node-embeddings", o.node_embeddings, "rgcn: every node of a featureless type "
               "learns its own input row (held and updated by the rank that holds the node; "
               "kept in checkpoints and --save-model files); default: one learnt row per "
               "featureless type");
  sar_programs::add_choice(app, "--messages", o.mean_messages,
                           sar_programs::choices<bool>{{"mean", true}, {"sum", false}},
                           "mpnn: a node's messages are averaged (mean) or summed (sum)");
  app.add_flag("--no-edge-state", o.no_edge_state, "mpnn: every step reads the edge features "
               "again instead of carrying an edge state from step to step (what --minibatch "
               "needs for more than one step)");
  app.add_flag("--layer-norm", o.layer_norm, "mpnn: MeshGraphNets' layer norm after the "
               "encoders and every step's MLPs, with two-layer encoder and decoder MLPs");
  app.add_option("--edge-weight", o.edge_weight, "gcn: weigh each edge by this column of the "
                 "dataset's edge features (an added self-loop weighs 1)")
      ->check(sar_programs::non_negative);
  app.add_flag("--edge-attention", o.edge_attention, "gat: the attention logits read the "
               "dataset's edge features (PyG's edge_dim; an added self-loop's are 0)");
  std::vector<std::string> aggregators;
  sar::for_each_sage_aggregator([&]<class A>() { aggregators.emplace_back(A::name); });
  app.add_option("--aggregator", p.aggregator,
                 "GraphSAGE aggregator: " + sar::sage_aggregator_choices())
      ->check(CLI::IsMember(aggregators))->capture_default_str();
  app.add_option("--layers", o.layers, "graph layers (" + family_defaults([](const auto& c) {
                   return c.layers; }) + ")")->check(sar_programs::positive);
  app.add_option("--hidden", o.hidden, "hidden width, per head for GAT (" +
                 family_defaults([](const auto& c) { return c.hidden; }) + ")")
      ->check(sar_programs::positive);
  app.add_option("--heads", o.heads, "GAT heads in hidden layers (default 8)")
      ->check(sar_programs::positive);
  app.add_option("--dropout", o.dropout, "dropout on every layer's input (" +
                 family_defaults([](const auto& c) { return c.dropout; }) + ")")
      ->check(sar_programs::finite_number)->check(CLI::Range(0.0, 0.99));
  app.add_option("--input-dropout", o.input_dropout,
                 "dropout on the features instead of --dropout (default: 0 with --halo-bits, "
                 "--gradient-bits < 32 or --staleness > 1, so the first layer's halo is sent "
                 "once, and for graph-level tasks; else --dropout)")
      ->check(sar_programs::finite_number)->check(CLI::Range(0.0, 0.99));
  app.add_option("--attention-dropout", o.attention_dropout, "GAT attention dropout (default 0.6)")
      ->check(sar_programs::finite_number)->check(CLI::Range(0.0, 0.99));
  app.add_flag("--batch-norm", o.batch_norm, "batch normalisation after every hidden layer");
  sar_programs::add_choice(app, "--precision", p.precision, sar_programs::precision_names,
                           "float | double");
  sar_programs::add_choice(
      app, "--storage", p.storage, sar_programs::storage_names,
      "how dense input features are held: fp32 | bf16 (half the bytes, computed in --precision; "
      "a GCN on one process reads them row by row and keeps no first-layer aggregate, other "
      "runs decode them every forward; minibatches gather them as bf16)");
}

/// Adds the options of the group "Optimisation": epochs, learning rate, decay, early stopping,
/// evaluation, seed, threads.
void add_optimisation_options(CLI::App& app, program_options& p, option_overrides& o) {
  app.option_defaults()->group("Optimisation");
  app.add_option("--epochs", o.epochs,
                 "maximum epochs (" + family_defaults([](const auto& c) { return c.epochs; }) +
                     "; graph-level tasks: 100)")
      ->check(sar_programs::positive);
  app.add_option("--lr", o.learning_rate, "Adam learning rate (" +
                 family_defaults([](const auto& c) { return c.learning_rate; }) + ")")
      ->check(sar_programs::finite_number)->check(sar_programs::non_negative);
  app.add_option("--weight-decay", o.weight_decay,
                 "L2 weight decay (" + family_defaults([](const auto& c) {
                   return sar::message(c.weight_decay,
                                       c.decay_first_layer_only ? " on the first layer" : "");
                 }) + "; graph-level tasks: 0)")
      ->check(sar_programs::finite_number)->check(sar_programs::non_negative);
  app.add_option("--patience", o.patience,
                 "stop after this many epochs without a better validation accuracy or loss; 0 = "
                 "never (" + family_defaults([](const auto& c) { return c.patience; }) + ")")
      ->check(sar_programs::non_negative);
  app.add_option("--eval-every", p.eval_every,
                 "evaluate after every N-th epoch and after the last; 0 = never (accuracies "
                 "not measured); --patience counts evaluations")
      ->check(sar_programs::non_negative)->capture_default_str();
  app.add_option("--max-loss", p.max_loss,
                 "stop with an error when the training loss exceeds this (diverged)")
      ->check(sar_programs::finite_number)->check(sar_programs::positive)->capture_default_str();
  app.add_option("--seed", p.seed, "seed of initialisation and dropout")
      ->check(sar_programs::non_negative)->capture_default_str();  // not wrapped to 2^64 - 5
  app.add_option("--threads", p.threads, "worker threads (0 = all cores)")
      ->check(sar_programs::thread_count)->capture_default_str();
}

/// Adds the options of the group "Minibatch": sampled minibatches.
void add_minibatch_options(CLI::App& app, program_options& p) {
  app.option_defaults()->group("Minibatch");
  app.add_option("--minibatch", p.minibatch,
                 "train on minibatches of this many seeds (--task link: positive edges, "
                 "left out of their own sampled graph) with sampled neighbourhoods (one "
                 "process, or data-parallel over the ranks of --partitions or --partition); "
                 "evaluation runs layer-wise over every node. 0 = full batch")
      ->check(sar_programs::non_negative)->capture_default_str();
  app.add_option("--fanouts", p.fanouts,
                 "with --minibatch: per layer from the input, neighbours sampled per node "
                 "(sage; -1 = all) or nodes per layer (ladies); e.g. 15,10,5 (default: sage "
                 "25,10 for 2 layers, else 10 each; ladies 512 each)")
      ->delimiter(',');
  app.add_option("--relation-fanouts", p.relation_fanouts,
                 "with --minibatch on a heterogeneous graph (sage): fanouts per relation, per "
                 "layer from the input separated by '/', e.g. writes=3,cites=10/writes=2 (a "
                 "relation's name or src___rel___dst; 0: none, -1: all); a relation a layer "
                 "does not name draws that layer's --fanouts over its in-edges");
  sar_programs::add_choice(app, "--sampler", p.sampler, sar_programs::sampler_names,
                           "with --minibatch: sage (node-wise) | ladies (layer-wise, importance "
                           "sampling)");
  app.add_option("--bulk", p.bulk, "with --minibatch: minibatches sampled at once")
      ->check(sar_programs::positive)->capture_default_str();
  app.add_option("--gather-rows", p.gather_rows,
                 "with --minibatch: most input rows fetched at once; the minibatches of a bulk "
                 "fetch the union of their input rows once (0: no bound)")
      ->check(sar_programs::non_negative)->capture_default_str();
  app.add_option("--replication", p.replication,
                 "with --minibatch and --partitions: ranks holding each part (c); P ranks "
                 "train on a store of P / c parts, rank r on part r / c")
      ->check(sar_programs::positive)->capture_default_str();
}

/// Adds the options of the group "Out of core": full-batch training beyond memory.
void add_out_of_core_options(CLI::App& app, program_options& p) {
  app.option_defaults()->group("Out of core");
  sar_programs::add_byte_size_option(
      app, "--memory-budget", p.memory_budget,
      "train full batches within this much memory per process (e.g. 16G): the local nodes "
      "are cut into parts that are trained one at a time, every layer's outputs and "
      "gradients and the features spilled to --spill-dir; the same losses as in memory. "
      "Needs --spill-dir");
  app.add_option("--spill-dir", p.spill_dir,
                 "with --memory-budget: the directory the run's spill directory is made in "
                 "(sar-spill-HOST-PID-TOKEN, removed at the end; what a killed run left there is "
                 "removed by the next)")
      ->check(sar_programs::not_empty);
  app.add_option("--part-rows", p.part_rows,
                 "with --memory-budget: nodes per part instead of the most the budget holds")
      ->check(sar_programs::positive);
  app.add_flag("--map-features", p.map_features,
               "with --minibatch on one process and a .npy dataset: read its features.npy in "
               "place (memory-mapped: the page cache holds what minibatches read) instead of "
               "loading it; float, as stored (--normalise-features auto means off; the file's "
               "CRC-32 is not checked: it is never read whole)");
}

/// Adds the options of the group "Distributed": the schedule, low-bit halos, progress thread,
/// watchdog.
void add_distributed_options(CLI::App& app, program_options& p, option_overrides& o) {
  app.option_defaults()->group("Distributed");
  sar_programs::add_choice(app, "--schedule", p.schedule, sar_programs::schedule_names,
                           "with --partitions: sequential | keep_halo | one_shot");
  app.add_option("--prefetch", p.prefetch, "sequential/keep_halo: remote blocks fetched ahead")
      ->check(sar_programs::non_negative)->capture_default_str();
  app.add_option("--progress-us", o.progress_us,
                 "with --partitions: microseconds between two polls of MPI by the progress "
                 "thread while halo transfers are in flight (0: no thread; transfers then move "
                 "only inside MPI calls) [default: 1000 with --staleness > 1, else 0]")
      ->check(CLI::Range(0, 1000000));
  app.add_option("--pace-kib", o.pace_kib,
                 "with --staleness > 1: stale halo transfers travel in chunks of this many KiB, "
                 "a few in flight per peer, so the epoch's collectives pass them (needs "
                 "--progress-us > 0; 0: unpaced) [default: 64 with --staleness > 1, else 0]")
      ->check(CLI::Range(0, 1 << 20));
  const auto bits = CLI::IsMember({32, 16, 8, 4, 2, 1});
  app.add_option("--halo-bits", p.halo_bits,
                 "with --partitions: bits per halo feature value on the wire: 32 (exact), 16 "
                 "(bf16), 8, 4, 2, 1 (stochastic rounding; Sylvie)")
      ->check(bits)->capture_default_str();
  app.add_option("--gradient-bits", p.gradient_bits,
                 "with --partitions: bits per halo gradient value (as --halo-bits)")
      ->check(bits)->capture_default_str();
  app.add_option("--staleness", p.staleness,
                 "with --partitions: bounded staleness S; epochs not a multiple of S aggregate "
                 "the previous epoch's halos while this epoch's travel (1 = synchronous)")
      ->check(sar_programs::positive)->capture_default_str();
  app.add_option("--watchdog", o.watchdog,
                 "with several ranks: end the job, naming the stalled call and rank, when an "
                 "MPI call waits longer than this many seconds (0.1 to 1e9); 0 = never "
                 "(default: $SAR_WATCHDOG_SECONDS or 300)")
      ->check(sar_programs::finite_number);
}

/// Adds the options of the group "Output": metrics, logs, model files, checkpoints, epoch lines.
void add_output_options(CLI::App& app, program_options& p) {
  app.option_defaults()->group("Output");
  app.add_option("--metrics-out", p.metrics_out, "write a JSON summary to this file")
      ->check(sar_programs::not_empty);
  app.add_option("--log-csv", p.csv_log, "write one CSV row per epoch to this file")
      ->check(sar_programs::not_empty);
  app.add_option("--save-model", p.save_model,
                 "write the trained model (architecture, parameters of the best validation "
                 "epoch, or of the last without evaluations; the task and the target "
                 "standardisation) to this file, for sar-predict or sar::read_model")
      ->check(sar_programs::not_empty);
  app.add_option("--checkpoint", p.checkpoint,
                 "write the run's state (parameters, optimiser, batch norm statistics, epoch, "
                 "early stopping, settings) to this directory every --checkpoint-every epochs "
                 "and at the end; the previous checkpoint stays until the new one is complete")
      ->check(sar_programs::not_empty);
  app.add_option("--checkpoint-every", p.checkpoint_every, "epochs between checkpoints")
      ->check(sar_programs::positive)->capture_default_str();
  app.add_option("--resume", p.resume,
                 "continue the run saved in this checkpoint directory, on any number of ranks, "
                 "up to --epochs; the settings must match the checkpoint's")
      ->check(sar_programs::not_empty);
  app.add_flag("--quiet", p.quiet, "no per-epoch lines");
  app.add_option("--log-every", p.log_every,
                 "an epoch line every N epochs, the first and the last always (default: on a "
                 "terminal one status line updated in place; piped or under mpirun every 10). "
                 "Every epoch is in --log-csv and --metrics-out either way")
      ->check(sar_programs::positive);
}

/// The model's settings and the run's from what the command line gave (`app` parsed, `o` its
/// overrides): the family's paper settings with the options over them, and the checks across
/// options. Throws sar::invalid_argument naming the options.
sar::model_config settle(const CLI::App& app, program_options& p, const option_overrides& o) {
  sar::model_config config = sar::paper_defaults(p.model);
  // A family's own options (rgcn's --rgcn-bases, gcn's --edge-weight ...) only with it.
  sar::for_each_family([&]<class F>() {
    std::string all;
    for (std::string_view option : F::own_options)
      all += sar::message(all.empty() ? "" : ", ", option);
    for (std::string_view option : F::own_options)
      SAR_CHECK(config.family == F::name || app.count(std::string(option)) == 0,
                sar::invalid_argument, "sar-train: ", option,
                F::own_options.size() == 1 ? " is an option" : " is one of the options",
                " of --model ", F::name,
                F::own_options.size() == 1 ? std::string() : sar::message(" (", all, ")"));
  });
  SAR_CHECK(o.rgcn_bases == 0 || o.rgcn_blocks == 0, sar::invalid_argument,
            "sar-train: --rgcn-bases and --rgcn-blocks exclude each other");
  config.rgcn_bases = o.rgcn_bases;
  config.rgcn_blocks = o.rgcn_blocks;
  config.node_embeddings = o.node_embeddings;
  SAR_CHECK(p.relation_fanouts.empty() || p.minibatch > 0, sar::invalid_argument,
            "sar-train: --relation-fanouts is an option of --minibatch");
  config.edge_weight = o.edge_weight;
  config.edge_attention = o.edge_attention;
  config.edge_state = !o.no_edge_state;
  config.mean_messages = o.mean_messages;
  config.layer_norm = o.layer_norm;
  config.aggregation = p.aggregator;  // checked by --aggregator
  if (o.layers) config.layers = *o.layers;
  if (o.hidden) config.hidden = *o.hidden;
  if (o.heads) config.heads = *o.heads;
  if (o.dropout) config.dropout = *o.dropout;
  if (o.attention_dropout) config.attention_dropout = *o.attention_dropout;
  if (o.input_dropout) config.input_dropout = *o.input_dropout;
  if (p.minibatch > 0)
    if (const std::string refusal = sar::minibatch_refusal(config); !refusal.empty())
      throw sar::invalid_argument(
          sar::message("sar-train: --model ", config.family, " ", refusal));
  if (p.low_bit()) {
    // Sylvie's pre-propagation: the first layer aggregates the raw features, which travel
    // once, exactly; only hidden layers' halos are quantised and stale.
    SAR_CHECK(p.distributed(), sar::invalid_argument, "sar-train: --halo-bits, "
              "--gradient-bits and --staleness apply to distributed training (--partitions or "
              "--partition)");
    SAR_CHECK(p.schedule == sar_programs::schedule_kind::sequential, sar::invalid_argument,
              "sar-train: --halo-bits, --gradient-bits and --staleness run on the sequential "
              "schedule, not ", sar_programs::name_of(sar_programs::schedule_names, p.schedule));
    if (!o.input_dropout) config.input_dropout = 0;
    config.aggregate_features_first = true;
  }
  // Stale transfers overlap the next epoch's compute only if something moves them.
  p.progress_us = o.progress_us.value_or(p.staleness > 1 ? 1000 : 0);
  p.pace_kib = o.pace_kib.value_or(p.staleness > 1 && p.progress_us > 0 ? 64 : 0);
  SAR_CHECK(p.pace_kib == 0 || (p.staleness > 1 && p.progress_us > 0),
            sar::invalid_argument, "sar-train: --pace-kib ", p.pace_kib, " paces stale "
            "transfers: it needs --staleness > 1 and --progress-us > 0 (the thread that posts "
            "the chunks)");
  SAR_CHECK(p.replication == 1 || (p.minibatch > 0 && !p.partitions.empty()),
            sar::invalid_argument, "sar-train: --replication applies to minibatch training "
            "on a partition store (--minibatch with --partitions)");
  if (o.learning_rate) config.learning_rate = *o.learning_rate;
  if (o.weight_decay) config.weight_decay = *o.weight_decay;
  if (p.graph_level()) {  // PyG's GIN example: no weight decay, no dropout on the features
    if (!o.weight_decay) config.weight_decay = 0;
    if (!o.input_dropout) config.input_dropout = 0;
    if (!o.epochs) config.epochs = 100;
  }
  if (p.link.on) {  // GAE's settings: node embeddings learn without dropout or weight decay
    if (!o.dropout && !o.input_dropout) config.dropout = 0;
    if (!o.weight_decay) config.weight_decay = 0;
  }
  if (o.epochs) config.epochs = *o.epochs;
  if (o.patience) config.patience = *o.patience;
  else if (p.eval_every == 0) config.patience = 0;  // no evaluations: no early stopping
  config.batch_norm = o.batch_norm;

  // A resumed run continues bit for bit only if it restarts on a synchronous epoch.
  SAR_CHECK(p.checkpoint.empty() || p.checkpoint_every % p.staleness == 0,
            sar::invalid_argument, "sar-train: --checkpoint-every ", p.checkpoint_every,
            " is not a multiple of --staleness ", p.staleness, " (a resumed run must start "
            "on a synchronous epoch)");
  SAR_CHECK(p.partitions.empty() || !p.partition, sar::invalid_argument,
            "sar-train: --partitions (a store) and --partition (partition --dataset in "
            "memory) exclude each other");
  SAR_CHECK(p.partition == sar::distributed_method::ptscotch || !coarsening_of(p).enabled(),
            sar::invalid_argument, "sar-train: --cluster-size and --arc-fraction apply to "
            "--partition ptscotch only");
  SAR_CHECK(!p.partition || p.replication == 1, sar::invalid_argument,
            "sar-train: --replication ", p.replication, " needs a partition store "
            "(--partitions); --partition makes one part per rank");
  SAR_CHECK(p.partitions.empty() || (p.sizes.num_nodes < 0 && p.sizes.num_classes < 0),
            sar::invalid_argument, "sar-train: --num-nodes and --num-classes apply to "
            "--dataset; a partition store (--partitions) has its sizes in meta.json");
  if (p.nodes > 0) {
    SAR_CHECK(p.dataset == "planted" || p.dataset.starts_with("planted:"),
              sar::invalid_argument, "sar-train: --nodes applies only to --dataset planted, "
              "not '", p.dataset, "'");
    p.dataset += (p.dataset == "planted" ? ":" : ",") + std::string("nodes=") +
                 std::to_string(p.nodes);
  }
  if (o.watchdog) {
    sar::mpi_watchdog::check_limit(*o.watchdog, "sar-train: --watchdog");
    p.watchdog_seconds = *o.watchdog;
  } else {
    p.watchdog_seconds = sar::mpi_watchdog::default_limit_seconds();
  }
  p.graphs.folds_given = app.count("--folds") + app.count("--fold") > 0;
  p.graphs.split_given = app.count("--split") > 0;
  if (p.graph_level()) {
    SAR_CHECK(p.graphs.fold < p.graphs.folds, sar::invalid_argument, "sar-train: --fold ",
              p.graphs.fold, " of ", p.graphs.folds, " folds");
    SAR_CHECK(!p.graphs.folds_given || !p.graphs.split_given, sar::invalid_argument,
              "sar-train: --split (a split folder) and --folds / --fold (a k-fold) exclude "
              "each other");
    const char* apart = !p.partitions.empty() || p.partition ? "--partitions and --partition"
                        : p.minibatch > 0                    ? "--minibatch"
                        : !p.checkpoint.empty() || !p.resume.empty() ? "--checkpoint and --resume"
                        : p.low_bit() ? "--halo-bits, --gradient-bits and --staleness"
                                      : nullptr;
    SAR_CHECK(apart == nullptr, sar::invalid_argument, "sar-train: --task ",
              sar::task_name(*p.sizes.task), " does not take ", apart,
              " yet (P ranks train data parallel: each takes a share of every minibatch of "
              "graphs)");
    // Options of node datasets and of the loops graph-level training does not run.
    for (const char* option :
         {"--nodes", "--num-nodes", "--num-classes", "--normalise-features", "--sparse-features",
          "--storage", "--patience", "--eval-every", "--log-csv", "--schedule", "--fanouts",
          "--sampler"})
      SAR_CHECK(app.count(option) == 0, sar::invalid_argument, "sar-train: --task ",
                sar::task_name(*p.sizes.task), " does not take ", option);
  } else {
    for (const char* option : {"--readout", "--batch-graphs", "--folds", "--fold"})
      SAR_CHECK(app.count(option) == 0, sar::invalid_argument, "sar-train: ", option,
                " is an option of --task graph-classify and graph-regress");
  }
  if (p.link.on) {
    SAR_CHECK(sar::names_link_figure(p.link.select_by, p.link.hits_at),
              sar::invalid_argument, "sar-train: --select-by ", p.link.select_by,
              " is none of auc, mrr, or hits@K for a K of --hits-at");
    const char* apart = !p.checkpoint.empty()  ? "--checkpoint"
                        : !p.resume.empty()      ? "--resume"
                        : p.low_bit()            ? "--halo-bits, --gradient-bits and --staleness"
                                                 : nullptr;
    SAR_CHECK(apart == nullptr, sar::invalid_argument, "sar-train: --task link does not take ",
              apart, " yet");
    SAR_CHECK(p.link.split_edges.empty() || !p.distributed(), sar::invalid_argument,
              "sar-train: --split-edges splits on one process; on P ranks write the split with "
              "sar-convert --split-edges and pass the dataset");
  } else {
    for (const char* option : {"--decoder", "--negatives", "--negative-sampler", "--split",
                               "--split-edges", "--hits-at", "--select-by", "--allow-leak"})
      SAR_CHECK(app.count(option) == 0 || (p.graph_level() && option == std::string("--split")),
                sar::invalid_argument, "sar-train: ", option, " is an option of --task link",
                option == std::string("--split") ? " and of the graph-level tasks" : "");
  }
  if (p.memory_budget > 0) {
    SAR_CHECK(!p.spill_dir.empty(), sar::invalid_argument, "sar-train: --memory-budget needs "
              "--spill-dir (where the run keeps what does not fit)");
    const bool bf16 = p.storage != sar_programs::feature_storage::fp32;
    const bool sparse_on = p.sparse_features == sar_programs::switch_setting::on;
    const char* apart = p.minibatch > 0               ? "--minibatch"
                        : p.link.on                   ? "--task link"
                        : p.graph_level()             ? "a graph-level task"
                        : p.low_bit()                 ? "--halo-bits, --gradient-bits, --staleness"
                        : app.count("--schedule") > 0 ? "--schedule"
                        : bf16                        ? "--storage bf16"
                        : sparse_on                   ? "--sparse-features on"
                        : config.batch_norm ? "--batch-norm (its statistics span every node)"
                        : config.node_embeddings      ? "--node-embeddings"
                                                      : nullptr;
    SAR_CHECK(apart == nullptr, sar::invalid_argument, "sar-train: --memory-budget does not "
              "take ", apart);
  } else {
    for (const char* option : {"--spill-dir", "--part-rows"})
      SAR_CHECK(app.count(option) == 0, sar::invalid_argument, "sar-train: ", option,
                " is an option of --memory-budget");
  }
  if (p.map_features) {
    using sar_programs::switch_setting;
    const char* apart =
        p.minibatch == 0                              ? "full batches (it needs --minibatch)"
        : p.distributed()                             ? "--partitions or --partition"
        : p.link.on                                   ? "--task link"
        : p.graph_level()                             ? "a graph-level task"
        : p.precision == sar_programs::precision::twice ? "--precision double (the file is float)"
        : p.storage != sar_programs::feature_storage::fp32 ? "--storage bf16"
        : p.sparse_features == switch_setting::on     ? "--sparse-features on"
        : p.normalise == switch_setting::on ? "--normalise-features on (the file is read as stored)"
                                            : nullptr;
    SAR_CHECK(apart == nullptr, sar::invalid_argument, "sar-train: --map-features does not take ",
              apart);
    p.normalise = switch_setting::off;
    p.sparse_features = switch_setting::off;
  }
  if (const char* failure = std::getenv("SAR_TRAIN_INJECT_FAILURE"))
    p.failure = parse_injected_failure(failure);
  return config;
}

/// Reads and checks every setting of sar-train: the command line into `p` and `config`, and
/// the environment variables SAR_WATCHDOG_SECONDS and SAR_TRAIN_INJECT_FAILURE. Returns
/// nullopt to go on, or the exit status to end with at once: 0 after --help or --version,
/// 1 after printing "sar-train: <problem>" on stderr. Not collective: it runs before MPI
/// starts, and every rank reaches the same verdict.
std::optional<int> parse_settings(int argc, char** argv, program_options& p,
                                  sar::model_config& config) {
  CLI::App app{"sar-train: GNN training (GCN, GraphSAGE, GAT), full-batch or on sampled "
               "minibatches", "sar-train"};
  // An option given twice takes its last value (so wrappers like scripts/main.sh can be
  // overridden by appending arguments).
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  option_overrides o;
  add_data_options(app, p);
  add_link_options(app, p);
  add_graph_options(app, p);
  add_model_options(app, p, o);
  add_optimisation_options(app, p, o);
  add_minibatch_options(app, p);
  add_out_of_core_options(app, p);
  add_distributed_options(app, p, o);
  add_output_options(app, p);
  app.set_version_flag("--version", "sar-train (sar " SAR_VERSION_STRING ")");
  if (const auto status = sar_programs::parse_command_line(app, argc, argv)) return *status;

  try {
    config = settle(app, p, o);
  } catch (const sar::error& e) {
    std::fprintf(stderr, "%s\n", sar::describe_failure("sar-train", e).c_str());
    return 1;
  }
  return std::nullopt;
}

/// The run after parse_settings, on every rank: loads or reads the data, trains, reports.
/// Collective; throws what the run throws.
int run_program(const program_options& p, const sar::model_config& config,
                sar::mpi_communicator& comm) {
  if (comm.rank() != 0) sar::set_log_level(sar::log_level::warning);
  try {
    if (!p.checkpoint.empty() && comm.rank() == 0)  // before any work, not after it
      sar::check_replaceable(p.checkpoint, sar::checkpoint_kind, "sar-train: --checkpoint");
    std::optional<sar::output_file> metrics_out;  // checked now, written at the end
    if (!p.metrics_out.empty() && comm.rank() == 0)
      metrics_out.emplace(p.metrics_out, "sar-train: --metrics-out");
    if (!p.save_model.empty() && comm.rank() == 0)  // checked now, written after training
      sar::output_file(p.save_model, "sar-train: --save-model");

    tbb::task_arena arena(p.threads > 0 ? p.threads : tbb::task_arena::automatic);
    nlohmann::json metrics;
    arena.execute([&] {
      metrics = p.precision == sar_programs::precision::twice ? run<double>(p, config, comm)
                                                              : run<float>(p, config, comm);
    });
    if (comm.rank() == 0) {
      char line[200];
      std::snprintf(line, sizeof line, "median epoch %.4fs; peak memory per rank %.1f MiB",
                    metrics["epoch_seconds_median"].get<double>(),
                    metrics["peak_memory_bytes"].get<double>() / 1048576.0);
      char best[100] = "not evaluated";
      const bool links = p.link.on;
      const std::string score =
          links ? p.link.select_by
                : sar::score_name(sar::parse_task(metrics["task"].get<std::string>()));
      if (!metrics["best_epoch"].is_null())
        std::snprintf(best, sizeof best, "best epoch %d: val %s %.4f test %.4f",
                      metrics["best_epoch"].get<int>(), score.c_str(),
                      metrics[(links ? "valid_" : "best_val_") + score].get<double>(),
                      metrics["test_" + score].get<double>());
      sar::log_info(sar::message(best, "; ", line));
      sar_programs::current_phase() = "writing --metrics-out";
      if (metrics_out) metrics_out->write(metrics.dump(2) + "\n");
    }
  } catch (const std::bad_alloc&) {
    throw sar::error(sar_programs::out_of_memory_message());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  program_options p;
  sar::model_config config;
  if (const auto status = parse_settings(argc, argv, p, config)) return *status;
  return sar_programs::run_under_mpi(
      "sar-train", argc, argv,
      [&](sar::mpi_communicator& comm) { return run_program(p, config, comm); },
      p.watchdog_seconds);
}
