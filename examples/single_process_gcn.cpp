// One idea: train a GCN on one process with nothing but the umbrella header (Eigen, oneTBB
// and Random123 only: no MPI, METIS or zlib). The graph is the built-in planted partition.
#include <cstdio>

#include "sar/sar.hpp"

int main() {
  const sar::graph_dataset data =
      sar::make_planted_partition({.num_nodes = 5000, .num_classes = 4, .feature_dim = 16});

  // GCN aggregates over A + I; the schedule holds the graph (one process: local_schedule).
  sar::local_schedule graph(sar::with_self_loops(data.graph, sar::self_loop_policy::add));

  const sar::model_config config = sar::paper_defaults("gcn");
  auto model = sar::make_model<float, sar::local_schedule>(config, data.features.cols(),
                                                           data.num_classes, /*seed=*/1);
  auto optimiser = sar::make_optimiser(config, model);

  sar::train_options options;
  options.epochs = 100;
  options.log_progress = false;
  const sar::train_result result = sar::train_full_batch(
      model, graph, optimiser, sar::node_data<float>{data.features, data.labels, data.split},
      options);
  std::printf("best epoch %d: validation accuracy %.3f, test accuracy %.3f\n", result.best_epoch,
              result.best_valid_score, result.test_score);
}
