// Minibatch link prediction: edge minibatches on sampled neighbourhoods.
//
// An epoch shuffles the supervision positives by (seed, epoch, edge id) and cuts them into
// minibatches of batch_size edges, as train_minibatch cuts nodes (sar/train/minibatch.hpp),
// each minibatch's edges shared over the ranks. A minibatch's seeds are the ends of its
// positives and of their negatives (destinations drawn as the full-batch loop draws them, keyed
// by (seed, epoch, edge id, k)); the bulk sampler draws their blocks with the minibatch's own
// positives and their reverses left out (DGL's exclude='reverse_id': no edge is predicted from
// itself); the encoder's outputs at the seeds are scored by the decoder, and the binary
// cross-entropy of each positive and its negatives is normalised by the whole minibatch's
// pairs. Gradients are all-reduced before each step, so P ranks train what one process trains.
// Evaluation is layer-wise inference of every node's embedding, then the held-out figures of
// sar/nn/link_metrics.hpp with each rank scoring its own pairs. Collective on a distributed
// sampling graph.
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>
#include <limits>
#include <span>
#include <vector>

#include "sar/core/error.hpp"
#include "sar/sampling/negatives.hpp"
#include "sar/sampling/samplers.hpp"
#include "sar/train/link_prediction.hpp"
#include "sar/train/minibatch.hpp"

namespace sar {

/// link_data_where for a minibatch graph: the pairs whose source is a local node of `graph`,
/// none on a replica (so the ranks' pairs are disjoint); node ids are dataset ids.
template <class T, minibatch_graph Graph>
link_data<T> link_data_of(const link_split& split, node_data<T> nodes, const Graph& graph) {
  return link_data_where(split, nodes, [&](node_t u) {
    return graph.counts_in_evaluation() && graph.local_row(u) >= 0;
  });
}

namespace detail {
/// The figures of one held-out set on the embeddings h of graph's local nodes: the rows the
/// pairs read gathered from the ranks that hold them. Collective.
template <class T, class Graph, class Decoder>
link_report evaluate_sampled_links(Graph& graph, Decoder& decoder, const matrix<T>& h,
                                   const node_pairs& positives, const node_pairs& negatives,
                                   std::span<const node_t> own, int per_source,
                                   std::span<const int> hits_at) {
  const node_pairs pairs = held_out_pairs(positives, negatives, own, per_source);
  std::vector<node_t> ids = pairs.source;
  ids.insert(ids.end(), pairs.destination.begin(), pairs.destination.end());
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  const matrix<T> e = graph.gather(const_rows_ref<T>(h), ids);
  const auto rows_of = [&](const std::vector<node_t>& nodes) {
    std::vector<node_t> rows(nodes.size());
    for (std::size_t i = 0; i < nodes.size(); ++i)
      rows[i] = std::lower_bound(ids.begin(), ids.end(), nodes[i]) - ids.begin();
    return rows;
  };
  const std::vector<node_t> s = rows_of(pairs.source), t = rows_of(pairs.destination);
  std::vector<T> scores(pairs.size());
  decoder.score(e, row_pairs{s, t, pairs.relation}, scores);
  return held_out_figures<T>(graph, scores, positives.size(), negatives.size(), per_source,
                             hits_at);
}

/// One minibatch's positive edges (a share, or the whole minibatch) with their negatives.
struct edge_batch {
  node_pairs positives;              ///< (source, destination[, relation]) per edge
  std::vector<node_t> negatives;     ///< k negative destinations per edge, row-major
  std::vector<node_t> seeds;         ///< every node they name, sorted, each once

  /// The edges of `items` ((id, source, destination) per edge, and its relation when typed)
  /// and their k negatives of `epoch` drawn from `from` (dataset ids).
  edge_batch(std::span<const node_t> items, bool typed, int k, std::uint64_t seed,
             std::uint64_t epoch, const negative_distribution& from) {
    std::vector<edge_t> ids;
    for (std::size_t i = 0; i < items.size(); i += typed ? 4 : 3) {
      ids.push_back(items[i]);
      if (typed)
        positives.push(items[i + 1], items[i + 2], static_cast<std::int32_t>(items[i + 3]));
      else
        positives.push(items[i + 1], items[i + 2]);
    }
    negatives = draw_negatives(seed, epoch, ids, k, from);
    seeds = positives.source;
    seeds.insert(seeds.end(), positives.destination.begin(), positives.destination.end());
    seeds.insert(seeds.end(), negatives.begin(), negatives.end());
    std::sort(seeds.begin(), seeds.end());
    seeds.erase(std::unique(seeds.begin(), seeds.end()), seeds.end());
  }
  /// The row of node v among the seeds.
  node_t row(node_t v) const {
    return static_cast<node_t>(std::lower_bound(seeds.begin(), seeds.end(), v) - seeds.begin());
  }
};
}  // namespace detail

/// Trains `model` (the encoder) and `head` (the decoder) for link prediction on minibatches
/// of mb.batch_size supervision positives sampled from `graph` (sampling_graph: one process;
/// distributed_sampling_graph: data-parallel), as the top of this file says; evaluates every
/// options.evaluate_every epochs by layer-wise inference. `data` holds the local nodes'
/// features (graph.num_local() rows) and this rank's pairs in dataset ids (link_data_of with
/// the graph: the ranks' pairs disjoint); data.schedule_ids is not read. The best epoch is the
/// one with the highest validation link.select_by. Throws sar::invalid_argument for bad
/// options or data (before any work; the same on every rank), sar::numeric_error for a loss
/// that is not finite. Collective on a distributed graph.
template <class Model, class Head, minibatch_graph Graph, class Optimiser,
          class T = typename Model::scalar>
link_result train_link_minibatch(Model& model, Head& head, Graph& graph, Optimiser& optimiser,
                                 const link_data<T>& data, const train_options& options,
                                 const link_options& link, const minibatch_options& mb,
                                 const std::function<void(const epoch_stats&)>& on_epoch = {}) {
  constexpr const char* where = "sar::train_link_minibatch";
  const node_data<T>& nodes = data.nodes;
  SAR_CHECK(nodes.feature_rows() == graph.num_local(), invalid_argument, where, ": rank ",
            graph.rank(), ": ", graph.num_local(), " nodes but ", nodes.feature_rows(),
            " feature rows");
  if constexpr (!detail::gathers_sparse_rows<Graph, T>)
    SAR_CHECK(nodes.sparse_features == nullptr, invalid_argument, where, ": sparse features on "
              "a graph that gathers dense feature rows only (a distributed sampling graph)");
  SAR_CHECK(data.train_ids.empty() || data.train_ids.size() == data.train.size(),
            invalid_argument, where, ": ", data.train_ids.size(), " ids for ",
            data.train.size(), " train pairs");
  const node_t num_nodes = graph.num_nodes();
  SAR_CHECK(link.negatives >= 1 && link.negatives <= num_nodes, invalid_argument, where, ": ",
            link.negatives, " negatives per positive among ", num_nodes, " nodes");
  detail::check_select_by(link, data.per_source, where);
  const negative_distribution negatives_from = detail::negatives_of(data, num_nodes, where);
  // The training items: (id, source, destination[, relation]) per supervision positive, typed
  // when any rank's are.
  std::int64_t counts[2] = {static_cast<std::int64_t>(data.train.size()), data.train.typed()};
  graph.all_reduce_sum(std::span<std::int64_t>(counts));
  const std::int64_t train_count = counts[0];
  const bool typed = counts[1] > 0;
  const int width = typed ? 4 : 3;
  std::vector<node_t> items;
  for (std::size_t i = 0; i < data.train.size(); ++i) {
    items.insert(items.end(), {data.train_ids.empty() ? static_cast<edge_t>(i) : data.train_ids[i],
                               data.train.source[i], data.train.destination[i]});
    if (typed) items.push_back(data.train.relation_of(i));
  }
  SAR_CHECK(train_count > 0, invalid_argument, where, ": no supervision pair on any rank");
  SAR_CHECK(mb.batch_size >= 1 && mb.batch_size <= train_count, invalid_argument, where,
            ": batch size ", mb.batch_size, " outside [1, ", train_count, "] (the train pairs)");
  SAR_CHECK(mb.bulk >= 1, invalid_argument, where, ": bulk ", mb.bulk, " (>= 1 minibatches)");
  SAR_CHECK(mb.sampler.fanouts.size() == model.stage_starts().size(), invalid_argument, where,
            ": ", mb.sampler.fanouts.size(), " fanouts for a model of ",
            model.stage_starts().size(), " graph layers");
  bulk_sampler sampler(num_nodes, mb.sampler);  // checks the sampler options
  detail::check_held_rows(graph, model.parameters(), where);
  detail::check_train_options(options, where);
  detail::epoch_recorder recorder(options, where, true, on_epoch, link.select_by);
  using clock = std::chrono::steady_clock;
  const auto seconds_since = [](clock::time_point t) {
    return std::chrono::duration<double>(clock::now() - t).count();
  };

  const int k = link.negatives;
  auto grads = model.parameters().grads();
  auto head_grads = head.parameters.grads();
  const node_t batches = (train_count + mb.batch_size - 1) / mb.batch_size;
  link_result out;
  for (int epoch = recorder.first_epoch(); recorder.trains(epoch); ++epoch) {
    epoch_stats stats;
    stats.epoch = epoch;
    const auto start = clock::now();
    const auto epoch_key = static_cast<std::uint64_t>(epoch);
    const minibatch_shares order =
        shuffled_shares(graph, items, train_count, mb.batch_size, options.seed, epoch_key, width);
    double loss_sum = 0;
    for (node_t first = 0; first < batches; first += mb.bulk) {
      const node_t count = std::min<node_t>(mb.bulk, batches - first);
      const std::vector<std::vector<node_t>> shares = order.shares(first, count);
      auto t = clock::now();
      // Each minibatch whole (its seeds and excluded edges) and this rank's share of it.
      const std::vector<std::vector<node_t>> whole_items =
          detail::whole_minibatches(graph, order, first, shares);
      std::vector<detail::edge_batch> mine;
      std::vector<std::vector<node_t>> whole_seeds, my_seeds;
      std::vector<excluded_pairs> exclude;
      std::vector<double> pairs_of;  // the whole minibatch's scored pairs
      for (node_t b = 0; b < count; ++b) {
        detail::edge_batch whole(whole_items[b], typed, k, options.seed, epoch_key,
                                 negatives_from);
        exclude.emplace_back(whole.positives.source, whole.positives.destination);
        pairs_of.push_back(static_cast<double>(whole.positives.size()) * (1 + k));
        whole_seeds.push_back(std::move(whole.seeds));
        mine.emplace_back(shares[b], typed, k, options.seed, epoch_key, negatives_from);
        my_seeds.push_back(mine.back().seeds);
      }
      std::vector<minibatch_sample> samples =
          sampler.sample(graph, whole_seeds, my_seeds, epoch_key,
                         static_cast<std::uint64_t>(first), exclude);
      stats.sampling_seconds += seconds_since(t);
      detail::bulk_gather<T> fetched;
      for (node_t b = 0; b < count; ++b) {
        t = clock::now();
        if (b == fetched.end) {
          fetched = detail::gather_group(graph, nodes, samples, b, mb.gather_rows, false);
          stats.gathered_rows += static_cast<std::int64_t>(fetched.ids.size());
        }
        stats.input_rows += static_cast<std::int64_t>(samples[b].ids.size());
        sparse_rows<T> sparse_x;  // read until backward
        matrix<T> x;
        if (nodes.sparse_features != nullptr) sparse_x = fetched.sparse_features_of(samples[b].ids);
        else x = fetched.features_of(samples[b].ids);
        detail::borrowed_rows<T> borrowed(graph, model.parameters(), samples[b].ids);
        fetched.complete(samples[b]);
        sampled_minibatch blocks(std::move(samples[b]));
        stats.gather_seconds += seconds_since(t);
        const auto step = epoch_key * static_cast<std::uint64_t>(batches) +
                          static_cast<std::uint64_t>(first + b);
        const layer_context ctx{.training = true, .seed = options.seed, .epoch = step};
        const detail::edge_batch& batch = mine[b];
        double loss = 0;
        if (!batch.positives.source.empty()) {
          const matrix<T>& h = nodes.sparse_features != nullptr
                                   ? forward_sparse(model, blocks, ctx, sparse_x)
                                   : model.forward(blocks, ctx, std::move(x));
          // The positives' rows, then each positive's k negatives' (of its relation).
          const std::size_t positives = batch.positives.size();
          std::vector<node_t> s, d;
          std::vector<std::int32_t> r = batch.positives.relation;
          for (std::size_t i = 0; i < positives; ++i) {
            s.push_back(batch.row(batch.positives.source[i]));
            d.push_back(batch.row(batch.positives.destination[i]));
          }
          for (std::size_t i = 0; i < batch.negatives.size(); ++i) {
            s.push_back(s[i / static_cast<std::size_t>(k)]);
            d.push_back(batch.row(batch.negatives[i]));
            if (typed) r.push_back(r[i / static_cast<std::size_t>(k)]);
          }
          const row_pairs pairs{s, d, r};
          std::vector<T> scores(s.size()), dscores(s.size());
          head.decoder.score(h, pairs, scores);
          loss = link_loss<T>(std::span<const T>(scores).first(positives),
                              std::span<const T>(scores).subspan(positives), pairs_of[b],
                              std::span<T>(dscores).first(positives),
                              std::span<T>(dscores).subspan(positives));
          matrix<T> dh = matrix<T>::Zero(h.rows(), h.cols());
          head.decoder.backward(h, pairs, dscores, dh);
          model.backward(blocks, ctx, dh);
        } else {
          std::fill(grads.begin(), grads.end(), T(0));
          std::fill(head_grads.begin(), head_grads.end(), T(0));
        }
        borrowed.return_grads(graph);
        graph.all_reduce_sum(std::span<double>(&loss, 1));
        detail::check_loss(loss, options, where, epoch, first + b);
        graph.all_reduce_sum(grads);
        graph.all_reduce_sum(head_grads);
        optimiser.step(model.parameters());
        head.optimiser.step(head.parameters);
        loss_sum += loss * pairs_of[b];
      }
    }
    stats.seconds = seconds_since(start);
    stats.train_loss = loss_sum / (static_cast<double>(train_count) * (1 + k));
    stats.train_score = std::numeric_limits<double>::quiet_NaN();

    link_report valid, test;
    if (options.evaluates(epoch)) {
      const layer_context eval{.training = false, .seed = options.seed, .epoch = epoch_key};
      const matrix<T> h = detail::infer_node_data(model, graph, nodes, eval, mb.inference_rows);
      valid = detail::evaluate_sampled_links<T>(graph, head.decoder, h, data.valid,
                                                data.valid_negatives, data.valid_target_negatives,
                                                data.per_source, link.hits_at);
      test = detail::evaluate_sampled_links<T>(graph, head.decoder, h, data.test,
                                               data.test_negatives, data.test_target_negatives,
                                               data.per_source, link.hits_at);
      stats.evaluated = true;
    }
    detail::finish_link_epoch(recorder, stats,
                              message("  (sampling ", stats.sampling_seconds, " s, gather ",
                                      stats.gather_seconds, " s)"),
                              valid, test, link.select_by, out);
  }
  out.training = std::move(recorder.result());
  return out;
}

}  // namespace sar
