// Out-of-core training (sar/train/out_of_core.hpp) against train_full_batch on the same graph.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <string>

#include "sar/graph/builders.hpp"
#include "sar/graph/generators.hpp"
#include "sar/optim/adam.hpp"
#include "sar/sampling/sampling_graph.hpp"
#include "sar/train/full_batch.hpp"
#include "sar/train/models.hpp"
#include "sar/train/out_of_core.hpp"
#include "test_support.hpp"

using namespace sar;
using sar::testing_support::temp_dir;

namespace {

/// Trains make_model's `family` on `data` for 4 epochs in memory and out of core (parts of
/// at most part_rows nodes, cut at `breaks`); returns both results and the out-of-core run's
/// traffic.
template <class T>
struct both_runs {
  train_result in_memory, out_of_core;
  out_of_core_traffic traffic;
};

template <class T>
both_runs<T> train_both(const graph_dataset& data, const model_config& c, node_t part_rows,
                        const std::filesystem::path& spill, std::vector<node_t> breaks = {}) {
  const csr graph = with_self_loops(data.graph, self_loop_policy::add);
  const matrix<T> features = data.features.template cast<T>();
  const node_data<T> nodes{features, data.labels, data.split};
  const train_options options{.epochs = 4, .seed = 5, .log_progress = false};
  both_runs<T> out;
  {
    local_schedule schedule(graph);
    auto model = make_model<T, local_schedule>(c, features.cols(), data.num_classes, 3);
    adam<T> optimiser({.learning_rate = 0.01});
    out.in_memory = train_full_batch(model, schedule, optimiser, nodes, options);
  }
  sampling_graph sampled(graph);
  auto model = make_model<T, local_schedule>(c, features.cols(), data.num_classes, 3);
  adam<T> optimiser({.learning_rate = 0.01});
  out.out_of_core = train_out_of_core(model, sampled, optimiser, nodes, options,
                                      {.spill_dir = spill, .part_rows = part_rows,
                                       .part_breaks = std::move(breaks)},
                                      {},
                                      &out.traffic);
  return out;
}

graph_dataset planted(node_t nodes) {
  planted_partition_options o;
  o.num_nodes = nodes;
  o.num_classes = 4;
  o.feature_dim = 12;
  o.seed = 21;
  return make_planted_partition(o);
}

}  // namespace

TEST_CASE("out-of-core training with parts of a quarter of the nodes gives train_full_batch's "
          "losses and scores (GCN, SAGE, GAT; three layers, dropout) and leaves no spill file") {
  const graph_dataset data = planted(400);
  const temp_dir spill("out-of-core");
  for (const std::string family : {"gcn", "sage", "gat"}) {
    CAPTURE(family);
    model_config c;
    c.family = family;
    c.layers = 3;
    c.hidden = 8;
    c.heads = 2;
    c.dropout = 0.5;
    const auto runs = train_both<double>(data, c, 100, spill.path);
    REQUIRE(runs.out_of_core.history.size() == 4);
    for (int e = 0; e < 4; ++e) {
      CAPTURE(e);
      const epoch_stats& a = runs.in_memory.history[e];
      const epoch_stats& b = runs.out_of_core.history[e];
      CHECK(std::abs(a.train_loss - b.train_loss) <= 1e-9 * std::abs(a.train_loss));
      CHECK(std::abs(a.valid_loss - b.valid_loss) <= 1e-9 * std::abs(a.valid_loss));
      CHECK(a.valid_score == b.valid_score);
      CHECK(a.test_score == b.test_score);
    }
    // Two spilled stages (hidden 8 wide; GAT's hidden layer concatenates its heads) of 400
    // rows, each a stage output and an input gradient.
    const std::uint64_t hidden = family == "gat" ? 16 : 8;
    CHECK(runs.traffic.spill_bytes == 2 * 2 * 400 * hidden * sizeof(double));
    CHECK(runs.traffic.bytes_written > 0);
    CHECK(runs.traffic.bytes_read > 0);
    CHECK(std::filesystem::is_empty(spill.path));  // the run's directory went with it
  }
}

TEST_CASE("out-of-core float training matches the in-memory float run to 1e-5 with parts of "
          "one eighth, single-node parts, and parts cut at breaks (a partition store's)") {
  const graph_dataset data = planted(240);
  const temp_dir spill("out-of-core");
  model_config c;
  c.family = "gcn";
  c.hidden = 16;
  using breaks = std::vector<node_t>;
  for (const auto& parts : {std::pair{node_t{30}, breaks{}}, std::pair{node_t{1}, breaks{}},
                            std::pair{node_t{50}, breaks{7, 100, 101, 150}}}) {
    const node_t part_rows = parts.first;
    const breaks& at = parts.second;
    CAPTURE(part_rows);
    CAPTURE(at);
    const auto runs = train_both<float>(data, c, part_rows, spill.path, at);
    for (int e = 0; e < 4; ++e) {
      CAPTURE(e);
      const double a = runs.in_memory.history[e].train_loss;
      CHECK(std::abs(a - runs.out_of_core.history[e].train_loss) <= 1e-5 * a);
    }
  }
}

TEST_CASE("part_starts cuts at the breaks and every part_rows rows between them") {
  using starts = std::vector<node_t>;
  CHECK(part_starts(10, 4, {}) == starts{0, 4, 8, 10});
  CHECK(part_starts(10, 4, starts{3, 6}) == starts{0, 3, 6, 10});
  CHECK(part_starts(10, 2, starts{5}) == starts{0, 2, 4, 5, 7, 9, 10});
  CHECK(part_starts(10, 20, starts{9}) == starts{0, 9, 10});
  CHECK(part_starts(0, 3, {}) == starts{0, 0});  // one empty part
  for (const starts& bad : {starts{5, 5}, starts{0}, starts{11}, starts{6, 2}}) {
    CAPTURE(bad);
    CHECK_THROWS_WITH_AS(part_starts(10, 4, bad), doctest::Contains("part break"),
                         invalid_argument);
  }
  CHECK_THROWS_WITH_AS(part_starts(10, 0, {}), doctest::Contains("part_rows 0"),
                       invalid_argument);
}

TEST_CASE("out-of-core training reads the features from disk as it reads them from memory") {
  const graph_dataset data = planted(200);
  const csr graph = with_self_loops(data.graph, self_loop_policy::add);
  const temp_dir spill("out-of-core");
  const train_options options{.epochs = 3, .seed = 2, .log_progress = false};
  model_config c;
  c.hidden = 8;
  const auto run = [&](spilled_rows<float>* on_disk) {
    sampling_graph sampled(graph);
    auto model = make_model<float, local_schedule>(c, data.features.cols(), data.num_classes, 3);
    adam<float> optimiser;
    const matrixf none;  // the features are not read from memory
    const node_data<float> given{on_disk ? none : data.features, data.labels, data.split};
    return train_out_of_core(model, sampled, optimiser, given, options,
                             {.spill_dir = spill.path, .part_rows = 64}, {}, nullptr, on_disk);
  };
  const train_result in_memory = run(nullptr);
  spill_directory mine(spill.path);
  spilled_rows<float> features(mine, "features", data.features.rows(), data.features.cols());
  features.write(0, data.features);
  const train_result from_disk = run(&features);
  for (int e = 0; e < 3; ++e) {
    CAPTURE(e);
    CHECK(from_disk.history[e].train_loss == in_memory.history[e].train_loss);
    CHECK(from_disk.history[e].valid_score == in_memory.history[e].valid_score);
  }
  // Every epoch reads each node's features at least twice (forward, backward).
  CHECK(features.bytes_read() >= 3 * 2 * 200 * 12 * sizeof(float));
}

TEST_CASE("out-of-core training refuses batch norm, sparse features and part_rows 0") {
  const graph_dataset data = planted(60);
  const csr graph = with_self_loops(data.graph, self_loop_policy::add);
  sampling_graph sampled(graph);
  const node_data<float> nodes{data.features, data.labels, data.split};
  const temp_dir spill("out-of-core");
  const train_options options{.epochs = 1, .log_progress = false};
  model_config c;
  c.layers = 3;
  c.hidden = 4;
  {
    c.batch_norm = true;
    auto model = make_model<float, local_schedule>(c, data.features.cols(), data.num_classes, 1);
    adam<float> optimiser;
    CHECK_THROWS_WITH_AS(
        train_out_of_core(model, sampled, optimiser, nodes, options, {.spill_dir = spill.path}),
        doctest::Contains("batch norm"), invalid_argument);
    c.batch_norm = false;
  }
  auto model = make_model<float, local_schedule>(c, data.features.cols(), data.num_classes, 1);
  adam<float> optimiser;
  CHECK_THROWS_WITH_AS(train_out_of_core(model, sampled, optimiser, nodes, options,
                                         {.spill_dir = spill.path, .part_rows = 0}),
                       doctest::Contains("part_rows 0"), invalid_argument);
  const sparse_rows<float> sparse = to_sparse_rows<float>(const_rows_ref<float>(data.features));
  node_data<float> with_sparse = nodes;
  with_sparse.sparse_features = &sparse;
  CHECK_THROWS_WITH_AS(train_out_of_core(model, sampled, optimiser, with_sparse, options,
                                         {.spill_dir = spill.path}),
                       doctest::Contains("sparse or bf16"), invalid_argument);
}
