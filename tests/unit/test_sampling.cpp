// Bulk sampling: SpGEMM against a dense product, the darts sampler's counts and inclusion
// frequencies (against s / deg and against successive sampling), bulk = alone, thread-count
// independence, the graph layers on bipartite blocks (gradient check), layer-wise inference
// = full-batch forward, minibatch training, edge features on sampled blocks, and bad options.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include <oneapi/tbb/global_control.h>

#include "sar/graph/builders.hpp"
#include "sar/graph/generators.hpp"
#include "sar/nn/gat.hpp"
#include "sar/nn/gcn.hpp"
#include "sar/nn/sage.hpp"
#include "sar/sampling/darts.hpp"
#include "sar/sampling/minibatch.hpp"
#include "sar/sampling/samplers.hpp"
#include "sar/sampling/spgemm.hpp"
#include "sar/testing/gradient_checker.hpp"
#include "sar/train/minibatch.hpp"
#include "sar/train/model_file.hpp"
#include "sar/train/models.hpp"
#include "test_support.hpp"

using namespace sar;

namespace {

/// A random sparse matrix with some empty rows and columns (rows % 5 == 2, columns % 7 == 4).
sparse_matrix random_sparse(node_t rows, node_t cols, int per_row, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<node_t> pick(0, cols - 1);
  std::uniform_real_distribution<double> value(-1.0, 1.0);
  sparse_matrix m;
  m.pattern.num_rows = rows;
  m.pattern.num_cols = cols;
  for (node_t i = 0; i < rows; ++i) {
    std::set<node_t> picked;
    if (i % 5 != 2)
      for (int k = 0; k < per_row; ++k)
        if (const node_t j = pick(gen); j % 7 != 4) picked.insert(j);
    for (node_t j : picked) {
      m.pattern.columns.push_back(j);
      m.values.push_back(value(gen));
    }
    m.pattern.offsets.push_back(static_cast<edge_t>(m.pattern.columns.size()));
  }
  return m;
}

matrixd dense(sparse_view m) {
  matrixd d = matrixd::Zero(m.rows(), m.cols());
  for (node_t i = 0; i < m.rows(); ++i)
    for (edge_t e = m.pattern.offsets[i]; e < m.pattern.offsets[i + 1]; ++e)
      d(i, m.pattern.columns[e]) += m.value(e);
  return d;
}

void check_product(sparse_view a, sparse_view b) {
  const sparse_matrix c = spgemm(a, b);
  c.validate("test");
  for (node_t i = 0; i < c.rows(); ++i) {
    const auto cols = c.row_columns(i);
    CHECK(std::is_sorted(cols.begin(), cols.end()));
    CHECK(std::adjacent_find(cols.begin(), cols.end()) == cols.end());
  }
  const matrixd want = dense(a) * dense(b);
  CHECK((dense(c) - want).isZero(1e-12));
  // The pattern is the structural product: an entry exactly where some a_ik b_kj exists.
  matrixd structure = (dense(a).array() != 0).cast<double>().matrix() *
                      (dense(b).array() != 0).cast<double>().matrix();
  CHECK(c.nonzeros() == (structure.array() > 0).count());
}

csr planted_graph(node_t n, std::uint64_t seed) {
  planted_partition_options o;
  o.num_nodes = n;
  o.seed = seed;
  return make_planted_partition(o).graph;
}

std::vector<std::vector<node_t>> batches_of(node_t n, int k, node_t size, std::uint64_t seed) {
  std::vector<node_t> all(static_cast<std::size_t>(n));
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), std::mt19937_64(seed));
  std::vector<std::vector<node_t>> out;
  for (int b = 0; b < k; ++b)
    out.emplace_back(all.begin() + b * size, all.begin() + (b + 1) * size);
  return out;
}

void check_same(const minibatch_sample& a, const minibatch_sample& b) {
  CHECK(a.ids == b.ids);
  CHECK(a.level_sizes == b.level_sizes);
  REQUIRE(a.blocks.size() == b.blocks.size());
  for (std::size_t l = 0; l < a.blocks.size(); ++l) {
    CHECK(a.blocks[l].edges == b.blocks[l].edges);
    CHECK(a.blocks[l].ids == b.blocks[l].ids);
    CHECK(a.blocks[l].source_scales == b.blocks[l].source_scales);
    CHECK(a.blocks[l].destination_scales == b.blocks[l].destination_scales);
  }
}

}  // namespace

TEST_CASE("spgemm equals the dense product, with empty rows and columns") {
  SUBCASE("random") {
    check_product(random_sparse(40, 30, 4, 1), random_sparse(30, 50, 6, 2));
    check_product(random_sparse(1, 30, 30, 3), random_sparse(30, 1, 1, 4));
    check_product(random_sparse(0, 5, 1, 5), random_sparse(5, 3, 1, 6));  // no rows at all
  }
  SUBCASE("R-MAT (duplicates merged, self-loops, isolated nodes)") {
    rmat_options o;
    o.scale = 7;
    o.num_edges = 600;
    const csr a = build_csr(make_rmat(o));
    o.seed = 2;
    const csr b = build_csr(make_rmat(o));
    check_product(sparse_view(a), sparse_view(b));
    const sparse_matrix q = selection_matrix(std::vector<node_t>{5, 0, 127, 5}, 128);
    check_product(q, sparse_view(a));  // a row gather
  }
  SUBCASE("one-entry rows of a (copied rows of b) over sorted, unsorted and repeated rows") {
    sparse_matrix b;
    b.pattern.num_rows = 3;
    b.pattern.num_cols = 6;
    b.pattern.offsets = {0, 3, 6, 9};
    b.pattern.columns = {0, 2, 5, 4, 1, 3, 2, 2, 5};  // sorted; unsorted; repeated column 2
    b.values = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    sparse_matrix a = selection_matrix(std::vector<node_t>{0, 1, 2, 1}, 3);
    a.values = {2.0, -1.0, 0.5, 1.0};
    check_product(a, b);
  }
  SUBCASE("shape mismatch") {
    CHECK_THROWS_AS(spgemm(random_sparse(3, 4, 1, 1), random_sparse(5, 3, 1, 1)),
                    invalid_argument);
  }
}

TEST_CASE("darts: every row gets exactly min(s, candidates) distinct picks among its positive weights") {
  sparse_matrix w = random_sparse(200, 60, 20, 9);
  for (auto& v : w.values) v = v < -0.6 ? 0.0 : std::abs(v) + 1e-3;  // some zero weights
  std::vector<node_t> want(200);
  for (node_t r = 0; r < 200; ++r) want[r] = r % 9 == 0 ? -1 : r % 17;
  const sparse_matrix picked = sample_rows(w, want, 3, [](node_t r) {
    return dart_key{.epoch = 1, .minibatch = 2, .node = static_cast<std::uint64_t>(r), .layer = 0};
  });
  for (node_t r = 0; r < 200; ++r) {
    std::map<node_t, double> candidates;
    for (std::size_t e = 0; e < w.row_columns(r).size(); ++e)
      if (w.row_values(r)[e] > 0) candidates[w.row_columns(r)[e]] = w.row_values(r)[e];
    const auto cols = picked.row_columns(r);
    CHECK(static_cast<edge_t>(cols.size()) ==
          picks_for(want[r], static_cast<edge_t>(candidates.size())));
    CHECK(std::set<node_t>(cols.begin(), cols.end()).size() == cols.size());
    for (node_t c : cols) CHECK(candidates.count(c) == 1);
  }
  CHECK_THROWS_AS(sample_rows(w, std::vector<node_t>(3, 1), 0, [](node_t) { return dart_key{}; }),
                  invalid_argument);
}

TEST_CASE("node-wise inclusion frequencies over 20 000 draws are within 4 sigma of s / deg") {
  // One destination with 13 in-neighbours; fanout 5; a draw per epoch.
  edge_list edges;
  edges.num_nodes = 20;
  for (node_t j = 1; j <= 13; ++j) edges.push_back(j, 0);
  const csr graph = build_csr(edges);
  sampler_options o{.kind = sampler_kind::node_wise, .fanouts = {5}, .seed = 11};
  constexpr int draws = 20000;
  std::vector<int> hits(20, 0);
  const std::vector<std::vector<node_t>> batch{{0}};
  bulk_sampler sampler(graph, o);
  for (int t = 0; t < draws; ++t) {
    const auto s = sampler.sample(batch, static_cast<std::uint64_t>(t), 0);
    REQUIRE(s[0].blocks[0].edges.num_edges() == 5);
    for (node_t c : s[0].blocks[0].edges.columns) ++hits[s[0].ids[c]];
  }
  const double p = 5.0 / 13.0, sigma = std::sqrt(p * (1 - p) / draws);
  for (node_t j = 1; j <= 13; ++j) CHECK(std::abs(hits[j] / double(draws) - p) < 4 * sigma);
}

TEST_CASE("weighted darts match successive sampling's inclusion probabilities within 4 sigma") {
  const std::vector<double> weight{1, 2, 3, 0.5, 4, 0.25};
  constexpr int s = 3;
  // Exact inclusion probabilities of successive sampling (draw proportional to weight,
  // remove, repeat), by walking every ordered sequence of s distinct items.
  std::vector<double> inclusion(weight.size(), 0.0);
  std::function<void(std::vector<int>&, double, double)> walk = [&](std::vector<int>& seq,
                                                                    double p, double left) {
    if (static_cast<int>(seq.size()) == s) {
      for (int i : seq) inclusion[i] += p;
      return;
    }
    for (int i = 0; i < static_cast<int>(weight.size()); ++i) {
      if (std::find(seq.begin(), seq.end(), i) != seq.end()) continue;
      seq.push_back(i);
      walk(seq, p * weight[i] / left, left - weight[i]);
      seq.pop_back();
    }
  };
  std::vector<int> seq;
  walk(seq, 1.0, std::accumulate(weight.begin(), weight.end(), 0.0));

  constexpr int draws = 20000;
  sparse_matrix w;
  w.pattern.num_rows = draws;  // one row per draw, each keyed by its own minibatch number
  w.pattern.num_cols = static_cast<node_t>(weight.size());
  for (int t = 0; t < draws; ++t) {
    for (std::size_t j = 0; j < weight.size(); ++j) {
      w.pattern.columns.push_back(static_cast<node_t>(j));
      w.values.push_back(weight[j]);
    }
    w.pattern.offsets.push_back(static_cast<edge_t>(w.pattern.columns.size()));
  }
  const sparse_matrix picked = sample_rows(w, std::vector<node_t>(draws, s), 5, [](node_t r) {
    return dart_key{.epoch = 0, .minibatch = static_cast<std::uint64_t>(r), .node = ~0ull};
  });
  std::vector<int> hits(weight.size(), 0);
  for (node_t c : picked.pattern.columns) ++hits[c];
  for (std::size_t j = 0; j < weight.size(); ++j) {
    const double p = inclusion[j], sigma = std::sqrt(p * (1 - p) / draws);
    CHECK_MESSAGE(std::abs(hits[j] / double(draws) - p) < 4 * sigma,
                  "item " << j << ": " << hits[j] / double(draws) << " vs " << p);
  }
}

TEST_CASE("LADIES inclusion frequencies match successive sampling on the importances") {
  // A star: destination 0 with in-neighbours 1..6 of different degrees; the importance of
  // source j is 1 / (in_0 out_j), so sampling follows 1 / out_j.
  edge_list edges;
  edges.num_nodes = 60;
  for (node_t j = 1; j <= 6; ++j) {
    edges.push_back(j, 0);
    for (node_t extra = 0; extra < j; ++extra) edges.push_back(j, 10 + 6 * j + extra);  // out-degree 1 + j
  }
  const csr graph = build_csr(edges);
  const auto out = out_degrees(graph);
  sampler_options o{.kind = sampler_kind::layer_wise, .fanouts = {2}, .seed = 4};
  constexpr int draws = 20000;
  std::vector<int> hits(60, 0);
  const std::vector<std::vector<node_t>> batch{{0}};
  bulk_sampler sampler(graph, o);
  for (int t = 0; t < draws; ++t) {
    const auto s = sampler.sample(batch, static_cast<std::uint64_t>(t), 0);
    const auto& b = s[0].blocks[0];
    REQUIRE(b.edges.num_edges() == 2);
    for (node_t c : b.edges.columns) ++hits[s[0].ids[c]];
    // Row-normalised: the destination's weights sum to 1.
    double sum = 0;
    for (node_t c : b.edges.columns) sum += b.source_scales[c];
    CHECK(sum * b.destination_scales[0] == doctest::Approx(1.0));
  }
  // Exact successive-sampling inclusion for 2 of 6 with weights 1 / out_j.
  std::vector<double> w(7, 0.0);
  double total = 0;
  for (node_t j = 1; j <= 6; ++j) total += w[j] = 1.0 / static_cast<double>(out[j]);
  for (node_t j = 1; j <= 6; ++j) {
    double p = w[j] / total;  // first
    for (node_t i = 1; i <= 6; ++i)
      if (i != j) p += w[i] / total * w[j] / (total - w[i]);  // second
    const double sigma = std::sqrt(p * (1 - p) / draws);
    CHECK_MESSAGE(std::abs(hits[j] / double(draws) - p) < 4 * sigma,
                  "source " << j << ": " << hits[j] / double(draws) << " vs " << p);
  }
}

TEST_CASE("bulk k = 16 equals each minibatch sampled alone, on 1 or 2 threads, with arrays or hash tables") {
  const csr graph = with_self_loops(planted_graph(3000, 3), self_loop_policy::add);
  const auto batches = batches_of(3000, 16, 40, 7);
  for (const sampler_kind kind : {sampler_kind::node_wise, sampler_kind::layer_wise}) {
    CAPTURE(static_cast<int>(kind));
    sampler_options o{.kind = kind, .seed = 9};
    o.fanouts = kind == sampler_kind::node_wise ? std::vector<node_t>{5, -1, 3}
                                                : std::vector<node_t>{300, 100, 60};
    bulk_sampler sampler(graph, o);
    const auto bulk = sampler.sample(batches, 2, 100);
    REQUIRE(bulk.size() == 16);
    for (std::size_t b = 0; b < 16; ++b) {
      const auto alone = sampler.sample(std::span(batches).subspan(b, 1), 2, 100 + b);
      check_same(bulk[b], alone[0]);
      // Levels nest, seeds first; each block's destinations are the first of its sources.
      const auto& s = bulk[b];
      CHECK(std::equal(batches[b].begin(), batches[b].end(), s.ids.begin()));
      for (std::size_t l = 0; l < s.blocks.size(); ++l) {
        CHECK(s.level_sizes[l] >= s.level_sizes[l + 1]);
        CHECK(s.blocks[l].edges.num_rows == s.level_sizes[l + 1]);
        CHECK(s.blocks[l].edges.num_cols == s.level_sizes[l]);
        s.blocks[l].edges.validate("test");
      }
      CHECK(std::set<node_t>(s.ids.begin(), s.ids.end()).size() == s.ids.size());
    }
    // Ids marked in hash tables (as on graphs too large for an array per thread): the same.
    const auto hashed = bulk_sampler(graph, o, /*dense_limit=*/0).sample(batches, 2, 100);
    for (std::size_t b = 0; b < 16; ++b) check_same(bulk[b], hashed[b]);
    tbb::global_control one(tbb::global_control::max_allowed_parallelism, 1);
    const auto serial = sampler.sample(batches, 2, 100);
    for (std::size_t b = 0; b < 16; ++b) check_same(bulk[b], serial[b]);
  }
  // A fanout of -1 takes every in-neighbour: the block is the graph's rows.
  sampler_options all{.kind = sampler_kind::node_wise, .fanouts = {-1}, .seed = 1};
  const auto s = bulk_sampler(graph, all).sample(std::span(batches).subspan(0, 1), 0, 0);
  for (node_t r = 0; r < s[0].blocks[0].edges.num_rows; ++r)
    CHECK(s[0].blocks[0].edges.degree(r) == graph.degree(s[0].ids[r]));
}

TEST_CASE("graph layers pass the gradient check on bipartite blocks") {
  const csr graph = with_self_loops(planted_graph(400, 5), self_loop_policy::add);
  const auto batches = batches_of(400, 1, 12, 3);
  sampler_options o{.kind = sampler_kind::node_wise, .fanouts = {4}, .seed = 2};
  auto sample = bulk_sampler(graph, o).sample(batches, 0, 0)[0];
  sampler_options ladies{.kind = sampler_kind::layer_wise, .fanouts = {20}, .seed = 2};
  auto ladies_sample = bulk_sampler(graph, ladies).sample(batches, 0, 0)[0];
  REQUIRE(sample.blocks[0].edges.num_cols > sample.blocks[0].edges.num_rows);
  local_schedule block(std::move(sample.blocks[0]));
  local_schedule ladies_block(std::move(ladies_sample.blocks[0]));
  const layer_context ctx{.training = true, .seed = 1};
  std::uint64_t seed = 0;
  const auto check = [&](auto layer, local_schedule& g) {
    parameter_store<double> store;
    layer.declare(store);
    store.allocate();
    store.initialise(3);
    const matrixd x = testing_support::random_matrix(g.num_sources(), layer.input_dim(), ++seed);
    const auto r = check_gradients(layer, store, g, ctx, x);
    CHECK_MESSAGE(r.passed, r.summary());
  };
  check(gcn_layer<double>(5, 3), block);         // weight first
  check(gcn_layer<double>(3, 5), block);         // aggregate first
  check(gcn_layer<double>(5, 3), ladies_block);  // LADIES scales
  check(gcn_layer<double>(3, 5), ladies_block);
  check(sage_layer<double, mean_aggregator>(5, 3), block);
  check(sage_layer<double, mean_aggregator>(3, 5), block);
  check(sage_layer<double, gcn_aggregator>(5, 3), block);
  check(sage_layer<double, gcn_aggregator>(3, 5), block);
  check(sage_layer<double, pool_aggregator>(4, 3, {.pool_dim = 6}), block);
  check(gat_layer<double>(4, 3, {.heads = 2}), block);
  check(gat_layer<double>(4, 3, {.heads = 2, .merge = gat_merge::mean}), block);
}

TEST_CASE("layer-wise inference equals the full-batch forward") {
  const auto data = make_planted_partition({.num_nodes = 1500, .seed = 4});
  for (const std::string kind : {"gcn", "sage", "gat"}) {
    CAPTURE(kind);
    model_config c = paper_defaults(kind);
    c.layers = 3;
    c.batch_norm = kind == "sage";
    const csr graph = with_self_loops(data.graph, self_loop_policy::add);
    auto model = make_model<float, local_schedule>(c, data.features.cols(), data.num_classes, 5);
    local_schedule whole(csr{graph});
    const layer_context ctx{.training = false};
    const matrixf full = model.forward(whole, ctx, data.features);
    const matrixf layered = infer_layer_wise(model, graph, data.features, ctx, 333);
    CHECK((full - layered).cwiseAbs().maxCoeff() <= 1e-5 * (1 + full.cwiseAbs().maxCoeff()));
  }
}

TEST_CASE("minibatch training on sparse features: the losses and scores of the dense ones") {
  // Bag-of-words features, kept sparse by the generator and as dense rows.
  planted_partition_options o{.num_nodes = 3000, .feature_dim = 300, .seed = 6};
  o.feature_density = 0.02;
  const auto dense = make_planted_partition(o);
  o.sparse_features = true;
  const auto sparse = make_planted_partition(o);
  REQUIRE(sparse.sparse());
  for (const std::string kind : {"gcn", "sage", "gat"}) {
    CAPTURE(kind);
    const model_config c = paper_defaults(kind);
    const csr graph = with_self_loops(dense.graph, self_loop_policy::add);
    train_options t{.epochs = 2, .seed = 3, .log_progress = false};
    minibatch_options mb{.batch_size = 64, .sampler = {.fanouts = {5, 5}, .seed = 3}, .bulk = 2};
    const auto run = [&](const node_data<double>& nodes) {
      auto model = make_model<double, local_schedule>(c, 300, dense.num_classes, 1);
      auto optimiser = make_optimiser(c, model);
      return train_minibatch(model, graph, optimiser, nodes, t, mb);
    };
    const matrixd x = dense.features.cast<double>();
    const sparse_rows<double> xs = cast_values<double>(sparse.sparse_features);
    const auto a = run({x, dense.labels, dense.split});
    const matrixd none(3000, 0);  // the sparse rows are the features
    const auto b = run({.features = none, .labels = dense.labels,
                        .split = dense.split, .sparse_features = &xs});
    REQUIRE(a.history.size() == b.history.size());
    for (std::size_t e = 0; e < a.history.size(); ++e) {
      CHECK(b.history[e].train_loss == doctest::Approx(a.history[e].train_loss).epsilon(1e-12));
      CHECK(b.history[e].valid_loss == doctest::Approx(a.history[e].valid_loss).epsilon(1e-12));
    }
    CHECK(b.test_score == a.test_score);
  }
}

TEST_CASE("minibatch training on features stored as bf16: bitwise the run on the decoded "
          "features, near the fp32 run") {
  const auto data = make_planted_partition({.num_nodes = 2000, .feature_dim = 16, .seed = 4});
  const bf16_rows stored(data.features);
  const matrixf decoded = stored.decoded<float>();
  const csr graph = with_self_loops(data.graph, self_loop_policy::add);
  const model_config c = paper_defaults("sage");
  const train_options t{.epochs = 3, .seed = 3, .log_progress = false};
  const minibatch_options mb{.batch_size = 64, .sampler = {.fanouts = {5, 5}, .seed = 3},
                             .bulk = 2, .inference_rows = 300};
  const auto run = [&](const node_data<float>& nodes) {
    auto model = make_model<float, local_schedule>(c, 16, data.num_classes, 1);
    auto optimiser = make_optimiser(c, model);
    return train_minibatch(model, graph, optimiser, nodes, t, mb);
  };
  const matrixf empty;
  const auto on_bf16 = run({.features = empty, .labels = data.labels, .split = data.split,
                            .bf16_features = &stored});
  const auto on_decoded = run({decoded, data.labels, data.split});
  const auto on_fp32 = run({data.features, data.labels, data.split});
  REQUIRE(on_bf16.history.size() == 3);
  bool differs = false;
  for (std::size_t e = 0; e < on_bf16.history.size(); ++e) {
    CHECK(on_bf16.history[e].train_loss == on_decoded.history[e].train_loss);
    CHECK(on_bf16.history[e].valid_score == on_decoded.history[e].valid_score);
    CHECK(on_bf16.history[e].train_loss ==
          doctest::Approx(on_fp32.history[e].train_loss).epsilon(1e-2));
    differs |= on_bf16.history[e].train_loss != on_fp32.history[e].train_loss;
  }
  CHECK(differs);
  CHECK(on_bf16.test_score == on_decoded.test_score);
}

TEST_CASE("minibatch training learns the planted graph; bad options are refused") {
  const auto data = make_planted_partition({.num_nodes = 3000, .seed = 6});
  model_config c = paper_defaults("sage");
  auto model = make_model<float, local_schedule>(c, data.features.cols(), data.num_classes, 1);
  auto optimiser = make_optimiser(c, model);
  const node_data<float> nodes{data.features, data.labels, data.split};
  train_options t{.epochs = 4, .seed = 3, .log_progress = false};
  minibatch_options mb{.batch_size = 32, .sampler = {.fanouts = {10, 5}, .seed = 3}, .bulk = 4};
  std::vector<std::size_t> pooled;  // the model's idle buffers after each epoch
  const auto result = train_minibatch(model, data.graph, optimiser, nodes, t, mb,
                                      [&](const epoch_stats&) {
                                        pooled.push_back(model.pooled_buffers());
                                      });
  CHECK(result.history.size() == 4);
  CHECK(result.test_score > 0.8);
  CHECK(result.history.back().train_loss < result.history.front().train_loss);
  // Minibatches differ in size: the buffer pool must not keep one more buffer per step (it
  // kept every step's gathered features until session 17: 1.2 GB per epoch at 1M nodes).
  CAPTURE(pooled.front());
  CAPTURE(pooled.back());
  CHECK(pooled.back() <= model.num_layers() + 2);
  CHECK(pooled.back() <= pooled.front());

  const auto refused = [&](minibatch_options bad) {
    CHECK_THROWS_AS(train_minibatch(model, data.graph, optimiser, nodes, t, bad),
                    invalid_argument);
  };
  minibatch_options bad = mb;
  bad.sampler.fanouts = {};
  refused(bad);
  bad.sampler.fanouts = {10, 0};
  refused(bad);
  bad.sampler.fanouts = {10, -2};
  refused(bad);
  bad.sampler.fanouts = {10, 5, 5};  // three fanouts for two graph layers
  refused(bad);
  bad = mb;
  bad.batch_size = 0;
  refused(bad);
  bad.batch_size = data.count(node_split::train) + 1;
  refused(bad);
  bad = mb;
  bad.bulk = 0;
  refused(bad);
  bad = mb;
  bad.sampler.kind = sampler_kind::layer_wise;
  bad.sampler.fanouts = {-1, 5};
  refused(bad);
}

TEST_CASE("sampled blocks carry each sampled edge's id: the graph entry from its source into its "
          "destination, the same in a bulk as alone") {
  auto data = make_planted_partition({.num_nodes = 2000, .edge_feature_dim = 3, .seed = 8});
  apply_self_loops(data.graph, data.edge_features, self_loop_policy::add, 0, 0.0f);
  const sampling_graph graph_with_table(data.graph, data.edge_features);
  const auto batches = batches_of(2000, 6, 30, 2);
  for (const sampler_kind kind : {sampler_kind::node_wise, sampler_kind::layer_wise}) {
    CAPTURE(static_cast<int>(kind));
    sampler_options o{.kind = kind, .seed = 4};
    o.fanouts = kind == sampler_kind::node_wise ? std::vector<node_t>{4, -1}
                                                : std::vector<node_t>{200, 60};
    bulk_sampler sampler(data.graph.num_rows, o);
    sampling_graph g = graph_with_table;
    const auto bulk = sampler.sample(g, batches, batches, 1, 0);
    for (std::size_t b = 0; b < batches.size(); ++b) {
      const auto alone = sampler.sample(g, std::span(batches).subspan(b, 1),
                                        std::span(batches).subspan(b, 1), 1, b);
      check_same(bulk[b], alone[0]);
      for (std::size_t l = 0; l < bulk[b].blocks.size(); ++l) {
        const sampled_block& block = bulk[b].blocks[l];
        CHECK(block.edge_ids == alone[0].blocks[l].edge_ids);
        REQUIRE(block.edge_ids.size() == block.edges.columns.size());
        for (node_t r = 0; r < block.edges.num_rows; ++r)
          for (edge_t e = block.edges.offsets[r]; e < block.edges.offsets[r + 1]; ++e) {
            const edge_t id = block.edge_ids[e];
            const node_t destination = block.ids[r], source = block.ids[block.edges.columns[e]];
            REQUIRE(id >= data.graph.offsets[destination]);
            REQUIRE(id < data.graph.offsets[destination + 1]);
            CHECK(data.graph.columns[id] == source);
          }
      }
    }
  }
  // Without an edge table a sampler gives no ids; a table needs one row per entry.
  sampling_graph plain(data.graph);
  CHECK(bulk_sampler(data.graph.num_rows, {.fanouts = {3}, .seed = 1})
            .sample(plain, std::span(batches).subspan(0, 1), std::span(batches).subspan(0, 1), 0, 0)[0]
            .blocks[0].edge_ids.empty());
  const matrixf short_table = data.edge_features.topRows(10);
  CHECK_THROWS_AS(sampling_graph(data.graph, short_table), invalid_argument);
  // A pair joined twice (two relations, or a multigraph's parallel edges) is two edges, each
  // with its own id.
  csr repeated = data.graph;
  const node_t v = 5, u = repeated.columns[repeated.offsets[v]];
  repeated.columns[repeated.offsets[v] + 1] = u;  // rows stay sorted
  sampling_graph twice(repeated, data.edge_features);
  const std::vector<std::vector<node_t>> only_v{{v}};
  const auto s = bulk_sampler(repeated.num_rows, {.fanouts = {-1}, .seed = 1})
                     .sample(twice, only_v, only_v, 0, 0)[0];
  std::vector<edge_t> from_u;
  for (edge_t e = 0; e < s.blocks[0].edges.num_edges(); ++e)
    if (s.ids[s.blocks[0].edges.columns[e]] == u) from_u.push_back(s.blocks[0].edge_ids[e]);
  CHECK(from_u == std::vector<edge_t>{repeated.offsets[v], repeated.offsets[v] + 1});
}

TEST_CASE("minibatches over edge features: with every neighbour and one minibatch of all "
          "training nodes, mpnn and GAT with edge attention train as full batch does") {
  auto data = make_planted_partition({.num_nodes = 600, .edge_feature_dim = 4, .edge_noise = 0.3,
                                      .seed = 11});
  for (const std::string kind : {"mpnn", "gat"}) {
    CAPTURE(kind);
    model_config c = paper_defaults(kind);
    c.layers = 2;
    c.hidden = 8;
    c.heads = 2;
    c.dropout = c.input_dropout = c.attention_dropout = 0;  // minibatch masks key by step
    c.edge_state = false;
    c.edge_attention = kind == "gat";
    c.edge_dim = data.edge_features.cols();
    csr graph = data.graph;
    matrixf edge_features = data.edge_features;
    prepare_model_graph(c, graph, edge_features);
    const node_data<double> nodes{data.features.cast<double>(), data.labels, data.split};
    train_options t{.epochs = 3, .seed = 3, .log_progress = false};

    auto full_model = make_model<double, local_schedule>(c, data.features.cols(), data.num_classes, 2);
    auto full_optimiser = make_optimiser(c, full_model);
    local_schedule whole(csr{graph}, matrixf{edge_features});
    const auto full = train_full_batch(full_model, whole, full_optimiser, nodes, t);

    auto model = make_model<double, local_schedule>(c, data.features.cols(), data.num_classes, 2);
    auto optimiser = make_optimiser(c, model);
    sampling_graph sampled(graph, edge_features);
    minibatch_options mb{.batch_size = data.count(node_split::train),
                         .sampler = {.fanouts = {-1, -1}, .seed = 3}, .inference_rows = 97};
    const auto minibatch = train_minibatch(model, sampled, optimiser, nodes, t, mb);
    REQUIRE(minibatch.history.size() == full.history.size());
    for (std::size_t e = 0; e < full.history.size(); ++e) {
      CHECK(minibatch.history[e].train_loss == doctest::Approx(full.history[e].train_loss).epsilon(1e-9));
      CHECK(minibatch.history[e].valid_score == doctest::Approx(full.history[e].valid_score).epsilon(1e-9));
    }
    CHECK(minibatch.test_score == doctest::Approx(full.test_score).epsilon(1e-9));
    // Layer-wise inference reads each block's rows of the table: the full-batch forward.
    const layer_context ctx{.training = false};
    const matrixd y_full = full_model.forward(whole, ctx, nodes.features);
    const matrixd y_layered = infer_layer_wise(full_model, sampled, nodes.features, ctx, 53);
    CHECK((y_full - y_layered).cwiseAbs().maxCoeff() <= 1e-12 * (1 + y_full.cwiseAbs().maxCoeff()));
  }
}
