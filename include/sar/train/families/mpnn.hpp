// Encode, process, decode (MeshGraphNets, Pfaff et al. 2021): a linear encoder, `layers`
// message-passing steps reading the edge features (sar/nn/edge_conv.hpp), a linear decoder;
// MeshGraphNets' recipe, narrower and with fewer steps. With layer_norm, MeshGraphNets' own
// shape: the node encoder linear, relu, linear, layer norm; the edge encoder and every step
// normalised; the decoder linear, relu, linear (MeshGraphNets' MLPs have two hidden layers,
// these one).
#pragma once

#include "sar/nn/activations.hpp"
#include "sar/nn/edge_conv.hpp"
#include "sar/nn/layer_norm.hpp"
#include "sar/nn/linear.hpp"
#include "sar/train/model_family.hpp"

namespace sar {

/// The mpnn model family (the seam: sar/train/model_family.hpp; the registry:
/// sar/train/families.hpp).
struct mpnn_family : model_family_defaults {
  /// What --model and model files call it.
  static constexpr std::string_view name = "mpnn";
  /// A line for --help.
  static constexpr std::string_view summary =
      "encode, message-passing steps over the edge features, decode "
      "(MeshGraphNets)";

  /// Its paper's settings on top of model_config's.
  static void paper_defaults(model_config& c) {
    c.hidden = 64;
    c.layers = 4;
    c.dropout = 0;
    c.learning_rate = 1e-3;
    c.weight_decay = 0;
    c.decay_first_layer_only = false;
  }
  /// Throws sar::invalid_argument naming `where` for settings add_layers cannot build.
  static void check(const model_config& c, const char* where) {
    check_edge_weight(c, where, false);
    check_edge_attention(c, where, false);
    SAR_CHECK(c.edge_dim >= 1, invalid_argument, where,
              ": mpnn passes messages over edge features, but edge_dim is ", c.edge_dim);
    SAR_CHECK(!c.batch_norm, invalid_argument, where, ": mpnn has no batch norm");
    SAR_CHECK(!c.layer_norm || c.edge_state, invalid_argument, where,
              ": mpnn's layer norm normalises the edge state, which --no-edge-state drops");
  }
  /// Whether a model of c reads the graph's edge features.
  static bool reads_edge_features(const model_config&) { return true; }
  /// A sampled block's edges differ from layer to layer, so no edge state carries over.
  static std::string minibatch_refusal(const model_config& c) {
    if (!c.edge_state || c.layers == 1) return {};
    return "with --minibatch needs --no-edge-state (each step reads the edge features of its "
           "own sampled block) or --layers 1";
  }
  /// A node's own row is its self term; an added self-loop would have no edge features.
  static constexpr self_loop_policy self_loops = self_loop_policy::keep;

  /// Appends the model's layers for `features` inputs and `classes` outputs.
  template <class T, class Schedule>
  static void add_layers(const model_config& c, Eigen::Index features, Eigen::Index classes,
                         std::vector<any_layer<T, Schedule>>& layers) {
    if (c.first_dropout() > 0) layers.emplace_back(dropout<T>(features, c.first_dropout()));
    layers.emplace_back(linear<T>(features, c.hidden, {.name = "encoder"}));
    layers.emplace_back(relu<T>(c.hidden));
    if (c.layer_norm) {
      layers.emplace_back(linear<T>(c.hidden, c.hidden, {.name = "encoder.1"}));
      layers.emplace_back(sar::layer_norm<T>(c.hidden, "encoder_norm"));
    }
    const auto aggregation = c.mean_messages ? message_aggregation::mean : message_aggregation::sum;
    if (c.edge_state)
      layers.emplace_back(edge_processor<T>(c.hidden, c.edge_dim, c.hidden, c.layers, aggregation,
                                            c.layer_norm));
    else
      for (int k = 0; k < c.layers; ++k)
        layers.emplace_back(edge_conv<T>(c.hidden, c.edge_dim, c.hidden, aggregation));
    if (c.layer_norm) {
      layers.emplace_back(linear<T>(c.hidden, c.hidden, {.name = "decoder.0"}));
      layers.emplace_back(relu<T>(c.hidden));
    }
    layers.emplace_back(linear<T>(c.hidden, classes, {.name = "decoder"}));
  }

  /// F -> H, `layers` steps (edge_step), H -> classes.
  static model_memory memory(const model_config& c, double features, double classes,
                             double nodes, double value_bytes, bool /*layer_by_layer*/) {
    const double hidden = static_cast<double>(c.hidden);
    const double edge = static_cast<double>(c.edge_dim), steps = c.layers;
    const double step_in = c.edge_state ? hidden : edge;  // the width a step's edges read
    // With layer norm: the encoder's and decoder's second linear, four norms per step (gain
    // and bias of the messages' and of the node update's) and the two encoders' norms.
    const double norms = c.layer_norm ? 2 * hidden * hidden + 6 * hidden + 4 * steps * hidden : 0;
    const double parameters = features * hidden + hidden +
                              (c.edge_state ? edge * hidden + hidden : 0) +
                              steps * (6 * hidden * hidden + step_in * hidden + 4 * hidden) +
                              hidden * classes + classes + norms;
    // Per step: its output and gradient, and the 5 rows of H it keeps (edge_conv.hpp), with
    // layer norm a sixth (the node update before its norm) and the encoder's and decoder's
    // extra outputs.
    const double kept = c.layer_norm ? 8 * steps * hidden + 6 * hidden : 7 * steps * hidden;
    const double activations = nodes * (2 * features + 2 * classes + kept);
    return {4 * parameters * value_bytes, activations * value_bytes};
  }
};

}  // namespace sar
