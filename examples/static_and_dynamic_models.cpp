// One idea: the same GCN built two ways. sar::sequential<...> fixes the layer types at compile
// time (a layer that breaks the layer contract is a compile error, and every call is
// direct); sar::make_model builds the layers from a run-time model_config (sar-train's way:
// any_layer, one virtual call per layer and pass). Same layers, same seed, same parameters:
// the two train to the same losses, bit for bit, at the same speed (a virtual call per layer
// is nothing next to the layer's work). Choose by when your model is known.
//
//   build/examples/static-and-dynamic-models
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "sar/sar.hpp"

/// Trains `model` for 50 epochs; returns the history. Prints the median epoch time.
template <class Model>
sar::train_result train(const char* name, Model& model, sar::local_schedule& graph,
                        const sar::graph_dataset& data) {
  const sar::model_config config = sar::paper_defaults("gcn");
  auto optimiser = sar::make_optimiser(config, model);  // Adam, weight decay on layer 1
  sar::train_options options;
  options.epochs = 50;
  options.log_progress = false;
  sar::train_result result = sar::train_full_batch(
      model, graph, optimiser, sar::node_data<float>{data.features, data.labels, data.split},
      options);
  std::vector<double> seconds;
  for (const auto& e : result.history) seconds.push_back(e.seconds);
  std::nth_element(seconds.begin(), seconds.begin() + seconds.size() / 2, seconds.end());
  std::printf("%-8s final loss %.6f, test accuracy %.3f, median epoch %.2f ms\n", name,
              result.history.back().train_loss, result.test_score, 1e3 * seconds[seconds.size() / 2]);
  return result;
}

int main() {
  const sar::graph_dataset data =
      sar::make_planted_partition({.num_nodes = 20000, .num_classes = 8, .feature_dim = 32});
  sar::local_schedule graph(sar::with_self_loops(data.graph, sar::self_loop_policy::add));
  const Eigen::Index in = data.features.cols(), hidden = 16, classes = data.num_classes;

  // Compile time: the types are the model. dropout -> gcn -> relu+dropout -> gcn.
  sar::sequential<sar::dropout<float>, sar::gcn_layer<float>, sar::relu_dropout<float>,
                  sar::gcn_layer<float>>
      fixed(sar::dropout<float>(in, 0.5), sar::gcn_layer<float>(in, hidden),
            sar::relu_dropout<float>(hidden, 0.5), sar::gcn_layer<float>(hidden, classes));
  fixed.initialise(/*seed=*/7);

  // Run time: the same layers from settings (what a configuration file or command line gives).
  sar::model_config config = sar::paper_defaults("gcn");  // 2 layers, 16, 0.5
  auto configured = sar::make_model<float, sar::local_schedule>(config, in, classes, /*seed=*/7);

  const auto a = train("static", fixed, graph, data);
  const auto b = train("dynamic", configured, graph, data);
  double worst = 0;
  for (std::size_t e = 0; e < a.history.size(); ++e)
    worst = std::max(worst, std::abs(a.history[e].train_loss - b.history[e].train_loss));
  std::printf("largest loss difference over %zu epochs: %.3g\n", a.history.size(), worst);
  return worst == 0 ? 0 : 1;  // the same computation: bit for bit
}
