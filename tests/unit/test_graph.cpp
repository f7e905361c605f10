// CSR, builders and generators.
#include <doctest/doctest.h>

#include <tbb/task_arena.h>

#include "sar/graph/builders.hpp"

using namespace sar;

TEST_CASE("build_csr symmetrises, deduplicates and applies the self-loop policy") {
  edge_list edges;
  edges.num_nodes = 4;
  edges.push_back(0, 1);
  edges.push_back(0, 1);  // duplicate
  edges.push_back(2, 2);  // self-loop
  edges.push_back(3, 1);
  const csr g = build_csr(edges, {.symmetrise = true});
  g.validate();
  CHECK(g.num_edges() == 5);  // 0<->1, 1<->3, 2->2
  CHECK(is_symmetric(g));
  CHECK(std::vector<node_t>(g.row(1).begin(), g.row(1).end()) == std::vector<node_t>{0, 3});
}

#include "sar/graph/generators.hpp"

TEST_CASE("build_csr adds exactly one self-loop per node and keeps rows sorted") {
  edge_list edges;
  edges.num_nodes = 3;
  edges.push_back(2, 0);
  edges.push_back(0, 0);
  edges.push_back(0, 0);
  const csr g = build_csr(edges, {.deduplicate = false, .self_loops = self_loop_policy::add});
  g.validate();
  for (node_t i = 0; i < 3; ++i) {
    const auto row = g.row(i);
    CHECK(std::count(row.begin(), row.end(), i) == 1);
    CHECK(std::is_sorted(row.begin(), row.end()));
  }
  CHECK(g.num_edges() == 4);  // 0<-0, 0<-2, 1<-1, 2<-2
  const csr t = transpose(g);
  CHECK(t.row(2).size() == 2);
  CHECK(transpose(t) == g);
}

TEST_CASE("build_csr names the offending edge") {
  edge_list edges;
  edges.num_nodes = 2;
  edges.push_back(0, 1);
  edges.push_back(5, 1);
  CHECK_THROWS_WITH_AS(build_csr(edges), doctest::Contains("edge 1 (5 -> 1)"), invalid_argument);
}

TEST_CASE("build_csr does not depend on the number of threads") {
  const auto edges = make_rmat({.scale = 12, .num_edges = 60000, .seed = 3});
  const csr parallel = build_csr(edges, {.symmetrise = true});
  tbb::task_arena one_thread(1);
  csr serial;
  one_thread.execute([&] { serial = build_csr(edges, {.symmetrise = true}); });
  CHECK(parallel == serial);
  CHECK(is_symmetric(parallel));
}

TEST_CASE("planted partition: deterministic, homophilous, requested size") {
  planted_partition_options o{.num_nodes = 5000, .num_classes = 5, .average_degree = 12,
                              .homophily = 0.8, .feature_dim = 8, .seed = 7};
  const graph_dataset a = make_planted_partition(o);
  const graph_dataset b = make_planted_partition(o);
  a.validate();
  CHECK(a.graph == b.graph);
  CHECK(a.features == b.features);
  CHECK(a.labels == b.labels);
  CHECK(is_symmetric(a.graph));
  const double degree = static_cast<double>(a.graph.num_edges()) / a.num_nodes();
  CHECK(degree == doctest::Approx(12).epsilon(0.05));
  edge_t same = 0;
  for (node_t i = 0; i < a.num_nodes(); ++i)
    for (node_t j : a.graph.row(i)) same += a.labels[i] == a.labels[j];
  // inside edges: 0.8 plus the 1/5 of outside edges that land in the class by chance
  CHECK(static_cast<double>(same) / a.graph.num_edges() == doctest::Approx(0.84).epsilon(0.03));
  CHECK(a.count(node_split::train) == doctest::Approx(500).epsilon(0.15));
  o.seed = 8;
  CHECK_FALSE(make_planted_partition(o).graph == a.graph);
  CHECK_THROWS_AS(make_planted_partition({.num_nodes = 0}), invalid_argument);
}

TEST_CASE("R-MAT: power law with isolated nodes, self-loops and duplicates") {
  const auto edges = make_rmat({.scale = 14, .num_edges = 100000, .seed = 1});
  CHECK(edges.num_nodes == 16384);
  const csr g = build_csr(edges, {.symmetrise = true, .deduplicate = false});
  const auto degrees = in_degrees(g);
  const auto isolated = std::count(degrees.begin(), degrees.end(), 0);
  CHECK(isolated > 0);
  const auto max_degree = *std::max_element(degrees.begin(), degrees.end());
  CHECK(max_degree > 50 * (2 * 100000 / 16384));  // heavy tail: far above the mean
  edge_t loops = 0;
  for (std::size_t k = 0; k < edges.size(); ++k) loops += edges.src[k] == edges.dst[k];
  CHECK(loops > 0);
  CHECK(build_csr(edges).num_edges() < static_cast<edge_t>(edges.size()));  // duplicates merged
}

TEST_CASE("with_self_loops adds or removes exactly the diagonal, also for an offset part") {
  edge_list edges;
  edges.num_nodes = 4;
  edges.push_back(1, 1);
  edges.push_back(1, 1);
  edges.push_back(0, 1);
  edges.push_back(3, 2);
  const csr g = build_csr(edges, {.deduplicate = false});
  const csr added = with_self_loops(g, self_loop_policy::add);
  CHECK(added == build_csr(edges, {.deduplicate = false, .self_loops = self_loop_policy::add}));
  CHECK(with_self_loops(g, self_loop_policy::remove) ==
        build_csr(edges, {.deduplicate = false, .self_loops = self_loop_policy::remove}));
  // rows 2..3 of the graph as a part whose first global id is 2
  csr part;
  part.num_rows = 2;
  part.num_cols = 4;
  part.offsets = {0, 1, 1};
  part.columns = {3};
  const csr part_loops = with_self_loops(part, self_loop_policy::add, 2);
  CHECK(part_loops.columns == std::vector<node_t>{2, 3, 3});
  CHECK(part_loops.offsets == std::vector<edge_t>{0, 2, 3});
}

// --- Edge data: origins through build_csr, rows through parts and shards, the edge layers ---

#include <map>
#include <random>

#include "sar/distributed/graph_shard.hpp"
#include "sar/nn/edge_conv.hpp"
#include "sar/partition/store.hpp"
#include "sar/schedule/local_schedule.hpp"
#include "sar/testing/gradient_checker.hpp"
#include "test_support.hpp"

namespace {
/// Random directed edges (with duplicates, reverses and self-loops) on n nodes.
edge_list random_edges(node_t n, int count, std::uint64_t seed) {
  edge_list edges;
  edges.num_nodes = n;
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<node_t> pick(0, n - 1);
  for (int k = 0; k < count; ++k) edges.push_back(pick(gen), pick(gen));
  return edges;
}
}  // namespace

TEST_CASE("build_csr reports each entry's input edge: earliest given edge first, reverses after") {
  const edge_list edges = random_edges(30, 200, 5);
  for (const build_options options :
       {build_options{}, build_options{.symmetrise = true},
        build_options{.symmetrise = true, .self_loops = self_loop_policy::add},
        build_options{.deduplicate = false, .self_loops = self_loop_policy::remove}}) {
    std::vector<edge_t> origins;
    const csr g = build_csr(edges, options, &origins);
    CHECK(g == build_csr(edges, options));  // the same graph as without origins
    REQUIRE(origins.size() == static_cast<std::size_t>(g.num_edges()));
    for (node_t i = 0; i < g.num_rows; ++i)
      for (edge_t e = g.offsets[i]; e < g.offsets[i + 1]; ++e) {
        const node_t j = g.columns[e];
        const edge_t k = origins[e];
        if (k < 0) {  // only the add policy's self-loops
          CHECK((options.self_loops == self_loop_policy::add && i == j));
          continue;
        }
        const bool given = edges.src[k] == j && edges.dst[k] == i;
        CHECK((given || (options.symmetrise && edges.src[k] == i && edges.dst[k] == j)));
        if (!options.deduplicate) continue;
        // no earlier given edge j -> i, and a reverse only when no given edge exists at all
        for (std::size_t a = 0; a < edges.size(); ++a) {
          const bool same = edges.src[a] == j && edges.dst[a] == i;
          if (same) CHECK((given && static_cast<edge_t>(a) >= k));
        }
      }
  }
  matrixf per_edge(static_cast<Eigen::Index>(edges.size()), 2);
  for (std::size_t k = 0; k < edges.size(); ++k)
    per_edge.row(static_cast<Eigen::Index>(k)) << float(edges.src[k]), float(edges.dst[k]);
  std::vector<edge_t> origins;
  build_csr(edges, {.symmetrise = true, .self_loops = self_loop_policy::add}, &origins);
  const matrixf rows = take_edge_rows(per_edge, origins);
  for (std::size_t e = 0; e < origins.size(); ++e)
    if (origins[e] < 0) CHECK(rows.row(static_cast<Eigen::Index>(e)).isZero());
  origins[0] = 999;
  CHECK_THROWS_WITH_AS(take_edge_rows(per_edge, origins), doctest::Contains("entry 0"),
                       invalid_argument);
}

namespace {
/// A dataset of n nodes whose edge features name each edge: (source id, destination id, 1).
graph_dataset dataset_with_edge_ids(node_t n, int draws, std::uint64_t seed) {
  graph_dataset data;
  data.graph = build_csr(random_edges(n, draws, seed), {.symmetrise = true});
  data.features = testing_support::random_matrix<float>(n, 3, seed + 1);
  data.edge_features.resize(data.graph.num_edges(), 3);
  for (node_t i = 0; i < n; ++i)
    for (edge_t e = data.graph.offsets[i]; e < data.graph.offsets[i + 1]; ++e)
      data.edge_features.row(e) << float(data.graph.columns[e]), float(i), 1.0f;
  data.validate();
  return data;
}
}  // namespace

TEST_CASE("edge features follow their edges into parts and shard blocks") {
  const node_t n = 60;
  const graph_dataset data = dataset_with_edge_ids(n, 300, 11);
  std::vector<int> assignment(n);
  std::mt19937_64 gen(3);
  for (auto& p : assignment) p = static_cast<int>(gen() % 3);
  const relabelling ids = relabel(assignment, 3);
  for (int p = 0; p < 3; ++p) {
    const graph_part part = detail::store::part_of(data, ids, p);
    part.validate("test");
    REQUIRE(part.edge_features.rows() == part.in_edges.num_edges());
    for (node_t r = 0; r < part.num_local(); ++r)
      for (edge_t e = part.in_edges.offsets[r]; e < part.in_edges.offsets[r + 1]; ++e) {
        CHECK(part.edge_features(e, 0) == float(ids.old_of_new[part.in_edges.columns[e]]));
        CHECK(part.edge_features(e, 1) == float(part.original_ids[r]));
      }
    const graph_shard shard(part);
    for (int q = 0; q < 3; ++q) {
      const shard_block& b = shard.block(q);
      REQUIRE(b.edge_rows.size() == static_cast<std::size_t>(b.num_edges()));
      for (std::size_t k = 0; k < b.rows.size(); ++k)
        for (edge_t e = b.adjacency.offsets[k]; e < b.adjacency.offsets[k + 1]; ++e) {
          const node_t source = ids.old_of_new[shard.global_source(q, b.adjacency.columns[e])];
          const auto row = shard.edge_features().row(b.edge_rows[e]);
          CHECK(row(0) == float(source));
          CHECK(row(1) == float(part.original_ids[b.rows[k]]));
        }
    }
  }
  // Without edge features nothing is added per edge.
  graph_dataset plain = data;
  plain.edge_features = matrixf();
  const graph_shard shard(detail::store::part_of(plain, ids, 0));
  CHECK(shard.block(0).edge_rows.empty());
  CHECK(shard.edge_features().size() == 0);
  plain.edge_features = matrixf::Zero(5, 2);
  CHECK_THROWS_WITH_AS(plain.validate(), doctest::Contains("5 edge feature rows for"),
                       invalid_argument);
}

namespace {
/// The formula of edge_conv (sar/nn/edge_conv.hpp), written out edge by edge with the
/// parameters in declaration order.
matrixd edge_conv_reference(const parameter_store<double>& s, const csr& g, const matrixd& x,
                            const matrixf& ef) {
  const auto w_d = s.value(0), w_s = s.value(1), w_e = s.value(2), b_1 = s.value(3),
             w_2 = s.value(4), b_2 = s.value(5), v_1 = s.value(6), c_1 = s.value(7),
             v_2 = s.value(8), c_2 = s.value(9);
  const Eigen::Index f = x.cols(), h = w_2.rows();
  matrixd y(g.num_rows, f);
  for (node_t i = 0; i < g.num_rows; ++i) {
    matrixd sum = matrixd::Zero(1, h);
    for (edge_t e = g.offsets[i]; e < g.offsets[i + 1]; ++e) {
      const matrixd z = x.row(i) * w_d + x.row(g.columns[e]) * w_s +
                        ef.row(e).cast<double>() * w_e + b_1;
      sum += z.cwiseMax(0.0) * w_2 + b_2;
    }
    matrixd input(1, f + h);
    input << x.row(i), sum;
    y.row(i) = x.row(i) + (input * v_1 + c_1).cwiseMax(0.0) * v_2 + c_2;
  }
  return y;
}

/// A bipartite block: destinations 0..d-1 are the first of m sources.
csr bipartite(node_t d, node_t m, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<node_t> pick(0, m - 1);
  csr g;
  g.num_rows = d;
  g.num_cols = m;
  for (node_t i = 0; i < d; ++i) {
    std::vector<node_t> row;
    for (int k = 0; k < 1 + static_cast<int>(gen() % 4); ++k) row.push_back(pick(gen));
    std::sort(row.begin(), row.end());
    g.columns.insert(g.columns.end(), row.begin(), row.end());
    g.offsets.push_back(static_cast<edge_t>(g.columns.size()));
  }
  return g;
}
}  // namespace

TEST_CASE("edge_conv computes its formula; gradient checks with and without an edge state") {
  using testing_support::random_matrix;
  const csr full = build_csr(random_edges(14, 40, 21), {.symmetrise = true});
  const csr part = bipartite(6, 13, 22);
  const gradient_check_options options{.tolerance = 2e-6};
  for (const csr* g : {&full, &part}) {
    const matrixf ef = random_matrix<float>(g->num_edges(), 3, 23);
    local_schedule graph(*g, ef);
    const matrixd x = random_matrix<double>(g->num_cols, 5, 24);
    const layer_context ctx;
    INFO("graph ", g->num_rows, " x ", g->num_cols);
    {
      edge_conv<double> layer(5, 3, 4);
      parameter_store<double> store;
      layer.declare(store);
      store.allocate();
      store.initialise(25);
      for (std::size_t p = 0; p < store.size(); ++p)  // non-zero biases too
        store.value(p) += random_matrix<double>(store.value(p).rows(), store.value(p).cols(),
                                                30 + p, -0.2, 0.2);
      matrixd y;
      layer.forward(graph, ctx, x, y);
      CHECK((y - edge_conv_reference(store, *g, x, ef)).cwiseAbs().maxCoeff() < 1e-12);
      const auto result = check_gradients(layer, store, graph, ctx, x, options);
      CHECK_MESSAGE(result.passed, result.summary());
    }
    {
      edge_conv<double> layer(5, 3, 4, message_aggregation::mean);
      const auto result = check_gradients(layer, graph, ctx, x, options);
      CHECK_MESSAGE(result.passed, "mean: " << result.summary());
    }
    for (int steps : {1, 2}) {
      if (g == &part && steps > 1) {
        edge_processor<double> layer(5, 3, 4, steps);
        CHECK_THROWS_WITH_AS(check_gradients(layer, graph, ctx, x, options),
                             doctest::Contains("bipartite block"), invalid_argument);
        continue;
      }
      INFO("edge_processor, steps ", steps);
      for (auto aggregation : {message_aggregation::sum, message_aggregation::mean}) {
        edge_processor<double> layer(5, 3, 4, steps, aggregation);
        const auto result = check_gradients(layer, graph, ctx, x, options);
        CHECK_MESSAGE(result.passed, result.summary());
        CHECK(result.parameters.size() == 2 + 10 * static_cast<std::size_t>(steps));
      }
    }
    for (int steps : {1, 3}) {  // MeshGraphNets' layer norm: every norm's gain and bias random
      if (g == &part && steps > 1) continue;
      for (auto aggregation : {message_aggregation::sum, message_aggregation::mean}) {
        INFO("edge_processor with layer norm, steps ", steps);
        edge_processor<double> layer(5, 3, 4, steps, aggregation, true);
        parameter_store<double> store;
        layer.declare(store);
        store.allocate();
        store.initialise(26);
        for (std::size_t p = 0; p < store.size(); ++p)
          store.value(p) += random_matrix<double>(store.value(p).rows(), store.value(p).cols(),
                                                  40 + p, -0.3, 0.3);
        const auto result = check_gradients(layer, store, graph, ctx, x, options);
        CHECK_MESSAGE(result.passed, result.summary());
        CHECK(result.parameters.size() == 4 + 14 * static_cast<std::size_t>(steps));
      }
    }
  }
  edge_conv<double> layer(5, 2);
  local_schedule wrong(full, random_matrix<float>(full.num_edges(), 3, 1));
  const matrixd x = random_matrix<double>(14, 5, 2);
  CHECK_THROWS_WITH_AS(check_gradients(layer, wrong, layer_context{}, x),
                       doctest::Contains("edge features are"), invalid_argument);
  CHECK_THROWS_WITH_AS(local_schedule(full, matrixf::Zero(3, 2)),
                       doctest::Contains("3 edge feature rows"), invalid_argument);
}

#include "sar/nn/layer_norm.hpp"

TEST_CASE("layer_norm normalises each row; gradient checks") {
  using testing_support::random_matrix;
  const csr g = build_csr(random_edges(9, 20, 51), {.symmetrise = true});
  local_schedule graph(g);
  const matrixd x = random_matrix<double>(9, 6, 52, -2.0, 3.0);
  layer_norm<double> layer(6, "norm");
  parameter_store<double> store;
  layer.declare(store);
  store.allocate();
  store.initialise(53);
  CHECK(store.value(0) == matrixd::Ones(1, 6));  // gain
  CHECK(store.value(1) == matrixd::Zero(1, 6));  // bias
  for (std::size_t p = 0; p < store.size(); ++p)
    store.value(p) += random_matrix<double>(1, 6, 54 + p, -0.5, 0.5);
  matrixd y;
  layer.forward(graph, layer_context{}, x, y);
  for (Eigen::Index i = 0; i < x.rows(); ++i) {  // PyTorch's nn.LayerNorm(6)
    const double mean = x.row(i).mean();
    const double var = (x.row(i).array() - mean).square().mean();
    const row_vector<double> expected = ((x.row(i).array() - mean) / std::sqrt(var + 1e-5)).matrix()
                                .cwiseProduct(store.value(0)) + store.value(1);
    CHECK((y.row(i) - expected).cwiseAbs().maxCoeff() < 1e-12);
  }
  const auto result = check_gradients(layer, store, graph, layer_context{}, x,
                                      gradient_check_options{.tolerance = 1e-6});
  CHECK_MESSAGE(result.passed, result.summary());
  CHECK_THROWS_WITH_AS(layer_norm<double>(0), doctest::Contains("width 0"), invalid_argument);
}

#include "sar/nn/gcn.hpp"

TEST_CASE("edge-weighted GCN: self-loops weighing 1, the formula, gradient checks, errors") {
  using testing_support::random_matrix;
  // apply_self_loops: each entry keeps its row; an added loop's row is the fill, a row's first
  // given loop keeps its own.
  const csr given = build_csr(random_edges(12, 40, 31), {.symmetrise = true});
  const matrixf given_rows = random_matrix<float>(given.num_edges(), 2, 32);
  csr g = given;
  matrixf ef = given_rows;
  apply_self_loops(g, ef, self_loop_policy::add, 0, 1.0f);
  CHECK(g == with_self_loops(given, self_loop_policy::add));
  REQUIRE(ef.rows() == g.num_edges());
  for (node_t i = 0; i < g.num_rows; ++i)
    for (edge_t e = g.offsets[i]; e < g.offsets[i + 1]; ++e) {
      const auto row = given.row(i);
      const auto at = std::lower_bound(row.begin(), row.end(), g.columns[e]);
      const bool had = at != row.end() && *at == g.columns[e];
      CHECK(had == (g.columns[e] != i || std::count(row.begin(), row.end(), i) > 0));
      if (had) CHECK((ef.row(e).array() == given_rows.row(given.offsets[i] + (at - row.begin())).array()).all());
      else CHECK((ef.row(e).array() == 1.0f).all());
    }

  // y = D^-1/2 A_w D^-1/2 x W + b (degrees: edge counts), weight first (5 -> 3) and after.
  local_schedule graph(g, ef);
  const matrixd x = random_matrix<double>(12, 5, 33);
  const layer_context ctx;
  const std::vector<node_t> din = in_degrees(g), dout = out_degrees(g);
  for (bool aggregate_first : {false, true}) {
    INFO("aggregate first ", aggregate_first);
    gcn_layer<double> layer(5, 3, true, aggregate_first, 1);
    parameter_store<double> store;
    layer.declare(store);
    store.allocate();
    store.initialise(34);
    store.value(1) = random_matrix<double>(1, 3, 35);
    matrixd y;
    layer.forward(graph, ctx, x, y);
    matrixd expected = matrixd::Zero(12, 3);
    for (node_t i = 0; i < 12; ++i) {
      for (edge_t e = g.offsets[i]; e < g.offsets[i + 1]; ++e) {
        const node_t j = g.columns[e];
        expected.row(i) += ef(e, 1) / std::sqrt(double(din[i]) * dout[j]) * (x.row(j) * store.value(0));
      }
      expected.row(i) += store.value(1);
    }
    CHECK((y - expected).cwiseAbs().maxCoeff() < 1e-12);
    CHECK(layer.weight_first() == !aggregate_first);
    const auto result = check_gradients(layer, graph, ctx, x, {.tolerance = 2e-6});
    CHECK_MESSAGE(result.passed, result.summary());
  }
  // Weights of 1 are the unweighted layer, bitwise up to the product's rounding.
  matrixf ones = matrixf::Ones(g.num_edges(), 1);
  local_schedule unit(g, ones);
  for (bool aggregate_first : {false, true}) {
    gcn_layer<double> weighted(5, 3, true, aggregate_first, 0), plain(5, 3, true, aggregate_first);
    parameter_store<double> a, b;
    weighted.declare(a);
    plain.declare(b);
    a.allocate();
    b.allocate();
    a.initialise(36);
    b.initialise(36);
    matrixd ya, yb;
    weighted.forward(unit, ctx, x, ya);
    plain.forward(unit, ctx, x, yb);
    CHECK((ya - yb).cwiseAbs().maxCoeff() < 1e-12);
  }
  // A column the edge table lacks, or no edge table at all: named.
  gcn_layer<double> third(5, 3, true, false, 2);
  CHECK_THROWS_WITH_AS(check_gradients(third, graph, ctx, x),
                       doctest::Contains("edges weighted by edge feature 2, but the graph has 2"),
                       invalid_argument);
  local_schedule bare(g);
  gcn_layer<double> weighted(5, 3, true, false, 0);
  CHECK_THROWS_WITH_AS(check_gradients(weighted, bare, ctx, x),
                       doctest::Contains("has 0 features per edge"), invalid_argument);
  CHECK_THROWS_AS(gcn_layer<double>(5, 3, true, false, -2), invalid_argument);
  matrixf short_table = matrixf::Zero(3, 2);
  csr h = given;
  CHECK_THROWS_WITH_AS(apply_self_loops(h, short_table, self_loop_policy::add),
                       doctest::Contains("3 edge feature rows"), invalid_argument);
}
