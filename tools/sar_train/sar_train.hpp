// sar-train's pieces: its settings, and the training runs it dispatches to. The runs are
// defined in training.hpp and compiled once per precision and schedule in their own
// translation units (single_float.cpp, ...), so no file of the program instantiates every
// model under every schedule.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sar/comm/mpi.hpp"
#include "sar/graph/builders.hpp"
#include "sar/graph/dataset.hpp"
#include "sar/graph/edge_split.hpp"
#include "sar/partition/distributed_partition.hpp"
#include "sar/partition/graph_part.hpp"
#include "sar/train/model_config.hpp"
#include "../settings.hpp"

namespace sar_train {

/// The test hook SAR_TRAIN_INJECT_FAILURE="EPOCH:RANK[:HOW]" (not an option): after epoch
/// EPOCH, rank RANK throws (no HOW), stops itself with SIGSTOP (stop), sleeps for ever outside
/// MPI (hang), or waits in MPI for a message nobody sends (wait: every rank then waits in
/// MPI), so the fault tests can check that every rank then ends.
struct injected_failure {
  enum class kind { none, error, stop, hang, wait };
  kind how = kind::none;
  int epoch = -1, rank = -1;
};

/// sar-train --task link: link prediction instead of a node task (sar/train/link_prediction.hpp).
struct link_settings {
  bool on = false;              // --task link
  std::string decoder = "dot";  // a name of sar::link_decoders
  int negatives = 1;            // per supervision positive, every epoch
  // Their destinations: uniform, or in proportion to in-degree^0.75.
  sar_programs::negative_sampler sampler = sar_programs::negative_sampler::uniform;
  std::string split = "random";          // the folder under --dataset's split/
  std::vector<double> split_edges;       // VALID,TEST: split in memory instead (one process)
  std::vector<int> hits_at = {20, 50, 100};  // the K of the Hits@K reported
  std::string select_by = "hits@50";     // the validation figure that picks the best epoch
  bool allow_leak = false;               // keep held-out positives that are graph edges
};

/// sar-train --task graph-classify / graph-regress (sar/train/graph_level.hpp).
struct graph_settings {
  std::string readout = "sum";     // a name of sar::readout_names
  std::int64_t batch_graphs = 32;  // graphs per minibatch, over all ranks
  int folds = 10, fold = 0;        // the seeded stratified k-fold (without a split folder)
  bool folds_given = false;        // --folds or --fold given
  bool split_given = false;        // --split given (a folder of --dataset's split/)
};

struct program_options {
  std::string dataset = "planted";
  sar::node_t nodes = 0;  // planted only; 0 = the generator's default
  std::string model = "gcn";
  std::string aggregator = "mean";
  sar_programs::precision precision = sar_programs::precision::single;
  sar_programs::switch_setting normalise = sar_programs::switch_setting::automatic;
  sar_programs::switch_setting sparse_features = sar_programs::switch_setting::automatic;
  sar_programs::feature_storage storage = sar_programs::feature_storage::fp32;
  std::uint64_t seed = 0;
  int threads = 0;
  std::string metrics_out, csv_log;
  bool quiet = false;
  std::optional<int> log_every;  // epoch lines every N epochs; none: a status line on a terminal
  std::string checkpoint;    // directory written every checkpoint_every epochs and at the end
  int checkpoint_every = 10;
  std::string resume;        // checkpoint directory to continue from
  int eval_every = 1;  // evaluate after every N-th epoch and the last; 0 = never
  double max_loss = 1e4;  // a larger training loss stops training (diverged)
  std::string partitions;               // a partition store: distributed training
  std::optional<sar::distributed_method> partition;  // or partition --dataset in memory (one
                                                     // part per rank, no store)
  sar::node_t cluster_size = 0;         // --partition ptscotch coarsened: star clusters
  double arc_fraction = 1;              // and the fraction of arcs PT-Scotch gets
  bool skip_checksums = false;          // read the store without verifying its CRC-32s
  sar_programs::schedule_kind schedule = sar_programs::schedule_kind::sequential;
  int prefetch = 1;
  int progress_us = 0;                  // progress thread's poll interval (0: no thread)
  int pace_kib = 0;                     // KiB per chunk of a paced stale transfer (0: unpaced)
  int halo_bits = 32, gradient_bits = 32;  // per value on the wire (32: plain rows)
  int staleness = 1;                       // 1: synchronous
  sar::node_t minibatch = 0;            // seeds per minibatch; 0 = full-batch training
  std::vector<sar::node_t> fanouts;     // per graph layer from the input (empty: defaults)
  std::string relation_fanouts;         // per layer: relation=count,... separated by '/
  sar::sampler_kind sampler = sar::sampler_kind::node_wise;
  int bulk = 1;                         // minibatches sampled at once
  std::int64_t gather_rows = 0;         // most input rows fetched at once (0: no bound)
  int replication = 1;                  // distributed minibatch: ranks per block row (c)
  sar::dataset_sizes sizes;             // --num-nodes, --num-classes (with --dataset), --task
  bool raw_targets = false;             // regress: train on the targets as given (not standardised)
  std::string save_model;               // --save-model: the trained model's file
  bool row_normalised = false;          // whether the features were row-normalised (decided by
                                        // --normalise-features and the data before training)
  double watchdog_seconds = 300;        // --watchdog, else $SAR_WATCHDOG_SECONDS, else 300
  injected_failure failure;             // $SAR_TRAIN_INJECT_FAILURE (test hook)
  std::uint64_t memory_budget = 0;      // --memory-budget: out-of-core training (0: in memory)
  std::string spill_dir;                // --spill-dir: where out-of-core training spills
  sar::node_t part_rows = 0;            // --part-rows: nodes per part (0: from the budget)
  bool map_features = false;            // --map-features: minibatches read a .npy dataset's
                                        // features.npy in place (memory-mapped)
  link_settings link;                   // --task link
  graph_settings graphs;                // --task graph-classify / graph-regress
  /// Sylvie's low-bit / stale exchange (on the sequential ring) instead of `schedule`.
  bool low_bit() const { return halo_bits < 32 || gradient_bits < 32 || staleness > 1; }
  /// Whether the run trains on a sampling graph (sar/train/minibatch.hpp's minibatch_graph):
  /// minibatches, or full batches out of core.
  bool sampled_graph() const { return minibatch > 0 || memory_budget > 0; }
  /// Distributed training: on a partition store or on --dataset partitioned in memory.
  bool distributed() const { return !partitions.empty() || partition.has_value(); }
  /// Whether the task predicts per graph of a collection (a TU dataset).
  bool graph_level() const { return !link.on && sizes.task && sar::is_graph_level(*sizes.task); }
  /// Where the link split is read: the partition store (--partitions), else --dataset.
  const std::string& split_home() const { return partitions.empty() ? dataset : partitions; }
};

/// One process: the whole dataset (its graph put in the model's form by
/// sar::prepare_model_graph) under local_schedule. Returns the run's metrics.
template <class T>
nlohmann::json train_single(const program_options& p, const sar::model_config& config,
                            sar::graph_dataset& dataset, sar::mpi_communicator& comm);

/// P ranks, minibatches or out of core: this rank's part (part rank / p.replication of a store
/// of P / p.replication parts, or out of core several parts joined, each starting at one of
/// `part_breaks`) as a distributed sampling graph. Collective.
template <class T>
nlohmann::json train_sampled_distributed(const program_options& p, const sar::model_config& config,
                                         sar::graph_part& part, const std::string& name,
                                         sar::mpi_communicator& comm,
                                         std::vector<sar::node_t> part_breaks);

/// P ranks: this rank's part under the distributed schedule p.schedule. Collective.
template <class T>
nlohmann::json train_distributed(const program_options& p, const sar::model_config& config,
                                 sar::graph_part& part, const std::string& name,
                                 sar::mpi_communicator& comm);

/// One process, --task link: `dataset` (its graph the message-passing graph) and `split`
/// (sar/graph/io/link_split.hpp; freed once its pairs are taken). Returns the run's metrics
/// (link_training.hpp).
template <class T>
nlohmann::json train_links_single(const program_options& p, const sar::model_config& config,
                                  sar::graph_dataset& dataset, sar::link_split split,
                                  sar::mpi_communicator& comm);

/// P ranks, --task link: this rank's part and `split` by dataset id (this rank's share of its
/// rows, read_link_split), sent to the ranks that score its pairs and freed once this rank's
/// pairs are taken. Collective.
template <class T>
nlohmann::json train_links_distributed(const program_options& p, const sar::model_config& config,
                                       sar::graph_part& part, const std::string& name,
                                       sar::link_split split, sar::mpi_communicator& comm);

/// The parameters, layer state and embedding rows of a model at its best epoch so far (what
/// --save-model saves): kept after every epoch that is the run's best.
template <class Model>
class best_parameters {
 public:
  /// The model must outlive this object.
  explicit best_parameters(Model& model) : model_(model) {}

  /// Keeps the model's values if the last of `epochs_done` epochs is the best one.
  void keep_if_best(int best_epoch, int epochs_done) {
    if (best_epoch < 0 || best_epoch + 1 != epochs_done) return;
    const auto values = model_.parameters().values();
    values_.assign(values.begin(), values.end());
    state_.clear();
    for (const auto s : model_.state()) state_.emplace_back(s.begin(), s.end());
    rows_.clear();
    for (std::size_t k = 0; k < model_.parameters().table_count(); ++k)
      rows_.push_back(model_.parameters().table(k).values);
  }
  /// Whether none was kept (no evaluation).
  bool empty() const { return values_.empty(); }
  /// Puts the kept values back into the model (nothing if none was kept).
  void restore() {
    if (empty()) return;
    std::copy(values_.begin(), values_.end(), model_.parameters().values().begin());
    auto state = model_.state();
    for (std::size_t s = 0; s < state.size(); ++s)
      std::copy(state_[s].begin(), state_[s].end(), state[s].begin());
    for (std::size_t k = 0; k < rows_.size(); ++k)
      model_.parameters().table(k).values = std::move(rows_[k]);
  }

 private:
  using scalar = typename Model::scalar;
  Model& model_;
  std::vector<scalar> values_;
  std::vector<std::vector<double>> state_;
  std::vector<sar::matrix<scalar>> rows_;
};

}  // namespace sar_train
