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
