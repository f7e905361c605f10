// Dense layers, losses, optimisers, the SpMM kernel and the gradient checker.
#include <doctest/doctest.h>

#include <tbb/global_control.h>

#include <random>

#include "sar/graph/builders.hpp"
#include "sar/kernels/spmm.hpp"

using namespace sar;

namespace {

/// A random graph on n nodes with ~avg_degree in-edges per node, some isolated nodes, and
/// self-loops on every third node. Duplicated edges are kept (they must count twice).
csr random_graph(node_t n, int avg_degree, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  edge_list edges;
  edges.num_nodes = n;
  std::uniform_int_distribution<node_t> pick(0, n - 1);
  for (node_t i = 0; i < n; ++i) {
    if (i % 7 == 3) continue;  // isolated destinations
    if (i % 3 == 0) edges.push_back(i, i);
    for (int k = 0; k < avg_degree; ++k) {
      const node_t j = pick(gen);
      if (j % 7 != 3) edges.push_back(j, i);  // isolated sources too
    }
  }
  return build_csr(edges, {.deduplicate = false});
}

template <class T>
matrix<T> random_matrix(Eigen::Index rows, Eigen::Index cols, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  matrix<T> m(rows, cols);
  for (Eigen::Index k = 0; k < m.size(); ++k) m.data()[k] = static_cast<T>(u(gen));
  return m;
}

}  // namespace

TEST_CASE("spmm_add equals a dense product, adds into out, and does not depend on threads") {
  const csr a = random_graph(300, 9, 1);
  REQUIRE(a.num_edges() > 1000);
  matrixd dense = matrixd::Zero(a.num_rows, a.num_cols);
  for (node_t i = 0; i < a.num_rows; ++i)
    for (node_t j : a.row(i)) dense(i, j) += 1.0;
  CHECK(dense.diagonal().sum() > 50);                      // self-loops present
  CHECK((dense.rowwise().sum().array() == 0).count() > 20);  // isolated nodes present
  for (Eigen::Index f : {1, 5, 64}) {
    const matrixd x = random_matrix<double>(a.num_cols, f, 2);
    const matrixd start = random_matrix<double>(a.num_rows, f, 3);
    matrixd out = start;
    spmm_add(a, x, out);
    CHECK((out - (start + dense * x)).cwiseAbs().maxCoeff() < 1e-12);

    const csr at = transpose(a);
    matrixd back = start;
    spmm_add(at, x, back);
    CHECK((back - (start + dense.transpose() * x)).cwiseAbs().maxCoeff() < 1e-12);

    matrixd one_thread = start, two_threads = start;
    {
      tbb::global_control limit(tbb::global_control::max_allowed_parallelism, 1);
      spmm_add(a, x, one_thread);
    }
    {
      tbb::global_control limit(tbb::global_control::max_allowed_parallelism, 2);
      spmm_add(a, x, two_threads);
    }
    CHECK(one_thread == two_threads);
    CHECK(one_thread == out);
  }
}

TEST_CASE("spmm_add: float, weighted edges, row blocks, and shape errors") {
  const csr a = random_graph(50, 4, 4);
  const matrixf x = random_matrix<float>(50, 7, 5);
  matrixf out = matrixf::Zero(50, 7);
  spmm_add(a, x, out);
  matrixf ref = matrixf::Zero(50, 7);
  for (node_t i = 0; i < 50; ++i)
    for (node_t j : a.row(i)) ref.row(i) += x.row(j);
  CHECK((out - ref).cwiseAbs().maxCoeff() < 1e-5f);

  std::vector<double> w(a.num_edges());
  for (std::size_t e = 0; e < w.size(); ++e) w[e] = 0.25 + 0.5 * static_cast<double>(e % 3);
  const matrixd xd = x.cast<double>();
  matrixd outw = matrixd::Zero(50, 7), refw = matrixd::Zero(50, 7);
  spmm_add(a, std::span<const double>(w), xd, outw);
  for (node_t i = 0; i < 50; ++i)
    for (edge_t e = a.offsets[i]; e < a.offsets[i + 1]; ++e)
      refw.row(i) += w[e] * xd.row(a.columns[e]);
  CHECK((outw - refw).cwiseAbs().maxCoeff() < 1e-12);

  // Columns 2..4 of a wider matrix (outer stride != cols) as both operands.
  matrixd wide = matrixd::Zero(50, 9);
  spmm_add(a, xd.middleCols(2, 3), wide.middleCols(4, 3));
  CHECK((wide.middleCols(4, 3) - ref.cast<double>().middleCols(2, 3)).cwiseAbs().maxCoeff() <
        1e-6);
  CHECK(wide.leftCols(4).isZero());

  matrixd wrong(49, 7);
  CHECK_THROWS_AS(spmm_add(a, xd, wrong), invalid_argument);
}
