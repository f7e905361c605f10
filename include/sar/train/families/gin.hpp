// GIN (Xu et al. 2019, GIN-eps) for node prediction: per layer the MLP update
// relu(((1 + eps) x_i + sum_j x_j) W_1 + b_1) W_2 + b_2 around sar/nn/gin.hpp, x W_1 applied
// before the sum (it commutes with it), then batch norm if asked, relu and dropout between
// layers.
#pragma once

#include "sar/nn/gin.hpp"
#include "sar/nn/linear.hpp"
#include "sar/train/model_family.hpp"

namespace sar {

/// The gin model family (the seam: sar/train/model_family.hpp; the registry:
/// sar/train/families.hpp).
struct gin_family : model_family_defaults {
  /// What --model and model files call it.
  static constexpr std::string_view name = "gin";
  /// A line for --help.
  static constexpr std::string_view summary =
      "graph isomorphism network, GIN-eps (Xu et al. 2019): sum of the neighbours, a learnt "
      "eps, an MLP update";

  /// Hidden 64, weight decay on every layer.
  static void paper_defaults(model_config& c) {
    c.hidden = 64;
    c.decay_first_layer_only = false;
  }
  /// The sum is over the graph's own edges: no self-loop added ((1 + eps) x_i is the self term).
  static constexpr self_loop_policy self_loops = self_loop_policy::keep;
  /// Whether its first layer reads sparse input rows: yes (x W_1 comes first).
  static bool reads_sparse_input(const model_config&) { return true; }

  /// Appends the model's layers for `features` inputs and `classes` outputs.
  template <class T, class Schedule>
  static void add_layers(const model_config& c, Eigen::Index features, Eigen::Index classes,
                         std::vector<any_layer<T, Schedule>>& layers) {
    Eigen::Index width = features;
    if (c.first_dropout() > 0) layers.emplace_back(dropout<T>(features, c.first_dropout()));
    for (int k = 0; k < c.layers; ++k) {
      const bool last = k + 1 == c.layers;
      const Eigen::Index out = last ? classes : c.hidden;
      layers.emplace_back(linear<T>(width, c.hidden, {.bias = false, .name = "gin.mlp1"}));
      layers.emplace_back(gin_aggregation<T>(c.hidden));
      layers.emplace_back(relu<T>(c.hidden));
      layers.emplace_back(linear<T>(c.hidden, out, {.bias = last || !c.batch_norm,
                                                     .name = "gin.mlp2"}));
      width = out;
      if (last) break;
      if (c.batch_norm) layers.emplace_back(batch_norm<T>(width));
      layers.emplace_back(relu_dropout<T>(width, c.dropout));
    }
  }

  /// Parameters besides the second bias: W_1, eps, b_1, W_2.
  static double weights(const model_config& c, double width, double out) {
    const double hidden = static_cast<double>(c.hidden);
    return width * hidden + 1 + hidden + hidden * out;
  }
  /// Exact parameters; as activations each layer's outputs and their gradients.
  static model_memory memory(const model_config& c, double features, double classes,
                             double nodes, double value_bytes, bool layer_by_layer) {
    const double hidden = static_cast<double>(c.hidden);
    double parameters = 0, activations = 0, width = features;
    for (int k = 0; k < c.layers; ++k) {
      const bool last = k + 1 == c.layers;
      const double out = last ? classes : hidden;
      parameters += weights(c, width, out) + (last ? out : c.batch_norm ? 2 * out : out);
      // x W_1, the sum, relu (in place) and the output, each with its gradient.
      const double layer = 2 * nodes * (2 * hidden + out);
      activations = layer_by_layer ? std::max(activations, layer) : activations + layer;
      width = out;
    }
    return {4 * parameters * value_bytes, activations * value_bytes};
  }
  /// Layer k as sar-plan plans it: x W_1 crosses (hidden wide); it keeps two hidden-wide
  /// outputs and its own, with their gradients (from the buffers, not measured).
  static planned_layer plan_layer(const model_config& c, int k, double input, double outputs,
                                  bool /*sparse_input*/) {
    const double hidden = static_cast<double>(c.hidden);
    const double output = k + 1 == c.layers ? outputs : hidden;
    return {.input = input, .output = output, .exchanged = hidden,
            .kept = 2 + 4 * hidden / output, .weights = weights(c, input, output)};
  }
};

}  // namespace sar
