// Full-batch link prediction: an encoder (any model: make_model's, a sequential) gives every
// node an embedding, a decoder (sar/nn/link_decoders.hpp) scores pairs, and the loss is binary
// cross-entropy over each supervision positive and its K negatives (sar/nn/link_loss.hpp,
// negatives from sar/sampling/negatives.hpp); evaluation reports AUC, Hits@K and MRR with
// OGB's conventions (sar/nn/link_metrics.hpp).
//
// On P ranks (a distributed schedule) each rank scores the pairs whose source it owns. The
// embeddings of the remote destinations its pairs read come from their owners in one
// deduplicated request per epoch (pair_rows), their gradients go back the same way, and only
// sums and order statistics are reduced: no rank holds another's pairs. Collective.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cmath>
#include <functional>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "sar/comm/serial.hpp"
#include "sar/core/error.hpp"
#include "sar/graph/edge_split.hpp"
#include "sar/nn/link_decoders.hpp"
#include "sar/nn/link_loss.hpp"
#include "sar/nn/link_metrics.hpp"
#include "sar/sampling/negatives.hpp"
#include "sar/train/full_batch.hpp"

namespace sar {

/// One rank's link-prediction data. Nodes are numbered as the schedule numbers them: on one
/// process by dataset id; on P ranks by global id, this rank's rows being first_global() + row.
/// Every pair's source is a node of this rank; its destination may be any node.
template <class T>
struct link_data {
  node_data<T> nodes;  ///< the input features of this rank's nodes (labels and split unused)
  node_pairs train{};  ///< supervision positives (scored with their negatives every epoch)
  /// Each train pair's id over all ranks, which keys its negatives (so any rank count draws
  /// the same); empty: 0, 1, ... (one process).
  std::vector<edge_t> train_ids{};
  node_pairs valid{};            ///< held-out validation positives
  node_pairs test{};             ///< held-out test positives
  node_pairs valid_negatives{};  ///< shared validation negatives (Hits\@K, AUC)
  node_pairs test_negatives{};   ///< shared test negatives
  /// Negative destinations of each validation positive's source, row-major valid.size() x
  /// per_source (MRR); empty when per_source is 0.
  std::vector<node_t> valid_target_negatives{};
  std::vector<node_t> test_target_negatives{};  ///< the same for the test positives
  int per_source = 0;  ///< columns of the *_target_negatives
  /// The schedule's id of each dataset id, when the two differ (nodes relabelled by a
  /// partitioner): negatives are drawn as dataset ids and renumbered, so any partition draws
  /// the same nodes. Empty: the schedule numbers nodes as the dataset does.
  std::vector<node_t> schedule_ids{};
};

/// The share of `split` a rank scores: the pairs whose source satisfies owns(source), with
/// their rows of per-source negatives and each train pair's index in split.train as its id;
/// `nodes` are the rank's features.
template <class T, class Owns>
link_data<T> link_data_where(const link_split& split, node_data<T> nodes, Owns&& owns) {
  const auto k = static_cast<std::size_t>(split.per_source);
  const auto keep = [&](const node_pairs& pairs, const std::vector<node_t>* targets,
                        node_pairs& out, std::vector<node_t>* out_targets,
                        std::vector<edge_t>* ids) {
    for (std::size_t i = 0; i < pairs.size(); ++i) {
      if (!owns(pairs.source[i])) continue;
      out.push(pairs.source[i], pairs.destination[i]);
      if (ids) ids->push_back(static_cast<edge_t>(i));
      if (targets && k > 0)
        out_targets->insert(out_targets->end(),
                            targets->begin() + static_cast<std::ptrdiff_t>(i * k),
                            targets->begin() + static_cast<std::ptrdiff_t>((i + 1) * k));
    }
  };
  link_data<T> out{.nodes = nodes, .per_source = split.per_source};
  keep(split.train, nullptr, out.train, nullptr, &out.train_ids);
  keep(split.valid, &split.valid_target_negatives, out.valid, &out.valid_target_negatives, nullptr);
  keep(split.test, &split.test_target_negatives, out.test, &out.test_target_negatives, nullptr);
  keep(split.valid_negatives, nullptr, out.valid_negatives, nullptr, nullptr);
  keep(split.test_negatives, nullptr, out.test_negatives, nullptr, nullptr);
  return out;
}

/// link_data_where for the sources in [first, first + rows) (all of them by default): a
/// rank's share on a schedule whose ranks own consecutive ids.
template <class T>
link_data<T> link_data_of(const link_split& split, node_data<T> nodes, node_t first = 0,
                          node_t rows = std::numeric_limits<node_t>::max()) {
  return link_data_where(split, nodes, [&](node_t u) { return u >= first && u - first < rows; });
}

/// Settings of link prediction beyond train_options.
struct link_options {
  int negatives = 1;  ///< negative destinations per supervision positive, every epoch
  std::vector<int> hits_at = {20, 50, 100};  ///< the K of Hits\@K
  /// The validation figure that picks the best epoch: "auc", "mrr" or "hits\@K" (a K of
  /// hits_at).
  std::string select_by = "hits@50";
};

/// A decoder with its parameters (declared, allocated and initialised from `seed`) and their
/// optimiser. Not copyable (the decoder points at its parameters).
template <link_decoder Decoder, class Optimiser>
struct link_head {
  Decoder decoder;                                         ///< scores pairs
  parameter_store<typename Decoder::scalar> parameters;  ///< the decoder's parameters
  Optimiser optimiser;                                     ///< steps them
  /// Builds the decoder for `shape`.
  link_head(decoder_shape shape, Optimiser optimiser_, std::uint64_t seed)
      : decoder(shape), optimiser(std::move(optimiser_)) {
    decoder.declare(parameters);
    parameters.allocate();
    parameters.initialise(seed);
  }
  link_head(const link_head&) = delete;             ///< the decoder points at parameters
  link_head& operator=(const link_head&) = delete;  ///< the decoder points at parameters
};

/// What train_link_full_batch returns: the run (its scores are the select_by figure) and every
/// figure at the best epoch.
struct link_result {
  train_result training;  ///< per-epoch history, best epoch, its select_by figures
  link_report valid;      ///< at training.best_epoch
  link_report test;       ///< at training.best_epoch
};

namespace detail {
template <class Schedule>
concept ranked_schedule = requires(Schedule& s) {
  s.communicator();
  s.first_global();
};

/// The rows a rank's pairs read: its own nodes' embeddings, then those of the remote nodes
/// they name, fetched from their owners (one deduplicated request); and the way back for
/// those rows' gradients. On one process the rows are the embeddings themselves.
template <class T, class Schedule>
class pair_rows {
 public:
  /// Maps the nodes of `lists` (schedule ids) to rows. Collective on P ranks. Throws
  /// sar::invalid_argument for a node outside the graph.
  pair_rows(Schedule& graph, std::initializer_list<std::span<const node_t>> lists)
      : graph_(graph) {
    if constexpr (ranked_schedule<Schedule>) {
      auto& comm = graph.communicator();
      first_ = graph.first_global();
      local_ = graph.num_local();
      const node_t total = graph.num_global();
      const auto p = static_cast<std::size_t>(comm.size());
      const std::vector<std::int64_t> starts =
          comm.all_to_all(std::vector<std::int64_t>(p, first_));
      for (const auto list : lists)
        for (const node_t g : list) {
          SAR_CHECK(g >= 0 && g < total, invalid_argument, "sar::train_link_full_batch: node ",
                    g, " outside the ", total, " nodes");
          if (g < first_ || g >= first_ + local_) remote_.push_back(g);
        }
      std::sort(remote_.begin(), remote_.end());
      remote_.erase(std::unique(remote_.begin(), remote_.end()), remote_.end());
      // Owners' ranges are contiguous and in rank order: the sorted ids group by owner.
      asked_of_.assign(p, 0);
      for (const node_t g : remote_) {
        const auto owner = std::upper_bound(starts.begin(), starts.end(), g) - starts.begin() - 1;
        ++asked_of_[static_cast<std::size_t>(owner)];
      }
      asked_by_ = comm.all_to_all(asked_of_);
      std::int64_t asked = 0;
      for (const auto c : asked_by_) asked += c;
      wanted_.resize(static_cast<std::size_t>(asked));
      comm.all_to_all_v(std::span<const std::int64_t>(remote_), asked_of_,
                        std::span<std::int64_t>(wanted_), asked_by_);
      for (auto& g : wanted_) {
        SAR_CHECK(g >= first_ && g < first_ + local_, invalid_argument,
                  "sar::train_link_full_batch: asked for node ", g, " which rank ",
                  comm.rank(), " does not own");
        g -= first_;
      }
    } else {
      local_ = graph.num_destinations();
      for (const auto list : lists)
        for (const node_t g : list)
          SAR_CHECK(g >= 0 && g < local_, invalid_argument, "sar::train_link_full_batch: node ",
                    g, " outside the ", local_, " nodes");
    }
  }

  /// The row of node g (one of the lists' nodes or this rank's).
  node_t row(node_t g) const {
    if (g >= first_ && g < first_ + local_) return g - first_;
    return local_ + static_cast<node_t>(std::lower_bound(remote_.begin(), remote_.end(), g) -
                                        remote_.begin());
  }
  /// The rows of `nodes`.
  std::vector<node_t> rows(std::span<const node_t> nodes) const {
    std::vector<node_t> out(nodes.size());
    for (std::size_t i = 0; i < nodes.size(); ++i) out[i] = row(nodes[i]);
    return out;
  }

  /// The embeddings of every row: h itself on one process, else h followed by the remote rows
  /// (kept in `extended`). Collective on P ranks.
  const_rows_ref<T> gather(const matrix<T>& h, matrix<T>& extended) {
    if constexpr (!ranked_schedule<Schedule>) {
      return const_rows_ref<T>(h);
    } else {
      const Eigen::Index d = h.cols();
      matrix<T> reply(static_cast<Eigen::Index>(wanted_.size()), d);
      for (std::size_t i = 0; i < wanted_.size(); ++i)
        reply.row(static_cast<Eigen::Index>(i)) = h.row(wanted_[i]);
      extended.resize(local_ + static_cast<Eigen::Index>(remote_.size()), d);
      extended.topRows(local_) = h;
      auto back = extended.bottomRows(static_cast<Eigen::Index>(remote_.size()));
      graph_.communicator().all_to_all_v(
          std::span<const T>(reply.data(), static_cast<std::size_t>(reply.size())),
          times(asked_by_, d), std::span<T>(back.data(), static_cast<std::size_t>(back.size())),
          times(asked_of_, d));
      return const_rows_ref<T>(extended);
    }
  }

  /// Adds the gradients of the remote rows of `dextended` into their owners' `dh` (and, on P
  /// ranks, its own rows: dh := the top rows of dextended plus what the peers return).
  /// Collective on P ranks.
  void scatter(matrix<T>& dextended, matrix<T>& dh) {
    if constexpr (!ranked_schedule<Schedule>) {
      dh.swap(dextended);
    } else {
      const Eigen::Index d = dextended.cols();
      dh = dextended.topRows(local_);
      const auto remote = dextended.bottomRows(static_cast<Eigen::Index>(remote_.size()));
      const matrix<T> sent = remote;
      matrix<T> back(static_cast<Eigen::Index>(wanted_.size()), d);
      graph_.communicator().all_to_all_v(
          std::span<const T>(sent.data(), static_cast<std::size_t>(sent.size())),
          times(asked_of_, d), std::span<T>(back.data(), static_cast<std::size_t>(back.size())),
          times(asked_by_, d));
      for (std::size_t i = 0; i < wanted_.size(); ++i)
        dh.row(wanted_[i]) += back.row(static_cast<Eigen::Index>(i));
    }
  }

  /// Rows of the extended matrix.
  node_t size() const { return local_ + static_cast<node_t>(remote_.size()); }

 private:
  static std::vector<std::int64_t> times(const std::vector<std::int64_t>& counts, Eigen::Index d) {
    std::vector<std::int64_t> out(counts);
    for (auto& c : out) c *= d;
    return out;
  }

  Schedule& graph_;
  node_t first_ = 0, local_ = 0;
  std::vector<node_t> remote_;               // sorted remote ids this rank reads
  std::vector<std::int64_t> asked_of_;       // per owner: how many of remote_
  std::vector<std::int64_t> asked_by_;       // per peer: how many of mine it reads
  std::vector<std::int64_t> wanted_;         // my rows the peers read, peer by peer
};

/// The figures of one held-out set (positives, shared negatives, each positive's
/// per_source own negatives) over all ranks of `comm`, scored by `decoder` on the embeddings
/// `e`, whose row of node g is row_of(g). Collective.
template <class T, class Comm, class Decoder, class RowOf>
link_report score_held_out(Comm& comm, Decoder& decoder, const_rows_ref<T> e, RowOf&& row_of,
                           const node_pairs& positives, const node_pairs& negatives,
                           std::span<const node_t> own, int per_source,
                           std::span<const int> hits_at) {
  const auto score = [&](auto&& source_of, std::span<const node_t> destinations) {
    std::vector<node_t> s(destinations.size()), t(destinations.size());
    for (std::size_t i = 0; i < destinations.size(); ++i) {
      s[i] = row_of(source_of(i));
      t[i] = row_of(destinations[i]);
    }
    std::vector<T> scores(s.size());
    decoder.score(e, row_pairs{s, t, {}}, scores);
    return std::vector<double>(scores.begin(), scores.end());
  };
  const auto k = static_cast<std::size_t>(std::max(per_source, 1));
  const auto positive = score([&](std::size_t i) { return positives.source[i]; },
                              positives.destination);
  const auto shared = score([&](std::size_t i) { return negatives.source[i]; },
                            negatives.destination);
  const auto own_scores = score([&](std::size_t i) { return positives.source[i / k]; }, own);
  return link_metrics(comm, link_scores{positive, shared, own_scores, per_source}, hits_at);
}

/// score_held_out on a schedule's embeddings h (full batch): the remote rows the pairs read
/// fetched in one exchange. Collective.
template <class T, class Schedule, class Decoder>
link_report evaluate_links(Schedule& graph, Decoder& decoder, const matrix<T>& h,
                           const node_pairs& positives, const node_pairs& negatives,
                           std::span<const node_t> own, int per_source,
                           std::span<const int> hits_at) {
  std::vector<node_t> own_sources;
  for (std::size_t i = 0; i < positives.size(); ++i)
    for (int j = 0; j < per_source; ++j) own_sources.push_back(positives.source[i]);
  pair_rows<T, Schedule> rows(graph, {positives.source, positives.destination, negatives.source,
                                      negatives.destination, own_sources, own});
  matrix<T> extended;
  const auto e = rows.gather(h, extended);
  const auto row_of = [&](node_t g) { return rows.row(g); };
  if constexpr (ranked_schedule<Schedule>) {
    return score_held_out<T>(graph.communicator(), decoder, e, row_of, positives, negatives, own,
                             per_source, hits_at);
  } else {
    serial_communicator one;
    return score_held_out<T>(one, decoder, e, row_of, positives, negatives, own, per_source,
                             hits_at);
  }
}

/// Throws sar::invalid_argument naming `where` unless link.select_by names a figure the
/// evaluation reports: auc, hits@K for a K of hits_at, or mrr with per-source negatives.
inline void check_select_by(const link_options& link, int per_source, const char* where) {
  const bool hits = std::ranges::any_of(
      link.hits_at, [&](int k) { return link.select_by == "hits@" + std::to_string(k); });
  SAR_CHECK(link.select_by == "auc" || hits || (link.select_by == "mrr" && per_source > 0),
            invalid_argument, where, ": cannot select by ", link.select_by,
            ": auc, hits@K for a K of hits_at, or mrr (with per-source negatives)");
}

/// The figure `name` of a report ("auc", "mrr", "hits\@K"), NaN if absent.
inline double figure(const link_report& report, const std::string& name) {
  for (const auto& [key, value] : report.named())
    if (key == name) return value;
  return std::numeric_limits<double>::quiet_NaN();
}
/// Ends epoch `stats` of a link run: when it was evaluated, its scores are the select_by
/// figures of `valid` and `test` and the progress line (after `line`) lists the other
/// validation figures; `out` keeps the reports of the best epoch.
inline void finish_link_epoch(epoch_recorder& recorder, epoch_stats stats, std::string line,
                              const link_report& valid, const link_report& test,
                              const std::string& select_by, link_result& out) {
  if (stats.evaluated) {
    stats.valid_loss = 0;  // the best epoch is chosen by the figure alone
    stats.valid_score = figure(valid, select_by);
    stats.test_score = figure(test, select_by);
    for (const auto& [name, value] : valid.named())
      if (name != select_by) {
        char text[64];
        std::snprintf(text, sizeof text, "  val %s %.4f", name.c_str(), value);
        line += text;
      }
  }
  recorder.finish(stats, line);
  if (recorder.result().best_epoch == stats.epoch) {
    out.valid = valid;
    out.test = test;
  }
}
}  // namespace detail

/// Trains `model` (the encoder, its output the embeddings) and `head` (the decoder) for link
/// prediction on `data`: each epoch, every supervision positive (u, v) with options.negatives
/// negatives (u, w), w uniform over all nodes keyed by (options.seed, epoch, the pair's id);
/// the loss is their binary cross-entropy averaged over all ranks' pairs; then, every
/// options.evaluate_every epochs, the validation and test figures. The best epoch is the one
/// with the highest validation link.select_by. Requires data.nodes.features of
/// graph.num_destinations() rows and the pairs' nodes in the graph. Throws
/// sar::invalid_argument for bad settings or pairs (naming them), sar::numeric_error for a
/// loss that is not finite. Collective.
template <class Model, class Head, class Schedule, class Optimiser,
          class T = typename Model::scalar>
link_result train_link_full_batch(Model& model, Head& head, Schedule& graph, Optimiser& optimiser,
                                  const link_data<T>& data, const train_options& options,
                                  const link_options& link,
                                  const std::function<void(const epoch_stats&)>& on_epoch = {}) {
  constexpr const char* where = "sar::train_link_full_batch";
  const node_t n = graph.num_destinations();
  SAR_CHECK(data.nodes.feature_rows() == n, invalid_argument, where, ": ", n,
            " local nodes but ", data.nodes.feature_rows(), " feature rows");
  SAR_CHECK(data.train_ids.empty() || data.train_ids.size() == data.train.size(),
            invalid_argument, where, ": ", data.train_ids.size(), " ids for ",
            data.train.size(), " train pairs");
  node_t num_nodes = n;
  if constexpr (detail::ranked_schedule<Schedule>) num_nodes = graph.num_global();
  SAR_CHECK(
      data.schedule_ids.empty() || data.schedule_ids.size() == static_cast<std::size_t>(num_nodes),
      invalid_argument, where, ": ", data.schedule_ids.size(), " schedule ids for ", num_nodes,
      " nodes");
  detail::check_select_by(link, data.per_source, where);
  double supervised = static_cast<double>(data.train.size());
  graph.all_reduce_sum(std::span<double>(&supervised, 1));
  SAR_CHECK(supervised > 0, invalid_argument, where, ": no supervision pair on any rank");
  const double normaliser = supervised * (1 + link.negatives);
  std::vector<edge_t> ids = data.train_ids;
  if (ids.empty())
    for (std::size_t i = 0; i < data.train.size(); ++i) ids.push_back(static_cast<edge_t>(i));

  detail::check_train_options(options, where);
  detail::epoch_recorder recorder(options, where, false, on_epoch, link.select_by);
  link_result out;
  const auto k = static_cast<std::size_t>(link.negatives);
  const std::size_t positives = data.train.size();
  // The pairs: the positives, then each positive's k negatives; only the negatives'
  // destinations change from epoch to epoch.
  std::vector<node_t> sources(positives * (1 + k)), destinations(positives * (1 + k));
  std::copy(data.train.source.begin(), data.train.source.end(), sources.begin());
  std::copy(data.train.destination.begin(), data.train.destination.end(), destinations.begin());
  for (std::size_t i = 0; i < positives; ++i)
    std::fill_n(sources.begin() + static_cast<std::ptrdiff_t>(positives + i * k), k,
                data.train.source[i]);
  std::vector<T> scores(sources.size()), dscores(sources.size());
  matrix<T> extended, dextended, dh;
  for (int epoch = recorder.first_epoch(); recorder.trains(epoch); ++epoch) {
    epoch_stats stats;
    stats.epoch = epoch;
    layer_context ctx{.training = true, .seed = options.seed,
                      .epoch = static_cast<std::uint64_t>(epoch)};
    const auto start = std::chrono::steady_clock::now();
    std::vector<node_t> negatives = uniform_negatives(
        options.seed, static_cast<std::uint64_t>(epoch), ids, link.negatives, num_nodes);
    if (!data.schedule_ids.empty())
      for (node_t& v : negatives) v = data.schedule_ids[static_cast<std::size_t>(v)];
    std::copy(negatives.begin(), negatives.end(),
              destinations.begin() + static_cast<std::ptrdiff_t>(positives));
    detail::pair_rows<T, Schedule> rows(graph, {sources, destinations});
    const std::vector<node_t> s = rows.rows(sources), t = rows.rows(destinations);
    const row_pairs pairs{s, t, {}};

    const matrix<T>& h = data.nodes.forward(model, graph, ctx);
    const auto e = rows.gather(h, extended);
    head.decoder.score(e, pairs, scores);
    double loss = link_loss<T>(std::span<const T>(scores).first(positives),
                               std::span<const T>(scores).subspan(positives), normaliser,
                               std::span<T>(dscores).first(positives),
                               std::span<T>(dscores).subspan(positives));
    dextended.setZero(e.rows(), e.cols());
    head.decoder.backward(e, pairs, dscores, dextended);
    rows.scatter(dextended, dh);
    model.backward(graph, ctx, dh);
    graph.all_reduce_sum(model.parameters().grads());
    graph.all_reduce_sum(head.parameters.grads());
    optimiser.step(model.parameters());
    head.optimiser.step(head.parameters);
    stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    graph.all_reduce_sum(std::span<double>(&loss, 1));
    detail::check_loss(loss, options, where, epoch);
    stats.train_loss = loss;
    stats.train_score = std::numeric_limits<double>::quiet_NaN();

    link_report valid, test;
    if (options.evaluates(epoch)) {
      ctx.training = false;
      const matrix<T>& eval = data.nodes.forward(model, graph, ctx);
      valid = detail::evaluate_links<T>(graph, head.decoder, eval, data.valid, data.valid_negatives,
                                        data.valid_target_negatives, data.per_source, link.hits_at);
      test = detail::evaluate_links<T>(graph, head.decoder, eval, data.test, data.test_negatives,
                                       data.test_target_negatives, data.per_source, link.hits_at);
      stats.evaluated = true;
    }
    detail::finish_link_epoch(recorder, stats, "", valid, test, link.select_by, out);
  }
  out.training = std::move(recorder.result());
  return out;
}

}  // namespace sar
