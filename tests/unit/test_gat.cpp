// The fused GAT layer: against the unfused reference, against central differences, and under
// a multi-block schedule (the shape of the distributed SAR schedules) against one block.
#include <algorithm>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <doctest/doctest.h>
#include <tbb/global_control.h>
#include <tbb/task_arena.h>

#include "sar/schedule/local_schedule.hpp"
#include "sar/graph/builders.hpp"
#include "sar/kernels/gat.hpp"
#include "sar/nn/detail/gat_reference.hpp"
#include "sar/nn/gat.hpp"
#include "sar/nn/gcn.hpp"
#include "sar/nn/sage.hpp"
#include "sar/testing/gradient_checker.hpp"
#include "test_support.hpp"

namespace {

using sar::matrixd;
using sar::node_t;

/// A schedule that splits the graph's columns into several blocks, like the distributed
/// schedules do: block b holds the in-edges whose source is assigned to b, its columns index
/// its own halo (the sorted unique sources, copied out of x for the visit and freed after),
/// and blocks are visited one at a time in a chosen order. With `compressed`, each block keeps
/// only the destination rows that have an edge from it (graph_block::rows), as graph_shard's
/// blocks and the distributed schedules do.
class block_schedule {
 public:
  /// block_of[j] in [0, num_blocks) for every node j; order: the visiting order of blocks.
  block_schedule(const sar::csr& graph, const std::vector<int>& block_of, int num_blocks,
                 std::vector<int> order, bool compressed = false)
      : num_local_(graph.num_rows), order_(std::move(order)),
        in_degrees_(sar::in_degrees(graph)), out_degrees_(sar::out_degrees(graph)) {
    for (int b = 0; b < num_blocks; ++b) {
      auto part = std::make_unique<part_data>();
      std::vector<node_t> halo_row(graph.num_cols, -1);
      for (node_t j = 0; j < graph.num_cols; ++j)
        if (block_of[j] == b) {
          // Only sources that really send an edge are in the halo (as U_pq in ALGORITHMS §1).
          bool used = false;
          for (node_t i = 0; i < graph.num_rows && !used; ++i)
            for (node_t c : graph.row(i)) used = used || c == j;
          if (used) {
            halo_row[j] = static_cast<node_t>(part->sources.size());
            part->sources.push_back(j);
          }
        }
      part->edges.num_cols = static_cast<node_t>(part->sources.size());
      part->edges.offsets.assign(1, 0);
      for (node_t i = 0; i < graph.num_rows; ++i) {
        const std::size_t before = part->edges.columns.size();
        for (node_t c : graph.row(i))
          if (block_of[c] == b) part->edges.columns.push_back(halo_row[c]);
        if (compressed && part->edges.columns.size() == before) continue;
        if (compressed) part->rows.push_back(i);
        part->edges.offsets.push_back(static_cast<sar::edge_t>(part->edges.columns.size()));
      }
      part->edges.num_rows = static_cast<node_t>(part->edges.offsets.size() - 1);
      part->edges.validate("block_schedule");
      // The transpose lists LOCAL rows in both forms (the graph_block convention).
      part->transposed = sar::transpose(part->edges);
      part->transposed.num_cols = graph.num_rows;
      for (node_t& r : part->transposed.columns) r = compressed ? part->rows[r] : r;
      part->block.edges = &part->edges;
      part->block.transposed = &part->transposed;
      part->block.source_ids = part->sources;
      for (node_t j : part->sources) part->source_degrees.push_back(out_degrees_[j]);
      part->block.source_degrees = part->source_degrees;
      part->block.rows = part->rows;
      parts_.push_back(std::move(part));
    }
  }

  node_t num_destinations() const { return num_local_; }
  node_t num_sources() const { return num_local_; }
  node_t first_global() const { return 0; }
  node_t node_id(node_t row) const { return row; }
  node_t num_global() const { return num_local_; }
  std::span<const node_t> in_degrees() const { return in_degrees_; }
  std::span<const node_t> out_degrees() const { return out_degrees_; }
  template <class T>
  void all_reduce_sum(std::span<T>) {}
  /// Rows of the largest block's edges (num_local unless compressed).
  node_t max_block_rows() const {
    node_t most = 0;
    for (const auto& p : parts_) most = std::max(most, p->edges.num_rows);
    return most;
  }

  template <class X, class Visit>
  void gather(const sar::exchange_key&, const Eigen::MatrixBase<X>& x, Visit&& visit) {
    for (int b : order_) {
      const auto halo = fetch(*parts_[b], x);
      visit(parts_[b]->block, sar::const_rows_ref<typename X::Scalar>(halo));
    }
  }
  template <class DX, class Visit>
  void scatter(const sar::exchange_key&, Eigen::MatrixBase<DX>& dx, Visit&& visit) {
    for (int b : order_) {
      sar::matrix<typename DX::Scalar> dhalo =
          sar::matrix<typename DX::Scalar>::Zero(parts_[b]->sources.size(), dx.cols());
      sar::rows_ref<typename DX::Scalar> ref(dhalo);
      visit(parts_[b]->block, ref);
      deliver(*parts_[b], dhalo, dx);
    }
  }
  template <class X, class DX, class Visit>
  void gather_scatter(const sar::exchange_key&, const Eigen::MatrixBase<X>& x, Eigen::MatrixBase<DX>& dx, Visit&& visit) {
    for (int b : order_) {
      const auto halo = fetch(*parts_[b], x);  // fetched again: rematerialisation
      sar::matrix<typename DX::Scalar> dhalo =
          sar::matrix<typename DX::Scalar>::Zero(parts_[b]->sources.size(), dx.cols());
      sar::rows_ref<typename DX::Scalar> ref(dhalo);
      visit(parts_[b]->block, sar::const_rows_ref<typename X::Scalar>(halo), ref);
      deliver(*parts_[b], dhalo, dx);
    }
  }

 private:
  struct part_data {
    std::vector<node_t> sources;  // global ids of the halo rows
    std::vector<node_t> source_degrees;  // their out-degrees
    std::vector<node_t> rows;     // compressed: local row of each edges row
    sar::csr edges, transposed;
    sar::graph_block block;
  };
  template <class X>
  static sar::matrix<typename X::Scalar> fetch(const part_data& part, const Eigen::MatrixBase<X>& x) {
    sar::matrix<typename X::Scalar> halo(part.sources.size(), x.cols());
    for (std::size_t k = 0; k < part.sources.size(); ++k) halo.row(k) = x.row(part.sources[k]);
    return halo;
  }
  template <class M, class DX>
  static void deliver(const part_data& part, const M& dhalo, Eigen::MatrixBase<DX>& dx) {
    for (std::size_t k = 0; k < part.sources.size(); ++k) dx.row(part.sources[k]) += dhalo.row(k);
  }

  node_t num_local_;
  std::vector<int> order_;
  std::vector<node_t> in_degrees_, out_degrees_;
  std::vector<std::unique_ptr<part_data>> parts_;
};

static_assert(sar::layer<sar::gat_layer<double>, sar::local_schedule>);
static_assert(sar::layer<sar::gat_layer<double>, block_schedule>);
static_assert(sar::layer<sar::detail::gat_reference<double>, sar::local_schedule>);

/// 16 nodes, random in-edges, plus: node 3 has no in-edges (but sends some), node 9 has no
/// edges at all, nodes 0, 5, 11 have self-loops, node 14 has only a self-loop.
sar::csr small_graph(std::uint64_t seed = 7) {
  sar::edge_list edges;
  edges.num_nodes = 16;
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<node_t> pick(0, 15);
  for (int k = 0; k < 60; ++k) {
    const node_t s = pick(gen), d = pick(gen);
    if (d == 3 || d == 9 || s == 9 || d == 14 || s == d) continue;
    edges.push_back(s, d);
  }
  for (node_t loop : {0, 5, 11, 14}) edges.push_back(loop, loop);
  edges.push_back(3, 1);
  edges.push_back(3, 7);
  return sar::build_csr(edges, {.symmetrise = false, .deduplicate = true});
}

/// A random symmetric graph on n nodes with about 2 * draws edges, plus self-loops.
sar::csr random_symmetric_graph(node_t n, int draws, std::uint64_t seed) {
  sar::edge_list edges;
  edges.num_nodes = n;
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<node_t> pick(0, n - 1);
  for (int k = 0; k < draws; ++k) edges.push_back(pick(gen), pick(gen));
  return sar::build_csr(edges, {.symmetrise = true, .self_loops = sar::self_loop_policy::add});
}

using sar::testing_support::random_matrix;

double max_abs(const matrixd& a) { return a.size() ? a.cwiseAbs().maxCoeff() : 0.0; }
/// Largest difference relative to the larger magnitude (at least 1).
double rel_diff(const matrixd& a, const matrixd& b) {
  REQUIRE(a.rows() == b.rows());
  REQUIRE(a.cols() == b.cols());
  return max_abs(a - b) / std::max({1.0, max_abs(a), max_abs(b)});
}

struct pass_result {
  matrixd y, dx;
  matrixd grads;  // the flat gradient buffer as one row
};

/// Declares `layer` into a fresh store initialised from `seed` (with the bias made non-zero),
/// runs forward and backward with dy, returns y, dx and the parameter gradients.
template <class Layer, class Schedule>
pass_result run(Layer& layer, Schedule& graph, const sar::layer_context& ctx, const matrixd& x,
                const matrixd& dy, std::uint64_t seed = 3) {
  sar::parameter_store<double> store;
  layer.declare(store);
  store.allocate();
  store.initialise(seed);
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> jitter(-0.3, 0.3);
  for (double& v : store.values()) v += jitter(gen);
  pass_result r;
  layer.forward(graph, ctx, x, r.y);
  r.dx = matrixd::Zero(x.rows(), x.cols());
  layer.backward(graph, ctx, x, r.y, dy, r.dx);
  r.grads = Eigen::Map<const matrixd>(store.grads().data(), 1, store.total_size());
  return r;
}

void check_same(const pass_result& a, const pass_result& b, double tolerance) {
  CHECK(rel_diff(a.y, b.y) < tolerance);
  CHECK(rel_diff(a.dx, b.dx) < tolerance);
  CHECK(rel_diff(a.grads, b.grads) < tolerance);
  // Guard against vacuous agreement (everything zero).
  CHECK(max_abs(a.y) > 1e-3);
  CHECK(max_abs(a.dx) > 1e-3);
  CHECK(max_abs(a.grads) > 1e-3);
}

struct config {
  std::string name;
  sar::gat_options options;
};
const config configs[] = {
    {"1 head", {.heads = 1}},
    {"3 heads concat", {.heads = 3, .merge = sar::gat_merge::concat}},
    {"3 heads mean", {.heads = 3, .merge = sar::gat_merge::mean}},
    {"5 heads concat no bias", {.heads = 5, .negative_slope = 0.1, .bias = false}},
    {"1 head dropout", {.heads = 1, .attention_dropout = 0.4}},
    {"3 heads concat dropout", {.heads = 3, .attention_dropout = 0.3}},
    {"6 heads mean dropout", {.heads = 6, .merge = sar::gat_merge::mean, .attention_dropout = 0.5}},
};
const sar::layer_context training_ctx{.training = true, .seed = 11, .epoch = 4, .layer = 2};

}  // namespace

TEST_CASE("gat: fused layer equals the unfused reference (outputs and every gradient)") {
  sar::local_schedule graph(small_graph());
  const matrixd x = random_matrix(16, 5, 1);
  for (const auto& c : configs) {
    CAPTURE(c.name);
    sar::gat_layer<double> fused(5, 4, c.options);
    sar::detail::gat_reference<double> reference(5, 4, c.options);
    const matrixd dy = random_matrix(16, fused.output_dim(), 2);
    const auto a = run(fused, graph, training_ctx, x, dy);
    const auto b = run(reference, graph, training_ctx, x, dy);
    check_same(a, b, 1e-6);
  }
}

TEST_CASE("gat: the gradient checker passes with several heads, isolated nodes, self-loops") {
  sar::local_schedule graph(small_graph());
  const matrixd x = random_matrix(16, 4, 5);
  for (const auto& c : configs) {
    if (c.options.heads == 1) continue;
    CAPTURE(c.name);
    sar::gat_layer<double> layer(4, 3, c.options);
    const auto result = sar::check_gradients(layer, graph, training_ctx, x);
    CHECK_MESSAGE(result.passed, result.summary());
    CHECK(result.input.checked == x.size());
    CHECK(result.parameters.size() == (c.options.bias ? 4u : 3u));
  }
}

TEST_CASE("gat: isolated nodes get the bias; attention dropout is off outside training") {
  const sar::csr g = small_graph();
  REQUIRE(g.degree(3) == 0);
  REQUIRE(g.degree(9) == 0);
  sar::local_schedule graph(g);
  const matrixd x = random_matrix(16, 5, 8);
  sar::gat_layer<double> layer(5, 4, {.heads = 2, .attention_dropout = 0.5});
  sar::parameter_store<double> store;
  layer.declare(store);
  store.allocate();
  store.initialise(1);
  store.value(3).setConstant(0.25);  // the bias
  matrixd y;
  sar::layer_context eval = training_ctx;
  eval.training = false;
  layer.forward(graph, eval, x, y);
  for (node_t i : {3, 9}) CHECK((y.row(i).array() == 0.25).all());
  // Node 14 has only a self-loop: alpha = 1, out = z_14.
  const matrixd z = x * store.value(0);
  CHECK(rel_diff(y.row(14), (z.row(14).array() + 0.25).matrix()) < 1e-12);

  // Eval mode equals a layer without dropout; training mode with dropout differs from it.
  sar::gat_layer<double> plain(5, 4, {.heads = 2});
  sar::parameter_store<double> store2;
  plain.declare(store2);
  store2.allocate();
  std::copy(store.values().begin(), store.values().end(), store2.values().begin());
  matrixd y_plain, y_train;
  plain.forward(graph, training_ctx, x, y_plain);
  CHECK(rel_diff(y, y_plain) < 1e-14);
  layer.forward(graph, training_ctx, x, y_train);
  CHECK(rel_diff(y_train, y_plain) > 1e-3);
  // Another epoch draws other masks.
  sar::layer_context next = training_ctx;
  next.epoch += 1;
  matrixd y_next;
  layer.forward(graph, next, x, y_next);
  CHECK(rel_diff(y_train, y_next) > 1e-3);
}

TEST_CASE("gat: attention dropout drops about `rate` of the coefficients, keyed by global ids") {
  const sar::gat_attention_dropout<double> dropout(0.3, 5, 1, 2);
  const sar::gat_attention_dropout<double> shifted(0.3, 5, 1, 3);
  std::vector<double> s(7), t(7);
  long dropped = 0, total = 0, same = 0;
  for (node_t d = 0; d < 200; ++d)
    for (node_t src = 0; src < 20; ++src) {
      dropout.scales(d, src, 7, s.data());
      shifted.scales(d, src, 7, t.data());
      for (int h = 0; h < 7; ++h) {
        CHECK((s[h] == 0.0 || s[h] == doctest::Approx(1 / 0.7)));
        dropped += s[h] == 0.0;
        same += s[h] == t[h];
        ++total;
      }
    }
  const double rate = static_cast<double>(dropped) / total;  // 28000 draws: sigma ~ 0.003
  CHECK(rate > 0.28);
  CHECK(rate < 0.32);
  CHECK(same < total * 0.7);  // another layer draws independent masks (expected 0.58)
  CHECK_THROWS_AS(sar::gat_attention_dropout<double>(1.0, 1, 1, 1), sar::invalid_argument);
}

TEST_CASE("gat: online softmax over 2 and 3 blocks equals one block (forward and gradients)") {
  const sar::csr g = small_graph(13);
  const matrixd x = random_matrix(16, 5, 21);
  sar::local_schedule local(g);
  // Blocks by contiguous ranges and by residue (non-contiguous halo ids), in several orders.
  std::vector<int> halves(16), thirds(16);
  for (int j = 0; j < 16; ++j) {
    halves[j] = j < 8 ? 0 : 1;
    thirds[j] = j % 3;
  }
  struct split {
    std::string name;
    const std::vector<int>& block_of;
    int blocks;
    std::vector<int> order;
  };
  const split splits[] = {{"2 blocks", halves, 2, {0, 1}},
                          {"2 blocks reversed", halves, 2, {1, 0}},
                          {"3 blocks", thirds, 3, {0, 1, 2}},
                          {"3 blocks shuffled", thirds, 3, {2, 0, 1}}};
  for (const auto& c : configs) {
    for (const auto& s : splits) {
      CAPTURE(c.name);
      CAPTURE(s.name);
      block_schedule blocks(g, s.block_of, s.blocks, s.order);
      sar::gat_layer<double> one(5, 4, c.options), many(5, 4, c.options);
      const matrixd dy = random_matrix(16, one.output_dim(), 22);
      const auto a = run(one, local, training_ctx, x, dy);
      const auto b = run(many, blocks, training_ctx, x, dy);
      check_same(a, b, 1e-12);
    }
  }
  // The gradient checker also passes under the multi-block schedule.
  block_schedule blocks(g, thirds, 3, {1, 2, 0});
  sar::gat_layer<double> layer(5, 3, {.heads = 3, .attention_dropout = 0.3});
  const auto result = sar::check_gradients(layer, blocks, training_ctx, x);
  CHECK_MESSAGE(result.passed, result.summary());
}

TEST_CASE("compressed-row blocks give the results of one block (GAT, GCN, SAGE mean/gcn/pool)") {
  const sar::csr g = small_graph(13);
  const matrixd x = random_matrix(16, 5, 31);
  sar::local_schedule local(g);
  std::vector<int> thirds(16), halves(16);
  for (int j = 0; j < 16; ++j) {
    thirds[j] = j % 3;
    halves[j] = j < 8 ? 0 : 1;
  }
  block_schedule by_thirds(g, thirds, 3, {2, 0, 1}, /*compressed=*/true);
  block_schedule by_halves(g, halves, 2, {1, 0}, /*compressed=*/true);
  // The blocks really are compressed (no block lists every destination).
  CHECK(by_thirds.max_block_rows() < 16);
  CHECK(by_halves.max_block_rows() < 16);
  for (block_schedule* blocks : {&by_thirds, &by_halves}) {
    for (const auto& c : configs) {
      CAPTURE(c.name);
      sar::gat_layer<double> one(5, 4, c.options), many(5, 4, c.options);
      const matrixd dy = random_matrix(16, one.output_dim(), 32);
      check_same(run(one, local, training_ctx, x, dy), run(many, *blocks, training_ctx, x, dy),
                 1e-12);
    }
    for (Eigen::Index out : {3, 7}) {  // W applied before (3 < 5) and after (7 > 5) aggregating
      CAPTURE(out);
      const matrixd dy = random_matrix(16, out, 33);
      {
        sar::gcn_layer<double> one(5, out), many(5, out);
        check_same(run(one, local, training_ctx, x, dy), run(many, *blocks, training_ctx, x, dy),
                   1e-12);
      }
      {
        sar::sage_mean_layer<double> one(5, out), many(5, out);
        check_same(run(one, local, training_ctx, x, dy), run(many, *blocks, training_ctx, x, dy),
                   1e-12);
      }
      {
        sar::sage_gcn_layer<double> one(5, out), many(5, out);
        check_same(run(one, local, training_ctx, x, dy), run(many, *blocks, training_ctx, x, dy),
                   1e-12);
      }
      {
        sar::sage_pool_layer<double> one(5, out, {.pool_dim = 4}), many(5, out, {.pool_dim = 4});
        check_same(run(one, local, training_ctx, x, dy), run(many, *blocks, training_ctx, x, dy),
                   1e-12);
      }
    }
  }
  // A compressed block whose rows do not fit the output is rejected, not written out of range.
  const std::vector<node_t> rows{2, 20};
  sar::csr two;
  two.num_rows = 2;
  two.num_cols = 1;
  two.offsets = {0, 1, 2};
  two.columns = {0, 0};
  sar::graph_block bad;
  bad.edges = &two;
  bad.rows = rows;
  matrixd halo = matrixd::Ones(1, 3), out = matrixd::Zero(16, 3);
  CHECK_THROWS_AS(sar::spmm_add(bad, halo, out), sar::invalid_argument);
  const std::vector<node_t> good_rows{2, 15};
  sar::graph_block good;
  good.edges = &two;
  good.rows = good_rows;
  sar::spmm_add(good, halo, out);
  CHECK(out.row(2).sum() == 3.0);
  CHECK(out.row(15).sum() == 3.0);
  CHECK(out.sum() == 6.0);
}

TEST_CASE("gat: results do not depend on the thread count; float agrees with double") {
  const sar::csr g = random_symmetric_graph(3000, 40000, 99);
  sar::local_schedule graph(g);
  const matrixd x = random_matrix(3000, 16, 4);
  const sar::gat_options options{.heads = 4, .attention_dropout = 0.2};
  sar::gat_layer<double> layer(16, 8, options);
  const matrixd dy = random_matrix(3000, layer.output_dim(), 5);
  const auto many = run(layer, graph, training_ctx, x, dy);
  pass_result one;
  {
    tbb::global_control serial(tbb::global_control::max_allowed_parallelism, 1);
    one = run(layer, graph, training_ctx, x, dy);
  }
  CHECK(many.y == one.y);
  CHECK(many.dx == one.dx);
  CHECK(many.grads == one.grads);

  // float, once: same parameters (initialised from the same seed), looser tolerance.
  sar::gat_layer<float> single(16, 8, options);
  sar::parameter_store<float> store;
  single.declare(store);
  store.allocate();
  sar::parameter_store<double> dstore;
  sar::gat_layer<double> twin(16, 8, options);
  twin.declare(dstore);
  dstore.allocate();
  dstore.initialise(3);
  for (std::size_t k = 0; k < dstore.values().size(); ++k)
    store.values()[k] = static_cast<float>(dstore.values()[k]);
  const sar::matrixf xf = x.cast<float>();
  sar::matrixf yf, dxf = sar::matrixf::Zero(3000, 16);
  matrixd yd, dxd = matrixd::Zero(3000, 16);
  single.forward(graph, training_ctx, xf, yf);
  single.backward(graph, training_ctx, xf, yf, dy.cast<float>().eval(), dxf);
  twin.forward(graph, training_ctx, x, yd);
  twin.backward(graph, training_ctx, x, yd, dy, dxd);
  CHECK(rel_diff(yf.cast<double>(), yd) < 1e-5);
  CHECK(rel_diff(dxf.cast<double>(), dxd) < 1e-4);
}

TEST_CASE("gat: float forward and backward are bitwise the same on 1 and 2 threads") {
  // Large enough that every row-parallel pass and row reduction of the layer is cut in
  // several chunks; float, as in training, where a changed rounding shows at once.
  const sar::csr g = random_symmetric_graph(20000, 100000, 5);
  sar::local_schedule graph(g);
  const sar::matrixf x = random_matrix(20000, 16, 6).cast<float>();
  for (auto merge : {sar::gat_merge::concat, sar::gat_merge::mean}) {
    CAPTURE(static_cast<int>(merge));
    const sar::gat_options options{.heads = 4, .merge = merge, .attention_dropout = 0.2};
    const auto pass = [&](int threads) {
      sar::gat_layer<float> layer(16, 8, options);
      sar::parameter_store<float> store;
      layer.declare(store);
      store.allocate();
      store.initialise(3);
      for (float& b : store.values().last(layer.output_dim())) b = 0.25f;  // a non-zero bias
      const sar::matrixf dy = random_matrix(20000, layer.output_dim(), 7).cast<float>();
      sar::matrixf y, dx = sar::matrixf::Zero(20000, 16);
      tbb::task_arena(threads).execute([&] {
        layer.forward(graph, training_ctx, x, y);
        layer.backward(graph, training_ctx, x, y, dy, dx);
      });
      const std::vector<float> grads(store.grads().begin(), store.grads().end());
      return std::tuple{y, dx, grads};
    };
    const auto one = pass(1);
    CHECK(std::get<2>(one) != std::vector<float>(std::get<2>(one).size(), 0.0f));
    for (int run = 0; run < 3; ++run) {
      const auto two = pass(2);
      CHECK(std::get<0>(two) == std::get<0>(one));
      CHECK(std::get<1>(two) == std::get<1>(one));
      CHECK(std::get<2>(two) == std::get<2>(one));
    }
  }
}

TEST_CASE("gat: keeps only O(nodes) between forward and backward; rejects bad arguments") {
  sar::local_schedule graph(small_graph());
  const matrixd x = random_matrix(16, 5, 1);
  for (auto merge : {sar::gat_merge::concat, sar::gat_merge::mean}) {
    sar::gat_layer<double> layer(5, 4, {.heads = 3, .merge = merge});
    sar::parameter_store<double> store;
    layer.declare(store);
    store.allocate();
    matrixd y;
    layer.forward(graph, training_ctx, x, y);
    // [z | el] + er + log-normaliser + slope_sum + slope_acc (+ per-head out for mean):
    // 12+3 + 3 + 3 + 3 + 12 (+ 12) per node.
    const std::size_t per_node = merge == sar::gat_merge::concat ? 36 : 48;
    CHECK(layer.saved_bytes() == 16 * per_node * sizeof(double));
  }
  CHECK_THROWS_AS(sar::gat_layer<double>(5, 0), sar::invalid_argument);
  CHECK_THROWS_AS(sar::gat_layer<double>(5, 4, {.heads = 0}), sar::invalid_argument);
  CHECK_THROWS_AS(sar::gat_layer<double>(5, 4, {.attention_dropout = 1.0}), sar::invalid_argument);
  sar::gat_layer<double> layer(5, 4);
  matrixd y;
  CHECK_THROWS_AS(layer.forward(graph, training_ctx, x, y), sar::invalid_argument);  // no declare
  sar::parameter_store<double> store;
  layer.declare(store);
  store.allocate();
  CHECK_THROWS_AS(layer.forward(graph, training_ctx, matrixd(16, 4), y), sar::invalid_argument);
  matrixd dx;
  CHECK_THROWS_AS(layer.backward(graph, training_ctx, x, y, matrixd(16, 4), dx),
                  sar::invalid_argument);  // no forward yet
}

TEST_CASE("gat with edge features: equals the unfused reference, passes the gradient checker, "
          "refuses a graph without them") {
  const sar::csr g = small_graph();
  const sar::matrixf ef = random_matrix<float>(g.num_edges(), 3, 41);
  sar::local_schedule graph(g, ef);
  const matrixd x = random_matrix(16, 5, 42);
  for (const auto& c : configs) {
    CAPTURE(c.name);
    sar::gat_options o = c.options;
    o.edge_dim = 3;
    sar::gat_layer<double> fused(5, 4, o);
    sar::detail::gat_reference<double> reference(5, 4, o);
    const matrixd dy = random_matrix(16, fused.output_dim(), 43);
    check_same(run(fused, graph, training_ctx, x, dy), run(reference, graph, training_ctx, x, dy),
               1e-6);
  }
  sar::gat_layer<double> layer(5, 3, {.heads = 3, .edge_dim = 3});
  const auto result = sar::check_gradients(layer, graph, sar::layer_context{}, x);
  CHECK_MESSAGE(result.passed, result.summary());
  CHECK(result.parameters.size() == 5u);  // weight, attention left/right/edge, bias
  // The edge term changes the attention: the same parameters on zero edge features differ.
  sar::local_schedule zero(g, sar::matrixf::Zero(g.num_edges(), 3));
  const matrixd dy = random_matrix(16, layer.output_dim(), 44);
  CHECK(rel_diff(run(layer, graph, training_ctx, x, dy).y,
                 run(layer, zero, training_ctx, x, dy).y) > 1e-3);
  sar::local_schedule bare(g);
  CHECK_THROWS_WITH_AS(sar::check_gradients(layer, bare, sar::layer_context{}, x),
                       doctest::Contains("attention reads 3 features per edge, but the graph has 0"),
                       sar::invalid_argument);
  CHECK_THROWS_AS(sar::gat_layer<double>(5, 3, {.edge_dim = -1}), sar::invalid_argument);
}
