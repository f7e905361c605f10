// A trained model in one file, to load in another program and predict with: its architecture
// (sar::model_config and the input and output widths), what its outputs mean (the task, a
// regression's target standardisation, how the features were normalised), its parameters and
// its layers' state (batch norm's running statistics), and the rows of its per-node
// embeddings if it learnt any, for link prediction its decoder, and for a graph-level task
// its readout. Format "sar-model", version 4:
//   bytes 0-7        magic "SARMODEL"
//   bytes 8-11       uint32 format version (4), little-endian like everything after
//   bytes 12-15      uint32 0
//   bytes 16-23      uint64 H, the bytes of the JSON header
//   H bytes          the header: {"format": "sar-model", "format_version": 4,
//                    "scalar": "float32" | "float64", "model": {model_config's fields},
//                    "input_dim": F, "output_dim": K, "task": "classify" | "regress" |
//                    "multilabel" | "graph-classify" | "graph-regress" | "link",
//                    "readout": "sum" | "mean" | "max" | "attention" (graph tasks only; the
//                    model is make_graph_model's), "target_mean": [...], "target_scale": [...]
//                    (regress, graph-regress; else empty), "row_normalise_features": bool,
//                    "parameters": [{"name",
//                    "rows", "cols"}, ...], "state": [sizes], "tables": [{"name",
//                    "first_id", "end_id", "cols"}, ...], "decoder": {"name", "parameters":
//                    [{"name", "rows", "cols"}, ...]} (link only), "about": {free: what the
//                    writer adds, e.g. the dataset and the scores}}
//   the parameters   packed back to back in store order, of the scalar type
//   the state        every layer's state array in order, float64
//   the tables       each row table (sar/nn/parameters.hpp: per-node embeddings) whole: the
//                    rows of ids first_id .. end_id - 1 in order, cols values each, of the
//                    scalar type
//   the decoder      link only: its parameters packed in store order, of the scalar type
//   4 bytes          uint32 CRC-32 (zlib) of everything before it
// Written as an output file (sar/io/output_file.hpp: replaced whole or not at all); read
// whole and checked (magic, version, sizes, CRC-32, every field) before anything of it is used.
// Version 1 files (no tables), version 2 files (no decoder) and version 3 files (no graph
// tasks) are read too.
//
//   sar::save_model(comm, "model.sar", model, {.input_dim = F, .task = ..., ...});  // collective
//   const sar::saved_model saved = sar::read_model("model.sar");
//   auto model = sar::load_model<float, Schedule>(saved);   // make_model + the parameters
//   sar::hold_saved_rows(model, saved, ids);  // embeddings only: the rows of this rank's nodes
//   sar::matrixf y = sar::predict(model, graph, features);  // evaluation mode
//   // A link-prediction model (saved with its decoder's parameters): y holds embeddings.
//   std::vector<float> s = sar::score_saved_pairs<float>(saved, y, pairs);
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sar/comm/communicator.hpp"
#include "sar/io/checksum.hpp"
#include "sar/core/error.hpp"
#include "sar/core/memory.hpp"
#include "sar/io/output_file.hpp"
#include "sar/core/task_kind.hpp"
#include "sar/graph/builders.hpp"
#include "sar/graph/edge_split.hpp"
#include "sar/nn/layer.hpp"
#include "sar/nn/link_decoders.hpp"
#include "sar/nn/readout.hpp"
#include "sar/nn/task.hpp"
#include "sar/train/checkpoint.hpp"
#include "sar/train/families.hpp"
#include "sar/train/models.hpp"

namespace sar {

/// Version of the model file format (see the top of this file).
inline constexpr int model_file_version = 4;

/// What a model file says about its model besides the parameters (what the writer states).
struct model_description {
  /// The architecture (and the hyper-parameters it was trained with).
  model_config config{};
  Eigen::Index input_dim = 0;   ///< features per node
  Eigen::Index output_dim = 0;  ///< outputs per node
  /// What the outputs predict: classify (one logit per class), regress (standardised targets
  /// unless target_scale is empty), multilabel (one logit per label); per graph for
  /// graph_classify and graph_regress.
  task_kind task = task_kind::classify;
  /// regress: the standardisation of the training targets (standardise_targets); a
  /// prediction p is p * scale + mean in the original units. Empty: none.
  target_standardisation targets{};
  /// Graph-level tasks: the readout's name (sar/nn/readout.hpp); the model is
  /// make_graph_model's (load_graph_model). Empty for node and link tasks.
  std::string readout{};
  /// Link prediction: the name of the decoder (sar/nn/link_decoders.hpp) whose parameters the
  /// file holds; the outputs are node embeddings and `task` is not read. Empty: a node task.
  std::string decoder{};
  /// Whether the features were row-normalised (each row divided by its sum) before training;
  /// a user of the model must do the same (sar-predict does).
  bool row_normalise_features = false;
  /// Free-form facts the writer adds (the dataset, the scores, ...); not interpreted.
  nlohmann::json about = nlohmann::json::object();
};

/// A model file as read_model reads it: the description, the parameters (as double: exact for
/// float32 files) and the layers' state.
struct saved_model {
  model_description description;                  ///< what the file says about its model
  npy_dtype scalar = npy_dtype::float32;        ///< the element type the file stores
  std::vector<checkpoint::parameter> parameters;  ///< names and shapes, in store order
  std::vector<double> values;                     ///< the parameters packed in order
  std::vector<std::vector<double>> state;         ///< model.state(), in order
  /// A row table of the model (its per-node embeddings): every row of its range.
  struct table {
    row_table_shape shape;      ///< name, id range and width
    std::vector<double> values;  ///< (end_id - first_id) x cols, row-major, by id
  };
  std::vector<table> tables;   ///< the model's row tables, in store order
  std::vector<checkpoint::parameter> decoder_parameters;  ///< link: names and shapes, in order
  std::vector<double> decoder_values;                     ///< link: the decoder's, packed
  std::uint32_t identity = 0;  ///< the file's CRC-32
};

namespace detail::model_files {

inline constexpr char magic[8] = {'S', 'A', 'R', 'M', 'O', 'D', 'E', 'L'};
inline constexpr std::size_t prefix_bytes = 24;  // magic, version, reserved, header bytes

inline nlohmann::json config_json(const model_config& c) {
  nlohmann::json j = {{"kind", c.family}, {"aggregation", c.aggregation},
          {"layers", c.layers}, {"hidden", c.hidden}, {"heads", c.heads},
          {"output_heads", c.output_heads}, {"dropout", c.dropout},
          {"input_dropout", c.input_dropout},
          {"aggregate_features_first", c.aggregate_features_first},
          {"attention_dropout", c.attention_dropout}, {"batch_norm", c.batch_norm},
          {"learning_rate", c.learning_rate}, {"weight_decay", c.weight_decay},
          {"decay_first_layer_only", c.decay_first_layer_only}, {"epochs", c.epochs},
          {"patience", c.patience}, {"edge_dim", c.edge_dim}, {"edge_state", c.edge_state},
          {"mean_messages", c.mean_messages}, {"layer_norm", c.layer_norm},
          {"edge_weight", c.edge_weight},
          {"edge_attention", c.edge_attention}};
  with_family(c.family, [&]<class F>() { F::write_settings(c, j); });
  return j;
}

/// Throws sar::io_error naming `file` for an unknown name or a value out of its domain.
inline model_config config_from(const nlohmann::json& j, const std::string& file) {
  constexpr const char* where = "sar::read_model";
  model_config c;
  c.family = j.at("kind").get<std::string>();
  with_family<io_error>(c.family, [&]<class F>() {}, message(where, ": ", file));
  c.aggregation = j.at("aggregation").get<std::string>();
  SAR_CHECK(is_sage_aggregator(c.aggregation), io_error, where, ": ", file,
            ": unknown aggregation '", c.aggregation, "' (", sage_aggregator_choices(), ")");
  c.layers = j.at("layers").get<int>();
  c.hidden = j.at("hidden").get<Eigen::Index>();
  c.heads = j.at("heads").get<Eigen::Index>();
  c.output_heads = j.at("output_heads").get<Eigen::Index>();
  c.dropout = j.at("dropout").get<double>();
  c.input_dropout = j.at("input_dropout").get<double>();
  c.aggregate_features_first = j.at("aggregate_features_first").get<bool>();
  c.attention_dropout = j.at("attention_dropout").get<double>();
  c.batch_norm = j.at("batch_norm").get<bool>();
  c.learning_rate = j.at("learning_rate").get<double>();
  c.weight_decay = j.at("weight_decay").get<double>();
  c.decay_first_layer_only = j.at("decay_first_layer_only").get<bool>();
  c.epochs = j.at("epochs").get<int>();
  c.patience = j.at("patience").get<int>();
  c.edge_dim = j.value("edge_dim", Eigen::Index{0});  // absent in files without edge models
  c.edge_state = j.value("edge_state", true);
  c.mean_messages = j.value("mean_messages", true);
  c.layer_norm = j.value("layer_norm", false);
  c.edge_weight = j.value("edge_weight", Eigen::Index{-1});
  c.edge_attention = j.value("edge_attention", false);
  with_family(c.family, [&]<class F>() { F::read_settings(j, c, file); });
  constexpr Eigen::Index limit = Eigen::Index{1} << 31;
  SAR_CHECK(c.layers >= 1 && c.layers < (1 << 20) && c.hidden >= 1 && c.hidden < limit &&
                c.heads >= 1 && c.heads < limit && c.output_heads >= 1 && c.output_heads < limit &&
                c.edge_dim >= 0 && c.edge_dim < limit && c.edge_weight >= -1 &&
                c.edge_weight < c.edge_dim,
            io_error, where, ": ", file, ": layers ", c.layers, ", hidden ", c.hidden, ", heads ",
            c.heads, ", output heads ", c.output_heads, ", edge_dim ", c.edge_dim,
            ", edge_weight ", c.edge_weight);
  return c;
}

template <class T>
void append(std::string& out, const T& value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof value);
}

/// Appends the rows of `t` (gathered from every rank: ids ascending, a replica's id repeated)
/// for every id of its range, in order. Throws sar::invalid_argument naming the table and the
/// first id without a row.
template <class T>
void append_whole(std::string& out, const row_table<T>& t) {
  const row_table_shape& shape = t.shape;
  node_t next = shape.first_id;
  for (std::size_t r = 0; r < t.ids.size(); ++r) {
    const node_t id = t.ids[r];
    if (id == next - 1 && r > 0) continue;  // a replica of the row before
    SAR_CHECK(id == next, invalid_argument, "sar::save_model: no rank holds the row of node ",
              next, " of '", shape.name, "' (ids [", shape.first_id, ", ", shape.end_id, "))");
    out.append(reinterpret_cast<const char*>(t.values.row(static_cast<Eigen::Index>(r)).data()),
               static_cast<std::size_t>(shape.cols) * sizeof(T));
    ++next;
  }
  SAR_CHECK(next == shape.end_id, invalid_argument, "sar::save_model: no rank holds the row of "
            "node ", next, " of '", shape.name, "' (ids [", shape.first_id, ", ", shape.end_id,
            "))");
}

}  // namespace detail::model_files

/// The content of a model file for `model` (make_model's, or any model of the same layers)
/// described by `d`, with `tables`: its row tables (per-node embeddings) gathered whole, in
/// store order (detail::checkpoints::gather_tables; none for a model without). Requires
/// d.config, input_dim and output_dim to be those the model was built with (load_model
/// rebuilds it from them). With d.decoder, `decoder` holds that decoder's parameters.
/// Not collective. Throws sar::invalid_argument for a table missing, mis-shaped, or without a
/// row of some id of its range, or a decoder named without parameters or the reverse.
template <class Model>
std::string model_file_content(Model& model, const model_description& d,
                               std::span<const row_table<typename Model::scalar>> tables = {},
                               const parameter_store<typename Model::scalar>* decoder = nullptr) {
  using T = typename Model::scalar;
  namespace mf = detail::model_files;
  namespace cp = detail::checkpoints;
  const auto& store = model.parameters();
  SAR_CHECK(tables.size() == store.table_count(), invalid_argument, "sar::save_model: the "
            "model has ", store.table_count(), " row tables (per-node embeddings), ",
            tables.size(), " given");
  SAR_CHECK(d.decoder.empty() == (decoder == nullptr), invalid_argument, "sar::save_model: ",
            d.decoder.empty() ? "decoder parameters without a decoder name"
                              : "no parameters for the decoder " + d.decoder);
  SAR_CHECK(d.readout.empty() != (d.decoder.empty() && is_graph_level(d.task)), invalid_argument,
            "sar::save_model: ", d.readout.empty() ? "a graph-level model needs its readout"
                                                   : "a readout for a model of nodes");
  nlohmann::json table_list = nlohmann::json::array();
  for (std::size_t k = 0; k < tables.size(); ++k) {
    const row_table_shape& shape = tables[k].shape;
    SAR_CHECK(shape.name == store.table(k).shape.name && shape.cols == store.table(k).shape.cols,
              invalid_argument, "sar::save_model: row table ", k, " given is '", shape.name,
              "' of ", shape.cols, " columns, the model's '", store.table(k).shape.name, "'");
    table_list.push_back({{"name", shape.name}, {"first_id", shape.first_id},
                          {"end_id", shape.end_id}, {"cols", shape.cols}});
  }
  nlohmann::json header{
      {"format", "sar-model"},
      {"format_version", model_file_version},
      {"scalar", npy_dtype_name(cp::dtype_of<T>())},
      {"model", mf::config_json(d.config)},
      {"input_dim", d.input_dim},
      {"output_dim", d.output_dim},
      {"task", d.decoder.empty() ? task_name(d.task) : "link"},
      {"target_mean", d.targets.mean},
      {"target_scale", d.targets.scale},
      {"row_normalise_features", d.row_normalise_features},
      {"about", d.about}};
  const auto shapes = [](const parameter_store<T>& of) {
    nlohmann::json list = nlohmann::json::array();
    for (std::size_t p = 0; p < of.size(); ++p)
      list.push_back({{"name", of.shape(p).name}, {"rows", of.shape(p).rows},
                      {"cols", of.shape(p).cols}});
    return list;
  };
  nlohmann::json sizes = nlohmann::json::array();
  header["parameters"] = shapes(store);
  if (decoder) header["decoder"] = {{"name", d.decoder}, {"parameters", shapes(*decoder)}};
  if (!d.readout.empty()) header["readout"] = d.readout;
  for (const auto s : model.state()) sizes.push_back(s.size());
  header["state"] = sizes;
  header["tables"] = table_list;
  const std::string text = header.dump();

  std::string out(mf::magic, sizeof mf::magic);
  mf::append(out, static_cast<std::uint32_t>(model_file_version));
  mf::append(out, std::uint32_t{0});
  mf::append(out, static_cast<std::uint64_t>(text.size()));
  out += text;
  const std::vector<T> values = cp::packed<T>(store, store.values());
  out.append(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
  for (const auto s : model.state())
    out.append(reinterpret_cast<const char*>(s.data()), s.size() * sizeof(double));
  for (const auto& t : tables) mf::append_whole(out, t);
  if (decoder) {
    const std::vector<T> weights = cp::packed<T>(*decoder, decoder->values());
    out.append(reinterpret_cast<const char*>(weights.data()), weights.size() * sizeof(T));
  }
  mf::append(out, crc32_update(0, out.data(), out.size()));
  return out;
}

/// Writes `model` described by `d` to the model file `file` (format at the top of this file)
/// on rank `root` of comm, as an output file (replaced whole or not at all; a link followed),
/// every rank returning or throwing alike (the others throw sar::comm_error naming the root).
/// Its row tables (per-node embeddings) are gathered to the root first, so the root holds
/// every row of them once. Requires the parameters and state to be the same on every rank (as
/// the training loops keep them), and every row of each table held by some rank (replicas
/// equal). A link-prediction model passes its decoder's parameters (d.decoder its name).
/// Collective. Throws sar::io_error naming the file, sar::invalid_argument naming a row no
/// rank holds.
template <communicator Comm, class Model>
void save_model(Comm& comm, const std::filesystem::path& file, Model& model,
                const model_description& d, int root = 0,
                const parameter_store<typename Model::scalar>* decoder = nullptr) {
  using T = typename Model::scalar;
  std::vector<row_table<T>> tables;
  if (model.parameters().table_count() > 0)  // the same on every rank
    tables = detail::checkpoints::gather_tables(comm, model.parameters(), root,
                                                /*with_moments=*/false);
  std::exception_ptr failure;
  if (comm.rank() == root)
    detail::guarded(failure, [&] {
      write_output_file(
          file, model_file_content(model, d, std::span<const row_table<T>>(tables), decoder),
          "sar::save_model");
    });
  detail::agree_on_failure(comm, failure, "sar::save_model");
}

/// Reads and checks the model file `file`: magic, version, sizes, CRC-32, every header field.
/// Not collective. Throws sar::io_error naming the file and the problem (not a model file, a
/// truncated, corrupted or over-long one, a malformed header, a value out of its domain).
inline saved_model read_model(const std::filesystem::path& file) {
  constexpr const char* where = "sar::read_model";
  namespace mf = detail::model_files;
  const std::string name = file.string();
  std::error_code ec;
  SAR_CHECK(std::filesystem::is_regular_file(file, ec), io_error, where, ": ", name,
            " is not a file");
  const auto size = std::filesystem::file_size(file, ec);
  SAR_CHECK(!ec, io_error, where, ": cannot stat ", name, ": ", ec.message());
  SAR_CHECK(size >= mf::prefix_bytes + 4, io_error, where, ": ", name, " is too short (", size,
            " bytes) for a sar model file");
  check_memory<io_error>(where, message("the model file ", name), static_cast<double>(size));
  std::ifstream in(file, std::ios::binary);
  SAR_CHECK(in.good(), io_error, where, ": cannot open ", name);
  std::string bytes(static_cast<std::size_t>(size), '\0');
  in.read(bytes.data(), static_cast<std::streamsize>(size));
  SAR_CHECK(in.gcount() == static_cast<std::streamsize>(size), io_error, where, ": reading ",
            name, " failed");
  SAR_CHECK(std::memcmp(bytes.data(), mf::magic, sizeof mf::magic) == 0, io_error, where, ": ",
            name, " is not a sar model file (bad magic number)");
  std::uint32_t version = 0, crc = 0;
  std::uint64_t header_bytes = 0;
  std::memcpy(&version, bytes.data() + 8, 4);
  std::memcpy(&header_bytes, bytes.data() + 16, 8);
  std::memcpy(&crc, bytes.data() + bytes.size() - 4, 4);
  SAR_CHECK(version >= 1 && version <= static_cast<std::uint32_t>(model_file_version), io_error,
            where, ": ", name, " has format version ", version, "; this sar reads versions 1 to ",
            model_file_version);
  const std::uint64_t body = bytes.size() - 4;
  SAR_CHECK(header_bytes <= body - mf::prefix_bytes, io_error, where, ": ", name,
            " is truncated (its header claims ", header_bytes, " bytes)");
  const std::uint32_t actual = crc32_update(0, bytes.data(), body);
  SAR_CHECK(actual == crc, io_error, where, ": ", name, ": checksum mismatch (CRC-32 ", actual,
            ", the file says ", crc, "): the file is corrupted or truncated");
  saved_model out;
  out.identity = crc;
  std::uint64_t total = 0, state_total = 0, table_total = 0, decoder_total = 0;
  std::vector<std::uint64_t> state_sizes;
  model_description& d = out.description;
  try {
    const auto j = nlohmann::json::parse(bytes.data() + mf::prefix_bytes,
                                         bytes.data() + mf::prefix_bytes + header_bytes);
    SAR_CHECK(j.is_object() && j.value("format", std::string()) == "sar-model" &&
                  j.value("format_version", 0) == static_cast<int>(version),
              io_error, where, ": ", name, ": the header is not a sar model's");
    const auto scalar = j.at("scalar").get<std::string>();
    SAR_CHECK(scalar == "float32" || scalar == "float64", io_error, where, ": ", name,
              ": scalar '", scalar, "' (float32 or float64)");
    out.scalar = scalar == "float32" ? npy_dtype::float32 : npy_dtype::float64;
    d.config = mf::config_from(j.at("model"), name);
    d.input_dim = j.at("input_dim").get<Eigen::Index>();
    d.output_dim = j.at("output_dim").get<Eigen::Index>();
    constexpr Eigen::Index limit = Eigen::Index{1} << 31;
    SAR_CHECK(d.input_dim >= 1 && d.input_dim < limit && d.output_dim >= 1 &&
                  d.output_dim < limit,
              io_error, where, ": ", name, ": input_dim ", d.input_dim, ", output_dim ",
              d.output_dim);
    constexpr std::int64_t limit64 = limit;
    const auto read_shapes = [&](const nlohmann::json& list, const char* what,
                                 std::vector<checkpoint::parameter>& into, std::uint64_t& count) {
      for (const auto& p : list) {
        checkpoint::parameter q{p.at("name").get<std::string>(), p.at("rows").get<std::int64_t>(),
                                p.at("cols").get<std::int64_t>()};
        SAR_CHECK(q.rows >= 0 && q.cols >= 0 && q.rows < limit64 && q.cols < limit64, io_error,
                  where, ": ", name, ": ", what, " '", q.name, "' has shape ", q.rows, " x ",
                  q.cols);
        count += static_cast<std::uint64_t>(q.rows * q.cols);
        SAR_CHECK(count < (std::uint64_t{1} << 40), io_error, where, ": ", name, ": the ", what,
                  "s hold more than 2^40 values");
        into.push_back(std::move(q));
      }
    };
    const std::string task = j.at("task").get<std::string>();
    if (task == "link" && version >= 3) {
      const auto& decoder = j.at("decoder");
      d.decoder = decoder.at("name").get<std::string>();
      const auto names = link_decoder_names();
      SAR_CHECK(std::find(names.begin(), names.end(), d.decoder) != names.end(), io_error, where,
                ": ", name, ": unknown decoder '", d.decoder, "'");
      read_shapes(decoder.at("parameters"), "decoder parameter", out.decoder_parameters,
                  decoder_total);
    } else {
      try {
        d.task = parse_task(task);
        if (is_graph_level(d.task)) {  // a graph model names its readout (version 4)
          SAR_CHECK(j.contains("readout"), io_error, where, ": ", name, ": a ", task,
                    " model without its readout");
          d.readout = j.at("readout").get<std::string>();
          (void)parse_readout(d.readout);
        }
      } catch (const invalid_argument& e) {
        throw io_error(message(where, ": ", name, ": ", e.what()));
      }
    }
    d.targets.mean = j.at("target_mean").get<std::vector<double>>();
    d.targets.scale = j.at("target_scale").get<std::vector<double>>();
    const auto outputs = static_cast<std::size_t>(d.output_dim);
    const bool standardised = !d.targets.scale.empty();
    SAR_CHECK(d.targets.mean.size() == d.targets.scale.size() &&
                  (!standardised || (facts_of(d.task).standardised &&
                                     d.targets.scale.size() == outputs)),
              io_error, where, ": ", name, ": ", d.targets.mean.size(), " target means and ",
              d.targets.scale.size(), " scales for a ", task_name(d.task), " model of ",
              d.output_dim, " outputs");
    for (std::size_t k = 0; k < d.targets.scale.size(); ++k)
      SAR_CHECK(std::isfinite(d.targets.mean[k]) && std::isfinite(d.targets.scale[k]) &&
                    d.targets.scale[k] > 0,
                io_error, where, ": ", name, ": target standardisation ", k, " (mean ",
                d.targets.mean[k], ", scale ", d.targets.scale[k], ")");
    d.row_normalise_features = j.at("row_normalise_features").get<bool>();
    d.about = j.at("about");
    read_shapes(j.at("parameters"), "parameter", out.parameters, total);
    for (const auto& s : j.at("state")) {
      state_sizes.push_back(s.get<std::uint64_t>());
      state_total += state_sizes.back();
      SAR_CHECK(state_sizes.back() < (std::uint64_t{1} << 40) &&
                    state_total < (std::uint64_t{1} << 40),
                io_error, where, ": ", name, ": layer state of ", state_sizes.back(), " values");
    }
    if (version >= 2)
      for (const auto& t : j.at("tables")) {
        row_table_shape shape{.name = t.at("name").get<std::string>(),
                              .first_id = t.at("first_id").get<node_t>(),
                              .end_id = t.at("end_id").get<node_t>(),
                              .cols = t.at("cols").get<Eigen::Index>()};
        SAR_CHECK(shape.first_id >= 0 && shape.first_id <= shape.end_id &&
                      shape.end_id < (node_t{1} << 40) && shape.cols >= 1 && shape.cols < limit,
                  io_error, where, ": ", name, ": row table '", shape.name, "' has ids [",
                  shape.first_id, ", ", shape.end_id, ") and ", shape.cols, " columns");
        table_total += static_cast<std::uint64_t>(shape.end_id - shape.first_id) *
                       static_cast<std::uint64_t>(shape.cols);
        SAR_CHECK(table_total < (std::uint64_t{1} << 40), io_error, where, ": ", name,
                  ": the row tables hold more than 2^40 values");
        out.tables.push_back({.shape = std::move(shape), .values = {}});
      }
  } catch (const nlohmann::json::exception& e) {
    throw io_error(message(where, ": ", name, ": malformed header: ", e.what()));
  }
  const std::uint64_t value_bytes = out.scalar == npy_dtype::float32 ? 4 : 8;
  const std::uint64_t expected = mf::prefix_bytes + header_bytes +
                                 (total + table_total + decoder_total) * value_bytes +
                                 state_total * 8 + 4;
  SAR_CHECK(bytes.size() == expected, io_error, where, ": ", name, " holds ", bytes.size(),
            " bytes, its header implies ", expected);
  const char* at = bytes.data() + mf::prefix_bytes + header_bytes;
  auto read_values = [&](std::vector<double>& into, std::uint64_t count) {
    into.resize(static_cast<std::size_t>(count));
    for (double& v : into) {
      if (out.scalar == npy_dtype::float32) {
        float f;
        std::memcpy(&f, at, 4);
        v = f;
      } else {
        std::memcpy(&v, at, 8);
      }
      at += value_bytes;
    }
  };
  read_values(out.values, total);
  for (const std::uint64_t count : state_sizes) {
    auto& s = out.state.emplace_back(static_cast<std::size_t>(count));
    std::memcpy(s.data(), at, static_cast<std::size_t>(count) * 8);
    at += count * 8;
  }
  for (auto& t : out.tables)
    read_values(t.values, static_cast<std::uint64_t>(t.shape.end_id - t.shape.first_id) *
                              static_cast<std::uint64_t>(t.shape.cols));
  read_values(out.decoder_values, decoder_total);
  return out;
}

/// The model `saved` describes, built by make_model and given its parameters and layer state
/// (bitwise those written when T is the file's scalar type). Not collective. Throws
/// sar::invalid_argument for a graph-level model (sar/train/graph_level.hpp's
/// load_graph_model loads it) or naming the first parameter or state array that does not fit
/// the architecture (a file edited by hand, or written by another version of a layer).
template <class T, class Schedule>
dynamic_sequential<T, Schedule> load_model(const saved_model& saved) {
  constexpr const char* where = "sar::load_model";
  const model_description& d = saved.description;
  SAR_CHECK(d.readout.empty(), invalid_argument, where, ": a ", task_name(d.task),
            " model (readout ", d.readout, "): load it with sar::load_graph_model");
  // Before anything of the architecture's size is allocated: it must hold what the file does.
  const double values = estimate_model_memory(d.config, static_cast<double>(d.input_dim),
                                              static_cast<double>(d.output_dim), 0, 1.0)
                            .parameters / 4;  // values, gradients, Adam's two moments
  SAR_CHECK(values == static_cast<double>(saved.values.size()), invalid_argument, where,
            ": the file holds ", saved.values.size(), " parameter values, its architecture (",
            d.config.family, ", ", d.config.layers,
            " layers, hidden ", d.config.hidden, ", ", d.input_dim, " inputs, ", d.output_dim,
            " outputs) has ", values);
  auto model = make_model<T, Schedule>(d.config, d.input_dim, d.output_dim, /*seed=*/0);
  detail::checkpoints::check_fits(saved.parameters, saved.values.size(), saved.state, model,
                                  std::string(where) + ": the file");
  const auto& store = model.parameters();
  SAR_CHECK(store.table_count() == saved.tables.size(), invalid_argument, where, ": the file "
            "holds ", saved.tables.size(), " row tables (per-node embeddings), its architecture ",
            "has ", store.table_count());
  for (std::size_t k = 0; k < saved.tables.size(); ++k) {
    const row_table_shape &file = saved.tables[k].shape, &model_table = store.table(k).shape;
    SAR_CHECK(file == model_table, invalid_argument, where, ": the file holds '", file.name,
              "' for nodes [", file.first_id, ", ", file.end_id, ") of ", file.cols,
              " columns, the model '",
              model_table.name, "' for nodes [", model_table.first_id, ", ", model_table.end_id,
              ") of ", model_table.cols, " (a graph with other node counts?)");
  }
  detail::checkpoints::put_into(model, saved.values, saved.state);
  return model;
}

/// The scores (logits) by the decoder of the link-prediction model `saved` of `pairs` (rows
/// of `embeddings`, the model's outputs: dataset id = row), with the decoder's saved
/// parameters; a typed pair by its relation's (an untyped model's decoder knows relation 0).
/// Not collective. Throws sar::invalid_argument for a model without a decoder, parameters
/// that do not fit the decoder, or a pair outside the rows or relations.
template <class T>
std::vector<T> score_saved_pairs(const saved_model& saved, const_rows_ref<T> embeddings,
                                 const node_pairs& pairs) {
  constexpr const char* where = "sar::score_saved_pairs";
  const model_description& d = saved.description;
  SAR_CHECK(!d.decoder.empty(), invalid_argument, where, ": the model predicts a ",
            task_name(d.task), " task, not links (it has no decoder)");
  std::vector<T> scores(pairs.size());
  const bool found = with_first(
      link_decoders<T>{}, [&]<class D>() { return D::name == d.decoder; },
      [&]<class D>() {
        D decoder(decoder_shape{embeddings.cols(), link_relations(d.config)});
        parameter_store<T> store;
        decoder.declare(store);
        store.allocate();
        struct parameters_only {  // what check_fits reads of a model
          parameter_store<T>& store;
          parameter_store<T>& parameters() { return store; }
          std::vector<std::span<double>> state() { return {}; }
        } fits{store};
        detail::checkpoints::check_fits(saved.decoder_parameters, saved.decoder_values.size(),
                                        {}, fits, std::string(where) + ": the file's decoder");
        detail::checkpoints::unpack<T>(store, saved.decoder_values, store.values());
        std::vector<node_t> s(pairs.source.begin(), pairs.source.end());
        std::vector<node_t> t(pairs.destination.begin(), pairs.destination.end());
        for (std::size_t i = 0; i < s.size(); ++i)
          SAR_CHECK(s[i] >= 0 && s[i] < embeddings.rows() && t[i] >= 0 && t[i] < embeddings.rows(),
                    invalid_argument, where, ": pair ", i, " (", s[i], ", ", t[i],
                    ") outside the ", embeddings.rows(), " nodes");
        decoder.score(embeddings, row_pairs{s, t, pairs.relation}, scores);
      });
  SAR_CHECK(found, invalid_argument, where, ": unknown decoder '", d.decoder, "'");
  return scores;
}

/// Every row table of `model` (load_model's of `saved`) holds the rows of the dataset ids in
/// `ids` that lie in its range (parameter_store::hold_rows) with the values `saved` holds: a
/// rank passes the nodes it predicts on. Nothing to do for a model without tables. Not
/// collective. Throws sar::invalid_argument for a model that is not `saved`'s, or a repeated
/// or negative id.
template <class Model>
void hold_saved_rows(Model& model, const saved_model& saved, std::span<const node_t> ids) {
  using T = typename Model::scalar;
  auto& store = model.parameters();
  SAR_CHECK(store.table_count() == saved.tables.size(), invalid_argument,
            "sar::hold_saved_rows: the model has ", store.table_count(), " row tables, the ",
            "file ", saved.tables.size());
  if (saved.tables.empty()) return;
  store.hold_rows(ids);
  for (std::size_t k = 0; k < saved.tables.size(); ++k) {
    row_table<T>& t = store.table(k);
    const saved_model::table& from = saved.tables[k];
    SAR_CHECK(t.shape == from.shape, invalid_argument, "sar::hold_saved_rows: row table '",
              t.shape.name, "' is not the file's");
    const Eigen::Index cols = t.shape.cols;
    for (Eigen::Index r = 0; r < t.values.rows(); ++r) {
      const auto at = static_cast<std::size_t>((t.ids[static_cast<std::size_t>(r)] -
                                                t.shape.first_id) * cols);
      for (Eigen::Index c = 0; c < cols; ++c)
        t.values(r, c) = static_cast<T>(from.values[at + static_cast<std::size_t>(c)]);
    }
  }
}

/// Puts a graph (in-edges; first_column: the global id of row 0, a part's first_global())
/// and its edge table (one row per entry, or empty) in the form a model of `c` is trained and
/// used on: model_self_loops' policy, an added loop of an edge-weighted GCN weighing 1 (as
/// PyG's add_remaining_self_loops; for GAT its row is 0: no edge term), and no edge table
/// unless the model reads one.
/// Throws sar::invalid_argument if the table has rows but not one per entry.
inline void prepare_model_graph(const model_config& c, csr& graph, matrixf& edge_features,
                                node_t first_column = 0) {
  with_family(c.family, [&]<class F>() {
    if (!F::reads_edge_features(c)) edge_features = matrixf();
    apply_self_loops(graph, edge_features, F::self_loops, first_column, F::added_loop_edge_value);
  });
}

/// The outputs of `model` on `graph` for `features` (graph.num_sources() x input_dim) in
/// evaluation mode (no dropout; batch norm's running statistics): graph.num_destinations() x
/// outputs. Collective where the graph's schedule is. Throws what the layers throw.
template <class Model, class Schedule>
matrix<typename Model::scalar> predict(Model& model, Schedule& graph,
                                       const const_rows_ref<typename Model::scalar>& features) {
  layer_context ctx{.training = false};
  return model.forward(graph, ctx, features);
}

/// `outputs` of a regression model in the targets' original units: each column times its
/// scale plus its mean (standardise_targets' inverse); unchanged without a standardisation.
template <class T>
void to_original_units(matrix<T>& outputs, const target_standardisation& targets) {
  for (Eigen::Index k = 0; k < outputs.cols() && static_cast<std::size_t>(k) < targets.scale.size(); ++k)
    outputs.col(k) = (outputs.col(k).array() * static_cast<T>(targets.scale[static_cast<std::size_t>(k)]) +
                      static_cast<T>(targets.mean[static_cast<std::size_t>(k)])).matrix();
}

}  // namespace sar

// Linked with the library sar-models: its instances are declared extern here, compiled there.
#include "sar/train/compiled_models.hpp"
/// load_model's instance for (T, Schedule): declared with `extern` as prefix, else defined.
#define SAR_LOAD_MODEL_INSTANCE(prefix, T, Schedule) \
  prefix template dynamic_sequential<T, Schedule> load_model<T, Schedule>(const saved_model&);
namespace sar {
SAR_EXTERN_COMPILED_MODELS(SAR_LOAD_MODEL_INSTANCE)
}  // namespace sar
