// libFuzzer target: the partition-store readers. Two valid 2-part stores are written once: one
// of a small planted heterogeneous graph (so the schema and the edges' relations are read too),
// one with sparse features (format 7's compressed rows); each input replaces one of their files
// (chosen by the first byte) with the remaining bytes while both readers run on both stores.
#include "sar/graph/generators.hpp"
#include "sar/partition/partitioners.hpp"
#include "sar/partition/store.hpp"
#include "fuzz_support.hpp"

namespace fs = std::filesystem;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const fs::path stores = [] {
    const auto path = sar_fuzz::scratch() / "stores";
    fs::create_directories(path);
    const auto write = [&](const sar::graph_dataset& d, const char* name) {
      sar::write_partition_store(d, sar::partition_contiguous(d.num_nodes(), 2), 2, path / name,
                                 "fuzz");
    };
    write(sar::make_planted_heterogeneous({.num_papers = 30, .num_authors = 10,
                                           .feature_dim = 3, .author_feature_dim = 2,
                                           .degree = 2, .authors_per_paper = 1}),
          "heterogeneous");
    write(sar::make_planted_partition({.num_nodes = 30, .num_classes = 3, .average_degree = 2,
                                       .feature_dim = 8, .feature_density = 0.25,
                                       .sparse_features = true}),
          "sparse");
    return path;
  }();
  static sar_fuzz::mutable_directory files(stores);
  files.with_input(data, size, [&] {
    for (const char* name : {"heterogeneous", "sparse"})
      sar_fuzz::expect_clear_errors([&] {
        const auto store = stores / name;
        const auto meta = sar::read_partition_metadata(store);
        for (int p = 0; p < meta.num_parts && p < 2; ++p)
          sar::read_partition_part(store, p, {.sparse_features = p == 0});
      });
  });
  return 0;
}
