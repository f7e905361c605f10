// sar-train: trains GCN, GraphSAGE or GAT on a dataset (an OGB raw directory, a graph file,
// or the built-in planted-partition graph) and reports per-epoch progress, the accuracy at
// the best validation epoch, epoch time and peak memory.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <tbb/task_arena.h>

#include "sar/core/log.hpp"
#include "sar/dist/schedule.hpp"
#include "sar/graph/io/load.hpp"
#include "sar/train/full_batch.hpp"
#include "sar/train/models.hpp"

namespace {

struct program_options {
  std::string dataset = "planted";
  sar::node_t nodes = 0;  // planted only; 0 = the generator's default
  std::string model = "gcn";
  std::string aggregator = "mean";
  std::string precision = "float";
  std::string normalise = "auto";
  std::uint64_t seed = 0;
  int threads = 0;
  std::string metrics_out, csv_log;
  bool quiet = false;
};

/// Divides every feature row by its sum (the GCN paper's preprocessing); zero rows stay zero.
void row_normalise(sar::matrixf& features) {
  for (Eigen::Index i = 0; i < features.rows(); ++i) {
    const float sum = features.row(i).sum();
    if (sum != 0) features.row(i) /= sum;
  }
}

template <class T>
nlohmann::json train(const program_options& p, const sar::model_config& config,
                     sar::graph_dataset& data) {
  const auto loops = config.kind == sar::model_kind::sage ? sar::self_loop_policy::keep
                                                          : sar::self_loop_policy::add;
  sar::local_schedule graph(sar::with_self_loops(data.graph, loops));
  data.graph = {};  // the schedule holds the graph now
  const sar::matrix<T> features = data.features.template cast<T>();
  data.features = {};
  auto model = sar::make_model<T, sar::local_schedule>(config, features.cols(),
                                                       data.num_classes, p.seed);
  auto optimiser = sar::make_optimiser(config, model);
  sar::train_options options{.epochs = config.epochs, .patience = config.patience,
                             .seed = p.seed, .log_progress = !p.quiet, .csv_log = p.csv_log};
  const auto result = sar::train_full_batch(
      model, graph, optimiser, sar::node_data<T>{features, data.labels, data.split}, options);

  nlohmann::json metrics;
  metrics["model"] = p.model;
  metrics["dataset"] = data.name;
  metrics["precision"] = p.precision;
  metrics["seed"] = p.seed;
  metrics["ranks"] = 1;
  metrics["schedule"] = "local";
  metrics["epochs"] = result.history.size();
  metrics["best_epoch"] = result.best_epoch;
  metrics["best_val_acc"] = result.best_valid_acc;
  metrics["test_acc"] = result.test_acc;
  metrics["epoch_seconds_median"] = result.median_epoch_seconds();
  metrics["peak_memory_bytes"] = sar::peak_memory_bytes();
  std::vector<double> losses;
  for (const auto& e : result.history) losses.push_back(e.train_loss);
  metrics["train_loss"] = losses;
  return metrics;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"sar-train: full-batch GNN training (GCN, GraphSAGE, GAT)"};
  program_options p;
  std::optional<int> layers, epochs, patience;
  std::optional<Eigen::Index> hidden, heads;
  std::optional<double> dropout, attention_dropout, learning_rate, weight_decay;
  bool batch_norm = false;
  app.add_option("--dataset", p.dataset,
                 "OGB raw directory, edge-list or .mtx file, or a generator spec: "
                 "planted[:nodes=N,classes=C,degree=D,features=F,...] or rmat[:scale=S,...]")
      ->capture_default_str();
  app.add_option("--nodes", p.nodes, "size of the built-in planted graph (with --dataset planted)");
  app.add_option("--model", p.model, "gcn | sage | gat")
      ->check(CLI::IsMember({"gcn", "sage", "gat"}))->capture_default_str();
  app.add_option("--aggregator", p.aggregator, "GraphSAGE aggregator: mean | gcn | pool")
      ->check(CLI::IsMember({"mean", "gcn", "pool"}))->capture_default_str();
  app.add_option("--epochs", epochs, "maximum epochs (default: gcn/sage 200, gat 1000)");
  app.add_option("--patience", patience,
                 "stop after this many epochs without a better validation accuracy or loss; 0 = "
                 "never (default: gat 100, else 0)");
  app.add_option("--layers", layers, "graph layers (default 2)")->check(CLI::PositiveNumber);
  app.add_option("--hidden", hidden, "hidden width, per head for GAT (default: gcn 16, sage 64, "
                 "gat 8)")->check(CLI::PositiveNumber);
  app.add_option("--heads", heads, "GAT heads in hidden layers (default 8)")
      ->check(CLI::PositiveNumber);
  app.add_option("--dropout", dropout, "dropout on every layer's input (default: gat 0.6, else 0.5)")
      ->check(CLI::Range(0.0, 0.99));
  app.add_option("--attention-dropout", attention_dropout, "GAT attention dropout (default 0.6)")
      ->check(CLI::Range(0.0, 0.99));
  app.add_option("--lr", learning_rate, "Adam learning rate (default: gat 0.005, else 0.01)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--weight-decay", weight_decay,
                 "L2 weight decay (default 5e-4; gcn: first layer only)")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--batch-norm", batch_norm, "batch normalisation after every hidden layer");
  app.add_option("--normalise-features", p.normalise,
                 "row-normalise features: auto (if all are non-negative) | on | off")
      ->check(CLI::IsMember({"auto", "on", "off"}))->capture_default_str();
  app.add_option("--precision", p.precision, "float | double")
      ->check(CLI::IsMember({"float", "double"}))->capture_default_str();
  app.add_option("--seed", p.seed, "seed of initialisation and dropout")->capture_default_str();
  app.add_option("--threads", p.threads, "worker threads (0 = all cores)")->capture_default_str();
  app.add_option("--metrics-out", p.metrics_out, "write a JSON summary to this file");
  app.add_option("--log-csv", p.csv_log, "write one CSV row per epoch to this file");
  app.add_flag("--quiet", p.quiet, "no per-epoch lines");
  CLI11_PARSE(app, argc, argv);

  try {
    auto config = sar::paper_defaults(p.model == "gcn"    ? sar::model_kind::gcn
                                      : p.model == "sage" ? sar::model_kind::sage
                                                          : sar::model_kind::gat);
    config.aggregation = p.aggregator == "mean"  ? sar::sage_aggregation::mean
                         : p.aggregator == "gcn" ? sar::sage_aggregation::gcn
                                                 : sar::sage_aggregation::pool;
    if (layers) config.layers = *layers;
    if (hidden) config.hidden = *hidden;
    if (heads) config.heads = *heads;
    if (dropout) config.dropout = *dropout;
    if (attention_dropout) config.attention_dropout = *attention_dropout;
    if (learning_rate) config.learning_rate = *learning_rate;
    if (weight_decay) config.weight_decay = *weight_decay;
    if (epochs) config.epochs = *epochs;
    if (patience) config.patience = *patience;
    config.batch_norm = batch_norm;

    std::string spec = p.dataset;
    if (p.nodes > 0) {
      if (spec != "planted" && !spec.starts_with("planted:"))
        throw sar::invalid_argument("--nodes applies only to --dataset planted");
      spec += (spec == "planted" ? ":" : ",") + std::string("nodes=") + std::to_string(p.nodes);
    }
    sar::log_info("loading " + spec + " ...");
    sar::graph_dataset data = sar::load_dataset(spec);
    SAR_CHECK(data.num_classes > 0 && !data.labels.empty() && !data.split.empty() &&
                  data.features.cols() > 0,
              sar::invalid_argument, "sar-train: dataset '", spec,
              "' has no features, labels or split to train on");
    if (p.normalise == "on" || (p.normalise == "auto" && data.features.minCoeff() >= 0))
      row_normalise(data.features);
    sar::log_info(sar::message("loaded ", data.name, ": ", data.num_nodes(), " nodes, ",
                               data.graph.num_edges(), " edges, ", data.features.cols(),
                               " features, ", data.num_classes, " classes, ",
                               data.count(sar::node_split::train), " training nodes"));

    tbb::task_arena arena(p.threads > 0 ? p.threads : tbb::task_arena::automatic);
    nlohmann::json metrics;
    arena.execute([&] {
      metrics = p.precision == "double" ? train<double>(p, config, data)
                                        : train<float>(p, config, data);
    });
    char line[200];
    std::snprintf(line, sizeof line,
                  "best epoch %d: val %.4f test %.4f; median epoch %.4fs; peak memory %.1f MiB",
                  metrics["best_epoch"].get<int>(), metrics["best_val_acc"].get<double>(),
                  metrics["test_acc"].get<double>(), metrics["epoch_seconds_median"].get<double>(),
                  metrics["peak_memory_bytes"].get<double>() / 1048576.0);
    sar::log_info(line);
    if (!p.metrics_out.empty()) {
      std::ofstream out(p.metrics_out);
      SAR_CHECK(out << metrics.dump(2) << '\n', sar::io_error, "sar-train: cannot write ",
                p.metrics_out);
    }
  } catch (const std::exception& e) {
    std::cerr << "sar-train: " << e.what() << '\n';
    return 1;
  }
}
