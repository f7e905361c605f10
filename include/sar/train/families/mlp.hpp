// An MLP: linear layers only, the graph unused (the baseline a GNN has to beat), with GCN's
// settings.
#pragma once

#include "sar/nn/linear.hpp"
#include "sar/train/model_family.hpp"

namespace sar {

/// The mlp model family (the seam: sar/train/model_family.hpp; the registry:
/// sar/train/families.hpp).
struct mlp_family : stacked_family<mlp_family> {
  /// What --model and model files call it.
  static constexpr std::string_view name = "mlp";
  /// A line for --help.
  static constexpr std::string_view summary =
      "no graph: the baseline";

  /// It reads no neighbours: sampling them would be wasted.
  static std::string minibatch_refusal(const model_config&) {
    return "reads no neighbours; train it full batch (no --minibatch)";
  }

  /// Appends graph layer k of the stack (stacked_family).
  template <class T, class Schedule>
  static void add_graph_layer(const model_config&, int, Eigen::Index width, Eigen::Index out,
                              bool bias, std::vector<any_layer<T, Schedule>>& layers) {
    layers.emplace_back(linear<T>(width, out, {.bias = bias}));
  }
};

}  // namespace sar
