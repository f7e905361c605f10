// R-GCN (Schlichtkrull et al. 2018) for a heterogeneous graph: a per-type input projection
// (sar/nn/type_projection.hpp) and `layers` relational graph convolutions (sar/nn/rgcn.hpp);
// DGL's R-GCN example on ogbn-mag's settings (2 layers, hidden 64).
#pragma once

#include "sar/graph/schema_json.hpp"
#include "sar/nn/rgcn.hpp"
#include "sar/nn/type_projection.hpp"
#include "sar/train/model_family.hpp"

namespace sar {

/// The rgcn model family (the seam: sar/train/model_family.hpp; the registry:
/// sar/train/families.hpp).
struct rgcn_family : model_family_defaults {
  /// What --model and model files call it.
  static constexpr std::string_view name = "rgcn";
  /// A line for --help.
  static constexpr std::string_view summary =
      "R-GCN (Schlichtkrull et al. 2018): a heterogeneous graph's relations, each with its "
      "weights; the other models see such a graph with its types erased";

  /// Its paper's settings on top of model_config's.
  static void paper_defaults(model_config& c) {
    c.hidden = 64;
    c.learning_rate = 0.01;
    c.weight_decay = 0;
    c.decay_first_layer_only = false;
    c.epochs = 50;
  }
  /// Throws sar::invalid_argument naming `where` for settings add_layers cannot build.
  static void check(const model_config& c, const char* where) {
    model_family_defaults::check(c, where);
    SAR_CHECK(c.schema.heterogeneous() && !c.batch_norm && (c.rgcn_bases == 0 || c.rgcn_blocks == 0),
              invalid_argument, where, ": rgcn needs a heterogeneous graph's schema (",
              c.schema.num_node_types(), " node types), no batch norm, and bases or blocks, not "
              "both (", c.rgcn_bases, ", ", c.rgcn_blocks, ")");
  }
  /// sar-train's options that only rgcn reads.
  static constexpr std::array<std::string_view, 3> own_options{"--rgcn-bases", "--rgcn-blocks",
                                                               "--node-embeddings"};
  /// A node's own row is its self term; an added self-loop would have no relation.
  static constexpr self_loop_policy self_loops = self_loop_policy::keep;
  /// It reads a heterogeneous graph's node types and relations.
  static constexpr bool reads_graph_types = true;
  /// Its settings in a run's description (metrics, checkpoints).
  static void describe(const model_config& c, nlohmann::json& j) {
    j["schema"] = schema_to_json(c.schema);
    j["rgcn_bases"] = c.rgcn_bases;
    j["rgcn_blocks"] = c.rgcn_blocks;
    if (c.node_embeddings) j["node_embeddings"] = true;  // (older checkpoints: without)
  }

  /// Appends the model's layers for `features` inputs and `classes` outputs.
  template <class T, class Schedule>
  static void add_layers(const model_config& c, Eigen::Index features, Eigen::Index classes,
                         std::vector<any_layer<T, Schedule>>& layers) {
    layers.emplace_back(type_projection<T>(c.schema, features, c.hidden, c.node_embeddings));
    const rgcn_options o{.regulariser = c.rgcn_bases > 0    ? rgcn_regulariser::basis
                                        : c.rgcn_blocks > 0 ? rgcn_regulariser::blocks
                                                            : rgcn_regulariser::none,
                         .count = c.rgcn_bases > 0 ? c.rgcn_bases : c.rgcn_blocks};
    for (int k = 0; k < c.layers; ++k) {
      const bool last = k + 1 == c.layers;
      const double drop = k == 0 ? c.first_dropout() : c.dropout;
      if (drop > 0 && k == 0) layers.emplace_back(dropout<T>(c.hidden, drop));
      layers.emplace_back(
          rgcn_layer<T>(c.hidden, last ? classes : c.hidden, c.schema.num_relations(), o));
      if (last) break;
      layers.emplace_back(relu_dropout<T>(c.hidden, c.dropout));
    }
  }

  /// The per-type projection F_t -> H, then `layers` R-GCNs.
  static model_memory memory(const model_config& c, double features, double classes,
                             double nodes, double value_bytes, bool layer_by_layer) {
    const double hidden = static_cast<double>(c.hidden);
    const double relations = static_cast<double>(c.schema.relations.size());
    double parameters = 0;
    double featureless = 0, all = 0;  // nodes
    for (const node_type& t : c.schema.node_types) {
      parameters += static_cast<double>(t.feature_dim) * hidden + hidden;
      all += static_cast<double>(t.count);
      if (t.feature_dim == 0) featureless += static_cast<double>(t.count);
    }
    // Embeddings: a row of H per featureless node among `nodes` (in the schema's proportion).
    if (c.node_embeddings && all > 0) parameters += nodes * featureless / all * hidden;
    double activations = 2 * nodes * (features + hidden);  // the projection's input and output
    for (int k = 0; k < c.layers; ++k) {
      const double out = k + 1 == c.layers ? classes : hidden;
      const double relation_weights =
          c.rgcn_bases > 0 ? static_cast<double>(c.rgcn_bases) * (hidden * out + relations)
          : c.rgcn_blocks > 0 ? relations * hidden * out / static_cast<double>(c.rgcn_blocks)
                              : relations * hidden * out;
      parameters += relation_weights + hidden * out + out;
      // Output and its gradient, and the inverse relation counts (R per node, rgcn.hpp).
      const double layer = nodes * (2 * out + relations);
      activations = layer_by_layer ? std::max(activations, layer) : activations + layer;
    }
    return {4 * parameters * value_bytes, activations * value_bytes};
  }

  /// The schema, the relation weights' regulariser and the embeddings.
  static void write_settings(const model_config& c, nlohmann::json& j) {
    j["schema"] = schema_to_json(c.schema);
    j["rgcn_bases"] = c.rgcn_bases;
    j["rgcn_blocks"] = c.rgcn_blocks;
    j["node_embeddings"] = c.node_embeddings;
  }
  /// Reads write_settings' fields; throws sar::io_error naming `file` for a bad value.
  static void read_settings(const nlohmann::json& j, model_config& c, const std::string& file) {
    constexpr const char* where = "sar::read_model";
    c.schema = schema_from_json(j.at("schema"), file);
    c.rgcn_bases = j.at("rgcn_bases").get<Eigen::Index>();
    c.rgcn_blocks = j.at("rgcn_blocks").get<Eigen::Index>();
    c.node_embeddings = j.value("node_embeddings", false);  // absent in version 1
    try {
      c.schema.validate(c.schema.type_begin(c.schema.num_node_types()), Eigen::Index{1} << 31,
                        where);
    } catch (const invalid_argument& e) {
      throw io_error(message(file, ": ", e.what()));
    }
  }
};

}  // namespace sar
