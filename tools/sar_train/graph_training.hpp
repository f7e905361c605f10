// sar-train --task graph-classify / graph-regress: a TU dataset (sar/graph/io/tu.hpp), its split
// (a split folder or a seeded stratified k-fold), the graph-level model and its training
// (sar/train/graph_level.hpp), data parallel over the ranks, the run's metrics, and with
// --save-model the model of the best validation epoch (sar-predict predicts with it).
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "sar/comm/mpi.hpp"
#include "sar/core/log.hpp"
#include "sar/core/memory.hpp"
#include "sar/graph/io/tu.hpp"
#include "sar/nn/task.hpp"
#include "sar/train/graph_level.hpp"
#include "sar/train/model_file.hpp"
#include "sar/train/models.hpp"
#include "sar/version.hpp"
#include "sar_train.hpp"

namespace sar_train {

/// The graphs the run trains, validates and tests on, and how it says so: --split NAME, the
/// dataset's one split folder, or fold --fold of --folds. Throws sar::invalid_argument for a
/// split the dataset does not have, several folders and no --split, or a k-fold the dataset
/// cannot make.
inline std::pair<sar::graph_split, std::string> graph_split_of(const program_options& p,
                                                               const sar::graph_collection& c) {
  const graph_settings& g = p.graphs;
  std::string names;
  for (const auto& [name, split] : c.splits) names += (names.empty() ? "" : ", ") + name;
  if (g.split_given || (!g.folds_given && !c.splits.empty())) {
    const std::string name =
        g.split_given ? p.link.split : c.splits.size() == 1 ? c.splits.begin()->first : "";
    SAR_CHECK(!name.empty(), sar::invalid_argument, "sar-train: ", p.dataset,
              "/split/ holds several splits (", names, "): pick one with --split, or make a "
              "k-fold with --folds and --fold");
    const auto found = c.splits.find(name);
    SAR_CHECK(found != c.splits.end(), sar::invalid_argument, "sar-train: --split ", name,
              ": ", p.dataset, "/split/ holds ", names.empty() ? "no split" : names);
    return {found->second, "split/" + name};
  }
  return {sar::k_fold_split(c, g.folds, g.fold, p.seed),
          sar::message("fold ", g.fold, " of ", g.folds, " (seed ", p.seed, ")")};
}

/// Trains a graph-level model on --dataset (a TU directory) and returns the run's metrics.
/// Collective: every rank reads the dataset and takes its share of each minibatch.
template <class T>
nlohmann::json train_graphs(const program_options& p, sar::model_config config,
                            sar::mpi_communicator& comm) {
  sar_programs::current_phase() = "loading " + p.dataset;
  SAR_CHECK(sar::is_tu_dataset(p.dataset), sar::invalid_argument, "sar-train: --task ",
            sar::task_name(*p.sizes.task), " reads a TU dataset directory DS holding DS_A.txt "
            "(and DS_graph_indicator.txt, ...); '", p.dataset, "' is not one");
  sar::graph_collection c = sar::read_tu_dataset(p.dataset, p.sizes.task);
  const auto [split, split_name] = graph_split_of(p, c);
  sar::log_info(sar::message("loaded ", c.name, ": ", c.num_graphs(), " graphs, ", c.num_nodes(),
                             " nodes, ", c.graph.num_edges(), " edges, ", c.features.cols(),
                             " node features, ", c.edge_features.cols(), " edge features, ",
                             sar_programs::outputs_summary(c.task, c.num_outputs()), "; ",
                             split_name, ": ", split.train.size(), " train, ", split.valid.size(),
                             " valid, ", split.test.size(), " test graphs"));
  config.edge_dim = c.edge_features.cols();
  sar::target_standardisation standard;
  if (!sar::has_class_ids(c.task) && !p.raw_targets) {
    std::vector<sar::node_split> of_graph(static_cast<std::size_t>(c.num_graphs()));
    for (const std::int64_t g : split.train)
      of_graph[static_cast<std::size_t>(g)] = sar::node_split::train;
    standard = sar::standardise_targets(c.targets, of_graph, [](std::span<double>) {});
  }
  sar::prepare_graph_collection(c, config);
  sar_programs::current_phase() = "building the model and training";
  auto model = sar::make_graph_model<T>(config, sar::parse_readout(p.graphs.readout),
                                        c.features.cols(), c.num_outputs(), p.seed);
  auto optimiser = sar::make_optimiser(config, model);
  best_parameters best(model);  // --save-model: the best validation epoch's
  std::function<void(const sar::graph_train_result&)> keep_best;
  if (!p.save_model.empty())
    keep_best = [&](const sar::graph_train_result& r) {
      best.keep_if_best(r.best_epoch, static_cast<int>(r.history.size()));
    };
  const sar::graph_train_result result = sar::train_graph_level(
      model, c, split, optimiser,
      {.epochs = config.epochs, .batch_graphs = p.graphs.batch_graphs, .seed = p.seed,
       .log_progress = !p.quiet, .max_loss = p.max_loss},
      comm, standard.scale, keep_best);

  nlohmann::json metrics;
  metrics["task"] = sar::task_name(c.task);
  metrics["dataset"] = c.name;
  metrics["model"] = config.family;
  sar::describe_family_settings(config, metrics);
  metrics["layers"] = config.layers;
  metrics["hidden"] = config.hidden;
  metrics["readout"] = p.graphs.readout;
  metrics["batch_graphs"] = p.graphs.batch_graphs;
  metrics["split"] = split_name;
  metrics["graphs"] = {{"train", split.train.size()}, {"valid", split.valid.size()},
                       {"test", split.test.size()}};
  metrics["ranks"] = comm.size();
  metrics["epochs"] = result.history.size();
  const std::string score = sar::score_name(c.task);
  if (result.best_epoch >= 0) {
    const sar::graph_epoch& best = result.history[static_cast<std::size_t>(result.best_epoch)];
    metrics["best_epoch"] = result.best_epoch;
    metrics["best_val_" + score] = best.valid_score;
    for (const auto& [name, value] : best.test) metrics["test_" + name] = value;
  } else {
    metrics["best_epoch"] = metrics["best_val_" + score] = metrics["test_" + score] = nullptr;
  }
  if (!standard.scale.empty()) {
    metrics["target_mean"] = standard.mean;
    metrics["target_scale"] = standard.scale;
  }
  std::vector<double> train_loss, valid_loss;
  for (const auto& e : result.history) {
    train_loss.push_back(e.train_loss);
    valid_loss.push_back(e.valid_loss);
  }
  metrics["train_loss"] = train_loss;
  metrics["valid_loss"] = valid_loss;
  metrics["epoch_seconds_median"] = result.median_epoch_seconds();
  std::int64_t peak = sar::peak_memory_bytes();
  comm.all_reduce(std::span<std::int64_t>(&peak, 1), sar::reduce_op::max);
  metrics["peak_memory_bytes"] = peak;
  if (!p.save_model.empty()) {
    best.restore();  // every rank kept the same
    nlohmann::json about = {{"dataset", c.name},
                            {"sar_version", SAR_VERSION_STRING},
                            {"split", split_name},
                            {"epochs", result.history.size()},
                            {"parameters_of_epoch", metrics["best_epoch"]},
                            {"best_val_" + score, metrics["best_val_" + score]}};
    for (const auto& [key, value] : metrics.items())
      if (key.starts_with("test_")) about[key] = value;
    if (!c.class_labels.empty()) about["class_labels"] = c.class_labels;  // of classes 0, 1, ...
    const sar::model_description description{
        .config = config, .input_dim = c.features.cols(), .output_dim = c.num_outputs(),
        .task = c.task, .targets = standard, .readout = p.graphs.readout, .about = about};
    sar::save_model(comm, p.save_model, model, description);
    if (comm.rank() == 0 && !p.quiet) sar::log_info("saved the model to " + p.save_model);
  }
  return metrics;
}

}  // namespace sar_train
