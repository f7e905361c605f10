// sar-train's training runs (declared in sar_train.hpp): the model, the loop, the progress
// lines and the metrics, for one precision and one schedule per instantiation. Heavy (every
// layer, the distributed schedule): included only by the instance files single_float.cpp,
// single_double.cpp, distributed_float.cpp and distributed_double.cpp.
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <numeric>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include "sar/core/log.hpp"
#include "sar/distributed/distributed_schedule.hpp"
#include "sar/sampling/distributed_sampling_graph.hpp"
#include "sar/schedule/local_schedule.hpp"
#include "sar/io/mapped_npy.hpp"
#include "sar/io/spilled_rows.hpp"
#include "sar/train/capacity.hpp"
#include "sar/train/checkpoint.hpp"
#include "sar/train/full_batch.hpp"
#include "sar/train/minibatch.hpp"
#include "sar/train/model_file.hpp"
#include "sar/train/models.hpp"
#include "sar/train/out_of_core.hpp"
#include "sar/version.hpp"
#include "../progress.hpp"
#include "sar_train.hpp"
#include "shared_runs.hpp"

namespace sar_train {

using sar_programs::name_of;

/// The local nodes' data (a whole dataset on one process, or one rank's part).
struct local_data {
  std::string name;
  sar::node_t num_nodes = 0;  // in the whole dataset
  sar::matrixf features;
  std::vector<std::int32_t> labels;
  std::vector<sar::node_split> split;
  std::int32_t num_classes = 0;
  sar::task_kind task = sar::task_kind::classify;
  sar::matrixf targets;  // regress, multilabel: local nodes x outputs
  sar::sparse_rows<float> sparse_features;  // instead of features, as a dataset read them
  // Out of core: the local rows where a partition store's parts begin after the first (a rank
  // that holds several parts visits them one by one).
  std::vector<sar::node_t> part_breaks;
  // --map-features: the features read in place (then `features` is 0 x their width).
  std::optional<sar::mapped_npy_matrix> mapped_features;

  /// The local data of a graph_dataset or graph_part (moved from it).
  template <class Source>
  static local_data from(Source& source, std::string name, sar::node_t num_nodes) {
    local_data d{std::move(name), num_nodes, std::move(source.features), std::move(source.labels),
                 std::move(source.split), source.num_classes, source.task,
                 std::move(source.targets), {}, {}, {}};
    if constexpr (requires { source.sparse_features; })
      d.sparse_features = std::move(source.sparse_features);
    return d;
  }
  /// The width of the model's output: classes or targets.
  Eigen::Index num_outputs() const {
    return sar::has_class_ids(task) ? num_classes : targets.cols();
  }
};

/// Carries out the test hook `failure` (sar_train.hpp) if this is its epoch and rank.
inline void inject_failure(const injected_failure& failure, int epoch,
                           sar::mpi_communicator& comm) {
  using how = injected_failure::kind;
  if (failure.how == how::none || epoch != failure.epoch || comm.rank() != failure.rank) return;
  switch (failure.how) {
    case how::error:
      throw sar::error(sar::message("injected failure on rank ", comm.rank(), " at epoch ",
                                    epoch, " (SAR_TRAIN_INJECT_FAILURE)"));
    case how::stop:
      std::raise(SIGSTOP);
      return;
    case how::wait: {  // a receive no rank sends to: a deadlock inside MPI
      static std::int64_t never[1];
      auto r = comm.irecv(std::span<std::int64_t>(never), (comm.rank() + 1) % comm.size(),
                          /*tag=*/0x5a7);
      comm.wait(r);
      return;
    }
    case how::hang:
      for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
    case how::none:
      return;
  }
}

/// Throws sar::invalid_argument naming --layers, --hidden (and --heads for GAT) if training
/// the model of `c` for `features` inputs and `outputs` outputs on `nodes` nodes (this
/// rank's) needs more memory than is available (sar::estimate_model_memory in values of T;
/// minibatches: activations of one layer at a time), before any of it is allocated.
template <class T>
void check_model_fits(const program_options& p, const sar::model_config& c,
                      Eigen::Index features, Eigen::Index outputs, sar::node_t nodes) {
  const auto need =
      sar::estimate_model_memory(c, static_cast<double>(features), outputs,
                                 static_cast<double>(nodes), sizeof(T), p.sampled_graph());
  sar::check_memory<sar::invalid_argument>(
      "sar-train",
      sar::message("the ", p.model, " model of --layers ", c.layers, " with ",
                   sar::model_widths(c),
                   " for ", features, " features and ", outputs, " outputs, trained on ",
                   nodes, " nodes (parameters, gradients and Adam moments ",
                   sar::format_bytes(need.parameters), ", activations at least ",
                   sar::format_bytes(need.activations), ")"),
      need.total());
}

/// `spec` (--relation-fanouts: per layer from the input, separated by '/', relation=count
/// pairs separated by ',') as a fanout per relation of `schema` per layer: a relation a layer
/// does not name draws that layer's fanout (fanouts). Throws sar::invalid_argument naming
/// what is wrong: no heterogeneous graph, a layer count other than fanouts', an unknown
/// relation, a relation named twice in a layer or a pair that is not relation=count.
inline std::vector<std::vector<sar::node_t>> relation_fanouts_of(
    const std::string& spec, const sar::graph_schema& schema,
    const std::vector<sar::node_t>& fanouts) {
  constexpr const char* where = "sar-train: --relation-fanouts";
  if (spec.empty()) return {};
  SAR_CHECK(schema.heterogeneous(), sar::invalid_argument, where, " needs a graph with "
            "relations (a heterogeneous dataset or store)");
  std::vector<std::string> layers{""};
  for (const char c : spec) {
    if (c == '/') layers.emplace_back();
    else layers.back() += c;
  }
  SAR_CHECK(layers.size() == fanouts.size(), sar::invalid_argument, where, " '", spec, "' gives ",
            layers.size(), " layers, the model has ", fanouts.size(), " (separate layers by /)");
  std::vector<std::vector<sar::node_t>> out;
  for (std::size_t l = 0; l < layers.size(); ++l) {
    out.emplace_back(static_cast<std::size_t>(schema.num_relations()), fanouts[l]);
    std::vector<bool> named(static_cast<std::size_t>(schema.num_relations()), false);
    std::istringstream pairs(layers[l]);
    for (std::string pair; std::getline(pairs, pair, ',');) {
      const auto equals = pair.find('=');
      const std::string name = pair.substr(0, equals);
      const std::int32_t r = schema.find_relation(name);
      SAR_CHECK(r >= 0, sar::invalid_argument, where, ": layer ", l, " names relation '", name,
                "', which the graph does not have (", schema.num_relations(), " relations)");
      SAR_CHECK(!named[static_cast<std::size_t>(r)], sar::invalid_argument, where, ": layer ", l,
                " names relation '", name, "' twice ('", layers[l], "')");
      named[static_cast<std::size_t>(r)] = true;
      char* end = nullptr;
      const std::string count = equals == std::string::npos ? "" : pair.substr(equals + 1);
      const long value = std::strtol(count.c_str(), &end, 10);
      SAR_CHECK(!count.empty() && *end == '\0' && value >= -1, sar::invalid_argument, where,
                ": '", pair, "' in layer ", l, " is not relation=count (a count, 0 or -1 for all)");
      out.back()[static_cast<std::size_t>(r)] = static_cast<sar::node_t>(value);
    }
  }
  return out;
}

/// The minibatch settings of p: its fanouts, or the defaults (sage: 25, 10 for two layers,
/// else 10 per layer; ladies: 512 per layer), and its fanouts per relation (of config's
/// schema). Throws sar::invalid_argument if the fanouts do not give one per layer, or as
/// relation_fanouts_of.
inline sar::minibatch_options minibatch_options_of(const program_options& p,
                                                   const sar::model_config& config) {
  sar::minibatch_options o;
  o.batch_size = p.minibatch;
  o.bulk = p.bulk;
  o.gather_rows = p.gather_rows;
  o.sampler.seed = p.seed;
  o.sampler.kind = p.sampler;
  o.sampler.fanouts = p.fanouts;
  if (o.sampler.fanouts.empty()) {
    const bool ladies = o.sampler.kind == sar::sampler_kind::layer_wise;
    o.sampler.fanouts.assign(static_cast<std::size_t>(config.layers), ladies ? 512 : 10);
    if (!ladies && config.layers == 2) o.sampler.fanouts = {25, 10};
  }
  SAR_CHECK(o.sampler.fanouts.size() == static_cast<std::size_t>(config.layers),
            sar::invalid_argument, "sar-train: ", o.sampler.fanouts.size(),
            " fanouts for ", config.layers, " layers (--fanouts gives one per layer, from the "
            "input)");
  o.sampler.relation_fanouts = relation_fanouts_of(p.relation_fanouts, config.schema,
                                                   o.sampler.fanouts);
  return o;
}

/// What a run's results depend on besides the rank count, the schedule and the threads: a
/// checkpoint resumes only into a run with the same settings (--epochs may differ).
inline nlohmann::json run_settings(const program_options& p, const sar::model_config& c,
                                   const local_data& data, Eigen::Index features) {
  nlohmann::json s{{"dataset", data.name}, {"nodes", data.num_nodes}, {"features", features},
                   {"classes", data.num_classes}, {"model", p.model}, {"layers", c.layers},
                   {"hidden", c.hidden}, {"dropout", c.dropout},
                   {"input_dropout", c.first_dropout()}, {"batch_norm", c.batch_norm},
                   {"aggregate_features_first", c.aggregate_features_first},
                   {"learning_rate", c.learning_rate}, {"weight_decay", c.weight_decay},
                   {"decay_first_layer_only", c.decay_first_layer_only},
                   {"patience", c.patience}, {"eval_every", p.eval_every},
                   {"precision", name_of(sar_programs::precision_names, p.precision)},
                   {"normalise_features", name_of(sar_programs::switch_names, p.normalise)},
                   {"seed", p.seed}, {"minibatch", p.minibatch}, {"halo_bits", p.halo_bits},
                   {"gradient_bits", p.gradient_bits}, {"staleness", p.staleness}};
  if (p.storage != sar_programs::feature_storage::fp32)  // (older checkpoints: without)
    s["storage"] = name_of(sar_programs::storage_names, p.storage);
  if (!sar::has_class_ids(data.task)) {  // (classification runs: as before tasks)
    s["task"] = sar::task_name(data.task);
    s["outputs"] = data.num_outputs();
    if (sar::facts_of(data.task).standardised) s["raw_targets"] = p.raw_targets;
  }
  sar::describe_family_settings(c, s);
  if (p.minibatch > 0) {
    s["sampler"] = name_of(sar_programs::sampler_names, p.sampler);
    const sar::minibatch_options o = minibatch_options_of(p, c);
    s["fanouts"] = o.sampler.fanouts;
    if (!o.sampler.relation_fanouts.empty()) s["relation_fanouts"] = o.sampler.relation_fanouts;
  }
  return s;
}

/// Whether this run may train on sparse features (--sparse-features not off, a model whose
/// first layer reads them, not minibatches on several ranks: their gathers move dense rows).
/// Throws sar::invalid_argument for on where it may not.
template <class Model>
bool may_use_sparse_features(const program_options& p, const Model& model) {
  const bool on = p.sparse_features == sar_programs::switch_setting::on;
  const bool distributed_minibatches = p.distributed() && p.minibatch > 0;
  SAR_CHECK(!on || (!distributed_minibatches && model.reads_sparse_input()),
            sar::invalid_argument, "sar-train: --sparse-features on, but ",
            distributed_minibatches ? "minibatches on several ranks gather dense features"
                                    : "the model's first layer cannot read sparse features (gcn, "
                                      "sage mean or gcn, gat and mlp can)");
  return p.sparse_features != sar_programs::switch_setting::off && !distributed_minibatches &&
         p.memory_budget == 0 && model.reads_sparse_input();
}

/// Whether to train on `features` (this rank's, read dense) as sparse rows: where
/// may_use_sparse_features, with on, or auto when at most sar::sparse_features_density of them are
/// non-zero over all ranks. Throws as may_use_sparse_features. Collective.
template <class T, class Model>
bool use_sparse_features(const program_options& p, const sar::matrix<T>& features,
                         const Model& model, sar::mpi_communicator& comm) {
  if (!may_use_sparse_features(p, model)) return false;
  std::array<double, 2> counts{static_cast<double>((features.array() != T(0)).count()),
                               static_cast<double>(features.size())};
  comm.all_reduce(std::span<double>(counts), sar::reduce_op::sum);
  return p.sparse_features == sar_programs::switch_setting::on ||
         counts[0] <= sar::sparse_features_density * counts[1];
}

/// The dataset ids of the nodes of a full-batch schedule's rows (row i: graph.node_id(i)): the
/// nodes whose embedding rows this rank holds.
template <class Schedule>
std::vector<sar::node_t> node_ids_of(const Schedule& graph) {
  std::vector<sar::node_t> ids(static_cast<std::size_t>(graph.num_destinations()));
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = graph.node_id(static_cast<sar::node_t>(i));
  return ids;
}

/// A model of `config` with node embeddings (config.node_embeddings) holds the rows of this
/// rank's `local_nodes` nodes of `graph` (a schedule or a minibatch graph; one process: every
/// node); nothing otherwise.
template <class Model, class Graph>
void hold_embedding_rows(const sar::model_config& config, Model& model, const Graph& graph,
                         sar::node_t local_nodes) {
  if (!config.node_embeddings) return;
  std::vector<sar::node_t> ids;
  if constexpr (sar::minibatch_graph<Graph>) {
    ids.assign(graph.local_ids().begin(), graph.local_ids().end());
    if (ids.empty()) {  // one process: row r is node r
      ids.resize(static_cast<std::size_t>(local_nodes));
      std::iota(ids.begin(), ids.end(), sar::node_t{0});
    }
  } else {
    ids = node_ids_of(graph);
  }
  model.parameters().hold_rows(ids);
}

/// The input features of a run as the model reads them: dense, sparse rows (--sparse-features)
/// or bf16 rows (--storage bf16), exactly one of them non-empty.
template <class T>
struct run_features {
  sar::matrix<T> dense;                      ///< dense rows, unless one of the others
  std::optional<sar::sparse_rows<T>> sparse;  ///< sparse rows
  std::optional<sar::bf16_rows> bf16;         ///< dense rows held as bf16

  /// Takes data's features (read dense or sparse) into the form the run trains on; data's
  /// are emptied. Throws as may_use_sparse_features. Collective (the density when read dense).
  template <class Model>
  static run_features of(const program_options& p, local_data& data, const Model& model,
                         sar::mpi_communicator& comm) {
    run_features r;
    const bool read_sparse = data.sparse_features.num_cols > 0;
    if (read_sparse && may_use_sparse_features(p, model)) {
      if constexpr (std::is_same_v<T, float>) r.sparse = std::move(data.sparse_features);
      else r.sparse = sar::cast_values<T>(data.sparse_features);
    } else if (read_sparse) {
      r.dense = sar::to_dense<T>(data.sparse_features);
    } else {
      if constexpr (std::is_same_v<T, float>) r.dense = std::move(data.features);
      else r.dense = data.features.template cast<T>();
      // Read dense (a store, a .npy dataset): decided alike on every rank, by the density over
      // all ranks.
      if (use_sparse_features(p, r.dense, model, comm)) {
        r.sparse = sar::to_sparse_rows<T, T>(r.dense);
        r.dense = {};
      }
    }
    data.features = {};
    data.sparse_features = {};
    if (r.sparse && comm.rank() == 0 && !p.quiet)
      sar::log_info(sar::message("sparse features: ", r.sparse->non_zeros(),
                                 " non-zeros on rank 0 (density ", r.sparse->density(), ")"));
    // --storage bf16: dense features held as bf16, read row by row by a GCN on one process
    // and decoded by every forward otherwise (sparse ones stay).
    if (p.storage == sar_programs::feature_storage::bf16 && !r.sparse) {
      r.bf16.emplace(r.dense);
      r.dense = {};
    }
    return r;
  }
};

/// What the ranks sent in one epoch, all ranks together, by kind.
struct epoch_traffic {
  std::int64_t halo_features = 0;   ///< forward halos (minibatches: everything sent)
  std::int64_t halo_gradients = 0;  ///< backward halos
  std::int64_t parameters = 0;      ///< the parameter all-reduce
  std::int64_t evaluation = 0;      ///< evaluation halos
  /// What training sent: halos both ways and the parameters.
  std::int64_t training() const { return halo_features + halo_gradients + parameters; }
};

/// The per-epoch measurements of a run on `Graph`, reduced over the ranks (the slowest rank's
/// times, the largest peak, the bytes of all ranks): each epoch's progress line, and the
/// medians in the metrics.
template <class Graph>
class run_record {
 public:
  run_record(Graph& graph, sar::mpi_communicator& comm)
      : graph_(graph), comm_(comm), sent_before_(comm.bytes_sent()) {}

  /// Measures epoch e (a minibatch run's when `minibatch`); returns its progress line and
  /// seconds (the slowest rank's). Collective.
  std::pair<std::string, double> add(const sar::epoch_stats& e, bool minibatch) {
    epoch_traffic sent = traffic_since_last();
    if constexpr (requires { graph_.sent().total_bytes(); }) {
      const sar::sampling_traffic now = graph_.sent();
      std::array<std::int64_t, 5> delta{
          now.adjacency_bytes - sampling_before_.adjacency_bytes,
          now.row_bytes - sampling_before_.row_bytes,
          now.entry_bytes - sampling_before_.entry_bytes,
          now.request_bytes - sampling_before_.request_bytes,
          now.returned_bytes - sampling_before_.returned_bytes};
      sampling_before_ = now;
      comm_.all_reduce(std::span<std::int64_t>(delta), sar::reduce_op::sum);
      sampling_.push_back(delta);
    }
    if (minibatch) {
      std::array<std::int64_t, 2> rows{e.input_rows, e.gathered_rows};
      comm_.all_reduce(std::span<std::int64_t>(rows), sar::reduce_op::sum);
      minibatch_rows_.push_back(rows);
    }
    std::array<std::int64_t, 4> bytes{sent.halo_features, sent.halo_gradients, sent.parameters,
                                      sent.evaluation};
    std::int64_t peak = e.peak_memory_bytes;
    double seconds = e.seconds;
    comm_.all_reduce(std::span<std::int64_t>(bytes), sar::reduce_op::sum);
    comm_.all_reduce(std::span<std::int64_t>(&peak, 1), sar::reduce_op::max);
    comm_.all_reduce(std::span<double>(&seconds, 1), sar::reduce_op::max);
    sent = {bytes[0], bytes[1], bytes[2], bytes[3]};
    epoch_seconds_.push_back(seconds);
    sampling_seconds_.push_back(e.sampling_seconds);
    gather_seconds_.push_back(e.gather_seconds);
    traffic_.push_back(sent);
    peak_memory_ = peak;
    const auto mib = [](std::int64_t b) { return sar::format_mib(static_cast<double>(b)); };
    if (minibatch)
      return {sar::message(sar::epoch_line(e, seconds), "  (sampling ", e.sampling_seconds,
                           " s, gather ", e.gather_seconds, " s)",
                           comm_.size() > 1 ? "  sent " + mib(sent.halo_features) : "",
                           "  peak ", mib(peak)),
              seconds};
    return {sar::message(sar::epoch_line(e, seconds), "  sent ", mib(sent.training()), " (halo ",
                         mib(sent.halo_features), " + ", mib(sent.halo_gradients), ", params ",
                         mib(sent.parameters), ")  peak/rank ", mib(peak)),
            seconds};
  }

  /// Adds the run's medians over its epochs to metrics (epoch 0 also sends what is sent once:
  /// the first layer's halo under an exact_first_layer exchange).
  void add_to(nlohmann::json& metrics) const {
    metrics["epoch_seconds_median"] = sar::median(epoch_seconds_);
    metrics["epoch_seconds"] = epoch_seconds_;
    metrics["peak_memory_bytes"] = peak_memory_;
    const auto median_of = [](const auto& rows, auto part) {
      std::vector<std::int64_t> v;
      for (const auto& b : rows) v.push_back(part(b));
      std::sort(v.begin(), v.end());
      return v.empty() ? std::int64_t{0} : v[v.size() / 2];
    };
    metrics["bytes_sent_per_epoch"] = median_of(traffic_, [](auto& t) { return t.training(); });
    metrics["halo_feature_bytes_per_epoch"] =
        median_of(traffic_, [](auto& t) { return t.halo_features; });
    metrics["halo_gradient_bytes_per_epoch"] =
        median_of(traffic_, [](auto& t) { return t.halo_gradients; });
    metrics["parameter_allreduce_bytes_per_epoch"] =
        median_of(traffic_, [](auto& t) { return t.parameters; });
    metrics["evaluation_bytes_per_epoch"] =
        median_of(traffic_, [](auto& t) { return t.evaluation; });
    const auto column = [](std::size_t k) { return [k](const auto& b) { return b[k]; }; };
    if (!minibatch_rows_.empty()) {  // all ranks, per epoch (median), training
      metrics["sampling_seconds_median"] = sar::median(sampling_seconds_);
      metrics["gather_seconds_median"] = sar::median(gather_seconds_);
      metrics["input_rows_per_epoch"] = median_of(minibatch_rows_, column(0));
      metrics["gathered_rows_per_epoch"] = median_of(minibatch_rows_, column(1));
    }
    if (!sampling_.empty())  // all ranks, per epoch (median), training and evaluation
      metrics["sampling_bytes_per_epoch"] = {
          {"adjacency_rows", median_of(sampling_, column(0))},
          {"feature_rows", median_of(sampling_, column(1))},
          {"entries", median_of(sampling_, column(2))},
          {"requests", median_of(sampling_, column(3))},
          {"returned_rows", median_of(sampling_, column(4))}};
  }

 private:
  /// This rank's bytes sent since the last call: by kind from a schedule's counters; a
  /// sampling graph's everything (rows, features, gradients) as halo_features.
  epoch_traffic traffic_since_last() {
    if constexpr (requires { graph_.traffic().total_bytes(); }) {
      const auto& t = graph_.traffic();
      const epoch_traffic now{t.feature_bytes, t.gradient_bytes, t.reduce_bytes,
                              t.evaluation_bytes};
      const epoch_traffic delta{now.halo_features - before_.halo_features,
                                now.halo_gradients - before_.halo_gradients,
                                now.parameters - before_.parameters,
                                now.evaluation - before_.evaluation};
      before_ = now;
      return delta;
    } else {
      const std::int64_t sent = comm_.bytes_sent() - sent_before_;
      sent_before_ = comm_.bytes_sent();
      return {.halo_features = sent};
    }
  }

  Graph& graph_;
  sar::mpi_communicator& comm_;
  epoch_traffic before_{};       // a schedule's counters at the last epoch
  std::int64_t sent_before_;     // the communicator's, for sampling graphs
  sar::sampling_traffic sampling_before_{};
  std::vector<double> epoch_seconds_, sampling_seconds_, gather_seconds_;  // slowest rank
  std::vector<epoch_traffic> traffic_;  // all ranks
  std::int64_t peak_memory_ = 0;        // largest rank, last epoch
  // Distributed minibatches: rows of A (sampling), feature rows, vector entries (labels,
  // degrees), request ids and returned gradient rows, all ranks.
  std::vector<std::array<std::int64_t, 5>> sampling_;
  // Minibatches: the input rows they read and the rows their gathers fetched (all ranks).
  std::vector<std::array<std::int64_t, 2>> minibatch_rows_;
};

/// A run's checkpoints: --resume restores the model, the optimiser and the progress so far
/// (every rank the same file); --checkpoint saves them every p.checkpoint_every epochs and at
/// the end (rank 0 writes). Collective.
template <class Model, class Optimiser>
class run_checkpoints {
 public:
  /// For the run described by `settings` (what a resumed run must match).
  run_checkpoints(const program_options& p, nlohmann::json settings, Model& model,
                  Optimiser& optimiser, sar::mpi_communicator& comm)
      : p_(p), settings_(std::move(settings)), model_(model), optimiser_(optimiser),
        comm_(comm) {}

  /// With --resume: restores it and lets `options` continue its progress. Throws
  /// sar::invalid_argument when the ranks read different files or the settings differ.
  void resume(sar::train_options& options) {
    if (p_.resume.empty()) return;
    resumed_ = sar::read_checkpoint(p_.resume);
    const auto [lowest, highest] = sar::min_max_over_ranks(comm_, resumed_->identity);
    SAR_CHECK(lowest == highest, sar::invalid_argument, "sar-train: rank ", comm_.rank(),
              " read --resume ", p_.resume, " with CRC-32 ", resumed_->identity,
              ", but the ranks' copies differ: every rank must read the same checkpoint");
    resumed_->check_settings(settings_, "sar-train: --resume");
    sar::restore_checkpoint(*resumed_, model_, optimiser_);
    options.resume = &resumed_->progress;
    if (comm_.rank() == 0)
      sar::log_info(sar::message("resuming ", p_.resume, " after epoch ",
                                 resumed_->progress.epochs_done() - 1));
  }
  /// With --checkpoint: options.after_epoch saves every p.checkpoint_every epochs.
  void save_every(sar::train_options& options) {
    if (p_.checkpoint.empty()) return;
    options.after_epoch = [this](const sar::train_result& r) {
      if (r.epochs_done() % p_.checkpoint_every == 0) save(r);
    };
  }
  /// The final checkpoint, unless a run resumed from it could not start on a synchronous
  /// epoch (bounded staleness) and so not continue bit for bit (said on rank 0).
  void finish(const sar::train_result& result) {
    if (p_.checkpoint.empty() || saved_ == result.epochs_done()) return;
    if (result.epochs_done() % p_.staleness == 0) save(result);
    else if (comm_.rank() == 0)
      sar::log_info(sar::message("no final checkpoint: ", result.epochs_done(),
                                 " epochs are not a multiple of --staleness ", p_.staleness,
                                 "; ", p_.checkpoint, " holds epoch ", saved_ - 1));
  }
  /// Adds resumed_after_epochs to `metrics` when the run resumed.
  void describe(nlohmann::json& metrics) const {
    if (resumed_) metrics["resumed_after_epochs"] = resumed_->progress.epochs_done();
  }

 private:
  void save(const sar::train_result& r) {
    sar::save_checkpoint(comm_, p_.checkpoint, model_, optimiser_, r, settings_);
    saved_ = r.epochs_done();
    if (comm_.rank() == 0 && !p_.quiet)
      sar::log_info(sar::message("checkpoint ", p_.checkpoint, " after epoch ", saved_ - 1));
  }

  const program_options& p_;
  nlohmann::json settings_;
  Model& model_;
  Optimiser& optimiser_;
  sar::mpi_communicator& comm_;
  std::optional<sar::checkpoint> resumed_;
  int saved_ = -1;  // epochs done at the last checkpoint
};

/// What a run was (its settings in the metrics JSON): model, dataset, precision, feature
/// storage, seed, ranks, schedule, the minibatch settings and the low-bit codecs.
template <class Graph>
nlohmann::json run_description(const program_options& p, const local_data& data,
                               const Graph& graph, bool sparse, bool bf16,
                               const sar::minibatch_options& minibatch,
                               std::int64_t graph_bytes, int ranks) {
  nlohmann::json metrics;
  metrics["model"] = p.model;
  metrics["dataset"] = data.name;
  metrics["precision"] = name_of(sar_programs::precision_names, p.precision);
  metrics["sparse_features"] = sparse;
  metrics["storage"] = bf16 ? "bf16" : "fp32";
  metrics["seed"] = p.seed;
  metrics["ranks"] = ranks;
  metrics["schedule"] = !p.distributed()                  ? "local"
                        : sar::minibatch_graph<Graph> ? "sampled"
                        : p.low_bit()                   ? "low_bit"
                                  : name_of(sar_programs::schedule_names, p.schedule);
  if (p.minibatch > 0) {
    metrics["replication"] = p.replication;
    metrics["graph_feature_bytes"] = graph_bytes;  // largest rank
    metrics["minibatch"] = p.minibatch;
    metrics["sampler"] = name_of(sar_programs::sampler_names, p.sampler);
    metrics["fanouts"] = minibatch.sampler.fanouts;
    if (!minibatch.sampler.relation_fanouts.empty())
      metrics["relation_fanouts"] = minibatch.sampler.relation_fanouts;
    metrics["bulk"] = p.bulk;
    metrics["gather_rows"] = p.gather_rows;
  }
  if constexpr (requires { graph.feature_codec_name(); }) {
    metrics["halo_codec"] = graph.feature_codec_name();
    metrics["gradient_codec"] = graph.gradient_codec_name();
    metrics["staleness"] = graph.policy().staleness;
    metrics["progress_polls"] = graph.progress_polls();
  }
  return metrics;
}

/// Adds what a run reached to `metrics`: epochs, task, the best epoch and its validation and
/// test `score` (null when never evaluated), the targets' standardisation, the losses.
inline void describe_result(nlohmann::json& metrics, const sar::train_result& result,
                            sar::task_kind task, const sar::target_standardisation& standard) {
  const std::string score = sar::score_name(task);  // best_val_acc, test_r2, ...
  metrics["epochs"] = result.history.size();
  metrics["task"] = sar::task_name(task);
  if (result.best_epoch >= 0) {
    metrics["best_epoch"] = result.best_epoch;
    metrics["best_val_" + score] = result.best_valid_score;
    metrics["test_" + score] = result.test_score;
  } else {  // never evaluated (--eval-every 0): not measured
    metrics["best_epoch"] = metrics["best_val_" + score] = metrics["test_" + score] = nullptr;
  }
  if (!standard.scale.empty()) {
    metrics["target_mean"] = standard.mean;
    metrics["target_scale"] = standard.scale;
  }
  std::vector<double> losses;
  for (const auto& e : result.history) losses.push_back(e.train_loss);
  metrics["train_loss"] = losses;
}

/// --memory-budget: sar::train_out_of_core of `model` on `graph` with the features `dense`
/// moved to the run's spill directory (and freed), in parts of --part-rows nodes or the most
/// sar::plan_out_of_core fits in the budget. Throws sar::invalid_argument naming the budget and
/// what it must hold when no part fits. Collective.
template <class T, class Model, class Graph, class Optimiser>
sar::train_result train_out_of_core(const program_options& p, const sar::model_config& config,
                                    Model& model, Graph& graph, Optimiser& optimiser,
                                    sar::matrix<T>& dense, const sar::node_data<T>& nodes,
                                    std::span<const sar::node_t> part_breaks,
                                    const sar::train_options& options,
                                    const std::function<void(const sar::epoch_stats&)>& on_epoch,
                                    sar::mpi_communicator& comm) {
  const sar::node_t n = graph.num_local();
  const sar::graph_size size{.nodes = static_cast<double>(std::max<sar::node_t>(n, 1)),
                             .edges = static_cast<double>(graph.local_rows().num_edges()),
                             .features = static_cast<double>(dense.cols()),
                             .outputs = static_cast<double>(model.output_dim())};
  const sar::partition_size part{.ranks = comm.size(), .nodes = size.nodes, .edges = size.edges};
  const sar::run_settings settings{.model = config, .value_bytes = sizeof(T)};
  const sar::out_of_core_plan plan = sar::plan_out_of_core(
      size, part, settings, static_cast<double>(p.memory_budget), true);
  // Every rank refuses when one must (the rank whose part does not fit says why).
  std::int64_t refused = plan.refusal.empty() ? 0 : 1;
  comm.all_reduce(std::span<std::int64_t>(&refused, 1), sar::reduce_op::max);
  SAR_CHECK(refused == 0 || p.part_rows > 0, sar::invalid_argument, "sar-train: rank ",
            comm.rank(), ": --memory-budget: ",
            plan.refusal.empty() ? std::string("another rank's part does not fit the budget")
                                 : plan.refusal + " (--part-rows sets the parts regardless)");
  const sar::node_t part_rows =
      p.part_rows > 0 ? p.part_rows : static_cast<sar::node_t>(plan.part_rows);
  const std::vector<sar::node_t> starts = sar::part_starts(n, part_rows, part_breaks);
  sar::spill_directory spill(p.spill_dir);
  sar::spilled_rows<T> features(spill, "features", dense.rows(), dense.cols());
  features.write(0, dense);
  dense = sar::matrix<T>();  // the features are read from disk from now on
  // The epochs' peaks are training's: loading held the dataset whole before this point.
  const bool reset = sar::reset_peak_memory();
  if (comm.rank() == 0 && !p.quiet)
    sar::log_info(sar::message(
        "out of core within ", sar::format_bytes(static_cast<double>(p.memory_budget)), ": ",
        starts.size() - 1, " parts of at most ", part_rows, " nodes on rank 0",
        part_breaks.empty() ? "" : sar::message(", cut at its ", part_breaks.size() + 1,
                                                " parts of the partition store"),
        " (planned: ",
        sar::format_bytes(plan.fixed_bytes), " held, ", sar::format_bytes(plan.part_bytes),
        " per part; spills ", sar::format_bytes(plan.spill_bytes), " to ", spill.path().string(),
        ")", reset ? "; the peaks below are training's" : ""));
  const sar::matrix<T> none;  // the features are not read from memory
  const sar::node_data<T> on_disk{none, nodes.labels, nodes.split, nodes.task, nodes.targets,
                                  nodes.target_scale};
  return sar::train_out_of_core(model, graph, optimiser, on_disk, options,
                                {.spill_dir = p.spill_dir, .part_rows = part_rows,
                                 .part_breaks = {part_breaks.begin(), part_breaks.end()}},
                                on_epoch,
                                nullptr, &features);
}

/// Trains on `graph` (local_schedule, a distributed schedule, or a distributed sampling graph
/// for minibatches on P ranks) and returns the metrics. Collective over comm: per-epoch
/// times, memory and bytes are reduced over the ranks, and rank 0 prints the progress lines.
template <class T, class Graph>
nlohmann::json train(const program_options& p, const sar::model_config& config, Graph& graph,
                     local_data& data, sar::mpi_communicator& comm) {
  constexpr bool sampled = sar::minibatch_graph<Graph>;
  using model_schedule = std::conditional_t<sampled, sar::local_schedule, Graph>;
  const bool read_sparse = data.sparse_features.num_cols > 0;  // a dataset's or a store's
  const Eigen::Index feature_dim = read_sparse ? data.sparse_features.cols() : data.features.cols();
  const Eigen::Index local_nodes = read_sparse            ? data.sparse_features.rows()
                                   : data.mapped_features ? data.mapped_features->rows()
                                                          : data.features.rows();
  auto model =
      sar::make_model<T, model_schedule>(config, feature_dim, data.num_outputs(), p.seed);
  run_features<T> input = run_features<T>::of(p, data, model, comm);
  // Counter-based initialisation is already identical on every rank; the broadcast makes rank
  // 0's parameters authoritative whatever their origin (e.g. a user's checkpoint).
  comm.broadcast(model.parameters().values(), 0);
  hold_embedding_rows(config, model, graph, local_nodes);
  auto optimiser = sar::make_optimiser(config, model);
  const bool root = comm.rank() == 0;
  sar::train_options options{.epochs = config.epochs, .patience = config.patience,
                             .seed = p.seed, .log_progress = false,
                             .csv_log = root ? p.csv_log : "", .evaluate_every = p.eval_every,
                             .max_loss = p.max_loss, .resume = nullptr, .after_epoch = {}};

  run_record<Graph> record(graph, comm);
  sar_programs::epoch_progress progress(p.log_every, config.epochs, root && !p.quiet);
  auto on_epoch = [&](const sar::epoch_stats& e) {
    // Mapped features' pages leave the process's memory each epoch (the page cache keeps them).
    if (data.mapped_features) data.mapped_features->release();
    inject_failure(p.failure, e.epoch, comm);
    const auto [line, seconds] = record.add(e, p.minibatch > 0);
    progress.report(e.epoch, line, seconds);
  };
  run_checkpoints checkpoints(p, run_settings(p, config, data, feature_dim), model, optimiser,
                              comm);
  checkpoints.resume(options);
  checkpoints.save_every(options);

  // Regression targets in standard units (the training nodes' mean and deviation per output);
  // the metrics rescale RMSE and MAE to the original units.
  sar::target_standardisation standard;
  if (sar::facts_of(data.task).standardised && !p.raw_targets)
    standard = sar::standardise_targets(data.targets, data.split, [&](std::span<double> sums) {
      comm.all_reduce(sums, sar::reduce_op::sum);
    });
  // --save-model: the parameters, layer state and this rank's embedding rows of the best epoch
  // so far.
  best_parameters best(model);
  if (!p.save_model.empty())
    options.after_epoch = [&, checkpointing = options.after_epoch](const sar::train_result& r) {
      best.keep_if_best(r.best_epoch, r.epochs_done());
      if (checkpointing) checkpointing(r);
    };
  const auto& sparse = input.sparse;
  const auto& bf16 = input.bf16;
  // The features: input's, or with --map-features (float only) the file's rows where they are.
  const auto features = [&]() -> sar::const_rows_ref<T> {
    if constexpr (std::is_same_v<T, float>)
      if (data.mapped_features) return data.mapped_features->matrix();
    return input.dense;
  };
  const sar::node_data<T> nodes{features(), data.labels, data.split, data.task,
                                {data.targets.data(), data.targets.rows(), data.targets.cols()},
                                standard.scale, sparse ? &*sparse : nullptr,
                                bf16 ? &*bf16 : nullptr};
  sar::train_result result;
  sar::minibatch_options minibatch;
  // This rank's graph and feature memory (minibatches: what the 1 / P memory target measures).
  auto graph_bytes = static_cast<std::int64_t>(
      sparse ? sparse->memory_bytes()
             : bf16 ? bf16->memory_bytes() : input.dense.size() * sizeof(T));
  if constexpr (sampled) {
    graph_bytes += static_cast<std::int64_t>(graph.memory_bytes());
    if (p.memory_budget > 0) {
      result = train_out_of_core(p, config, model, graph, optimiser, input.dense, nodes,
                                 data.part_breaks, options, on_epoch, comm);
    } else {
      minibatch = minibatch_options_of(p, config);
      result = sar::train_minibatch(model, graph, optimiser, nodes, options, minibatch, on_epoch);
    }
  } else {
    result = sar::train_full_batch(model, graph, optimiser, nodes, options, on_epoch);
  }
  progress.finish();
  comm.all_reduce(std::span<std::int64_t>(&graph_bytes, 1), sar::reduce_op::max);
  if (!p.save_model.empty()) {
    const std::string score = sar::score_name(data.task);
    const bool kept = !best.empty();
    best.restore();  // the best epoch's parameters (every rank kept the same)
    const sar::model_description description{
        .config = config, .input_dim = feature_dim, .output_dim = data.num_outputs(),
        .task = data.task, .targets = standard, .row_normalise_features = p.row_normalised,
        .about = {{"dataset", data.name}, {"sar_version", SAR_VERSION_STRING},
                  {"epochs", result.epochs_done()},
                  {"parameters_of_epoch", !kept ? result.epochs_done() - 1
                                                              : result.best_epoch},
                  {"best_val_" + score, result.best_valid_score},  // NaN: null
                  {"test_" + score, result.test_score}}};
    sar::save_model(comm, p.save_model, model, description);
    if (root && !p.quiet) sar::log_info("saved the model to " + p.save_model);
  }
  checkpoints.finish(result);

  nlohmann::json metrics = run_description(p, data, graph, sparse.has_value(), bf16.has_value(),
                                           minibatch, graph_bytes, comm.size());
  describe_result(metrics, result, data.task, standard);
  checkpoints.describe(metrics);
  record.add_to(metrics);
  return metrics;
}

template <class T>
nlohmann::json train_single(const program_options& p, const sar::model_config& config,
                            sar::graph_dataset& dataset, sar::mpi_communicator& comm) {
  const sar::node_t nodes = dataset.num_nodes();
  check_model_fits<T>(p, config, dataset.feature_dim(), dataset.num_outputs(), nodes);
  sar::prepare_model_graph(config, dataset.graph, dataset.edge_features);
  sar::csr graph = std::move(dataset.graph);
  dataset.graph = {};
  sar::matrixf edge_features = std::move(dataset.edge_features);  // empty unless read
  std::vector<std::int32_t> edge_types = std::move(dataset.edge_types);  // rgcn's relations
  local_data data = local_data::from(dataset, dataset.name, nodes);
  if (p.map_features) {
    data.mapped_features.emplace(std::filesystem::path(p.dataset) / "features.npy");
    SAR_CHECK(data.mapped_features->rows() == nodes &&
                  data.mapped_features->cols() == data.features.cols(),
              sar::io_error, "sar-train: ", data.mapped_features->path(), " holds ",
              data.mapped_features->rows(), " x ", data.mapped_features->cols(), " features for ",
              nodes, " nodes of width ", data.features.cols(), " (meta.json)");
  }
  if (p.sampled_graph()) {
    sar::sampling_graph sampled(graph, edge_features, edge_types);
    return train<T>(p, config, sampled, data, comm);
  }
  sar::local_schedule schedule(std::move(graph), std::move(edge_features), std::move(edge_types));
  // bf16 storage asks for bytes before speed: no tilings of rows narrower than a cache line.
  if (p.storage == sar_programs::feature_storage::bf16) schedule.set_min_tiled_row_bytes(64);
  return train<T>(p, config, schedule, data, comm);
}

template <class T>
nlohmann::json train_sampled_distributed(const program_options& p, const sar::model_config& config,
                                         sar::graph_part& part, const std::string& name,
                                         sar::mpi_communicator& comm,
                                         std::vector<sar::node_t> part_breaks) {
  check_model_fits<T>(p, config, part.features.cols(), part.num_outputs(), part.in_edges.num_rows);
  sar::distributed_sampling_graph<sar::mpi_communicator> graph(
      comm, part, p.replication, p.sampler == sar::sampler_kind::layer_wise);
  local_data data = local_data::from(part, name, part.book.num_nodes());
  data.part_breaks = std::move(part_breaks);
  return train<T>(p, config, graph, data, comm);
}

template <class T>
nlohmann::json train_distributed(const program_options& p, const sar::model_config& config,
                                 sar::graph_part& part, const std::string& name,
                                 sar::mpi_communicator& comm) {
  check_model_fits<T>(p, config, part.features.cols(), part.num_outputs(), part.in_edges.num_rows);
  sar::exchange_options exchange =
      p.low_bit() ? sar::low_bit_exchange(p.halo_bits, p.gradient_bits, p.staleness, p.prefetch)
                  : sar::named_exchange(name_of(sar_programs::schedule_names, p.schedule),
                                        p.prefetch);
  exchange.transport.progress_interval_us = p.progress_us;
  exchange.transport.pace_chunk_bytes = static_cast<std::size_t>(p.pace_kib) * 1024;
  sar::distributed_schedule<sar::mpi_communicator> graph(comm, part, std::move(exchange));
  part.in_edges = {};  // the schedule holds its shard (and its copy of the edge table) now
  part.edge_features = {};
  part.edge_types = {};
  local_data data = local_data::from(part, name, part.book.num_nodes());
  return train<T>(p, config, graph, data, comm);
}

template <class T, class Schedule>
sar::matrixf predict_saved(const sar::saved_model& saved, Schedule& graph,
                           const sar::matrixf& features) {
  auto model = sar::load_model<T, Schedule>(saved);
  if (!saved.tables.empty()) sar::hold_saved_rows(model, saved, node_ids_of(graph));
  const sar::matrix<T> x = features.template cast<T>();
  sar::matrix<T> y = sar::predict(model, graph, x);
  sar::to_original_units(y, saved.description.targets);
  return y.template cast<float>();
}

template <class T>
std::vector<double> epoch_seconds(const sar::model_config& config, sar::graph_dataset& data,
                                  int epochs) {
  sar::local_schedule graph(std::move(data.graph));
  auto model = sar::make_model<T, sar::local_schedule>(config, data.feature_dim(),
                                                       data.num_outputs(), 1);
  auto optimiser = sar::make_optimiser(config, model);
  const sar::matrix<T> x = data.features.cast<T>();
  const sar::train_result r = sar::train_full_batch(
      model, graph, optimiser, sar::node_data<T>{x, data.labels, data.split},
      {.epochs = epochs, .log_progress = false, .evaluate_every = 0});
  std::vector<double> seconds;
  for (const auto& epoch : r.history) seconds.push_back(epoch.seconds);
  return seconds;
}

}  // namespace sar_train
