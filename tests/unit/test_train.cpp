// Graph convolutions (GCN, GraphSAGE mean / gcn / max-pool) and models (sequential<...>,
// any_layer, dynamic_sequential). The trainer tests will join this file.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <fstream>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include <tbb/task_arena.h>

#include "sar/comm/serial.hpp"
#include "sar/core/bf16.hpp"
#include "sar/core/sparse_rows.hpp"
#include "sar/schedule/local_schedule.hpp"
#include "sar/graph/builders.hpp"
#include "sar/graph/generators.hpp"
#include "sar/nn/activations.hpp"
#include "sar/nn/dropout.hpp"
#include "sar/nn/loss.hpp"
#include "sar/optim/adam.hpp"
#include "sar/nn/any_layer.hpp"
#include "sar/nn/appnp.hpp"
#include "sar/nn/gcn.hpp"
#include "sar/nn/gin.hpp"
#include "sar/nn/linear.hpp"
#include "sar/nn/sage.hpp"
#include "sar/nn/sequential.hpp"
#include "sar/testing/gradient_checker.hpp"
#include "split_schedule.hpp"
#include "test_support.hpp"
#include "sar/optim/sgd.hpp"
#include "sar/train/capacity.hpp"
#include "sar/train/checkpoint.hpp"
#include "sar/train/full_batch.hpp"
#include "sar/train/model_file.hpp"
#include "sar/train/models.hpp"

using namespace sar;

namespace {

using testing_support::split_schedule;

static_assert(layer<gcn_layer<double>, split_schedule>);

/// A small directed graph with an isolated node (5), self-loops (1, 3), a node with no
/// in-edges but out-edges (7), duplicate-free sorted rows.
/// Every built-in GraphSAGE aggregator's name (the registry: sar/nn/sage_aggregators.hpp).
std::vector<std::string> aggregator_names() {
  std::vector<std::string> names;
  for_each_sage_aggregator([&]<class A>() { names.emplace_back(A::name); });
  return names;
}

csr small_directed_graph() {
  edge_list e;
  e.num_nodes = 9;
  const int pairs[][2] = {{0, 1}, {2, 1}, {1, 1}, {3, 3}, {4, 3}, {0, 3}, {6, 0}, {7, 0},
                          {7, 2}, {2, 4}, {8, 4}, {4, 6}, {6, 8}, {8, 6}, {1, 2}, {3, 0}};
  for (const auto& p : pairs) e.push_back(p[0], p[1]);
  return build_csr(e);
}

/// The same edges symmetrised, plus one self-loop per node (A + I for GCN), then node 5's
/// edges removed again so it is isolated (no self-loop either).
csr small_gcn_graph(bool symmetric) {
  edge_list e;
  e.num_nodes = 9;
  const int pairs[][2] = {{0, 1}, {2, 1}, {4, 3}, {0, 3}, {6, 0}, {7, 0},
                          {7, 2}, {2, 4}, {8, 4}, {4, 6}, {1, 2}, {3, 8}};
  for (const auto& p : pairs) e.push_back(p[0], p[1]);
  for (node_t i = 0; i < 9; ++i)
    if (i != 5) e.push_back(i, i);
  return build_csr(e, {.symmetrise = symmetric});
}

using testing_support::random_matrix;

/// D_in^-1/2 A D_out^-1/2 X W + b with plain dense Eigen matrices (A[i][j] = edges j -> i).
matrixd dense_gcn(const csr& g, const matrixd& x, const matrixd& w, const matrixd& b) {
  const Eigen::Index n = g.num_rows;
  Eigen::MatrixXd a = Eigen::MatrixXd::Zero(n, n);
  for (node_t i = 0; i < n; ++i)
    for (node_t j : g.row(i)) a(i, j) += 1.0;
  const Eigen::VectorXd din = a.rowwise().sum().cwiseMax(1.0).cwiseSqrt().cwiseInverse();
  const Eigen::VectorXd dout = a.colwise().sum().transpose().cwiseMax(1.0).cwiseSqrt().cwiseInverse();
  const Eigen::MatrixXd norm = din.asDiagonal() * a * dout.asDiagonal();
  Eigen::MatrixXd out = norm * Eigen::MatrixXd(x) * Eigen::MatrixXd(w);
  out.rowwise() += Eigen::RowVectorXd(b.row(0));
  return out;
}

template <class Layer, class Schedule>
void require_gradients(Layer layer, Schedule& graph, const matrixd& x) {
  layer_context ctx;
  const gradient_check_result result = check_gradients(layer, graph, ctx, x);
  CHECK_MESSAGE(result.passed, result.summary());
  CHECK(result.input.checked == x.size());
  for (const auto& p : result.parameters) CHECK(p.max_relative_error < 1e-6);
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Concepts

struct not_a_layer {
  using scalar = double;
  Eigen::Index input_dim() const { return 1; }
  Eigen::Index output_dim() const { return 1; }
  void declare(parameter_store<double>&) {}
  // no forward, no backward
};
struct no_scalar_layer {
  Eigen::Index input_dim() const { return 1; }
};

static_assert(!layer<not_a_layer, local_schedule>);
static_assert(!layer<no_scalar_layer, local_schedule>);
static_assert(!layer<int, local_schedule>);
static_assert(!detail::has_forward<not_a_layer, local_schedule>);
static_assert(detail::has_declare<not_a_layer> && detail::has_dimensions<not_a_layer>);
static_assert(!detail::names_scalar<no_scalar_layer>);
static_assert(layer<gcn_layer<double>, local_schedule>);
static_assert(layer<gcn_layer<float>, local_schedule>);
static_assert(layer<sage_layer<double, mean_aggregator>, local_schedule>);
static_assert(layer<sage_layer<double, gcn_aggregator>, local_schedule>);
static_assert(layer<sage_layer<double, pool_aggregator>, local_schedule>);
static_assert(layer<any_layer<double, local_schedule>, local_schedule>);
// any_layer is move-only (it owns the layer); its converting constructor takes layers only.
static_assert(!std::is_constructible_v<any_layer<double, local_schedule>, any_layer<double, local_schedule>&>);

// ---------------------------------------------------------------------------------------
// GCN

TEST_CASE("gcn_layer equals the dense reference D_in^-1/2 (A + I) D_out^-1/2 X W + b") {
  for (bool symmetric : {true, false}) {
    const csr g = small_gcn_graph(symmetric);
    CHECK(is_symmetric(g) == symmetric);
    for (const auto& dims : {std::pair{5, 3}, std::pair{3, 5}, std::pair{4, 4}}) {
      // (not a structured binding: clang 14 cannot capture one in CAPTURE's lambda)
      const int f_in = dims.first, f_out = dims.second;
      CAPTURE(symmetric);
      CAPTURE(f_in);
      CAPTURE(f_out);
      local_schedule graph(g);
      gcn_layer<double> layer(f_in, f_out);
      CHECK(layer.weight_first() == (f_out < f_in));
      parameter_store<double> store;
      layer.declare(store);
      store.allocate();
      store.initialise(7);
      store.value(1).setRandom();  // a non-zero bias
      const matrixd x = random_matrix(g.num_rows, f_in, 3);
      matrixd y;
      layer.forward(graph, {}, x, y);
      const matrixd want = dense_gcn(g, x, store.value(0), store.value(1));
      REQUIRE(y.rows() == want.rows());
      REQUIRE(y.cols() == want.cols());
      CHECK((y - want).cwiseAbs().maxCoeff() < 1e-12);
      // The isolated node 5 (no self-loop) gets the bias alone.
      CHECK((y.row(5) - store.value(1).row(0)).norm() < 1e-15);
    }
  }
}

TEST_CASE("gcn_layer passes the gradient checker in both weight orders and under several blocks") {
  for (bool symmetric : {true, false}) {
    const csr g = small_gcn_graph(symmetric);
    for (const auto& dims : {std::pair{5, 3}, std::pair{3, 5}}) {
      const int f_in = dims.first, f_out = dims.second;
      CAPTURE(symmetric);
      CAPTURE(f_in);
      const matrixd x = random_matrix(g.num_rows, f_in, 11);
      local_schedule local(g);
      require_gradients(gcn_layer<double>(f_in, f_out), local, x);
      split_schedule split(g, {3, 6}, true);
      require_gradients(gcn_layer<double>(f_in, f_out), split, x);
      require_gradients(gcn_layer<double>(f_in, f_out, false), local, x);
    }
  }
}

TEST_CASE("gin_aggregation and appnp_propagation compute their formulas, pass the gradient "
          "checker, and give one block's numbers under three") {
  for (bool symmetric : {true, false}) {
    CAPTURE(symmetric);
    const csr g = small_gcn_graph(symmetric);
    const matrixd x = random_matrix(g.num_rows, 4, 11);
    local_schedule local(g);
    split_schedule split(g, {2, 7}, true);
    REQUIRE(split.num_blocks() == 3);
    require_gradients(gin_aggregation<double>(4), local, x);
    require_gradients(gin_aggregation<double>(4), split, x);
    require_gradients(appnp_propagation<double>(4, 3, 0.2), local, x);
    require_gradients(appnp_propagation<double>(4, 3, 0.2), split, x);
    // The formulas, with eps = 0.5 and b = 1: (1 + eps) x + A x + b; APPNP's K steps of
    // z = (1 - alpha) Dd A Ds z + alpha x.
    matrixd a = matrixd::Zero(g.num_rows, g.num_rows);  // a(i, j): edges j -> i
    for (node_t i = 0; i < g.num_rows; ++i)
      for (edge_t t = g.offsets[i]; t < g.offsets[i + 1]; ++t) a(i, g.columns[t]) += 1;
    gin_aggregation<double> gin(4);
    parameter_store<double> store;
    gin.declare(store);
    store.allocate();
    store.value(0)(0, 0) = 0.5;
    store.value(1).setOnes();
    matrixd y, y_split;
    gin.forward(local, {}, x, y);
    CHECK((y - (1.5 * x + a * x + matrixd::Ones(x.rows(), 4))).cwiseAbs().maxCoeff() < 1e-12);
    gin.forward(split, {}, x, y_split);
    CHECK((y - y_split).cwiseAbs().maxCoeff() < 1e-12);
    const Eigen::VectorXd d_in = a.rowwise().sum().cwiseMax(1.0).cwiseSqrt().cwiseInverse();
    const Eigen::VectorXd d_out =
        a.colwise().sum().transpose().cwiseMax(1.0).cwiseSqrt().cwiseInverse();
    const matrixd normalised = d_in.asDiagonal() * a * d_out.asDiagonal();
    matrixd z = x;
    for (int k = 0; k < 3; ++k) z = 0.8 * normalised * z + 0.2 * x;
    appnp_propagation<double> appnp(4, 3, 0.2);
    appnp.forward(local, {}, x, y);
    CHECK((y - z).cwiseAbs().maxCoeff() < 1e-12);
    appnp.forward(split, {}, x, y_split);
    CHECK((y - y_split).cwiseAbs().maxCoeff() < 1e-12);
  }
}

TEST_CASE("gcn_layer gives the same numbers under one block and under three blocks") {
  const csr g = small_gcn_graph(false);
  for (const auto& dims : {std::pair{5, 3}, std::pair{3, 5}}) {
    const int f_in = dims.first, f_out = dims.second;
    local_schedule local(g);
    split_schedule split(g, {2, 7}, true);
    REQUIRE(split.num_blocks() == 3);
    gcn_layer<double> a(f_in, f_out), b(f_in, f_out);
    parameter_store<double> sa, sb;
    a.declare(sa);
    b.declare(sb);
    sa.allocate();
    sb.allocate();
    sa.initialise(5);
    sb.initialise(5);
    const matrixd x = random_matrix(g.num_rows, f_in, 1);
    const matrixd dy = random_matrix(g.num_rows, f_out, 2);
    matrixd ya, yb;
    a.forward(local, {}, x, ya);
    b.forward(split, {}, x, yb);
    CHECK((ya - yb).cwiseAbs().maxCoeff() < 1e-14);
    matrixd dxa = matrixd::Zero(x.rows(), x.cols()), dxb = dxa;
    a.backward(local, {}, x, ya, dy, dxa);
    b.backward(split, {}, x, yb, dy, dxb);
    CHECK((dxa - dxb).cwiseAbs().maxCoeff() < 1e-14);
    CHECK((sa.grad(0) - sb.grad(0)).cwiseAbs().maxCoeff() < 1e-14);
  }
}

TEST_CASE("gcn_layer names the wrong shape and the missing declare") {
  local_schedule graph(small_gcn_graph(true));
  gcn_layer<double> layer(4, 2);
  matrixd y;
  CHECK_THROWS_WITH_AS(layer.forward(graph, {}, matrixd::Zero(9, 4), y),
                       doctest::Contains("never declared"), invalid_argument);
  parameter_store<double> store;
  layer.declare(store);
  store.allocate();
  CHECK_THROWS_WITH_AS(layer.forward(graph, {}, matrixd::Zero(9, 3), y),
                       doctest::Contains("x is 9 x 3, expected 9 x 4"), invalid_argument);
  CHECK_THROWS_AS(gcn_layer<double>(0, 3), invalid_argument);
}

// ---------------------------------------------------------------------------------------
// GraphSAGE

TEST_CASE_TEMPLATE("sage_layer passes the gradient checker (isolated nodes, self-loops, both "
                   "weight orders, one and three blocks)",
                   Aggregator, mean_aggregator, gcn_aggregator, pool_aggregator) {
  const csr g = small_directed_graph();
  for (const auto& dims : {std::pair{5, 3}, std::pair{3, 5}}) {
    const int f_in = dims.first, f_out = dims.second;
    CAPTURE(f_in);
    const matrixd x = random_matrix(g.num_rows, f_in, 21);
    local_schedule local(g);
    split_schedule split(g, {3, 6}, true);
    require_gradients(sage_layer<double, Aggregator>(f_in, f_out), local, x);
    require_gradients(sage_layer<double, Aggregator>(f_in, f_out), split, x);
    require_gradients(sage_layer<double, Aggregator>(f_in, f_out, {.bias = false, .pool_dim = 4}),
                      split, x);
  }
}

namespace {
/// Forward of a declared, initialised (seed) sage layer.
template <class Aggregator, class Schedule>
matrixd sage_forward(Schedule& graph, const matrixd& x, Eigen::Index f_out,
                     parameter_store<double>& store, sage_layer<double, Aggregator>& layer) {
  layer.declare(store);
  store.allocate();
  store.initialise(9);
  for (std::size_t p = 0; p < store.size(); ++p)  // non-zero biases
    if (store.shape(p).rows == 1) store.value(p).setConstant(0.25);
  matrixd y;
  layer.forward(graph, {}, x, y);
  CHECK(y.cols() == f_out);
  return y;
}
}  // namespace

TEST_CASE("sage mean and gcn aggregators match their formulas") {
  const csr g = small_directed_graph();  // row 1 holds its self-loop, row 5 is empty
  local_schedule graph(g);
  const matrixd x = random_matrix(g.num_rows, 4, 8);
  for (Eigen::Index f_out : {2, 6}) {
    {
      parameter_store<double> store;
      sage_layer<double, mean_aggregator> layer(4, f_out);
      const matrixd y = sage_forward(graph, x, f_out, store, layer);
      for (node_t i = 0; i < g.num_rows; ++i) {
        Eigen::RowVectorXd mean = Eigen::RowVectorXd::Zero(4);
        for (node_t j : g.row(i)) mean += x.row(j);
        if (g.degree(i) > 0) mean /= static_cast<double>(g.degree(i));
        const Eigen::RowVectorXd want = x.row(i) * store.value(0) + mean * store.value(1) +
                                        store.value(2);
        CHECK((y.row(i) - want).norm() < 1e-12);
      }
    }
    {
      parameter_store<double> store;
      sage_layer<double, gcn_aggregator> layer(4, f_out);
      const matrixd y = sage_forward(graph, x, f_out, store, layer);
      for (node_t i = 0; i < g.num_rows; ++i) {
        const auto row = g.row(i);
        const bool has_self = std::find(row.begin(), row.end(), i) != row.end();
        Eigen::RowVectorXd sum = has_self ? Eigen::RowVectorXd::Zero(4) : Eigen::RowVectorXd(x.row(i));
        for (node_t j : row) sum += x.row(j);
        const double count = static_cast<double>(row.size()) + (has_self ? 0 : 1);
        const Eigen::RowVectorXd want = sum / count * store.value(0) + store.value(1);
        CHECK((y.row(i) - want).norm() < 1e-12);
      }
    }
  }
}

TEST_CASE("sage max-pool matches its formula; an empty neighbourhood pools to 0") {
  const csr g = small_directed_graph();
  local_schedule graph(g);
  const matrixd x = random_matrix(g.num_rows, 4, 8);
  parameter_store<double> store;
  sage_layer<double, pool_aggregator> layer(4, 3, {.pool_dim = 5});
  const matrixd y = sage_forward(graph, x, 3, store, layer);
  // Parameters in declaration order: pool_weight, pool_bias, self_weight, neighbour_weight, bias.
  matrixd pooled = x * store.value(0);
  pooled.rowwise() += store.value(1).row(0);
  pooled = pooled.cwiseMax(0.0);
  for (node_t i = 0; i < g.num_rows; ++i) {
    Eigen::RowVectorXd m = Eigen::RowVectorXd::Zero(5);
    if (g.degree(i) > 0) m = Eigen::RowVectorXd::Constant(5, -1e300);
    for (node_t j : g.row(i)) m = m.cwiseMax(pooled.row(j));
    const Eigen::RowVectorXd want =
        x.row(i) * store.value(2) + m * store.value(3) + store.value(4);
    CHECK((y.row(i) - want).norm() < 1e-12);
  }
  CHECK(g.degree(5) == 0);
  CHECK((y.row(5) - (x.row(5) * store.value(2) + store.value(4))).norm() < 1e-12);
}

namespace {
/// Node 0 aggregates from sources: x rows of `equal` are identical. Returns dx for dy = e_0
/// (only node 0's output has a gradient), after checking forward against a reference.
template <class Schedule>
matrixd pool_input_gradient(Schedule& graph, const matrixd& x, matrixd* y_out = nullptr) {
  sage_layer<double, pool_aggregator> layer(3, 2);
  parameter_store<double> store;
  layer.declare(store);
  store.allocate();
  store.initialise(4);
  // Positive pool weights and bias: for x_5 = x_1 / 4 >= 0 the pooled row of 5 stays below 1's.
  store.value(0) = store.value(0).cwiseAbs().array() + 0.1;
  store.value(1).setConstant(0.5);
  matrixd y;
  layer.forward(graph, {}, x, y);
  if (y_out) *y_out = y;
  matrixd dy = matrixd::Zero(y.rows(), y.cols());
  dy.row(0).setConstant(1.0);
  matrixd dx = matrixd::Zero(x.rows(), x.cols());
  layer.backward(graph, {}, x, y, dy, dx);
  return dx;
}
}  // namespace

TEST_CASE("sage max-pool gives a tie's gradient once, to the smallest global source id, in "
          "every block order") {
  // Node 0 <- {1, 4, 5}; x_1 == x_4 (an exact tie in every feature), x_5 pools lower.
  const node_t n = 7;
  matrixd x = random_matrix(n, 3, 17);
  x.row(1) = x.row(1).cwiseAbs();
  x.row(4) = x.row(1);
  x.row(5) = 0.25 * x.row(1);
  const auto graph_with = [&](std::vector<node_t> sources, bool deduplicate) {
    edge_list e;
    e.num_nodes = n;
    for (node_t s : sources) e.push_back(s, 0);
    e.push_back(2, 3);
    e.push_back(6, 3);
    return build_csr(e, {.deduplicate = deduplicate});
  };
  // Reference: node 4 is not a neighbour, so the gradient can only go to node 1.
  local_schedule reference_graph(graph_with({1, 5}, true));
  matrixd y_reference;
  const matrixd reference = pool_input_gradient(reference_graph, x, &y_reference);
  REQUIRE(reference.row(1).norm() > 1e-3);  // the tie really receives gradient
  CHECK(reference.row(4).norm() == 0.0);

  const csr tied = graph_with({1, 4, 5}, true);
  local_schedule one_block(tied);
  split_schedule forward_order(tied, {3}, false);   // block {1} before block {4, 5}
  split_schedule reverse_order(tied, {3}, true);    // block {4, 5} first
  split_schedule reverse_three(tied, {2, 5}, true);  // blocks {5}, {4}, {1}
  matrixd y;
  for (matrixd dx : {pool_input_gradient(one_block, x, &y),
                     pool_input_gradient(forward_order, x),
                     pool_input_gradient(reverse_order, x),
                     pool_input_gradient(reverse_three, x)}) {
    CHECK((dx - reference).cwiseAbs().maxCoeff() < 1e-14);
    CHECK(dx.row(4).norm() == 0.0);  // the larger id of the tie gets nothing
  }
  CHECK((y.row(0) - y_reference.row(0)).norm() < 1e-14);

  // A duplicate edge 0 <- 1 (not deduplicated) is a tie with itself: counted once.
  const csr duplicated = graph_with({1, 1, 5}, false);
  REQUIRE(duplicated.degree(0) == 3);
  local_schedule dup_graph(duplicated);
  CHECK((pool_input_gradient(dup_graph, x) - reference).cwiseAbs().maxCoeff() < 1e-14);
}

// ---------------------------------------------------------------------------------------
// Models

namespace {

sequential<gcn_layer<double>, sage_layer<double, mean_aggregator>,
           sage_layer<double, pool_aggregator>, gcn_layer<double>>
static_model() {
  return sequential<gcn_layer<double>, sage_layer<double, mean_aggregator>,
                    sage_layer<double, pool_aggregator>, gcn_layer<double>>(
      gcn_layer<double>(6, 4), sage_layer<double, mean_aggregator>(4, 7),
      sage_layer<double, pool_aggregator>(7, 5, {.pool_dim = 3}), gcn_layer<double>(5, 2));
}

dynamic_sequential<double, local_schedule> dynamic_model() {
  std::vector<any_layer<double, local_schedule>> layers;
  layers.emplace_back(gcn_layer<double>(6, 4));
  layers.emplace_back(sage_layer<double, mean_aggregator>(4, 7));
  layers.emplace_back(sage_layer<double, pool_aggregator>(7, 5, {.pool_dim = 3}));
  layers.emplace_back(gcn_layer<double>(5, 2));
  return dynamic_sequential<double, local_schedule>(std::move(layers));
}
}  // namespace

TEST_CASE("sequential<...> and dynamic_sequential give identical outputs and gradients") {
  const csr g = small_directed_graph();
  local_schedule graph(g);
  auto a = static_model();
  auto b = dynamic_model();
  REQUIRE(a.parameters().total_size() == b.parameters().total_size());
  REQUIRE(a.parameters().size() == b.parameters().size());
  CHECK(a.num_layers() == 4);
  CHECK(b.num_layers() == 4);
  CHECK(a.input_dim() == 6);
  CHECK(b.output_dim() == 2);
  a.initialise(123);
  b.initialise(123);
  const matrixd x = random_matrix(g.num_rows, 6, 31);
  const matrixd dlogits = random_matrix(g.num_rows, 2, 32);
  layer_context ctx{.training = true, .seed = 1, .epoch = 2, .layer = 99};
  for (int epoch = 0; epoch < 2; ++epoch) {  // a second pass reuses the buffers
    const matrixd& ya = a.forward(graph, ctx, x);
    const matrixd& yb = b.forward(graph, ctx, x);
    REQUIRE(ya.rows() == g.num_rows);
    REQUIRE(ya.cols() == 2);
    CHECK(ya == yb);
    a.backward(graph, ctx, dlogits);
    b.backward(graph, ctx, dlogits);
    const auto ga = a.parameters().grads(), gb = b.parameters().grads();
    CHECK(std::equal(ga.begin(), ga.end(), gb.begin(), gb.end()));
    CHECK(std::any_of(ga.begin(), ga.end(), [](double v) { return v != 0.0; }));
  }
  CHECK(b.layer(1).target<sage_layer<double, mean_aggregator>>() != nullptr);
  CHECK(b.layer(1).target<gcn_layer<double>>() == nullptr);
  CHECK(a.layer<3>().weight_first());
}

TEST_CASE("sequential's backward matches central differences of the whole model") {
  const csr g = small_directed_graph();
  local_schedule graph(g);
  auto model = static_model();
  model.initialise(77);
  for (double& v : model.parameters().values()) v += 0.05;  // biases away from 0
  const matrixd x = random_matrix(g.num_rows, 6, 41);
  const matrixd r = random_matrix(g.num_rows, 2, 42);
  model.forward(graph, {}, x);
  model.backward(graph, {}, r);  // dLoss/dlogits for Loss = sum(logits .* r)
  const std::vector<double> analytic(model.parameters().grads().begin(),
                                     model.parameters().grads().end());
  const auto values = model.parameters().values();
  const auto loss = [&] { return (model.forward(graph, {}, x).array() * r.array()).sum(); };
  double worst = 0;
  for (std::size_t k = 0; k < values.size(); ++k) {
    const double saved = values[k], h = 1e-6;
    values[k] = saved + h;
    const double up = loss();
    values[k] = saved - h;
    const double down = loss();
    values[k] = saved;
    const double numeric = (up - down) / (2 * h);
    worst = std::max(worst, std::abs(numeric - analytic[k]) /
                                std::max({std::abs(numeric), std::abs(analytic[k]), 1e-3}));
  }
  CHECK(worst < 1e-6);
}

namespace {
/// A parameterless layer that passes x through and records how backward was called.
struct backward_probe {
  using scalar = double;
  Eigen::Index width;
  int* backward_calls;
  Eigen::Index* dx_size;
  Eigen::Index input_dim() const { return width; }
  Eigen::Index output_dim() const { return width; }
  void declare(parameter_store<double>&) {}
  void forward(local_schedule&, const layer_context&, const matrixd& x, matrixd& y) { y = x; }
  void backward(local_schedule&, const layer_context&, const matrixd&, const matrixd&,
                const matrixd& dy, matrixd& dx) {
    ++*backward_calls;
    *dx_size = dx.size();
    if (dx.size() != 0) dx += dy;
  }
};
}  // namespace

TEST_CASE("backward skips the layers before the first one with parameters") {
  const csr g = small_directed_graph();
  local_schedule graph(g);
  int calls[3] = {0, 0, 0};
  Eigen::Index dx_sizes[3] = {-1, -1, -1};
  sequential<backward_probe, backward_probe, gcn_layer<double>, backward_probe> model(
      backward_probe{6, &calls[0], &dx_sizes[0]}, backward_probe{6, &calls[1], &dx_sizes[1]},
      gcn_layer<double>(6, 3), backward_probe{3, &calls[2], &dx_sizes[2]});
  model.initialise(5);
  const matrixd x = random_matrix(g.num_rows, 6, 51);
  model.forward(graph, {}, x);
  model.backward(graph, {}, random_matrix(g.num_rows, 3, 52));
  CHECK(calls[0] == 0);  // before the GCN: nothing to learn, not called
  CHECK(calls[1] == 0);
  CHECK(calls[2] == 1);  // after it: called, with an input gradient for the GCN
  CHECK(dx_sizes[2] == g.num_rows * 3);
  // The GCN's own weight gradient is still assigned (it got an empty dx).
  const auto grads = model.parameters().grads();
  CHECK(std::any_of(grads.begin(), grads.end(), [](double v) { return v != 0.0; }));
}

TEST_CASE("models name the exchanges of their input rows in the keys, and only those") {
  // The exact_first_layer rule moves exactly the rows first_layer_input marks: the model's
  // input, as the first graph layer aggregates it. Rows a layer computes (x W) or a first
  // graph layer behind a layer with parameters must never be marked (the configured codec
  // would be bypassed unasked).
  const csr g = small_directed_graph();
  split_schedule graph(g, {2}, false);
  using sage = sage_layer<double, mean_aggregator>;
  const auto keys_of = [&](auto& model, bool training) {
    graph.keys.clear();
    const layer_context ctx{.training = training, .epoch = 3};
    const matrixd x = random_matrix(g.num_rows, 6, 61);
    model.forward(graph, ctx, x);
    if (training) model.backward(graph, ctx, random_matrix(g.num_rows, 3, 62));
    REQUIRE(!graph.keys.empty());
    std::vector<std::uint64_t> marked;  // layers of the marked keys
    for (const sar::exchange_key& key : graph.keys) {
      CHECK(key.training == training);
      CHECK(key.epoch == 3);
      if (key.first_layer_input) marked.push_back(key.layer);
    }
    return std::pair{marked, graph.keys.size()};
  };
  for (bool training : {true, false}) {
    CAPTURE(training);
    // A GCN that aggregates its input (behind a dropout, which has no parameters): marked.
    sequential<dropout<double>, gcn_layer<double>, relu<double>, sage> aggregating(
        dropout<double>(6, 0.3), gcn_layer<double>(6, 5, true, true), relu<double>(5), sage(5, 3));
    aggregating.initialise(5);
    std::vector<any_layer<double, split_schedule>> layers;
    layers.emplace_back(dropout<double>(6, 0.3));
    layers.emplace_back(gcn_layer<double>(6, 5, true, true));
    layers.emplace_back(relu<double>(5));
    layers.emplace_back(sage(5, 3));
    dynamic_sequential<double, split_schedule> same(std::move(layers));
    same.initialise(5);
    for (auto [marked, total] : {keys_of(aggregating, training), keys_of(same, training)}) {
      CHECK(!marked.empty());
      CHECK(std::all_of(marked.begin(), marked.end(), [](auto k) { return k == 1; }));
      CHECK(marked.size() < total);  // the SAGE layer exchanges too, unmarked
    }
    // The same GCN applying its weight first exchanges x W: nothing marked.
    sequential<dropout<double>, gcn_layer<double>, relu<double>, sage> weight_first(
        dropout<double>(6, 0.3), gcn_layer<double>(6, 5), relu<double>(5), sage(5, 3));
    weight_first.initialise(5);
    CHECK(keys_of(weight_first, training).first.empty());
    // An aggregating GCN behind a linear layer reads computed rows: nothing marked.
    sequential<linear<double>, gcn_layer<double>, relu<double>, sage> behind_linear(
        linear<double>(6, 6), gcn_layer<double>(6, 5, true, true), relu<double>(5), sage(5, 3));
    behind_linear.initialise(5);
    CHECK(keys_of(behind_linear, training).first.empty());
  }
}

namespace {
/// Holds a layer but hides its optional traits: the model then keeps every activation and
/// runs nothing in place (the reference for the buffer-sharing model).
template <class L>
struct opaque {
  using scalar = typename L::scalar;
  L layer;
  Eigen::Index input_dim() const { return layer.input_dim(); }
  Eigen::Index output_dim() const { return layer.output_dim(); }
  void declare(parameter_store<scalar>& s) { layer.declare(s); }
  void forward(local_schedule& g, const layer_context& c, const_rows_ref<scalar> x,
               matrix<scalar>& y) {
    layer.forward(g, c, x, y);
  }
  void backward(local_schedule& g, const layer_context& c, const_rows_ref<scalar> x,
                const_rows_ref<scalar> y, const_rows_ref<scalar> dy, matrix<scalar>& dx) {
    layer.backward(g, c, x, y, dy, dx);
  }
};
}  // namespace

TEST_CASE("models release unread activations and run element-wise layers in place, with "
          "the numbers of a model that keeps everything") {
  const csr g = small_directed_graph();
  local_schedule graph(g);
  // dropout -> gcn (W after: reads neither x nor y) -> relu (in place over the gcn output)
  // -> dropout -> gcn (W first: reads x) -> elu -> linear
  sequential<dropout<double>, gcn_layer<double>, relu<double>, dropout<double>,
             gcn_layer<double>, elu<double>, linear<double>>
      shared(dropout<double>(6, 0.3), gcn_layer<double>(6, 6), relu<double>(6),
             dropout<double>(6, 0.3), gcn_layer<double>(6, 4), elu<double>(4),
             linear<double>(4, 2));
  sequential<opaque<dropout<double>>, opaque<gcn_layer<double>>, opaque<relu<double>>,
             opaque<dropout<double>>, opaque<gcn_layer<double>>, opaque<elu<double>>,
             opaque<linear<double>>>
      kept({dropout<double>(6, 0.3)}, {gcn_layer<double>(6, 6)}, {relu<double>(6)},
           {dropout<double>(6, 0.3)}, {gcn_layer<double>(6, 4)}, {elu<double>(4)},
           {linear<double>(4, 2)});
  shared.initialise(8);
  kept.initialise(8);
  const matrixd x = random_matrix(g.num_rows, 6, 71);
  const matrixd dlogits = random_matrix(g.num_rows, 2, 72);
  for (std::uint64_t epoch = 0; epoch < 3; ++epoch) {  // later epochs reuse pooled buffers
    const layer_context ctx{.training = true, .seed = 4, .epoch = epoch};
    const matrixd ys = shared.forward(graph, ctx, x);
    CHECK(shared.activation(0).size() == 0);  // dropout output: the W-after gcn does not read it
    CHECK(shared.activation(1).size() == 0);  // gcn output: relu overwrote it in place
    CHECK(shared.activation(2).size() > 0);   // relu output: relu's backward reads it
    CHECK(ys == kept.forward(graph, ctx, x));
    shared.backward(graph, ctx, dlogits);
    kept.backward(graph, ctx, dlogits);
    const auto gs = shared.parameters().grads(), gk = kept.parameters().grads();
    CHECK(std::equal(gs.begin(), gs.end(), gk.begin(), gk.end()));
    CHECK(shared.activation(shared.num_layers() - 1).size() > 0);  // the logits stay
    // An evaluation forward between training steps does not disturb the next epoch.
    CHECK(shared.forward(graph, {.training = false}, x) ==
          kept.forward(graph, {.training = false}, x));
  }
}

namespace {
/// relu_dropout counting the forward calls a model makes on row ranges (inside the layer
/// before it).
struct counted_relu_dropout : relu_dropout<double> {
  using relu_dropout<double>::relu_dropout;
  std::shared_ptr<std::atomic<int>> ranges = std::make_shared<std::atomic<int>>(0);
  void forward(local_schedule& g, const layer_context& c, const_rows_ref<double> x, matrixd& y) {
    if (c.end_row >= 0) ++*ranges;
    relu_dropout<double>::forward(g, c, x, y);
  }
};

/// One training step of models a and b on x: the same logits and the same parameter
/// gradients, bitwise.
template <class A, class B>
void check_same_step(A& a, B& b, local_schedule& graph, const layer_context& ctx,
                     const matrixd& x, const matrixd& dlogits) {
  CHECK(a.forward(graph, ctx, x) == b.forward(graph, ctx, x));
  a.backward(graph, ctx, dlogits);
  b.backward(graph, ctx, dlogits);
  const auto ga = a.parameters().grads(), gb = b.parameters().grads();
  CHECK(std::equal(ga.begin(), ga.end(), gb.begin(), gb.end()));
}

/// 1300 nodes of degree 6: products run in 512-row chunks, so row ranges come from several
/// chunks and threads.
csr chunked_graph() {
  planted_partition_options o;
  o.num_nodes = 1300;
  o.average_degree = 6;
  o.feature_dim = 0;
  return make_planted_partition(o).graph;
}

/// graph layer -> relu_dropout -> graph layer, run fused (relu_dropout inside the first graph
/// layer's forward) and with every layer opaque (separate passes, nothing in place): the same
/// logits and gradients, bitwise, in training and evaluation.
template <class Graph>
void check_fused_relu_dropout(const csr& g, Graph first, Graph second) {
  local_schedule graph(g);
  const Eigen::Index f_in = first.input_dim(), hidden = first.output_dim();
  counted_relu_dropout middle(hidden, 0.4);
  const auto ranges = middle.ranges;
  sequential<dropout<double>, Graph, counted_relu_dropout, Graph> fused(
      dropout<double>(f_in, 0.3), first, std::move(middle), second);
  sequential<opaque<dropout<double>>, opaque<Graph>, opaque<relu_dropout<double>>, opaque<Graph>>
      separate({dropout<double>(f_in, 0.3)}, {first}, {relu_dropout<double>(hidden, 0.4)},
               {second});
  fused.initialise(5);
  separate.initialise(5);
  const matrixd x = random_matrix(g.num_rows, f_in, 81);
  const matrixd dlogits = random_matrix(g.num_rows, second.output_dim(), 82);
  for (std::uint64_t epoch = 0; epoch < 2; ++epoch) {
    check_same_step(fused, separate, graph, {.training = true, .seed = 6, .epoch = epoch}, x,
                    dlogits);
    CHECK(fused.forward(graph, {.training = false}, x) ==
          separate.forward(graph, {.training = false}, x));
  }
  CHECK(*ranges > 0);  // the fused model did run relu_dropout on row ranges
}
}  // namespace

namespace {
/// rows x cols binary features with about `density` of them 1 (a bag of words).
sparse_rows<double> random_bag_of_words(Eigen::Index rows, Eigen::Index cols, double density,
                                        std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::bernoulli_distribution one(density);
  matrixd dense = matrixd::Zero(rows, cols);
  for (Eigen::Index i = 0; i < rows; ++i)
    for (Eigen::Index j = 0; j < cols; ++j) dense(i, j) = one(rng) ? 1.0 : 0.0;
  return to_sparse_rows<double, double>(dense);
}

/// Largest |a - b| over max(1, |b|) of two equally long ranges.
template <class A, class B>
double largest_relative_difference(const A& a, const B& b) {
  double worst = 0;
  for (decltype(a.size()) i = 0; i < a.size(); ++i)
    worst = std::max(worst, std::abs(a[i] - b[i]) / std::max(1.0, std::abs(b[i])));
  return worst;
}
}  // namespace

TEST_CASE("sparse input features give a model the logits and gradients of the dense ones") {
  planted_partition_options o;  // more rows than a reduction chunk (4096): several chunks
  o.num_nodes = 5000;
  o.average_degree = 4;
  o.feature_dim = 0;
  local_schedule graph(make_planted_partition(o).graph);
  const sparse_rows<double> sparse = random_bag_of_words(o.num_nodes, 300, 0.02, 7);
  sparse.validate();
  const matrixd dense = to_dense<double>(sparse);
  CHECK(density<double>(dense) == doctest::Approx(sparse.density()));
  const matrixd dlogits = random_matrix(o.num_nodes, 3, 82);
  // aggregate_features_first: gcn and sage aggregate the sparse rows as dense ones (what a
  // low-bit exchange moves once), not x W.
  for (const std::string kind : {"gcn", "sage", "gat", "mlp"})
    for (const double input_dropout : {0.0, 0.5})
    for (const bool aggregate_first : {false, true}) {
      CAPTURE(kind);
      CAPTURE(input_dropout);
      CAPTURE(aggregate_first);
      model_config c;
      c.family = kind;
      c.hidden = 8;
      c.heads = 2;
      c.input_dropout = input_dropout;
      c.aggregate_features_first = aggregate_first;
      auto a = make_model<double, local_schedule>(c, 300, 3, 11);
      auto b = make_model<double, local_schedule>(c, 300, 3, 11);
      REQUIRE(a.reads_sparse_input());
      for (std::uint64_t epoch = 0; epoch < 2; ++epoch) {
        const layer_context ctx{.training = true, .seed = 4, .epoch = epoch};
        const matrixd from_sparse = a.forward(graph, ctx, sparse);
        const matrixd from_dense = b.forward(graph, ctx, dense);
        CHECK(largest_relative_difference(from_sparse.reshaped(), from_dense.reshaped()) < 1e-12);
        a.backward(graph, ctx, dlogits);
        b.backward(graph, ctx, dlogits);
        CHECK(largest_relative_difference(a.parameters().grads(), b.parameters().grads()) < 1e-12);
        const matrixd evaluated = a.forward(graph, {.training = false}, sparse);
        CHECK(largest_relative_difference(evaluated.reshaped(),
                                          b.forward(graph, {.training = false}, dense).reshaped()) <
              1e-12);
      }
    }
  // A first layer that cannot read them: refused, naming the layer.
  model_config pool;
  pool.family = "sage";
  pool.aggregation = "pool";
  auto model = make_model<double, local_schedule>(pool, 300, 3, 11);
  CHECK_FALSE(model.reads_sparse_input());
  CHECK_THROWS_WITH_AS(model.forward(graph, {.training = true}, sparse),
                       doctest::Contains("cannot read sparse input features"), invalid_argument);
  // A backward on sparse features computes no input gradient.
  gcn_layer<double> layer(300, 4);
  parameter_store<double> store;
  layer.declare(store);
  store.allocate();
  matrixd y, dx(o.num_nodes, 300);
  layer.forward(graph, {}, sparse, y);
  CHECK_THROWS_AS(layer.backward(graph, {}, sparse, y, y, dx), invalid_argument);
}

TEST_CASE("a model given its input by value lets an in-place first layer overwrite it, with "
          "the numbers of a model given a reference") {
  const csr g = small_directed_graph();
  local_schedule graph(g);
  const auto make = [] {
    std::vector<any_layer<double, local_schedule>> layers;
    layers.emplace_back(dropout<double>(6, 0.3));
    layers.emplace_back(sage_layer<double, mean_aggregator>(6, 4));  // reads its input
    layers.emplace_back(gcn_layer<double>(4, 2));
    return dynamic_sequential<double, local_schedule>(std::move(layers));
  };
  auto by_value = make(), by_reference = make();
  by_value.initialise(5);
  by_reference.initialise(5);
  const matrixd x = random_matrix(g.num_rows, 6, 81);
  const matrixd dlogits = random_matrix(g.num_rows, 2, 82);
  for (std::uint64_t epoch = 0; epoch < 3; ++epoch) {  // inputs of a new buffer each time
    const layer_context ctx{.training = true, .seed = 4, .epoch = epoch};
    matrixd copy = x;
    const double* storage = copy.data();
    const matrixd y = by_value.forward(graph, ctx, std::move(copy));
    CHECK(by_value.activation(0).data() == storage);  // dropout wrote into the input
    CHECK(y == by_reference.forward(graph, ctx, x));
    by_value.backward(graph, ctx, dlogits);
    by_reference.backward(graph, ctx, dlogits);
    const auto gv = by_value.parameters().grads(), gr = by_reference.parameters().grads();
    CHECK(std::equal(gv.begin(), gv.end(), gr.begin(), gr.end()));
  }
  // A first layer that reads its input in backward keeps it; the caller's x holds nothing.
  std::vector<any_layer<double, local_schedule>> layers;
  layers.emplace_back(sage_layer<double, mean_aggregator>(6, 2));
  dynamic_sequential<double, local_schedule> kept(std::move(layers));
  kept.initialise(5);
  for (std::uint64_t epoch = 0; epoch < 2; ++epoch) {
    const layer_context ctx{.training = true, .seed = 4, .epoch = epoch};
    matrixd copy = x;
    kept.forward(graph, ctx, std::move(copy));
    CHECK(copy.size() == 0);  // not the previous step's input swapped back
    kept.backward(graph, ctx, dlogits);
    CHECK_THROWS_AS(kept.backward(graph, ctx, dlogits), invalid_argument);  // input released
  }
}

TEST_CASE("models run relu_dropout inside the graph layer before it, with the numbers of "
          "separate passes") {
  const csr g = chunked_graph();
  tbb::task_arena arena(2);
  // The first layer with W after aggregating (rows finished per product chunk) and with W
  // first (GCN: all rows at the end; SAGE: per chunk of its final sum).
  SUBCASE("gcn") {
    arena.execute([&] {
      check_fused_relu_dropout(g, gcn_layer<double>(8, 8), gcn_layer<double>(8, 3));
      check_fused_relu_dropout(g, gcn_layer<double>(8, 4), gcn_layer<double>(4, 6));
    });
  }
  SUBCASE("sage mean") {
    using sage = sage_layer<double, mean_aggregator>;
    arena.execute([&] {
      check_fused_relu_dropout(g, sage(8, 8), sage(8, 3));
      check_fused_relu_dropout(g, sage(8, 4), sage(4, 6));
    });
  }
}

TEST_CASE("a 2-layer GCN's hidden output takes the input dropout's buffer and its gradient "
          "the hidden output's: one hidden-wide buffer, with the numbers of separate ones") {
  const csr g = chunked_graph();
  local_schedule graph(g);
  model_config c;
  c.family = "gcn";
  c.hidden = 8;
  c.dropout = 0.5;
  auto model = make_model<double, local_schedule>(c, 8, 3, 3);
  REQUIRE(model.num_layers() == 4);  // dropout, gcn (aggregating first), relu_dropout, gcn
  sequential<opaque<dropout<double>>, opaque<gcn_layer<double>>, opaque<relu_dropout<double>>,
             opaque<gcn_layer<double>>>
      separate({dropout<double>(8, 0.5)}, {gcn_layer<double>(8, 8)}, {relu_dropout<double>(8, 0.5)},
               {gcn_layer<double>(8, 3)});
  separate.initialise(3);
  REQUIRE(std::equal(model.parameters().values().begin(), model.parameters().values().end(),
                     separate.parameters().values().begin(), separate.parameters().values().end()));
  const matrixd x = random_matrix(g.num_rows, 8, 91);
  const matrixd dlogits = random_matrix(g.num_rows, 3, 92);
  for (std::uint64_t epoch = 0; epoch < 3; ++epoch) {
    check_same_step(model, separate, graph, {.training = true, .seed = 7, .epoch = epoch}, x,
                    dlogits);
    // Every buffer the model allocated is pooled but the logits: the dropout's output, which
    // became the first gcn's output and then the second's input gradient.
    CHECK(model.pooled_buffers() == 1);
    CHECK(model.pooled_bytes() == static_cast<std::size_t>(g.num_rows) * 8 * sizeof(double));
  }
  CHECK(separate.pooled_bytes() >= 3 * static_cast<std::size_t>(g.num_rows) * 8 * sizeof(double));
}

TEST_CASE("make_model: between relu graph layers relu and dropout are one layer, so one "
          "activation is kept per hidden layer") {
  const csr g = small_directed_graph();
  local_schedule graph(g);
  model_config c;
  c.hidden = 5;
  c.dropout = 0.5;
  for (const std::string kind : {"gcn", "sage"}) {
    c.family = kind;
    auto model = make_model<double, local_schedule>(c, 6, 2, 3);
    REQUIRE(model.num_layers() == 4);  // dropout, graph, relu_dropout, graph
    CHECK(model.layer(0).target<dropout<double>>() != nullptr);
    CHECK(model.layer(2).target<relu_dropout<double>>() != nullptr);
    model.forward(graph, {.training = true, .seed = 1}, random_matrix(g.num_rows, 6, 5));
    int hidden_kept = 0;
    for (std::size_t k = 0; k + 1 < model.num_layers(); ++k)
      hidden_kept += model.activation(k).cols() == 5 ? 1 : 0;
    CHECK(hidden_kept == 1);  // relu's output, which the next layer's backward reads
  }
}

TEST_CASE("estimate_model_memory counts exactly the parameters make_model declares; make_model "
          "refuses parameters beyond the memory available before allocating them") {
  for (const std::string kind : {"gcn", "sage", "gat",
                                "mlp"})
    for (const std::string& aggregation : aggregator_names())
      for (const int layers : {1, 2, 4})
        for (const bool batch_norm : {false, true}) {
          model_config c = paper_defaults(kind);
          c.aggregation = aggregation;
          c.layers = layers;
          c.batch_norm = batch_norm;
          c.hidden = 5;
          c.heads = 3;
          c.output_heads = 2;
          auto model = make_model<float, local_schedule>(c, 7, 4, 1);
          double declared = 0;
          for (std::size_t p = 0; p < model.parameters().size(); ++p)
            declared += static_cast<double>(model.parameters().shape(p).rows *
                                            model.parameters().shape(p).cols);
          const model_memory m = estimate_model_memory(c, 7, 4, 10, sizeof(float));
          CHECK_MESSAGE(m.parameters == 4 * sizeof(float) * declared,
                        "kind " << kind << " aggregation " << aggregation << " layers "
                                << layers << " batch norm " << batch_norm);
        }
  model_config c = paper_defaults("gcn");
  c.hidden = 1000000000000;  // 10^12: 10^14 parameters
  std::string what = "(no sar::invalid_argument)";
  try {
    make_model<float, local_schedule>(c, 100, 7, 1);
  } catch (const invalid_argument& e) {
    what = e.what();
  }
  CHECK_MESSAGE(what.find("sar::make_model: ") == 0, what);
  CHECK_MESSAGE(what.find("hidden 1000000000000") != std::string::npos, what);
  CHECK_MESSAGE(what.find("of memory available") != std::string::npos, what);
  // A billion layers are estimated at once (closed form), not layer by layer.
  c.hidden = 16;
  c.layers = 1000000000;
  CHECK(estimate_model_memory(c, 100, 7, 1000, 4).parameters > 1e12);
}

TEST_CASE("models reject mismatched widths, wrong inputs and a backward without forward") {
  const csr g = small_directed_graph();
  local_schedule graph(g);
  using two = sequential<gcn_layer<double>, gcn_layer<double>>;
  CHECK_THROWS_WITH_AS(two(gcn_layer<double>(3, 4), gcn_layer<double>(5, 2)),
                       doctest::Contains("layer 0 outputs 4 columns but layer 1 takes 5"),
                       invalid_argument);
  using runtime_model = dynamic_sequential<double, local_schedule>;
  std::vector<any_layer<double, local_schedule>> none;
  CHECK_THROWS_AS(runtime_model(std::move(none)), invalid_argument);
  two model(gcn_layer<double>(3, 4), gcn_layer<double>(4, 2));
  CHECK_THROWS_WITH_AS(model.backward(graph, {}, matrixd::Zero(9, 2)),
                       doctest::Contains("backward without a forward"), invalid_argument);
  CHECK_THROWS_WITH_AS(model.forward(graph, {}, matrixd::Zero(9, 4)),
                       doctest::Contains("x is 9 x 4, expected 9 x 3"), invalid_argument);
  model.forward(graph, {}, matrixd::Zero(9, 3));
  CHECK_THROWS_WITH_AS(model.backward(graph, {}, matrixd::Zero(9, 3)),
                       doctest::Contains("dlogits is 9 x 3, expected 9 x 2"), invalid_argument);
}

TEST_CASE("a float model computes what the double model computes") {
  const csr g = small_gcn_graph(true);
  local_schedule graph(g);
  sequential<gcn_layer<float>, sage_layer<float, mean_aggregator>> f(
      gcn_layer<float>(5, 8), sage_layer<float, mean_aggregator>(8, 3));
  sequential<gcn_layer<double>, sage_layer<double, mean_aggregator>> d(
      gcn_layer<double>(5, 8), sage_layer<double, mean_aggregator>(8, 3));
  f.initialise(3);
  d.initialise(3);
  const matrixd x = random_matrix(g.num_rows, 5, 51);
  const matrixf xf = x.cast<float>();
  const matrixf& yf = f.forward(graph, {}, xf);
  const matrixd& yd = d.forward(graph, {}, x);
  CHECK((yf.cast<double>() - yd).cwiseAbs().maxCoeff() < 1e-5);
  const matrixd dy = random_matrix(g.num_rows, 3, 52);
  f.backward(graph, {}, dy.cast<float>());
  d.backward(graph, {}, dy);
  REQUIRE(f.parameters().size() == d.parameters().size());
  double worst = 0;
  for (std::size_t p = 0; p < d.parameters().size(); ++p)  // per parameter: padding differs
    worst = std::max(worst, (f.parameters().grad(p).cast<double>() - d.parameters().grad(p))
                                .cwiseAbs()
                                .maxCoeff());
  CHECK(worst < 1e-4);
}

TEST_CASE("a float GCN (gcn, relu, dropout, gcn) learns a planted partition; the run-time model "
          "computes the same") {
  planted_partition_options o;
  o.num_nodes = 800;
  o.num_classes = 4;
  o.feature_dim = 16;
  o.average_degree = 8;
  o.train_fraction = 0.3;
  o.seed = 5;
  const graph_dataset data = make_planted_partition(o);
  edge_list e;  // A + I
  e.num_nodes = data.num_nodes();
  for (node_t i = 0; i < data.num_nodes(); ++i)
    for (node_t j : data.graph.row(i)) e.push_back(j, i);
  local_schedule graph(build_csr(e, {.self_loops = self_loop_policy::add}));

  using model_t = sequential<gcn_layer<float>, relu<float>, dropout<float>, gcn_layer<float>>;
  model_t model(gcn_layer<float>(16, 32), relu<float>(32), dropout<float>(32, 0.5),
                gcn_layer<float>(32, 4));
  std::vector<any_layer<float, local_schedule>> layers;
  layers.emplace_back(gcn_layer<float>(16, 32));
  layers.emplace_back(relu<float>(32));
  layers.emplace_back(dropout<float>(32, 0.5));
  layers.emplace_back(gcn_layer<float>(32, 4));
  dynamic_sequential<float, local_schedule> runtime(std::move(layers));
  model.initialise(11);
  runtime.initialise(11);

  adam<float> optimiser({.learning_rate = 0.01, .weight_decay = {5e-4}});
  adam<float> runtime_optimiser({.learning_rate = 0.01, .weight_decay = {5e-4}});
  const node_selection train{data.split, node_split::train};
  const node_selection test{data.split, node_split::test};
  const double normaliser = static_cast<double>(train.count(data.num_nodes()));
  matrixf dlogits, runtime_dlogits;
  double first_loss = 0, last_loss = 0;
  for (std::uint64_t epoch = 0; epoch < 60; ++epoch) {
    const layer_context ctx{.training = true, .seed = 3, .epoch = epoch};
    const double loss = softmax_cross_entropy(model.forward(graph, ctx, data.features),
                                              data.labels, train, normaliser, dlogits);
    model.backward(graph, ctx, dlogits);
    optimiser.step(model.parameters());
    if (epoch < 3) {  // the run-time model follows the same trajectory
      const double runtime_loss = softmax_cross_entropy(runtime.forward(graph, ctx, data.features),
                                                        data.labels, train, normaliser,
                                                        runtime_dlogits);
      runtime.backward(graph, ctx, runtime_dlogits);
      runtime_optimiser.step(runtime.parameters());
      CHECK(runtime_loss == loss);
      const auto a = model.parameters().values(), b = runtime.parameters().values();
      CHECK(std::equal(a.begin(), a.end(), b.begin(), b.end()));
    }
    if (epoch == 0) first_loss = loss;
    last_loss = loss;
  }
  const matrixf& logits = model.forward(graph, {.training = false}, data.features);
  const double accuracy_test = accuracy(logits, data.labels, test).fraction();
  MESSAGE("loss " << first_loss << " -> " << last_loss << ", test accuracy " << accuracy_test);
  CHECK(last_loss < 0.7 * first_loss);
  CHECK(accuracy_test > 0.6);  // chance is 0.25
}

/// A small planted partition: 300 nodes, 3 classes, 8 features.
static graph_dataset small_planted() {
  planted_partition_options o;
  o.num_nodes = 300;
  o.num_classes = 3;
  o.feature_dim = 8;
  o.seed = 9;
  return make_planted_partition(o);
}

TEST_CASE("train_full_batch evaluates every N-th epoch and the last, never with 0, and refuses "
          "options outside their domain") {
  const graph_dataset data = small_planted();
  local_schedule graph(with_self_loops(data.graph, self_loop_policy::add));
  const node_data<float> nodes{data.features, data.labels, data.split};
  const auto run = [&](train_options options) {
    sequential<gcn_layer<float>, relu<float>, gcn_layer<float>> model(
        gcn_layer<float>(8, 16), relu<float>(16), gcn_layer<float>(16, 3));
    model.initialise(1);
    adam<float> optimiser({.learning_rate = 0.01});
    options.log_progress = false;
    return train_full_batch(model, graph, optimiser, nodes, options);
  };
  const train_result every = run({.epochs = 7, .evaluate_every = 1});
  const train_result third = run({.epochs = 7, .evaluate_every = 3});
  REQUIRE(third.history.size() == 7);
  for (const epoch_stats& e : third.history) {
    CAPTURE(e.epoch);
    CHECK(e.evaluated == (e.epoch == 2 || e.epoch == 5 || e.epoch == 6));
    CHECK(e.train_loss == every.history[e.epoch].train_loss);  // evaluation changes nothing
    if (e.evaluated) CHECK(e.valid_score == every.history[e.epoch].valid_score);
  }
  CHECK((third.best_epoch == 2 || third.best_epoch == 5 || third.best_epoch == 6));
  const train_result never = run({.epochs = 3, .evaluate_every = 0});
  CHECK(never.best_epoch == -1);
  CHECK(std::none_of(never.history.begin(), never.history.end(),
                     [](const epoch_stats& e) { return e.evaluated; }));
  CHECK(epoch_line(never.history[0], 1.0).find("not evaluated") != std::string::npos);
  CHECK_THROWS_WITH_AS(run({.epochs = 0}), doctest::Contains("epochs 0"), invalid_argument);
  CHECK_THROWS_WITH_AS(run({.epochs = 3, .patience = 2, .evaluate_every = 0}),
                       doctest::Contains("needs evaluations"), invalid_argument);
  CHECK_THROWS_WITH_AS(run({.epochs = 3, .evaluate_every = -1}),
                       doctest::Contains("evaluate_every -1"), invalid_argument);
}

TEST_CASE("train_full_batch regresses several outputs and learns multi-hot labels; the CSV "
          "log names the task's score; mismatched targets are refused") {
  const graph_dataset data = small_planted();
  local_schedule graph(with_self_loops(data.graph, self_loop_policy::add));
  // A teacher (one GCN layer, 3 outputs) makes targets that a student of its form learns
  // from the training nodes alone.
  sequential<gcn_layer<float>> teacher(gcn_layer<float>(8, 3));
  teacher.initialise(7);
  const matrixf values = teacher.forward(graph, layer_context{.training = false}, data.features);
  const matrixf multi_hot = (values.array() > 0).cast<float>().matrix();
  testing_support::temp_dir dir("task");
  const auto run = [&](task_kind task, const matrixf& targets, int epochs) {
    sequential<gcn_layer<float>> model(gcn_layer<float>(8, 3));
    model.initialise(1);
    adam<float> optimiser({.learning_rate = 0.05});
    node_data<float> nodes{.features = data.features, .split = data.split, .task = task,
                           .targets = {targets.data(), targets.rows(), targets.cols()}};
    return train_full_batch(model, graph, optimiser, nodes,
                            {.epochs = epochs, .log_progress = false,
                             .csv_log = (dir.path / task_name(task)).string()});
  };
  const train_result regression = run(task_kind::regress, values, 150);
  CHECK(regression.history.front().valid_score < 0.5);  // R^2 of the untrained model
  CHECK(regression.best_valid_score > 0.95);
  CHECK(regression.test_score > 0.95);
  const train_result multilabel = run(task_kind::multilabel, multi_hot, 150);
  CHECK(multilabel.history.front().valid_score < 0.6);  // ROC-AUC: near chance untrained
  CHECK(multilabel.best_valid_score > 0.9);
  CHECK(multilabel.test_score > 0.9);
  const auto header = [&](const char* name) {
    std::ifstream in(dir.path / name);
    std::string line;
    std::getline(in, line);
    return line;
  };
  CHECK(header("regress").find(",train_r2,valid_r2,test_r2,") != std::string::npos);
  CHECK(header("multilabel").find(",valid_rocauc,") != std::string::npos);

  const matrixf narrow = values.leftCols(2);
  CHECK_THROWS_WITH_AS(run(task_kind::regress, narrow, 1),
                       doctest::Contains("targets of 300 x 2"), invalid_argument);
  const auto first_train = static_cast<Eigen::Index>(
      std::find(data.split.begin(), data.split.end(), node_split::train) - data.split.begin());
  REQUIRE(first_train < 300);
  matrixf not_binary = multi_hot;
  not_binary(first_train, 1) = 2;
  CHECK_THROWS_WITH_AS(run(task_kind::multilabel, not_binary, 1),
                       doctest::Contains("multi-hot targets are 0 or 1"), invalid_argument);
  matrixf infinite = values;
  infinite(first_train, 2) = INFINITY;
  CHECK_THROWS_AS(run(task_kind::regress, infinite, 1), numeric_error);
}

namespace {
/// linear<float> recording where each of its forward and backward calls finds x.
struct recording_linear : linear<float> {
  using linear<float>::linear;
  std::shared_ptr<std::vector<const float*>> reads =
      std::make_shared<std::vector<const float*>>();
  template <class Schedule>
  void forward(Schedule& g, const layer_context& c, const_rows_ref<float> x, matrixf& y) {
    reads->push_back(x.data());
    linear<float>::forward(g, c, x, y);
  }
  template <class Schedule>
  void backward(Schedule& g, const layer_context& c, const_rows_ref<float> x,
                const_rows_ref<float> y, const_rows_ref<float> dy, matrixf& dx) {
    reads->push_back(x.data());
    linear<float>::backward(g, c, x, y, dy, dx);
  }
};
}  // namespace

TEST_CASE("models and train_full_batch read features given as an Eigen::Map of the caller's "
          "memory in place, with the numbers of a matrix") {
  const graph_dataset data = small_planted();
  local_schedule graph(with_self_loops(data.graph, self_loop_policy::add));
  // The caller's own array (say a simulation's), and the same values as a sar::matrix.
  std::vector<float> host(data.features.data(), data.features.data() + data.features.size());
  const Eigen::Map<const matrixf> features(host.data(), data.features.rows(),
                                           data.features.cols());
  const auto make = [] {
    return sequential<recording_linear, relu<float>, gcn_layer<float>>(
        recording_linear(8, 16), relu<float>(16), gcn_layer<float>(16, 3));
  };
  const auto only_host = [&](const std::vector<const float*>& reads) {
    return !reads.empty() && std::all_of(reads.begin(), reads.end(),
                                         [&](const float* p) { return p == host.data(); });
  };
  SUBCASE("forward and backward") {
    auto on_map = make(), on_matrix = make();
    on_map.initialise(3);
    on_matrix.initialise(3);
    const layer_context ctx{.training = true, .seed = 1};
    const matrixf dlogits = matrixf::Constant(data.features.rows(), 3, 0.25f);
    CHECK(on_map.forward(graph, ctx, features) == on_matrix.forward(graph, ctx, data.features));
    on_map.backward(graph, ctx, dlogits);
    on_matrix.backward(graph, ctx, dlogits);
    CHECK(only_host(*on_map.layer<0>().reads));
    CHECK(on_map.layer<0>().reads->size() == 2);
    const auto gm = on_map.parameters().grads(), gx = on_matrix.parameters().grads();
    CHECK(std::equal(gm.begin(), gm.end(), gx.begin(), gx.end()));
  }
  SUBCASE("rows with a stride: every row padded to 10 floats") {
    const Eigen::Index n = data.features.rows();
    std::vector<float> padded(static_cast<std::size_t>(n * 10), -7.0f);
    for (Eigen::Index i = 0; i < n; ++i)
      std::copy_n(data.features.row(i).data(), 8, padded.data() + i * 10);
    const Eigen::Map<const matrixf, 0, Eigen::OuterStride<>> strided(padded.data(), n, 8,
                                                                     Eigen::OuterStride<>(10));
    auto on_map = make(), on_matrix = make();
    on_map.initialise(3);
    on_matrix.initialise(3);
    const layer_context ctx{.training = true, .seed = 1};
    CHECK(on_map.forward(graph, ctx, strided) == on_matrix.forward(graph, ctx, data.features));
    CHECK(on_map.layer<0>().reads->front() == padded.data());
  }
  SUBCASE("a run-time model, with an in-place first layer that must not write the input") {
    std::vector<any_layer<float, local_schedule>> layers;
    layers.emplace_back(dropout<float>(8, 0.5));
    layers.emplace_back(gcn_layer<float>(8, 3));
    dynamic_sequential<float, local_schedule> model(std::move(layers));
    model.initialise(3);
    const layer_context ctx{.training = true, .seed = 1};
    const matrixf logits = model.forward(graph, ctx, features);
    CHECK(std::equal(host.begin(), host.end(), data.features.data()));  // untouched
    CHECK(logits == model.forward(graph, ctx, data.features));
  }
  SUBCASE("training") {
    auto on_map = make(), on_matrix = make();
    on_map.initialise(3);
    on_matrix.initialise(3);
    adam<float> opt_map({.learning_rate = 0.01}), opt_matrix({.learning_rate = 0.01});
    train_options options{.epochs = 4};
    options.log_progress = false;
    const train_result a = train_full_batch(
        on_map, graph, opt_map, node_data<float>{features, data.labels, data.split}, options);
    const train_result b = train_full_batch(
        on_matrix, graph, opt_matrix,
        node_data<float>{data.features, data.labels, data.split}, options);
    CHECK(only_host(*on_map.layer<0>().reads));  // every epoch's forward and backward, and
    CHECK(on_map.layer<0>().reads->size() >= 8);  // the evaluations
    for (std::size_t e = 0; e < a.history.size(); ++e)
      CHECK(a.history[e].train_loss == b.history[e].train_loss);
  }
}

TEST_CASE("bf16 storage rounds to nearest even, decodes exactly, and trains bitwise as the "
          "decoded features do") {
  // Rounding: ties to even, carries into the exponent, signs, infinities, NaN, double input.
  CHECK(bf16_from_float(1.0f) == 0x3f80);
  CHECK(bf16_from_float(1.0f + 0x1p-8f) == 0x3f80);  // a tie between 1 and 1 + 2^-7: even
  CHECK(bf16_from_float(1.0f + 0x1p-8f + 0x1p-20f) == 0x3f81);  // above the tie
  CHECK(bf16_from_float(1.0f + 3 * 0x1p-8f) == 0x3f82);  // a tie between ...81 and ...82
  CHECK(bf16_from_float(-2.5f) == 0xc020);
  CHECK(bf16_from_float(std::nextafter(2.0f, 0.0f)) == 0x4000);  // carries into the exponent
  CHECK(bf16_from_float(std::numeric_limits<float>::max()) == 0x7f80);  // beyond bf16: inf
  CHECK(bf16_from_float(-std::numeric_limits<float>::infinity()) == 0xff80);
  CHECK(std::isnan(float_from_bf16(bf16_from_float(std::bit_cast<float>(0x7f800001u)))));
  CHECK(float_from_bf16(0x3f81) == 1.0f + 0x1p-7f);
  // A double just above a float tie rounds up: no double rounding through float.
  CHECK(bf16_of(1.0 + 0x1p-8 + 0x1p-40) == 0x3f81);
  CHECK(bf16_from_float(static_cast<float>(1.0 + 0x1p-8 + 0x1p-40)) == 0x3f80);

  const graph_dataset data = small_planted();
  local_schedule graph(with_self_loops(data.graph, self_loop_policy::add));
  const bf16_rows stored(data.features);
  REQUIRE(stored.rows() == data.features.rows());
  REQUIRE(stored.cols() == data.features.cols());
  CHECK(stored.memory_bytes() == static_cast<std::size_t>(data.features.size()) * 2);
  const matrixf decoded = stored.decoded<float>();
  CHECK(bf16_rows(decoded) == stored);  // decoding is exact: encoding it again changes nothing
  double worst = 0;  // each value within half a unit in the last of bf16's 8 bits
  for (Eigen::Index i = 0; i < decoded.size(); ++i) {
    const double x = data.features.data()[i], d = decoded.data()[i];
    CHECK(d == float_from_bf16(bf16_from_float(data.features.data()[i])));
    if (x != 0) worst = std::max(worst, std::abs(d - x) / std::abs(x));
  }
  CHECK(worst > 0);  // the planted features are not all bf16 values already
  CHECK(worst <= 0x1p-8);  // half the spacing 2^-7 of [1, 2), relative
  const matrixd decoded_double = stored.decoded<double>();
  CHECK(decoded_double == decoded.cast<double>());

  // Training on the stored rows is training on the decoded matrix, bitwise, and each forward
  // gives the model a buffer of its own (a dropout first layer overwrites it).
  const auto run = [&](const node_data<float>& nodes) {
    std::vector<any_layer<float, local_schedule>> layers;
    layers.emplace_back(dropout<float>(8, 0.5));
    layers.emplace_back(gcn_layer<float>(8, 16));
    layers.emplace_back(relu<float>(16));
    layers.emplace_back(gcn_layer<float>(16, 3));
    dynamic_sequential<float, local_schedule> model(std::move(layers));
    model.initialise(5);
    adam<float> optimiser({.learning_rate = 0.01});
    train_options options{.epochs = 4};
    options.log_progress = false;
    return train_full_batch(model, graph, optimiser, nodes, options);
  };
  const matrixf empty;
  const train_result on_bf16 = run(node_data<float>{.features = empty, .labels = data.labels,
                                                    .split = data.split,
                                                    .bf16_features = &stored});
  const train_result on_decoded = run(node_data<float>{decoded, data.labels, data.split});
  const train_result on_fp32 = run(node_data<float>{data.features, data.labels, data.split});
  REQUIRE(on_bf16.history.size() == 4);
  bool differs_from_fp32 = false;
  for (std::size_t e = 0; e < on_bf16.history.size(); ++e) {
    CHECK(on_bf16.history[e].train_loss == on_decoded.history[e].train_loss);
    CHECK(on_bf16.history[e].valid_score == on_decoded.history[e].valid_score);
    CHECK(on_bf16.history[e].train_loss ==
          doctest::Approx(on_fp32.history[e].train_loss).epsilon(1e-2));
    differs_from_fp32 |= on_bf16.history[e].train_loss != on_fp32.history[e].train_loss;
  }
  CHECK(differs_from_fp32);
  CHECK(stored.decoded<float>() == decoded);  // the stored rows are never written
}

TEST_CASE("a GCN reads bf16 features row by row on one process: bitwise the model on the "
          "decoded matrix (W first or after, edge weights, training and evaluation)") {
  planted_partition_options o;
  o.num_nodes = 9000;  // more rows than a reduction chunk (4096) and many product chunks (512)
  o.num_classes = 3;
  o.feature_dim = 24;
  o.seed = 4;
  graph_dataset data = make_planted_partition(o);
  const bf16_rows stored(data.features);
  const matrixf decoded = stored.decoded<float>();
  // Edge weights: one column of positive weights, the self-loops 1.
  csr looped = with_self_loops(data.graph, self_loop_policy::add);
  matrixf weights(looped.num_edges(), 1);
  for (Eigen::Index e = 0; e < weights.rows(); ++e) weights(e, 0) = 0.5f + 0.01f * float(e % 37);
  local_schedule graph(std::move(looped), std::move(weights));

  // dropout -> GCN (aggregate first, 24 -> 32, or weight first, 24 -> 16) -> relu -> GCN.
  const auto make = [](Eigen::Index hidden, Eigen::Index edge_weight) {
    std::vector<any_layer<float, local_schedule>> layers;
    layers.emplace_back(dropout<float>(24, 0.4));
    layers.emplace_back(gcn_layer<float>(24, hidden, true, false, edge_weight));
    layers.emplace_back(relu_dropout<float>(hidden, 0.2));
    layers.emplace_back(gcn_layer<float>(hidden, 3));
    dynamic_sequential<float, local_schedule> model(std::move(layers));
    model.initialise(7);
    return model;
  };
  for (const Eigen::Index hidden : {32, 16})
    for (const Eigen::Index edge_weight : {-1, 0}) {
      CAPTURE(hidden);
      CAPTURE(edge_weight);
      auto on_bf16 = make(hidden, edge_weight), on_decoded = make(hidden, edge_weight);
      REQUIRE(on_bf16.reads_bf16_input());
      for (const bool training : {true, false}) {
        const layer_context ctx{.training = training, .seed = 3, .epoch = 2};
        const matrixf logits = on_bf16.forward(graph, ctx, stored);
        CHECK(logits == on_decoded.forward(graph, ctx, const_rows_ref<float>(decoded)));
        if (!training) continue;
        const matrixf dlogits = matrixf::Constant(logits.rows(), logits.cols(), 0.01f) + logits;
        on_bf16.backward(graph, ctx, dlogits);
        on_decoded.backward(graph, ctx, dlogits);
        const auto& a = on_bf16.parameters();
        const auto& b = on_decoded.parameters();
        for (std::size_t k = 0; k < a.size(); ++k) CHECK(a.grad(k) == b.grad(k));
      }
    }

  // Models that cannot read bf16 rows say so, and training decodes the features for them.
  std::vector<any_layer<float, local_schedule>> sage;
  sage.emplace_back(dropout<float>(24, 0.4));
  sage.emplace_back(sage_mean_layer<float>(24, 3));
  dynamic_sequential<float, local_schedule> sage_model(std::move(sage));
  CHECK_FALSE(sage_model.reads_bf16_input());
  CHECK_THROWS_AS(sage_model.forward(graph, layer_context{}, stored), invalid_argument);
  std::vector<any_layer<float, local_schedule>> two;
  two.emplace_back(dropout<float>(24, 0.4));
  two.emplace_back(dropout<float>(24, 0.4));
  two.emplace_back(gcn_layer<float>(24, 3));
  dynamic_sequential<float, local_schedule> two_dropouts(std::move(two));
  CHECK_THROWS_AS(two_dropouts.forward(graph, layer_context{.training = true}, stored),
                  invalid_argument);
  // No input gradient of bf16 features.
  gcn_layer<float> alone(24, 8);
  parameter_store<float> store;
  alone.declare(store);
  store.allocate();
  matrixf y, dx(decoded.rows(), 24);
  const bf16_input<float> input{.values = &stored, .kept = {}};
  alone.forward(graph, layer_context{}, input, y);
  CHECK_THROWS_AS(alone.backward(graph, layer_context{}, input, y, y, dx), invalid_argument);
}

TEST_CASE("a run checkpointed, killed and resumed ends bitwise where the uninterrupted run ends "
          "(GCN with batch norm and dropout, Adam, patience state); checkpoints refuse what does "
          "not fit them") {
  const graph_dataset data = small_planted();
  local_schedule graph(with_self_loops(data.graph, self_loop_policy::add));
  const node_data<float> nodes{data.features, data.labels, data.split};
  model_config config;
  config.batch_norm = true;
  config.hidden = 12;
  const auto make = [&](int hidden = 12) {
    model_config c = config;
    c.hidden = hidden;
    return make_model<float, local_schedule>(c, 8, 3, 4);
  };
  const nlohmann::json settings{{"model", "gcn"}, {"hidden", 12}};
  const train_options base{.epochs = 9, .patience = 50, .seed = 2, .log_progress = false};
  testing_support::temp_dir dir("checkpoint");
  const auto ck_dir = dir.path / "ck";

  auto whole = make();
  auto whole_opt = make_optimiser(config, whole);
  const train_result uninterrupted = train_full_batch(whole, graph, whole_opt, nodes, base);

  {  // the first run saves after every third epoch and "dies" after epoch 4
    auto model = make();
    auto optimiser = make_optimiser(config, model);
    train_options first = base;
    first.after_epoch = [&](const train_result& r) {
      if (r.epochs_done() % 3 == 0) {
        serial_communicator comm;
        save_checkpoint(comm, ck_dir, model, optimiser, r, settings);
      }
      if (r.epochs_done() == 5) throw std::runtime_error("killed");
    };
    CHECK_THROWS_AS(train_full_batch(model, graph, optimiser, nodes, first), std::runtime_error);
  }
  const checkpoint ck = read_checkpoint(ck_dir);
  CHECK(ck.progress.epochs_done() == 3);
  CHECK(ck.optimiser_steps == 3);
  CHECK(ck.state.size() == 2);  // one batch norm: running mean and variance
  auto model = make();
  auto optimiser = make_optimiser(config, model);
  ck.check_settings(settings, "test");
  restore_checkpoint(ck, model, optimiser);
  train_options second = base;
  second.resume = &ck.progress;
  const train_result resumed = train_full_batch(model, graph, optimiser, nodes, second);

  const auto a = whole.parameters().values(), b = model.parameters().values();
  CHECK(std::equal(a.begin(), a.end(), b.begin(), b.end()));
  CHECK(whole_opt.get_state().m == optimiser.get_state().m);
  CHECK(whole_opt.get_state().v == optimiser.get_state().v);
  const auto sa = whole.state(), sb = model.state();
  for (std::size_t s = 0; s < sa.size(); ++s)
    CHECK(std::equal(sa[s].begin(), sa[s].end(), sb[s].begin(), sb[s].end()));
  REQUIRE(resumed.history.size() == uninterrupted.history.size());
  for (std::size_t e = 0; e < resumed.history.size(); ++e) {
    CHECK(resumed.history[e].train_loss == uninterrupted.history[e].train_loss);
    CHECK(resumed.history[e].valid_score == uninterrupted.history[e].valid_score);
  }
  CHECK(resumed.best_epoch == uninterrupted.best_epoch);
  CHECK(resumed.stale_evaluations == uninterrupted.stale_evaluations);

  // A finished run with its patience exhausted trains no further epoch when resumed.
  train_result exhausted = uninterrupted;
  exhausted.stale_evaluations = 50;
  train_options more = base;
  more.epochs = 20;
  more.resume = &exhausted;
  CHECK(train_full_batch(model, graph, optimiser, nodes, more).epochs_done() == 9);

  // What does not fit is refused before anything changes.
  CHECK_THROWS_WITH_AS(ck.check_settings({{"model", "gat"}, {"hidden", 12}}, "test"),
                       doctest::Contains("model: checkpoint \"gcn\", this run \"gat\""),
                       invalid_argument);
  auto wider = make(16);
  auto wider_opt = make_optimiser(config, wider);
  const std::vector<float> before(wider.parameters().values().begin(),
                                  wider.parameters().values().end());
  CHECK_THROWS_WITH_AS(restore_checkpoint(ck, wider, wider_opt), doctest::Contains("x 16"),
                       invalid_argument);
  CHECK(std::equal(before.begin(), before.end(), wider.parameters().values().begin()));
  sgd<float> plain({.learning_rate = 0.1});
  CHECK_THROWS_WITH_AS(restore_checkpoint(ck, model, plain),
                       doctest::Contains("optimiser 'adam', this run uses 'sgd'"),
                       invalid_argument);

  // Corruption: an in-range change of a value, a missing file, a foreign directory.
  const auto set_last_byte = [&](char value) {
    std::fstream f(ck_dir / "parameters.npy", std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-1, std::ios::end);
    const char old = static_cast<char>(f.get());
    f.seekp(-1, std::ios::end);
    f.put(value);
    return old;
  };
  const char last = set_last_byte('\x3f');
  CHECK_THROWS_WITH_AS(read_checkpoint(ck_dir), doctest::Contains("checksum mismatch"), io_error);
  set_last_byte(last);
  CHECK(read_checkpoint(ck_dir).identity == ck.identity);
  // An edited checkpoint.json (the optimiser's step count, the best accuracy) is named.
  for (const auto& edit : {"/optimiser/steps", "/progress/best_valid_score"}) {
    const std::string original = [&] {
      std::ifstream in(ck_dir / "checkpoint.json");
      return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }();
    auto meta = nlohmann::json::parse(original);
    meta[nlohmann::json::json_pointer(edit)] = 12345;
    std::ofstream(ck_dir / "checkpoint.json") << meta.dump(2);
    CHECK_THROWS_WITH_AS(read_checkpoint(ck_dir),
                         doctest::Contains("checkpoint.json was changed after sar wrote it"),
                         io_error);
    std::ofstream(ck_dir / "checkpoint.json") << original;
  }
  CHECK(read_checkpoint(ck_dir).identity == ck.identity);
  std::filesystem::remove(ck_dir / "state.npy");
  CHECK_THROWS_WITH_AS(read_checkpoint(ck_dir), doctest::Contains("state.npy"), io_error);
  CHECK_THROWS_WITH_AS(read_checkpoint(dir.path), doctest::Contains("not a checkpoint"), io_error);
  std::filesystem::create_directories(dir.path / "foreign");
  { std::ofstream(dir.path / "foreign" / "notes.txt") << "mine"; }
  serial_communicator comm;
  CHECK_THROWS_AS(save_checkpoint(comm, dir.path / "foreign", model, optimiser, resumed, settings),
                  io_error);
  CHECK(std::filesystem::exists(dir.path / "foreign" / "notes.txt"));
}

TEST_CASE("every registered model family builds, its memory estimate counts its parameters "
          "exactly, its model file round-trips, and sar-plan plans it; unknown names refused") {
  // Settings every family can build with: edge features (mpnn) and a schema (rgcn), which the
  // others ignore.
  graph_schema schema;
  schema.node_types = {{"a", 10, 8}, {"b", 5, 0}};
  schema.relations = {{0, "to", 1}, {1, "from", 0}};
  testing_support::temp_dir dir("families");
  serial_communicator comm;
  int families = 0;
  for_each_family([&]<class F>() {
    ++families;
    CAPTURE(F::name);
    model_config c = paper_defaults(F::name);
    CHECK(c.family == F::name);
    c.hidden = 6;
    c.heads = 2;
    c.layers = 3;
    c.edge_dim = 2;
    c.schema = schema;
    auto model = make_model<float, local_schedule>(c, 8, 3, 5);
    double parameters = 0;
    for (std::size_t p = 0; p < model.parameters().size(); ++p)
      parameters += static_cast<double>(model.parameters().value(p).size());
    CHECK(estimate_model_memory(c, 8, 3, 0, 1).parameters / 4 == parameters);
    // The model file: the family by name, with its settings.
    const model_description d{.config = c, .input_dim = 8, .output_dim = 3};
    save_model(comm, dir.path / "m.sarmodel", model, d);
    const saved_model saved = read_model(dir.path / "m.sarmodel");
    CHECK(saved.description.config.family == F::name);
    CHECK(static_cast<double>(saved.values.size()) == parameters);
    auto loaded = load_model<float, local_schedule>(saved);  // checks the architecture fits
    CHECK(loaded.parameters().total_size() == model.parameters().total_size());
    // sar-plan's layers: one per graph layer, positive widths, the last as wide as the outputs.
    const auto layers = detail::capacity::graph_layers(c, 8, 3);
    REQUIRE(layers.size() == 3);
    CHECK(layers.back().output == 3);
    for (const auto& l : layers) CHECK((l.input > 0 && l.output > 0 && l.exchanged >= 0));
  });
  CHECK(static_cast<std::size_t>(families) == family_names().size());
  CHECK(family_names().front() == "gcn");
  model_config unknown;
  unknown.family = "gin-typo";
  const auto build = [&] { return make_model<float, local_schedule>(unknown, 8, 3, 5); };
  CHECK_THROWS_WITH_AS(build(),
                       doctest::Contains("unknown model family 'gin-typo' (gcn, sage, gat"),
                       invalid_argument);
  CHECK_THROWS_AS(paper_defaults("GCN"), invalid_argument);
}

TEST_CASE("every GraphSAGE aggregator builds, counts its parameters and round-trips through a "
          "model file; an unknown one is refused by make_model and read_model") {
  testing_support::temp_dir dir("aggregators");
  serial_communicator comm;
  for (const std::string& name : aggregator_names()) {
    CAPTURE(name);
    model_config c = paper_defaults("sage");
    c.aggregation = name;
    c.hidden = 4;
    auto model = make_model<float, local_schedule>(c, 6, 3, 5);
    double parameters = 0;
    for (std::size_t p = 0; p < model.parameters().size(); ++p)
      parameters += static_cast<double>(model.parameters().value(p).size());
    CHECK(estimate_model_memory(c, 6, 3, 0, 1).parameters / 4 == parameters);
    save_model(comm, dir.path / "m.sarmodel", model, {.config = c, .input_dim = 6, .output_dim = 3});
    CHECK(read_model(dir.path / "m.sarmodel").description.config.aggregation == name);
  }
  model_config typo = paper_defaults("sage");
  typo.aggregation = "max";
  CHECK_THROWS_WITH_AS((make_model<float, local_schedule>(typo, 6, 3, 5)),
                       doctest::Contains("unknown GraphSAGE aggregator 'max' (mean | gcn | pool)"),
                       invalid_argument);
}

TEST_CASE("every row of the task table has its task, named and parsed both ways; node_task "
          "dispatches to it") {
  for (const task_facts& t : task_table) {
    CAPTURE(t.name);
    CHECK(parse_task(t.name) == t.kind);
    CHECK(task_name(t.kind) == t.name);
    with_task(t.kind, [&]<class Task>() { CHECK(Task::kind == t.kind); });
  }
  CHECK_THROWS_WITH_AS(parse_task("classification"),
                       doctest::Contains("unknown task 'classification' (classify, regress, "
                                         "multilabel, graph-classify or graph-regress)"),
                       invalid_argument);
  CHECK(task_choices(task_level::node) == "classify, regress or multilabel");
  CHECK(task_choices(task_level::graph) == "graph-classify or graph-regress");
  CHECK(is_graph_level(task_kind::graph_regress));
  CHECK_FALSE(is_graph_level(task_kind::multilabel));
  // A node dataset's metadata names a node-level task.
  CHECK_THROWS_WITH_AS(detail::task_in_metadata("graph-classify", "meta.json", "here"),
                       doctest::Contains("unknown task 'graph-classify' (classify, regress or "
                                         "multilabel)"),
                       io_error);
  // The normaliser follows the task: nodes for class ids, every value for rows.
  node_task task;
  CHECK(task.normaliser(10, 3) == 10);  // classify
  task.kind = task_kind::regress;
  CHECK(task.normaliser(10, 3) == 30);
}

TEST_CASE("a saved model loads and predicts bitwise what it predicted; damaged or mismatched "
          "model files are refused") {
  const graph_dataset data = small_planted();
  local_schedule graph(with_self_loops(data.graph, self_loop_policy::add));
  testing_support::temp_dir dir("model");
  serial_communicator comm;
  for (const std::string kind : {"gcn", "sage", "gat"}) {
    for (bool batch_norm : {false, true}) {
      CAPTURE(kind);
      CAPTURE(batch_norm);
      model_config c = paper_defaults(kind);
      c.hidden = 6;
      c.heads = 2;
      c.batch_norm = batch_norm;
      c.aggregation = "pool";
      auto model = make_model<float, local_schedule>(c, 8, 3, 5);
      auto optimiser = make_optimiser(c, model);
      train_options o{.epochs = 3, .log_progress = false};
      train_full_batch(model, graph, optimiser, node_data<float>{data.features, data.labels, data.split}, o);
      const matrixf before = predict(model, graph, data.features);
      const model_description d{.config = c, .input_dim = 8, .output_dim = 3,
                                 .row_normalise_features = true, .about = {{"dataset", "planted"}}};
      const auto file = dir.path / "m.sarmodel";
      save_model(comm, file, model, d);
      const saved_model saved = read_model(file);
      CHECK(saved.description.input_dim == 8);
      CHECK(saved.description.config.family == kind);
      CHECK(saved.description.config.batch_norm == batch_norm);
      CHECK(saved.description.row_normalise_features);
      CHECK(saved.description.about["dataset"] == "planted");
      auto loaded = load_model<float, local_schedule>(saved);
      const matrixf after = predict(loaded, graph, data.features);
      CHECK((after.array() == before.array()).all());
    }
  }
  // An edge-weighted GCN keeps its edge-feature column and predicts alike on the graph's edges
  // (self-loops added by prepare_model_graph, weighing 1).
  {
    model_config c = paper_defaults("gcn");
    c.edge_dim = 2;
    c.edge_weight = 1;
    csr g = data.graph;
    matrixf ef(g.num_edges(), 2);
    for (Eigen::Index e = 0; e < ef.rows(); ++e) ef.row(e) << 1.0f, std::sin(float(e));
    prepare_model_graph(c, g, ef);
    local_schedule weighted(std::move(g), std::move(ef));
    auto model = make_model<float, local_schedule>(c, 8, 3, 5);
    const matrixf before = predict(model, weighted, data.features);
    model_config unweighted = c;
    unweighted.edge_weight = -1;
    auto plain = make_model<float, local_schedule>(unweighted, 8, 3, 5);  // same parameters
    CHECK((before - predict(plain, graph, data.features)).cwiseAbs().maxCoeff() > 1e-3);
    CHECK_THROWS_WITH_AS(predict(model, graph, data.features),
                         doctest::Contains("but the graph has 0 features per edge"),
                         invalid_argument);
    const auto file = dir.path / "weighted.sarmodel";
    save_model(comm, file, model, {.config = c, .input_dim = 8, .output_dim = 3});
    const saved_model saved = read_model(file);
    CHECK(saved.description.config.edge_weight == 1);
    auto loaded = load_model<float, local_schedule>(saved);
    CHECK((predict(loaded, weighted, data.features).array() == before.array()).all());
    c.edge_weight = 2;  // a column the model's edges do not have
    CHECK_THROWS_WITH_AS((make_model<float, local_schedule>(c, 8, 3, 5)),
                         doctest::Contains("edges weighted by edge feature 2 of 2"),
                         invalid_argument);
  }
  // Regression: predictions in the original units.
  model_config c = paper_defaults("gcn");
  auto model = make_model<double, local_schedule>(c, 8, 2, 1);
  const model_description d{.config = c, .input_dim = 8, .output_dim = 2,
                            .task = task_kind::regress, .targets = {{10, -1}, {2, 0.5}}};
  const auto file = dir.path / "regress.sarmodel";
  save_model(comm, file, model, d);
  const saved_model saved = read_model(file);
  CHECK(saved.scalar == npy_dtype::float64);
  CHECK(saved.description.targets.mean == std::vector<double>{10, -1});
  auto loaded = load_model<double, local_schedule>(saved);
  const matrixd x = data.features.cast<double>();
  const matrixd standard = predict(model, graph, x);
  matrixd original = predict(loaded, graph, x);
  CHECK((original.array() == standard.array()).all());
  to_original_units(original, saved.description.targets);
  CHECK(original(4, 0) == doctest::Approx(standard(4, 0) * 2 + 10));
  CHECK(original(4, 1) == doctest::Approx(standard(4, 1) * 0.5 - 1));

  // Damaged files: each a clear sar::io_error naming the file.
  std::string bytes;
  {
    std::ifstream in(file, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  const auto refused = [&](const std::string& content, const char* why) {
    const auto bad = dir.path / "bad.sarmodel";
    std::ofstream(bad, std::ios::binary | std::ios::trunc) << content;
    CHECK_THROWS_WITH_AS(read_model(bad), doctest::Contains(why), io_error);
  };
  refused(bytes.substr(0, bytes.size() / 2), "checksum mismatch");
  refused(bytes.substr(0, 10), "too short");
  std::string flipped = bytes;
  flipped[bytes.size() / 2] ^= 1;
  refused(flipped, "checksum mismatch");
  refused("not a model at all, just some text of some length", "bad magic");
  CHECK_THROWS_AS(read_model(dir.path / "missing.sarmodel"), io_error);
  // A file whose architecture does not hold its parameters (valid CRC): refused before the
  // architecture is built.
  model_config wide = c;
  wide.hidden = 1000000;
  const std::string mismatched = model_file_content(model, {.config = wide, .input_dim = 8,
                                                            .output_dim = 2});
  const auto odd = dir.path / "mismatched.sarmodel";
  std::ofstream(odd, std::ios::binary | std::ios::trunc) << mismatched;
  CHECK_THROWS_WITH_AS((load_model<double, local_schedule>(read_model(odd))),
                       doctest::Contains("parameter values, its architecture"), invalid_argument);
}
