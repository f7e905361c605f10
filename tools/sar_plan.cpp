// sar-plan: what a full-batch training run will need before it runs (sar/train/capacity.hpp,
// docs/sizing.md): per rank peak memory term by term, halo traffic per epoch and, calibrated,
// the epoch time, for one rank count or a list.
//
//   sar-plan --nodes 111e6 --edges 3.2e9 --features 128 --classes 172 --model sage --hidden 256
//            --layers 3 --batch-norm --ranks 32,64,128
//   sar-plan --partitions STORE --model gat --json
//   sar-plan --dataset DIR.npy --model gcn --calibrate --calibration gcn.json
//            (this machine's rates and the model's own epoch, timed on small planted graphs)
//   sar-plan --dataset DIR.npy --model gcn --calibration gcn.json --link-gbit 10
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <tbb/global_control.h>
#include <tbb/task_arena.h>

#include "program_support.hpp"
#include "sar/core/memory.hpp"
#include "sar/io/output_file.hpp"
#include "sar/core/rng.hpp"
#include "sar/distributed/wire_codec.hpp"
#include "sar/graph/builders.hpp"
#include "sar/graph/generators.hpp"
#include "sar/graph/io/load.hpp"
#include "sar/kernels/dense.hpp"
#include "sar/kernels/spmm.hpp"
#include "sar/partition/store.hpp"
#include "sar/schedule/local_schedule.hpp"
#include "sar/train/capacity.hpp"
#include "sar/train/model_file.hpp"
#include "sar/version.hpp"
#include "sar_train/shared_runs.hpp"

namespace {

// The largest sizes planned: counts up to 2^53 (exact as doubles), widths up to 2^24 per node,
// layers and heads up to 1024. Larger ones are refused rather than planned as overflowed
// numbers (a negative or infinite peak).
constexpr double max_count = 9007199254740992.0, max_width = 16777216.0, max_layers = 1024;

struct settings {
  std::string partitions, dataset, calibration_file, model = "gcn";
  double nodes = 0, edges = 0, features = 0, classes = 0, edge_cut = -1;
  double feature_density = 0;  // 0: the source's (1 without one)
  std::vector<int> ranks;
  int layers = 0, heads = 0;
  double hidden = 0;
  bool batch_norm = false, calibrate = false, json = false;
  sar_programs::schedule_kind schedule = sar_programs::schedule_kind::sequential;
  sar_programs::precision precision = sar_programs::precision::single;
  sar_programs::feature_storage storage = sar_programs::feature_storage::fp32;
  int halo_bits = 32, gradient_bits = 32, prefetch = 1, ranks_per_machine = 1;
  double link_gbit = 0, latency_us = 0;
  std::uint64_t memory_budget = 0;  // --memory-budget: an out-of-core plan too (0: none)
  double disk_read_mbs = 1600, disk_write_mbs = 2300;  // the spill disk's rates
};

/// The graph's sizes and, for a store, its cut: from --partitions, --dataset or the numbers.
struct source {
  sar::graph_size graph;
  int store_parts = 0;       // a store's part count (0: none)
  double store_cut = -1;     // its measured edge cut fraction
  double largest_part_nodes = 0, largest_part_edges = 0;
};

source read_source(const settings& s) {
  source out;
  if (!s.partitions.empty()) {
    const sar::partition_metadata meta = sar::read_partition_metadata(s.partitions);
    out.graph = {static_cast<double>(meta.num_nodes), static_cast<double>(meta.num_edges),
                 static_cast<double>(meta.feature_dim),
                 static_cast<double>(sar::has_class_ids(meta.task) ? meta.num_classes
                                                                           : meta.num_outputs),
                 static_cast<double>(meta.edge_feature_dim)};
    if (meta.sparse_features && meta.num_nodes > 0 && meta.feature_dim > 0) {
      double entries = 0;  // the parts' feature_values.bin: a header, then 4 bytes an entry
      for (const auto& [path, file] : meta.manifest.files())
        if (path.ends_with("/feature_values.bin")) entries += (file.bytes - 48.0) / 4;
      out.graph.feature_density = entries / (out.graph.nodes * out.graph.features);
    }
    out.store_parts = meta.num_parts;
    out.store_cut = meta.quality.edge_cut_fraction;
    for (const sar::node_t k : meta.quality.part_nodes)
      out.largest_part_nodes = std::max(out.largest_part_nodes, static_cast<double>(k));
    for (const sar::edge_t k : meta.quality.part_edges)
      out.largest_part_edges = std::max(out.largest_part_edges, static_cast<double>(k));
  } else if (!s.dataset.empty()) {
    const auto [n, m] = sar::declared_graph_size(s.dataset);
    SAR_CHECK(n > 0 && m >= 0, sar::invalid_argument, "sar-plan: ", s.dataset, " does not "
              "declare its node and edge counts (a .npy dataset or an OGB directory with "
              "num-edge-list does); give --nodes and --edges");
    out.graph.nodes = static_cast<double>(n);
    out.graph.edges = static_cast<double>(m);
    std::ifstream meta(std::filesystem::path(s.dataset) / "meta.json");
    if (meta.good()) {
      const auto j = nlohmann::json::parse(meta, nullptr, false);
      if (j.is_object()) {
        out.graph.features = j.value("feature_dim", 0.0);
        out.graph.outputs = j.value("num_classes", 0.0) + j.value("num_outputs", 0.0);
        out.graph.edge_features = j.value("edge_feature_dim", 0.0);
        if (j.value("sparse_features", false) && out.graph.features > 0)
          out.graph.feature_density =
              j.value("feature_entries", 0.0) / (out.graph.nodes * out.graph.features);
      }
    }
  }
  if (s.nodes > 0) out.graph.nodes = s.nodes;
  if (s.edges > 0) out.graph.edges = s.edges;
  if (s.features > 0) out.graph.features = s.features;
  if (s.classes > 0) out.graph.outputs = s.classes;
  if (s.feature_density > 0) out.graph.feature_density = s.feature_density;
  out.graph.feature_density = std::clamp(out.graph.feature_density, 1e-12, 1.0);
  const auto within = [](double v, double low, double high) { return v >= low && v <= high; };
  SAR_CHECK(out.graph.nodes == 0 || out.graph.features == 0 || out.graph.outputs == 0 ||
                (within(out.graph.nodes, 1, max_count) && within(out.graph.edges, 0, max_count) &&
                 within(out.graph.features, 1, max_width) &&
                 within(out.graph.outputs, 1, max_width) &&
                 within(out.graph.edge_features, 0, max_width)),
            sar::invalid_argument, "sar-plan: the graph's sizes (", out.graph.nodes, " nodes, ",
            out.graph.edges, " edges, ", out.graph.features, " features, ", out.graph.outputs,
            " classes, ", out.graph.edge_features, " edge features) are beyond what is planned "
            "(counts up to 2^53, widths up to 2^24)");
  SAR_CHECK(out.graph.nodes > 0 && out.graph.edges >= 0 && out.graph.features > 0 &&
                out.graph.outputs > 0,
            sar::invalid_argument, "sar-plan: the graph needs nodes, edges, features and "
            "classes: give --partitions, --dataset, or --nodes --edges --features --classes "
            "(have ", out.graph.nodes, ", ", out.graph.edges, ", ", out.graph.features, ", ",
            out.graph.outputs, ")");
  return out;
}

/// The machine's rates on one core (a rank of 1 thread, as the plan assumes): GCN's
/// aggregation and a dense product on a planted graph, timed.
sar::calibration measure_rates() {
  const tbb::global_control one_core(tbb::global_control::max_allowed_parallelism, 1);
  using clock = std::chrono::steady_clock;
  const auto seconds = [](clock::time_point t) {
    return std::chrono::duration<double>(clock::now() - t).count();
  };
  const sar::graph_dataset g = sar::make_planted_partition(
      {.num_nodes = 100000, .average_degree = 20, .feature_dim = 64, .seed = 3});
  sar::local_schedule schedule(sar::with_self_loops(g.graph, sar::self_loop_policy::add));
  const sar::matrixf x = g.features;
  sar::matrixf y(x.rows(), x.cols());
  sar::calibration c;
  double best = 1e300;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t = clock::now();
    sar::set_zero<float>(y);
    schedule.gather({}, x, [&](const sar::graph_block& block, const auto& halo) {
      sar::spmm_add<float>(block, halo, y);
    });
    best = std::min(best, seconds(t));
  }
  c.spmm_seconds_per_value =
      best / (static_cast<double>(schedule.graph().num_edges()) * static_cast<double>(x.cols()));
  const sar::matrixf w = sar::matrixf::Random(64, 64);
  best = 1e300;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t = clock::now();
    sar::dense_product<false, float>(x, w, y);
    best = std::min(best, seconds(t));
  }
  c.gemm_seconds_per_flop = best / (2.0 * static_cast<double>(x.rows()) * 64 * 64);
  return c;
}

/// What an end-to-end calibration is of: the model and the widths it was timed with.
nlohmann::json model_signature(const sar::model_config& c, const sar::graph_size& g,
                               const std::string& precision) {
  return {{"model", c.family}, {"layers", c.layers}, {"hidden", c.hidden},
          {"heads", c.heads}, {"batch_norm", c.batch_norm}, {"features", g.features},
          {"outputs", g.outputs}, {"precision", precision}};
}

/// The bytes one timed copy of `config` on a planted graph of `nodes` nodes and `edges`
/// in-edges needs: the model's parameters and activations, the features twice (the dataset's
/// and the model's copy) and the graph.
double copy_bytes(const sar::model_config& config, const sar::graph_size& g, double nodes,
                  double edges, std::size_t value_bytes) {
  const auto classes = static_cast<std::int32_t>(std::max(2.0, g.outputs));
  const sar::model_memory need = sar::estimate_model_memory(
      config, g.features, classes, static_cast<sar::node_t>(nodes), value_bytes);
  return need.parameters + need.activations + 2.0 * nodes * g.features * value_bytes +
         16.0 * edges + 32.0 * nodes;
}

/// Runs body(c) for c = 0, ..., copies - 1 at once, each on a thread and one core of its own
/// (a task arena of one thread: as that many ranks of 1 thread share a machine). Rethrows the
/// first copy's failure once all have ended.
template <class Body>
void run_at_once(int copies, Body&& body) {
  std::vector<std::exception_ptr> failed(static_cast<std::size_t>(copies));
  const auto run_copy = [&](std::size_t c) {
    try {
      tbb::task_arena one_core(1, 1);  // no workers: the copy's own thread alone
      one_core.execute([&] { body(c); });
    } catch (...) {
      failed[c] = std::current_exception();
    }
  };
  std::vector<std::thread> threads;
  for (std::size_t c = 1; c < failed.size(); ++c) threads.emplace_back(run_copy, c);
  run_copy(0);
  for (auto& t : threads) t.join();
  for (const auto& e : failed)
    if (e) std::rethrow_exception(e);
}

/// The model families sar-plan plans: those that read neither edge features nor node types
/// (a planted graph has neither).
std::vector<std::string> plannable_families() {
  std::vector<std::string> names;
  sar::for_each_family([&]<class F>() {
    if (!F::reads_graph_types && !F::reads_edge_features(sar::paper_defaults(F::name)))
      names.emplace_back(F::name);
  });
  return names;
}

/// Whether a model of `c` adds a self-loop per node to the graph it reads (prepare_model_graph).
bool adds_self_loops(const sar::model_config& c) {
  return sar::model_self_loops(c) == sar::self_loop_policy::add;
}

/// The mean of `values`.
double mean(const std::vector<double>& values) {
  return std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(values.size());
}

/// The wall seconds of one epoch of `config` (g.features inputs, g.outputs classes) on a
/// planted graph of `nodes` nodes with about `degree` in-edges per node before the model's
/// self-loops (seed 5), in `copies` copies at once (run_at_once): the mean over the copies of
/// their fastest epoch after the first of `epochs`. Also sets *edges to one copy's in-edges,
/// the self-loops included.
template <class T>
double time_copies(const sar::model_config& config, const sar::graph_size& g, sar::node_t nodes,
                   double degree, int copies, int epochs, double* edges) {
  const auto features = static_cast<std::int32_t>(g.features);
  const auto classes = static_cast<std::int32_t>(std::max(2.0, g.outputs));
  std::vector<double> seconds(static_cast<std::size_t>(copies)), copy_edges(seconds.size());
  run_at_once(copies, [&](std::size_t c) {
    sar::graph_dataset data = sar::make_planted_partition(
        {.num_nodes = nodes, .num_classes = classes, .average_degree = degree,
         .feature_dim = features, .seed = 5});
    sar::matrixf no_edge_table;
    sar::prepare_model_graph(config, data.graph, no_edge_table);
    copy_edges[c] = static_cast<double>(data.graph.num_edges());
    const std::vector<double> epoch = sar_train::epoch_seconds<T>(config, data, epochs);
    seconds[c] = *std::min_element(epoch.begin() + 1, epoch.end());
  });
  *edges = copy_edges[0];
  return mean(seconds);
}

/// scale.feature_seconds_per_byte and gradient_seconds_per_byte := what the exchange's own
/// copies cost per wire byte with the plain codec, in `copies` copies at once (run_at_once),
/// on halo blocks of a quarter of a 400k x `width` matrix's rows at random (beyond the caches,
/// as a part's are): features are encoded, then copied once (the transport: Open MPI's shared
/// memory or a socket copies the bytes at least once) and read in place; gradients have their
/// wire buffer zeroed (the visitor adds into it), are copied once and decoded into the
/// owner's rows. The fastest of 3 each. Throws sar::invalid_argument if the copies need more
/// memory than is available.
template <class T>
void time_halo_copies(int copies, Eigen::Index width, sar::epoch_scale& scale) {
  constexpr sar::node_t rows = 400000;
  sar::check_memory<sar::invalid_argument>(
      "sar-plan --calibrate", sar::message("timing ", copies, " copies of the exchange's copies"),
      copies * 2.5 * static_cast<double>(rows * width) * sizeof(T));
  std::vector<double> feature(static_cast<std::size_t>(copies)), gradient(feature.size());
  run_at_once(copies, [&](std::size_t c) {
    const sar::matrix<T> x = sar::matrix<T>::Random(rows, width);
    sar::matrix<T> dx = sar::matrix<T>::Zero(rows, width);
    std::vector<sar::node_t> block;  // the rows of one peer's halo, ascending
    const sar::counter_rng pick(5 + c, sar::rng_stream::generator_edges);
    for (sar::node_t r = 0; r < rows; ++r)
      if (pick.uniform(static_cast<std::uint64_t>(r)) < 0.25) block.push_back(r);
    const sar::plain_codec codec;
    const sar::codec_context ctx;
    std::vector<std::byte> wire;
    std::vector<std::byte> copied(
        codec.wire_bytes<T>(static_cast<Eigen::Index>(block.size()), width));
    sar::rows_ref<T> out(dx);
    using clock = std::chrono::steady_clock;
    const auto since = [](clock::time_point t) {
      return std::chrono::duration<double>(clock::now() - t).count();
    };
    double best_feature = 1e300, best_gradient = 1e300;
    for (int rep = 0; rep < 3; ++rep) {
      auto t = clock::now();
      codec.encode<T>(x, block, ctx, wire);
      std::memcpy(copied.data(), wire.data(), wire.size());
      best_feature = std::min(best_feature, since(t));
      t = clock::now();
      std::memset(wire.data(), 0, wire.size());
      std::memcpy(copied.data(), wire.data(), wire.size());
      codec.decode_add<T>(copied, block, ctx, out);
      best_gradient = std::min(best_gradient, since(t));
    }
    feature[c] = best_feature / static_cast<double>(wire.size());
    gradient[c] = best_gradient / static_cast<double>(wire.size());
  });
  scale.feature_seconds_per_byte = mean(feature);
  scale.gradient_seconds_per_byte = mean(gradient);
}

/// rates.epoch_seconds_per_node / _per_edge := one epoch of `config` (g.features inputs,
/// g.outputs classes) on one core, split into a cost per node and per in-edge: 3 epochs on
/// planted graphs of 100k nodes (beyond the caches, as the graphs planned for) at average
/// degrees 10 and 30, the difference giving the edges' share. Throws sar::invalid_argument if
/// that needs more memory than is available.
template <class T>
void measure_model(const sar::model_config& config, const sar::graph_size& g,
                   sar::calibration& rates) {
  constexpr sar::node_t nodes = 100000;
  sar::check_memory<sar::invalid_argument>(
      "sar-plan --calibrate", sar::message("timing the model on ", nodes, " nodes"),
      copy_bytes(config, g, nodes, 31.0 * nodes, sizeof(T)));
  double seconds[2] = {0, 0}, edges[2] = {0, 0};
  for (int k = 0; k < 2; ++k)
    seconds[k] = time_copies<T>(config, g, nodes, k == 0 ? 10.0 : 30.0, 1, 3, &edges[k]);
  rates.epoch_seconds_per_edge = std::max(0.0, (seconds[1] - seconds[0]) / (edges[1] - edges[0]));
  rates.epoch_seconds_per_node =
      std::max(0.0, (seconds[0] - edges[0] * rates.epoch_seconds_per_edge) / nodes);
}

/// Adds to rates.epoch_scales the model's epoch on a planted graph of a planned rank's part
/// (`part` nodes and in-edges, self-loops included), `ranks_per_machine` copies at once, 3
/// epochs as measure_model's; fewer nodes (the same degree, at least 100k or the part's) where
/// the copies would not fit in 70 % of the memory available; and, for a part of several
/// ranks, the exchange's copies (time_halo_copies). Requires measure_model's costs in rates.
/// Nothing when a scale of about that size (within 5 %) and sharing is there already. Throws
/// sar::invalid_argument if even the fewest nodes do not fit.
template <class T>
void measure_scale(const sar::model_config& config, const sar::graph_size& g,
                   const sar::partition_size& part, int ranks_per_machine,
                   sar::calibration& rates) {
  const double degree = part.edges / part.nodes;
  // The copies' bytes grow about linearly with the nodes: as many as 70 % of what is free holds.
  const double budget =
      0.7 * static_cast<double>(sar::available_memory_bytes()) / ranks_per_machine;
  const double need = copy_bytes(config, g, part.nodes, part.edges, sizeof(T));
  const double nodes = std::max(std::min(part.nodes, 1e5),
                                std::floor(part.nodes * std::min(1.0, budget / need)));
  for (const sar::epoch_scale& s : rates.epoch_scales)
    if (s.ranks_per_machine == ranks_per_machine && std::abs(s.nodes - nodes) <= 0.05 * nodes)
      return;
  sar::check_memory<sar::invalid_argument>(
      "sar-plan --calibrate", sar::message("timing ", ranks_per_machine, " copies of the model "
                                           "on ", nodes, " nodes"),
      ranks_per_machine * copy_bytes(config, g, nodes, degree * nodes, sizeof(T)));
  double edges = 0;
  const double seconds = time_copies<T>(config, g, static_cast<sar::node_t>(nodes),
                                        std::max(1.0, degree - (adds_self_loops(config) ? 1 : 0)),
                                        ranks_per_machine, 3, &edges);
  const double expected =
      nodes * rates.epoch_seconds_per_node + edges * rates.epoch_seconds_per_edge;
  sar::epoch_scale scale{nodes, ranks_per_machine, expected > 0 ? seconds / expected : 1};
  // The exchanged rows as wide as a hidden layer's output (GAT: every head's).
  sar::model_config two_layers = config;
  two_layers.layers = 2;
  const auto width = static_cast<Eigen::Index>(
      sar::detail::capacity::graph_layers(two_layers, 1, 1).front().output);
  if (part.ranks > 1) time_halo_copies<T>(ranks_per_machine, width, scale);
  rates.epoch_scales.push_back(scale);
}

nlohmann::json rates_json(const sar::calibration& c, const nlohmann::json& model) {
  nlohmann::json j = {{"format", "sar-plan-calibration"},
                      {"spmm_seconds_per_value", c.spmm_seconds_per_value},
                      {"gemm_seconds_per_flop", c.gemm_seconds_per_flop},
                      {"process_bytes", c.process_bytes}};
  if (c.epoch_seconds_per_node > 0) {
    j["model"] = model;
    j["epoch_seconds_per_node"] = c.epoch_seconds_per_node;
    j["epoch_seconds_per_edge"] = c.epoch_seconds_per_edge;
    j["epoch_scales"] = nlohmann::json::array();
    for (const sar::epoch_scale& s : c.epoch_scales)
      j["epoch_scales"].push_back({{"nodes", s.nodes}, {"ranks_per_machine", s.ranks_per_machine},
                                   {"factor", s.factor},
                                   {"feature_seconds_per_byte", s.feature_seconds_per_byte},
                                   {"gradient_seconds_per_byte", s.gradient_seconds_per_byte}});
  }
  return j;
}

/// The rates in `file`; its end-to-end epoch costs only if they were measured for `model`.
sar::calibration read_rates(const std::string& file, const nlohmann::json& model) {
  std::error_code error;
  SAR_CHECK(std::filesystem::is_regular_file(file, error), sar::io_error,
            "sar-plan: --calibration ", file, " is not a file (",
            std::filesystem::is_directory(file, error) ? "a directory"
            : std::filesystem::exists(file, error)     ? "not a regular file"
                                                       : "no such file",
            "): give the file --calibrate --calibration wrote");
  std::ifstream in(file);
  SAR_CHECK(in.good(), sar::io_error, "sar-plan: cannot read the calibration ", file);
  const auto j = nlohmann::json::parse(in, nullptr, false);
  SAR_CHECK(j.is_object() && j.value("format", "") == "sar-plan-calibration" &&
                j.contains("spmm_seconds_per_value") && j["spmm_seconds_per_value"].is_number() &&
                j.contains("gemm_seconds_per_flop") && j["gemm_seconds_per_flop"].is_number(),
            sar::io_error, "sar-plan: ", file, " is not a sar-plan calibration (write one with "
            "--calibrate --calibration FILE)");
  sar::calibration c;
  c.spmm_seconds_per_value = j["spmm_seconds_per_value"].get<double>();
  c.gemm_seconds_per_flop = j["gemm_seconds_per_flop"].get<double>();
  c.process_bytes = j.value("process_bytes", c.process_bytes);
  SAR_CHECK(c.spmm_seconds_per_value > 0 && c.gemm_seconds_per_flop > 0 && c.process_bytes > 0,
            sar::io_error, "sar-plan: ", file, ": rates must be positive");
  if (j.contains("model") && j["model"] == model && j.value("epoch_seconds_per_node", 0.0) > 0) {
    c.epoch_seconds_per_node = j["epoch_seconds_per_node"].get<double>();
    c.epoch_seconds_per_edge = std::max(0.0, j.value("epoch_seconds_per_edge", 0.0));
    for (const auto& e : j.value("epoch_scales", nlohmann::json::array())) {
      SAR_CHECK(e.is_object() && e.value("nodes", 0.0) > 0 &&
                    e.value("ranks_per_machine", 0) >= 1 && e.value("factor", 0.0) > 0,
                sar::io_error, "sar-plan: ", file, ": an epoch scale needs nodes, "
                "ranks_per_machine and factor, all positive: ", e.dump());
      c.epoch_scales.push_back({e["nodes"].get<double>(), e["ranks_per_machine"].get<int>(),
                                e["factor"].get<double>(),
                                std::max(0.0, e.value("feature_seconds_per_byte", 0.0)),
                                std::max(0.0, e.value("gradient_seconds_per_byte", 0.0))});
    }
  }
  return c;
}

int run(int argc, char** argv) {
  settings s;
  CLI::App app{"sar-plan: the per-rank memory, halo traffic and epoch time of a full-batch "
               "training run, before it runs (docs/sizing.md)", "sar-plan"};
  app.add_option("--partitions", s.partitions, "a partition store: its sizes and measured cut");
  app.add_option("--dataset", s.dataset, "a .npy dataset or OGB directory that declares its sizes");
  app.add_option("--nodes", s.nodes, "nodes of the graph")
      ->check(sar_programs::number_in(1, max_count));
  app.add_option("--edges", s.edges, "stored (directed) edges of the graph")
      ->check(sar_programs::number_in(0, max_count));
  app.add_option("--features", s.features, "features per node")
      ->check(sar_programs::number_in(1, max_width));
  app.add_option("--feature-density", s.feature_density,
                 "the features' non-zero fraction (default: a sparse store's or .npy dataset's, "
                 "else 1); at most 0.05 plans the sparse input rows sar-train then uses")
      ->check(sar_programs::positive)
      ->check(sar_programs::number_in(0, 1));
  app.add_option("--classes", s.classes, "classes (or regression outputs)")
      ->check(sar_programs::number_in(1, max_width));
  const std::vector<std::string> families = plannable_families();
  std::string choices;
  for (const auto& name : families) choices += (choices.empty() ? "" : " | ") + name;
  app.add_option("--model", s.model, choices)
      ->check(CLI::IsMember(families))->capture_default_str();
  app.add_option("--layers", s.layers, "graph layers (default 2)")
      ->check(sar_programs::number_in(1, max_layers));
  app.add_option("--hidden", s.hidden, "hidden width, per head for GAT (default: the model's)")
      ->check(sar_programs::number_in(1, max_width));
  app.add_option("--heads", s.heads, "GAT heads (default 8)")
      ->check(sar_programs::number_in(1, max_layers));
  app.add_flag("--batch-norm", s.batch_norm, "batch normalisation after every hidden layer");
  app.add_option("--ranks", s.ranks, "ranks P, or a list: 1,2,4,8")->delimiter(',')
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--edge-cut", s.edge_cut, "fraction of edges between parts (default: the "
                 "store's, else 1 - 1/P as a random cut)")->check(sar_programs::number_in(0, 1));
  sar_programs::add_choice(app, "--schedule", s.schedule, sar_programs::schedule_names,
                           "sequential | keep_halo | one_shot");
  app.add_option("--halo-bits", s.halo_bits, "bits per value of forward halos")
      ->check(CLI::IsMember({1, 2, 4, 8, 16, 32}))->capture_default_str();
  app.add_option("--gradient-bits", s.gradient_bits, "bits per value of backward halos")
      ->check(CLI::IsMember({1, 2, 4, 8, 16, 32}))->capture_default_str();
  sar_programs::add_choice(app, "--precision", s.precision, sar_programs::precision_names,
                           "float | double");
  sar_programs::add_choice(app, "--storage", s.storage, sar_programs::storage_names,
                           "how dense input features are held (as sar-train --storage): fp32 | "
                           "bf16");
  app.add_option("--link-gbit", s.link_gbit, "link bandwidth between ranks in Gbit/s (0: shared "
                 "memory, no link term)")->check(sar_programs::non_negative);
  app.add_option("--latency-us", s.latency_us, "link latency per message, microseconds")
      ->check(sar_programs::non_negative);
  app.add_option("--ranks-per-machine", s.ranks_per_machine, "ranks sharing one machine: its "
                 "memory bandwidth (--calibrate times that many copies at once) and its link "
                 "(default 1)")->check(CLI::Range(1, 1 << 20));
  app.add_flag("--calibrate", s.calibrate, "measure this machine's rates (a few seconds) and, "
               "given a graph, time the model itself: on small planted graphs (its epoch per "
               "node and edge), then on one of each planned P's part, --ranks-per-machine "
               "copies at once (1 to 4 minutes at 1M nodes); with --calibration FILE write "
               "them there");
  app.add_option("--calibration", s.calibration_file, "the rates --calibrate wrote: with them "
                 "the plan gives epoch times")->check(sar_programs::not_empty);
  app.add_flag("--json", s.json, "print one JSON object instead of the table");
  sar_programs::add_byte_size_option(
      app, "--memory-budget", s.memory_budget,
      "also plan out-of-core training within this much memory per rank (e.g. 16G; "
      "sar-train --memory-budget): the parts, what each holds, the bytes spilled, read and "
      "written per epoch; refused, naming what does not fit, below the smallest budget");
  app.add_option("--disk-read-mbs", s.disk_read_mbs,
                 "with --memory-budget: the spill disk's sequential read rate, MB/s")
      ->check(sar_programs::positive)->capture_default_str();
  app.add_option("--disk-write-mbs", s.disk_write_mbs,
                 "with --memory-budget: the spill disk's sequential write rate, MB/s")
      ->check(sar_programs::positive)->capture_default_str();
  app.set_version_flag("--version", "sar-plan (sar " SAR_VERSION_STRING ")");
  if (const auto status = sar_programs::parse_command_line(app, argc, argv)) return *status;

  const bool has_graph = !s.partitions.empty() || !s.dataset.empty() || s.nodes > 0;
  if (s.calibrate && !has_graph) {  // the kernel rates alone
    const sar::calibration rates = measure_rates();
    if (!s.calibration_file.empty())
      sar::write_output_file(s.calibration_file, rates_json(rates, {}).dump(2) + "\n", "sar-plan");
    std::printf("%s\n", rates_json(rates, {}).dump(2).c_str());
    return 0;
  }

  const source src = read_source(s);
  sar::run_settings run;
  run.model = sar::paper_defaults(s.model);
  if (s.layers > 0) run.model.layers = s.layers;
  if (s.hidden > 0) run.model.hidden = static_cast<Eigen::Index>(s.hidden);
  if (s.heads > 0) run.model.heads = s.heads;
  run.model.batch_norm = s.batch_norm;
  run.schedule = sar_programs::name_of(sar_programs::schedule_names, s.schedule);
  run.halo_bits = s.halo_bits;
  run.gradient_bits = s.gradient_bits;
  run.value_bytes = s.precision == sar_programs::precision::twice ? 8 : 4;
  run.feature_bytes = s.storage == sar_programs::feature_storage::bf16 ? 2 : 4;
  // The stored edges plus the self-loops GCN and GAT add.
  sar::graph_size graph = src.graph;
  if (adds_self_loops(run.model)) graph.edges += graph.nodes;
  std::vector<int> ranks = s.ranks;
  if (ranks.empty()) ranks.push_back(src.store_parts > 0 ? src.store_parts : 1);

  // The cut and the largest rank's part of each rank count.
  const auto cut_of = [&](int P) {
    return s.edge_cut >= 0                               ? s.edge_cut
           : src.store_parts == P && src.store_cut >= 0 ? src.store_cut
                                                        : 1.0 - 1.0 / P;
  };
  const auto part_of = [&](int P) {
    sar::partition_size part = sar::estimate_partition(graph, P, cut_of(P));
    if (src.store_parts == P) {  // the store's largest part
      part.nodes = src.largest_part_nodes;
      part.edges = src.largest_part_edges + (adds_self_loops(run.model) ? part.nodes : 0);
    }
    return part;
  };
  const auto sharing = [&](int P) { return std::min(P, s.ranks_per_machine); };

  // With --calibrate and a graph, the kernel rates and the model's own epoch on this machine:
  // on small graphs, then on each planned rank's part with its machine's ranks at once.
  const nlohmann::json signature = model_signature(
      run.model, src.graph, sar_programs::name_of(sar_programs::precision_names, s.precision));
  sar::calibration rates;
  bool calibrated = false;
  if (s.calibrate) {
    rates = measure_rates();
    const bool wide = s.precision == sar_programs::precision::twice;
    if (wide) measure_model<double>(run.model, src.graph, rates);
    else measure_model<float>(run.model, src.graph, rates);
    for (const int P : ranks) {
      if (wide) measure_scale<double>(run.model, src.graph, part_of(P), sharing(P), rates);
      else measure_scale<float>(run.model, src.graph, part_of(P), sharing(P), rates);
    }
    calibrated = true;
    if (!s.calibration_file.empty())
      sar::write_output_file(s.calibration_file, rates_json(rates, signature).dump(2) + "\n",
                             "sar-plan");
  } else if (!s.calibration_file.empty()) {
    rates = read_rates(s.calibration_file, signature);
    calibrated = true;
  }
  rates.link_bytes_per_second = s.link_gbit * 1e9 / 8;
  rates.link_latency_seconds = s.latency_us * 1e-6;

  nlohmann::json plans = nlohmann::json::array();
  for (const int P : ranks) {
    const double cut = cut_of(P);
    const sar::partition_size part = part_of(P);
    run.ranks_per_machine = sharing(P);
    const sar::run_plan plan = sar::plan_run(graph, part, run, rates, calibrated);
    SAR_CHECK(std::isfinite(plan.peak_memory_bytes) && plan.peak_memory_bytes >= 0 &&
                  std::isfinite(plan.halo_bytes_per_epoch) && plan.halo_bytes_per_epoch >= 0,
              sar::invalid_argument, "sar-plan: the plan for P = ", P, " overflows (peak ",
              plan.peak_memory_bytes, " B, halo ", plan.halo_bytes_per_epoch,
              " B per epoch): the sizes are beyond what is planned");
    nlohmann::json terms = nlohmann::json::object();
    for (const auto& t : plan.memory) terms[t.name] = t.bytes;
    plans.push_back({{"ranks", P}, {"ranks_per_machine", run.ranks_per_machine},
                     {"edge_cut_fraction", cut},
                     {"feature_density", graph.feature_density},
                     {"storage", sar_programs::name_of(sar_programs::storage_names, s.storage)},
                     {"peak_memory_bytes_per_rank", plan.peak_memory_bytes},
                     {"memory_terms", terms},
                     {"halo_bytes_per_epoch", plan.halo_bytes_per_epoch},
                     {"epoch_seconds", std::isnan(plan.epoch_seconds)
                                           ? nlohmann::json(nullptr)
                                           : nlohmann::json(plan.epoch_seconds)},
                     {"epoch_seconds_measured_model", plan.epoch_measured}});
    if (s.memory_budget > 0) {
      const auto budget = static_cast<double>(s.memory_budget);
      const sar::out_of_core_plan ooc = sar::plan_out_of_core(graph, part, run, budget, true);
      SAR_CHECK(ooc.refusal.empty(), sar::invalid_argument, "--memory-budget, P = ", P,
                ": ", ooc.refusal);
      // The disk's share of the epoch: what it reads and writes at its rates (a bound below:
      // the page cache serves what it still holds; the compute runs again in backward).
      const double io_seconds =
          ooc.read_bytes / (s.disk_read_mbs * 1e6) + ooc.written_bytes / (s.disk_write_mbs * 1e6);
      // A store of METIS parts that all fit (sar-partition's 5 % imbalance), P ranks sharing
      // them equally (docs/out-of-core.md: parts of neighbourhoods).
      const double store_parts = P * std::ceil(1.05 * ooc.parts);
      nlohmann::json held = nlohmann::json::object();
      for (const auto& t : ooc.memory) held[t.name] = t.bytes;
      plans.back()["out_of_core"] = {
          {"memory_budget_bytes", budget}, {"parts", ooc.parts}, {"part_rows", ooc.part_rows},
          {"fixed_bytes", ooc.fixed_bytes}, {"part_bytes", ooc.part_bytes},
          {"peak_memory_bytes", ooc.fixed_bytes + ooc.part_bytes}, {"memory_terms", held},
          {"spill_bytes", ooc.spill_bytes}, {"read_bytes_per_epoch", ooc.read_bytes},
          {"written_bytes_per_epoch", ooc.written_bytes}, {"io_seconds_per_epoch", io_seconds},
          {"store_parts", store_parts}};
      if (!s.json) {
        std::printf("out of core within %s: %.0f parts of %.0f nodes per rank, peak %s; spills "
                    "%s; per epoch reads %s, writes %s (%.1f s of disk time at %.0f / %.0f "
                    "MB/s)\n",
                    sar::format_bytes(budget).c_str(), ooc.parts, ooc.part_rows,
                    sar::format_bytes(ooc.fixed_bytes + ooc.part_bytes).c_str(),
                    sar::format_bytes(ooc.spill_bytes).c_str(),
                    sar::format_bytes(ooc.read_bytes).c_str(),
                    sar::format_bytes(ooc.written_bytes).c_str(), io_seconds, s.disk_read_mbs,
                    s.disk_write_mbs);
        for (const auto& t : ooc.memory)
          std::printf("  %-20s %12s  %s\n", t.name.c_str(), sar::format_bytes(t.bytes).c_str(),
                      t.source.c_str());
        std::printf("  or a partition store of parts that each fit: sar-partition --method "
                    "metis --parts %.0f\n", store_parts);
      }
    }
    if (!s.json) {
      const std::string epoch =
          std::isnan(plan.epoch_seconds) ? "not calibrated"
          : plan.epoch_measured          ? sar::message(plan.epoch_seconds, " s")
                                         : sar::message("at least ", plan.epoch_seconds,
                                                        " s (kernel rates only: calibrate with "
                                                        "this model for its epoch)");
      std::printf("P = %d (edge cut %.3f): peak %s per rank, halo %s per epoch, epoch %s\n", P,
                  cut, sar::format_bytes(plan.peak_memory_bytes).c_str(),
                  sar::format_bytes(plan.halo_bytes_per_epoch).c_str(), epoch.c_str());
      for (const auto& t : plan.memory)
        std::printf("  %-20s %12s  %s\n", t.name.c_str(), sar::format_bytes(t.bytes).c_str(),
                    t.source.c_str());
    }
  }
  if (s.json) {
    nlohmann::json out = plans.size() == 1 ? plans[0] : nlohmann::json{{"plans", plans}};
    std::printf("%s\n", out.dump(2).c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return sar_programs::run_reporting_errors("sar-plan", run, argc, argv); }
