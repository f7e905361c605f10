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

// ---------------------------------------------------------------------------------------------
// The gradient checker, on a small test layer with deliberate bugs.
#include "sar/testing/gradient_checker.hpp"

namespace {

enum class bug { none, assigns_dx, wrong_gradient, partial_output, adds_parameter_gradient };

/// y = x W + A x W (aggregate after the product), W square; with an optional deliberate bug.
struct test_conv {
  using scalar = double;
  Eigen::Index dim;
  bug defect = bug::none;
  parameter_store<double>* store = nullptr;
  std::size_t w = 0;

  Eigen::Index input_dim() const { return dim; }
  Eigen::Index output_dim() const { return dim; }
  void declare(parameter_store<double>& s) {
    store = &s;
    w = s.declare({.name = "W", .rows = dim, .cols = dim});
  }
  template <class Schedule>
  void forward(Schedule& graph, const layer_context&, const matrixd& x, matrixd& y) {
    const matrixd xw = x * store->value(w);
    if (defect == bug::partial_output) {
      y.conservativeResize(x.rows(), dim);  // keeps the pre-filled entries
      y.topRows(x.rows() - 1) = xw.topRows(x.rows() - 1);
    } else {
      y = xw;
    }
    graph.gather(xw, [&](const graph_block& b, const_rows_ref<double> halo) {
      spmm_add<double>(*b.edges, halo, y);
    });
  }
  template <class Schedule>
  void backward(Schedule& graph, const layer_context&, const matrixd& x, const matrixd&,
                const matrixd& dy, matrixd& dx) {
    matrixd dxw = dy;  // d(xW) = dy + A^T dy
    graph.scatter(dxw, [&](const graph_block& b, rows_ref<double> dhalo) {
      spmm_add<double>(*b.transposed, dy, dhalo);
    });
    if (defect == bug::adds_parameter_gradient) store->grad(w) += x.transpose() * dxw;
    else store->grad(w) = x.transpose() * dxw;
    if (defect == bug::wrong_gradient) store->grad(w)(0, 0) *= 1.001;
    if (dx.size() == 0) return;
    if (defect == bug::assigns_dx) dx = dxw * store->value(w).transpose();
    else dx += dxw * store->value(w).transpose();
  }
};

}  // namespace

TEST_CASE("check_gradients passes a correct layer and catches each contract violation") {
  local_schedule graph(random_graph(20, 3, 7));
  const matrixd x = random_matrix<double>(20, 4, 8);
  const layer_context ctx;
  {
    test_conv good{.dim = 4};
    const auto r = check_gradients(good, graph, ctx, x);
    CHECK_MESSAGE(r.passed, r.summary());
    CHECK(r.input.checked == 80);
    REQUIRE(r.parameters.size() == 1);
    CHECK(r.parameters[0].checked == 16);
    CHECK(r.parameters[0].max_relative_error < 1e-7);
  }
  {
    test_conv l{.dim = 4, .defect = bug::assigns_dx};
    const auto r = check_gradients(l, graph, ctx, x);
    CHECK_FALSE(r.passed);
    CHECK_FALSE(r.input_gradient_added);
    CHECK_FALSE(r.input.passed);  // dx - sentinel is off by the sentinel
    CHECK(r.parameter_gradients_assigned);
    CHECK(r.summary().find("assigned dx instead of adding") != std::string::npos);
  }
  {
    test_conv l{.dim = 4, .defect = bug::wrong_gradient};
    const auto r = check_gradients(l, graph, ctx, x);
    CHECK_FALSE(r.passed);
    CHECK(r.input.passed);
    CHECK(r.input_gradient_added);
    CHECK_FALSE(r.parameters[0].passed);
    CHECK(r.parameters[0].worst_index == 0);
  }
  {
    test_conv l{.dim = 4, .defect = bug::partial_output};
    const auto r = check_gradients(l, graph, ctx, x);
    CHECK_FALSE(r.passed);
    CHECK_FALSE(r.output_assigned);
  }
  {
    test_conv l{.dim = 4, .defect = bug::adds_parameter_gradient};
    const auto r = check_gradients(l, graph, ctx, x);
    CHECK_FALSE(r.passed);
    CHECK_FALSE(r.parameter_gradients_assigned);
    CHECK(r.input_gradient_added);
  }
}
