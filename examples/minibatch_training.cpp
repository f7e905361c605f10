// One idea: minibatch training on sampled neighbourhoods. Each step takes 256 training nodes
// (seeds), samples a GraphSAGE neighbourhood of 10 then 5 neighbours per node for the two
// layers, gathers the features of the sampled input nodes, and trains on that block alone;
// 8 minibatches are sampled at once by one sparse matrix product (bulk). Evaluation runs
// layer by layer over every node, so no step ever holds the whole graph's activations.
//
//   build/examples/minibatch-training [DATASET]    (default: the built-in planted graph;
//                                                   e.g. ../shared/data/cora)
#include <cstdio>
#include <exception>
#include <new>
#include <string>

#include "sar/graph/io/load.hpp"
#include "sar/sar.hpp"
#include "sar/train/minibatch.hpp"

/// Trains on the dataset `spec`; returns the exit status. Throws what loading and training
/// throw.
int run(const std::string& spec) {
  const sar::graph_dataset data = sar::load_dataset(spec);

  // GraphSAGE (mean aggregator, 64 hidden) runs on sampled blocks as on the whole graph.
  const sar::model_config config = sar::paper_defaults("sage");
  auto model = sar::make_model<float, sar::local_schedule>(config, data.features.cols(),
                                                           data.num_classes, /*seed=*/1);
  auto optimiser = sar::make_optimiser(config, model);

  sar::minibatch_options minibatch;
  minibatch.batch_size = 256;
  minibatch.sampler = {.kind = sar::sampler_kind::node_wise, .fanouts = {10, 5}, .seed = 1};
  minibatch.bulk = 8;
  sar::train_options options;
  options.epochs = 10;
  const sar::train_result result = sar::train_minibatch(
      model, data.graph, optimiser, sar::node_data<float>{data.features, data.labels, data.split},
      options, minibatch);
  std::printf("%s: best epoch %d, validation accuracy %.3f, test accuracy %.3f\n", spec.c_str(),
              result.best_epoch, result.best_valid_score, result.test_score);
  return result.test_score > 0.5 ? 0 : 1;
}

int main(int argc, char** argv) {
  const std::string spec = argc > 1 ? argv[1] : "planted:nodes=20000";
  if (argc > 2 || spec == "--help") {
    std::fprintf(argc > 2 ? stderr : stdout, "usage: %s [DATASET]   (a dataset spec: OGB "
                 "directory, .npy dataset, planted[:...])\n", argv[0]);
    return argc > 2 ? 1 : 0;
  }
  try {
    return run(spec);
  } catch (const std::exception& e) {  // e.g. a dataset that does not exist: message, exit 1
    std::fprintf(stderr, "minibatch-training: %s\n",
                 dynamic_cast<const std::bad_alloc*>(&e) ? "out of memory" : e.what());
    return 1;
  }
}
