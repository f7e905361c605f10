// The program the consumers of the compiled models build (pkg-config sar-models or
// sar-models-distributed, CMake sar::models or sar::models_distributed): it trains
// make_model's GCN on one process, and its object file must hold no instance of make_model,
// load_model or train_full_batch (tests/consumers_test.py looks with nm). Linked with the
// distributed library it also takes the address of a distributed instance, which must link.
// Prints "models consumer: ok".
#include <cstdio>

#include "sar/graph/builders.hpp"
#include "sar/graph/generators.hpp"
#include "sar/schedule/local_schedule.hpp"
#include "sar/train/full_batch.hpp"
#include "sar/train/models.hpp"

int main() {
  const sar::graph_dataset data =
      sar::make_planted_partition({.num_nodes = 2000, .num_classes = 4, .feature_dim = 16});
  sar::local_schedule graph(sar::with_self_loops(data.graph, sar::self_loop_policy::add));
  const sar::model_config config = sar::paper_defaults("gcn");
  auto model = sar::make_model<float, sar::local_schedule>(config, data.features.cols(),
                                                           data.num_classes, /*seed=*/1);
  auto optimiser = sar::make_optimiser(config, model);
  sar::train_options options;
  options.epochs = 30;
  options.log_progress = false;
  const sar::train_result result = sar::train_full_batch(
      model, graph, optimiser, sar::node_data<float>{data.features, data.labels, data.split},
      options);
  bool ok = result.best_valid_score > 0.5;  // four classes: chance is 0.25
#ifdef SAR_USE_COMPILED_DISTRIBUTED_MODELS
  auto* volatile distributed =
      &sar::make_model<float, sar::distributed_schedule<sar::mpi_communicator>>;
  ok = ok && distributed != nullptr;
#endif
  std::printf("validation accuracy %.3f\nmodels consumer: %s\n", result.best_valid_score,
              ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}
