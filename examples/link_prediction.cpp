// One idea: link prediction on one process. Hold out 5% / 10% of a graph's edges (removed
// from the graph the model passes messages on, with negatives that are no edges), train a GCN
// encoder with a dot-product decoder on the remaining edges, and report AUC, Hits@50 and MRR
// as OGB's evaluators compute them (docs/link-prediction.md).
#include <cstdio>

#include "sar/graph/builders.hpp"
#include "sar/graph/edge_split.hpp"
#include "sar/graph/generators.hpp"
#include "sar/schedule/local_schedule.hpp"
#include "sar/train/link_prediction.hpp"
#include "sar/train/models.hpp"

int main() {
  sar::graph_dataset data = sar::make_planted_partition(
      {.num_nodes = 3000, .num_classes = 16, .average_degree = 8, .homophily = 0.9,
       .feature_dim = 32});
  const sar::link_split split = sar::split_edges(
      data, {.valid = 0.05, .test = 0.10, .per_source_negatives = 50, .seed = 1});
  sar::local_schedule graph(sar::with_self_loops(data.graph, sar::self_loop_policy::add));

  sar::model_config config = sar::paper_defaults("gcn");
  config.hidden = 32;  // the embeddings' width
  config.dropout = 0;  // GAE's settings: no dropout, no weight decay
  config.weight_decay = 0;
  auto model = sar::make_model<float, sar::local_schedule>(config, data.features.cols(),
                                                           config.hidden, /*seed=*/1);
  auto optimiser = sar::make_optimiser(config, model);
  sar::link_head<sar::dot_decoder<float>, sar::adam<float>> head(
      {config.hidden, 1}, sar::adam<float>({.learning_rate = config.learning_rate}), 1);

  sar::train_options options;
  options.epochs = 100;
  options.log_progress = false;
  const sar::link_result result = sar::train_link_full_batch(
      model, head, graph, optimiser, sar::link_data_of<float>(split, {data.features}), options,
      sar::link_options{});
  std::printf("best epoch %d: test AUC %.3f, Hits@50 %.3f, MRR %.3f\n",
              result.training.best_epoch, result.test.auc,
              result.test.hits[1].second,  // link_options::hits_at: 20, 50, 100
              result.test.mrr);
  return result.test.auc > 0.5 ? 0 : 1;  // chance is 0.5
}
