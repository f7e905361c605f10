// libFuzzer target: the partition-store readers. A valid 2-part store of a small planted graph
// is written once; each input replaces one of its files (chosen by the first byte) with the
// remaining bytes while both readers run.
#include "sar/graph/generators.hpp"
#include "sar/partition/partitioners.hpp"
#include "sar/partition/store.hpp"
#include "fuzz_support.hpp"

namespace fs = std::filesystem;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const fs::path store = [] {
    sar::planted_partition_options o;
    o.num_nodes = 40;
    o.feature_dim = 3;
    o.num_classes = 2;
    const auto path = sar_fuzz::scratch() / "store";
    sar::write_partition_store(sar::make_planted_partition(o), sar::partition_contiguous(40, 2),
                               2, path, "fuzz");
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
