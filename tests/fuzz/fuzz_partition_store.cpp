// libFuzzer target: the partition-store readers. A valid 2-part store of a small planted
// heterogeneous graph (so the schema and the edges' relations are read too) is written once;
// each input replaces one of its files (chosen by the first byte) with the remaining bytes
// while both readers run.
#include "sar/graph/generators.hpp"
#include "sar/partition/partitioners.hpp"
#include "sar/partition/store.hpp"
#include "fuzz_support.hpp"

namespace fs = std::filesystem;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const fs::path store = [] {
    const sar::graph_dataset data = sar::make_planted_heterogeneous(
        {.num_papers = 30, .num_authors = 10, .feature_dim = 3, .author_feature_dim = 2,
         .degree = 2, .authors_per_paper = 1});
    const auto path = sar_fuzz::scratch() / "store";
    sar::write_partition_store(data, sar::partition_contiguous(data.num_nodes(), 2), 2, path,
                               "fuzz");
    return path;
  }();
  static sar_fuzz::mutable_directory files(store);
  files.with_input(data, size, [&] {
    sar_fuzz::expect_clear_errors([&] {
      const auto meta = sar::read_partition_metadata(store);
      for (int p = 0; p < meta.num_parts && p < 2; ++p) sar::read_partition_part(store, p);
    });
  });
  return 0;
}
