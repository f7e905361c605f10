// Full-batch link prediction: an encoder (any model: make_model's, a sequential) gives every
// node an embedding, a decoder (sar/nn/link_decoders.hpp) scores pairs, and the loss is binary
// cross-entropy over each supervision positive and its K negatives (sar/nn/link_loss.hpp,
// negatives from sar/sampling/negatives.hpp); evaluation reports AUC, Hits@K and MRR with
// OGB's conventions (sar/nn/link_metrics.hpp).
//
// On P ranks (a distributed schedule) each rank scores the pairs whose source it owns, block by
// block as SAR aggregates (pair_blocks): first the pairs whose destination is its own, then,
// peer after peer, those whose destination the peer owns, with the peer's rows they read
// fetched for that block (each row once) and its gradients sent back before the next block.
// A rank holds its own embeddings and one peer's rows at a time, only sums and order
// statistics are reduced, and no rank holds another's pairs. Collective.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cmath>
#include <functional>
#include <limits>
#include <span>
#include <string>
#include <type_traits>
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
  /// The weight of each node (by dataset id) as a negative destination, e.g. in-degree^0.75
  /// (degree_weights in sar/sampling/negatives.hpp); empty: uniform.
  std::vector<double> negative_weights{};
  /// The schedule's id of each dataset id, when the two differ (nodes relabelled by a
  /// partitioner): negatives are drawn as dataset ids and renumbered, so any partition draws
  /// the same nodes. Empty: the schedule numbers nodes as the dataset does.
  std::vector<node_t> schedule_ids{};
};

/// The share of `split` a rank scores: the pairs whose source satisfies owns(source), with
/// their rows of per-source negatives and each train pair's id (split.train_ids, or its
/// index); `nodes` are the rank's features.
template <class T, class Owns>
link_data<T> link_data_where(const link_split& split, node_data<T> nodes, Owns&& owns) {
  const auto k = static_cast<std::size_t>(split.per_source);
  const auto keep = [&](const node_pairs& pairs, const std::vector<node_t>* targets,
                        node_pairs& out, std::vector<node_t>* out_targets,
                        std::vector<edge_t>* ids) {
    for (std::size_t i = 0; i < pairs.size(); ++i) {
      if (!owns(pairs.source[i])) continue;
      out.push_from(pairs, i);
      if (ids)
        ids->push_back(split.train_ids.empty() ? static_cast<edge_t>(i) : split.train_ids[i]);
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
  /// Full batch on P ranks: the most bytes of a peer's embedding rows (and as many of their
  /// gradients, and of the rows this rank serves) held at once; a peer's block is visited in
  /// pieces of so many rows (more pieces: less memory, more messages).
  std::size_t piece_bytes = std::size_t{32} << 20;
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

/// A rank's pairs (sources its own nodes, destinations any node) visited block by block, the
/// SAR way: first the pairs whose destination is local, then, peer after peer in ring order,
/// those whose destination that peer owns, with the peer's rows they read fetched for the
/// visit and dropped after it, in pieces of at most piece_bytes of rows. A rank holds its own
/// embeddings and one piece of a peer's rows at a time (not every remote row its pairs read),
/// and in training the piece's gradients go back to their owner before the next arrives. A
/// block's sources are rows of this rank's embeddings, its destinations rows of the same
/// (block 0) or of the peer's piece.
template <class T, class Schedule>
class pair_blocks {
 public:
  /// One block's pairs: their rows of the visited matrix, and their places in the lists.
  struct block {
    row_pairs rows;                  ///< (source row, destination row) per pair (pair_embeddings)
    std::span<const std::size_t> at;  ///< each pair's index in the lists given
  };

  /// Groups the pairs (sources[i], destinations[i]) (schedule ids) of relations[i] (empty:
  /// untyped) by the owner of their destination; a peer's rows travel in pieces of at most
  /// piece_bytes (at least one row). Collective on P ranks (the ids each block will read are
  /// sent once). Throws sar::invalid_argument for a source not on this rank or a node outside
  /// the graph.
  pair_blocks(Schedule& graph, std::span<const node_t> sources,
              std::span<const node_t> destinations, std::span<const std::int32_t> relations = {},
              std::size_t piece_bytes = link_options{}.piece_bytes)
      : graph_(graph), piece_bytes_(piece_bytes) {
    constexpr const char* where = "sar::train_link_full_batch";
    node_t total = graph.num_destinations();
    std::vector<std::int64_t> starts{0};
    int p = 1, rank = 0;
    if constexpr (ranked_schedule<Schedule>) {
      auto& comm = graph.communicator();
      p = comm.size();
      rank = comm.rank();
      first_ = graph.first_global();
      total = graph.num_global();
      starts = comm.all_to_all(std::vector<std::int64_t>(static_cast<std::size_t>(p), first_));
    }
    local_ = graph.num_destinations();
    const auto P = static_cast<std::size_t>(p);
    const auto owner_of = [&](node_t g) {
      return static_cast<std::size_t>(std::upper_bound(starts.begin(), starts.end(), g) -
                                      starts.begin() - 1);
    };
    // Blocks in visiting order: this rank's, then peer (rank + k) % P for k = 1, ..., P - 1.
    const auto block_of = [&](std::size_t owner) {
      return (owner + P - static_cast<std::size_t>(rank)) % P;
    };
    ids_.assign(P, {});
    std::vector<std::vector<std::size_t>> members(P);
    for (std::size_t i = 0; i < destinations.size(); ++i) {
      const node_t u = sources[i], v = destinations[i];
      SAR_CHECK(u >= first_ && u < first_ + local_, invalid_argument, where, ": source ", u,
                " is not a node of rank ", rank, " ([", first_, ", ", first_ + local_, "))");
      SAR_CHECK(v >= 0 && v < total, invalid_argument, where, ": node ", v, " outside the ",
                total, " nodes");
      const std::size_t b = block_of(owner_of(v));
      members[b].push_back(i);
      if (b > 0) ids_[b].push_back(v);
    }
    for (auto& ids : ids_) {
      std::sort(ids.begin(), ids.end());
      ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    }
    for (std::size_t b = 1; b < P; ++b)  // a peer's pairs by destination: its pieces in turn
      std::stable_sort(members[b].begin(), members[b].end(), [&](std::size_t i, std::size_t j) {
        return destinations[i] < destinations[j];
      });
    offsets_.assign(1, 0);
    for (std::size_t b = 0; b < P; ++b) {
      for (const std::size_t i : members[b]) {
        at_.push_back(i);
        if (!relations.empty()) relations_.push_back(relations[i]);
        source_rows_.push_back(sources[i] - first_);
        const node_t v = destinations[i];
        destination_rows_.push_back(
            b == 0 ? v - first_
                   : static_cast<node_t>(std::lower_bound(ids_[b].begin(), ids_[b].end(), v) -
                                         ids_[b].begin()));
      }
      offsets_.push_back(at_.size());
    }
    if constexpr (ranked_schedule<Schedule>) {
      // What each peer reads of this rank, in the order it lists them: asked_by_[q] rows.
      std::vector<std::int64_t> asking(P, 0);
      for (std::size_t b = 1; b < P; ++b)
        asking[(b + static_cast<std::size_t>(rank)) % P] = static_cast<std::int64_t>(ids_[b].size());
      auto& comm = graph.communicator();
      asked_by_ = comm.all_to_all(asking);
      std::vector<std::int64_t> send;
      for (std::size_t q = 0; q < P; ++q) {
        const auto& ids = ids_[block_of(q)];
        if (q != static_cast<std::size_t>(rank)) send.insert(send.end(), ids.begin(), ids.end());
      }
      std::int64_t asked = 0;
      for (const auto c : asked_by_) asked += c;
      wanted_.resize(static_cast<std::size_t>(asked));
      comm.all_to_all_v(std::span<const std::int64_t>(send), asking,
                        std::span<std::int64_t>(wanted_), asked_by_);
      for (auto& g : wanted_) {
        SAR_CHECK(g >= first_ && g < first_ + local_, invalid_argument, where,
                  ": asked for node ", g, " which rank ", rank, " does not own");
        g -= first_;
      }
      wanted_start_.assign(1, 0);
      for (const auto c : asked_by_) wanted_start_.push_back(wanted_start_.back() + c);
    }
  }

  /// Calls visit(e, block) for every block (a peer's once per piece): e (pair_embeddings)
  /// holds the rows the block's pairs read: this rank's h, and h or the peer's piece.
  /// Collective on P ranks (one exchange per piece).
  template <class Visit>
  void score(const matrix<T>& h, Visit&& visit) {
    run(h, nullptr, visit);
  }

  /// As score, with gradients: visit(e, block, de) adds the gradients of e's rows into de
  /// (pair_gradients, as a decoder's backward does); the peer's rows' go back to it and dh
  /// becomes the gradient of every local row (from this rank's pairs and the peers').
  /// Collective.
  template <class Visit>
  void train(const matrix<T>& h, matrix<T>& dh, Visit&& visit) {
    run(h, &dh, visit);
  }

 private:
  template <class Visit>
  void run(const matrix<T>& h, matrix<T>* dh, Visit& visit) {
    if (dh) dh->setZero(h.rows(), h.cols());
    // Visits the pairs [begin, end) of the lists (a block, or the part of one a piece reads),
    // their destinations rows of `destinations` counted from row `first` of the block's.
    std::vector<node_t> shifted;
    const auto call = [&](const_rows_ref<T> destinations, std::size_t begin, std::size_t end,
                          std::size_t first, matrix<T>* dd) {
      const std::size_t count = end - begin;
      std::span<const node_t> rows =
          std::span<const node_t>(destination_rows_).subspan(begin, count);
      if (first > 0) {
        shifted.assign(rows.begin(), rows.end());
        for (node_t& row : shifted) row -= static_cast<node_t>(first);
        rows = shifted;
      }
      const std::span<const std::int32_t> relations = relations_;
      const block view{
          row_pairs{std::span<const node_t>(source_rows_).subspan(begin, count), rows,
                    relations.empty() ? relations : relations.subspan(begin, count)},
          std::span<const std::size_t>(at_).subspan(begin, count)};
      const pair_embeddings<T> e(const_rows_ref<T>(h), destinations);
      if constexpr (std::is_invocable_v<Visit&, const pair_embeddings<T>&, const block&,
                                        pair_gradients<T>>)
        visit(e, view, pair_gradients<T>(*dh, *dd));
      else
        visit(e, view);
    };
    call(h, offsets_[0], offsets_[1], 0, dh);
    if constexpr (ranked_schedule<Schedule>) {
      auto& comm = graph_.communicator();
      const auto P = static_cast<std::size_t>(comm.size());
      const auto rank = static_cast<std::size_t>(comm.rank());
      const Eigen::Index d = h.cols();
      const std::size_t piece =
          std::max<std::size_t>(1, piece_bytes_ / (sizeof(T) * static_cast<std::size_t>(d)));
      // Pieces of step k: the most any rank receives or serves in it.
      std::vector<std::int64_t> pieces(P, 0);
      for (std::size_t k = 1; k < P; ++k) {
        const std::size_t most =
            std::max(ids_[k].size(), static_cast<std::size_t>(asked_by_[(rank + P - k) % P]));
        pieces[k] = static_cast<std::int64_t>((most + piece - 1) / piece);
      }
      comm.all_reduce(std::span<std::int64_t>(pieces), reduce_op::max);
      matrix<T> served_rows, peer, dpeer;  // one piece at a time
      for (std::size_t k = 1; k < P; ++k) {
        // Step k: the rows of `from` this block reads come in; mine that `to` reads go out.
        const std::size_t from = (rank + k) % P, to = (rank + P - k) % P;
        const std::size_t received = ids_[k].size();
        const auto served = static_cast<std::size_t>(asked_by_[to]);
        const auto mine = std::span<const std::int64_t>(wanted_).subspan(
            static_cast<std::size_t>(wanted_start_[to]), served);
        std::size_t begin = offsets_[k];  // the block's first pair not visited yet
        for (std::int64_t j = 0; j < pieces[k]; ++j) {
          const std::size_t first = static_cast<std::size_t>(j) * piece;
          const std::size_t in = first < received ? std::min(piece, received - first) : 0;
          const std::size_t out = first < served ? std::min(piece, served - first) : 0;
          served_rows.resize(static_cast<Eigen::Index>(out), d);
          for (std::size_t i = 0; i < out; ++i)
            served_rows.row(static_cast<Eigen::Index>(i)) = h.row(mine[first + i]);
          peer.resize(static_cast<Eigen::Index>(in), d);
          exchange(served_rows, to, peer.data(), peer.size(), from);
          std::size_t end = begin;  // the pairs reading this piece (sorted by destination)
          while (end < offsets_[k + 1] &&
                 static_cast<std::size_t>(destination_rows_[end]) < first + in)
            ++end;
          if (!dh) {
            call(peer, begin, end, first, nullptr);
            begin = end;
            continue;
          }
          dpeer.setZero(static_cast<Eigen::Index>(in), d);
          call(peer, begin, end, first, &dpeer);
          begin = end;
          // The piece's gradients back to `from`; mine from `to`, added where they belong.
          exchange(dpeer, from, served_rows.data(), served_rows.size(), to);
          for (std::size_t i = 0; i < out; ++i)
            dh->row(mine[first + i]) += served_rows.row(static_cast<Eigen::Index>(i));
        }
      }
    }
  }

  /// Sends `out` to rank `to` and receives `count` values into `in` from rank `from` (every
  /// other count 0). Collective.
  void exchange(const matrix<T>& out, std::size_t to, T* in, Eigen::Index count,
                std::size_t from) {
    auto& comm = graph_.communicator();
    const auto P = static_cast<std::size_t>(comm.size());
    std::vector<std::int64_t> send(P, 0), receive(P, 0);
    send[to] = static_cast<std::int64_t>(out.size());
    receive[from] = static_cast<std::int64_t>(count);
    comm.all_to_all_v(std::span<const T>(out.data(), static_cast<std::size_t>(out.size())), send,
                      std::span<T>(in, static_cast<std::size_t>(count)), receive);
  }

  Schedule& graph_;
  std::size_t piece_bytes_;
  node_t first_ = 0, local_ = 0;
  std::vector<std::vector<node_t>> ids_;       // per block: the peer's ids it reads, sorted
  std::vector<std::size_t> at_;                // the pairs, block after block
  std::vector<node_t> source_rows_, destination_rows_;  // their rows, aligned with at_
  std::vector<std::int32_t> relations_;        // their relations (empty: untyped), the same
  std::vector<std::size_t> offsets_;           // block b: at_[offsets_[b], offsets_[b + 1])
  std::vector<std::int64_t> asked_by_;         // per peer: how many of my rows it reads
  std::vector<std::int64_t> wanted_;           // those rows (local), peer after peer
  std::vector<std::int64_t> wanted_start_;     // where each peer's begin in wanted_
};

/// The pairs of one held-out set as one list: the positives, the shared negatives, then each
/// positive's per_source own negatives (its source and relation with each of `own`,
/// row-major). Throws sar::invalid_argument when one of positives and negatives carries
/// relations and the other, not empty, does not.
inline node_pairs held_out_pairs(const node_pairs& positives, const node_pairs& negatives,
                                 std::span<const node_t> own, int per_source) {
  SAR_CHECK(positives.size() == 0 || negatives.size() == 0 ||
                positives.typed() == negatives.typed(),
            invalid_argument, "sar::held_out_pairs: positives ",
            positives.typed() ? "with" : "without", " relations, negatives ",
            negatives.typed() ? "with" : "without");
  node_pairs all = positives;
  for (std::size_t i = 0; i < negatives.size(); ++i) all.push_from(negatives, i);
  for (std::size_t i = 0; i < positives.size(); ++i)
    for (int j = 0; j < per_source; ++j) {
      const node_t v = own[i * static_cast<std::size_t>(per_source) + static_cast<std::size_t>(j)];
      if (positives.typed()) all.push(positives.source[i], v, positives.relation[i]);
      else all.push(positives.source[i], v);
    }
  return all;
}

/// The figures over all ranks of `graph` (a schedule or sampling graph; one process without a
/// communicator) of one held-out set from the scores of its pairs in held_out_pairs' order
/// (`positives` and `negatives` of them first). Collective.
template <class T, class Graph>
link_report held_out_figures(Graph& graph, std::span<const T> scores, std::size_t positives,
                             std::size_t negatives, int per_source,
                             std::span<const int> hits_at) {
  const std::vector<double> all(scores.begin(), scores.end());
  const std::span<const double> s(all);
  const link_scores figures{s.first(positives), s.subspan(positives, negatives),
                            s.subspan(positives + negatives), per_source};
  if constexpr (requires { graph.communicator(); }) {
    return link_metrics(graph.communicator(), figures, hits_at);
  } else {
    serial_communicator one;
    return link_metrics(one, figures, hits_at);
  }
}

/// The figures of one held-out set on a schedule's embeddings h (full batch), its pairs
/// scored block by block (pair_blocks). Collective.
template <class T, class Schedule, class Decoder>
link_report evaluate_links(Schedule& graph, Decoder& decoder, const matrix<T>& h,
                           const node_pairs& positives, const node_pairs& negatives,
                           std::span<const node_t> own, int per_source,
                           const link_options& link) {
  const node_pairs pairs = held_out_pairs(positives, negatives, own, per_source);
  pair_blocks<T, Schedule> blocks(graph, pairs.source, pairs.destination, pairs.relation,
                                  link.piece_bytes);
  std::vector<T> scores(pairs.size()), some;
  blocks.score(h, [&](const pair_embeddings<T>& e, const auto& block) {
    some.resize(block.at.size());
    decoder.score(e, block.rows, some);
    for (std::size_t i = 0; i < some.size(); ++i) scores[block.at[i]] = some[i];
  });
  return held_out_figures<T>(graph, scores, positives.size(), negatives.size(), per_source,
                             link.hits_at);
}

/// Where `data`'s negatives come from: its negative_weights, or uniform over num_nodes.
/// Throws sar::invalid_argument naming `where` for weights of another count of nodes.
template <class T>
negative_distribution negatives_of(const link_data<T>& data, node_t num_nodes,
                                   const char* where) {
  if (data.negative_weights.empty()) return negative_distribution(num_nodes);
  SAR_CHECK(data.negative_weights.size() == static_cast<std::size_t>(num_nodes),
            invalid_argument, where, ": ", data.negative_weights.size(),
            " negative weights for ", num_nodes, " nodes");
  return negative_distribution(data.negative_weights);
}

/// Throws sar::invalid_argument naming `where` unless link.select_by names a figure the
/// evaluation reports: auc, hits@K for a K of hits_at, or mrr with per-source negatives.
inline void check_select_by(const link_options& link, int per_source, const char* where) {
  SAR_CHECK(names_link_figure(link.select_by, link.hits_at) &&
                (link.select_by != "mrr" || per_source > 0),
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
/// negatives (u, w) of its relation, w drawn uniformly over all nodes (or by
/// data.negative_weights) keyed by (options.seed, epoch, the pair's id);
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
  const negative_distribution negatives_from = detail::negatives_of(data, num_nodes, where);
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
  std::vector<std::int32_t> relations;  // a typed positive's negatives are of its relation
  if (data.train.typed()) relations = data.train.relation;
  for (std::size_t i = 0; i < positives; ++i) {
    std::fill_n(sources.begin() + static_cast<std::ptrdiff_t>(positives + i * k), k,
                data.train.source[i]);
    if (data.train.typed()) relations.insert(relations.end(), k, data.train.relation[i]);
  }
  auto decoder_grads = head.parameters.grads();
  std::vector<T> summed(decoder_grads.size()), scores, dscores, positive, negative, dpositive,
      dnegative;
  matrix<T> dh;
  for (int epoch = recorder.first_epoch(); recorder.trains(epoch); ++epoch) {
    epoch_stats stats;
    stats.epoch = epoch;
    layer_context ctx{.training = true, .seed = options.seed,
                      .epoch = static_cast<std::uint64_t>(epoch)};
    const auto start = std::chrono::steady_clock::now();
    std::vector<node_t> negatives = draw_negatives(
        options.seed, static_cast<std::uint64_t>(epoch), ids, link.negatives, negatives_from);
    if (!data.schedule_ids.empty())
      for (node_t& v : negatives) v = data.schedule_ids[static_cast<std::size_t>(v)];
    std::copy(negatives.begin(), negatives.end(),
              destinations.begin() + static_cast<std::ptrdiff_t>(positives));
    detail::pair_blocks<T, Schedule> blocks(graph, sources, destinations, relations,
                                            link.piece_bytes);

    const matrix<T>& h = data.nodes.forward(model, graph, ctx);
    double loss = 0;
    std::fill(summed.begin(), summed.end(), T(0));
    blocks.train(h, dh, [&](const pair_embeddings<T>& e, const auto& block,
                            pair_gradients<T> de) {
      const std::size_t count = block.at.size();
      if (count == 0) return;
      scores.resize(count);
      dscores.resize(count);
      head.decoder.score(e, block.rows, scores);
      // The loss of the block's positives (pairs [0, positives)) and negatives.
      positive.clear();
      negative.clear();
      for (std::size_t i = 0; i < count; ++i)
        (block.at[i] < positives ? positive : negative).push_back(scores[i]);
      dpositive.resize(positive.size());
      dnegative.resize(negative.size());
      loss += link_loss<T>(positive, negative, normaliser, dpositive, dnegative);
      for (std::size_t i = 0, p = 0, q = 0; i < count; ++i)
        dscores[i] = block.at[i] < positives ? dpositive[p++] : dnegative[q++];
      head.decoder.backward(e, block.rows, dscores, de);
      for (std::size_t j = 0; j < summed.size(); ++j) summed[j] += decoder_grads[j];
    });
    std::copy(summed.begin(), summed.end(), decoder_grads.begin());
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
                                        data.valid_target_negatives, data.per_source, link);
      test = detail::evaluate_links<T>(graph, head.decoder, eval, data.test, data.test_negatives,
                                       data.test_target_negatives, data.per_source, link);
      stats.evaluated = true;
    }
    detail::finish_link_epoch(recorder, stats, "", valid, test, link.select_by, out);
  }
  out.training = std::move(recorder.result());
  return out;
}

}  // namespace sar
