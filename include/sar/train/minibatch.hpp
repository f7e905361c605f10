// Minibatch training on sampled neighbourhoods, and layer-wise full-neighbourhood inference.
//
// An epoch shuffles the training nodes (a permutation keyed by (seed, epoch): the same on any
// thread count), cuts them into minibatches of batch_size seeds (the last may be smaller),
// samples `bulk` minibatches at a time (sar/sampling/samplers.hpp), gathers each minibatch's
// input feature rows and runs forward, the cross-entropy of its seeds normalised by its
// size, backward and one optimiser step. Random numbers of the layers (dropout) are keyed by
// the step number in place of the epoch (layer_context::epoch = epoch * minibatches + m), so
// the minibatches of an epoch draw different masks.
//
// Evaluation is layer-wise inference over all nodes: the model runs stage by stage (one graph
// layer and the layers after it, model.stage_starts()), each stage over blocks of
// inference_rows destinations with their whole in-neighbourhood, so it needs two activations
// of all nodes at a time, never a sampled tree; GCN sees the whole graph's degrees, so the
// result equals a full-batch forward.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <span>
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
#include "sar/sampling/minibatch.hpp"
#include "sar/sampling/samplers.hpp"
#include "sar/train/full_batch.hpp"

namespace sar {

struct minibatch_options {
  node_t batch_size = 64;   ///< seeds per minibatch (>= 1, at most the training nodes)
  sampler_options sampler;  ///< kind and fanouts (one per graph layer); its seed keys the darts
  int bulk = 1;             ///< minibatches sampled at once (>= 1)
  node_t inference_rows = 8192;  ///< destinations per block of layer-wise inference
};

/// The rows `ids` of m, in that order.
template <class T>
matrix<T> gather_rows(const matrix<T>& m, std::span<const node_t> ids) {
  matrix<T> out(static_cast<Eigen::Index>(ids.size()), m.cols());
  for_row_chunks(out.rows(), static_cast<double>(m.cols()), [&](Eigen::Index b, Eigen::Index e) {
    for (Eigen::Index r = b; r < e; ++r) out.row(r) = m.row(ids[static_cast<std::size_t>(r)]);
  });
  return out;
}

/// The training nodes of `split` in the order of `epoch` (a permutation keyed by seed and
/// epoch).
inline std::vector<node_t> shuffled_training_nodes(std::span<const node_split> split,
                                                   std::uint64_t seed, std::uint64_t epoch) {
  const counter_rng rng(seed, rng_stream::sampling, 1);
  std::vector<std::pair<std::uint64_t, node_t>> keyed;
  for (std::size_t v = 0; v < split.size(); ++v)
    if (split[v] == node_split::train)
      keyed.emplace_back(rng.bits(epoch, v)[0], static_cast<node_t>(v));
  std::sort(keyed.begin(), keyed.end());
  std::vector<node_t> order;
  order.reserve(keyed.size());
  for (const auto& [key, v] : keyed) order.push_back(v);
  return order;
}

/// The model's output for every node of `graph` by layer-wise inference (see the top of this
/// header), with ctx (training false). Requires features: graph.num_rows x model.input_dim().
/// Throws sar::invalid_argument on a shape mismatch.
template <class Model, class T = typename Model::scalar>
matrix<T> infer_layer_wise(Model& model, const csr& graph, const matrix<T>& features,
                           const layer_context& ctx, node_t rows_per_block = 8192) {
  SAR_CHECK(features.rows() == graph.num_rows && rows_per_block >= 1, invalid_argument,
            "sar::infer_layer_wise: ", features.rows(), " feature rows for ", graph.num_rows,
            " nodes, ", rows_per_block, " rows per block");
  const std::vector<node_t> degrees = out_degrees(graph);
  const auto starts = model.stage_starts();
  matrix<T> h = features, next;
  for (std::size_t s = 0; s < starts.size(); ++s) {
    const std::size_t end = s + 1 < starts.size() ? starts[s + 1] : model.num_layers();
    for (node_t begin = 0; begin < graph.num_rows; begin += rows_per_block) {
      const node_t stop = std::min(graph.num_rows, begin + rows_per_block);
      minibatch_sample block = neighbourhood_block(graph, begin, stop, degrees);
      const matrix<T> x = gather_rows(h, block.ids);
      sampled_minibatch mb(std::move(block));
      const matrix<T> y = model.infer(mb, ctx, x, starts[s], end);
      if (begin == 0) next.resize(graph.num_rows, y.cols());
      next.middleRows(begin, stop - begin) = y;
    }
    std::swap(h, next);
  }
  return h;
}

namespace detail {
/// The reductions of one process (none): what detail::evaluate needs of a schedule.
struct no_reduction {
  template <class V>
  void all_reduce_sum(std::span<V>) {}
};
}  // namespace detail

/// Trains `model` with `optimiser` on minibatches of `graph` (in-edges, row = dataset id; the
/// graph the model aggregates over, e.g. with self-loops for GCN), evaluating by layer-wise
/// inference after every epoch. Requires data of graph.num_rows nodes and at least one
/// training node. Progress, the CSV log, patience and on_epoch as train_full_batch; the
/// epoch time is the training time (sampling, gathering, compute), split in epoch_stats.
/// Throws sar::invalid_argument for bad options (before any work), sar::numeric_error for a
/// non-finite loss (naming the epoch and minibatch).
template <class Model, class Optimiser, class T = typename Model::scalar>
train_result train_minibatch(Model& model, const csr& graph, Optimiser& optimiser,
                             const node_data<T>& data, const train_options& options,
                             const minibatch_options& mb,
                             const std::function<void(const epoch_stats&)>& on_epoch = {}) {
  constexpr const char* where = "sar::train_minibatch";
  const node_t n = graph.num_rows;
  SAR_CHECK(data.features.rows() == n && data.labels.size() == static_cast<std::size_t>(n) &&
                data.split.size() == static_cast<std::size_t>(n),
            invalid_argument, where, ": ", n, " nodes but ", data.features.rows(),
            " feature rows, ", data.labels.size(), " labels, ", data.split.size(),
            " split entries");
  const node_t train_count = node_selection{data.split, node_split::train}.count(n);
  const double valid_count =
      static_cast<double>(node_selection{data.split, node_split::valid}.count(n));
  SAR_CHECK(train_count > 0, invalid_argument, where, ": no training node");
  SAR_CHECK(mb.batch_size >= 1 && mb.batch_size <= train_count, invalid_argument, where,
            ": batch size ", mb.batch_size, " outside [1, ", train_count,
            "] (the training nodes)");
  SAR_CHECK(mb.bulk >= 1, invalid_argument, where, ": bulk ", mb.bulk, " (>= 1 minibatches)");
  SAR_CHECK(mb.sampler.fanouts.size() == model.stage_starts().size(), invalid_argument, where,
            ": ", mb.sampler.fanouts.size(), " fanouts for a model of ",
            model.stage_starts().size(), " graph layers");
  bulk_sampler sampler(graph, mb.sampler);  // checks the sampler options

  detail::epoch_recorder recorder(options, where, true, on_epoch);
  using clock = std::chrono::steady_clock;
  const auto seconds_since = [](clock::time_point t) {
    return std::chrono::duration<double>(clock::now() - t).count();
  };

  train_result result;
  detail::no_reduction reduce;
  const node_t batches = (train_count + mb.batch_size - 1) / mb.batch_size;
  for (int epoch = 0; epoch < options.epochs; ++epoch) {
    epoch_stats stats;
    stats.epoch = epoch;
    const auto start = clock::now();
    const std::vector<node_t> order =
        shuffled_training_nodes(data.split, options.seed, static_cast<std::uint64_t>(epoch));
    double loss_sum = 0;
    for (node_t first = 0; first < batches; first += mb.bulk) {
      const node_t count = std::min<node_t>(mb.bulk, batches - first);
      std::vector<std::vector<node_t>> seeds(static_cast<std::size_t>(count));
      for (node_t b = 0; b < count; ++b) {
        const node_t begin = (first + b) * mb.batch_size;
        const node_t end = std::min(train_count, begin + mb.batch_size);
        seeds[b].assign(order.begin() + begin, order.begin() + end);
      }
      auto t = clock::now();
      std::vector<minibatch_sample> samples = sampler.sample(
          seeds, static_cast<std::uint64_t>(epoch), static_cast<std::uint64_t>(first));
      stats.sampling_seconds += seconds_since(t);
      for (node_t b = 0; b < count; ++b) {
        t = clock::now();
        const matrix<T> x = gather_rows(data.features, samples[b].ids);
        std::vector<std::int32_t> labels;
        for (node_t v : samples[b].seeds()) labels.push_back(data.labels[v]);
        sampled_minibatch blocks(std::move(samples[b]));
        stats.gather_seconds += seconds_since(t);
        const auto step = static_cast<std::uint64_t>(epoch) * static_cast<std::uint64_t>(batches) +
                          static_cast<std::uint64_t>(first + b);
        const layer_context ctx{.training = true, .seed = options.seed, .epoch = step};
        const matrix<T>& logits = model.forward(blocks, ctx, x);
        matrix<T> dlogits;
        const double loss = softmax_cross_entropy(logits, labels, node_selection{},
                                                  static_cast<double>(labels.size()), dlogits);
        SAR_CHECK(std::isfinite(loss), numeric_error, where, ": training loss is ", loss,
                  " at epoch ", epoch, ", minibatch ", first + b);
        model.backward(blocks, ctx, dlogits);
        optimiser.step(model.parameters());
        loss_sum += loss * static_cast<double>(labels.size());
      }
    }
    stats.seconds = seconds_since(start);
    stats.train_loss = loss_sum / static_cast<double>(train_count);

    const layer_context eval{.training = false, .seed = options.seed,
                             .epoch = static_cast<std::uint64_t>(epoch)};
    const matrix<T> logits = infer_layer_wise(model, graph, data.features, eval, mb.inference_rows);
    detail::evaluate(reduce, logits, data, valid_count, stats);
    if (recorder.finish(stats, message("  (sampling ", stats.sampling_seconds, " s, gather ",
                                       stats.gather_seconds, " s)"),
                        result))
      break;
  }
  return result;
}

}  // namespace sar
