// Peak memory (and time) of one GAT forward + backward: the fused layer (online softmax, only
// O(nodes) kept) against the unfused reference (stores E x H logits, coefficients and dropout
// scales), on a planted-partition graph. Peak RSS is per process, so run each variant in its
// own process:
//   bench-gat-memory --variant fused
//   bench-gat-memory --variant reference
// Prints one line of key=value results. The memory of the layer is measured over a window
// that starts after the graph, features and gradients exist: the kernel's peak-RSS counter is
// reset there (/proc/self/clear_refs) when possible; process_peak_mb is getrusage's peak.
// The reference runs plain serial loops, so its time is only indicative.
#include <chrono>
#include <cstdint>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>
#include <tbb/global_control.h>

#include "sar/schedule/local_schedule.hpp"
#include "sar/core/memory.hpp"
#include "sar/core/rng.hpp"
#include "sar/graph/generators.hpp"
#include "sar/nn/detail/gat_reference.hpp"
#include "sar/nn/gat.hpp"
#include "sar/version.hpp"

namespace {

/// Resets the kernel's peak-RSS counter (VmHWM) to the current RSS; false if not possible.
bool reset_peak_rss() {
  std::ofstream clear("/proc/self/clear_refs");
  if (!clear) return false;
  clear << "5";
  return static_cast<bool>(clear.flush());
}

/// VmHWM of /proc/self/status in bytes, or -1.
std::int64_t peak_rss_since_reset() {
  std::ifstream status("/proc/self/status");
  std::string key;
  while (status >> key) {
    if (key == "VmHWM:") {
      std::int64_t kib = 0;
      status >> kib;
      return kib * 1024;
    }
    std::getline(status, key);
  }
  return -1;
}

double mib(std::int64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Peak memory per edge of the fused GAT layer vs the unfused reference "
               "(one forward + backward, one variant per process)"};
  std::string variant;
  sar::node_t nodes = 200000;
  double degree = 20;
  Eigen::Index heads = 4, head_dim = 32, input_dim = 64;
  double attention_dropout = 0.0;
  int threads = 0;
  std::uint64_t seed = 1;
  app.add_option("--variant", variant, "fused (online softmax) or reference (stores E x H)")
      ->required()
      ->check(CLI::IsMember({"fused", "reference"}));
  app.add_option("--nodes", nodes, "planted-partition nodes")->capture_default_str();
  app.add_option("--degree", degree, "average in-degree")->capture_default_str();
  app.add_option("--heads", heads, "attention heads")->capture_default_str();
  app.add_option("--head-dim", head_dim, "features per head")->capture_default_str();
  app.add_option("--input-dim", input_dim, "input feature width")->capture_default_str();
  app.add_option("--attention-dropout", attention_dropout, "rate on the coefficients")
      ->capture_default_str();
  app.add_option("--threads", threads, "oneTBB threads (0: all)")->capture_default_str();
  app.add_option("--seed", seed, "graph and parameter seed")->capture_default_str();
  app.set_version_flag("--version", "bench-gat-memory (sar " SAR_VERSION_STRING ")");
  CLI11_PARSE(app, argc, argv);

  std::optional<tbb::global_control> limit;
  if (threads > 0) limit.emplace(tbb::global_control::max_allowed_parallelism, threads);

  sar::planted_partition_options o;
  o.num_nodes = nodes;
  o.average_degree = degree;
  o.feature_dim = static_cast<std::int32_t>(input_dim);
  o.seed = seed;
  auto data = sar::make_planted_partition(o);
  sar::local_schedule graph(std::move(data.graph));
  const sar::matrixf x = std::move(data.features);
  data = {};
  const sar::edge_t edges = graph.graph().num_edges();

  const sar::gat_options options{.heads = heads, .attention_dropout = attention_dropout};
  const sar::layer_context ctx{.training = true, .seed = seed, .epoch = 0, .layer = 0};
  const auto run = [&](auto& layer) {
    sar::parameter_store<float> store;
    layer.declare(store);
    store.allocate();
    store.initialise(seed);
    sar::matrixf dy(nodes, layer.output_dim());
    const sar::counter_rng rng(seed, sar::rng_stream::init_parameters, 99);
    for (Eigen::Index k = 0; k < dy.size(); ++k)
      dy.data()[k] = static_cast<float>(rng.uniform(static_cast<std::uint64_t>(k)) - 0.5);
    sar::matrixf dx = sar::matrixf::Zero(nodes, input_dim);
    sar::matrixf y;

    const std::int64_t rss_before = sar::current_memory_bytes();
    const bool window = reset_peak_rss();
    const auto t0 = std::chrono::steady_clock::now();
    layer.forward(graph, ctx, x, y);
    const auto t1 = std::chrono::steady_clock::now();
    const std::size_t saved = layer.saved_bytes();
    layer.backward(graph, ctx, x, y, dy, dx);
    const auto t2 = std::chrono::steady_clock::now();
    const std::int64_t process_peak = sar::peak_memory_bytes();
    const std::int64_t window_peak = window ? peak_rss_since_reset() : process_peak;
    const double forward_s = std::chrono::duration<double>(t1 - t0).count();
    const double backward_s = std::chrono::duration<double>(t2 - t1).count();
    const double per_edge = static_cast<double>(window_peak - rss_before) / static_cast<double>(edges);
    std::cout << "variant=" << variant << " nodes=" << nodes << " edges=" << edges
              << " heads=" << heads << " head_dim=" << head_dim << " input_dim=" << input_dim
              << " attention_dropout=" << attention_dropout << " threads="
              << (threads > 0 ? threads : tbb::this_task_arena::max_concurrency())
              << " rss_before_mb=" << mib(rss_before) << " layer_peak_mb=" << mib(window_peak)
              << " layer_extra_mb=" << mib(window_peak - rss_before)
              << " extra_bytes_per_edge=" << per_edge
              << " saved_mb=" << mib(static_cast<std::int64_t>(saved))
              << " saved_bytes_per_edge=" << static_cast<double>(saved) / static_cast<double>(edges)
              << " process_peak_mb=" << mib(process_peak) << " window="
              << (window ? "reset" : "process") << " forward_s=" << forward_s
              << " backward_s=" << backward_s << " checksum=" << y.sum() + dx.sum() << '\n';
  };
  if (variant == "fused") {
    sar::gat_layer<float> layer(input_dim, head_dim, options);
    run(layer);
  } else {
    sar::detail::gat_reference<float> layer(input_dim, head_dim, options);
    run(layer);
  }
  return 0;
}
