// GCN (Kipf & Welling 2017): sar/nn/gcn.hpp under the stack of sar/train/model_family.hpp.
#pragma once

#include "sar/nn/gcn.hpp"
#include "sar/train/model_family.hpp"

namespace sar {

/// The gcn model family (the seam: sar/train/model_family.hpp; the registry:
/// sar/train/families.hpp).
struct gcn_family : stacked_family<gcn_family> {
  /// What --model and model files call it.
  static constexpr std::string_view name = "gcn";
  /// A line for --help.
  static constexpr std::string_view summary =
      "graph convolution (Kipf & Welling 2017)";

  /// Throws sar::invalid_argument naming `where` for settings add_layers cannot build.
  static void check(const model_config& c, const char* where) {
    check_edge_weight(c, where, true);
    check_edge_attention(c, where, false);
  }
  /// sar-train's options that only gcn reads.
  static constexpr std::array<std::string_view, 1> own_options{"--edge-weight"};
  /// Whether a model of c reads the graph's edge features.
  static bool reads_edge_features(const model_config& c) { return c.edge_weight >= 0; }
  /// An added loop of an edge-weighted GCN weighs 1 (PyG's add_remaining_self_loops).
  static constexpr float added_loop_edge_value = 1;
  /// sar-plan: its first layer reads bf16 rows as it needs them (sar/nn/gcn.hpp).
  static constexpr bool gcn_first_layer = true;

  /// Appends graph layer k of the stack (stacked_family).
  template <class T, class Schedule>
  static void add_graph_layer(const model_config& c, int k, Eigen::Index width, Eigen::Index out,
                              bool bias, std::vector<any_layer<T, Schedule>>& layers) {
    layers.emplace_back(
        gcn_layer<T>(width, out, bias, k == 0 && c.aggregate_features_first, c.edge_weight));
  }
};

}  // namespace sar
