// The full-batch training loop: forward, the task's masked loss (sar/nn/task.hpp:
// cross-entropy, mean squared error or binary cross-entropy) normalised by the GLOBAL number
// of training nodes (times the outputs, for regression and multi-label), backward, one
// all-reduce of the flat gradient buffer, optimiser step; then an evaluation forward and the
// task's scores (one all-reduce). Every reduction goes through the
// schedule (graph.all_reduce_sum), so the same loop trains on one process (local_schedule,
// where reductions are no-ops) and on P ranks (a distributed schedule): collective.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "sar/core/bf16.hpp"
#include "sar/core/error.hpp"
#include "sar/core/log.hpp"
#include "sar/core/memory.hpp"
#include "sar/io/output_file.hpp"
#include "sar/core/sparse_rows.hpp"
#include "sar/core/types.hpp"
#include "sar/nn/layer.hpp"
#include "sar/nn/loss.hpp"
#include "sar/nn/metrics.hpp"
#include "sar/nn/task.hpp"

namespace sar {

/// What one epoch of training measured.
struct epoch_stats {
  /// The epoch number (0-based).
  int epoch = 0;
  double train_loss = 0;    ///< of the training forward pass (with dropout)
  double valid_loss = 0;    ///< evaluation mode
  /// \var train_score
  /// The task's score (accuracy, R^2 or ROC-AUC: sar/nn/task.hpp) on the training nodes
  /// (NaN for a split without nodes).
  /// \var valid_score
  /// The task's score on the validation nodes (NaN for a split without nodes).
  double train_score = 0, valid_score = 0, test_score = 0;  ///< NaN for a split without nodes
  bool evaluated = false;   ///< whether the scores and valid_loss were measured
  double seconds = 0;       ///< forward + backward + gradient all-reduce + step
  /// \var sampling_seconds
  /// Minibatch training: the part of seconds spent sampling.
  double sampling_seconds = 0, gather_seconds = 0;  ///< minibatch training: parts of seconds
  /// \var input_rows
  /// Minibatch training: the input rows this rank's minibatches read (each minibatch's
  /// distinct input nodes, summed over the minibatches).
  /// \var gathered_rows
  /// Minibatch training: the rows this rank's gathers fetched (each group of a bulk fetches
  /// the union of its minibatches' input nodes once), its own rows included.
  std::int64_t input_rows = 0, gathered_rows = 0;  ///< minibatch training: rows read, fetched
  std::int64_t peak_memory_bytes = 0;  ///< this process
};

/// "epoch E  loss L  train A  val A  test A  time S s" ("not evaluated" instead of the
/// scores if they were not measured): the progress line of an epoch, with `seconds` as its
/// time (e.g. the slowest rank's); callers append what they measure more.
inline std::string epoch_line(const epoch_stats& e, double seconds) {
  char line[160];
  const auto score = [](double a) {  // NaN: a split without nodes
    char text[16] = "n/a";
    if (!std::isnan(a)) std::snprintf(text, sizeof text, "%.4f", a);
    return std::string(text);
  };
  if (e.evaluated)
    std::snprintf(line, sizeof line, "epoch %4d  loss %.4f  train %s  val %s  test %s  time %.4fs",
                  e.epoch, e.train_loss, score(e.train_score).c_str(),
                  score(e.valid_score).c_str(), score(e.test_score).c_str(), seconds);
  else
    std::snprintf(line, sizeof line, "epoch %4d  loss %.4f  not evaluated  time %.4fs", e.epoch,
                  e.train_loss, seconds);
  return line;
}

/// bytes as "12.3 MiB".
inline std::string format_mib(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MiB", bytes / 1048576.0);
  return text;
}

/// The outcome of a training run so far (what a checkpoint keeps as its progress).
struct train_result {
  std::vector<epoch_stats> history;  ///< epochs 0, 1, ... in order
  int best_epoch = -1;      ///< highest validation score, ties to the lower validation loss
  /// Validation score at best_epoch.
  double best_valid_score = 0;
  double test_score = 0;      ///< at best_epoch
  // Early-stopping state (what a resumed run continues from).
  double best_valid_loss = INFINITY;    ///< at best_epoch
  double lowest_valid_loss = INFINITY;  ///< over every evaluation
  int stale_evaluations = 0;  ///< evaluations since the score or the loss last improved

  /// Epochs trained (the next epoch's number).
  int epochs_done() const { return static_cast<int>(history.size()); }

  /// Median of the per-epoch training times (0 without epochs).
  double median_epoch_seconds() const {
    std::vector<double> t;
    for (const auto& e : history) t.push_back(e.seconds);
    return median(std::move(t));
  }
};

/// Settings of the training loops (train_full_batch, train_minibatch).
struct train_options {
  /// Epochs to train (unless patience stops earlier).
  int epochs = 200;
  /// Stop when neither the validation score nor the validation loss has improved for this
  /// many epochs (the GAT paper's rule); 0 = run every epoch.
  int patience = 0;
  std::uint64_t seed = 0;   ///< keys dropout (with the epoch and layer)
  bool log_progress = true; ///< one line per epoch through sar::log_info
  std::string csv_log{};     ///< if set, one CSV row per epoch is written there
  /// Evaluate after every N-th epoch and after the last; 0 = never (the scores are then
  /// not measured: epoch_stats::evaluated is false, train_result::best_epoch stays -1).
  /// `patience` counts evaluations.
  int evaluate_every = 1;
  /// A training loss above this (or not finite) stops training with sar::numeric_error: the
  /// run diverged (cross-entropy starts near ln(classes)).
  double max_loss = 1e4;
  /// Continue an earlier run from its result so far (checkpoint::progress,
  /// sar/train/checkpoint.hpp): training starts at epoch resume->epochs_done() with its
  /// history (also rewritten to csv_log) and early-stopping state. The model and optimiser
  /// must hold that run's state then (restore_checkpoint). nullptr: a new run.
  const train_result* resume = nullptr;
  /// Called on every rank after each epoch is recorded (after on_epoch), with the result so
  /// far; may make collective calls (e.g. save_checkpoint every N epochs).
  std::function<void(const train_result&)> after_epoch{};

  /// Whether `epoch` (0-based) ends with an evaluation.
  bool evaluates(int epoch) const {
    return evaluate_every > 0 && ((epoch + 1) % evaluate_every == 0 || epoch + 1 == epochs);
  }
};

/// model.forward(graph, ctx, x) on sparse input features. Throws sar::invalid_argument for a
/// model without it (a sequential<...>: sparse features need a dynamic_sequential).
template <class Model, class Graph, class T>
const matrix<T>& forward_sparse(Model& model, Graph& graph, const layer_context& ctx,
                                const sparse_rows<T>& x) {
  if constexpr (requires { model.forward(graph, ctx, x); })
    return model.forward(graph, ctx, x);
  else
    throw invalid_argument("sar: sparse input features need a dynamic_sequential model "
                           "(sar/nn/any_layer.hpp)");
}

/// The data of the local nodes: features (num_local x input_dim), what the model is trained
/// to predict (labels, or targets for regression and multi-label tasks), split.
template <class T>
struct node_data {
  /// Features of the local nodes (num_local x input_dim), read where they are (a matrix or an
  /// Eigen::Map of the caller's row-major memory: no copy). A view: the memory must outlive
  /// the node_data (a temporary matrix does not).
  const_rows_ref<T> features;
  /// classify: the label of each local node (-1 = unlabelled).
  std::span<const std::int32_t> labels{};
  /// Split of each local node.
  std::span<const node_split> split{};
  /// What the outputs are trained to match (sar/nn/task.hpp).
  task_kind task = task_kind::classify;
  /// regress / multilabel: the local nodes' targets (num_local x the model's outputs), read
  /// where they are.
  Eigen::Map<const matrixf> targets{nullptr, 0, 0};
  /// regress: per output, the deviation the targets were divided by when standardised, so
  /// RMSE and MAE are reported in the original units (empty: 1).
  std::span<const double> target_scale{};
  /// Sparse input features instead (sar/core/sparse_rows.hpp; then `features` is ignored and
  /// may be empty), or null. Same shape; must outlive the node_data. A dynamic_sequential
  /// whose first layers read them (reads_sparse_input()) trains on them as on the dense.
  const sparse_rows<T>* sparse_features = nullptr;
  /// Or the features stored as bf16 (sar/core/bf16.hpp; then `features` is ignored and may be
  /// empty), or null. Same shape; must outlive the node_data. A dynamic_sequential whose first
  /// layers read them (reads_bf16_input(): a GCN on one process) decodes rows as it reads
  /// them; otherwise each forward decodes them into a matrix the model takes over (its input
  /// dropout, or a first layer writing its output over its input, reuses that buffer). Either
  /// way the numbers are bitwise those of training on the decoded features.
  const bf16_rows* bf16_features = nullptr;

  /// Rows of the features (dense, sparse or bf16).
  Eigen::Index feature_rows() const {
    if (sparse_features != nullptr) return sparse_features->rows();
    if (bf16_features != nullptr) return bf16_features->rows();
    return features.rows();
  }
  /// The model's output for these features: model.forward on the sparse, bf16 (decoded) or
  /// dense ones.
  template <class Model, class Graph>
  const matrix<T>& forward(Model& model, Graph& graph, const layer_context& ctx) const {
    if (sparse_features != nullptr) return forward_sparse(model, graph, ctx, *sparse_features);
    if (bf16_features != nullptr) {
      if constexpr (requires { model.reads_bf16_input(); })
        if (model.reads_bf16_input()) return model.forward(graph, ctx, *bf16_features);
      return model.forward(graph, ctx, bf16_features->decoded<T>());
    }
    return model.forward(graph, ctx, features);
  }

  /// The task these data define (a view of them).
  node_task node_targets() const {
    return {.kind = task, .labels = labels, .targets = targets, .scale = target_scale};
  }
};

namespace detail {
/// The end of an epoch in both training loops: the peak memory, the history and best epoch
/// (highest validation score, ties to the lower validation loss), the progress line, the
/// CSV row (train_options::csv_log; with_sampling adds the minibatch loop's sampling and
/// gather times; the score fields are empty if not evaluated), on_epoch, and the patience
/// rule (stop after `patience` evaluations in which neither the validation score nor the
/// validation loss improved; 0 = never) and after_epoch.
class epoch_recorder {
 public:
  /// The result to continue (options.resume's, else empty). Writes the CSV log (unless
  /// options.csv_log is empty: sar::output_file, replaced whole after every epoch) with its
  /// header and the rows of a resumed history.
  /// Throws sar::io_error naming `where` if it cannot be written, sar::invalid_argument for a
  /// resumed history whose epochs are not 0, 1, ...
  /// `score` names the score columns ("acc": train_acc, valid_acc, test_acc).
  epoch_recorder(const train_options& options, const char* where, bool with_sampling,
                 const std::function<void(const epoch_stats&)>& on_epoch,
                 const std::string& score = "acc")
      : options_(options), with_sampling_(with_sampling), on_epoch_(on_epoch) {
    if (options.resume) {
      result_ = *options.resume;
      for (int e = 0; e < result_.epochs_done(); ++e)
        SAR_CHECK(result_.history[static_cast<std::size_t>(e)].epoch == e, invalid_argument,
                  where, ": the resumed history's entry ", e, " is epoch ",
                  result_.history[static_cast<std::size_t>(e)].epoch);
    }
    if (options.csv_log.empty()) return;
    csv_.emplace(options.csv_log, message(where, ": csv log"));
    csv_text_ << "epoch,train_loss,valid_loss,train_" << score << ",valid_" << score << ",test_"
              << score << ",epoch_seconds,"
              << (with_sampling ? "sampling_seconds,gather_seconds," : "")
              << "peak_memory_bytes\n";
    for (const auto& stats : result_.history) add_row(stats);
    csv_->write(csv_text_.view());
  }

  /// The first epoch to train, and whether to train `epoch` (below options.epochs and the
  /// patience not exhausted).
  int first_epoch() const { return result_.epochs_done(); }
  bool trains(int epoch) const {
    return epoch < options_.epochs &&
           (options_.patience == 0 || result_.stale_evaluations < options_.patience);
  }

  /// Finishes stats (peak memory), records it in the result, logs it (the progress line,
  /// then `detail` before the peak), writes its CSV row, calls on_epoch and after_epoch.
  void finish(epoch_stats& stats, const std::string& detail) {
    stats.peak_memory_bytes = peak_memory_bytes();
    train_result& r = result_;
    r.history.push_back(stats);
    if (stats.evaluated) {
      // Without validation nodes (NaN) the latest evaluation is the best, and never stale.
      const bool unmeasured = std::isnan(stats.valid_score);
      const bool better = unmeasured || r.best_epoch < 0 || stats.valid_score > r.best_valid_score ||
                          (stats.valid_score == r.best_valid_score &&
                           stats.valid_loss < r.best_valid_loss);
      if (better) {
        r.best_epoch = stats.epoch;
        r.best_valid_score = stats.valid_score;
        r.best_valid_loss = stats.valid_loss;
        r.test_score = stats.test_score;
      }
      const bool improved = unmeasured || better || stats.valid_loss < r.lowest_valid_loss;
      r.lowest_valid_loss = std::min(r.lowest_valid_loss, stats.valid_loss);
      r.stale_evaluations = improved ? 0 : r.stale_evaluations + 1;
    }

    if (options_.log_progress)
      log_info(message(epoch_line(stats, stats.seconds), detail, "  peak ",
                       format_mib(static_cast<double>(stats.peak_memory_bytes))));
    if (csv_) {
      add_row(stats);
      csv_->write(csv_text_.view());
    }
    if (on_epoch_) on_epoch_(stats);
    if (options_.after_epoch) options_.after_epoch(r);
  }

  train_result& result() { return result_; }

 private:
  void add_row(const epoch_stats& stats) {
    std::ostringstream& csv = csv_text_;
    csv << stats.epoch << ',' << stats.train_loss << ',';
    if (stats.evaluated)
      csv << stats.valid_loss << ',' << stats.train_score << ',' << stats.valid_score << ','
          << stats.test_score << ',';
    else
      csv << ",,,,";
    csv << stats.seconds << ',';
    if (with_sampling_) csv << stats.sampling_seconds << ',' << stats.gather_seconds << ',';
    csv << stats.peak_memory_bytes << '\n';
  }

  const train_options& options_;
  bool with_sampling_;
  const std::function<void(const epoch_stats&)>& on_epoch_;
  std::optional<output_file> csv_;
  std::ostringstream csv_text_;  // everything written so far
  train_result result_;
};

/// The loss's normalisers of the training and validation splits of `split` (the local nodes)
/// over all ranks: task.normaliser of their node counts for outputs of `width`. Throws
/// sar::invalid_argument naming `where` when no rank has a training node. Collective.
template <class Graph>
std::pair<double, double> loss_normalisers(Graph& graph, std::span<const node_split> split,
                                           const node_task& task, Eigen::Index width,
                                           const char* where) {
  const auto n = static_cast<Eigen::Index>(split.size());
  double counts[2] = {static_cast<double>(node_selection{split, node_split::train}.count(n)),
                      static_cast<double>(node_selection{split, node_split::valid}.count(n))};
  graph.all_reduce_sum(std::span<double>(counts));
  SAR_CHECK(counts[0] > 0, invalid_argument, where, ": no training node on any rank");
  return {task.normaliser(counts[0], width), task.normaliser(counts[1], width)};
}

/// Throws sar::invalid_argument naming `where` for options outside their domain.
inline void check_train_options(const train_options& options, const char* where) {
  SAR_CHECK(options.epochs >= 1, invalid_argument, where, ": epochs ", options.epochs,
            " (>= 1)");
  SAR_CHECK(options.patience >= 0, invalid_argument, where, ": patience ", options.patience,
            " (>= 0)");
  SAR_CHECK(options.evaluate_every >= 0, invalid_argument, where, ": evaluate_every ",
            options.evaluate_every, " (>= 0; 0 = never)");
  SAR_CHECK(options.patience == 0 || options.evaluate_every > 0, invalid_argument, where,
            ": patience ", options.patience, " needs evaluations (evaluate_every is 0)");
  SAR_CHECK(options.max_loss > 0, invalid_argument, where, ": max_loss ", options.max_loss,
            " (> 0)");
}

/// Throws sar::numeric_error naming `where`, the epoch and the minibatch (if >= 0) unless
/// the training loss is finite and at most options.max_loss. Every rank sees the same
/// (all-reduced) loss, so every rank throws alike.
inline void check_loss(double loss, const train_options& options, const char* where, int epoch,
                       std::int64_t minibatch = -1) {
  SAR_CHECK(std::isfinite(loss) && loss <= options.max_loss, numeric_error, where,
            ": training loss is ", loss, " at epoch ", epoch,
            minibatch >= 0 ? message(", minibatch ", minibatch) : std::string(),
            std::isfinite(loss) ? message(", above the bound ", options.max_loss,
                                          " (train_options::max_loss, sar-train --max-loss): "
                                          "training diverged; lower the learning rate")
                                : std::string());
}

/// The task's metric sums of `outputs` (rows = nodes of `split`) per split (train, valid,
/// test), then the validation loss (valid_normaliser: the loss's normaliser of the validation
/// split over all ranks; 0 without validation nodes). Every entry is a sum over nodes, so the
/// sums of disjoint row ranges add up to those of all rows.
template <class T>
std::vector<double> evaluation_sums(const matrix<T>& outputs, std::span<const node_split> split,
                                    const node_task& task, double valid_normaliser) {
  std::vector<double> sums;
  for (node_split which : {node_split::train, node_split::valid, node_split::test}) {
    const std::vector<double> split_sums = task.metric_sums(outputs, node_selection{split, which});
    sums.insert(sums.end(), split_sums.begin(), split_sums.end());
  }
  matrix<T> unused;
  sums.push_back(valid_normaliser > 0
                     ? task.loss(outputs, node_selection{split, node_split::valid},
                                 valid_normaliser, unused)
                     : 0.0);
  return sums;
}

/// The scores and validation loss of evaluation_sums added over every node (all ranks) into
/// stats (`width`: the model's outputs).
inline void score_evaluation(std::span<const double> sums, const node_task& task,
                             Eigen::Index width, double valid_normaliser, epoch_stats& stats) {
  const std::size_t per_split = (sums.size() - 1) / 3;
  // A split without nodes is not measured: NaN ("n/a" in the progress line, null in JSON).
  double* scores[] = {&stats.train_score, &stats.valid_score, &stats.test_score};
  for (std::size_t s = 0; s < 3; ++s)
    *scores[s] = task.score(sums.subspan(s * per_split, per_split), width);
  stats.valid_loss = valid_normaliser > 0 ? sums.back() : NAN;
  stats.evaluated = true;
}

/// evaluation_sums over all ranks (one all-reduce), then score_evaluation. Collective.
template <class T, class Schedule>
void evaluate(Schedule& graph, const matrix<T>& outputs, const node_data<T>& data,
              const node_task& task, double valid_normaliser, epoch_stats& stats) {
  std::vector<double> sums = evaluation_sums(outputs, data.split, task, valid_normaliser);
  graph.all_reduce_sum(std::span<double>(sums));
  score_evaluation(sums, task, outputs.cols(), valid_normaliser, stats);
}
}  // namespace detail

/// Trains `model` (sequential<...> or dynamic_sequential) with `optimiser` (sgd, adam, adamw)
/// on the nodes of `graph`, for the task of `data` (classify: labels; regress, multilabel:
/// targets of model.output_dim() columns). Requires data.features (or data.sparse_features,
/// or data.bf16_features): graph.num_destinations() x model.input_dim(), labels or targets
/// and split of graph.num_destinations() rows, at least one training node over all ranks.
/// `on_epoch` (optional) sees every epoch's statistics. Throws sar::invalid_argument for
/// options outside their domain, sar::numeric_error when the training loss is not finite or
/// above options.max_loss (on every rank alike: the loss is all-reduced), and whatever the
/// layers throw. Collective.
template <class Model, class Schedule, class Optimiser, class T = typename Model::scalar>
train_result train_full_batch(Model& model, Schedule& graph, Optimiser& optimiser,
                              const node_data<T>& data, const train_options& options,
                              const std::function<void(const epoch_stats&)>& on_epoch = {}) {
  constexpr const char* where = "sar::train_full_batch";
  const node_t n = graph.num_destinations();
  SAR_CHECK(data.feature_rows() == n && data.split.size() == static_cast<std::size_t>(n),
            invalid_argument, where, ": ", n, " local nodes but ", data.feature_rows(),
            " feature rows, ", data.split.size(), " split entries");
  const node_task task = data.node_targets();
  const Eigen::Index width = model.output_dim();
  task.check(n, width, where);
  const auto [train_normaliser, valid_normaliser] =
      detail::loss_normalisers(graph, data.split, task, width, where);

  detail::check_train_options(options, where);
  detail::epoch_recorder recorder(options, where, false, on_epoch, score_name(task.kind));

  matrix<T> doutputs;
  auto params = model.parameters().grads();
  for (int epoch = recorder.first_epoch(); recorder.trains(epoch); ++epoch) {
    epoch_stats stats;
    stats.epoch = epoch;
    layer_context ctx{.training = true, .seed = options.seed,
                      .epoch = static_cast<std::uint64_t>(epoch)};
    const auto start = std::chrono::steady_clock::now();
    const matrix<T>& outputs = data.forward(model, graph, ctx);
    double loss = task.loss(outputs, node_selection{data.split, node_split::train},
                            train_normaliser, doutputs);
    model.backward(graph, ctx, doutputs);
    graph.all_reduce_sum(params);
    optimiser.step(model.parameters());
    stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    graph.all_reduce_sum(std::span<double>(&loss, 1));
    detail::check_loss(loss, options, where, epoch);
    stats.train_loss = loss;

    if (options.evaluates(epoch)) {
      ctx.training = false;
      detail::evaluate(graph, data.forward(model, graph, ctx), data, task,
                       valid_normaliser, stats);
    }
    recorder.finish(stats, "");
  }
  return std::move(recorder.result());
}

}  // namespace sar

// Linked with the library sar-models: its instances are declared extern here, compiled there.
#include "sar/train/compiled_models.hpp"
#if defined(SAR_USE_COMPILED_MODELS) || defined(SAR_USE_COMPILED_DISTRIBUTED_MODELS)
#include "sar/nn/any_layer.hpp"
#include "sar/optim/adam.hpp"
#endif
/// train_full_batch's instance for make_model's models of (T, Schedule) with Adam: declared
/// with `extern` as prefix, else defined.
#define SAR_TRAIN_FULL_BATCH_INSTANCE(prefix, T, Schedule)                                 \
  prefix template train_result                                                            \
  train_full_batch<dynamic_sequential<T, Schedule>, Schedule, adam<T>, T>(                \
      dynamic_sequential<T, Schedule>&, Schedule&, adam<T>&, const node_data<T>&,         \
      const train_options&, const std::function<void(const epoch_stats&)>&);
namespace sar {
SAR_EXTERN_COMPILED_MODELS(SAR_TRAIN_FULL_BATCH_INSTANCE)
}  // namespace sar
