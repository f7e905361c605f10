// libFuzzer target: the checkpoint reader. A valid checkpoint of a small model (with a row
// table: embeddings of a featureless node type) is written once; each input replaces one of
// its files (chosen by the first byte) with the remaining bytes while read_checkpoint runs.
#include "sar/comm/serial.hpp"
#include "sar/nn/batch_norm.hpp"
#include "sar/nn/type_projection.hpp"
#include "sar/nn/sequential.hpp"
#include "sar/train/checkpoint.hpp"
#include "fuzz_support.hpp"

namespace fs = std::filesystem;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const fs::path written = [] {
    sar::graph_schema schema;
    schema.node_types = {{"a", 3, 2}, {"b", 4, 0}};  // b: featureless, a row per node
    sar::sequential<sar::type_projection<float>, sar::batch_norm<float>> model(
        sar::type_projection<float>(schema, 3, 2, true), sar::batch_norm<float>(2));
    model.initialise(1);
    const std::vector<sar::node_t> nodes{0, 1, 2, 3, 4, 5, 6};
    model.parameters().hold_rows(nodes);
    sar::adam<float> optimiser;
    optimiser.step(model.parameters());
    sar::train_result progress;
    progress.history.resize(2);
    progress.history[1].epoch = 1;
    const auto path = sar_fuzz::scratch() / "checkpoint";
    sar::write_checkpoint(path, model, optimiser, progress, {{"model", "fuzz"}});
    return path;
  }();
  static sar_fuzz::mutable_directory files(written);
  files.with_input(data, size, [&] {
    sar_fuzz::expect_clear_errors([&] { sar::read_checkpoint(written); });
  });
  return 0;
}
