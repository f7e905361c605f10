// Minibatch training on sampled neighbourhoods, and layer-wise full-neighbourhood inference.
//
// An epoch shuffles the training nodes (a permutation keyed by (seed, epoch): the same on any
// thread count), cuts them into minibatches of batch_size seeds (the last may be smaller),
// samples `bulk` minibatches at a time (sar/sampling/samplers.hpp), gathers the feature rows
// of the union of their input nodes once (in groups of at most gather_rows rows; features
// stored as bf16 travel as bf16 and are decoded where they arrive), and runs
// for each minibatch forward, the task's loss of its seeds (sar/nn/task.hpp: cross-entropy,
// mean squared error or binary cross-entropy) normalised by its size, backward and one
// optimiser step. Random numbers of the layers (dropout) are keyed by
// the step number in place of the epoch (layer_context::epoch = epoch * minibatches + m), so
// the minibatches of an epoch draw different masks.
//
// Row tables (embeddings of featureless node types, sar/nn/parameters.hpp) are held by the
// ranks that hold their nodes; each step borrows the rows of its input nodes from there and
// returns their gradients, which the holders sum in rank order before the optimiser steps
// (DGL's DistEmbedding does the same), so P ranks train the rows one process trains.
//
// Evaluation is layer-wise inference over all nodes: the model runs stage by stage (one graph
// layer and the layers after it, model.stage_starts()), each stage over blocks of
// inference_rows destinations with their whole in-neighbourhood, so it needs two activations
// of the local nodes at a time, never a sampled tree; GCN sees the whole graph's degrees, so
// the result equals a full-batch forward.
//
// The same loop runs on one process (sampling_graph) and data-parallel on P ranks
// (distributed_sampling_graph, docs/sampling.md), through the minibatch_graph concept below.
#pragma once

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <functional>
#include <optional>
#include <tuple>
#include <span>
#include <type_traits>
#include <unordered_set>
#include <vector>

#include "sar/core/error.hpp"
#include "sar/core/log.hpp"
#include "sar/core/memory.hpp"
#include "sar/core/rng.hpp"
#include "sar/core/types.hpp"
#include "sar/graph/builders.hpp"
#include "sar/graph/csr.hpp"
#include "sar/nn/layer.hpp"
#include "sar/nn/loss.hpp"
#include "sar/nn/metrics.hpp"
#include "sar/nn/parameters.hpp"
#include "sar/nn/task.hpp"
#include "sar/sampling/minibatch.hpp"
#include "sar/sampling/samplers.hpp"
#include "sar/train/full_batch.hpp"

namespace sar {

/// Settings of minibatch training.
struct minibatch_options {
  node_t batch_size = 64;   ///< seeds per minibatch (>= 1, at most the training nodes)
  sampler_options sampler{}; ///< kind and fanouts (one per graph layer); its seed keys the darts
  int bulk = 1;             ///< minibatches sampled at once (>= 1)
  /// Most input rows fetched at once (0: no bound): the minibatches of a bulk fetch the union
  /// of their input nodes' feature rows once, in consecutive groups whose union stays within
  /// this bound on every rank (a group holds at least one minibatch).
  node_t gather_rows = 0;
  node_t inference_rows = 8192;  ///< destinations per block of layer-wise inference
};

/// The keys of the training permutations: node v of `epoch` goes where its key (then its id)
/// sorts it. shuffled_nodes and shuffled_shares draw the same order from them.
class shuffle_keys {
 public:
  /// The keys of `seed`.
  explicit shuffle_keys(std::uint64_t seed) : rng_(seed, rng_stream::sampling, 1) {}
  /// Node v's key in `epoch`.
  std::uint64_t operator()(std::uint64_t epoch, node_t v) const {
    return rng_.bits(epoch, static_cast<std::uint64_t>(v))[0];
  }

 private:
  counter_rng rng_;
};

/// `nodes` in the order of `epoch`: a permutation keyed by (seed, epoch, node id), so it does
/// not depend on how the nodes are listed or partitioned.
inline std::vector<node_t> shuffled_nodes(std::span<const node_t> nodes, std::uint64_t seed,
                                          std::uint64_t epoch) {
  const shuffle_keys key_of(seed);
  std::vector<std::pair<std::uint64_t, node_t>> keyed;
  keyed.reserve(nodes.size());
  for (node_t v : nodes) keyed.emplace_back(key_of(epoch, v), v);
  std::sort(keyed.begin(), keyed.end());
  std::vector<node_t> order;
  order.reserve(keyed.size());
  for (const auto& [key, v] : keyed) order.push_back(v);
  return order;
}

/// This rank's part of an epoch's minibatches: the training items (nodes, or a link
/// minibatch's edges) of all ranks in the order shuffled_nodes gives them, cut into
/// minibatches of batch_size items (the last may be smaller), and minibatch b's items cut
/// into `ranks` consecutive shares, share r for rank r.
struct minibatch_shares {
  node_t train_count = 0;          ///< training items over all ranks
  node_t batch_size = 1;           ///< items per minibatch (the last may have fewer)
  int rank = 0;                    ///< this rank
  int ranks = 1;                   ///< ranks sharing each minibatch
  /// Values per item in `nodes`: 1 for a node; an edge travels as (id, source, destination).
  int width = 1;
  std::vector<node_t> nodes;       ///< this rank's shares' items, minibatch after minibatch
  /// This rank's share of minibatch b: items [start[b], start[b + 1]) of nodes.
  std::vector<std::size_t> start;

  /// Number of minibatches.
  node_t batches() const { return (train_count + batch_size - 1) / batch_size; }
  /// Seeds of minibatch b (all ranks' shares).
  node_t seeds(node_t b) const { return std::min(batch_size, train_count - b * batch_size); }
  /// Where share r of a minibatch of `size` seeds begins within it (share r ends where r + 1
  /// begins; share `ranks` begins at `size`).
  node_t share_begin(node_t size, int r) const { return size * r / ranks; }
  /// This rank's share of minibatch b (width values per item).
  std::span<const node_t> share(node_t b) const {
    const auto w = static_cast<std::size_t>(width);
    return std::span<const node_t>(nodes).subspan(start[b] * w, (start[b + 1] - start[b]) * w);
  }
  /// Copies of this rank's shares of minibatches first, ..., first + count - 1.
  std::vector<std::vector<node_t>> shares(node_t first, node_t count) const {
    std::vector<std::vector<node_t>> out;
    for (node_t b = first; b < first + count; ++b) out.emplace_back(share(b).begin(), share(b).end());
    return out;
  }
};

/// The minibatch shares of `epoch` (minibatch_shares) from this rank's training items
/// `training` (`width` values per item, the first its id, which keys its place; every rank's
/// ids disjoint from the others', train_count items over all ranks): the permutation keyed by
/// (seed, epoch, id) sorted across ranks by key range, so no rank holds more than its share
/// of the items. Requires batch_size >= 1. Collective on a distributed graph (three
/// all-to-alls); one process: its shares are the whole minibatches.
template <class Graph>
minibatch_shares shuffled_shares(Graph& graph, std::span<const node_t> training,
                                 node_t train_count, node_t batch_size, std::uint64_t seed,
                                 std::uint64_t epoch, int width = 1) {
  minibatch_shares out;
  out.train_count = train_count;
  out.batch_size = batch_size;
  out.rank = graph.rank();
  out.ranks = graph.size();
  out.width = width;
  const auto ranks = static_cast<std::size_t>(out.ranks);
  const auto w = static_cast<std::size_t>(width);
  // 1. (key, item) to the rank of the key's range: keys are uniform, so ranges hold even
  //    counts.
  const shuffle_keys key_of(seed);
  std::vector<std::vector<std::int64_t>> by_range(ranks);
  for (std::size_t i = 0; i < training.size(); i += w) {
    const std::uint64_t key = key_of(epoch, training[i]);
    const auto range = static_cast<std::size_t>(((key >> 32) * ranks) >> 32);
    by_range[range].push_back(std::bit_cast<std::int64_t>(key));
    by_range[range].insert(by_range[range].end(), training.begin() + static_cast<std::ptrdiff_t>(i),
                           training.begin() + static_cast<std::ptrdiff_t>(i + w));
  }
  // Each item as (key, id, where its values are in `values`).
  std::vector<std::int64_t> values;
  std::vector<std::tuple<std::uint64_t, node_t, std::size_t>> keyed;
  for (const auto& from : graph.all_to_all(by_range))
    for (std::size_t i = 0; i < from.size(); i += 1 + w) {
      keyed.emplace_back(std::bit_cast<std::uint64_t>(from[i]), from[i + 1], values.size());
      values.insert(values.end(), from.begin() + static_cast<std::ptrdiff_t>(i + 1),
                    from.begin() + static_cast<std::ptrdiff_t>(i + 1 + w));
    }
  by_range = {};
  std::sort(keyed.begin(), keyed.end());
  // 2. The place of this rank's first node in the global order: the counts of lower ranges.
  std::int64_t first = 0;
  {
    const auto counts = graph.all_to_all(std::vector<std::vector<std::int64_t>>(
        ranks, std::vector<std::int64_t>{static_cast<std::int64_t>(keyed.size())}));
    for (std::size_t r = 0; r < static_cast<std::size_t>(out.rank); ++r) first += counts[r][0];
  }
  // 3. Each node to the rank whose share holds its place; each rank receives its nodes in
  //    order (ranges ascend with the rank).
  std::vector<std::vector<std::int64_t>> to_share(ranks);
  for (std::size_t i = 0; i < keyed.size(); ++i) {
    const std::int64_t place = first + static_cast<std::int64_t>(i);
    const node_t b = place / batch_size;
    const node_t within = place - b * batch_size, size = out.seeds(b);
    // The last r with share_begin(size, r) <= within.
    const auto r = static_cast<std::size_t>(((within + 1) * out.ranks + size - 1) / size - 1);
    const auto at = values.begin() + static_cast<std::ptrdiff_t>(std::get<2>(keyed[i]));
    to_share[r].insert(to_share[r].end(), at, at + static_cast<std::ptrdiff_t>(w));
  }
  keyed = {};
  values = {};
  for (const auto& from : graph.all_to_all(to_share))
    out.nodes.insert(out.nodes.end(), from.begin(), from.end());
  const node_t batches = out.batches();
  out.start.assign(static_cast<std::size_t>(batches) + 1, 0);
  for (node_t b = 0; b < batches; ++b) {
    const node_t size = out.seeds(b);
    out.start[b + 1] = out.start[b] + static_cast<std::size_t>(
        out.share_begin(size, out.rank + 1) - out.share_begin(size, out.rank));
  }
  SAR_CHECK(out.start[batches] * w == out.nodes.size(), error, "sar::shuffled_shares: rank ",
            out.rank, " received ", out.nodes.size() / w, " items for shares of ",
            out.start[batches], " (are the ranks' training items disjoint?)");
  return out;
}

/// What the minibatch loop and layer-wise inference read of a graph: a sampling graph
/// (sampling_graph_of) that also tells where the node data lives: sar::sampling_graph (one
/// process) or sar::distributed_sampling_graph (a rank's part; its calls are collective).
/// edge_features() and edge_types() are the edge table of local_rows() (a row and a relation
/// per entry; 0 x 0 and empty: none), has_edge_table() whether there is one (the same on every
/// rank), gather_edges(ids) the table's rows of any edge ids the sampler gave,
/// training_nodes(split) this rank's training nodes (the ranks' disjoint), all_to_all(per_peer)
/// a vector to each rank and back. With row tables (embeddings) the graph also needs
/// gather_rows(ids, cols, row_of) and scatter_rows(ids, rows, add) (detail::borrowed_rows; both
/// graphs have them).
template <class G>
concept minibatch_graph = sampling_graph_of<G> && requires(G& g, const G& cg) {
  { cg.rank() } -> std::same_as<int>;
  { cg.size() } -> std::same_as<int>;
  { cg.counts_in_evaluation() } -> std::same_as<bool>;
  { cg.num_local() } -> std::same_as<node_t>;
  { cg.local_rows() } -> std::same_as<const csr&>;
  { cg.local_ids() } -> std::same_as<std::span<const node_t>>;
  { cg.local_row(node_t{0}) } -> std::same_as<node_t>;
  { cg.edge_features() } -> std::same_as<const matrixf&>;
  { cg.edge_types() } -> std::same_as<std::span<const std::int32_t>>;
  { cg.has_edge_table() } -> std::same_as<bool>;
  { g.gather_edges(std::span<const edge_t>{}) } -> std::same_as<edge_rows>;
  { g.training_nodes(std::span<const node_split>{}) } -> std::same_as<std::vector<node_t>>;
  { g.all_to_all(std::vector<std::vector<std::int64_t>>{}) }
      -> std::same_as<std::vector<std::vector<std::int64_t>>>;
  g.all_reduce_max(std::int64_t{0});
};

namespace detail {

/// The local row `row` of `graph` as a dataset id.
template <class Graph>
node_t dataset_id(const Graph& graph, node_t row) {
  const auto ids = graph.local_ids();  // empty: row r is node r (one process)
  return ids.empty() ? row : ids[static_cast<std::size_t>(row)];
}

/// Throws sar::invalid_argument (on every rank alike) unless every row table of `store` holds
/// the rows of this rank's nodes in its range (parameter_store::hold_rows): a step borrows a
/// node's row from the rank that holds the node. Collective on a distributed graph.
template <class Graph, class T>
void check_held_rows(Graph& graph, const parameter_store<T>& store, const char* where) {
  std::int64_t missing[2] = {0, -1};  // count, one of them
  for (std::size_t k = 0; k < store.table_count(); ++k) {
    const row_table<T>& table = store.table(k);
    for (node_t row = 0; row < graph.num_local(); ++row) {
      const node_t id = dataset_id(graph, row);
      if (table.shape.covers(id) && table.row_of(id) < 0) {
        ++missing[0];
        missing[1] = id;
      }
    }
  }
  const std::int64_t any = graph.all_reduce_max(missing[0]);
  SAR_CHECK(any == 0, invalid_argument, where, ": rank ", graph.rank(), " holds no embedding row "
            "for ", missing[0], " of its nodes",
            missing[1] >= 0 ? message(" (node ", missing[1], ")") : std::string(),
            missing[0] == 0 ? " (another rank misses some)" : "",
            ": hold_rows takes the nodes each rank holds");
}

/// The rows of a step's input nodes borrowed into the row tables of a model's parameters
/// (row_table::borrowed_ids) for the life of this object: their values copied from the ranks
/// that hold the nodes, their gradients zero. Row tables are read by the layers of the model's
/// first stage (the input projections): the rows of the input nodes are all they read.
template <class T>
class borrowed_rows {
 public:
  /// Borrows the rows of nodes `ids` (dataset ids, any order, repeats allowed) that lie in
  /// each table's range. Requires check_held_rows to pass. Collective on a distributed graph
  /// (one gather per table); nothing without tables.
  template <class Graph>
  borrowed_rows(Graph& graph, parameter_store<T>& store, std::span<const node_t> ids)
      : store_(&store) {
    for (std::size_t k = 0; k < store.table_count(); ++k) {
      row_table<T>& table = store.table(k);
      table.borrowed_ids.clear();
      for (const node_t v : ids)
        if (table.shape.covers(v)) table.borrowed_ids.push_back(v);
      std::sort(table.borrowed_ids.begin(), table.borrowed_ids.end());
      table.borrowed_ids.erase(std::unique(table.borrowed_ids.begin(), table.borrowed_ids.end()),
                               table.borrowed_ids.end());
      table.borrowed_values = graph.template gather_rows<T>(
          table.borrowed_ids, table.shape.cols, [&](node_t row) {
            return table.values.row(table.row_of(dataset_id(graph, row))).data();
          });
      table.borrowed_grads.setZero(table.borrowed_values.rows(), table.shape.cols);
    }
  }
  borrowed_rows(const borrowed_rows&) = delete;
  borrowed_rows& operator=(const borrowed_rows&) = delete;
  /// Borrows nothing any more.
  ~borrowed_rows() {
    for (std::size_t k = 0; k < store_->table_count(); ++k) store_->table(k).drop_borrowed();
  }

  /// Sends the borrowed rows' gradients to the ranks that hold them: each held row's gradient
  /// becomes the sum of every rank's gradient of its borrowed copy, added in rank order (so
  /// the replicas of a group agree bitwise). Collective on a distributed graph.
  template <class Graph>
  void return_grads(Graph& graph) {
    for (std::size_t k = 0; k < store_->table_count(); ++k) {
      row_table<T>& table = store_->table(k);
      table.grads.setZero();
      graph.template scatter_rows<T>(
          table.borrowed_ids, const_rows_ref<T>(table.borrowed_grads),
          [&](node_t row, const T* grad) {
            table.grads.row(table.row_of(dataset_id(graph, row))) +=
                Eigen::Map<const Eigen::Matrix<T, 1, Eigen::Dynamic>>(grad, table.shape.cols);
          });
    }
  }

 private:
  parameter_store<T>* store_;
};

/// A minibatch graph that gathers sparse feature rows too (one process's sampling graph).
template <class Graph, class T>
concept gathers_sparse_rows = requires(Graph& g, const sparse_rows<T>& x,
                                       const std::vector<node_t>& ids) { g.gather(x, ids); };

/// infer_layer_wise on dense, sparse or bf16 features.
template <class Model, minibatch_graph Graph, class Features, class T = typename Model::scalar>
matrix<T> infer_stages(Model& model, Graph& graph, const Features& features,
                       const layer_context& ctx, node_t rows_per_block) {
  const node_t local = graph.num_local();
  SAR_CHECK(features.rows() == local && rows_per_block >= 1, invalid_argument,
            "sar::infer_layer_wise: ", features.rows(), " feature rows for ", local,
            " nodes, ", rows_per_block, " rows per block");
  const std::int64_t blocks = graph.all_reduce_max((local + rows_per_block - 1) / rows_per_block);
  const auto starts = model.stage_starts();
  matrix<T> h, next;  // the output of stage s - 1, of stage s
  for (std::size_t s = 0; s < starts.size(); ++s) {
    const std::size_t end = s + 1 < starts.size() ? starts[s + 1] : model.num_layers();
    bool sized = false;
    for (std::int64_t c = 0; c < blocks; ++c) {  // every rank as many times: collective
      const node_t begin = std::min<node_t>(local, c * rows_per_block);
      const node_t stop = std::min(local, begin + rows_per_block);
      minibatch_sample block =
          neighbourhood_block(graph.local_rows(), graph.edge_features(), graph.edge_types(),
                              graph.local_ids(), begin, stop);
      block.blocks[0].source_degrees = graph.out_degrees(block.ids);
      // Stage 0 reads the features (dense or sparse rows), later stages the last output.
      std::optional<borrowed_rows<T>> borrowed;  // the input projections' rows
      if (s == 0) borrowed.emplace(graph, model.parameters(), block.ids);
      constexpr bool sparse = std::is_same_v<Features, sparse_rows<T>>;
      const bool sparse_input = sparse && s == 0;
      sparse_rows<T> sparse_x;
      matrix<T> x;
      if constexpr (sparse) {
        if (s == 0) sparse_x = graph.gather(features, block.ids);
        else x = graph.gather(const_rows_ref<T>(h), block.ids);
      } else if constexpr (std::is_same_v<Features, bf16_rows>) {
        if (s == 0) x = graph.template gather_decoded<T>(features, block.ids);
        else x = graph.gather(const_rows_ref<T>(h), block.ids);
      } else {
        x = graph.gather(s == 0 ? features : const_rows_ref<T>(h), block.ids);
      }
      if (stop == begin) continue;
      sampled_minibatch mb(std::move(block));
      matrix<T> y;
      if constexpr (sparse) {
        if (sparse_input) y = model.infer(mb, ctx, sparse_x, starts[s], end);
      }
      if (!sparse_input) y = model.infer(mb, ctx, x, starts[s], end);
      if (!sized) next.resize(local, y.cols());
      sized = true;
      next.middleRows(begin, stop - begin) = y;
    }
    const std::int64_t width = graph.all_reduce_max(sized ? next.cols() : 0);
    if (!sized) next.resize(0, width);
    std::swap(h, next);
  }
  return h;
}
}  // namespace detail

/// The model's output for this process's nodes (graph.num_local() rows) by layer-wise
/// inference (see the top of this header), with ctx (training false). Requires features:
/// graph.num_local() x model.input_dim(). Throws sar::invalid_argument on a shape mismatch.
/// Collective on a distributed graph.
template <class Model, minibatch_graph Graph, class T = typename Model::scalar>
matrix<T> infer_layer_wise(Model& model, Graph& graph,
                           std::type_identity_t<const_rows_ref<T>> features,
                           const layer_context& ctx, node_t rows_per_block = 8192) {
  return detail::infer_stages(model, graph, features, ctx, rows_per_block);
}
/// As infer_layer_wise, on sparse input features (a dynamic_sequential that reads them:
/// sar/core/sparse_rows.hpp; a graph that gathers them: one process).
template <class Model, minibatch_graph Graph, class T = typename Model::scalar>
matrix<T> infer_layer_wise(Model& model, Graph& graph, const sparse_rows<T>& features,
                           const layer_context& ctx, node_t rows_per_block = 8192) {
  return detail::infer_stages(model, graph, features, ctx, rows_per_block);
}

/// As infer_layer_wise, on features stored as bf16 (sar/core/bf16.hpp): each block's input
/// rows travel as bf16 and are decoded where they arrive.
template <class Model, minibatch_graph Graph, class T = typename Model::scalar>
matrix<T> infer_layer_wise(Model& model, Graph& graph, const bf16_rows& features,
                           const layer_context& ctx, node_t rows_per_block = 8192) {
  return detail::infer_stages(model, graph, features, ctx, rows_per_block);
}

namespace detail {
/// infer_layer_wise on data's features, in whichever form they are held (dense, sparse on a
/// graph that gathers them, bf16). Collective on a distributed graph.
template <class Model, minibatch_graph Graph, class T = typename Model::scalar>
matrix<T> infer_node_data(Model& model, Graph& graph, const node_data<T>& data,
                          const layer_context& ctx, node_t rows_per_block) {
  if (data.sparse_features != nullptr) {
    if constexpr (gathers_sparse_rows<Graph, T>)
      return infer_layer_wise(model, graph, *data.sparse_features, ctx, rows_per_block);
  } else if (data.bf16_features != nullptr) {
    return infer_layer_wise(model, graph, *data.bf16_features, ctx, rows_per_block);
  }
  return infer_layer_wise(model, graph, data.features, ctx, rows_per_block);
}
}  // namespace detail

/// One process: the output for every node of `graph` (in-edges, row = dataset id).
template <class Model, class T = typename Model::scalar>
matrix<T> infer_layer_wise(Model& model, const csr& graph,
                           std::type_identity_t<const_rows_ref<T>> features,
                           const layer_context& ctx, node_t rows_per_block = 8192) {
  sampling_graph g(graph);
  return infer_layer_wise(model, g, features, ctx, rows_per_block);
}

namespace detail {

/// The labels or target rows of a minibatch's seeds, in the order of its seeds.
struct seed_targets {
  std::vector<std::int32_t> labels;  ///< classify: one per seed
  matrixf targets;                   ///< regress, multilabel: one row per seed

  /// The task of `kind` on these seeds (a view of this object).
  node_task task(task_kind kind) const {
    return {.kind = kind, .labels = labels,
            .targets = {targets.data(), targets.rows(), targets.cols()}, .scale = {}};
  }
};

/// The input rows and targets of a group of a bulk's minibatches, fetched once: the union
/// of their input nodes (each row once, however many minibatches read it) and their seeds.
template <class T>
struct bulk_gather {
  node_t end = 0;            ///< one past the group's last minibatch
  std::vector<node_t> ids;   ///< the union of the group's input nodes, sorted
  matrix<T> features;        ///< their feature rows (dense features)
  sparse_rows<T> sparse_features;  ///< their feature rows (sparse features)
  std::vector<node_t> seeds; ///< the group's seeds, sorted
  seed_targets targets;      ///< their labels (classify) or target rows
  std::vector<node_t> out_degrees;  ///< the whole graph's out-degree of each of ids
  std::vector<edge_t> edge_ids;  ///< the edges of the group's blocks, sorted (edge tables)
  edge_rows edges;               ///< their rows of the edge table

  /// Completes the blocks of `sample` (one of the group's) with what the sampler leaves to
  /// the loop: each source's out-degree in the whole graph (GCN's source normalisation: the
  /// same however a minibatch is split over ranks, and what layer-wise inference uses) and,
  /// with an edge table, each edge's features and relation.
  void complete(minibatch_sample& sample) const {
    for (sampled_block& block : sample.blocks) {
      block.source_degrees.clear();
      for (const node_t at : positions(ids, block.ids))
        block.source_degrees.push_back(out_degrees[static_cast<std::size_t>(at)]);
      if (block.edge_ids.empty()) continue;
      const std::vector<node_t> rows = positions(edge_ids, block.edge_ids);
      if (edges.features.cols() > 0) block.edge_features = gather_rows<float>(edges.features, rows);
      if (!edges.types.empty())
        for (const node_t at : rows) block.edge_types.push_back(edges.types[static_cast<std::size_t>(at)]);
    }
  }

  /// The feature rows of `wanted` (each in ids).
  matrix<T> features_of(std::span<const node_t> wanted) const {
    return gather_rows<T>(features, positions(ids, wanted));
  }
  /// The sparse feature rows of `wanted` (each in ids).
  sparse_rows<T> sparse_features_of(std::span<const node_t> wanted) const {
    return select_rows(sparse_features, positions(ids, wanted));
  }
  /// The labels or target rows of `wanted` (each in seeds).
  seed_targets targets_of(std::span<const node_t> wanted) const {
    const std::vector<node_t> at = positions(seeds, wanted);
    seed_targets out;
    if (targets.targets.cols() > 0) {
      out.targets = gather_rows<float>(targets.targets, at);
    } else {
      out.labels.reserve(at.size());
      for (const node_t a : at) out.labels.push_back(targets.labels[static_cast<std::size_t>(a)]);
    }
    return out;
  }

 private:
  static std::vector<node_t> positions(std::span<const node_t> sorted,
                                       std::span<const node_t> wanted) {
    std::vector<node_t> out;
    out.reserve(wanted.size());
    for (const node_t v : wanted)
      out.push_back(std::lower_bound(sorted.begin(), sorted.end(), v) - sorted.begin());
    return out;
  }
};

/// Fetches the minibatches of `samples` from `begin` on: as many as keep the union of their
/// input nodes within `bound` rows on every rank (at least one; bound 0: all the rest).
/// Collective: one small all-reduce, one gather of feature rows, one of out-degrees, with
/// `targets` one of labels or targets, and with an edge table one of the edge rows (features,
/// relations) of the group's blocks (each edge once).
template <class T, class Graph>
bulk_gather<T> gather_group(Graph& graph, const node_data<T>& data,
                            const std::vector<minibatch_sample>& samples, node_t begin,
                            node_t bound, bool targets = true) {
  const auto count = static_cast<node_t>(samples.size());
  std::vector<std::int64_t> too_many(static_cast<std::size_t>(count - begin), 0);
  if (bound > 0) {  // the union's size after each minibatch
    std::unordered_set<node_t> seen;
    for (node_t b = begin; b < count; ++b) {
      seen.insert(samples[b].ids.begin(), samples[b].ids.end());
      too_many[static_cast<std::size_t>(b - begin)] = static_cast<node_t>(seen.size()) > bound;
    }
  }
  graph.all_reduce_sum(std::span<std::int64_t>(too_many));  // every rank decides alike
  bulk_gather<T> out;
  out.end = begin + 1;
  while (out.end < count && too_many[static_cast<std::size_t>(out.end - begin)] == 0) ++out.end;
  const bool edge_table = graph.has_edge_table();
  for (node_t b = begin; b < out.end; ++b) {
    out.ids.insert(out.ids.end(), samples[b].ids.begin(), samples[b].ids.end());
    const auto seeds = samples[b].seeds();
    out.seeds.insert(out.seeds.end(), seeds.begin(), seeds.end());
    if (edge_table)
      for (const sampled_block& block : samples[b].blocks)
        out.edge_ids.insert(out.edge_ids.end(), block.edge_ids.begin(), block.edge_ids.end());
  }
  for (auto* ids : {&out.ids, &out.seeds, &out.edge_ids}) {
    std::sort(ids->begin(), ids->end());
    ids->erase(std::unique(ids->begin(), ids->end()), ids->end());
  }
  if (data.sparse_features != nullptr) {
    if constexpr (detail::gathers_sparse_rows<Graph, T>)
      out.sparse_features = graph.gather(*data.sparse_features, out.ids);
  } else if (data.bf16_features != nullptr) {
    out.features = graph.template gather_decoded<T>(*data.bf16_features, out.ids);
  } else {
    out.features = graph.gather(data.features, out.ids);
  }
  out.out_degrees = graph.out_degrees(out.ids);
  if (edge_table) out.edges = graph.gather_edges(out.edge_ids);
  if (!targets) return out;
  if (has_class_ids(data.task))
    out.targets.labels = graph.gather(data.labels, out.seeds);
  else
    out.targets.targets = graph.template gather<float>(data.targets, out.seeds);
  return out;
}

/// The items of minibatches first, first + 1, ... of `order`, given shares[b], this rank's
/// share of minibatch first + b (order.width values per item): every rank's shares joined in
/// rank order. Collective.
template <class Graph>
std::vector<std::vector<node_t>> whole_minibatches(Graph& graph, const minibatch_shares& order,
                                                   node_t first,
                                                   const std::vector<std::vector<node_t>>& shares) {
  if (order.ranks == 1) return shares;
  std::vector<std::int64_t> mine;
  for (const auto& share : shares) mine.insert(mine.end(), share.begin(), share.end());
  const auto all = graph.all_to_all(
      std::vector<std::vector<std::int64_t>>(static_cast<std::size_t>(order.ranks), mine));
  std::vector<std::vector<node_t>> seeds(shares.size());
  for (int r = 0; r < order.ranks; ++r) {
    auto at = all[static_cast<std::size_t>(r)].begin();
    for (std::size_t b = 0; b < shares.size(); ++b) {
      const node_t size = order.seeds(first + static_cast<node_t>(b));
      const node_t count =
          (order.share_begin(size, r + 1) - order.share_begin(size, r)) * order.width;
      seeds[b].insert(seeds[b].end(), at, at + count);
      at += count;
    }
  }
  return seeds;
}

}  // namespace detail

/// Trains `model` with `optimiser` on minibatches sampled from `graph` (sampling_graph: one
/// process; distributed_sampling_graph: data-parallel over the ranks), evaluating by
/// layer-wise inference after every epoch. `data` holds the local nodes (graph.num_local()).
///
/// The task is data's (classify: labels; regress, multilabel: targets of model.output_dim()
/// columns, sar/nn/task.hpp).
/// A minibatch is global: its seeds are split over the ranks in order (rank r takes the r-th
/// of P near-equal slices), each rank samples, gathers and runs the tree of its slice, the
/// loss of every seed is normalised by the whole minibatch's size, and one all-reduce of the
/// gradients precedes each step, so P ranks train the model one process trains (up to the
/// order of floating-point sums; batch norm's statistics are those of each rank's slice).
/// Progress, the CSV log, patience and on_epoch as train_full_batch; the epoch time is the
/// training time (sampling, gathering, compute), split in epoch_stats.
/// Throws sar::invalid_argument for bad options or data (before any work; the same on every
/// rank), sar::numeric_error for a non-finite loss or one above options.max_loss (naming the
/// epoch and minibatch; every rank alike). Collective on a distributed graph.
template <class Model, minibatch_graph Graph, class Optimiser, class T = typename Model::scalar>
train_result train_minibatch(Model& model, Graph& graph, Optimiser& optimiser,
                             const node_data<T>& data, const train_options& options,
                             const minibatch_options& mb,
                             const std::function<void(const epoch_stats&)>& on_epoch = {}) {
  constexpr const char* where = "sar::train_minibatch";
  const node_t n = graph.num_local();
  SAR_CHECK(data.feature_rows() == n && data.split.size() == static_cast<std::size_t>(n),
            invalid_argument, where, ": rank ", graph.rank(), ": ", n, " nodes but ",
            data.feature_rows(), " feature rows, ", data.split.size(), " split entries");
  if constexpr (!detail::gathers_sparse_rows<Graph, T>)
    SAR_CHECK(data.sparse_features == nullptr, invalid_argument, where, ": sparse features on "
              "a graph that gathers dense feature rows only (a distributed sampling graph)");
  const node_task task = data.node_targets();
  const Eigen::Index width = model.output_dim();
  task.check(n, width, where);
  const std::vector<node_t> training = graph.training_nodes(data.split);  // this rank's
  std::int64_t train_count = static_cast<std::int64_t>(training.size());
  graph.all_reduce_sum(std::span<std::int64_t>(&train_count, 1));
  double valid_count = graph.counts_in_evaluation()
      ? static_cast<double>(node_selection{data.split, node_split::valid}.count(n)) : 0.0;
  graph.all_reduce_sum(std::span<double>(&valid_count, 1));
  SAR_CHECK(train_count > 0, invalid_argument, where, ": no training node");
  SAR_CHECK(mb.batch_size >= 1 && mb.batch_size <= train_count, invalid_argument, where,
            ": batch size ", mb.batch_size, " outside [1, ", train_count,
            "] (the training nodes)");
  SAR_CHECK(mb.bulk >= 1, invalid_argument, where, ": bulk ", mb.bulk, " (>= 1 minibatches)");
  SAR_CHECK(mb.sampler.fanouts.size() == model.stage_starts().size(), invalid_argument, where,
            ": ", mb.sampler.fanouts.size(), " fanouts for a model of ",
            model.stage_starts().size(), " graph layers");
  bulk_sampler sampler(graph.num_nodes(), mb.sampler);  // checks the sampler options
  detail::check_held_rows(graph, model.parameters(), where);

  detail::check_train_options(options, where);
  detail::epoch_recorder recorder(options, where, true, on_epoch, score_name(task.kind));
  using clock = std::chrono::steady_clock;
  const auto seconds_since = [](clock::time_point t) {
    return std::chrono::duration<double>(clock::now() - t).count();
  };
  // A rank that does not count in evaluation (a replica) measures no node, with the same
  // task and width, so its metric sums have the others' length.
  const node_data<T> evaluated =
      graph.counts_in_evaluation()
          ? data
          : node_data<T>{.features = data.features, .task = data.task,
                         .targets = {data.targets.data(), 0, data.targets.cols()},
                         .target_scale = {}, .sparse_features = data.sparse_features,
                         .bf16_features = data.bf16_features};

  auto grads = model.parameters().grads();
  const node_t batches = (train_count + mb.batch_size - 1) / mb.batch_size;
  for (int epoch = recorder.first_epoch(); recorder.trains(epoch); ++epoch) {
    epoch_stats stats;
    stats.epoch = epoch;
    const auto start = clock::now();
    const minibatch_shares order = shuffled_shares(graph, training, train_count, mb.batch_size,
                                                   options.seed,
                                                   static_cast<std::uint64_t>(epoch));
    double loss_sum = 0;
    for (node_t first = 0; first < batches; first += mb.bulk) {
      const node_t count = std::min<node_t>(mb.bulk, batches - first);
      const std::vector<std::vector<node_t>> shares = order.shares(first, count);
      const std::vector<std::vector<node_t>> seeds =
          detail::whole_minibatches(graph, order, first, shares);
      auto t = clock::now();
      std::vector<minibatch_sample> samples = sampler.sample(
          graph, seeds, shares, static_cast<std::uint64_t>(epoch), static_cast<std::uint64_t>(first));
      stats.sampling_seconds += seconds_since(t);
      detail::bulk_gather<T> fetched;
      for (node_t b = 0; b < count; ++b) {
        t = clock::now();
        if (b == fetched.end) {
          fetched = detail::gather_group(graph, data, samples, b, mb.gather_rows);
          stats.gathered_rows += static_cast<std::int64_t>(fetched.ids.size());
        }
        stats.input_rows += static_cast<std::int64_t>(samples[b].ids.size());
        sparse_rows<T> sparse_x;  // read until backward
        matrix<T> x;
        if (data.sparse_features != nullptr) sparse_x = fetched.sparse_features_of(samples[b].ids);
        else x = fetched.features_of(samples[b].ids);
        const detail::seed_targets targets = fetched.targets_of(samples[b].seeds());
        detail::borrowed_rows<T> borrowed(graph, model.parameters(), samples[b].ids);
        fetched.complete(samples[b]);
        const auto local_seeds = static_cast<node_t>(samples[b].seeds().size());
        sampled_minibatch blocks(std::move(samples[b]));
        stats.gather_seconds += seconds_since(t);
        const auto step = static_cast<std::uint64_t>(epoch) * static_cast<std::uint64_t>(batches) +
                          static_cast<std::uint64_t>(first + b);
        const layer_context ctx{.training = true, .seed = options.seed, .epoch = step};
        double loss = 0;
        if (local_seeds > 0) {
          const matrix<T>& outputs = data.sparse_features != nullptr
                                         ? forward_sparse(model, blocks, ctx, sparse_x)
                                         : model.forward(blocks, ctx, std::move(x));
          matrix<T> doutputs;
          loss = targets.task(task.kind).loss(
              outputs, node_selection{},
              task.normaliser(static_cast<double>(seeds[b].size()), width), doutputs);
          model.backward(blocks, ctx, doutputs);
        } else {
          std::fill(grads.begin(), grads.end(), T(0));
        }
        borrowed.return_grads(graph);
        graph.all_reduce_sum(std::span<double>(&loss, 1));
        detail::check_loss(loss, options, where, epoch, first + b);
        graph.all_reduce_sum(grads);
        optimiser.step(model.parameters());
        loss_sum += loss * static_cast<double>(seeds[b].size());
      }
    }
    stats.seconds = seconds_since(start);
    stats.train_loss = loss_sum / static_cast<double>(train_count);

    if (options.evaluates(epoch)) {
      const layer_context eval{.training = false, .seed = options.seed,
                               .epoch = static_cast<std::uint64_t>(epoch)};
      matrix<T> logits = detail::infer_node_data(model, graph, data, eval, mb.inference_rows);
      if (!graph.counts_in_evaluation()) logits.resize(0, logits.cols());
      detail::evaluate(graph, logits, evaluated, evaluated.node_targets(),
                       task.normaliser(valid_count, width), stats);
    }
    recorder.finish(stats, message("  (sampling ", stats.sampling_seconds, " s, gather ",
                                   stats.gather_seconds, " s)"));
  }
  return std::move(recorder.result());
}

/// One process: trains on `graph` (in-edges, row = dataset id; the graph the model aggregates
/// over, e.g. with self-loops for GCN) with data of graph.num_rows nodes.
template <class Model, class Optimiser, class T = typename Model::scalar>
train_result train_minibatch(Model& model, const csr& graph, Optimiser& optimiser,
                             const node_data<T>& data, const train_options& options,
                             const minibatch_options& mb,
                             const std::function<void(const epoch_stats&)>& on_epoch = {}) {
  sampling_graph g(graph);
  return train_minibatch(model, g, optimiser, data, options, mb, on_epoch);
}

}  // namespace sar
