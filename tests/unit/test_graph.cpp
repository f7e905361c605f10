// CSR, builders and generators.
#include <doctest/doctest.h>

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
