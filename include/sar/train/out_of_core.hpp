// Full-batch training of a graph whose activations do not fit in memory: SAR's sequential
// aggregation over parts, across a disk. The local nodes are cut into parts of at most
// part_rows destinations, and at given breaks (a partition store's parts: neighbourhoods, whose
// in-neighbourhoods are mostly themselves); a model runs stage by stage (one layer that reads
// neighbours and the layers after it: model.stage_starts()), each stage over one part at a
// time with the part's whole in-neighbourhood (sar/sampling/samplers.hpp:
// neighbourhood_block), as P ranks would visit remote shards one at a time. An epoch:
//   forward   stages 0 .. S-2, part after part: the stage's input rows of the part's block
//             (the features, or the previous stage's output read back from disk), the stage's
//             layers, its output rows written to the run's spill directory;
//   backward  stages S-1 .. 0, part after part: the stage's forward again on the part
//             (rematerialised from the spilled input, as SAR recomputes rather than keeps),
//             the loss of the part's training rows (last stage) or the gradient of its output
//             rows read back, the stage's backward; its input gradient added to the owners'
//             rows of a spilled accumulator, its parameter gradients added up over the parts;
//   then one all-reduce of the gradients and the optimiser's step, as train_full_batch.
// Every layer sees what a full-batch forward gives it: the whole in-neighbourhood of its
// destinations, the whole graph's degrees, random numbers keyed by (seed, epoch, layer, node
// id). So the losses and the model are train_full_batch's up to floating-point summation order
// (tests/unit/test_out_of_core.cpp), on one process (sampling_graph) and on P ranks each
// streaming its own parts (distributed_sampling_graph: its gathers and scatters are collective,
// every rank visits as many parts).
//
// Held at once: the graph's structure, the features (unless they are given on disk), one
// part's block, input rows, the stage's activations and gradients, and the parameters; a
// stage's outputs and input gradients live on disk (sar/io/spilled_rows.hpp), 2 x nodes x
// width per stage after the first. sar/train/capacity.hpp's plan_out_of_core turns a memory
// budget into the rows of a part.
//
// Not supported (refused): layers with state besides parameters (batch norm's statistics span
// every node), row tables (embeddings), sparse or bf16 features.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "sar/core/error.hpp"
#include "sar/core/types.hpp"
#include "sar/io/spill_directory.hpp"
#include "sar/io/spilled_rows.hpp"
#include "sar/nn/loss.hpp"
#include "sar/nn/task.hpp"
#include "sar/sampling/minibatch.hpp"
#include "sar/sampling/samplers.hpp"
#include "sar/train/full_batch.hpp"
#include "sar/train/minibatch.hpp"

namespace sar {

/// Settings of out-of-core training.
struct out_of_core_options {
  /// The directory the run's spill directory goes in (sar/io/spill_directory.hpp).
  std::filesystem::path spill_dir;
  /// Destinations per part at most (>= 1): a rank's parts are its local rows cut in order.
  node_t part_rows = 1;
  /// Local rows where a part must begin (increasing, in (0, num_local]): the first rows of the
  /// parts of a partition store, whose nodes are neighbourhoods (a part straddling none is cut
  /// every part_rows rows). Empty: none.
  std::vector<node_t> part_breaks{};
};

/// What out-of-core training moved through its spill files (this rank, whole run).
struct out_of_core_traffic {
  std::uint64_t bytes_read = 0;     ///< read back from the spill files
  std::uint64_t bytes_written = 0;  ///< written to them
  std::uint64_t spill_bytes = 0;    ///< the files' size on disk
};

/// The first local row of each part of n local rows cut at `breaks` and every part_rows rows
/// within, then n (one empty part when n is 0): train_out_of_core's parts. Throws
/// sar::invalid_argument for part_rows < 1 or breaks that do not increase inside (0, n].
inline std::vector<node_t> part_starts(node_t n, node_t part_rows,
                                       std::span<const node_t> breaks) {
  SAR_CHECK(part_rows >= 1, invalid_argument, "sar::train_out_of_core: part_rows ", part_rows,
            " (>= 1)");
  std::vector<node_t> starts{0};
  node_t previous = 0;
  for (std::size_t b = 0; b <= breaks.size(); ++b) {
    const node_t end = b < breaks.size() ? breaks[b] : n;
    SAR_CHECK(end <= n && (end > previous || (b == breaks.size() && end == previous)),
              invalid_argument,
              "sar::train_out_of_core: part break ", end, " after ", previous, " (breaks must "
              "increase inside (0, ", n, "])");
    for (node_t r = previous + part_rows; r < end; r += part_rows) starts.push_back(r);
    if (end > previous) starts.push_back(end);
    previous = end;
  }
  if (starts.size() == 1) starts.push_back(0);  // no rows: one empty part
  return starts;
}

namespace detail::out_of_core {

/// The targets of rows [begin, begin + count) of `task` (a view).
inline node_task rows_of(const node_task& task, node_t begin, node_t count) {
  const auto first = static_cast<std::size_t>(begin), size = static_cast<std::size_t>(count);
  const Eigen::Index cols = task.targets.cols();
  return {.kind = task.kind,
          .labels = task.labels.empty() ? task.labels : task.labels.subspan(first, size),
          .targets = {task.targets.rows() > 0 ? task.targets.data() + begin * cols : nullptr,
                      task.targets.rows() > 0 ? count : 0, cols},
          .scale = task.scale};
}

}  // namespace detail::out_of_core

/// Trains `model` (a dynamic_sequential: forward_stage) with `optimiser` as train_full_batch
/// does, holding one part at a time (see the top of this file). Requires data.features:
/// graph.num_local() x model.input_dim() (dense), or `features_on_disk` of that shape (then
/// data.features is not read: the features stay on disk too), labels or targets and split of
/// that many rows, at least one training node over all ranks. `traffic` (optional) gets the
/// spill files' bytes. Throws sar::invalid_argument for options outside
/// their domain or a model or data it does not train (see the top of this file),
/// sar::io_error naming the spill file (a full file system: the bytes needed and free),
/// sar::numeric_error as train_full_batch. The spill directory is removed when it returns or
/// throws. Collective on a distributed graph.
template <class Model, minibatch_graph Graph, class Optimiser, class T = typename Model::scalar>
train_result train_out_of_core(Model& model, Graph& graph, Optimiser& optimiser,
                               const node_data<T>& data, const train_options& options,
                               const out_of_core_options& settings,
                               const std::function<void(const epoch_stats&)>& on_epoch = {},
                               out_of_core_traffic* traffic = nullptr,
                               spilled_rows<T>* features_on_disk = nullptr) {
  constexpr const char* where = "sar::train_out_of_core";
  const node_t n = graph.num_local();
  SAR_CHECK(data.sparse_features == nullptr && data.bf16_features == nullptr, invalid_argument,
            where, ": sparse or bf16 features are not supported; pass them dense");
  const Eigen::Index feature_rows =
      features_on_disk ? features_on_disk->rows() : data.features.rows();
  const Eigen::Index feature_cols =
      features_on_disk ? features_on_disk->cols() : data.features.cols();
  SAR_CHECK(feature_rows == n && feature_cols == model.input_dim() &&
                data.split.size() == static_cast<std::size_t>(n),
            invalid_argument, where, ": rank ", graph.rank(), ": ", n, " local nodes but ",
            feature_rows, " x ", feature_cols, " features (the model takes ", model.input_dim(),
            "), ", data.split.size(), " split entries");
  SAR_CHECK(model.state().empty(), invalid_argument, where, ": the model has layers with state "
            "(batch norm), whose statistics span every node: not trained part by part");
  SAR_CHECK(model.parameters().table_count() == 0, invalid_argument, where,
            ": row tables (embeddings of featureless nodes) are not supported");
  // The parts, before any collective: a rank whose breaks are bad throws on every rank.
  std::vector<node_t> starts_of_parts;
  std::string bad_parts;
  try {
    starts_of_parts = part_starts(n, settings.part_rows, settings.part_breaks);
  } catch (const invalid_argument& e) {
    bad_parts = e.what();
  }
  SAR_CHECK(graph.all_reduce_max(bad_parts.empty() ? 0 : 1) == 0, invalid_argument, where,
            ": rank ", graph.rank(), ": ",
            bad_parts.empty() ? std::string("another rank's parts are invalid") : bad_parts);
  const node_task task = data.node_targets();
  const Eigen::Index width = model.output_dim();
  task.check(n, width, where);
  const auto [train_normaliser, valid_normaliser] =
      detail::loss_normalisers(graph, data.split, task, width, where);
  detail::check_train_options(options, where);
  detail::epoch_recorder recorder(options, where, false, on_epoch, score_name(task.kind));

  const std::vector<std::size_t> starts = model.stage_starts();
  const std::size_t stages = starts.size();
  const auto stage_end = [&](std::size_t s) {
    return s + 1 < stages ? starts[s + 1] : model.num_layers();
  };
  // Stage s > 0 needs its input gradient when a layer before it has parameters; a stage that
  // neither has parameters nor needs it has no backward (nor has any stage before it).
  const auto wants_input_gradient = [&](std::size_t s) {
    return s > 0 && model.layer_parameters(starts[s]).first > 0;
  };
  const auto has_parameters = [&](std::size_t s) {
    return model.layer_parameters(starts[s]).first <
           model.layer_parameters(stage_end(s) - 1).second;
  };

  // The stages' inputs and input gradients after the first, on disk.
  spill_directory spill(settings.spill_dir);
  std::vector<spilled_rows<T>> inputs, gradients;  // [s - 1]: stage s's
  for (std::size_t s = 1; s < stages; ++s) {
    const Eigen::Index cols = model.layer(starts[s]).input_dim();
    inputs.emplace_back(spill, message("stage", s, ".input"), n, cols);
    gradients.emplace_back(spill, message("stage", s, ".gradient"), n, cols);
  }
  if (traffic)
    for (std::size_t s = 0; s + 1 < stages; ++s)
      traffic->spill_bytes += 2 * static_cast<std::uint64_t>(n) *
                              static_cast<std::uint64_t>(inputs[s].cols()) * sizeof(T);

  const auto local_parts = static_cast<std::int64_t>(starts_of_parts.size()) - 1;
  const std::int64_t parts = graph.all_reduce_max(local_parts);  // every rank visits as many
  const auto part_begin = [&](std::int64_t c) {
    return c < local_parts ? starts_of_parts[static_cast<std::size_t>(c)] : n;
  };
  const auto part_end = [&](std::int64_t c) {
    return c < local_parts ? starts_of_parts[static_cast<std::size_t>(c) + 1] : n;
  };
  // Part c's block: its destinations' whole in-neighbourhood, the graph's out-degrees of its
  // sources (GCN). Collective.
  const auto block_of = [&](std::int64_t c) {
    minibatch_sample block = neighbourhood_block(
        graph.local_rows(), graph.edge_features(), graph.edge_types(), graph.local_ids(),
        part_begin(c), part_end(c));
    block.blocks[0].source_degrees = graph.out_degrees(block.ids);
    return block;
  };
  // Stage s's input rows of `ids` (dataset ids): the features, or stage s - 1's output read
  // back. Collective.
  const auto input_rows = [&](std::size_t s, std::span<const node_t> ids) {
    if (s == 0 && !features_on_disk) return graph.gather(data.features, ids);
    spilled_rows<T>& x = s == 0 ? *features_on_disk : inputs[s - 1];
    matrix<T> rows = graph.template gather_rows<T>(ids, x.cols(),
                                                   [&](node_t row) { return x.row(row); });
    x.release();  // the rows are copied: the pages go back to the page cache
    return rows;
  };
  // Asks the kernel to read part c's own rows of stage s's input while part c - 1 computes.
  const auto prefetch_input = [&](std::size_t s, std::int64_t c) {
    const node_t rows = part_end(c) - part_begin(c);
    if (s > 0) inputs[s - 1].prefetch(part_begin(c), rows);
    else if (features_on_disk) features_on_disk->prefetch(part_begin(c), rows);
  };
  // Stages [0, last) over every part, each stage's output written for the next. Collective.
  const auto forward_stages = [&](const layer_context& ctx, std::size_t last) {
    for (std::size_t s = 0; s < last; ++s) {
      for (std::int64_t c = 0; c < parts; ++c) {
        minibatch_sample block = block_of(c);
        const matrix<T> x = input_rows(s, block.ids);
        prefetch_input(s, c + 1);
        if (part_end(c) == part_begin(c)) continue;
        sampled_minibatch mb(std::move(block));
        inputs[s].write(part_begin(c), model.infer(mb, ctx, x, starts[s], stage_end(s)));
      }
    }
  };

  auto grads = model.parameters().grads();
  std::vector<double> summed(grads.size());
  std::uint64_t read_before = features_on_disk ? features_on_disk->bytes_read() : 0;
  std::uint64_t written_before = 0;
  for (int epoch = recorder.first_epoch(); recorder.trains(epoch); ++epoch) {
    epoch_stats stats;
    stats.epoch = epoch;
    layer_context ctx{.training = true, .seed = options.seed,
                      .epoch = static_cast<std::uint64_t>(epoch)};
    const auto start = std::chrono::steady_clock::now();
    forward_stages(ctx, stages - 1);
    std::fill(summed.begin(), summed.end(), 0.0);
    double loss = 0;
    for (std::size_t s = stages; s-- > 0;) {
      const bool input_gradient = wants_input_gradient(s);
      if (!input_gradient && !has_parameters(s)) break;
      if (input_gradient) gradients[s - 1].zero();
      const bool last = s + 1 == stages;
      for (std::int64_t c = 0; c < parts; ++c) {
        const node_t begin = part_begin(c), rows = part_end(c) - begin;
        sampled_minibatch mb(block_of(c));
        const matrix<T> x = input_rows(s, mb.ids());
        prefetch_input(s, c + 1);
        if (!last) gradients[s].prefetch(part_begin(c + 1), part_end(c + 1) - part_begin(c + 1));
        matrix<T> dx;
        if (rows > 0) {
          const matrix<T>& y = model.forward_stage(mb, ctx, x, s);
          matrix<T> dy;
          if (last) {
            const auto split = data.split.subspan(static_cast<std::size_t>(begin),
                                                  static_cast<std::size_t>(rows));
            loss += detail::out_of_core::rows_of(task, begin, rows)
                        .loss(y, node_selection{split, node_split::train}, train_normaliser, dy);
          } else {
            dy.resize(rows, y.cols());
            gradients[s].read(begin, dy);
          }
          std::fill(grads.begin(), grads.end(), T(0));
          if (input_gradient) model.backward(mb, ctx, dy, dx);
          else model.backward(mb, ctx, dy);
          for (std::size_t i = 0; i < grads.size(); ++i) summed[i] += grads[i];
        }
        if (input_gradient) {
          if (rows == 0) dx.resize(0, gradients[s - 1].cols());
          spilled_rows<T>& to = gradients[s - 1];
          graph.template scatter_rows<T>(mb.ids(), const_rows_ref<T>(dx),
                                         [&](node_t row, const T* v) { to.add(row, v); });
          to.release();
        }
      }
    }
    for (std::size_t i = 0; i < grads.size(); ++i) grads[i] = static_cast<T>(summed[i]);
    graph.all_reduce_sum(grads);
    optimiser.step(model.parameters());
    stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    graph.all_reduce_sum(std::span<double>(&loss, 1));
    detail::check_loss(loss, options, where, epoch);
    stats.train_loss = loss;

    if (options.evaluates(epoch)) {
      ctx.training = false;
      forward_stages(ctx, stages - 1);
      // Zeros of the sums' length (that of an empty output), then every part's added.
      std::vector<double> sums = detail::evaluation_sums(
          matrix<T>(0, width), {}, detail::out_of_core::rows_of(task, 0, 0), valid_normaliser);
      std::fill(sums.begin(), sums.end(), 0.0);
      for (std::int64_t c = 0; c < parts; ++c) {
        const node_t begin = part_begin(c), rows = part_end(c) - begin;
        minibatch_sample block = block_of(c);
        const matrix<T> x = input_rows(stages - 1, block.ids);
        if (rows == 0) continue;
        sampled_minibatch mb(std::move(block));
        const matrix<T> y = model.infer(mb, ctx, x, starts[stages - 1], model.num_layers());
        const std::vector<double> part = detail::evaluation_sums(
            y, data.split.subspan(static_cast<std::size_t>(begin), static_cast<std::size_t>(rows)),
            detail::out_of_core::rows_of(task, begin, rows), valid_normaliser);
        for (std::size_t i = 0; i < part.size(); ++i) sums[i] += part[i];
      }
      graph.all_reduce_sum(std::span<double>(sums));
      detail::score_evaluation(sums, task, width, valid_normaliser, stats);
    }
    std::uint64_t read = features_on_disk ? features_on_disk->bytes_read() : 0, written = 0;
    for (const auto* files : {&inputs, &gradients})
      for (const auto& f : *files) {
        read += f.bytes_read();
        written += f.bytes_written();
      }
    const std::uint64_t epoch_read = read - read_before, epoch_written = written - written_before;
    read_before = read;
    written_before = written;
    if (traffic) {
      traffic->bytes_read += epoch_read;
      traffic->bytes_written += epoch_written;
    }
    recorder.finish(stats, message("  spill ", format_mib(static_cast<double>(epoch_read)),
                                   " read, ", format_mib(static_cast<double>(epoch_written)),
                                   " written"));
  }
  return std::move(recorder.result());
}

}  // namespace sar
