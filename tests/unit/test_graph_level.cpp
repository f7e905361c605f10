// Graph-level learning: the TU reader (every optional file present and absent, malformed
// files), split folders and k-fold splits, batches of graphs, the readouts' gradients, and
// graph-level training on one process.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "sar/comm/serial.hpp"
#include "sar/graph/graph_collection.hpp"
#include "sar/graph/io/tu.hpp"
#include "sar/io/npy_file.hpp"
#include "sar/nn/readout.hpp"
#include "sar/schedule/local_schedule.hpp"
#include "sar/testing/gradient_checker.hpp"
#include "sar/train/graph_level.hpp"
#include "test_support.hpp"

using namespace sar;
using sar::testing_support::temp_dir;

namespace {

/// Writes `text` to dir/DS_<stem>.
void write_tu(const std::filesystem::path& dir, const std::string& stem, const std::string& text) {
  std::filesystem::create_directories(dir);
  std::ofstream(dir / (dir.filename().string() + "_" + stem)) << text;
}

/// A TU dataset TOY of three graphs: graph 1 (nodes 1-3) a path with a self-loop and a
/// repeated edge; graph 2 one isolated node; graph 3 two isolated nodes.
std::filesystem::path toy_dataset(const std::filesystem::path& root, bool optional_files) {
  const auto dir = root / "TOY";
  write_tu(dir, "A.txt", "1, 2\n2, 1\n2, 3\n3, 2\n1, 1\n1, 2\n");
  write_tu(dir, "graph_indicator.txt", "1\n1\n1\n2\n3\n3\n");
  write_tu(dir, "graph_labels.txt", "-1\n1\n-1\n");
  if (optional_files) {
    write_tu(dir, "node_labels.txt", "1\n3\n2\n1\n2\n3\n");
    write_tu(dir, "node_attributes.txt", "0.5\n1.5\n2.5\n3.5\n4.5\n5.5\n");
    write_tu(dir, "edge_labels.txt", "0\n1\n0\n1\n0\n1\n");
    write_tu(dir, "edge_attributes.txt", "1\n2\n3\n4\n5\n6\n");
    write_tu(dir, "graph_attributes.txt", "0.25, 1\n-2, 2\n8, 3\n");
  }
  return dir;
}

std::string error_of(const std::filesystem::path& dir) {
  try {
    read_tu_dataset(dir);
  } catch (const io_error& e) {
    return e.what();
  }
  return "no error";
}

/// A collection of `graphs` random graphs of 3 to 9 nodes whose class is whether the mean of
/// the nodes' first feature is positive (learnable by a readout), with `features` columns.
graph_collection random_collection(std::int64_t graphs, Eigen::Index features,
                                   std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  graph_collection c;
  c.name = "random";
  c.num_classes = 2;
  edge_list edges;
  std::vector<float> rows;
  for (std::int64_t g = 0; g < graphs; ++g) {
    const node_t first = c.node_offsets.back(), n = 3 + static_cast<node_t>(rng() % 7);
    const bool positive = rng() % 2 == 0;
    c.labels.push_back(positive ? 1 : 0);
    for (node_t v = 0; v < n; ++v) {
      for (Eigen::Index f = 0; f < features; ++f)
        rows.push_back(static_cast<float>(static_cast<double>(rng() % 1000) / 1000.0 - 0.5 +
                                          (f == 0 ? (positive ? 0.4 : -0.4) : 0.0)));
      if (v > 0) {
        const node_t u = first + static_cast<node_t>(rng() % static_cast<std::uint64_t>(v));
        edges.push_back(u, first + v);
        edges.push_back(first + v, u);
      }
    }
    c.node_offsets.push_back(first + n);
  }
  edges.num_nodes = c.node_offsets.back();
  c.graph = build_csr(edges);
  c.features = Eigen::Map<matrixf>(rows.data(), c.node_offsets.back(), features);
  c.validate();
  return c;
}

}  // namespace

TEST_CASE("read_tu_dataset reads every optional file as PyG's TUDataset does") {
  temp_dir tmp("tu");
  const graph_collection c = read_tu_dataset(toy_dataset(tmp.path, true));
  CHECK(c.name == "TOY");
  CHECK(c.task == task_kind::graph_classify);
  CHECK(c.num_graphs() == 3);
  CHECK(c.node_offsets == std::vector<node_t>{0, 3, 4, 6});
  // Labels -1, 1 become 0, 1 in sorted order.
  CHECK(c.labels == std::vector<std::int32_t>{0, 1, 0});
  CHECK(c.num_classes == 2);
  CHECK(c.class_labels == std::vector<std::int64_t>{-1, 1});  // the file's own, in order
  // Features: the attribute, then node labels 1..3 one-hot.
  REQUIRE(c.features.cols() == 4);
  CHECK(c.features(1, 0) == doctest::Approx(1.5));
  CHECK(c.features.row(1).tail(3) == Eigen::RowVector3f(0, 0, 1));
  CHECK(c.features.row(3).tail(3) == Eigen::RowVector3f(1, 0, 0));
  // The self-loop is gone and the repeated edge 1 -> 2 merged (its features summed).
  CHECK(c.graph.num_edges() == 4);
  CHECK(c.graph.row(1).size() == 2);  // 1 -> 2 and 3 -> 2
  CHECK(c.graph.row(3).empty());      // graph 2: an isolated node
  REQUIRE(c.edge_features.cols() == 3);  // the attribute, then labels 0 and 1 one-hot
  // Entry of 1 -> 2 (source 0 into row 1): lines 1 and 6, attributes 1 + 6, labels 0 and 1.
  const auto e = static_cast<Eigen::Index>(c.graph.offsets[1]);
  REQUIRE(c.graph.columns[static_cast<std::size_t>(e)] == 0);
  CHECK(c.edge_features.row(e) == Eigen::RowVector3f(7, 1, 1));

  const graph_collection r = read_tu_dataset(tmp.path / "TOY", task_kind::graph_regress);
  REQUIRE(r.targets.rows() == 3);
  REQUIRE(r.targets.cols() == 2);
  CHECK(r.targets(1, 0) == -2.0f);
  CHECK(r.num_outputs() == 2);
}

TEST_CASE("read_tu_dataset without the optional files: one constant feature, no edge features") {
  temp_dir tmp("tu-bare");
  const graph_collection c = read_tu_dataset(toy_dataset(tmp.path, false));
  CHECK(c.features.cols() == 1);
  CHECK(c.features.isOnes());
  CHECK(c.edge_features.size() == 0);
  CHECK(c.splits.empty());
  CHECK_THROWS_WITH_AS(read_tu_dataset(tmp.path / "TOY", task_kind::graph_regress),
                       doctest::Contains("has no TOY_graph_attributes.txt"), io_error);
  CHECK_THROWS_AS(read_tu_dataset(tmp.path / "TOY", task_kind::classify), invalid_argument);
  CHECK_THROWS_WITH_AS(read_tu_dataset(tmp.path / "none"), doctest::Contains("has no none_A.txt"),
                       io_error);
}

TEST_CASE("read_tu_dataset names the file and line of malformed input") {
  temp_dir tmp("tu-bad");
  const auto dir = toy_dataset(tmp.path, true);
  write_tu(dir, "A.txt", "1, 2\n2, 7\n");
  CHECK(error_of(dir).find("TOY_A.txt line 2: node id outside [1, 6]") != std::string::npos);
  write_tu(dir, "A.txt", "1, 2\n2, 4\n");
  CHECK(error_of(dir).find("TOY_A.txt line 2: an edge from graph 1 to graph 2") !=
        std::string::npos);
  write_tu(dir, "A.txt", "1, 2\nx, 1\n");
  CHECK(error_of(dir).find("TOY_A.txt line 2: not an integer (\"x\")") != std::string::npos);
  write_tu(dir, "A.txt", "1, 2\n2, 1\n");
  write_tu(dir, "edge_labels.txt", "0\n1\n");
  write_tu(dir, "edge_attributes.txt", "1\n2\n");
  write_tu(dir, "graph_indicator.txt", "1\n1\n2\n1\n3\n3\n");
  CHECK(error_of(dir).find("graph_indicator.txt line 4: graph ids are not sorted") !=
        std::string::npos);
  write_tu(dir, "graph_indicator.txt", "1\n1\n1\n3\n3\n3\n");
  CHECK(error_of(dir).find("graph_indicator.txt line 4: graph 2 has no node") !=
        std::string::npos);
  write_tu(dir, "graph_indicator.txt", "1\n1\n1\n2\n3\n3\n");
  write_tu(dir, "graph_labels.txt", "1\n2\n");
  CHECK(error_of(dir).find("TOY_graph_labels.txt has 2 lines for 3 graphs") != std::string::npos);
  write_tu(dir, "graph_labels.txt", "1\n2\n1\n");
  write_tu(dir, "node_attributes.txt", "1\n2, 3\n1\n1\n1\n1\n");
  CHECK(error_of(dir).find("node_attributes.txt line 2: 2 values where line 1 has 1") !=
        std::string::npos);
  write_tu(dir, "node_attributes.txt", "1\n2\n\n1\n1\n1\n");
  CHECK(error_of(dir).find("node_attributes.txt line 3: an empty line") != std::string::npos);
  write_tu(dir, "node_attributes.txt", "1\n2\n3\n1\n1\n1\n");
  CHECK_NOTHROW(read_tu_dataset(dir));
}

TEST_CASE("split folders: every list read, bad indices refused naming the file") {
  temp_dir tmp("tu-split");
  const auto dir = toy_dataset(tmp.path, false);
  const auto write = [&](const std::string& name, std::vector<std::int64_t> train,
                         std::vector<std::int64_t> valid, std::vector<std::int64_t> test) {
    const auto folder = dir / "split" / name;
    std::filesystem::create_directories(folder);
    for (auto [file, list] : {std::pair{"train.npy", &train}, std::pair{"valid.npy", &valid},
                              std::pair{"test.npy", &test}}) {
      const std::int64_t shape[] = {static_cast<std::int64_t>(list->size())};
      write_npy(folder / file, npy_dtype::int64, shape, list->data());
    }
  };
  write("a", {0, 2}, {}, {1});
  const graph_collection c = read_tu_dataset(dir);
  REQUIRE(c.splits.count("a") == 1);
  CHECK(c.splits.at("a").train == std::vector<std::int64_t>{0, 2});
  CHECK(c.splits.at("a").test == std::vector<std::int64_t>{1});
  write("b", {0, 1}, {1}, {2});
  CHECK(error_of(dir).find("valid.npy entry 0: graph 1 is listed twice") != std::string::npos);
  write("b", {0, 3}, {}, {2});
  CHECK(error_of(dir).find("train.npy entry 1: graph 3 outside [0, 3)") != std::string::npos);
}

TEST_CASE("k_fold_split: folds partition the graphs, stratified, a tenth validates") {
  const graph_collection c = random_collection(103, 2, 5);
  std::vector<int> tested(103, 0);
  for (int fold = 0; fold < 10; ++fold) {
    const graph_split s = k_fold_split(c, 10, fold, 42);
    CHECK(s.train.size() + s.valid.size() + s.test.size() == 103);
    std::set<std::int64_t> all(s.train.begin(), s.train.end());
    all.insert(s.valid.begin(), s.valid.end());
    all.insert(s.test.begin(), s.test.end());
    CHECK(all.size() == 103);
    CHECK(s.valid.size() == (103 - s.test.size() + 5) / 10);
    CHECK((s.test.size() == 10 || s.test.size() == 11));
    for (const auto g : s.test) ++tested[static_cast<std::size_t>(g)];
    const auto positives =
        std::count_if(s.test.begin(), s.test.end(), [&](auto g) { return c.labels[g] == 1; });
    const auto total = std::count(c.labels.begin(), c.labels.end(), 1);
    CHECK(std::abs(static_cast<double>(positives) - total / 10.0) <= 1.0);
    CHECK(k_fold_split(c, 10, fold, 42).train == s.train);  // seeded
  }
  CHECK(std::all_of(tested.begin(), tested.end(), [](int t) { return t == 1; }));
  CHECK(k_fold_split(c, 10, 0, 43).test != k_fold_split(c, 10, 0, 42).test);
  CHECK_THROWS_AS(k_fold_split(c, 10, 10, 42), invalid_argument);
  CHECK_THROWS_AS(k_fold_split(c, 1, 0, 42), invalid_argument);
}

TEST_CASE("make_batch: graphs renumbered in batch order, edges and rows carried") {
  temp_dir tmp("tu-batch");
  const graph_collection c = read_tu_dataset(toy_dataset(tmp.path, true));
  const std::int64_t graphs[] = {2, 0};
  const graph_batch b = make_batch(c, graphs);
  CHECK(b.node_offsets == std::vector<node_t>{0, 2, 5});
  CHECK(b.ids == std::vector<node_t>{4, 5, 0, 1, 2});
  CHECK(b.labels == std::vector<std::int32_t>{0, 0});
  CHECK(b.graph.num_edges() == 4);
  CHECK(b.graph.row(3).size() == 2);  // collection node 1 -> batch row 3
  CHECK(b.graph.row(3)[0] == 2);
  CHECK(b.features.row(0) == c.features.row(4));
  CHECK(b.edge_features.row(0) == c.edge_features.row(0));
  const csr m = b.membership();
  CHECK(m.row(1).size() == 3);
  CHECK(m.row(1)[0] == 2);
  const std::int64_t bad[] = {3};
  CHECK_THROWS_AS(make_batch(c, bad), invalid_argument);
}

TEST_CASE("readouts pass the gradient checker on a batch of graphs") {
  const graph_collection c = random_collection(6, 3, 9);
  const std::int64_t graphs[] = {0, 1, 2, 3, 4, 5};
  const graph_batch b = make_batch(c, graphs);
  local_schedule membership(b.membership());
  const matrixd x = b.features.cast<double>();
  for (const std::string_view name : readout_names) {
    CAPTURE(name);
    readout<double> r(parse_readout(name), 3);
    parameter_store<double> store;
    r.declare(store);
    store.allocate();
    store.initialise(11);
    const auto result = check_gradients(r, store, membership, layer_context{}, x);
    CHECK_MESSAGE(result.passed, result.summary());
    CHECK(store.size() == (name == "attention" ? 1u : 0u));
  }
  CHECK_THROWS_WITH_AS(parse_readout("median"), doctest::Contains("sum, mean, max or attention"),
                       invalid_argument);
}

TEST_CASE("a batch of graphs gives each graph the outputs it gets alone") {
  const graph_collection c = random_collection(7, 4, 3);
  for (const char* family : {"gin", "gcn", "sage", "gat"})
    for (const std::string_view r : readout_names) {
      CAPTURE(family);
      CAPTURE(r);
      model_config config = paper_defaults(family);
      config.hidden = 8;
      config.heads = 2;
      config.layers = 3;
      config.batch_norm = std::string_view(family) == "gin";
      graph_collection prepared = c;
      prepare_graph_collection(prepared, config);
      auto model = make_graph_model<double>(config, parse_readout(r), 4, 2, 7);
      const std::size_t blocks = graph_blocks_before_readout(model);
      const layer_context eval{.training = false};
      std::vector<std::int64_t> all(7);
      std::iota(all.begin(), all.end(), 0);
      const graph_batch b = make_batch(prepared, all);
      graph_batch_graph g(b, blocks);
      const matrixd together = model.forward(g, eval, detail::batch_input<double>(b));
      for (std::int64_t k = 0; k < 7; ++k) {
        const graph_batch one =
            make_batch(prepared, std::span(all).subspan(static_cast<std::size_t>(k), 1));
        graph_batch_graph alone(one, blocks);
        const matrixd out = model.forward(alone, eval, detail::batch_input<double>(one));
        CHECK((out.row(0) - together.row(k)).cwiseAbs().maxCoeff() < 1e-6);
      }
    }
}

TEST_CASE("graph classification learns a readout-separable task on one process") {
  graph_collection c = random_collection(300, 3, 21);
  const graph_split split = k_fold_split(c, 5, 0, 1);
  model_config config = paper_defaults("gin");
  config.hidden = 16;
  config.layers = 2;
  config.dropout = 0;
  config.learning_rate = 0.01;
  prepare_graph_collection(c, config);
  auto model = make_graph_model<float>(config, readout_kind::mean, 3, 2, 1);
  auto optimiser = make_optimiser(config, model);
  serial_communicator comm;
  const graph_train_result r = train_graph_level(
      model, c, split, optimiser, {.epochs = 20, .batch_graphs = 16, .log_progress = false}, comm);
  REQUIRE(r.history.size() == 20);
  CHECK(r.history.back().train_loss < 0.5 * r.history.front().train_loss);
  const auto& best = r.history[static_cast<std::size_t>(r.best_epoch)];
  CHECK(best.test.front().first == "acc");
  CHECK(best.test.front().second > 0.85);
  CHECK_THROWS_AS(make_graph_model<float>(paper_defaults("rgcn"), readout_kind::sum, 3, 2, 1),
                  invalid_argument);
}

TEST_CASE("dynamic_sequential::backward with dx: its input gradient, the same parameter grads") {
  const graph_collection c = random_collection(5, 3, 17);
  local_schedule graph(c.graph);
  model_config config = paper_defaults("gin");
  config.hidden = 6;
  config.dropout = 0;
  auto model = make_model<double, local_schedule>(config, 3, 4, 5);
  const matrixd x = c.features.cast<double>();
  const matrixd r = sar::testing_support::random_matrix<double>(x.rows(), 4, 6);
  const layer_context ctx;
  const auto loss = [&](const matrixd& in) {
    return model.forward(graph, ctx, in).cwiseProduct(r).sum();
  };
  loss(x);
  model.backward(graph, ctx, r);
  const std::vector<double> plain(model.parameters().grads().begin(),
                                  model.parameters().grads().end());
  loss(x);
  matrixd dx;
  model.backward(graph, ctx, r, dx);
  CHECK(std::equal(plain.begin(), plain.end(), model.parameters().grads().begin()));
  REQUIRE(dx.rows() == x.rows());
  REQUIRE(dx.cols() == x.cols());
  for (Eigen::Index i = 0; i < x.size(); i += 3) {
    matrixd up = x, down = x;
    up.data()[i] += 1e-6;
    down.data()[i] -= 1e-6;
    CHECK(dx.data()[i] == doctest::Approx((loss(up) - loss(down)) / 2e-6).epsilon(1e-6));
  }
}

TEST_CASE("graph regression with an empty validation split: figures of no graph are NaN") {
  graph_collection c = random_collection(40, 2, 8);
  c.task = task_kind::graph_regress;
  c.targets = c.features.topRows(40).leftCols(1);  // any finite row per graph
  c.labels.clear();
  c.num_classes = 0;
  c.validate();
  graph_split split = k_fold_split(c, 4, 0, 2);
  split.train.insert(split.train.end(), split.valid.begin(), split.valid.end());
  split.valid.clear();
  model_config config = paper_defaults("gcn");
  config.hidden = 4;
  prepare_graph_collection(c, config);
  auto model = make_graph_model<double>(config, readout_kind::mean, 2, 1, 3);
  auto optimiser = make_optimiser(config, model);
  serial_communicator comm;
  const graph_train_result r = train_graph_level(
      model, c, split, optimiser, {.epochs = 2, .batch_graphs = 8, .log_progress = false}, comm);
  REQUIRE(r.history.size() == 2);
  CHECK(std::isnan(r.history[0].valid_loss));
  CHECK(std::isnan(r.history[0].valid_score));
  CHECK(r.history[0].test.front().first == "r2");
  CHECK(std::isfinite(r.history[0].test[1].second));  // rmse over the test graphs
}

TEST_CASE("a saved graph-level model: its readout in the file, loaded it predicts the same") {
  graph_collection c = random_collection(60, 3, 5);
  const graph_split split = k_fold_split(c, 5, 0, 1);
  model_config config = paper_defaults("gin");
  config.hidden = 8;
  config.layers = 2;
  prepare_graph_collection(c, config);
  auto model = make_graph_model<float>(config, readout_kind::attention, 3, 2, 1);
  auto optimiser = make_optimiser(config, model);
  serial_communicator comm;
  (void)train_graph_level(model, c, split, optimiser,
                          {.epochs = 3, .batch_graphs = 16, .log_progress = false}, comm);
  std::vector<std::int64_t> all(static_cast<std::size_t>(c.num_graphs()));
  std::iota(all.begin(), all.end(), std::int64_t{0});
  const matrixf predicted = predict_graphs(model, c, all, 7);
  REQUIRE(predicted.rows() == c.num_graphs());

  testing_support::temp_dir dir("graph-model");
  model_description d{.config = config, .input_dim = 3, .output_dim = 2,
                      .task = task_kind::graph_classify};
  CHECK_THROWS_AS(save_model(comm, dir.path / "m.sarmodel", model, d), invalid_argument);
  d.readout = "attention";
  save_model(comm, dir.path / "m.sarmodel", model, d);
  const saved_model saved = read_model(dir.path / "m.sarmodel");
  CHECK(saved.description.task == task_kind::graph_classify);
  CHECK(saved.description.readout == "attention");
  auto loaded = load_graph_model<float>(saved);
  CHECK(predict_graphs(loaded, c, all) == predicted);
  CHECK_THROWS_WITH_AS((load_model<float, local_schedule>(saved)),
                       doctest::Contains("load_graph_model"), invalid_argument);
  saved_model other_readout = saved;  // the gate's parameter is missing for attention
  other_readout.description.readout = "sum";
  CHECK_THROWS_AS(load_graph_model<float>(other_readout), invalid_argument);
  other_readout.description.readout = "";
  CHECK_THROWS_AS(load_graph_model<float>(other_readout), invalid_argument);
  CHECK_THROWS_AS(predict_graphs(loaded, c, std::vector<std::int64_t>{c.num_graphs()}),
                  invalid_argument);
}
