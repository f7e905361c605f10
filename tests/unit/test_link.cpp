// Link prediction: metrics against brute force, decoders and loss against central differences,
// negatives, edge splits without leaks, and full-batch training on one process.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <cmath>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "sar/comm/serial.hpp"
#include "sar/core/type_list.hpp"
#include "sar/graph/builders.hpp"
#include "sar/graph/edge_split.hpp"
#include "sar/graph/generators.hpp"
#include "sar/graph/io/link_split.hpp"
#include "sar/graph/io/npy.hpp"
#include "sar/nn/link_decoders.hpp"
#include "sar/nn/link_loss.hpp"
#include "sar/nn/link_metrics.hpp"
#include "sar/sampling/negatives.hpp"
#include "sar/schedule/local_schedule.hpp"
#include "sar/sampling/samplers.hpp"
#include "sar/train/link_minibatch.hpp"
#include "sar/train/link_prediction.hpp"
#include "sar/train/model_file.hpp"
#include "sar/train/models.hpp"
#include "test_support.hpp"

using namespace sar;

namespace {

/// Scores with many ties: integers 0..9 scaled.
std::vector<double> tied_scores(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::vector<double> s(n);
  for (auto& x : s) x = static_cast<double>(gen() % 10) * 0.25;
  return s;
}

/// A planted graph whose links a model can learn (classes of 0.9 homophily).
graph_dataset planted_links() {
  return make_planted_partition({.num_nodes = 600, .num_classes = 4, .average_degree = 8,
                                 .homophily = 0.9, .feature_dim = 16});
}

/// Its 85/5/10 split, with 20 negatives per held-out source.
link_split split_of(graph_dataset& data) {
  return split_edges(data, {.valid = 0.05, .test = 0.10, .per_source_negatives = 20, .seed = 2});
}

}  // namespace

TEST_CASE("link metrics equal brute force on scores with ties (OGB's rules)") {
  serial_communicator one;
  for (const std::uint64_t seed : {1u, 2u, 3u}) {
    const auto positive = tied_scores(37, seed), negative = tied_scores(61, seed + 10);
    const int per = 7;
    const auto own = tied_scores(positive.size() * per, seed + 20);
    const int ks[] = {1, 5, 20, 100};
    const link_report r =
        link_metrics(one, link_scores{positive, negative, own, per}, std::span<const int>(ks));
    // AUC: every (positive, negative) pair, a tie half.
    double wins = 0;
    for (const double p : positive)
      for (const double n : negative) wins += p > n ? 1 : p == n ? 0.5 : 0;
    CHECK(r.auc == doctest::Approx(wins / (positive.size() * negative.size())).epsilon(1e-12));
    // Hits@K: above the K-th highest negative; 1 with fewer than K negatives.
    std::vector<double> sorted = negative;
    std::sort(sorted.rbegin(), sorted.rend());
    REQUIRE(r.hits.size() == 4);
    for (std::size_t i = 0; i < 4; ++i) {
      const int k = ks[i];
      double expected = 1;
      if (k <= static_cast<int>(sorted.size())) {
        expected = 0;
        for (const double p : positive) expected += p > sorted[static_cast<std::size_t>(k - 1)];
        expected /= static_cast<double>(positive.size());
      }
      CHECK(r.hits[i].first == k);
      CHECK(r.hits[i].second == doctest::Approx(expected).epsilon(1e-12));
    }
    // MRR: rank = 1 + #above + #equal / 2.
    double mrr = 0, hits1 = 0, hits10 = 0;
    for (std::size_t i = 0; i < positive.size(); ++i) {
      double above = 0, equal = 0;
      for (int j = 0; j < per; ++j) {
        above += own[i * per + static_cast<std::size_t>(j)] > positive[i];
        equal += own[i * per + static_cast<std::size_t>(j)] == positive[i];
      }
      const double rank = 1 + above + equal / 2;
      mrr += 1 / rank;
      hits1 += rank <= 1;
      hits10 += rank <= 10;
    }
    const auto n = static_cast<double>(positive.size());
    CHECK(r.mrr == doctest::Approx(mrr / n).epsilon(1e-12));
    CHECK(r.mrr_hits[0] == doctest::Approx(hits1 / n).epsilon(1e-12));
    CHECK(r.mrr_hits[2] == doctest::Approx(hits10 / n).epsilon(1e-12));
  }
  // Named figures are the metrics-JSON keys; absent data leaves a figure out.
  const std::vector<double> p{1.0}, n{0.0};
  const int ks[] = {50};
  const auto named = link_metrics(one, link_scores{p, n, {}, 0}, std::span<const int>(ks)).named();
  REQUIRE(named.size() == 2);
  CHECK(named[0].first == "auc");
  CHECK(named[1].first == "hits@50");
  CHECK(named[1].second == 1.0);  // one negative, fewer than 50
  const std::vector<double> nan{std::nan("")};
  CHECK_THROWS_AS(link_metrics(one, link_scores{nan, n, {}, 0}), numeric_error);
  CHECK_THROWS_AS(link_metrics(one, link_scores{p, n, n, 2}), invalid_argument);
}

TEST_CASE("link decoders: gradients by central differences, symmetry, the registry") {
  const Eigen::Index n = 9, d = 5;
  const matrix<double> h = testing_support::random_matrix(n, d, 3);
  const std::vector<node_t> src{0, 1, 2, 3, 8, 4, 4}, dst{1, 2, 3, 3, 0, 7, 6};
  const std::vector<std::int32_t> rel{0, 1, 2, 0, 1, 2, 1};
  const row_pairs pairs{src, dst, rel}, swapped{dst, src, rel};
  std::vector<double> r(src.size());
  for (std::size_t i = 0; i < r.size(); ++i) r[i] = 0.3 + 0.1 * static_cast<double>(i);
  std::vector<std::string> names;
  for_each_type(link_decoders<double>{}, [&]<class D>() {
    static_assert(link_decoder<D>);
    names.emplace_back(D::name);
    CAPTURE(std::string(D::name));
    D decoder(decoder_shape{d, 3});
    parameter_store<double> store;
    decoder.declare(store);
    store.allocate();
    store.initialise(5);
    // Perturb the parameters so distmult's diagonals are not all ones.
    for (auto& v : store.values()) v += 0.05;
    const auto loss = [&](const matrix<double>& x) {
      std::vector<double> s(src.size());
      decoder.score(x, pairs, s);
      double l = 0;
      for (std::size_t i = 0; i < s.size(); ++i) l += r[i] * s[i];
      return l;
    };
    std::vector<double> a(src.size()), b(src.size());
    decoder.score(h, pairs, a);
    decoder.score(h, swapped, b);
    for (std::size_t i = 0; i < a.size(); ++i) CHECK(a[i] == doctest::Approx(b[i]));
    // backward ADDS into dh and ASSIGNS the parameter gradients.
    matrix<double> dh = matrix<double>::Constant(n, d, 0.5);
    for (auto& g : store.grads()) g = 1234.5;
    decoder.backward(h, pairs, r, dh);
    const double step = 1e-6;
    for (Eigen::Index i = 0; i < n; ++i)
      for (Eigen::Index j = 0; j < d; ++j) {
        matrix<double> up = h, down = h;
        up(i, j) += step;
        down(i, j) -= step;
        CHECK(dh(i, j) - 0.5 ==
              doctest::Approx((loss(up) - loss(down)) / (2 * step)).epsilon(1e-6));
      }
    const std::vector<double> grads(store.grads().begin(), store.grads().end());
    for (std::size_t p = 0; p < store.size(); ++p) {
      const auto offset = static_cast<std::size_t>(store.offset(p));
      for (Eigen::Index k = 0; k < store.shape(p).rows * store.shape(p).cols; ++k) {
        const std::size_t at = offset + static_cast<std::size_t>(k);
        const double keep = store.values()[at];
        store.values()[at] = keep + step;
        const double up = loss(h);
        store.values()[at] = keep - step;
        const double down = loss(h);
        store.values()[at] = keep;
        CHECK(grads[at] == doctest::Approx((up - down) / (2 * step)).epsilon(1e-6));
      }
    }
    // Pairs outside the embeddings are refused, naming the pair.
    const std::vector<node_t> far{n};
    std::vector<double> one(1);
    CHECK_THROWS_WITH_AS(decoder.score(h, row_pairs{far, far, {}}, one),
                         doctest::Contains("pair 0"), invalid_argument);
  });
  CHECK(names == std::vector<std::string>{"dot", "mlp", "distmult"});
}

TEST_CASE("link_loss: binary cross-entropy with its gradient") {
  const std::vector<double> pos{2.0, -1.0, 0.0}, neg{1.5, -3.0, 40.0, -40.0};
  std::vector<double> dpos(pos.size()), dneg(neg.size());
  const double loss = link_loss<double>(pos, neg, 7.0, dpos, dneg);
  double expected = 0;
  for (const double s : pos) expected += std::log(1 + std::exp(-s));
  for (const double s : neg) expected += std::log(1 + std::exp(s));
  CHECK(loss == doctest::Approx(expected / 7.0).epsilon(1e-12));
  const double step = 1e-6;
  for (std::size_t i = 0; i < pos.size(); ++i) {
    auto up = pos, down = pos;
    up[i] += step;
    down[i] -= step;
    std::vector<double> a(pos.size()), b(neg.size());
    const double numeric =
        (link_loss<double>(up, neg, 7.0, a, b) - link_loss<double>(down, neg, 7.0, a, b)) /
        (2 * step);
    CHECK(dpos[i] == doctest::Approx(numeric).epsilon(1e-6));
  }
  CHECK(dneg[2] == doctest::Approx(1.0 / 7.0));  // no overflow at large scores
  CHECK(dneg[3] == doctest::Approx(0.0));
  CHECK_THROWS_AS(link_loss<double>(pos, neg, 0.0, dpos, dneg), invalid_argument);
}

TEST_CASE("uniform_negatives: keyed by (seed, epoch, edge id), in range, refused when impossible") {
  const std::vector<edge_t> ids{0, 1, 2, 7}, later{7};
  const auto a = uniform_negatives(3, 0, ids, 5, 100);
  REQUIRE(a.size() == 20);
  for (const node_t v : a) CHECK((v >= 0 && v < 100));
  // Edge 7 draws the same wherever it sits in the list.
  const auto b = uniform_negatives(3, 0, later, 5, 100);
  CHECK(std::equal(b.begin(), b.end(), a.begin() + 15));
  CHECK(uniform_negatives(3, 1, ids, 5, 100) != a);
  CHECK(uniform_negatives(4, 0, ids, 5, 100) != a);
  CHECK_THROWS_WITH_AS(uniform_negatives(3, 0, ids, 101, 100), doctest::Contains("101"),
                       invalid_argument);
}

TEST_CASE("degree^0.75 negatives: frequencies follow the weights, zero weight never drawn") {
  const std::vector<node_t> degrees{0, 1, 16, 81, 4};  // weights 0, 1, 8, 27, 2.83
  const negative_distribution from(degree_weights(degrees));
  CHECK_FALSE(from.uniform());
  std::vector<edge_t> ids(20000);
  std::iota(ids.begin(), ids.end(), edge_t{0});
  const auto drawn = draw_negatives(5, 0, ids, 2, from);
  std::vector<double> count(5, 0.0);
  for (const node_t v : drawn) count[static_cast<std::size_t>(v)] += 1;
  const double total = 1 + 8 + 27 + std::pow(4.0, 0.75);
  CHECK(count[0] == 0);
  for (std::size_t v = 1; v < 5; ++v) {
    const double expected = std::pow(static_cast<double>(degrees[v]), 0.75) / total;
    CHECK(count[v] / static_cast<double>(drawn.size()) == doctest::Approx(expected).epsilon(0.05));
  }
  // Keyed like the uniform draws: an edge draws the same wherever it is listed.
  const std::vector<edge_t> one{777};
  const auto alone = draw_negatives(5, 0, one, 2, from);
  CHECK(std::equal(alone.begin(), alone.end(), drawn.begin() + 2 * 777));
  CHECK_THROWS_WITH_AS(negative_distribution(std::vector<double>{0.0, 0.0}),
                       doctest::Contains("no node"), invalid_argument);
  CHECK_THROWS_WITH_AS(negative_distribution(std::vector<double>{1.0, -1.0}),
                       doctest::Contains("node 1"), invalid_argument);
}

TEST_CASE("split_edges: held-out edges leave the graph both ways, negatives are no edges") {
  graph_dataset data = make_planted_partition({.num_nodes = 400, .num_classes = 4,
                                               .feature_dim = 8, .edge_feature_dim = 3});
  const csr original = data.graph;
  const edge_lookup whole(original);
  const link_split split = split_edges(
      data, {.valid = 0.05, .test = 0.10, .negatives = 300, .per_source_negatives = 4, .seed = 9});
  const std::size_t edges = split.train.size() + split.valid.size() + split.test.size();
  CHECK(edges * 2 == static_cast<std::size_t>(original.num_edges()));  // no self-loops here
  CHECK(split.test.size() == static_cast<std::size_t>(std::llround(0.10 * edges)));
  CHECK(split.valid.size() == static_cast<std::size_t>(std::llround(0.05 * edges)));
  CHECK(data.graph.num_edges() == static_cast<edge_t>(2 * split.train.size()));
  CHECK(is_symmetric(data.graph));
  CHECK(data.edge_features.rows() == data.graph.num_edges());
  // No leak: the checks pass, and every held-out pair is an edge of the original.
  const edge_lookup remaining(data.graph);
  CHECK_NOTHROW(check_held_out(remaining, split.valid, "valid_edge.npy"));
  CHECK_NOTHROW(check_held_out(remaining, split.test, "test_edge.npy"));
  for (std::size_t i = 0; i < split.test.size(); ++i)
    CHECK(whole.joined(split.test.source[i], split.test.destination[i]));
  CHECK(split.valid_negatives.size() == 300);
  CHECK_NOTHROW(check_negatives(whole, split.valid_negatives, "valid_edge_neg.npy"));
  CHECK_NOTHROW(check_negatives(whole, split.test_negatives, "test_edge_neg.npy"));
  REQUIRE(split.test_target_negatives.size() == split.test.size() * 4);
  for (std::size_t i = 0; i < split.test.size(); ++i)
    for (std::size_t j = 0; j < 4; ++j)
      CHECK_FALSE(whole.joined(split.test.source[i], split.test_target_negatives[i * 4 + j]));
  // Seeded: the same split again; another seed another.
  graph_dataset again = make_planted_partition({.num_nodes = 400, .num_classes = 4,
                                                .feature_dim = 8, .edge_feature_dim = 3});
  const link_split same = split_edges(
      again, {.valid = 0.05, .test = 0.10, .negatives = 300, .per_source_negatives = 4, .seed = 9});
  CHECK(same.test.source == split.test.source);
  CHECK(same.valid_negatives.destination == split.valid_negatives.destination);
  CHECK(again.graph == data.graph);
  // A leak is refused, naming the file and row; --allow-leak keeps it.
  node_pairs leak = split.valid;
  leak.push(split.train.destination[0], split.train.source[0]);
  const std::string where = "valid_edge.npy, row " + std::to_string(leak.size() - 1);
  CHECK_THROWS_WITH_AS(check_held_out(remaining, leak, "valid_edge.npy"),
                       doctest::Contains(where.c_str()), invalid_argument);
  CHECK_NOTHROW(check_held_out(remaining, leak, "valid_edge.npy", true));
  node_pairs out_of_range;
  out_of_range.push(0, 400);
  CHECK_THROWS_WITH_AS(check_held_out(remaining, out_of_range, "test_edge.npy"),
                       doctest::Contains("outside the 400 nodes"), invalid_argument);
  CHECK_THROWS_WITH_AS(check_negatives(whole, split.test, "test_edge_neg.npy"),
                       doctest::Contains("is an edge"), invalid_argument);
  // Bad settings and directed graphs.
  graph_dataset directed =
      make_planted_partition({.num_nodes = 50, .num_classes = 2, .feature_dim = 2});
  directed.graph.columns[0] = (directed.graph.columns[0] + 1) % 50;
  CHECK_THROWS_WITH_AS(split_edges(directed, {}), doctest::Contains("directed"), invalid_argument);
  CHECK_THROWS_AS(split_edges(data, {.valid = 0.5, .test = 0.5}), invalid_argument);
}

TEST_CASE("train_link_full_batch: GCN + dot learns a planted graph's links on one process") {
  graph_dataset data = planted_links();
  const link_split split = split_of(data);
  local_schedule graph(with_self_loops(data.graph, self_loop_policy::add));
  model_config config = paper_defaults("gcn");
  config.hidden = 32;
  config.dropout = 0;
  auto model = make_model<float, local_schedule>(config, data.features.cols(), 32, 1);
  auto optimiser = make_optimiser(config, model);
  link_head<dot_decoder<float>, adam<float>> head({32, 1}, adam<float>(adam_options{}), 1);
  const link_data<float> links = link_data_of<float>(split, {data.features});
  train_options options;
  options.epochs = 40;
  options.log_progress = false;
  link_options link;
  link.hits_at = {10, 50};
  link.select_by = "auc";
  const link_result result =
      train_link_full_batch(model, head, graph, optimiser, links, options, link);
  REQUIRE(result.training.history.size() == 40);
  CHECK(result.training.history.back().train_loss < result.training.history.front().train_loss);
  // Chance is 0.5; the planted graph's ceiling about 0.85 (edges join random nodes of one
  // class, and a uniform negative pair shares its class with probability 1/4).
  CHECK(result.test.auc > 0.8);
  CHECK(result.valid.auc == doctest::Approx(result.training.best_valid_score));
  CHECK(result.test.mrr > 0);
  // Bad settings are refused before training.
  link.select_by = "hits@20";
  CHECK_THROWS_WITH_AS(train_link_full_batch(model, head, graph, optimiser, links, options, link),
                       doctest::Contains("hits@20"), invalid_argument);
  link.select_by = "auc";
  link.negatives = 601;
  CHECK_THROWS_WITH_AS(train_link_full_batch(model, head, graph, optimiser, links, options, link),
                       doctest::Contains("601"), invalid_argument);
}

TEST_CASE("bulk_sampler leaves a minibatch's excluded pairs out of its blocks, both ways") {
  const graph_dataset data = make_planted_partition(
      {.num_nodes = 120, .num_classes = 3, .average_degree = 6, .seed = 3});
  for (const sampler_kind kind : {sampler_kind::node_wise, sampler_kind::layer_wise}) {
    sampler_options options{.kind = kind, .seed = 4};
    options.fanouts = kind == sampler_kind::node_wise ? std::vector<node_t>{-1, -1}
                                                      : std::vector<node_t>{120, 120};
    bulk_sampler sampler(data.graph, options);
    // Two minibatches of the same seeds: the first excludes an edge of each (one given
    // reversed), the second nothing.
    const node_t v = data.graph.row(5)[0], w = data.graph.row(9)[0];
    const std::vector<std::vector<node_t>> seeds = {{5, 9}, {5, 9}};
    const std::vector<node_t> first = {v, 9}, second = {5, w};
    const excluded_pairs excluded(first, second);
    const std::vector<excluded_pairs> exclude = {excluded, {}};
    sampling_graph whole(data.graph);
    const auto samples = sampler.sample(whole, seeds, seeds, 0, 0, exclude);
    for (std::size_t b = 0; b < 2; ++b) {
      std::set<std::pair<node_t, node_t>> seen;  // (destination, source) of every block edge
      for (const sampled_block& block : samples[b].blocks)
        for (node_t r = 0; r < block.edges.num_rows; ++r)
          for (const node_t c : block.edges.row(r)) seen.emplace(block.ids[r], block.ids[c]);
      // Every neighbour is drawn (all of them): an edge is missing only where excluded.
      CHECK(seen.contains({5, v}) == (b == 1));
      CHECK(seen.contains({9, w}) == (b == 1));
      if (b == 0)
        for (const auto& [d, c] : seen) CHECK_FALSE(excluded.contains(c, d));
      CHECK(seen.size() > 10);
    }
  }
  CHECK_THROWS_AS(excluded_pairs(std::vector<node_t>{1}, std::vector<node_t>{}), invalid_argument);
}

TEST_CASE("train_link_minibatch: SAGE + dot on sampled edge minibatches learns as full batch") {
  graph_dataset data = planted_links();
  const link_split split = split_of(data);
  const csr graph = with_self_loops(data.graph, self_loop_policy::keep);
  model_config config = paper_defaults("sage");
  config.hidden = 32;
  config.dropout = 0;
  train_options options;
  options.epochs = 10;
  options.log_progress = false;
  link_options link;
  link.hits_at = {10, 50};
  link.select_by = "auc";
  const link_data<float> links = link_data_of<float>(split, {data.features});
  const auto run = [&](bool minibatch) {
    auto model = make_model<float, sampled_minibatch::schedule_type>(
        config, data.features.cols(), 32, 1);
    auto optimiser = make_optimiser(config, model);
    link_head<dot_decoder<float>, adam<float>> head({32, 1}, adam<float>(adam_options{}), 1);
    if (!minibatch) {
      local_schedule whole(graph);
      return train_link_full_batch(model, head, whole, optimiser, links, options, link);
    }
    sampling_graph sampled(graph);
    minibatch_options mb{.batch_size = 256, .bulk = 2};
    mb.sampler = {.kind = sampler_kind::node_wise, .fanouts = {10, 10}, .seed = 3};
    return train_link_minibatch(model, head, sampled, optimiser, links, options, link, mb);
  };
  const link_result sampled = run(true);
  REQUIRE(sampled.training.history.size() == 10);
  CHECK(sampled.training.history.back().train_loss < sampled.training.history.front().train_loss);
  const link_result full = run(false);
  CHECK(sampled.test.auc > 0.8);
  CHECK(sampled.test.auc > full.test.auc - 0.03);
  CHECK(sampled.valid.auc == doctest::Approx(sampled.training.best_valid_score));
}

TEST_CASE("a link model saved with its decoder predicts the scores it was evaluated with") {
  graph_dataset data = planted_links();
  const link_split split = split_of(data);
  local_schedule graph(with_self_loops(data.graph, self_loop_policy::add));
  model_config config = paper_defaults("gcn");
  config.hidden = 16;
  auto model = make_model<float, local_schedule>(config, data.features.cols(), 16, 1);
  auto optimiser = make_optimiser(config, model);
  link_head<mlp_decoder<float>, adam<float>> head({16, 1}, adam<float>(adam_options{}), 1);
  train_options options;
  options.epochs = 3;
  options.log_progress = false;
  (void)train_link_full_batch(model, head, graph, optimiser,
                              link_data_of<float>(split, {data.features}), options, {});
  const testing_support::temp_dir dir("link-model");
  const auto file = dir.path / "links.sarmodel";
  serial_communicator one;
  const model_description d{.config = config, .input_dim = data.features.cols(),
                            .output_dim = 16, .decoder = "mlp"};
  save_model(one, file, model, d, 0, &head.parameters);
  const saved_model saved = read_model(file);
  CHECK(saved.description.decoder == "mlp");
  std::size_t packed = 0;  // the decoder's values without the store's padding
  for (std::size_t k = 0; k < head.parameters.size(); ++k)
    packed += static_cast<std::size_t>(head.parameters.shape(k).rows * head.parameters.shape(k).cols);
  CHECK(saved.decoder_parameters.size() == head.parameters.size());
  CHECK(saved.decoder_values.size() == packed);
  auto loaded = load_model<float, local_schedule>(saved);
  const matrixf h = predict(loaded, graph, data.features);
  std::vector<float> expected(split.test.size());
  const auto& pairs = split.test;
  head.decoder.score(h, row_pairs{pairs.source, pairs.destination, {}}, expected);
  CHECK(score_saved_pairs<float>(saved, h, pairs) == expected);
  // Decoder and name go together; a node model has no pairs to score.
  CHECK_THROWS_AS(save_model(one, file, model, d), invalid_argument);
  const saved_model node_model = [&] {
    save_model(one, file, model, {.config = config, .input_dim = data.features.cols(),
                                  .output_dim = 16});
    return read_model(file);
  }();
  CHECK(node_model.description.decoder.empty());
  CHECK_THROWS_WITH_AS(score_saved_pairs<float>(node_model, h, pairs),
                       doctest::Contains("no decoder"), invalid_argument);
}

TEST_CASE("split_edges on a typed graph: each pair of its edge's relation, read back typed") {
  namespace fs = std::filesystem;
  graph_dataset data = make_planted_heterogeneous(
      {.num_papers = 150, .num_authors = 60, .feature_dim = 4, .author_feature_dim = 2,
       .degree = 2, .authors_per_paper = 2, .seed = 5});
  const csr original = data.graph;
  const std::vector<std::int32_t> types = data.edge_types;
  const link_split split = split_edges(
      data, {.valid = 0.1, .test = 0.1, .negatives = 40, .per_source_negatives = 2, .seed = 3});
  REQUIRE(split.typed());
  // A pair's relation: the smallest type of an entry u -> v of the original graph.
  const auto relation_of = [&](node_t u, node_t v) {
    std::int32_t best = -1;
    for (edge_t e = original.offsets[v]; e < original.offsets[v + 1]; ++e)
      if (original.columns[static_cast<std::size_t>(e)] == u &&
          (best < 0 || types[static_cast<std::size_t>(e)] < best))
        best = types[static_cast<std::size_t>(e)];
    return best;
  };
  for (const node_pairs* pairs : {&split.train, &split.valid, &split.test}) {
    REQUIRE(pairs->relation.size() == pairs->size());
    for (std::size_t i = 0; i < pairs->size(); ++i)
      CHECK(pairs->relation[i] == relation_of(pairs->source[i], pairs->destination[i]));
  }
  CHECK(data.edge_types.size() == static_cast<std::size_t>(data.graph.num_edges()));
  // Shared negative i corrupts test positive i mod n: its source and relation.
  REQUIRE(split.test_negatives.size() == 40);
  for (std::size_t i = 0; i < 40; ++i) {
    const std::size_t j = i % split.test.size();
    CHECK(split.test_negatives.source[i] == split.test.source[j]);
    CHECK(split.test_negatives.relation[i] == split.test.relation[j]);
  }
  // On disk: three columns, read back equal; a relation the graph lacks is refused.
  const testing_support::temp_dir tmp("typed-split");
  const fs::path dir = tmp.path / "links";
  write_npy_dataset(dir, data, [&](directory_writer& out) { write_link_split(out, split, "s"); });
  CHECK(read_npy_header(link_split_dir(dir, "s") / "test_edge_neg.npy").shape[1] == 3);
  const int relations = data.schema.num_relations();
  const link_split back = read_link_split(dir, "s", data.num_nodes(), 0, 1, relations);
  CHECK(back.train == split.train);
  CHECK(back.test_negatives == split.test_negatives);
  std::int32_t highest = 0;
  for (const std::int32_t r : split.train.relation) highest = std::max(highest, r);
  REQUIRE(highest > 0);
  const std::string outside = "relation " + std::to_string(highest) + " outside the graph's " +
                              std::to_string(highest) + " relations";
  CHECK_THROWS_WITH_AS(read_link_split(dir, "s", data.num_nodes(), 0, 1, highest),
                       doctest::Contains(outside.c_str()), invalid_argument);
  // Held-out pairs carry them to the decoder: per-source negatives take their positive's.
  const node_pairs all = detail::held_out_pairs(split.test, split.test_negatives,
                                                split.test_target_negatives, 2);
  REQUIRE(all.relation.size() == all.size());
  CHECK(all.relation.back() == split.test.relation.back());
  node_pairs untyped;
  untyped.push(0, 1);
  CHECK_THROWS_AS(detail::held_out_pairs(split.test, untyped, {}, 0), invalid_argument);
}

TEST_CASE("link splits on disk: written with a .npy dataset, read back, bad arrays refused") {
  namespace fs = std::filesystem;
  graph_dataset data =
      make_planted_partition({.num_nodes = 200, .num_classes = 2, .feature_dim = 4});
  const link_split split =
      split_edges(data, {.valid = 0.1, .test = 0.1, .per_source_negatives = 3, .seed = 4});
  const testing_support::temp_dir tmp("link-split");
  const fs::path dir = tmp.path / "links";
  write_npy_dataset(dir, data, [&](directory_writer& out) { write_link_split(out, split, "s"); });
  CHECK(read_npy_dataset(dir).graph == data.graph);  // the split beside it is the reader's own
  REQUIRE(has_link_split(dir, "s"));
  CHECK_FALSE(has_link_split(dir, "other"));
  const link_split back = read_link_split(dir, "s", 200);
  CHECK(back.train.source == split.train.source);
  CHECK(back.test.destination == split.test.destination);
  CHECK(back.valid_negatives.source == split.valid_negatives.source);
  CHECK(back.test_target_negatives == split.test_target_negatives);
  CHECK(back.per_source == 3);
  // Three shares of it are the whole, in order; a share's train ids continue the previous.
  link_split joined;
  for (int share = 0; share < 3; ++share) {
    const link_split part = read_link_split(dir, "s", 200, share, 3);
    REQUIRE(part.train_ids.size() == part.train.size());
    CHECK(part.train_ids.front() == static_cast<edge_t>(joined.train.size()));
    for (const auto& [whole, piece] : {std::pair{&joined.train, &part.train},
                                       std::pair{&joined.test, &part.test},
                                       std::pair{&joined.valid_negatives, &part.valid_negatives}}) {
      whole->source.insert(whole->source.end(), piece->source.begin(), piece->source.end());
      whole->destination.insert(whole->destination.end(), piece->destination.begin(),
                                piece->destination.end());
    }
    joined.test_target_negatives.insert(joined.test_target_negatives.end(),
                                        part.test_target_negatives.begin(),
                                        part.test_target_negatives.end());
  }
  CHECK(joined.train.destination == split.train.destination);
  CHECK(joined.test.source == split.test.source);
  CHECK(joined.valid_negatives.destination == split.valid_negatives.destination);
  CHECK(joined.test_target_negatives == split.test_target_negatives);

  const fs::path files = link_split_dir(dir, "s");
  const auto refused = [&](const std::string& what) {
    try {
      read_link_split(dir, "s", 200);
    } catch (const error& e) {
      return std::string(e.what()).find(what) != std::string::npos;
    }
    return false;
  };
  const std::vector<std::int64_t> two{0, 1, 2, 3, 4, 5};
  const std::int64_t pair_shape[] = {3, 2}, triple_shape[] = {2, 3}, wide_shape[] = {1, 4};
  // Another dtype, another shape, an id outside the graph, an empty set, a missing file.
  write_npy(files / "valid_edge.npy", npy_dtype::int32, pair_shape, two.data());
  CHECK(refused("valid_edge.npy holds int32"));
  write_npy(files / "valid_edge.npy", npy_dtype::int64, wide_shape, two.data());
  CHECK(refused("valid_edge.npy has shape (1, 4)"));
  write_npy(files / "valid_edge.npy", npy_dtype::int64, triple_shape, two.data());
  CHECK(refused("valid_edge.npy has 3 columns, train_edge.npy 2"));  // relations in all or none
  const std::vector<std::int64_t> far{0, 1, 2, 200};
  const std::int64_t far_shape[] = {2, 2}, empty_shape[] = {0, 2};
  write_npy(files / "valid_edge.npy", npy_dtype::int64, far_shape, far.data());
  CHECK(refused("valid_edge.npy, row 1: pair (2, 200) outside the 200 nodes"));
  write_npy(files / "valid_edge.npy", npy_dtype::int64, empty_shape, far.data());
  CHECK(refused("valid_edge.npy holds no pair"));
  write_npy(files / "valid_edge.npy", npy_dtype::int64, far_shape, two.data());
  CHECK(refused("valid_target_node_neg.npy has shape"));  // 2 positives, rows of the old ones
  fs::remove(files / "test_target_node_neg.npy");
  CHECK(refused("test_target_node_neg.npy is missing"));
  fs::remove(files / "test_edge.npy");
  CHECK(refused("test_edge.npy is missing"));
}
