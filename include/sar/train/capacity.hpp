// The capacity model: what a full-batch training run will need on each rank before it runs
// (issue 36; docs/sizing.md). Given the graph's sizes, how it is cut over P ranks, the model
// and the exchange, plan_run gives the largest rank's peak memory term by term, the halo
// traffic of an epoch, and, with the machine's measured rates (a calibration) and a link, the
// epoch time. Each memory term is the size of an allocation the code makes (named in the
// term), so the model follows the code; the activation terms, which depend on what the model's
// buffer pool keeps at the peak, use per-layer multiples measured on this code
// (bench/RESULTS.md §26) and are labelled as such.
// Each model's shapes come from its family (sar/train/families.hpp); sar-plan
// (tools/sar_plan.cpp) is its program.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "sar/core/error.hpp"
#include "sar/core/memory.hpp"
#include "sar/core/sparse_rows.hpp"
#include "sar/train/families.hpp"
#include "sar/train/model_config.hpp"

namespace sar {

/// The sizes of a graph as a plan needs them (doubles: a plan may be for a graph far larger
/// than any array this machine could hold).
struct graph_size {
  double nodes = 0;          ///< N
  double edges = 0;          ///< stored in-edges, with the self-loops the model adds
  double features = 0;       ///< F, per node
  double outputs = 0;        ///< classes or targets per node
  double edge_features = 0;  ///< per edge (0: none)
  /// The features' non-zero fraction: at most sar::sparse_features_density, a model whose
  /// first layer reads sparse rows trains on them (sar-train --sparse-features auto).
  double feature_density = 1;
};

/// How a graph is cut over P ranks, for the largest rank (the one whose memory limits a run).
struct partition_size {
  int ranks = 1;              ///< P
  double nodes = 0;           ///< its nodes
  double edges = 0;           ///< its in-edges (all, local and remote sources)
  double halo_rows = 0;       ///< distinct remote sources of its in-edges (rows it receives)
  double largest_block = 0;   ///< the most halo rows one peer sends it
  double send_rows = 0;       ///< rows it sends per gather, to all peers
  double all_halo_rows = 0;   ///< the halo rows of all ranks together (traffic)
};

/// The largest rank of a graph cut into P parts whose edges cross parts with probability
/// `cut_fraction` (1 - 1/P for a random cut; a partitioner's measured edge cut otherwise),
/// balanced in nodes and edges; a remote source is counted once per rank as N (1 - e^(-k))
/// with k the cut edges per node of the graph's other ranks (the halo of random endpoints).
/// Requires ranks >= 1, 0 <= cut_fraction <= 1; throws sar::invalid_argument otherwise.
inline partition_size estimate_partition(const graph_size& g, int ranks, double cut_fraction) {
  SAR_CHECK(ranks >= 1 && cut_fraction >= 0 && cut_fraction <= 1 && g.nodes > 0, invalid_argument,
            "sar::estimate_partition: ", ranks, " ranks, cut fraction ", cut_fraction, ", ",
            g.nodes, " nodes");
  partition_size p;
  p.ranks = ranks;
  const double P = ranks;
  p.nodes = std::ceil(g.nodes / P);
  p.edges = g.edges / P;
  if (ranks == 1) return p;
  const double remote = g.nodes - p.nodes;           // candidate halo rows
  const double cut = cut_fraction * p.edges;         // in-edges from other ranks
  p.halo_rows = remote * (1 - std::exp(-cut / remote));
  p.largest_block = p.halo_rows / (P - 1);
  p.send_rows = p.halo_rows;  // balanced: a rank sends about what it receives
  p.all_halo_rows = p.halo_rows * P;
  return p;
}

/// The model's epoch on one rank's part, timed by sar-plan --calibrate: how much longer it
/// took than the small graphs' costs per node and edge say (a larger graph misses the caches
/// and the TLB more; ranks on one machine share its memory bandwidth); and what the exchange
/// costs a rank per halo byte it sends, beyond the link: the plain codec's copies timed with
/// as many copies at once.
struct epoch_scale {
  double nodes = 0;           ///< the timed graph's nodes (a planned rank's part)
  int ranks_per_machine = 1;  ///< copies timed at once (as many ranks share the machine)
  double factor = 1;          ///< measured epoch / (nodes x per node + edges x per edge)
  /// A feature byte: encoded (gathered into the wire buffer), copied once (the transport),
  /// read where it arrives as a view. 0: not measured.
  double feature_seconds_per_byte = 0;
  /// A gradient byte: its wire buffer zeroed (the visitor adds into it), copied once,
  /// decoded and added into the owner's rows. 0: not measured.
  double gradient_seconds_per_byte = 0;
};

/// The machine's rates, measured by sar-plan --calibrate, and the link between ranks.
struct calibration {
  double spmm_seconds_per_value = 0;  ///< one edge x one column of an aggregation
  double gemm_seconds_per_flop = 0;   ///< a dense product's multiply-add, counted as 2
  double process_bytes = 18.3 * (1 << 20);  ///< a rank's memory before any data (sar-train)
  double link_bytes_per_second = 0;   ///< 0: ranks share memory (no link term)
  double link_latency_seconds = 0;    ///< per message
  /// One epoch of the planned model itself, timed on this machine (sar-plan --calibrate with
  /// the plan's model and widths) and split into a cost per node and per in-edge of a rank;
  /// 0: not measured, and the epoch is the kernel rates' lower bound.
  double epoch_seconds_per_node = 0;
  double epoch_seconds_per_edge = 0;  ///< see epoch_seconds_per_node
  /// The same model timed on parts of the planned size (empty: the small graphs' costs hold).
  std::vector<epoch_scale> epoch_scales;
};

/// The epoch_scale for a rank of `nodes` nodes among `ranks_per_machine` on its machine: of
/// the scales measured at that many ranks per machine (else at the nearest count measured),
/// interpolated in log(nodes) between the two around `nodes` and held beyond them; factor 1
/// and no halo costs with none.
inline epoch_scale epoch_scale_at(const calibration& rates, double nodes, int ranks_per_machine) {
  int nearest = 0;
  for (const epoch_scale& s : rates.epoch_scales)
    if (nearest == 0 || std::abs(s.ranks_per_machine - ranks_per_machine) <
                            std::abs(nearest - ranks_per_machine))
      nearest = s.ranks_per_machine;
  const epoch_scale *below = nullptr, *above = nullptr;
  for (const epoch_scale& s : rates.epoch_scales) {
    if (s.ranks_per_machine != nearest || s.nodes <= 0) continue;
    if (s.nodes <= nodes && (below == nullptr || s.nodes > below->nodes)) below = &s;
    if (s.nodes >= nodes && (above == nullptr || s.nodes < above->nodes)) above = &s;
  }
  if (below == nullptr || above == nullptr || below->nodes == above->nodes)
    return below != nullptr ? *below : above != nullptr ? *above : epoch_scale{};
  const double t = std::log(nodes / below->nodes) / std::log(above->nodes / below->nodes);
  const auto between = [t](double a, double b) { return a + t * (b - a); };
  return {nodes, nearest, between(below->factor, above->factor),
          between(below->feature_seconds_per_byte, above->feature_seconds_per_byte),
          between(below->gradient_seconds_per_byte, above->gradient_seconds_per_byte)};
}

/// What a run is: the model (widths, layers, heads, batch norm), the schedule and codecs.
struct run_settings {
  model_config model{};  ///< widths, layers, heads, batch norm, kind
  std::string schedule = "sequential";  ///< sequential | keep_halo | one_shot
  int halo_bits = 32;       ///< per value on the wire, forward (32: exact)
  int gradient_bits = 32;   ///< per value on the wire, backward
  int prefetch = 1;         ///< blocks fetched ahead by the sequential ring
  double value_bytes = 4;   ///< float 4, double 8
  double feature_bytes = 4;  ///< per dense input feature held: fp32 4, bf16 storage 2
  /// Ranks on one machine: they share its cores' memory bandwidth (the epoch_scale measured
  /// at that many) and its link (each sends its halo over it).
  int ranks_per_machine = 1;
};

/// One term of a plan's memory: its bytes and where in the code the allocation is.
struct memory_term {
  std::string name;    ///< e.g. "features"
  double bytes = 0;    ///< on the largest rank
  std::string source;  ///< the allocation (file or structure) it models
};

/// A plan for the largest rank.
struct run_plan {
  std::vector<memory_term> memory;  ///< every term, summing to peak_memory_bytes
  double peak_memory_bytes = 0;     ///< the largest rank's peak resident memory
  double halo_bytes_per_epoch = 0;  ///< sent by all ranks together, training (fwd + bwd)
  /// The epoch of a rank of 1 thread: from the model's own measured costs per node and edge
  /// times the epoch_scale of its part's size and ranks per machine, plus the exchange's
  /// copies of what it sends (epoch_measured; within 30 % here, bench/RESULTS.md §38), else
  /// the aggregations and dense products at the calibrated kernel rates, a lower bound
  /// (0.1-0.45 of measured epochs, §26). Both add the halo over the link. NaN: no calibration.
  double epoch_seconds = std::numeric_limits<double>::quiet_NaN();
  bool epoch_measured = false;  ///< epoch_seconds scales the model's measured epoch
};

namespace detail::capacity {

/// Whether a run of `c` trains on `g`'s features as sparse rows (as sar-train's default does:
/// bag-of-words densities, a model whose first layer reads them).
inline bool sparse_input(const graph_size& g, const model_config& c) {
  return g.feature_density <= sparse_features_density && reads_sparse_input(c);
}

/// The aggregations (and so the halo exchanges) of layer l in an epoch: forward, backward (the
/// input gradient), and for GAT the refetch of its halo in backward. The first layer wants no
/// input gradient: when it aggregates its input (no weight before the aggregation) its
/// backward needs no aggregation at all (GCN and GraphSAGE keep the aggregate for dW).
inline double exchanges(const planned_layer& l, bool first) {
  if (l.regathers) return 3;
  return first && l.exchanged >= l.input ? 1 : 2;
}

/// The graph layers of `c` for `features` inputs and `outputs` outputs, as its family plans
/// them (`sparse_input`: the first layer reads sparse rows).
inline std::vector<planned_layer> graph_layers(const model_config& c, double features,
                                               double outputs, bool sparse_input = false) {
  std::vector<planned_layer> out;
  double width = features;
  with_family(c.family, [&]<class F>() {
    for (int k = 0; k < c.layers; ++k) {
      out.push_back(F::plan_layer(c, k, width, outputs, sparse_input));
      width = out.back().output;
    }
  });
  return out;
}

}  // namespace detail::capacity

/// The plan of a full-batch run of `s` on graph `g` cut as `p` (see the top of this file).
/// Requires a model of at least one layer and positive sizes; throws sar::invalid_argument
/// naming the bad value otherwise. Never allocates the graph: any size gives a plan at once.
inline run_plan plan_run(const graph_size& g, const partition_size& p, const run_settings& s,
                         const calibration& rates = {}, bool calibrated = false) {
  constexpr const char* where = "sar::plan_run";
  SAR_CHECK(g.nodes > 0 && g.edges >= 0 && g.features >= 0 && g.outputs >= 1 && p.ranks >= 1 &&
                p.nodes > 0 && s.model.layers >= 1 && s.value_bytes > 0 &&
                s.ranks_per_machine >= 1 &&
                s.feature_bytes > 0 && s.feature_bytes <= 4 &&
                g.feature_density > 0 && g.feature_density <= 1,
            invalid_argument, where, ": ", g.nodes, " nodes, ", g.edges, " edges, ", g.outputs,
            " outputs, feature density ", g.feature_density, ", ", p.ranks, " ranks (",
            s.ranks_per_machine, " per machine), ", s.model.layers, " layers");
  SAR_CHECK(s.schedule == "sequential" || s.schedule == "keep_halo" || s.schedule == "one_shot",
            invalid_argument, where, ": unknown schedule '", s.schedule, "'");
  const double n = p.nodes, m = p.edges, h = p.halo_rows, vb = s.value_bytes;
  const bool distributed = p.ranks > 1;
  const bool sparse = detail::capacity::sparse_input(g, s.model);
  auto layers = detail::capacity::graph_layers(s.model, g.features, g.outputs, sparse);
  // bf16 storage with a GCN on one process: the first layer reads the stored rows as it needs
  // them (sar/nn/gcn.hpp: no decoded copy, and when it aggregates first no aggregate kept for
  // dW and no tiling; an input dropout is a mask of bits): measured 1.1 outputs of its width
  // at the peak, sar-train tiling no narrow rows (bench/RESULTS.md §40).
  const bool gcn_first_layer =
      with_family(s.model.family, []<class F>() { return F::gcn_first_layer; });
  const bool reads_bf16 = !distributed && !sparse && s.feature_bytes < 4 && gcn_first_layer;
  if (reads_bf16 && layers.front().input <= layers.front().output) layers.front().kept = 1.1;
  // Bytes of the features as sparse rows of values of `value` bytes: offsets, columns, values.
  const auto sparse_bytes = [&](double value) {
    return n * (8 + g.features * g.feature_density * (4 + value));
  };
  run_plan plan;
  const auto add = [&](std::string name, double bytes, std::string source) {
    plan.memory.push_back({std::move(name), bytes, std::move(source)});
    plan.peak_memory_bytes += bytes;
  };
  add("process", rates.process_bytes, "the binary, libraries, MPI and thread stacks (measured)");
  if (sparse)
    add("features", sparse_bytes(4) + (vb > 4 ? sparse_bytes(vb) : 0),
        "the part's sparse rows of float features (sar-train casts a copy for double)");
  else if (s.feature_bytes < 4)
    add("features", n * g.features * s.feature_bytes,
        "the features stored as bf16 (sar/core/bf16.hpp; a GCN on one process reads them row by "
        "row, other runs decode them every forward)");
  else
    add("features", n * g.features * 4 + (vb > 4 ? n * g.features * vb : 0),
        "the part's float features (sar-train casts a copy for double)");
  add("labels, split, ids", n * (4 + 1 + 8 + 8 * (distributed ? 2 : 0)),
      "graph_part labels, split, original ids (distributed: the shard's node ids too)");
  if (g.edge_features > 0)
    add("edge features", m * g.edge_features * 4 * (distributed ? 2 : 1),
        "the edge table (the shard keeps a copy of the part's)");
  if (distributed) {
    // graph_shard: per block the compressed rows, the CSR and its transpose with the map
    // between them; distributed_graph: out-degrees, the plan's send rows and the ids of sent
    // and received rows. The part's CSR (8 bytes per edge) is freed once the shard is built.
    add("graph (shard)", 24 * m + 40 * n + 24 * h + 16 * p.send_rows,
        "graph_shard blocks, halo_plan, distributed_graph (sar/distributed/)");
  } else {
    // local_schedule: the CSR, in- and out-degrees (a symmetric graph is its own transpose).
    add("graph", 8 * m + 24 * n, "local_schedule: csr, in_degrees, out_degrees");
  }
  double parameters = 0, activations = 0, widest_exchange = 0;
  double forward_values = 0, backward_values = 0;  // per halo row and epoch
  double kernel_seconds = 0;  // the aggregations and dense products at the kernel rates
  bool regathers = false;
  for (std::size_t k = 0; k < layers.size(); ++k) {
    const auto& l = layers[k];
    parameters += l.weights + l.output;
    activations += l.kept * n * l.output * vb;
    widest_exchange = std::max(widest_exchange, l.exchanged);
    regathers = regathers || l.regathers;
    // A refetch is a forward halo; a family may state its own counts (APPNP's K steps).
    const double forward = l.forward_exchanges >= 0 ? l.forward_exchanges : l.regathers ? 2 : 1;
    const double aggregations = l.backward_exchanges >= 0
                                    ? forward + l.backward_exchanges
                                    : detail::capacity::exchanges(l, k == 0);
    forward_values += l.exchanged * forward;
    backward_values += l.exchanged * (aggregations - forward);
    kernel_seconds += aggregations * m * l.exchanged * rates.spmm_seconds_per_value;
    // Dense products: forward, dW and (but in the first layer) dx; sparse input: its entries.
    kernel_seconds += (k == 0 ? 2 : 3) * 2 * n * l.input * l.output *
                      (k == 0 && sparse ? g.feature_density : 1) * rates.gemm_seconds_per_flop;
  }
  // The input's dropout copy, unless the first layer's output takes its buffer (a GCN that
  // aggregates first at its own width: output_over_input, sar/nn/layer.hpp).
  const bool output_over_dropout = !sparse && gcn_first_layer &&
                                   layers.front().input == layers.front().output;
  // bf16 storage decodes the features into a matrix that an input dropout then overwrites
  // (the same copy), else the first layer reads.
  const bool dropout = s.model.first_dropout() > 0, decoded = !sparse && s.feature_bytes < 4;
  if (reads_bf16)
    activations += dropout ? n * std::ceil(g.features / 64) * 8 : 0;  // the mask's bits
  else if ((dropout || decoded) && !(dropout && output_over_dropout))
    activations += sparse ? sparse_bytes(vb) : n * g.features * vb;  // sparse: masked rows
  add("activations", activations, "the model's outputs, kept aggregates and gradients "
      "(per-layer multiples measured: bench/RESULTS.md §26)");
  add("parameters", 4 * parameters * vb, "values, gradients, Adam's two moments (parameter_store)");
  if (distributed) {
    double halo_buffers = 0;
    // The ring has prefetch + 1 rounds in flight (at most P - 1), each a block received and
    // one sent; a layer that fetches its halo again in backward (GAT) has its halo and the
    // halo's gradient in flight at once.
    const double rounds = std::min<double>(s.prefetch + 1, p.ranks - 1);
    if (s.schedule == "sequential")
      halo_buffers = rounds * (p.largest_block + p.send_rows / (p.ranks - 1)) * widest_exchange *
                     vb * (regathers ? 2 : 1);
    else if (s.schedule == "one_shot")
      halo_buffers = (h + p.send_rows) * widest_exchange * vb;
    else  // keep_halo: every forward halo kept until its backward
      for (const auto& l : layers) halo_buffers += h * l.exchanged * vb;
    add("halo buffers", halo_buffers, "ring_transport's blocks in flight (or kept halos)");
    add("MPI", 10.0 * (1 << 20) * (p.ranks - 1),
        "Open MPI's buffers per peer (measured: about 10 MiB each, bench/RESULTS.md §26)");
    // 32 bits: exact values; fewer: the codec's bits per value.
    const auto bytes = [&](int bits) { return bits >= 32 ? vb : bits / 8.0; };
    plan.halo_bytes_per_epoch = p.all_halo_rows * (forward_values * bytes(s.halo_bits) +
                                                   backward_values * bytes(s.gradient_bits));
  }
  const int sharing = std::clamp(s.ranks_per_machine, 1, p.ranks);
  if (calibrated) {
    plan.epoch_measured = rates.epoch_seconds_per_node > 0;
    const epoch_scale scale = epoch_scale_at(rates, n, sharing);
    plan.epoch_seconds = plan.epoch_measured ? (n * rates.epoch_seconds_per_node +
                                                m * rates.epoch_seconds_per_edge) *
                                                   scale.factor
                                             : kernel_seconds;
    // The exchange's copies of what the rank sends (what it receives costs the sender's
    // peers the same), per value as the plain codec's: other codecs compute more per value.
    if (distributed)
      plan.epoch_seconds += p.all_halo_rows / p.ranks * vb *
                            (forward_values * scale.feature_seconds_per_byte +
                             backward_values * scale.gradient_seconds_per_byte);
  }
  // A machine's ranks send their halos over its one link.
  if (calibrated && distributed && rates.link_bytes_per_second > 0)
    plan.epoch_seconds += plan.halo_bytes_per_epoch / p.ranks * sharing /
                              rates.link_bytes_per_second +
                          static_cast<double>(layers.size()) * 3 * (p.ranks - 1) *
                              rates.link_latency_seconds;
  return plan;
}

}  // namespace sar

namespace sar {

/// A plan of out-of-core training (sar/train/out_of_core.hpp) of one rank within a memory
/// budget: how many parts, what each holds, what goes to disk.
struct out_of_core_plan {
  std::vector<memory_term> memory;  ///< what is held all run long, then the largest part's work
  double fixed_bytes = 0;   ///< the terms held all run long
  double part_rows = 0;     ///< destinations per part (0: none fits the budget: `refusal`)
  double parts = 0;         ///< K, the parts of the rank
  double part_bytes = 0;    ///< one part's work at the peak, on top of fixed_bytes
  double spill_bytes = 0;   ///< the spill files on disk
  double read_bytes = 0;    ///< read back per training epoch (evaluation adds a forward)
  double written_bytes = 0; ///< written per training epoch
  std::string refusal;      ///< why no part fits the budget; empty when one does
};

/// The plan of out-of-core training of the largest rank of `g` cut as `p`, with `s`'s model,
/// within `budget_bytes` (the process's resident memory), the features on disk when
/// `features_on_disk`. A part of R destinations is counted with R x (in-edges per node)
/// distinct sources besides them (at most the rank's other nodes): the most a part can read,
/// so a partitioned graph, whose parts read fewer, stays within the plan. part_rows is the
/// largest R within the budget. Throws as plan_run for bad sizes.
inline out_of_core_plan plan_out_of_core(const graph_size& g, const partition_size& p,
                                         const run_settings& s, double budget_bytes,
                                         bool features_on_disk) {
  const run_plan whole = plan_run(g, p, s);  // checks the sizes
  const double n = p.nodes, m = p.edges, vb = s.value_bytes;
  const auto layers = detail::capacity::graph_layers(s.model, g.features, g.outputs);
  out_of_core_plan plan;
  const auto hold = [&](std::string name, double bytes, std::string source) {
    plan.memory.push_back({std::move(name), bytes, std::move(source)});
    plan.fixed_bytes += bytes;
  };
  for (const memory_term& t : whole.memory)  // the terms of a whole-graph run held throughout
    if (t.name == "process" || t.name == "labels, split, ids" || t.name == "parameters" ||
        t.name == "MPI" || t.name == "edge features" || (t.name == "features" && !features_on_disk))
      hold(t.name, t.bytes, t.source);
  hold("graph", 8 * m + 24 * n, "the sampling graph: csr and out-degrees (sar/sampling/)");
  double widest = 0, widest_kept = 0;  // the widest stage input; the largest kept activation
  for (const auto& l : layers) {
    widest = std::max(widest, l.input);
    widest_kept = std::max(widest_kept, l.kept * std::max(l.input, l.output));
  }
  const double per_node = m / n, heads = std::max<double>(1, s.model.heads);
  const bool attention = std::any_of(layers.begin(), layers.end(),
                                     [](const planned_layer& l) { return l.regathers; });
  const auto part_bytes = [&](double rows) {
    const double sources = rows + std::min(n - rows, rows * per_node), edges = rows * per_node;
    return 16 * edges + 40 * sources                   // the block, its ids and degrees
           + (p.ranks > 1 ? 3 : 2) * sources * widest * vb  // input rows, their gradient
           + 2 * rows * widest_kept * vb               // the stage's activations
           + (attention ? 4 * edges * heads * vb : 0);  // attention per edge and head
  };
  double stage_inputs = 0;  // the widths spilled: every stage's input but the first's
  for (std::size_t k = 1; k < layers.size(); ++k) stage_inputs += layers[k].input;
  plan.spill_bytes = 2 * n * stage_inputs * vb + (features_on_disk ? n * g.features * 4 : 0);
  const double room = budget_bytes - plan.fixed_bytes;
  if (room < part_bytes(1)) {
    std::string terms;
    for (const auto& t : plan.memory)
      terms += message(terms.empty() ? "" : ", ", t.name, " ", format_bytes(t.bytes));
    plan.refusal = message("the budget of ", std::llround(budget_bytes), " bytes (",
                           format_bytes(budget_bytes), ") holds less than the ",
                           format_bytes(plan.fixed_bytes + part_bytes(1)), " it needs: ",
                           format_bytes(plan.fixed_bytes), " held all run long (", terms,
                           ") and ", format_bytes(part_bytes(1)), " for a part of one node");
    return plan;
  }
  double low = 1, high = n;  // part_bytes(low) fits
  while (low < high) {
    const double mid = std::floor((low + high + 1) / 2);
    if (part_bytes(mid) <= room) low = mid;
    else high = mid - 1;
  }
  plan.part_rows = low;
  plan.parts = std::ceil(n / low);
  plan.part_bytes = part_bytes(low);
  plan.memory.push_back({"a part's work", plan.part_bytes,
                         "its block, input rows and gradient, the stage's activations "
                         "(sar/train/out_of_core.hpp)"});
  // Training reads each stage's input rows of every part twice (forward, backward) and its
  // output gradient once; the input gradient's rows are read and written once more; every
  // stage but the last writes its output.
  // The sources of all parts: every node once as a destination, plus the halos.
  const double sources = n + std::min(n * per_node, plan.parts * (n - low));
  for (std::size_t k = 0; k < layers.size(); ++k) {
    const double in = layers[k].input * (k == 0 ? (features_on_disk ? 4 : 0) : vb);
    plan.read_bytes += (k + 1 < layers.size() ? 2 : 1) * sources * in +
                       (k + 1 < layers.size() ? n * layers[k].output * vb : 0) +
                       (k > 0 ? sources * layers[k].input * vb : 0);
    plan.written_bytes += (k + 1 < layers.size() ? 2 * n * layers[k].output * vb : 0) +
                          (k > 0 ? sources * layers[k].input * vb : 0);
  }
  return plan;
}

}  // namespace sar
