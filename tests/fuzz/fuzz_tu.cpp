// libFuzzer target: the TU dataset reader. A valid dataset of three graphs with every optional
// file and a split folder is written once; each input replaces one of its files (chosen by the
// first byte) with the remaining bytes while read_tu_dataset runs, for classification and
// for regression.
#include <fstream>
#include <string>

#include "sar/graph/io/tu.hpp"
#include "sar/io/npy_file.hpp"
#include "fuzz_support.hpp"

namespace fs = std::filesystem;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const fs::path written = [] {
    const fs::path dir = sar_fuzz::scratch() / "TOY";
    fs::create_directories(dir / "split" / "s");
    const auto write = [&](const char* stem, const char* text) {
      std::ofstream(dir / (std::string("TOY_") + stem)) << text;
    };
    write("A.txt", "1, 2\n2, 1\n2, 3\n3, 2\n1, 1\n1, 2\n5, 6\n");
    write("graph_indicator.txt", "1\n1\n1\n2\n3\n3\n");
    write("graph_labels.txt", "-1\n1\n-1\n");
    write("graph_attributes.txt", "0.5, 1\n2, -3\n1e3, 4\n");
    write("node_labels.txt", "1\n3\n2\n1\n2\n3\n");
    write("node_attributes.txt", "0.5\n1.5\n2.5\n3.5\n4.5\n5.5\n");
    write("edge_labels.txt", "0\n1\n0\n1\n0\n1\n2\n");
    write("edge_attributes.txt", "1\n2\n3\n4\n5\n6\n7\n");
    const std::int64_t train[] = {0, 1}, test[] = {2};
    const std::int64_t two[] = {2}, one[] = {1}, none[] = {0};
    sar::write_npy(dir / "split" / "s" / "train.npy", sar::npy_dtype::int64, two, train);
    sar::write_npy(dir / "split" / "s" / "valid.npy", sar::npy_dtype::int64, none, train);
    sar::write_npy(dir / "split" / "s" / "test.npy", sar::npy_dtype::int64, one, test);
    return dir;
  }();
  static sar_fuzz::mutable_directory files(written);
  files.with_input(data, size, [&] {
    for (const auto task : {sar::task_kind::graph_classify, sar::task_kind::graph_regress})
      sar_fuzz::expect_clear_errors([&] {
        const sar::graph_collection c = sar::read_tu_dataset(written, task);
        if (c.num_graphs() > 0) {
          const std::int64_t first[] = {0};
          (void)sar::make_batch(c, first);
        }
      });
  });
  return 0;
}
