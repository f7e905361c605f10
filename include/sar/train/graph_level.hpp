// Graph-level training (graph_classify, graph_regress) on a collection of graphs
// (sar/graph/graph_collection.hpp), as PyG's DataLoader over a TUDataset runs it: each epoch
// the training graphs in a seeded order, cut into minibatches of B graphs; a minibatch is one
// block-diagonal graph that every layer runs on unchanged; a readout (sar/nn/readout.hpp) pools
// each graph's rows; a head maps the pooled rows to the task's outputs.
//
// The model is ONE dynamic_sequential run on a layered graph (graph_batch_graph): the family's
// stack of graph layers (make_model, to `hidden` columns) on the batch's graph, relu, the
// readout on the batch's membership (nodes -> graphs), then the head linear, relu, dropout,
// linear on the graphs' rows (PyG's GIN example: MLP([hidden, hidden, outputs])).
//
// Data parallel on P ranks (every rank holds the collection): each rank takes a contiguous
// share of each minibatch, the loss and gradients are sums over the whole minibatch divided by
// its size, all-reduced; batch norm's statistics are all-reduced through the schedules'
// replica hook, and dropout is keyed by the collection's node and graph ids and the step. The
// same minibatches, the same losses and the same model on any rank count.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "sar/comm/communicator.hpp"
#include "sar/core/error.hpp"
#include "sar/core/log.hpp"
#include "sar/core/task_kind.hpp"
#include "sar/core/types.hpp"
#include "sar/graph/builders.hpp"
#include "sar/graph/graph_collection.hpp"
#include "sar/nn/activations.hpp"
#include "sar/nn/any_layer.hpp"
#include "sar/nn/dropout.hpp"
#include "sar/nn/linear.hpp"
#include "sar/nn/readout.hpp"
#include "sar/nn/task.hpp"
#include "sar/schedule/local_schedule.hpp"
#include "sar/train/model_file.hpp"
#include "sar/train/models.hpp"

namespace sar {

/// A batch of graphs as the layered graph (sar/schedule/schedule.hpp) a graph-level model runs
/// on: blocks [0, graph_blocks) are the batch's graph, block graph_blocks its membership
/// (nodes -> graphs); levels [0, graph_blocks] are its node rows, the last level its graphs.
/// Rows carry the collection's ids (dropout keys on them).
class graph_batch_graph {
 public:
  /// The schedule of every block and level.
  using schedule_type = local_schedule;

  /// For a model whose layers before the readout read neighbours `graph_blocks` times.
  graph_batch_graph(const graph_batch& b, std::size_t graph_blocks)
      : blocks_(graph_blocks),
        graph_(rows_of(b.graph, b.ids, b.edge_features)),
        membership_(rows_of(b.membership(), b.ids)),
        nodes_(rows_of(edgeless(b.num_nodes()), b.ids)),
        graphs_(rows_of(edgeless(b.num_graphs()), b.graphs)) {}

  /// Blocks: the graph graph_blocks times, then the membership.
  std::size_t num_blocks() const { return blocks_ + 1; }
  /// Block j.
  local_schedule& block(std::size_t j) { return j < blocks_ ? graph_ : membership_; }
  /// Level j: the node rows up to the readout, then the graphs.
  local_schedule& level(std::size_t j) { return j <= blocks_ ? nodes_ : graphs_; }
  /// Data parallel: statistics (batch norm) summed over the ranks' shares with `sum`.
  void sum_over_replicas(const std::function<void(std::span<double>)>& sum) {
    for (local_schedule* s : {&graph_, &membership_, &nodes_, &graphs_}) s->sum_over_replicas(sum);
  }

 private:
  static sampled_block rows_of(csr edges, std::vector<node_t> ids, matrixf edge_features = {}) {
    sampled_block block;
    block.edges = std::move(edges);
    block.ids = std::move(ids);
    block.edge_features = std::move(edge_features);
    return block;
  }
  static csr edgeless(node_t rows) {
    csr c;
    c.num_rows = c.num_cols = rows;
    c.offsets.assign(static_cast<std::size_t>(rows) + 1, 0);
    return c;
  }

  std::size_t blocks_;
  local_schedule graph_, membership_, nodes_, graphs_;
};

/// Puts c's graph in the form a model of `config` trains on: its family's self-loops (GCN's
/// A + I; an added loop's edge features are the family's fill). A loop joins no two graphs.
/// Throws sar::invalid_argument for an unknown family.
inline void prepare_graph_collection(graph_collection& c, const model_config& config) {
  with_family(config.family, [&]<class F>() {
    apply_self_loops(c.graph, c.edge_features, F::self_loops, 0, F::added_loop_edge_value);
  }, "sar::prepare_graph_collection");
}

/// The graph-level model of `c` for `features` inputs and `outputs` outputs per graph (see the
/// top of this file), initialised from `seed`. Throws sar::invalid_argument as make_model does,
/// or for a family that cannot run on a batch's blocks (its minibatch_refusal) or reads a
/// heterogeneous graph's types.
template <class T>
dynamic_sequential<T, local_schedule> make_graph_model(const model_config& c, readout_kind r,
                                                       Eigen::Index features,
                                                       Eigen::Index outputs, std::uint64_t seed) {
  constexpr const char* where = "sar::make_graph_model";
  const std::string refusal = minibatch_refusal(c);
  SAR_CHECK(refusal.empty() && !reads_graph_types(c), invalid_argument, where, ": --model ",
            c.family, " cannot run on a batch of graphs",
            refusal.empty() ? " (it reads node types)" : message(" (", refusal, ")"));
  SAR_CHECK(outputs >= 1, invalid_argument, where, ": ", outputs, " outputs");
  // The family's stack, built where make_model is compiled once (sar/train/compiled_models.hpp);
  // its layers move into this model, which declares them again in its own store.
  auto stack = make_model<T, local_schedule>(c, features, c.hidden, seed);
  std::vector<any_layer<T, local_schedule>> layers;
  for (std::size_t k = 0; k < stack.size(); ++k) layers.push_back(std::move(stack.layer(k)));
  const Eigen::Index width = layers.back().output_dim();
  layers.emplace_back(relu<T>(width));
  layers.emplace_back(readout<T>(r, width));
  layers.emplace_back(linear<T>(width, c.hidden, {.name = "head.0"}));
  layers.emplace_back(relu<T>(c.hidden));
  if (c.dropout > 0) layers.emplace_back(dropout<T>(c.hidden, c.dropout));
  layers.emplace_back(linear<T>(c.hidden, outputs, {.name = "head.1"}));
  dynamic_sequential<T, local_schedule> model(std::move(layers));
  model.initialise(seed);
  return model;
}

/// The parameter values of make_graph_model's model (c, r, features, outputs): the family's
/// stack to c.hidden columns, the readout's gate (attention) and the head.
inline double graph_model_parameters(const model_config& c, readout_kind r, Eigen::Index features,
                                     Eigen::Index outputs) {
  const double h = static_cast<double>(c.hidden), k = static_cast<double>(outputs);
  const double stack =
      estimate_model_memory(c, static_cast<double>(features), h, 0, 1.0).parameters / 4;
  return stack + (r == readout_kind::attention ? h : 0.0) + h * h + h + h * k + k;
}

/// The graph-level model `saved` describes (make_graph_model's, of its readout) with its
/// parameters and layer state (bitwise those written when T is the file's scalar type). Not
/// collective. Throws sar::invalid_argument for a model of nodes or links, or naming what of
/// the file does not fit the architecture (checked before the architecture is allocated).
template <class T>
dynamic_sequential<T, local_schedule> load_graph_model(const saved_model& saved) {
  constexpr const char* where = "sar::load_graph_model";
  const model_description& d = saved.description;
  SAR_CHECK(!d.readout.empty(), invalid_argument, where, ": a ",
            d.decoder.empty() ? task_name(d.task) : "link", " model, not a graph-level one "
            "(sar::load_model loads it)");
  const readout_kind r = parse_readout(d.readout);
  const double values = graph_model_parameters(d.config, r, d.input_dim, d.output_dim);
  SAR_CHECK(values == static_cast<double>(saved.values.size()), invalid_argument, where,
            ": the file holds ", saved.values.size(), " parameter values, its architecture (",
            d.config.family, ", ", d.config.layers, " layers, hidden ", d.config.hidden, ", ",
            d.readout, " readout, ", d.input_dim, " inputs, ", d.output_dim, " outputs) has ",
            values);
  auto model = make_graph_model<T>(d.config, r, d.input_dim, d.output_dim, /*seed=*/0);
  detail::checkpoints::check_fits(saved.parameters, saved.values.size(), saved.state, model,
                                  std::string(where) + ": the file");
  detail::checkpoints::put_into(model, saved.values, saved.state);
  return model;
}

/// How many times the layers of `model` (make_graph_model's) before its readout read
/// neighbours: the blocks of its graph_batch_graph before the membership.
template <class Model>
std::size_t graph_blocks_before_readout(const Model& model) {
  std::size_t blocks = 0;
  for (std::size_t k = 0; k < model.size(); ++k) blocks += model.layer(k).traits().reads_neighbours;
  return blocks - 1;  // the readout's
}

/// Settings of train_graph_level.
struct graph_train_options {
  int epochs = 100;           ///< epochs to train
  std::int64_t batch_graphs = 32;  ///< graphs per minibatch (over all ranks)
  std::uint64_t seed = 0;     ///< keys the order of the graphs and dropout
  bool log_progress = true;   ///< one line per epoch through sar::log_info (rank 0)
  double max_loss = 1e4;      ///< a larger (or non-finite) training loss stops: diverged
};

/// One epoch of train_graph_level.
struct graph_epoch {
  double train_loss = 0;   ///< mean over the epoch's minibatches (each the mean over its graphs)
  double valid_loss = 0;   ///< over the validation graphs, evaluation mode
  double valid_score = 0;  ///< the task's score (accuracy, R^2) on them
  /// Every metric of the test graphs, the score first (acc; r2, rmse, mae).
  std::vector<std::pair<std::string, double>> test;
  double seconds = 0;  ///< training: forward, backward, all-reduce and step
};

/// What train_graph_level returns.
struct graph_train_result {
  std::vector<graph_epoch> history;  ///< per epoch
  int best_epoch = -1;  ///< highest validation score, ties to the lower validation loss
  /// The median of the epochs' training seconds.
  double median_epoch_seconds() const {
    std::vector<double> t;
    for (const auto& e : history) t.push_back(e.seconds);
    return median(std::move(t));
  }
};

namespace detail {
/// This rank's contiguous share of `graphs` among `ranks` ranks.
inline std::span<const std::int64_t> share_of(std::span<const std::int64_t> graphs, int rank,
                                              int ranks) {
  const auto [begin, end] = contiguous_share(graphs.size(), rank, ranks);
  return graphs.subspan(begin, end - begin);
}

/// The targets of a batch as the task's view (labels or target rows; `scale`: regression's).
inline node_task batch_task(task_kind kind, const graph_batch& b, std::span<const double> scale) {
  return {.kind = kind,
          .labels = b.labels,
          .targets = {b.targets.data(), b.targets.rows(), b.targets.cols()},
          .scale = scale};
}

/// Graphs [first, first + size) of `list` (fewer at its end).
inline std::span<const std::int64_t> slice(std::span<const std::int64_t> list, std::size_t first,
                                           std::int64_t size) {
  return list.subspan(first, std::min(static_cast<std::size_t>(size), list.size() - first));
}

/// The model's input for batch b: its feature rows in T.
template <class T>
matrix<T> batch_input(const graph_batch& b) {
  if constexpr (std::is_same_v<T, float>) return b.features;
  else return b.features.template cast<T>();
}
}  // namespace detail

/// Trains `model` (make_graph_model's) on the split's training graphs of `c` with `optimiser`
/// for options.epochs epochs, evaluating the validation and test graphs after each. `scale`:
/// graph_regress's per-output factor of standardised targets (metrics in the original units;
/// empty: 1). on_epoch, if given, sees the result after each epoch (its best epoch's
/// parameters may be kept then). Collective over `comm` (data parallel; see the top of this
/// file): every rank passes the same collection, split and options. Throws
/// sar::invalid_argument for an empty training split or batch_graphs < 1, sar::numeric_error
/// when the training loss exceeds max_loss (diverged).
template <class T, communicator Comm, class Optimiser>
graph_train_result train_graph_level(dynamic_sequential<T, local_schedule>& model,
                                     const graph_collection& c, const graph_split& split,
                                     Optimiser& optimiser, const graph_train_options& o,
                                     Comm& comm, std::span<const double> scale = {},
                                     const std::function<void(const graph_train_result&)>&
                                         on_epoch = {}) {
  constexpr const char* where = "sar::train_graph_level";
  SAR_CHECK(!split.train.empty() && o.batch_graphs >= 1 && o.epochs >= 0, invalid_argument,
            where, ": ", split.train.size(), " training graphs, batches of ", o.batch_graphs,
            ", ", o.epochs, " epochs");
  const std::size_t graph_blocks = graph_blocks_before_readout(model);
  const Eigen::Index width = c.num_outputs();
  const std::function<void(std::span<double>)> sum_over_ranks = [&](std::span<double> v) {
    comm.all_reduce(v, reduce_op::sum);
  };
  // Runs the minibatch `graphs` (all ranks' graphs; this rank takes its share, perhaps none):
  // returns the loss summed over this rank's graphs / |graphs|, adds the metric sums to `sums`
  // if given, and when training takes the step.
  const auto run = [&](std::span<const std::int64_t> graphs, std::uint64_t step_key,
                       bool training, std::vector<double>* sums) {
    const graph_batch b = make_batch(c, detail::share_of(graphs, comm.rank(), comm.size()));
    graph_batch_graph g(b, graph_blocks);
    if (comm.size() > 1) g.sum_over_replicas(sum_over_ranks);
    const layer_context ctx{.training = training, .seed = o.seed, .epoch = step_key};
    const matrix<T>& outputs = model.forward(g, ctx, detail::batch_input<T>(b));
    const node_task task = detail::batch_task(c.task, b, scale);
    matrix<T> doutputs;
    const double loss =
        task.loss(outputs, node_selection{},
                  task.normaliser(static_cast<double>(graphs.size()), width), doutputs);
    if (sums) {
      const std::vector<double> s = task.metric_sums(outputs, node_selection{});
      for (std::size_t k = 0; k < s.size(); ++k) (*sums)[k] += s[k];
    }
    if (training) {
      model.backward(g, ctx, doutputs);
      if (comm.size() > 1) comm.all_reduce(model.parameters().grads(), reduce_op::sum);
      optimiser.step(model.parameters());
    }
    return loss;
  };
  // Loss and metrics of a held-out list, in minibatches of batch_graphs.
  const auto evaluate = [&](const std::vector<std::int64_t>& graphs, std::uint64_t key) {
    // The task's view of no graph (no labels, 0 x width targets): the figures' names.
    const node_task view{
        .kind = c.task, .labels = {}, .targets = {nullptr, 0, width}, .scale = scale};
    // The metric sums start as those of no graph: zeros, as many as the task keeps.
    std::vector<double> sums = view.metric_sums(matrix<T>(0, width), node_selection{});
    double loss = 0;
    for (std::size_t first = 0; first < graphs.size();
         first += static_cast<std::size_t>(o.batch_graphs)) {
      const auto batch = detail::slice(graphs, first, o.batch_graphs);
      loss += run(batch, key, false, &sums) * static_cast<double>(batch.size());
    }
    std::vector<double> totals{loss};  // the loss, then the metric sums
    totals.insert(totals.end(), sums.begin(), sums.end());
    comm.all_reduce(std::span<double>(totals), reduce_op::sum);
    const std::span<const double> metric(totals.data() + 1, totals.size() - 1);
    return std::pair{graphs.empty() ? std::numeric_limits<double>::quiet_NaN()
                                    : totals[0] / static_cast<double>(graphs.size()),
                     view.named_metrics(metric, width)};
  };

  graph_train_result result;
  const auto per_epoch = static_cast<std::int64_t>(
      (split.train.size() + static_cast<std::size_t>(o.batch_graphs) - 1) /
      static_cast<std::size_t>(o.batch_graphs));
  double best_score = -std::numeric_limits<double>::infinity(), best_loss = 0;
  for (int epoch = 0; epoch < o.epochs; ++epoch) {
    graph_epoch e;
    const auto started = std::chrono::steady_clock::now();
    const std::vector<std::int64_t> order = shuffled_graphs(
        split.train, o.seed, graph_order::epoch, static_cast<std::uint64_t>(epoch));
    for (std::int64_t b = 0; b < per_epoch; ++b) {
      const std::size_t first = static_cast<std::size_t>(b * o.batch_graphs);
      const auto batch = detail::slice(order, first, o.batch_graphs);
      double loss = run(batch, static_cast<std::uint64_t>(epoch * per_epoch + b), true, nullptr);
      comm.all_reduce(std::span<double>(&loss, 1), reduce_op::sum);
      SAR_CHECK(std::isfinite(loss) && loss <= o.max_loss, numeric_error, where,
                ": the training loss ", loss, " at epoch ", epoch, ", minibatch ", b,
                " exceeds ", o.max_loss, ": training diverged (lower the learning rate)");
      e.train_loss += loss / static_cast<double>(per_epoch);
    }
    e.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    const auto key = static_cast<std::uint64_t>(epoch + 1) * static_cast<std::uint64_t>(per_epoch);
    const auto [valid_loss, valid_metrics] = evaluate(split.valid, key);
    e.valid_loss = valid_loss;
    e.valid_score = valid_metrics.front().second;
    e.test = evaluate(split.test, key).second;
    const bool better = e.valid_score > best_score ||
                        (e.valid_score == best_score && e.valid_loss < best_loss) ||
                        result.best_epoch < 0;
    if (better) {
      best_score = e.valid_score;
      best_loss = e.valid_loss;
      result.best_epoch = epoch;
    }
    if (o.log_progress && comm.rank() == 0)
      log_info(message("epoch ", epoch, ": train loss ", e.train_loss, ", valid loss ",
                       e.valid_loss, ", valid ", valid_metrics.front().first, " ", e.valid_score,
                       ", test ", e.test.front().first, " ", e.test.front().second, " (",
                       e.seconds, " s)"));
    result.history.push_back(std::move(e));
    if (on_epoch) on_epoch(result);
  }
  return result;
}

/// The outputs of `model` (make_graph_model's or load_graph_model's) for `graphs` of `c` (as
/// prepare_graph_collection put it for the model's family), in evaluation mode, in minibatches
/// of batch_graphs: row k for graphs[k] (graph_regress's in the units the model was trained
/// on). Not collective. Throws sar::invalid_argument for batch_graphs < 1, node features of
/// another width than the model's, or a graph outside c.
template <class T>
matrix<T> predict_graphs(dynamic_sequential<T, local_schedule>& model, const graph_collection& c,
                         std::span<const std::int64_t> graphs, std::int64_t batch_graphs = 256) {
  constexpr const char* where = "sar::predict_graphs";
  SAR_CHECK(batch_graphs >= 1, invalid_argument, where, ": batches of ", batch_graphs);
  SAR_CHECK(c.features.cols() == model.input_dim(), invalid_argument, where, ": the model takes ",
            model.input_dim(), " features per node, ", c.name, " has ", c.features.cols());
  for (const std::int64_t g : graphs)
    SAR_CHECK(g >= 0 && g < c.num_graphs(), invalid_argument, where, ": graph ", g, " of ",
              c.num_graphs());
  const std::size_t graph_blocks = graph_blocks_before_readout(model);
  matrix<T> out(static_cast<Eigen::Index>(graphs.size()), model.output_dim());
  for (std::size_t first = 0; first < graphs.size();
       first += static_cast<std::size_t>(batch_graphs)) {
    const auto batch = detail::slice(graphs, first, batch_graphs);
    const graph_batch b = make_batch(c, batch);
    graph_batch_graph g(b, graph_blocks);
    out.middleRows(static_cast<Eigen::Index>(first), static_cast<Eigen::Index>(batch.size())) =
        model.forward(g, layer_context{.training = false}, detail::batch_input<T>(b));
  }
  return out;
}

}  // namespace sar
