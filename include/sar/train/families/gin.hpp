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
struct gin_family : stacked_family<gin_family> {
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

  /// Appends GIN layer k (stacked_family): x W_1, the sum, relu, then W_2 (+ b_2 with `bias`).
  template <class T, class Schedule>
  static void add_graph_layer(const model_config& c, int, Eigen::Index width, Eigen::Index out,
                              bool bias, std::vector<any_layer<T, Schedule>>& layers) {
    layers.emplace_back(linear<T>(width, c.hidden, {.bias = false, .name = "gin.mlp1"}));
    layers.emplace_back(gin_aggregation<T>(c.hidden));
    layers.emplace_back(relu<T>(c.hidden));
    layers.emplace_back(linear<T>(c.hidden, out, {.bias = bias, .name = "gin.mlp2"}));
  }
  /// Parameters besides the second bias: W_1, eps, b_1, W_2.
  static double weights(const model_config& c, bool, double width, double out) {
    const double hidden = static_cast<double>(c.hidden);
    return width * hidden + 1 + hidden + hidden * out;
  }
  /// x W_1, the sum, relu (in place) and the output, each with its gradient.
  static double kept_values(const model_config& c, double out_width) {
    return 2 * (2 * static_cast<double>(c.hidden) + out_width);
  }
  /// Layer k as sar-plan plans it: x W_1 crosses (hidden wide); it keeps two hidden-wide
  /// outputs and its own, with their gradients (from the buffers, not measured).
  static planned_layer plan_layer(const model_config& c, int k, double input, double outputs,
                                  bool /*sparse_input*/) {
    const double hidden = static_cast<double>(c.hidden);
    const bool last = k + 1 == c.layers;
    const double output = last ? outputs : hidden;
    return {.input = input, .output = output, .exchanged = hidden,
            .kept = 2 + 4 * hidden / output, .weights = weights(c, last, input, output)};
  }
};

}  // namespace sar
