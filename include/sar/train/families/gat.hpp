// GAT (Velickovic et al. 2018): sar/nn/gat.hpp under the stack of sar/train/model_family.hpp,
// hidden heads concatenated, the last layer's averaged, elu between layers.
#pragma once

#include "sar/nn/gat.hpp"
#include "sar/train/model_family.hpp"

namespace sar {

/// The gat model family (the seam: sar/train/model_family.hpp; the registry:
/// sar/train/families.hpp).
struct gat_family : stacked_family<gat_family> {
  /// What --model and model files call it.
  static constexpr std::string_view name = "gat";
  /// A line for --help.
  static constexpr std::string_view summary =
      "graph attention (Velickovic et al. 2018; see --heads)";

  /// Its paper's settings on top of model_config's.
  static void paper_defaults(model_config& c) {
    c.hidden = 8;
    c.heads = 8;
    c.dropout = 0.6;
    c.attention_dropout = 0.6;
    c.learning_rate = 0.005;
    c.decay_first_layer_only = false;
    c.epochs = 1000;
    c.patience = 100;
  }
  /// Throws sar::invalid_argument naming `where` for settings add_layers cannot build.
  static void check(const model_config& c, const char* where) {
    check_edge_weight(c, where, false);
    check_edge_attention(c, where, true);
  }
  /// sar-train's options that only gat reads.
  static constexpr std::array<std::string_view, 1> own_options{"--edge-attention"};
  /// Whether a model of c reads the graph's edge features.
  static bool reads_edge_features(const model_config& c) { return c.edge_attention; }
  /// elu between layers, and a dropout before every layer.
  static constexpr bool relu_between = false;
  /// Projected features, the fused kernel's two accumulators and their gradients (measured:
  /// 7 to 9 times its output at the peak).
  static double kept_values(const model_config&, double out_width) { return 8 * out_width; }

  /// The settings that make its layers wide, as sar-train names them.
  static std::string widths(const model_config& c) {
    return message("--hidden ", c.hidden, " and --heads ", c.heads);
  }
  /// Its settings in a run's description (metrics, checkpoints).
  static void describe(const model_config& c, nlohmann::json& j) {
    j["heads"] = c.heads;
    j["output_heads"] = c.output_heads;
    j["attention_dropout"] = c.attention_dropout;
  }

  /// Appends graph layer k of the stack (stacked_family).
  template <class T, class Schedule>
  static void add_graph_layer(const model_config& c, int k, Eigen::Index width, Eigen::Index out,
                              bool bias, std::vector<any_layer<T, Schedule>>& layers) {
    const bool last = k + 1 == c.layers;
    gat_options o;
    o.heads = last ? c.output_heads : c.heads;
    o.merge = last ? gat_merge::mean : gat_merge::concat;
    o.attention_dropout = c.attention_dropout;
    o.bias = bias;
    o.edge_dim = c.edge_attention ? c.edge_dim : 0;
    layers.emplace_back(gat_layer<T>(width, out, o));
  }
  /// The heads of a hidden layer, or of the last.
  static double heads(const model_config& c, bool last) {
    return static_cast<double>(last ? c.output_heads : c.heads);
  }
  /// The heads' outputs (before the last layer's mean).
  static double output_width(const model_config& c, bool last, double out) {
    return heads(c, last) * out;
  }
  /// A layer's parameters besides the bias.
  static double weights(const model_config& c, bool last, double width, double out) {
    const double out_width = output_width(c, last, out);
    return width * out_width + 2 * out_width +
           (c.edge_attention ? static_cast<double>(c.edge_dim) * heads(c, last) : 0);
  }
  /// A layer as sar-plan plans it (stacked_family::plan_layer adds the rest).
  static planned_layer plan_shape(const model_config& c, bool last, double, double out) {
    // [z | el] crosses; projected features, the two online-softmax accumulators and their
    // gradients stay (measured: 7.25 outputs at the peak, bench/RESULTS.md §26).
    return {.output = last ? out : output_width(c, last, out),
            .exchanged = output_width(c, last, out) + heads(c, last),
            .kept = 7.25,
            .regathers = true};
  }
  /// GAT projects in its attention kernel: nothing changes on sparse rows.
  static void plan_sparse_first_layer(planned_layer&) {}
};

}  // namespace sar
