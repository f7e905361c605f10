// APPNP (Klicpera et al. 2019, "Predict then Propagate"): an MLP predicts from each node's own
// features, then K = 10 steps of personalised-PageRank propagation with teleport alpha = 0.1
// (sar/nn/appnp.hpp) spread the predictions over the graph; the paper's settings (hidden 64,
// dropout 0.5, L2 5e-3 on the first layer, early stopping with patience 100). Full batch only.
#pragma once

#include "sar/nn/appnp.hpp"
#include "sar/nn/linear.hpp"
#include "sar/train/model_family.hpp"

namespace sar {

/// The appnp model family (the seam: sar/train/model_family.hpp; the registry:
/// sar/train/families.hpp).
struct appnp_family : stacked_family<appnp_family> {
  /// What --model and model files call it.
  static constexpr std::string_view name = "appnp";
  /// A line for --help.
  static constexpr std::string_view summary =
      "APPNP (Klicpera et al. 2019): an MLP, then 10 steps of personalised-PageRank "
      "propagation (alpha 0.1); full batch";
  /// Propagation steps K and teleport probability alpha (the paper's).
  static constexpr int steps = 10;
  /// Teleport probability alpha.
  static constexpr double alpha = 0.1;

  /// Hidden 64, L2 5e-3 on the first layer's weights, early stopping after 100 epochs
  /// without a better validation score.
  static void paper_defaults(model_config& c) {
    c.hidden = 64;
    c.weight_decay = 5e-3;
    c.epochs = 1000;
    c.patience = 100;
  }
  /// Its propagation maps the whole graph to itself (sar/nn/appnp.hpp).
  static std::string minibatch_refusal(const model_config&) {
    return "propagates over the whole graph; train it full batch (no --minibatch)";
  }

  /// Appends the MLP's layers (the stack of linear maps), then the propagation.
  template <class T, class Schedule>
  static void add_layers(const model_config& c, Eigen::Index features, Eigen::Index classes,
                         std::vector<any_layer<T, Schedule>>& layers) {
    stacked_family::add_layers<T, Schedule>(c, features, classes, layers);
    layers.emplace_back(appnp_propagation<T>(classes, steps, alpha));
  }
  /// Appends the MLP's layer k (stacked_family).
  template <class T, class Schedule>
  static void add_graph_layer(const model_config&, int, Eigen::Index width, Eigen::Index out,
                              bool bias, std::vector<any_layer<T, Schedule>>& layers) {
    layers.emplace_back(linear<T>(width, out, {.bias = bias}));
  }
  /// The MLP's, and the propagation's output and gradient and its step buffers.
  static model_memory memory(const model_config& c, double features, double classes,
                             double nodes, double value_bytes, bool layer_by_layer) {
    model_memory m = stacked_family::memory(c, features, classes, nodes, value_bytes,
                                            layer_by_layer);
    m.activations += 4 * nodes * classes * value_bytes;
    return m;
  }
  /// The MLP's layers exchange nothing; the last carries the propagation: K exchanges of
  /// rows as wide as the outputs each way.
  static planned_layer plan_shape(const model_config&, bool last, double width, double out) {
    planned_layer l = gcn_plan(width, out);
    l.exchanged = last ? out : 0;
    l.forward_exchanges = l.backward_exchanges = last ? steps : 0;
    l.kept = last ? 4 : 2;
    return l;
  }
  /// Its first layer exchanges nothing on sparse rows either.
  static void plan_sparse_first_layer(planned_layer&) {}
};

}  // namespace sar
