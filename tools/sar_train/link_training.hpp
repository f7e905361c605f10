// sar-train --task link: the encoder of --model, a decoder of sar/nn/link_decoders.hpp and the
// full-batch link-prediction loop (sar/train/link_prediction.hpp; the split's pairs in the
// schedule's numbering) or, with --minibatch, the edge-minibatch loop
// (sar/train/link_minibatch.hpp; pairs in dataset ids), on one process or on this rank's part.
// Included by the translation units that compile the runs (single_*.cpp, distributed_*.cpp).
#pragma once

#include <algorithm>
#include <array>
#include <functional>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include "sar/comm/mpi.hpp"
#include "sar/core/sparse_rows.hpp"
#include "sar/core/type_list.hpp"
#include "sar/distributed/distributed_schedule.hpp"
#include "sar/graph/edge_split.hpp"
#include "sar/graph/io/link_split.hpp"
#include "sar/optim/adam.hpp"
#include "sar/sampling/distributed_sampling_graph.hpp"
#include "sar/train/link_minibatch.hpp"
#include "sar/train/link_prediction.hpp"
#include "sar/train/model_file.hpp"
#include "sar/train/models.hpp"
#include "sar/version.hpp"
#include "../progress.hpp"
#include "sar_train.hpp"
#include "training.hpp"

namespace sar_train {

/// Calls f.template operator()<D>() for the decoder D named `name` (for element type T).
/// Throws sar::invalid_argument for an unknown name (--decoder checks the name first).
template <class T, class F>
void with_decoder(const std::string& name, F&& f) {
  const bool found = sar::with_first(
      sar::link_decoders<T>{}, [&]<class D>() { return D::name == name; },
      [&]<class D>() { f.template operator()<D>(); });
  SAR_CHECK(found, sar::invalid_argument, "sar-train: --decoder ", name);
}

/// This rank's link data for its input features, as the run reads them (dense, sparse or
/// bf16 rows: run_features).
template <class T>
using link_data_for = std::function<sar::link_data<T>(sar::node_data<T>)>;

/// Trains the encoder `config` and the decoder p.link.decoder over `graph`: a schedule (full
/// batch; pairs in its numbering) or a minibatch graph (--minibatch; pairs in dataset ids), on
/// the features of `inputs` (emptied) and this rank's pairs, data_of(the features). Returns
/// the run's metrics: valid_/test_ auc, hits@K, mrr at the best epoch (by
/// p.link.select_by), best_epoch, train_loss per epoch, the median epoch time and the peak
/// memory. Collective.
template <class T, class Graph>
nlohmann::json train_links(const program_options& p, const sar::model_config& config,
                           Graph& graph, local_data& inputs, const link_data_for<T>& data_of,
                           const std::string& name, sar::mpi_communicator& comm) {
  constexpr bool sampled = sar::minibatch_graph<Graph>;
  // The model runs on the graph itself, or on the schedules of sampled minibatches.
  using Schedule = std::conditional_t<sampled, sar::sampled_minibatch::schedule_type, Graph>;
  const bool root = comm.rank() == 0;
  sar::node_t nodes = 0;
  if constexpr (sampled) nodes = graph.num_nodes();
  else if constexpr (requires { graph.num_global(); }) nodes = graph.num_global();
  else nodes = graph.num_destinations();
  SAR_CHECK(p.link.negatives <= nodes, sar::invalid_argument, "sar-train: --negatives ",
            p.link.negatives, " is more than the graph's ", nodes, " nodes");
  const Eigen::Index width = config.hidden;  // the embeddings
  const bool read_sparse = inputs.sparse_features.num_cols > 0;  // a dataset's or a store's
  const Eigen::Index feature_dim =
      read_sparse ? inputs.sparse_features.cols() : inputs.features.cols();
  const Eigen::Index local_nodes =
      read_sparse ? inputs.sparse_features.rows() : inputs.features.rows();
  auto model = sar::make_model<T, Schedule>(config, feature_dim, width, p.seed);
  const run_features<T> input = run_features<T>::of(p, inputs, model, comm);
  const sar::link_data<T> data = data_of(
      {.features = input.dense, .sparse_features = input.sparse ? &*input.sparse : nullptr,
       .bf16_features = input.bf16 ? &*input.bf16 : nullptr});
  comm.broadcast(model.parameters().values(), 0);
  hold_embedding_rows(config, model, graph, local_nodes);
  auto optimiser = sar::make_optimiser(config, model);
  sar::train_options options{.epochs = config.epochs, .patience = config.patience,
                             .seed = p.seed, .log_progress = false,
                             .csv_log = root ? p.csv_log : "", .evaluate_every = p.eval_every,
                             .max_loss = p.max_loss, .resume = nullptr, .after_epoch = {}};
  sar::link_options link{.negatives = p.link.negatives, .hits_at = p.link.hits_at,
                         .select_by = p.link.select_by};
  sar_programs::epoch_progress progress(p.log_every, config.epochs, root && !p.quiet);
  const auto on_epoch = [&](const sar::epoch_stats& e) {
    progress.report(e.epoch, sar::epoch_line(e, e.seconds), e.seconds);
  };
  nlohmann::json metrics{{"dataset", name}, {"model", config.family}, {"task", "link"},
                         {"decoder", p.link.decoder}, {"negatives", p.link.negatives},
                         {"negative_sampler",
                          sar_programs::name_of(sar_programs::negative_sampler_names,
                                                p.link.sampler)},
                         {"select_by", p.link.select_by}, {"ranks", comm.size()}};
  with_decoder<T>(p.link.decoder, [&]<class D>() {
    sar::link_head<D, sar::adam<T>> head(
        {width, sar::link_relations(config)},
        sar::adam<T>(sar::adam_options{.learning_rate = config.learning_rate}), p.seed + 1);
    comm.broadcast(head.parameters.values(), 0);
    // --save-model: the encoder's and the decoder's parameters of the best epoch so far.
    best_parameters best(model);
    std::vector<T> best_decoder;
    if (!p.save_model.empty())
      options.after_epoch = [&](const sar::train_result& r) {
        best.keep_if_best(r.best_epoch, r.epochs_done());
        if (r.best_epoch >= 0 && r.best_epoch + 1 == r.epochs_done())
          best_decoder.assign(head.parameters.values().begin(), head.parameters.values().end());
      };
    sar::link_result r;
    if constexpr (sampled) {
      const sar::minibatch_options minibatch = minibatch_options_of(p, config);
      r = sar::train_link_minibatch(model, head, graph, optimiser, data, options, link, minibatch,
                                    on_epoch);
      metrics["minibatch"] = p.minibatch;
      metrics["fanouts"] = minibatch.sampler.fanouts;
    } else {
      r = sar::train_link_full_batch(model, head, graph, optimiser, data, options, link,
                                     on_epoch);
    }
    std::vector<double> losses, seconds;
    std::int64_t peak = 0;
    for (const auto& e : r.training.history) {
      losses.push_back(e.train_loss);
      seconds.push_back(e.seconds);
      peak = std::max(peak, e.peak_memory_bytes);
    }
    comm.all_reduce(std::span<std::int64_t>(&peak, 1), sar::reduce_op::max);
    metrics["train_loss"] = losses;
    metrics["best_epoch"] = nullptr;
    if (r.training.best_epoch >= 0) metrics["best_epoch"] = r.training.best_epoch;
    for (const auto& [key, value] : r.valid.named()) metrics["valid_" + key] = value;
    for (const auto& [key, value] : r.test.named()) metrics["test_" + key] = value;
    metrics["epoch_seconds_median"] = sar::median(std::move(seconds));
    metrics["peak_memory_bytes"] = peak;
    if (!p.save_model.empty()) {
      best.restore();  // the best epoch's (every rank kept the same)
      if (!best_decoder.empty())
        std::copy(best_decoder.begin(), best_decoder.end(), head.parameters.values().begin());
      nlohmann::json about = metrics;
      about.erase("train_loss");
      about["sar_version"] = SAR_VERSION_STRING;
      const sar::model_description description{
          .config = config, .input_dim = feature_dim, .output_dim = width,
          .decoder = p.link.decoder, .row_normalise_features = p.row_normalised,
          .about = about};
      sar::save_model(comm, p.save_model, model, description, 0, &head.parameters);
      if (root && !p.quiet) sar::log_info("saved the model to " + p.save_model);
    }
  });
  return metrics;
}

namespace detail {
/// Every rank's `mine`, joined in rank order, on every rank. Collective.
inline std::vector<std::int64_t> joined(sar::mpi_communicator& comm,
                                        std::span<const std::int64_t> mine) {
  const auto P = static_cast<std::size_t>(comm.size());
  std::vector<std::int64_t> send;
  for (std::size_t q = 0; q < P; ++q) send.insert(send.end(), mine.begin(), mine.end());
  const std::vector<std::int64_t> counts(P, static_cast<std::int64_t>(mine.size()));
  const std::vector<std::int64_t> sizes = comm.all_to_all(counts);
  std::int64_t total = 0;
  for (const auto c : sizes) total += c;
  std::vector<std::int64_t> all(static_cast<std::size_t>(total));
  comm.all_to_all_v(std::span<const std::int64_t>(send), counts, std::span<std::int64_t>(all),
                    sizes);
  return all;
}

/// What --negative-sampler asks for (sar::link_data::negative_weights): empty for uniform;
/// for degree, every node's in-degree^0.75 by dataset id, from this rank's rows of the graph
/// the model aggregates over (`ids`: their dataset ids; empty: row r is node first + r).
/// Collective.
inline std::vector<double> negative_weights(const program_options& p, const sar::csr& rows,
                                            std::span<const sar::node_t> ids, sar::node_t first,
                                            sar::node_t n, sar::mpi_communicator& comm) {
  if (p.link.sampler == sar_programs::negative_sampler::uniform) return {};
  std::vector<std::int64_t> mine;  // (dataset id, in-degree) per row
  for (sar::node_t r = 0; r < rows.num_rows; ++r)
    mine.insert(mine.end(),
                {ids.empty() ? first + r : ids[static_cast<std::size_t>(r)], rows.degree(r)});
  std::vector<sar::node_t> degrees(static_cast<std::size_t>(n), 0);
  const std::vector<std::int64_t> all = joined(comm, mine);
  for (std::size_t i = 0; i < all.size(); i += 2) degrees[static_cast<std::size_t>(all[i])] = all[i + 1];
  return sar::degree_weights(degrees);
}

/// Moves the pairs of `split` (this rank's share of its rows, from first_rows in valid_edge.npy
/// and test_edge.npy; schedule ids) to the ranks owning their sources (owner_of(node)), each
/// train pair with its id and each held-out positive with its per-source negatives, with
/// their relations if any rank's are typed, and returns what this rank receives. `checked`
/// receives the held-out positives with an end this rank owns (for the leak check), `rows`
/// their rows of the two files. Collective.
template <class OwnerOf>
sar::link_split route_to_sources(sar::link_split split, OwnerOf&& owner_of,
                                 sar::link_split& checked,
                                 std::array<std::vector<std::int64_t>, 2>& rows,
                                 std::array<std::int64_t, 2> first_rows,
                                 sar::mpi_communicator& comm) {
  const auto P = static_cast<std::size_t>(comm.size());
  const auto k = static_cast<std::size_t>(split.per_source);
  sar::link_split out;
  out.per_source = split.per_source;
  std::int64_t typed = split.typed();
  comm.all_reduce(std::span<std::int64_t>(&typed, 1), sar::reduce_op::max);
  // A pair travels as (u, v) or (u, v, relation).
  const std::size_t pair_width = typed ? 3 : 2;
  const auto put = [&](std::vector<std::int64_t>& to, const sar::node_pairs& pairs, std::size_t i) {
    to.insert(to.end(), {pairs.source[i], pairs.destination[i]});
    if (typed) to.push_back(pairs.relation_of(i));
  };
  const auto take = [&](sar::node_pairs& into, const std::int64_t* pair) {
    if (typed) into.push(pair[0], pair[1], static_cast<std::int32_t>(pair[2]));
    else into.push(pair[0], pair[1]);
  };
  // Train pairs: (id, pair) to u's owner.
  std::vector<std::vector<std::int64_t>> send(P);
  for (std::size_t i = 0; i < split.train.size(); ++i) {
    auto& to = send[owner_of(split.train.source[i])];
    to.push_back(split.train_ids.empty() ? static_cast<sar::edge_t>(i) : split.train_ids[i]);
    put(to, split.train, i);
  }
  split.train = {};
  split.train_ids = {};
  for (const auto& from : sar::all_to_all_vectors(comm, send))
    for (std::size_t at = 0; at < from.size(); at += 1 + pair_width) {
      out.train_ids.push_back(from[at]);
      take(out.train, &from[at + 1]);
    }
  // Held-out positives: (row, scored, pair, its k negatives) to u's owner (scored 1) and, if
  // another, to v's (scored 0: checked for leaks only).
  const auto held_out = [&](const sar::node_pairs& pairs, const std::vector<sar::node_t>& targets,
                            std::int64_t first_row, sar::node_pairs& scored,
                            std::vector<sar::node_t>& scored_targets, sar::node_pairs& check,
                            std::vector<std::int64_t>& check_rows) {
    std::vector<std::vector<std::int64_t>> to(P);
    for (std::size_t i = 0; i < pairs.size(); ++i) {
      const auto u = pairs.source[i], v = pairs.destination[i];
      const std::int64_t row = first_row + static_cast<std::int64_t>(i);
      auto& scoring = to[owner_of(u)];
      scoring.insert(scoring.end(), {row, 1});
      put(scoring, pairs, i);
      scoring.insert(scoring.end(), targets.begin() + static_cast<std::ptrdiff_t>(i * k),
                     targets.begin() + static_cast<std::ptrdiff_t>((i + 1) * k));
      if (owner_of(v) != owner_of(u)) {
        auto& checking = to[owner_of(v)];
        checking.insert(checking.end(), {row, 0});
        put(checking, pairs, i);
      }
    }
    for (const auto& from : sar::all_to_all_vectors(comm, to))
      for (std::size_t at = 0; at < from.size();) {
        const bool mine = from[at + 1] == 1;
        const std::int64_t* pair = &from[at + 2];
        take(check, pair);
        check_rows.push_back(from[at]);
        at += 2 + pair_width;
        if (mine) {
          take(scored, pair);
          scored_targets.insert(scored_targets.end(),
                                from.begin() + static_cast<std::ptrdiff_t>(at),
                                from.begin() + static_cast<std::ptrdiff_t>(at + k));
          at += k;
        }
      }
  };
  held_out(split.valid, split.valid_target_negatives, first_rows[0], out.valid,
           out.valid_target_negatives, checked.valid, rows[0]);
  held_out(split.test, split.test_target_negatives, first_rows[1], out.test,
           out.test_target_negatives, checked.test, rows[1]);
  // Shared negatives: the pair to u's owner.
  for (auto [pairs, into] : {std::pair{&split.valid_negatives, &out.valid_negatives},
                             std::pair{&split.test_negatives, &out.test_negatives}}) {
    std::vector<std::vector<std::int64_t>> to(P);
    for (std::size_t i = 0; i < pairs->size(); ++i) put(to[owner_of(pairs->source[i])], *pairs, i);
    for (const auto& from : sar::all_to_all_vectors(comm, to))
      for (std::size_t at = 0; at < from.size(); at += pair_width) take(*into, &from[at]);
  }
  return out;
}

/// Refuses (on every rank alike) a held-out positive of `split` that is an edge of the graph
/// whose rows are `rows_of` (the in-edges of this rank's nodes, ids as the split's; row_of(v):
/// the row of node v, or -1 if it is not here): each rank looks at the pairs with an end among
/// its rows. file_rows: each pair's row of valid_edge.npy and test_edge.npy (empty: its
/// index). Collective.
template <class RowOf>
void refuse_leaks(const sar::link_split& split, const sar::csr& rows_of, RowOf&& row_of,
                  const program_options& p, sar::mpi_communicator& comm,
                  std::array<std::span<const std::int64_t>, 2> file_rows = {}) {
  if (p.link.allow_leak) return;
  const auto joined_here = [&](sar::node_t u, sar::node_t v) {  // u in the row of v, if mine
    const sar::node_t r = row_of(v);
    if (r < 0) return false;
    const auto row = rows_of.row(r);
    return std::find(row.begin(), row.end(), u) != row.end();
  };
  constexpr std::int64_t none = std::numeric_limits<std::int64_t>::max();
  const std::array<std::pair<const sar::node_pairs*, const char*>, 2> sets{
      std::pair{&split.valid, "valid_edge.npy"}, std::pair{&split.test, "test_edge.npy"}};
  for (std::size_t set = 0; set < 2; ++set) {
    const auto& [pairs, file] = sets[set];
    const auto row_in_file = [&](std::size_t i) {
      return file_rows[set].empty() ? static_cast<std::int64_t>(i) : file_rows[set][i];
    };
    // The first leaking row over all ranks, then its pair from the rank that has it.
    std::int64_t first_leak = none, pair[2] = {-1, -1};
    for (std::size_t i = 0; i < pairs->size(); ++i) {
      const sar::node_t u = pairs->source[i], v = pairs->destination[i];
      if (row_in_file(i) < first_leak && (joined_here(u, v) || joined_here(v, u))) {
        first_leak = row_in_file(i);
        pair[0] = u;
        pair[1] = v;
      }
    }
    const std::int64_t mine = first_leak;
    comm.all_reduce(std::span<std::int64_t>(&first_leak, 1), sar::reduce_op::min);
    if (first_leak == none) continue;
    if (mine != first_leak) pair[0] = pair[1] = -1;
    comm.all_reduce(std::span<std::int64_t>(pair), sar::reduce_op::max);
    SAR_CHECK(false, sar::invalid_argument, "sar-train: ",
              sar::link_split_dir(p.split_home(), p.link.split).string(), "/", file, ", row ",
              first_leak, ": held-out pair (", pair[0], ", ", pair[1],
              ") is an edge of the message-passing graph (a leak; --allow-leak keeps it for "
              "datasets whose convention is to)");
  }
}
}  // namespace detail

/// One process: link prediction on `dataset` (its graph the message-passing graph, held-out
/// edges removed) with `split`. Refuses leaks unless --allow-leak.
template <class T>
nlohmann::json train_links_single(const program_options& p, const sar::model_config& config,
                                  sar::graph_dataset& dataset, sar::link_split split,
                                  sar::mpi_communicator& comm) {
  const sar::node_t n = dataset.num_nodes();
  detail::refuse_leaks(split, dataset.graph,
                       [&](sar::node_t v) { return v < n ? v : sar::node_t{-1}; }, p, comm);
  sar::prepare_model_graph(config, dataset.graph, dataset.edge_features);
  const std::vector<double> weights = detail::negative_weights(p, dataset.graph, {}, 0, n, comm);
  const link_data_for<T> data_of = [&](sar::node_data<T> nodes) {
    sar::link_data<T> data = sar::link_data_of<T>(split, nodes);
    split = {};  // its pairs are the data's now
    data.negative_weights = weights;
    return data;
  };
  local_data inputs = local_data::from(dataset, dataset.name, n);
  if (p.minibatch > 0) {
    sar::sampling_graph sampled(dataset.graph, dataset.edge_features, dataset.edge_types);
    return train_links<T>(p, config, sampled, inputs, data_of, dataset.name, comm);
  }
  sar::local_schedule schedule(std::move(dataset.graph), std::move(dataset.edge_features),
                               std::move(dataset.edge_types));
  return train_links<T>(p, config, schedule, inputs, data_of, dataset.name, comm);
}

namespace detail {
/// The global id of every dataset id, from the original ids of each part's rows sent by one
/// rank per part (`sends`); empty when the parts number the nodes as the dataset does.
/// Collective.
inline std::vector<sar::node_t> global_ids(const sar::graph_part& part, bool sends,
                                           sar::mpi_communicator& comm) {
  std::int64_t relabelled = !part.original_ids.empty();  // an empty part has none either way
  comm.all_reduce(std::span<std::int64_t>(&relabelled, 1), sar::reduce_op::max);
  if (!relabelled) return {};
  const std::vector<std::int64_t> all =
      joined(comm, sends ? std::span<const std::int64_t>(part.original_ids)
                         : std::span<const std::int64_t>());
  std::vector<sar::node_t> global_of(static_cast<std::size_t>(part.book.num_nodes()));
  for (std::size_t g = 0; g < all.size(); ++g)
    global_of[static_cast<std::size_t>(all[g])] = static_cast<sar::node_t>(g);
  return global_of;
}

/// Sends the pairs of `split` (this rank's share of its rows) to the ranks that score them,
/// owner_of(source) (route_to_sources), and refuses a leak where either end of a held-out
/// positive lives (refuse_leaks over `rows`, the in-edges of this rank's nodes; row_of as
/// there, in the split's ids). Returns this rank's pairs. Collective.
template <class OwnerOf, class RowOf>
sar::link_split share_of_split(sar::link_split split, OwnerOf&& owner_of, const sar::csr& rows,
                               RowOf&& row_of, const program_options& p,
                               sar::mpi_communicator& comm) {
  // The row of this rank's first pair in valid_edge.npy and in test_edge.npy.
  const std::array<std::int64_t, 2> mine{static_cast<std::int64_t>(split.valid.size()),
                                         static_cast<std::int64_t>(split.test.size())};
  const std::vector<std::int64_t> sizes = joined(comm, mine);  // rank after rank
  std::array<std::int64_t, 2> first_rows{};
  for (std::size_t at = 0; at < 2 * static_cast<std::size_t>(comm.rank()); ++at)
    first_rows[at % 2] += sizes[at];
  sar::link_split checked;
  std::array<std::vector<std::int64_t>, 2> checked_rows;
  split = route_to_sources(std::move(split), owner_of, checked, checked_rows, first_rows, comm);
  refuse_leaks(checked, rows, row_of, p, comm, {checked_rows[0], checked_rows[1]});
  return split;
}
}  // namespace detail

/// P ranks: link prediction on this rank's part (its graph in the model's form:
/// sar::prepare_model_graph) with `split` (this rank's share of its rows, dataset ids), sent
/// to the ranks that score the pairs: full batch, renumbered as the parts number the nodes, to
/// the ranks owning their sources; --minibatch, in dataset ids (sampled by them), to the first
/// replica of the part holding the source. Collective.
template <class T>
nlohmann::json train_links_distributed(const program_options& p, const sar::model_config& config,
                                       sar::graph_part& part, const std::string& name,
                                       sar::link_split split, sar::mpi_communicator& comm) {
  const sar::node_t n = part.book.num_nodes();
  const int replication = p.minibatch > 0 ? p.replication : 1;
  const std::vector<sar::node_t> global_of =
      detail::global_ids(part, comm.rank() % replication == 0, comm);
  const auto global = [&](sar::node_t id) {
    return global_of.empty() ? id : global_of[static_cast<std::size_t>(id)];
  };
  const std::vector<double> weights = detail::negative_weights(
      p, part.in_edges, part.original_ids, part.first_global(), n, comm);
  if (p.minibatch > 0) {
    sar::distributed_sampling_graph<sar::mpi_communicator> graph(
        comm, part, p.replication, p.sampler == sar::sampler_kind::layer_wise);
    split = detail::share_of_split(
        std::move(split),
        [&](sar::node_t id) {
          return static_cast<std::size_t>(part.book.owner(global(id)) * replication);
        },
        graph.local_rows(), [&](sar::node_t v) { return graph.local_row(v); }, p, comm);
    local_data inputs = local_data::from(part, name, n);
    return train_links<T>(p, config, graph, inputs, [&](sar::node_data<T> nodes) {
      sar::link_data<T> data = sar::link_data_of<T>(split, nodes, graph);
      split = {};  // this rank's share is all the run reads
      data.negative_weights = weights;
      return data;
    }, name, comm);
  }
  const sar::node_t first = part.first_global(), rows = part.in_edges.num_rows;
  if (!global_of.empty()) {
    const auto renumber = [&](std::vector<sar::node_t>& ids) {
      for (auto& id : ids) id = global(id);
    };
    for (sar::node_pairs* pairs : {&split.train, &split.valid, &split.test, &split.valid_negatives,
                                   &split.test_negatives}) {
      renumber(pairs->source);
      renumber(pairs->destination);
    }
    renumber(split.valid_target_negatives);
    renumber(split.test_target_negatives);
  }
  split = detail::share_of_split(
      std::move(split), [&](sar::node_t g) { return static_cast<std::size_t>(part.book.owner(g)); },
      part.in_edges,
      [&](sar::node_t v) { return v >= first && v - first < rows ? v - first : sar::node_t{-1}; },
      p, comm);
  sar::distributed_schedule<sar::mpi_communicator> graph(comm, part);
  part.in_edges = {};
  local_data inputs = local_data::from(part, name, n);
  return train_links<T>(p, config, graph, inputs, [&](sar::node_data<T> nodes) {
    sar::link_data<T> data = sar::link_data_of<T>(split, nodes, first, rows);
    split = {};  // this rank's share is all the run reads
    data.schedule_ids = global_of;  // negatives drawn by dataset id, as on one process
    data.negative_weights = weights;
    return data;
  }, name, comm);
}

}  // namespace sar_train
