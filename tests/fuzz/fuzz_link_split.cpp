// libFuzzer target: the link-split reader. A valid split of a small graph (with per-source
// negatives) is written once; each input replaces one of its .npy files (chosen by the first
// byte) with the remaining bytes while read_link_split runs, then the leak check.
#include "sar/graph/edge_split.hpp"
#include "sar/graph/generators.hpp"
#include "sar/graph/io/link_split.hpp"
#include "sar/graph/io/npy.hpp"
#include "fuzz_support.hpp"

namespace fs = std::filesystem;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static sar::graph_dataset graph =
      sar::make_planted_partition({.num_nodes = 60, .num_classes = 2, .feature_dim = 2});
  static const fs::path written = [] {
    const sar::link_split split = sar::split_edges(
        graph, {.valid = 0.1, .test = 0.1, .negatives = 8, .per_source_negatives = 3, .seed = 1});
    const auto path = sar_fuzz::scratch() / "links";
    sar::write_npy_dataset(path, graph, [&](sar::directory_writer& out) {
      sar::write_link_split(out, split, "s");
    });
    return path;
  }();
  static const sar::edge_lookup lookup(graph.graph);
  static sar_fuzz::mutable_directory files(sar::link_split_dir(written, "s"));
  files.with_input(data, size, [&] {
    sar_fuzz::expect_clear_errors([&] {
      const sar::link_split split = sar::read_link_split(written, "s", graph.num_nodes());
      sar::check_held_out(lookup, split.valid, "valid_edge.npy");
      sar::check_held_out(lookup, split.test, "test_edge.npy");
    });
  });
  return 0;
}
