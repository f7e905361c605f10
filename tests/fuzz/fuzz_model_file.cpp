// libFuzzer target: the model file reader and loader. An input whose first byte is odd is the
// rest of the input with its last 4 bytes replaced by the CRC-32 of what precedes them, so the
// header and size checks behind the checksum are reached too; an even first byte leaves it as
// it is. A file read_model accepts is loaded (load_model), given the rows of its per-node
// embeddings if it has any (hold_saved_rows), and predicts on a 3-node graph (with edge types
// when the model has a schema); a link-prediction model's decoder scores two pairs.
// SAR_FUZZ_WRITE_SEEDS=DIR writes a valid model file of each kind as seeds.
#include <cstring>
#include <string>
#include <vector>

#include "sar/schedule/local_schedule.hpp"
#include "sar/train/model_file.hpp"
#include "fuzz_support.hpp"

namespace {

/// The types of the 3-node ring predict() runs on: 1 author (2 features), 2 papers (4), and
/// two relations; the ring's edges take relations 0, 1, 0.
sar::graph_schema ring_schema() {
  return {.node_types = {{"author", 1, 2}, {"paper", 2, 4}},
          .relations = {{0, "writes", 1}, {1, "cites", 1}}};
}

/// The ring's node ids.
const std::vector<sar::node_t> ring_nodes{0, 1, 2};

/// A small trained-looking model of `kind` as a model file's content; `embeddings`: an rgcn
/// whose author has no features but a learnt row; `link`: a link-prediction model with an MLP
/// decoder.
std::string model_of(const std::string& kind, bool batch_norm, bool embeddings = false,
                     bool link = false) {
  sar::model_config c = sar::paper_defaults(kind);
  c.hidden = 3;
  c.heads = 2;
  c.batch_norm = batch_norm;
  if (kind == "rgcn") c.schema = ring_schema();
  if (embeddings) {
    c.schema.node_types[0].feature_dim = 0;
    c.node_embeddings = true;
  }
  auto model = sar::make_model<float, sar::local_schedule>(c, 4, 2, 7);
  model.parameters().hold_rows(ring_nodes);
  std::vector<sar::row_table<float>> tables;  // held whole: the rows of every node
  for (std::size_t k = 0; k < model.parameters().table_count(); ++k)
    tables.push_back(model.parameters().table(k));
  const std::span<const sar::row_table<float>> held(tables);
  if (!link)
    return sar::model_file_content(
        model, {.config = c, .input_dim = 4, .output_dim = 2, .task = sar::task_kind::regress,
                .targets = {{1.5, -2}, {0.5, 3}}},
        held);
  sar::mlp_decoder<float> mlp({2, 1});
  sar::parameter_store<float> weights;
  mlp.declare(weights);
  weights.allocate();
  weights.initialise(3);
  return sar::model_file_content(
      model, {.config = c, .input_dim = 4, .output_dim = 2, .decoder = "mlp"}, held, &weights);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const bool seeded = [] {
    if (const char* dir = std::getenv("SAR_FUZZ_WRITE_SEEDS")) {
      std::filesystem::create_directories(dir);
      int k = 0;
      for (const std::string kind : {"gcn", "sage", "gat",
                        "rgcn"})
        for (bool bn : {false, true}) {
          if (bn && kind == "rgcn") continue;  // R-GCN has no batch norm
          std::ofstream out(std::filesystem::path(dir) / ("seed-" + std::to_string(k++)),
                            std::ios::binary);
          out.put(static_cast<char>(2 * k));  // even: as written
          out << model_of(kind, bn);
        }
      std::ofstream out(std::filesystem::path(dir) / ("seed-" + std::to_string(k++)),
                        std::ios::binary);
      out.put(static_cast<char>(2 * k));
      out << model_of("rgcn", false, /*embeddings=*/true);
      std::ofstream link(std::filesystem::path(dir) / ("seed-" + std::to_string(k++)),
                         std::ios::binary);
      link.put(static_cast<char>(2 * k));
      link << model_of("gcn", false, /*embeddings=*/false, /*link=*/true);
    }
    return true;
  }();
  (void)seeded;
  if (size == 0) return 0;
  std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  if ((data[0] & 1) != 0 && bytes.size() >= 4) {
    const std::uint32_t crc = sar::crc32_update(0, bytes.data(), bytes.size() - 4);
    std::memcpy(bytes.data() + bytes.size() - 4, &crc, 4);
  }
  const auto file = sar_fuzz::scratch() / "model.sar";
  sar_fuzz::write_bytes(file, reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
  sar_fuzz::expect_clear_errors([&] {
    const sar::saved_model saved = sar::read_model(file);
    auto model = sar::load_model<float, sar::local_schedule>(saved);
    sar::hold_saved_rows(model, saved, ring_nodes);
    sar::csr ring{.num_rows = 3, .num_cols = 3, .offsets = {0, 1, 2, 3}, .columns = {2, 0, 1}};
    sar::local_schedule graph =
        saved.description.config.schema.heterogeneous()
            ? sar::local_schedule(std::move(ring), sar::matrixf(), std::vector<std::int32_t>{0, 1, 0})
            : sar::local_schedule(std::move(ring));
    const sar::matrixf x = sar::matrixf::Ones(3, saved.description.input_dim);
    sar::matrixf y = sar::predict(model, graph, x);
    sar::to_original_units(y, saved.description.targets);
    if (!saved.description.decoder.empty())
      (void)sar::score_saved_pairs<float>(saved, y, {.source = {0, 2}, .destination = {1, 0}});
  });
  return 0;
}
