// Heterogeneous graphs: the schema's checks, the typed CSR, reverse relations and erased
// types, the planted heterogeneous graph, R-GCN against its formula and the gradient checker
// (free weights, bases, blocks; with and without the self-connection; whole graphs and
// bipartite blocks), the per-type input projection, and an R-GCN that learns what a
// relation-blind GCN cannot; relation-wise compositions of homogeneous layers.
#include <doctest/doctest.h>

#include <cmath>
#include <algorithm>
#include <map>
#include <numeric>
#include <set>
#include <tuple>
#include <vector>

#include "sar/graph/generators.hpp"
#include "sar/graph/heterogeneous.hpp"
#include "sar/nn/dropout.hpp"
#include "sar/nn/gat.hpp"
#include "sar/nn/gcn.hpp"
#include "sar/nn/relation_wise.hpp"
#include "sar/nn/rgcn.hpp"
#include "sar/nn/sage.hpp"
#include "sar/nn/sequential.hpp"
#include "sar/nn/type_projection.hpp"
#include "sar/partition/partitioners.hpp"
#include "sar/partition/store.hpp"
#include "sar/schedule/local_schedule.hpp"
#include "sar/schedule/relational_graph.hpp"
#include "sar/testing/gradient_checker.hpp"
#include "sar/comm/serial.hpp"
#include "sar/train/checkpoint.hpp"
#include "sar/train/model_file.hpp"
#include "sar/train/full_batch.hpp"
#include "sar/train/minibatch.hpp"
#include "sar/train/models.hpp"
#include "split_schedule.hpp"
#include "test_support.hpp"

using namespace sar;

namespace {

/// Three types (2 "a", 3 "b", 2 "c" nodes: ids 0-1, 2-4, 5-6), three relations.
graph_dataset small_typed() {
  graph_dataset d;
  d.name = "small";
  d.schema.node_types = {{"a", 2, 2}, {"b", 3, 3}, {"c", 2, 0}};
  d.schema.relations = {{0, "ab", 1}, {1, "bb", 1}, {2, "cb", 1}};
  edge_list e;
  e.num_nodes = 7;
  std::vector<std::int32_t> types;
  const auto add = [&](node_t s, node_t t, std::int32_t r) {
    e.push_back(s, t);
    types.push_back(r);
  };
  add(0, 2, 0), add(1, 2, 0), add(0, 3, 0), add(1, 4, 0), add(0, 4, 0);
  add(3, 2, 1), add(4, 2, 1), add(2, 3, 1), add(2, 3, 1);  // a repeated edge: kept once
  add(5, 2, 2), add(6, 3, 2), add(5, 4, 2);
  d.graph = build_typed_csr(e, types, d.edge_types);
  d.features = matrixf::Random(7, 3);
  d.features.bottomRows(2).setZero();
  d.features.topRows(2).col(2).setZero();
  return d;
}

/// The gradient checker on `layer` (parameters and input from `seed`) over `graph`.
template <class Layer, class Graph>
void check_layer(Layer layer, Graph& graph, const layer_context& ctx, std::uint64_t seed) {
  parameter_store<double> store;
  layer.declare(store);
  store.allocate();
  store.initialise(seed);
  const matrixd x = testing_support::random_matrix(graph.num_sources(), layer.input_dim(), seed);
  const auto result = check_gradients(layer, store, graph, ctx, x);
  CHECK_MESSAGE(result.passed, result.summary());
}

/// What the checkpoint and model-file functions read of a model: a store, no layer state.
struct store_model {
  using scalar = double;
  parameter_store<double>* store;
  parameter_store<double>& parameters() { return *store; }
  std::vector<std::span<double>> state() { return {}; }
};

}  // namespace

TEST_CASE("the schema names bad types and relations; typed edges must join their relation's types") {
  graph_dataset d = small_typed();
  d.validate("test");
  CHECK(d.schema.type_of(0) == 0);
  CHECK(d.schema.type_of(4) == 1);
  CHECK(d.schema.type_of(6) == 2);
  CHECK(d.schema.find_relation("bb") == 1);
  CHECK(d.schema.find_relation("a___ab___b") == 0);
  CHECK(d.schema.find_relation("nope") == -1);
  CHECK(d.graph.num_edges() == 11);  // the repeated 2 -> 3 of "bb" once
  const auto bad = [](graph_dataset x, const char* text) {
    CHECK_THROWS_WITH_AS(x.validate("test"), doctest::Contains(text), invalid_argument);
  };
  graph_dataset x = d;
  x.schema.relations[0].source_type = 5;  // an unknown type
  bad(x, "joins node types 5 and 1");
  x = d;
  x.schema.node_types[1].count = 4;  // counts that do not sum to the nodes
  bad(x, "8 nodes in all, the graph 7");
  x = d;
  x.edge_types[0] = 2;  // an "a" source under relation "cb"
  bad(x, "has relation c___cb___b");
  x = d;
  x.edge_types.pop_back();
  bad(x, "10 edge types for 11 edges");
  x = d;
  x.schema.node_types[0].feature_dim = 4;  // wider than the feature rows
  bad(x, "has 2 nodes with 4 features");
  x = d;
  x.schema = {};
  bad(x, "edge types without a schema");
}

TEST_CASE("reverse relations hold every edge reversed; erased types join each pair once") {
  graph_dataset d = small_typed();
  d.edge_features = matrixf::Random(d.graph.num_edges(), 2);
  const graph_dataset before = d;
  add_reverse_relations(d);
  d.validate("test");
  REQUIRE(d.schema.num_relations() == 6);
  CHECK(d.schema.relations[3] == relation{1, "rev_ab", 0});
  CHECK(d.graph.num_edges() == 2 * before.graph.num_edges());
  // (source, destination, relation) -> edge features, before and after.
  std::map<std::tuple<node_t, node_t, std::int32_t>, Eigen::RowVectorXf> want, got;
  for (node_t i = 0; i < before.graph.num_rows; ++i)
    for (edge_t e = before.graph.offsets[i]; e < before.graph.offsets[i + 1]; ++e) {
      const node_t j = before.graph.columns[e];
      const std::int32_t r = before.edge_types[e];
      want[{j, i, r}] = before.edge_features.row(e);
      want[{i, j, r + 3}] = before.edge_features.row(e);
    }
  for (node_t i = 0; i < d.graph.num_rows; ++i)
    for (edge_t e = d.graph.offsets[i]; e < d.graph.offsets[i + 1]; ++e)
      got[{d.graph.columns[e], i, d.edge_types[e]}] = d.edge_features.row(e);
  CHECK(got == want);
  CHECK_THROWS_AS(add_reverse_relations(d), invalid_argument);  // rev_ab exists already
  graph_dataset erased = d;
  erase_types(erased);
  erased.validate("test");
  CHECK(!erased.schema.heterogeneous());
  CHECK(erased.edge_types.empty());
  for (node_t i = 0; i < erased.graph.num_rows; ++i) {
    const auto row = erased.graph.row(i);
    CHECK(std::set<node_t>(row.begin(), row.end()).size() == row.size());
  }
  CHECK(erased.graph.num_edges() < d.graph.num_edges());  // 2 <-> 3 was in "bb" and rev_bb
}

TEST_CASE("the planted heterogeneous graph: labels and splits on papers, relations as documented") {
  const graph_dataset d = make_planted_heterogeneous(
      {.num_papers = 2000, .num_authors = 700, .degree = 3, .authors_per_paper = 2,
       .homophily = 1.0, .add_reverse = false});
  d.validate("test");
  const node_t authors = 700;
  CHECK(d.schema.node_types[0] == node_type{"author", 700, 8});
  CHECK(d.num_classes == 2);
  for (node_t i = 0; i < d.num_nodes(); ++i) {
    CHECK((i < authors) == (d.labels[i] < 0));
    CHECK((i < authors) == (d.split[i] == node_split::none));
  }
  // With homophily 1 every "agrees" edge joins a class, every "disagrees" edge crosses.
  for (node_t i = authors; i < d.num_nodes(); ++i)
    for (edge_t e = d.graph.offsets[i]; e < d.graph.offsets[i + 1]; ++e) {
      const std::int32_t r = d.edge_types[e];
      const node_t j = d.graph.columns[e];
      if (r == 0) CHECK(j < authors);
      if (r == 1) CHECK(d.labels[j] == d.labels[i]);
      if (r == 2) CHECK(d.labels[j] != d.labels[i]);
    }
  CHECK_THROWS_AS(make_planted_heterogeneous({.num_papers = 1}), invalid_argument);
  CHECK_THROWS_AS(make_planted_heterogeneous({.author_feature_dim = 99}), invalid_argument);
}

TEST_CASE("rgcn_layer equals x_i W_0 + sum_r mean over N_r(i) of x_j W_r + b") {
  const graph_dataset d = small_typed();
  const node_t n = d.num_nodes();
  const std::int32_t R = d.schema.num_relations();
  local_schedule graph(csr{d.graph}, matrixf(), std::vector<std::int32_t>(d.edge_types));
  // An F -> O layer (parameters from `seed`, x from seed + 3) against the formula, row by row.
  // Returns whether it weighs first.
  const auto check_formula = [&](Eigen::Index F, Eigen::Index O, std::uint64_t seed) {
    rgcn_layer<double> layer(F, O, R);
    parameter_store<double> store;
    layer.declare(store);
    store.allocate();
    store.initialise(seed);
    const matrixd x = testing_support::random_matrix(n, F, seed + 3);
    matrixd y;
    layer.forward(graph, {.training = true}, x, y);
    const auto w = store.value(0), w0 = store.value(1), b = store.value(2);
    for (node_t i = 0; i < n; ++i) {
      Eigen::RowVectorXd want = x.row(i) * w0 + b;
      for (std::int32_t r = 0; r < R; ++r) {
        Eigen::RowVectorXd sum = Eigen::RowVectorXd::Zero(F);
        int count = 0;
        for (edge_t e = d.graph.offsets[i]; e < d.graph.offsets[i + 1]; ++e)
          if (d.edge_types[e] == r) sum += x.row(d.graph.columns[e]), ++count;
        if (count > 0) want += sum / count * w.middleRows(r * F, F);
      }
      CHECK((y.row(i) - want).cwiseAbs().maxCoeff() < 1e-12);
    }
    return layer.weight_first();
  };
  CHECK_FALSE(check_formula(3, 2, 4));  // aggregating first
  CHECK(check_formula(8, 2, 5));        // weighting first (R F_out < F_in), on the kept parts
  // The schedule keeps its block's relation parts: the same ones for every later product.
  const graph_block& whole = graph.whole_block();
  REQUIRE(whole.relation_parts != nullptr);
  const auto parts_of = [&](detail::relation_side side) {
    return &whole.relation_parts->parts(whole, R, side, "test");
  };
  CHECK(parts_of(detail::relation_side::forward) == parts_of(detail::relation_side::forward));
  CHECK(parts_of(detail::relation_side::forward) != parts_of(detail::relation_side::backward));
  // A schedule without edge types is refused by name.
  rgcn_layer<double> layer(3, 2, R);
  parameter_store<double> store;
  layer.declare(store);
  store.allocate();
  const matrixd x = matrixd::Ones(n, 3);
  matrixd y;
  local_schedule untyped(csr{d.graph});
  CHECK_THROWS_WITH_AS(layer.forward(untyped, {}, x, y), doctest::Contains("no edge types"),
                       invalid_argument);
  // So is a relation outside [0, R), on one block or several, and no backward follows it.
  std::vector<std::int32_t> bad_types = d.edge_types;
  bad_types.back() = R;
  local_schedule bad_whole(csr{d.graph}, matrixf(), std::vector<std::int32_t>(bad_types));
  testing_support::split_schedule bad_split(csr{d.graph}, {n / 2}, false, bad_types, true);
  const auto forward_fails = [&](auto& graph) {
    const std::string named = message("has relation ", R, " of ", R);
    CHECK_THROWS_WITH_AS(layer.forward(graph, {}, x, y), doctest::Contains(named.c_str()),
                         invalid_argument);
    matrixd dx;
    CHECK_THROWS_WITH_AS(layer.backward(graph, {}, x, y, matrixd::Ones(n, 2), dx),
                         doctest::Contains("no matching forward"), invalid_argument);
  };
  forward_fails(bad_whole);
  forward_fails(bad_split);
}

TEST_CASE("rgcn_layer and type_projection pass the gradient checker") {
  graph_dataset d = make_planted_heterogeneous(
      {.num_papers = 60, .num_authors = 25, .feature_dim = 4, .author_feature_dim = 2,
       .degree = 2, .authors_per_paper = 2});
  const std::int32_t R = d.schema.num_relations();
  local_schedule whole(csr{d.graph}, matrixf(), std::vector<std::int32_t>(d.edge_types));
  // A bipartite block: 30 papers (ids 25-54) as destinations of their in-edges from all 85
  // nodes, numbered so that the destinations are the first sources (id v is row
  // (v - 25) mod 85).
  const node_t first = 25;
  csr part;
  part.num_rows = 30;
  part.num_cols = d.num_nodes();
  part.offsets.assign(1, 0);
  std::vector<std::int32_t> part_types;
  for (node_t i = first; i < first + 30; ++i) {
    for (edge_t e = d.graph.offsets[i]; e < d.graph.offsets[i + 1]; ++e) {
      part.columns.push_back((d.graph.columns[e] - first + d.num_nodes()) % d.num_nodes());
      part_types.push_back(d.edge_types[e]);
    }
    part.offsets.push_back(static_cast<edge_t>(part.columns.size()));
  }
  for (node_t r = 0; r < part.num_rows; ++r) {  // keep rows sorted
    std::vector<std::pair<node_t, std::int32_t>> row;
    for (edge_t e = part.offsets[r]; e < part.offsets[r + 1]; ++e) row.emplace_back(part.columns[e], part_types[e]);
    std::sort(row.begin(), row.end());
    for (std::size_t k = 0; k < row.size(); ++k) {
      part.columns[part.offsets[r] + k] = row[k].first;
      part_types[part.offsets[r] + k] = row[k].second;
    }
  }
  local_schedule block(std::move(part), matrixf(), std::move(part_types), first);
  const layer_context ctx{.training = true, .seed = 1};
  std::uint64_t seed = 0;
  const auto check = [&](auto layer, local_schedule& g) { check_layer(layer, g, ctx, ++seed); };
  // Several blocks (the sources cut at ids 30 and 60, the last range visited first), with
  // every row in each block or only those with an edge from it (as distributed blocks): each
  // block's relation means multiplied on their own, backward from the source side.
  for (const bool compressed : {false, true}) {
    CAPTURE(compressed);
    testing_support::split_schedule split(csr{d.graph}, {30, 60}, true, d.edge_types, compressed);
    const auto check_split = [&](auto layer) { check_layer(layer, split, ctx, ++seed); };
    check_split(rgcn_layer<double>(4, 3, R));
    check_split(rgcn_layer<double>(4, 3, R, {.self_loop = false, .bias = false}));
    check_split(rgcn_layer<double>(4, 6, R, {.regulariser = rgcn_regulariser::blocks, .count = 2}));
    check_split(rgcn_layer<double>(20, 2, R));
    // and the output of the whole graph's
    rgcn_layer<double> layer(4, 3, R);
    parameter_store<double> store;
    layer.declare(store);
    store.allocate();
    store.initialise(9);
    const matrixd x = testing_support::random_matrix(d.num_nodes(), 4, 10);
    matrixd on_whole, on_split;
    layer.forward(whole, ctx, x, on_whole);
    layer.forward(split, ctx, x, on_split);
    CHECK((on_whole - on_split).cwiseAbs().maxCoeff() < 1e-12);
  }
  for (local_schedule* g : {&whole, &block}) {
    check(rgcn_layer<double>(4, 3, R), *g);
    check(rgcn_layer<double>(4, 3, R, {.self_loop = false, .bias = false}), *g);
    check(rgcn_layer<double>(4, 3, R, {.regulariser = rgcn_regulariser::basis, .count = 2}), *g);
    check(rgcn_layer<double>(4, 6, R, {.regulariser = rgcn_regulariser::blocks, .count = 2}), *g);
    // Weighting first (R F_out < F_in), with and without the self-connection and a basis.
    check(rgcn_layer<double>(20, 2, R), *g);
    check(rgcn_layer<double>(20, 2, R, {.self_loop = false, .bias = false}), *g);
    check(rgcn_layer<double>(20, 2, R, {.regulariser = rgcn_regulariser::basis, .count = 2}), *g);
  }
  check(type_projection<double>(d.schema, 4, 5), whole);
  graph_schema featureless = d.schema;
  featureless.node_types[0].feature_dim = 0;  // authors: one learnt vector
  check(type_projection<double>(featureless, 4, 5), whole);
  CHECK_THROWS_AS(rgcn_layer<double>(4, 3, R, {.regulariser = rgcn_regulariser::blocks, .count = 3}),
                  invalid_argument);
  CHECK_THROWS_AS(type_projection<double>(d.schema, 3, 5), invalid_argument);  // papers have 4
}

TEST_CASE("rgcn_layer without a self-connection keeps its input for backward in a model") {
  // On a whole block backward reads x for dW_r = x^T s_r even without W_0, so a model must
  // keep it although the layer before (dropout) does not read its output.
  const graph_dataset d = small_typed();
  const std::int32_t R = d.schema.num_relations();
  local_schedule graph(csr{d.graph}, matrixf(), std::vector<std::int32_t>(d.edge_types));
  rgcn_layer<double> layer(3, 4, R, {.self_loop = false});
  REQUIRE_FALSE(layer.weight_first());
  CHECK(layer.backward_reads().input);
  sequential<dropout<double>, rgcn_layer<double>> model(dropout<double>(3, 0.5), layer);
  model.initialise(3);
  const matrixd x = testing_support::random_matrix(d.num_nodes(), 3, 4);
  const matrixd dlogits = testing_support::random_matrix(d.num_nodes(), 4, 5);
  const layer_context ctx{.training = true, .seed = 1};
  model.forward(graph, ctx, x);
  CHECK_NOTHROW(model.backward(graph, ctx, dlogits));
  const auto g = model.parameters().grads();
  CHECK(std::any_of(g.begin(), g.end(), [](double v) { return v != 0.0; }));
}

TEST_CASE("node embeddings of a featureless type: rows keyed by node, gradient, Adam, checkpoint") {
  graph_dataset d = make_planted_heterogeneous(
      {.num_papers = 40, .num_authors = 15, .feature_dim = 4, .author_feature_dim = 0,
       .degree = 2, .authors_per_paper = 2});
  REQUIRE(d.schema.node_types[0].feature_dim == 0);  // authors: ids [0, 15)
  local_schedule whole(csr{d.graph}, matrixf(), std::vector<std::int32_t>(d.edge_types));
  const node_t n = d.num_nodes();
  type_projection<double> layer(d.schema, 4, 3, /*embed_featureless=*/true);
  parameter_store<double> store;
  layer.declare(store);
  store.allocate();
  store.initialise(5);
  REQUIRE(store.table_count() == 1);
  CHECK(store.table(0).shape.name == "type_projection.author.embedding");
  const matrixd x = testing_support::random_matrix<double>(n, 4, 6);
  matrixd y;
  CHECK_THROWS_WITH_AS(layer.forward(whole, {}, x, y), doctest::Contains("neither holds nor borrowed"),
                       invalid_argument);  // hold_rows not called
  std::vector<node_t> all(static_cast<std::size_t>(n));
  std::iota(all.begin(), all.end(), node_t{0});
  store.hold_rows(all);
  const row_table<double>& table = store.table(0);
  REQUIRE(table.ids.size() == 15);

  // A rank holding some of the nodes (in any order) starts their rows with the same values.
  parameter_store<double> part;
  type_projection<double>(d.schema, 4, 3, true).declare(part);
  part.allocate();
  part.initialise(5);
  const std::vector<node_t> some{40, 11, 3, 7};
  part.hold_rows(some);
  REQUIRE(part.table(0).ids == std::vector<node_t>{3, 7, 11});
  for (Eigen::Index r = 0; r < 3; ++r)
    CHECK(part.table(0).values.row(r) == table.values.row(table.row_of(part.table(0).ids[r])));
  CHECK_THROWS_AS(part.hold_rows(std::vector<node_t>{3, 3}), invalid_argument);
  CHECK(part.table(0).ids == std::vector<node_t>{3, 7, 11});  // left as it was

  // y_i = b + e_i for an author; the gradient of sum(y .* w) by e is w's author rows, and it
  // matches central differences.
  layer.forward(whole, {}, x, y);
  const auto b = store.value(0);  // type_projection.author.bias (authors have no weight)
  for (node_t i = 0; i < 15; ++i)
    CHECK((y.row(i) - b - table.values.row(table.row_of(i))).cwiseAbs().maxCoeff() < 1e-15);
  const matrixd w = testing_support::random_matrix<double>(n, 3, 7);
  matrixd dx;
  layer.backward(whole, {}, x, y, w, dx);
  const auto loss = [&] {
    matrixd out;
    layer.forward(whole, {}, x, out);
    return out.cwiseProduct(w).sum();
  };
  double worst = 0;
  for (Eigen::Index r = 0; r < table.values.rows(); ++r)
    for (Eigen::Index c = 0; c < 3; ++c) {
      double& v = store.table(0).values(r, c);
      const double saved = v, h = 1e-6;
      v = saved + h;
      const double up = loss();
      v = saved - h;
      const double down = loss();
      v = saved;
      worst = std::max(worst, std::abs((up - down) / (2 * h) - table.grads(r, c)));
    }
  CHECK(worst < 1e-8);
  CHECK(table.grads == w.topRows(15));

  // Adam steps the rows as it steps every other value (no decay), moments kept in the table.
  adam<double> optimiser({.learning_rate = 0.1, .weight_decay = {1.0, 1.0}});
  const matrixd before = table.values;
  optimiser.step(store);
  REQUIRE(table.moments.size() == 2);
  // The first step of Adam moves every value by lr g / (|g| + epsilon).
  const matrixd g = w.topRows(15);
  const matrixd expected =
      before - 0.1 * g.cwiseQuotient((g.cwiseAbs().array() + 1e-8).matrix());
  CHECK((table.values - expected).cwiseAbs().maxCoeff() < 1e-12);

  // A checkpoint keeps every row, and a store holding a subset restores its own rows.
  const testing_support::temp_dir dir("sar-embeddings");
  const auto checkpoint_dir = dir.path / "ck";
  store_model whole_model{&store};
  write_checkpoint(checkpoint_dir, whole_model, optimiser, {}, {});
  const checkpoint ck = read_checkpoint(checkpoint_dir);
  REQUIRE(ck.tables.size() == 1);
  CHECK(ck.tables[0].ids.size() == 15);
  adam<double> resumed_optimiser({.learning_rate = 0.1});
  store_model part_model{&part};
  restore_checkpoint(ck, part_model, resumed_optimiser);
  for (Eigen::Index r = 0; r < 3; ++r) {
    const Eigen::Index from = table.row_of(part.table(0).ids[static_cast<std::size_t>(r)]);
    CHECK(part.table(0).values.row(r) == table.values.row(from));
    CHECK(part.table(0).moments[1].row(r) == table.moments[1].row(from));
  }
  // Gathered over a one-rank communicator: the whole table, as held.
  serial_communicator self;
  const auto gathered = detail::checkpoints::gather_tables(self, store, 0);
  REQUIRE(gathered.size() == 1);
  CHECK(gathered[0].ids == table.ids);
  CHECK(gathered[0].values == table.values);
  CHECK(gathered[0].moments[0] == table.moments[0]);
  // A node the checkpoint lacks is refused, and the store left as it was.
  const auto part_dir = dir.path / "part";
  write_checkpoint(part_dir, part_model, resumed_optimiser, {}, {});
  const matrixd kept = table.values;
  CHECK_THROWS_WITH_AS(restore_checkpoint(read_checkpoint(part_dir), whole_model, optimiser),
                       doctest::Contains("has no row of node 0"), invalid_argument);
  CHECK(table.values == kept);
  graph_schema wider = d.schema;
  wider.node_types[0].count = 16;
  parameter_store<double> wrong;
  type_projection<double>(wider, 4, 3, true).declare(wrong);
  wrong.allocate();
  store_model wrong_model{&wrong};
  CHECK_THROWS_WITH_AS(restore_checkpoint(ck, wrong_model, resumed_optimiser),
                       doctest::Contains("row table 0"), invalid_argument);
  // A model file holds every row of a table: a table missing, or one without a row of some
  // node, is refused.
  CHECK_THROWS_WITH_AS(model_file_content(whole_model, {}), doctest::Contains("1 row tables"),
                       invalid_argument);
  const std::vector<row_table<double>> three{part.table(0)};
  CHECK_THROWS_WITH_AS(model_file_content(whole_model, {}, std::span(three)),
                       doctest::Contains("no rank holds the row of node 0"), invalid_argument);
}

namespace {
/// A planted graph of 200 papers (4 features) and 60 authors without features.
graph_dataset featureless_authors() {
  return make_planted_heterogeneous(
      {.num_papers = 200, .num_authors = 60, .feature_dim = 4, .author_feature_dim = 0});
}

/// R-GCN of hidden width 8 on `data` whose featureless types learn a row per node.
model_config rgcn_with_embeddings(const graph_dataset& data) {
  model_config c = paper_defaults("rgcn");
  c.schema = data.schema;
  c.hidden = 8;
  c.node_embeddings = true;
  return c;
}
}  // namespace

TEST_CASE("a model file keeps per-node embeddings: loaded, each holder's rows predict as the "
          "trained model; a graph with other node counts is refused") {
  const graph_dataset data = featureless_authors();
  const model_config c = rgcn_with_embeddings(data);
  const node_data<float> nodes{data.features, data.labels, data.split};
  auto model = make_model<float, local_schedule>(c, data.features.cols(), 2, 2);
  std::vector<node_t> all(static_cast<std::size_t>(data.num_nodes()));
  std::iota(all.begin(), all.end(), node_t{0});
  model.parameters().hold_rows(all);
  auto optimiser = make_optimiser(c, model);
  local_schedule graph(csr{data.graph}, matrixf(), std::vector<std::int32_t>(data.edge_types));
  train_full_batch(model, graph, optimiser, nodes, {.epochs = 3, .log_progress = false});
  const layer_context eval{.training = false};
  const matrixf expected = model.forward(graph, eval, data.features);

  const testing_support::temp_dir dir("sar-embedded-model");
  const auto file = dir.path / "m.sarmodel";
  serial_communicator self;
  const model_description d{.config = c, .input_dim = data.features.cols(), .output_dim = 2};
  save_model(self, file, model, d);
  const saved_model saved = read_model(file);
  REQUIRE(saved.tables.size() == 1);
  CHECK(saved.tables[0].shape.first_id == 0);
  CHECK(saved.tables[0].shape.end_id == 60);
  CHECK(saved.tables[0].values.size() == 60 * 8);
  CHECK(saved.description.config.node_embeddings);
  auto loaded = load_model<float, local_schedule>(saved);
  hold_saved_rows(loaded, saved, all);
  CHECK(loaded.forward(graph, eval, data.features) == expected);
  // A rank holding some nodes gets exactly their rows.
  auto part = load_model<float, local_schedule>(saved);
  const std::vector<node_t> some{59, 3, 200, 17};
  hold_saved_rows(part, saved, some);
  const row_table<float>& held = part.parameters().table(0);
  REQUIRE(held.ids == std::vector<node_t>{3, 17, 59});
  for (Eigen::Index r = 0; r < 3; ++r)
    CHECK(held.values.row(r) ==
          model.parameters().table(0).values.row(held.ids[static_cast<std::size_t>(r)]));
  // Another author count: the model's table does not fit.
  saved_model other = saved;
  other.description.config.schema.node_types[0].count = 50;
  CHECK_THROWS_WITH_AS((load_model<float, local_schedule>(other)),
                       doctest::Contains("for nodes [0, 60)"), invalid_argument);
}

TEST_CASE("R-GCN learns the planted heterogeneous graph; a GCN with the types erased cannot") {
  const graph_dataset data = make_planted_heterogeneous({.num_papers = 3000, .num_authors = 1000});
  const node_data<float> nodes{data.features, data.labels, data.split};
  const train_options t{.epochs = 60, .seed = 2, .log_progress = false};

  model_config rgcn = paper_defaults("rgcn");
  rgcn.schema = data.schema;
  rgcn.hidden = 16;
  auto relational = make_model<float, local_schedule>(rgcn, data.features.cols(), 2, 3);
  auto relational_optimiser = make_optimiser(rgcn, relational);
  local_schedule typed(csr{data.graph}, matrixf(), std::vector<std::int32_t>(data.edge_types));
  const double typed_accuracy =
      train_full_batch(relational, typed, relational_optimiser, nodes, t).test_score;

  graph_dataset erased = data;
  erase_types(erased);
  model_config gcn = paper_defaults("gcn");
  gcn.hidden = 16;
  auto blind = make_model<float, local_schedule>(gcn, data.features.cols(), 2, 3);
  auto blind_optimiser = make_optimiser(gcn, blind);
  local_schedule untyped(with_self_loops(erased.graph, self_loop_policy::add));
  const double erased_accuracy = train_full_batch(blind, untyped, blind_optimiser, nodes, t).test_score;
  CAPTURE(typed_accuracy);
  CAPTURE(erased_accuracy);
  MESSAGE("R-GCN ", typed_accuracy, ", GCN with types erased ", erased_accuracy);
  CHECK(typed_accuracy > 0.9);
  CHECK(typed_accuracy > erased_accuracy + 0.1);
}

TEST_CASE("R-GCN on minibatches: with every neighbour and one minibatch of all training nodes, "
          "it trains as full batch does; layer-wise inference equals the full-batch forward") {
  const graph_dataset data = make_planted_heterogeneous(
      {.num_papers = 500, .num_authors = 150, .feature_dim = 6, .author_feature_dim = 3,
       .degree = 3, .authors_per_paper = 2});
  model_config c = paper_defaults("rgcn");
  c.schema = data.schema;
  c.hidden = 8;
  c.dropout = 0;  // minibatch masks are keyed by the step
  c.rgcn_bases = 2;
  const node_data<double> nodes{data.features.cast<double>(), data.labels, data.split};
  const train_options t{.epochs = 3, .seed = 3, .log_progress = false};

  auto full_model = make_model<double, local_schedule>(c, data.features.cols(), 2, 2);
  auto full_optimiser = make_optimiser(c, full_model);
  local_schedule whole(csr{data.graph}, matrixf(), std::vector<std::int32_t>(data.edge_types));
  const auto full = train_full_batch(full_model, whole, full_optimiser, nodes, t);

  auto model = make_model<double, local_schedule>(c, data.features.cols(), 2, 2);
  auto optimiser = make_optimiser(c, model);
  sampling_graph sampled(data.graph, matrixf(), data.edge_types);
  const minibatch_options mb{.batch_size = data.count(node_split::train),
                             .sampler = {.fanouts = {-1, -1}, .seed = 3}, .inference_rows = 71};
  const auto minibatch = train_minibatch(model, sampled, optimiser, nodes, t, mb);
  REQUIRE(minibatch.history.size() == full.history.size());
  for (std::size_t e = 0; e < full.history.size(); ++e) {
    CHECK(minibatch.history[e].train_loss == doctest::Approx(full.history[e].train_loss).epsilon(1e-9));
    CHECK(minibatch.history[e].valid_score == doctest::Approx(full.history[e].valid_score).epsilon(1e-9));
  }
  const layer_context ctx{.training = false};
  const matrixd y_full = full_model.forward(whole, ctx, nodes.features);
  const matrixd y_layered = infer_layer_wise(full_model, sampled, nodes.features, ctx, 97);
  CHECK((y_full - y_layered).cwiseAbs().maxCoeff() <= 1e-12 * (1 + y_full.cwiseAbs().maxCoeff()));
}

TEST_CASE("minibatch training with embeddings refuses a store that holds no rows for its "
          "nodes, naming the rank") {
  const graph_dataset data = featureless_authors();
  const model_config c = rgcn_with_embeddings(data);
  const node_data<double> nodes{data.features.cast<double>(), data.labels, data.split};
  auto model = make_model<double, local_schedule>(c, data.features.cols(), 2, 2);
  auto optimiser = make_optimiser(c, model);
  sampling_graph sampled(data.graph, matrixf(), data.edge_types);
  const minibatch_options mb{.batch_size = 16, .sampler = {.fanouts = {3, 3}, .seed = 3}};
  const train_options t{.epochs = 1, .seed = 3, .log_progress = false};
  CHECK_THROWS_WITH_AS(train_minibatch(model, sampled, optimiser, nodes, t, mb),
                       doctest::Contains("rank 0 holds no embedding row for 60 of its nodes"),
                       invalid_argument);
  std::vector<node_t> all(static_cast<std::size_t>(data.num_nodes()));
  std::iota(all.begin(), all.end(), node_t{0});
  model.parameters().hold_rows(all);
  const auto trained = train_minibatch(model, sampled, optimiser, nodes, t, mb);
  CHECK(std::isfinite(trained.history.back().train_loss));
}

TEST_CASE("fanouts per relation: each node draws min(fanout, degree) in-edges of each "
          "relation, the same in a bulk as alone; bad options are refused") {
  const graph_dataset data = make_planted_heterogeneous(
      {.num_papers = 400, .num_authors = 120, .feature_dim = 4, .author_feature_dim = 2, .degree = 6,
       .authors_per_paper = 3, .seed = 2});
  const auto relations = static_cast<std::size_t>(data.schema.num_relations());
  REQUIRE(relations >= 4);
  sampling_graph graph(data.graph, matrixf(), data.edge_types);
  sampler_options o{.fanouts = {5, 5}, .seed = 9};
  o.relation_fanouts = {std::vector<node_t>(relations, 2), std::vector<node_t>(relations, -1)};
  o.relation_fanouts[0][0] = 0;   // layer 0: relation 0 drawn from none
  o.relation_fanouts[0][1] = 1;
  o.relation_fanouts[0][2] = -1;  // relation 2 drawn from all
  bulk_sampler sampler(data.num_nodes(), o);
  std::vector<std::vector<node_t>> batches;
  for (node_t b = 0; b < 4; ++b) {
    batches.emplace_back();
    for (node_t v = 0; v < 30; ++v) batches.back().push_back((b * 97 + v * 11) % data.num_nodes());
  }
  const auto bulk = sampler.sample(graph, batches, batches, 2, 0);
  for (std::size_t b = 0; b < batches.size(); ++b) {
    const auto alone = sampler.sample(graph, std::span(batches).subspan(b, 1),
                                      std::span(batches).subspan(b, 1), 2, b);
    CHECK(bulk[b].ids == alone[0].ids);
    for (std::size_t l = 0; l < 2; ++l) {
      const sampled_block& block = bulk[b].blocks[l];
      CHECK(block.edge_ids == alone[0].blocks[l].edge_ids);
      for (node_t r = 0; r < block.edges.num_rows; ++r) {
        const node_t v = block.ids[r];
        std::vector<edge_t> degree(relations, 0), drawn(relations, 0);
        for (edge_t e = data.graph.offsets[v]; e < data.graph.offsets[v + 1]; ++e)
          ++degree[static_cast<std::size_t>(data.edge_types[e])];
        std::set<edge_t> ids;
        for (edge_t e = block.edges.offsets[r]; e < block.edges.offsets[r + 1]; ++e) {
          const edge_t id = block.edge_ids[e];
          REQUIRE(id >= data.graph.offsets[v]);
          REQUIRE(id < data.graph.offsets[v + 1]);
          CHECK(data.graph.columns[id] == block.ids[block.edges.columns[e]]);
          ++drawn[static_cast<std::size_t>(data.edge_types[id])];
          ids.insert(id);
        }
        CHECK(ids.size() == static_cast<std::size_t>(block.edges.offsets[r + 1] - block.edges.offsets[r]));
        for (std::size_t t = 0; t < relations; ++t) {
          const node_t f = o.relation_fanouts[l][t];
          CHECK(drawn[t] == (f < 0 ? degree[t] : std::min<edge_t>(f, degree[t])));
        }
      }
    }
  }
  // Refused: LADIES, a graph without relations, an edge of a relation with no fanout, a
  // fanout below -1, more layers than fanouts.
  CHECK_THROWS_AS(bulk_sampler(data.num_nodes(), {.kind = sampler_kind::layer_wise,
                                                  .fanouts = {5}, .seed = 1,
                                                  .relation_fanouts = {{1, 1}}}),
                  invalid_argument);
  sampling_graph untyped(data.graph);
  CHECK_THROWS_AS(bulk_sampler(data.num_nodes(), {.fanouts = {5}, .seed = 1,
                                                  .relation_fanouts = {{1, 1}}})
                      .sample(untyped, std::span(batches).subspan(0, 1),
                              std::span(batches).subspan(0, 1), 0, 0),
                  invalid_argument);
  CHECK_THROWS_AS(bulk_sampler(data.num_nodes(), {.fanouts = {5}, .seed = 1,
                                                  .relation_fanouts = {{1}}})
                      .sample(graph, std::span(batches).subspan(0, 1),
                              std::span(batches).subspan(0, 1), 0, 0),
                  invalid_argument);
  CHECK_THROWS_AS(bulk_sampler(data.num_nodes(), {.fanouts = {5}, .seed = 1,
                                                  .relation_fanouts = {{1, -2}}}),
                  invalid_argument);
  CHECK_THROWS_AS(bulk_sampler(data.num_nodes(), {.fanouts = {5}, .seed = 1,
                                                  .relation_fanouts = {{1}, {1}}}),
                  invalid_argument);
}

TEST_CASE("a partition store keeps the schema and each in-edge's relation (format 6)") {
  const graph_dataset data = make_planted_heterogeneous(
      {.num_papers = 300, .num_authors = 100, .feature_dim = 4, .author_feature_dim = 2});
  const std::vector<int> parts = partition_random(data.num_nodes(), 3, 1);
  const testing_support::temp_dir dir("hetero-store");
  const partition_metadata meta = write_partition_store(data, parts, 3, dir.path / "store");
  CHECK(read_partition_metadata(dir.path / "store").schema == data.schema);
  std::map<std::tuple<node_t, node_t, std::int32_t>, int> want, got;  // (source, destination,
                                                                       // relation) in dataset ids
  for (node_t i = 0; i < data.num_nodes(); ++i)
    for (edge_t e = data.graph.offsets[i]; e < data.graph.offsets[i + 1]; ++e)
      ++want[{data.graph.columns[e], i, data.edge_types[e]}];
  std::vector<node_t> dataset_id(static_cast<std::size_t>(data.num_nodes()));
  std::vector<graph_part> read;
  for (int p = 0; p < 3; ++p) {
    read.push_back(read_partition_part(dir.path / "store", p));
    const graph_part& part = read.back();
    CHECK(part.schema == data.schema);
    for (node_t r = 0; r < part.num_local(); ++r)
      dataset_id[static_cast<std::size_t>(part.first_global() + r)] = part.original_ids[r];
  }
  for (const graph_part& part : read)
    for (node_t r = 0; r < part.num_local(); ++r)
      for (edge_t e = part.in_edges.offsets[r]; e < part.in_edges.offsets[r + 1]; ++e)
        ++got[{dataset_id[static_cast<std::size_t>(part.in_edges.columns[e])], part.original_ids[r],
               part.edge_types[e]}];
  CHECK(got == want);
  CHECK(meta.num_edges == data.graph.num_edges());
}

TEST_CASE("relation_wise sums one homogeneous layer per relation, each on its relation's "
          "edges and degrees; it passes the gradient checker with GCN, GraphSAGE and GAT") {
  const graph_dataset d = make_planted_heterogeneous(
      {.num_papers = 60, .num_authors = 25, .feature_dim = 4, .author_feature_dim = 2,
       .degree = 2, .authors_per_paper = 2});
  const std::int32_t R = d.schema.num_relations();
  auto graph = make_relational_graph(d.graph, d.edge_types, R);
  REQUIRE(graph.num_relations() == R);
  for (std::int32_t r = 0; r < R; ++r) {  // relation r's schedule holds its edges alone
    edge_t count = 0;
    for (const std::int32_t t : d.edge_types) count += t == r;
    CHECK(graph.relation(r).graph().num_edges() == count);
  }
  using sage = sage_layer<double, mean_aggregator>;
  const matrixd x = testing_support::random_matrix(d.num_nodes(), 4, 9);
  const layer_context ctx{.training = true, .seed = 1};
  // Against R separate GraphSAGE layers on separately built relation graphs, declared in the
  // same order (so initialised alike): the sum of their outputs.
  relation_wise<sage> composed(sage(4, 3), R);
  parameter_store<double> store;
  composed.declare(store);
  store.allocate();
  store.initialise(5);
  matrixd y;
  composed.forward(graph, ctx, x, y);
  std::vector<sage> separate(static_cast<std::size_t>(R), sage(4, 3));
  parameter_store<double> separate_store;
  for (sage& l : separate) l.declare(separate_store);
  separate_store.allocate();
  separate_store.initialise(5);
  matrixd want = matrixd::Zero(d.num_nodes(), 3);
  for (std::int32_t r = 0; r < R; ++r) {
    auto [edges, features] = relation_edges(d.graph, d.edge_types, matrixf(), r);
    local_schedule alone(std::move(edges));
    matrixd y_r;
    separate[static_cast<std::size_t>(r)].forward(alone, ctx, x, y_r);
    want += y_r;
  }
  CHECK((y - want).cwiseAbs().maxCoeff() < 1e-12);

  std::uint64_t seed = 10;
  const auto check = [&](auto layer) { check_layer(layer, graph, ctx, ++seed); };
  check(relation_wise<gcn_layer<double>>(gcn_layer<double>(4, 3), R));
  check(relation_wise<gcn_layer<double>>(gcn_layer<double>(3, 5), R));
  check(relation_wise<sage>(sage(4, 3), R));
  check(relation_wise<gat_layer<double>>(gat_layer<double>(4, 3, {.heads = 2}), R));
  relation_wise<sage> wrong(sage(4, 3), R - 1);
  parameter_store<double> s;
  wrong.declare(s);
  s.allocate();
  CHECK_THROWS_AS(wrong.forward(graph, ctx, x, y), invalid_argument);
}
