// sar-predict: load a model that sar-train saved (--save-model) and write its predictions for
// every node of a dataset, on one process or on the P ranks of a partition store, without the
// training loop.
//
//   sar-train --dataset ../shared/data/chameleon --task regress --save-model chameleon.sarmodel
//   sar-predict --model chameleon.sarmodel --dataset ../shared/data/chameleon --out predicted
//   mpirun -np 4 sar-predict --model m.sarmodel --partitions store.4 --out predicted
//
// The output directory (format "sar-predictions"): predictions.npy, float32 (n, K), row i =
// node i of the dataset (its id before partitioning): a regression's predictions in the
// targets' original units, the logits of a classification or multi-label model; classes.npy,
// int32 (n,), the predicted class (classification only); meta.json. A link-prediction model
// (sar-train --task link) writes instead embeddings.npy, float32 (n, K), the encoder's output
// per node (--embeddings), and scores.npy, float32 (m,), its decoder's score (a logit) of each
// pair of --pairs FILE.npy (int64 (m, 2) dataset ids). Rank 0 gathers the rows (n x K values)
// to write them. A mesh surrogate (sar-surrogate train --save-model) is rolled out instead on
// one trajectory of a trajectory dataset (--dataset DIR --trajectory test/traj_0000, one
// process): from its first state on its own outputs, nodes it does not predict held to the
// trajectory's values; the output directory (format "sar-rollout") holds NAME.npy, float32
// (T, N, width), per dynamic field (step 0 the trajectory's) and meta.json with the RMSE of
// every step over the predicted nodes and persistence's. A graph-level model (sar-train --task
// graph-classify | graph-regress --save-model) predicts every graph of a TU dataset
// (--dataset DIR, one process): predictions.npy (G, K) and, for classification, classes.npy
// (G,) and labels.npy, int64 (G,), the predicted class as the dataset's own label (its
// DS_graph_labels.txt values); row g = graph g (g + 1 in the TU files). The features are prepared as for
// training (row-normalised if the model's were) and must have the model's width, else the
// error names both widths.
#include <algorithm>
#include <cstdio>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <tbb/task_arena.h>

#include "mpi_program_support.hpp"
#include "sar/comm/mpi.hpp"
#include "sar/io/safe_directory.hpp"
#include "sar/distributed/distributed_schedule.hpp"
#include "sar/graph/heterogeneous.hpp"
#include "sar/graph/io/link_split.hpp"
#include "sar/io/npy_file.hpp"
#include "sar/partition/store.hpp"
#include "sar/schedule/local_schedule.hpp"
#include "sar/graph/io/trajectories.hpp"
#include "sar/graph/io/tu.hpp"
#include "sar/train/graph_level.hpp"
#include "sar/train/mesh_surrogate.hpp"
#include "sar/train/model_file.hpp"
#include "sar/version.hpp"
#include "sar_train/shared_runs.hpp"

namespace {

/// A predictions directory as sar::replace_directory recognises it.
constexpr sar::directory_kind predictions_kind{"sar-predictions", "meta.json"};
/// A rollout's output directory as sar::replace_directory recognises it.
constexpr sar::directory_kind rollout_kind{"sar-rollout", "meta.json"};

struct settings {
  std::string model, dataset, partitions, out;
  bool embeddings = false;  // a link model: write the embeddings
  std::string pairs;        // a link model: score these pairs
  std::string trajectory;   // a mesh surrogate: roll it out on this trajectory of --dataset
  sar::dataset_sizes sizes;
  bool skip_checksums = false;
  int threads = 0;
};

std::optional<int> parse_settings(int argc, char** argv, settings& s) {
  CLI::App app{"Predict with a model saved by sar-train --save-model: one row of outputs per "
               "node of a dataset (one process) or of a partition store (mpirun -np <parts>)",
               "sar-predict"};
  app.add_option("--model", s.model, "model file written by sar-train --save-model")
      ->required()
      ->check(sar_programs::not_empty);
  auto* dataset = app.add_option("--dataset", s.dataset,
                                 "OGB raw directory, sar .npy dataset directory, edge list or "
                                 ".mtx file (with features), or a generator spec; a TU "
                                 "dataset directory for a graph-level model");
  auto* partitions = app.add_option("--partitions", s.partitions,
                                    "partition store from sar-partition: predict on its parts, "
                                    "one per MPI rank (mpirun -np <parts>)");
  dataset->excludes(partitions);
  sar_programs::add_dataset_size_options(app, s.sizes);
  sar_programs::add_task_option(app, s.sizes);
  app.add_option("--out", s.out,
                 "output directory (created; an earlier sar-predict output there is replaced "
                 "once the new one is complete, any other non-empty directory is refused)")
      ->required()
      ->check(sar_programs::not_empty);
  app.add_flag("--embeddings", s.embeddings,
               "a link-prediction model: write embeddings.npy, every node's embedding");
  app.add_option("--pairs", s.pairs,
                 "a link-prediction model: write scores.npy, the decoder's score (a logit) of "
                 "each pair of this int64 (m, 2) .npy file of dataset node ids")
      ->check(sar_programs::not_empty);
  auto* trajectory = app.add_option("--trajectory", s.trajectory,
                 "a mesh surrogate (sar-surrogate train --save-model): roll it out on this "
                 "trajectory (SPLIT/FOLDER, e.g. test/traj_0000) of the trajectory dataset "
                 "--dataset and write the predicted fields")
      ->check(sar_programs::not_empty);
  trajectory->excludes(partitions);
  app.add_flag("--skip-checksums", s.skip_checksums,
               "with --partitions: do not verify the CRC-32 of the part's files");
  app.add_option("--threads", s.threads, "worker threads (0: all cores)")
      ->check(sar_programs::thread_count);
  app.set_version_flag("--version", "sar-predict (sar " SAR_VERSION_STRING ")");
  if (const auto status = sar_programs::parse_command_line(app, argc, argv)) return status;
  if (s.dataset.empty() == s.partitions.empty()) {
    std::fprintf(stderr, "sar-predict: give --dataset or --partitions\n"
                         "Run sar-predict --help for the options.\n");
    return 1;
  }
  return std::nullopt;
}

/// Throws sar::invalid_argument unless `features` fit the model (its input width, finite).
void check_features(const sar::matrixf& features, const sar::model_description& d,
                    const std::string& source) {
  SAR_CHECK(features.cols() == d.input_dim, sar::invalid_argument, "sar-predict: the model takes ",
            d.input_dim, " features per node, but ", source, " has ", features.cols());
  sar_programs::check_finite_features(features, "sar-predict: " + source);
}

/// Puts `graph` and its edge features in the form the model of `d` reads them
/// (sar::prepare_model_graph). Throws sar::invalid_argument naming `source` if the model reads
/// edge features (mpnn, an edge-weighted gcn) and they are not as wide as it was trained on.
void prepare_graph(const sar::model_description& d, sar::csr& graph, sar::matrixf& edge_features,
                   sar::node_t first_column, const std::string& source) {
  SAR_CHECK(!sar::reads_edge_features(d.config) || edge_features.cols() == d.config.edge_dim,
            sar::invalid_argument, "sar-predict: the model reads ", d.config.edge_dim,
            " features per edge, but ", source, " has ", edge_features.cols());
  sar::prepare_model_graph(d.config, graph, edge_features, first_column);
}

/// Puts the data's types in the form the model of `saved` reads them: an rgcn takes the
/// data's schema (its node counts may differ from the training graph's; its types, feature
/// widths and relations must be the ones the model was trained on), the other models see a
/// heterogeneous graph with its types erased. Throws sar::invalid_argument naming `source`
/// for an rgcn and a homogeneous graph or another schema.
void prepare_types(sar::saved_model& saved, sar::csr& graph, sar::graph_schema& schema,
                   std::vector<std::int32_t>& edge_types, sar::matrixf& edge_features,
                   const std::string& source) {
  sar::model_config& c = saved.description.config;
  if (!sar::reads_graph_types(c)) {
    sar::erase_types(graph, schema, edge_types, edge_features);
    return;
  }
  sar::graph_schema counted = c.schema;  // the model's types with the data's counts
  for (std::size_t t = 0; t < counted.node_types.size() && t < schema.node_types.size(); ++t)
    counted.node_types[t].count = schema.node_types[t].count;
  SAR_CHECK(counted == schema, sar::invalid_argument, "sar-predict: the model was trained on ",
            c.schema.num_node_types(), " node types and ", c.schema.num_relations(),
            " relations (", sar::schema_to_json(c.schema).dump(), "), but ", source, " has ",
            schema.heterogeneous() ? sar::schema_to_json(schema).dump() : "one node type");
  c.schema = schema;
}

/// Throws sar::invalid_argument if the dataset `source` has labels or targets (`outputs` of
/// them, of `task`) that a model of `d` does not predict: another task or width.
void check_outputs(sar::task_kind task, Eigen::Index outputs, const sar::model_description& d,
                   const std::string& source) {
  // Nothing to compare: a dataset without labels or targets, or a model of embeddings.
  if (outputs == 0 || !d.decoder.empty()) return;
  SAR_CHECK(task == d.task && outputs == d.output_dim, sar::invalid_argument,
            "sar-predict: the model predicts ", d.output_dim, " outputs of a ",
            sar::task_name(d.task), " task, but ", source, " holds ", outputs, " of a ",
            sar::task_name(task), " task");
}

/// Throws sar::invalid_argument unless --embeddings and --pairs are given for a link model
/// (at least one of them) and only for one.
void check_link_options(const settings& s, const sar::model_description& d) {
  if (d.decoder.empty())
    SAR_CHECK(!s.embeddings && s.pairs.empty(), sar::invalid_argument, "sar-predict: ",
              s.embeddings ? "--embeddings" : "--pairs", " applies to a link-prediction model; ",
              s.model, " predicts a ", sar::task_name(d.task), " task");
  else
    SAR_CHECK(s.embeddings || !s.pairs.empty(), sar::invalid_argument, "sar-predict: ", s.model,
              " is a link-prediction model (decoder ", d.decoder, "): ask for --embeddings, "
              "--pairs FILE.npy or both");
}

template <class Schedule>
sar::matrixf predict(const sar::saved_model& saved, Schedule& graph, const sar::matrixf& features) {
  return saved.scalar == sar::npy_dtype::float64
             ? sar_train::predict_saved<double>(saved, graph, features)
             : sar_train::predict_saved<float>(saved, graph, features);
}

/// Rank 0 collects every rank's rows (`ids`: their dataset ids) into dataset order and writes
/// the output directory; every rank returns or throws alike. `items`: what a row predicts
/// ("nodes", or "graphs" for a graph-level model). Collective.
void write_predictions(sar::mpi_communicator& comm, const settings& s,
                       const sar::saved_model& saved, const sar::matrixf& rows,
                       const std::vector<sar::node_t>& ids, sar::node_t num_nodes,
                       const std::string& items = "nodes") {
  const Eigen::Index k = saved.description.output_dim;
  std::vector<std::vector<double>> outgoing(static_cast<std::size_t>(comm.size()));
  auto& to_root = outgoing.front();  // [id, K values] per row
  for (std::size_t r = 0; r < ids.size(); ++r) {
    to_root.push_back(static_cast<double>(ids[r]));
    for (Eigen::Index c = 0; c < k; ++c) to_root.push_back(rows(static_cast<Eigen::Index>(r), c));
  }
  const auto received = sar::all_to_all_vectors(comm, outgoing);
  std::exception_ptr failure;
  if (comm.rank() == 0)
    sar::detail::guarded(failure, [&] {
      sar::matrixf all(num_nodes, k);
      std::vector<bool> seen(static_cast<std::size_t>(num_nodes), false);
      for (const auto& from : received)
        for (std::size_t at = 0; at < from.size(); at += static_cast<std::size_t>(k) + 1) {
          const auto id = static_cast<sar::node_t>(from[at]);
          SAR_CHECK(id >= 0 && id < num_nodes && !seen[static_cast<std::size_t>(id)], sar::error,
                    "sar-predict: internal: node ", id, " twice or outside [0, ", num_nodes, ")");
          seen[static_cast<std::size_t>(id)] = true;
          for (Eigen::Index c = 0; c < k; ++c) all(id, c) = static_cast<float>(from[at + 1 + c]);
        }
      const bool links = !saved.description.decoder.empty();
      const bool classify = !links && sar::has_class_ids(saved.description.task);
      std::vector<float> scores;
      if (!s.pairs.empty()) {
        // A model that erased the graph's types scores every pair as of relation 0.
        const int relations = sar::link_relations(saved.description.config);
        sar::node_pairs pairs = sar::read_node_pairs(
            s.pairs, num_nodes, relations > 1 ? relations : std::numeric_limits<int>::max());
        if (relations == 1) pairs.relation = {};
        scores = sar::score_saved_pairs<float>(saved, all, pairs);
      }
      std::vector<std::int32_t> classes;
      if (classify)
        for (sar::node_t i = 0; i < num_nodes; ++i) {
          Eigen::Index best = 0;
          all.row(i).maxCoeff(&best);
          classes.push_back(static_cast<std::int32_t>(best));
        }
      // A graph classifier of a TU dataset: the dataset's own label of each class.
      std::vector<std::int64_t> labels;
      if (classify && saved.description.about.contains("class_labels")) {
        const nlohmann::json& of = saved.description.about["class_labels"];
        SAR_CHECK(of.is_array() && of.size() == static_cast<std::size_t>(k) &&
                      std::all_of(of.begin(), of.end(),
                                  [](const nlohmann::json& v) { return v.is_number_integer(); }),
                  sar::invalid_argument, "sar-predict: ", s.model, ": about.class_labels is ",
                  of.dump(), ", not ", k, " integers (one per class)");
        for (const std::int32_t c : classes) labels.push_back(of[c].get<std::int64_t>());
      }
      sar::replace_directory(s.out, predictions_kind, [&](sar::directory_writer& out) {
        const std::int64_t shape[] = {num_nodes, k};
        if (!links || s.embeddings)
          out.add_file(links ? "embeddings.npy" : "predictions.npy",
                       [&](const std::filesystem::path& file) {
                         return sar::write_npy(file, sar::npy_dtype::float32, shape, all.data());
                       });
        if (!s.pairs.empty())
          out.add_file("scores.npy", [&](const std::filesystem::path& file) {
            const std::int64_t count[] = {static_cast<std::int64_t>(scores.size())};
            return sar::write_npy(file, sar::npy_dtype::float32, count, scores.data());
          });
        if (classify)
          out.add_file("classes.npy", [&](const std::filesystem::path& file) {
            return sar::write_npy(file, sar::npy_dtype::int32,
                                  std::span<const std::int64_t>(shape, 1), classes.data());
          });
        if (!labels.empty())
          out.add_file("labels.npy", [&](const std::filesystem::path& file) {
            return sar::write_npy(file, sar::npy_dtype::int64,
                                  std::span<const std::int64_t>(shape, 1), labels.data());
          });
        out.write_metadata(nlohmann::json{
            {"format", predictions_kind.format}, {"model", s.model},
            {"model_crc32", saved.identity},
            {"task", links ? std::string("link") : sar::task_name(saved.description.task)},
            {"decoder", saved.description.decoder}, {"pairs", s.pairs},
            {"num_pairs", scores.size()}, {"num_" + items, num_nodes}, {"num_outputs", k},
            {"source", s.dataset.empty() ? s.partitions : s.dataset}});
      }, "sar-predict");
      std::string wrote = links ? "" : sar::message("predictions of ", num_nodes, " ", items,
                                                    " x ", k, " outputs");
      if (links && s.embeddings) wrote = sar::message("embeddings of ", num_nodes, " nodes x ", k);
      if (!s.pairs.empty())
        wrote += sar::message(wrote.empty() ? "" : ", ", "scores of ", scores.size(), " pairs");
      std::printf("wrote %s: %s\n", s.out.c_str(), wrote.c_str());
    });
  sar::detail::agree_on_failure(comm, failure, "sar-predict");
}

/// Rolls the mesh surrogate s.model out on the trajectory s.trajectory of the trajectory
/// dataset s.dataset and writes it to s.out (see the top of this file). One process. Throws
/// sar::invalid_argument for several ranks or a dataset of other fields, sar::io_error naming a
/// file.
int roll_out(const settings& r, sar::mpi_communicator& comm) {
  SAR_CHECK(comm.size() == 1, sar::invalid_argument, "sar-predict --trajectory: runs on one "
            "process (", comm.size(), " ranks)");
  sar::check_replaceable(r.out, rollout_kind, "sar-predict: --out");
  sar::mesh_surrogate<float> s = sar::load_surrogate<float>(r.model);
  const sar::trajectory_fields f = sar::read_trajectory_fields(r.dataset);
  SAR_CHECK(f.dynamic == s.fields.dynamic && f.dynamic_widths == s.fields.dynamic_widths &&
                f.static_inputs == s.fields.static_inputs &&
                f.static_widths == s.fields.static_widths && f.dimensions == s.fields.dimensions,
            sar::invalid_argument, "sar-predict: the dataset ", r.dataset,
            " has other fields than the model ", r.model, " was trained on (",
            nlohmann::json(f.dynamic).dump(), " vs ", nlohmann::json(s.fields.dynamic).dump(),
            ", static ", nlohmann::json(f.static_inputs).dump(), " vs ",
            nlohmann::json(s.fields.static_inputs).dump(), ", ", f.dimensions, " vs ",
            s.fields.dimensions, " dimensions)");
  const sar::trajectory traj = sar::read_trajectory(r.dataset, f, r.trajectory);
  const sar::trajectory* list[] = {&traj};
  const std::vector<sar::matrixf> states =
      sar::rollout_surrogate(s, list, [](int, std::size_t, const sar::matrixf&) {}).front();
  const sar::rollout_errors errors = sar::rollout_errors_of(traj, states);
  sar::replace_directory(r.out, rollout_kind, [&](sar::directory_writer& out) {
    sar::write_dynamic_fields(out, f, states);
    out.write_metadata(nlohmann::json{{"format", rollout_kind.format},
                                      {"model", r.model},
                                      {"dataset", r.dataset},
                                      {"trajectory", r.trajectory},
                                      {"fields", f.dynamic},
                                      {"steps", states.size()},
                                      {"num_nodes", traj.num_nodes()},
                                      {"rmse", errors.model},
                                      {"persistence_rmse", errors.persistence}});
  }, "sar-predict");
  std::printf("wrote %s: a rollout of %s, %zu steps x %lld nodes; RMSE at the last step %g "
              "(persistence %g)\n",
              r.out.c_str(), r.trajectory.c_str(), states.size(),
              static_cast<long long>(traj.num_nodes()), errors.model.back(),
              errors.persistence.back());
  return 0;
}

/// Predicts with the graph-level model `saved` every graph of the TU dataset s.dataset and
/// writes s.out (see the top of this file). One process. Throws sar::invalid_argument for
/// several ranks, a dataset that is not a TU directory, or node or edge features, outputs of
/// another width than the model's.
void predict_graph_level(const settings& s, const sar::saved_model& saved,
                         sar::mpi_communicator& comm) {
  const sar::model_description& d = saved.description;
  const std::string source = "--dataset " + s.dataset;
  SAR_CHECK(comm.size() == 1 && s.partitions.empty(), sar::invalid_argument, "sar-predict: ",
            s.model, " is a ", sar::task_name(d.task), " model: it predicts on one process "
            "from a TU dataset (--dataset DIR)");
  SAR_CHECK(sar::is_tu_dataset(s.dataset), sar::invalid_argument, "sar-predict: ", s.model,
            " is a ", sar::task_name(d.task), " model: --dataset must be a TU dataset directory "
            "DS holding DS_A.txt (and DS_graph_indicator.txt, ...); '", s.dataset,
            "' is not one");
  sar::graph_collection c = sar::read_tu_dataset(s.dataset, d.task);
  check_features(c.features, d, source);
  check_outputs(c.task, c.num_outputs(), d, source);
  SAR_CHECK(!sar::reads_edge_features(d.config) || c.edge_features.cols() == d.config.edge_dim,
            sar::invalid_argument, "sar-predict: the model reads ", d.config.edge_dim,
            " features per edge, but ", source, " has ", c.edge_features.cols());
  sar::prepare_graph_collection(c, d.config);
  std::vector<std::int64_t> graphs(static_cast<std::size_t>(c.num_graphs()));
  std::iota(graphs.begin(), graphs.end(), std::int64_t{0});
  sar::matrixf rows;
  if (saved.scalar == sar::npy_dtype::float64) {
    auto model = sar::load_graph_model<double>(saved);
    rows = sar::predict_graphs(model, c, graphs).cast<float>();
  } else {
    auto model = sar::load_graph_model<float>(saved);
    rows = sar::predict_graphs(model, c, graphs);
  }
  sar::to_original_units(rows, d.targets);
  const std::vector<sar::node_t> ids(graphs.begin(), graphs.end());
  write_predictions(comm, s, saved, rows, ids, c.num_graphs(), "graphs");
}

int run(const settings& s, sar::mpi_communicator& comm) {
  if (!s.trajectory.empty()) return roll_out(s, comm);
  {
    std::exception_ptr failure;  // rank 0 checks the output before any work
    if (comm.rank() == 0)
      sar::detail::guarded(failure, [&] {
        sar::check_replaceable(s.out, predictions_kind, "--out");
      });
    sar::detail::agree_on_failure(comm, failure, "sar-predict");
  }
  sar::saved_model saved = sar::read_model(s.model);
  const sar::model_description& d = saved.description;
  SAR_CHECK(!d.about.contains("surrogate"), sar::invalid_argument, "sar-predict: ", s.model,
            " is a mesh surrogate's model: roll it out with --trajectory SPLIT/FOLDER of a "
            "trajectory dataset (--dataset)");
  check_link_options(s, d);
  if (!d.readout.empty()) {
    predict_graph_level(s, saved, comm);
    return 0;
  }
  if (s.partitions.empty()) {
    SAR_CHECK(comm.size() == 1, sar::invalid_argument, "sar-predict: ", comm.size(),
              " ranks but no --partitions; on several ranks predict on a partition store");
    sar::graph_dataset data = sar_programs::load_dataset_reporting(s.dataset, s.sizes);
    check_features(data.features, d, "--dataset " + s.dataset);
    check_outputs(data.task, data.num_outputs(), d, "--dataset " + s.dataset);
    if (d.row_normalise_features) sar_programs::row_normalise(data.features);
    const sar::node_t n = data.num_nodes();
    prepare_types(saved, data.graph, data.schema, data.edge_types, data.edge_features,
                  "--dataset " + s.dataset);
    prepare_graph(d, data.graph, data.edge_features, 0, "--dataset " + s.dataset);
    sar::local_schedule graph(std::move(data.graph), std::move(data.edge_features),
                              std::move(data.edge_types));
    const sar::matrixf rows = predict(saved, graph, data.features);
    std::vector<sar::node_t> ids(static_cast<std::size_t>(n));
    for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<sar::node_t>(i);
    write_predictions(comm, s, saved, rows, ids, n);
    return 0;
  }
  const sar::partition_metadata meta = sar::read_partition_metadata(s.partitions);
  SAR_CHECK(meta.num_parts == comm.size(), sar::invalid_argument, "sar-predict: the partition "
            "store ", s.partitions, " has ", meta.num_parts, " parts but this run has ",
            comm.size(), " ranks (run it with mpirun -np ", meta.num_parts, ")");
  sar::graph_part part = sar::read_partition_part(s.partitions, comm.rank(),
                                                  {.verify_checksums = !s.skip_checksums});
  check_features(part.features, d, "--partitions " + s.partitions);
  check_outputs(part.task, part.num_outputs(), d, "--partitions " + s.partitions);
  if (d.row_normalise_features) sar_programs::row_normalise(part.features);
  prepare_types(saved, part.in_edges, part.schema, part.edge_types, part.edge_features,
                "--partitions " + s.partitions);
  prepare_graph(d, part.in_edges, part.edge_features, part.first_global(),
                "--partitions " + s.partitions);
  sar::distributed_schedule<sar::mpi_communicator> graph(comm, part);
  part.in_edges = {};  // the schedule holds its shard (and its copy of the edge table) now
  part.edge_features = {};
  part.edge_types = {};
  const sar::matrixf rows = predict(saved, graph, part.features);
  write_predictions(comm, s, saved, rows, part.original_ids, meta.num_nodes);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  settings s;
  if (const auto status = parse_settings(argc, argv, s)) return *status;
  return sar_programs::run_under_mpi("sar-predict", argc, argv,
                                     [&](sar::mpi_communicator& comm) {
                                       tbb::task_arena arena(s.threads > 0
                                                                 ? s.threads
                                                                 : tbb::task_arena::automatic);
                                       return arena.execute([&] { return run(s, comm); });
                                     });
}
