// Graph-level training data parallel on P ranks against one process: each rank takes a share of
// every minibatch of graphs (some ranks none, in a minibatch smaller than P), batch norm's
// statistics and the gradients all-reduced. GIN (batch norm, dropout) classifying with sum and
// attention readouts, GCN regressing with a mean readout, in float and double: the per-epoch
// losses, the figures and the trained parameters of one process.
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "mpi_check.hpp"
#include "sar/comm/mpi.hpp"
#include "sar/comm/serial.hpp"
#include "sar/graph/builders.hpp"
#include "sar/graph/graph_collection.hpp"
#include "sar/train/graph_level.hpp"
#include "sar/train/models.hpp"

using namespace sar;

namespace {

/// `graphs` random graphs of 2 to 9 nodes, 3 features; a class and a target per graph.
graph_collection random_collection(std::int64_t graphs, task_kind task) {
  std::mt19937_64 rng(11);
  graph_collection c;
  c.name = "random";
  c.task = task;
  c.num_classes = has_class_ids(task) ? 3 : 0;
  edge_list edges;
  std::vector<float> rows;
  std::vector<float> targets;
  for (std::int64_t g = 0; g < graphs; ++g) {
    const node_t first = c.node_offsets.back(), n = 2 + static_cast<node_t>(rng() % 8);
    for (node_t v = 0; v < n; ++v) {
      for (int f = 0; f < 3; ++f) rows.push_back(static_cast<float>(rng() % 100) / 50.0f - 1.0f);
      if (v > 0) {
        const node_t u = first + static_cast<node_t>(rng() % static_cast<std::uint64_t>(v));
        edges.push_back(u, first + v);
        edges.push_back(first + v, u);
      }
    }
    c.labels.push_back(static_cast<std::int32_t>(rng() % 3));
    targets.push_back(static_cast<float>(n) + rows.back());
    c.node_offsets.push_back(first + n);
  }
  if (!has_class_ids(task)) {
    c.labels.clear();
    c.targets = Eigen::Map<matrixf>(targets.data(), graphs, 1);
  }
  edges.num_nodes = c.node_offsets.back();
  c.graph = build_csr(edges);
  c.features = Eigen::Map<matrixf>(rows.data(), c.node_offsets.back(), 3);
  c.validate();
  return c;
}

template <class T, class Comm>
std::pair<graph_train_result, std::vector<T>> train(const graph_collection& c,
                                                    const model_config& config, readout_kind r,
                                                    std::int64_t batch, Comm& comm) {
  graph_collection prepared = c;
  prepare_graph_collection(prepared, config);
  auto model = make_graph_model<T>(config, r, 3, c.num_outputs(), 5);
  auto optimiser = make_optimiser(config, model);
  const graph_split split = k_fold_split(prepared, 5, 1, 3);
  const graph_train_result result = train_graph_level(
      model, prepared, split, optimiser,
      {.epochs = 3, .batch_graphs = batch, .seed = 9, .log_progress = false}, comm);
  const auto values = model.parameters().values();
  return {result, std::vector<T>(values.begin(), values.end())};
}

template <class T>
void check(mpi_communicator& comm, const graph_collection& c, const char* family,
           readout_kind r, std::int64_t batch) {
  model_config config = paper_defaults(family);
  config.hidden = 8;
  config.layers = 2;
  config.dropout = 0.3;
  config.batch_norm = std::string(family) == "gin";
  serial_communicator one;
  const auto [expected, expected_values] = train<T>(c, config, r, batch, one);
  const auto [got, got_values] = train<T>(c, config, r, batch, comm);
  const double tolerance = std::is_same_v<T, float> ? 1e-5 : 1e-9;
  const auto close = [&](double a, double b) {
    return std::isnan(a) ? std::isnan(b)
                         : std::abs(a - b) <= tolerance * std::max(1.0, std::abs(b));
  };
  EXPECT(got.history.size() == expected.history.size(), "epochs");
  for (std::size_t e = 0; e < got.history.size(); ++e) {
    const auto& a = got.history[e];
    const auto& b = expected.history[e];
    EXPECT(close(a.train_loss, b.train_loss) && close(a.valid_loss, b.valid_loss), family,
           " epoch ", e, ": losses ", a.train_loss, ", ", a.valid_loss, " on ", comm.size(),
           " ranks, ", b.train_loss, ", ", b.valid_loss, " on one process");
    for (std::size_t k = 0; k < a.test.size(); ++k)
      EXPECT(close(a.test[k].second, b.test[k].second), family, " epoch ", e, ": test ",
             a.test[k].first, " ", a.test[k].second, " against ", b.test[k].second);
  }
  EXPECT(got.best_epoch == expected.best_epoch, "best epoch");
  for (std::size_t k = 0; k < got_values.size(); ++k)
    EXPECT(close(got_values[k], expected_values[k]), family, ": parameter value ", k, " ",
           got_values[k], " against ", expected_values[k]);
}

}  // namespace

int main(int argc, char** argv) {
  return mpi_test::run_checked(argc, argv, [](mpi_communicator& comm) {
    const graph_collection classes = random_collection(70, task_kind::graph_classify);
    const graph_collection targets = random_collection(70, task_kind::graph_regress);
    check<float>(comm, classes, "gin", readout_kind::sum, 16);
    check<double>(comm, classes, "gin", readout_kind::attention, 3);  // shares of none
    check<float>(comm, targets, "gcn", readout_kind::mean, 7);
    check<double>(comm, targets, "sage", readout_kind::max, 16);
    if (comm.rank() == 0) std::printf("graph-level training on %d ranks: ok\n", comm.size());
  });
}
