// The seam of a built-in model family (sar-train --model NAME, model files, sar-plan): a struct
// of static members, one file under sar/train/families/, listed once in sar/train/families.hpp.
// The library and the programs reach a family through that registry, never by switching on
// its name. docs/model-families.md says how to add one.
//
// A family states:
//   name, summary                what --model and model files call it; a line for --help
//   paper_defaults(c)            its paper's settings, on top of model_config's
//   check(c, where)              throws sar::invalid_argument for settings it cannot build
//   add_layers<T, Schedule>(c, features, classes, layers)   the model, layer by layer
//   memory(c, features, classes, nodes, value_bytes, layer_by_layer)   estimate_model_memory
//   plan_layer(c, k, input, outputs, sparse_input)   graph layer k as sar-plan plans it
// and may change the defaults of model_family_defaults below. Families built as a stack of
// graph layers with dropout, batch norm and an activation between them (gcn, sage, gat, mlp,
// gin, appnp's MLP) derive from stacked_family and state only the layer.
#pragma once

#include <algorithm>
#include <array>
#include <concepts>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "sar/graph/builders.hpp"
#include "sar/nn/activations.hpp"
#include "sar/nn/any_layer.hpp"
#include "sar/nn/batch_norm.hpp"
#include "sar/nn/dropout.hpp"
#include "sar/train/model_config.hpp"

namespace sar {

/// One graph layer as sar-plan plans it (sar/train/capacity.hpp).
struct planned_layer {
  double input = 0;   ///< input width
  double output = 0;  ///< output width
  /// What crosses the network per halo row in forward.
  double exchanged = 0;
  /// Outputs of its width it keeps at the peak, with the model's buffers (measured).
  double kept = 0;
  bool regathers = false;  ///< backward fetches the halo again (GAT)
  /// Exchanges of `exchanged` per epoch in forward; < 0: sar-plan's rule (one; GAT's two).
  double forward_exchanges = -1;
  /// Exchanges in backward; < 0: sar-plan's rule (one unless the first layer aggregates its
  /// input; GAT's one).
  double backward_exchanges = -1;
  double weights = 0;  ///< parameters besides the bias
};

/// What a family has unless it says otherwise.
struct model_family_defaults {
  /// Its paper's settings on top of model_config's (c.family is set).
  static void paper_defaults(model_config&) {}
  /// Throws sar::invalid_argument naming `where` for settings the family cannot build: by
  /// default the edge options of gcn (edge_weight) and gat (edge_attention).
  static void check(const model_config& c, const char* where) {
    check_edge_weight(c, where, false);
    check_edge_attention(c, where, false);
    SAR_CHECK(!c.layer_norm, invalid_argument, where, ": layer norm is an mpnn's option");
  }
  /// Throws unless edge_weight is -1 or, if `allowed`, a column of the edge features.
  static void check_edge_weight(const model_config& c, const char* where, bool allowed) {
    SAR_CHECK(c.edge_weight < 0 || (allowed && c.edge_weight < c.edge_dim), invalid_argument,
              where, ": edges weighted by edge feature ", c.edge_weight, " of ", c.edge_dim,
              " (a gcn's option)");
  }
  /// Throws unless edge_attention is off or, if `allowed`, there are edge features.
  static void check_edge_attention(const model_config& c, const char* where, bool allowed) {
    SAR_CHECK(!c.edge_attention || (allowed && c.edge_dim >= 1), invalid_argument, where,
              ": attention over ", c.edge_dim, " edge features (a gat's option, edge_dim >= 1)");
  }
  /// Whether a model of c reads the graph's edge features.
  static bool reads_edge_features(const model_config&) { return false; }
  /// The graph a model is trained and used on: one self-loop added per node (A + I), or the
  /// graph as it is (a family whose self term is its own).
  static constexpr self_loop_policy self_loops = self_loop_policy::add;
  /// The edge features of an added self-loop (every column).
  static constexpr float added_loop_edge_value = 0;
  /// Whether the first layer of a model of c reads sparse input rows.
  static bool reads_sparse_input(const model_config&) { return false; }
  /// sar-plan: a GCN layer that reads bf16 rows as it needs them, or writes its output over
  /// its input at equal widths (sar/nn/gcn.hpp).
  static constexpr bool gcn_first_layer = false;
  /// Graph layer k as sar-plan plans it, by default as a GCN layer of the model's widths.
  static planned_layer plan_layer(const model_config& c, int k, double input, double outputs,
                                  bool /*sparse_input*/) {
    planned_layer l = gcn_plan(input, k + 1 == c.layers ? outputs : static_cast<double>(c.hidden));
    l.weights = input * l.output;
    return l;
  }
  /// A GCN layer from `input` to `output` columns as sar-plan plans it: the narrower side
  /// crosses; it keeps its output (overwritten by its gradient) and the aggregate kept for dW
  /// when aggregating first, with the small last layer's buffers (measured 2.4 outputs,
  /// bench/RESULTS.md §28).
  static planned_layer gcn_plan(double input, double output) {
    return {.input = input, .output = output, .exchanged = std::min(input, output), .kept = 2.4};
  }
  /// sar-train's options that only this family reads: a run of another family refuses them.
  static constexpr std::array<std::string_view, 0> own_options{};
  /// Why sar-train refuses to train a model of c on minibatches, after "--model NAME " (empty:
  /// it does not).
  static std::string minibatch_refusal(const model_config&) { return {}; }
  /// The settings that make its layers wide, as sar-train's options name them (for messages).
  static std::string widths(const model_config& c) { return message("--hidden ", c.hidden); }
  /// Whether the family reads a heterogeneous graph's node types and relations (the others
  /// see such a graph with its types erased).
  static constexpr bool reads_graph_types = false;
  /// The family's own settings in the description of a run (sar-train's metrics and
  /// checkpoints, which a resumed run must match).
  static void describe(const model_config&, nlohmann::json&) {}
  /// The family's own settings in a model file (beyond model_config's common ones).
  static void write_settings(const model_config&, nlohmann::json&) {}
  /// Reads them; throws sar::io_error naming `file` for a bad value.
  static void read_settings(const nlohmann::json&, model_config&, const std::string& /*file*/) {}
};

/// What the registry requires of a family (see the top of this file).
template <class F>
concept model_family =
    requires(model_config& c, const nlohmann::json& j, nlohmann::json& out) {
      { F::name } -> std::convertible_to<std::string_view>;
      { F::summary } -> std::convertible_to<std::string_view>;
      F::paper_defaults(c);
      F::check(c, "");
      { F::reads_edge_features(c) } -> std::same_as<bool>;
      { F::reads_sparse_input(c) } -> std::same_as<bool>;
      { F::self_loops } -> std::convertible_to<self_loop_policy>;
      { F::memory(c, 1.0, 1.0, 1.0, 4.0, false) } -> std::same_as<model_memory>;
      { F::plan_layer(c, 0, 1.0, 1.0, false) } -> std::same_as<planned_layer>;
      { F::widths(c) } -> std::convertible_to<std::string>;
      { F::minibatch_refusal(c) } -> std::convertible_to<std::string>;
      { *F::own_options.begin() } -> std::convertible_to<std::string_view>;
      F::describe(c, out);
      F::write_settings(c, out);
      F::read_settings(j, c, std::string());
    };

/// A family built as a stack of graph layers: [dropout] layer, then between layers [batch
/// norm] and relu_dropout (or, with Family::relu_between false, elu and a dropout before the
/// next layer). Family states
///   template <class T, class S> static void add_graph_layer(c, k, width, out, bias, layers)
///     appends graph layer k (input `width`, `out` per head, with or without a bias),
/// and where they differ from the defaults below: output_width(c, last, out) (heads
/// concatenated), weights(c, last, width, out) (parameters besides the bias),
/// plan_shape(c, last, width, out) (as sar-plan plans it), plan_sparse_first_layer,
/// relu_between, kept_values(c, out_width).
template <class Family>
struct stacked_family : model_family_defaults {
  /// Appends the model's layers for `features` inputs and `classes` outputs.
  template <class T, class Schedule>
  static void add_layers(const model_config& c, Eigen::Index features, Eigen::Index classes,
                         std::vector<any_layer<T, Schedule>>& layers) {
    Eigen::Index width = features;
    // Between graph layers relu and dropout are one layer, relu_dropout (also without
    // dropout: it keeps y > 0 as bits, so the next layer's input gradient may overwrite y):
    // one in-place pass each way over one buffer, which the next layer reads.
    for (int k = 0; k < c.layers; ++k) {
      const bool last = k + 1 == c.layers;
      const double drop = k == 0 ? c.first_dropout() : c.dropout;
      if (drop > 0 && (k == 0 || !Family::relu_between))
        layers.emplace_back(dropout<T>(width, drop));
      const Eigen::Index out = last ? classes : c.hidden;
      // Before batch norm a bias is redundant (beta replaces it) and its gradient is exactly
      // zero up to rounding, which Adam would amplify into steps of size lr: leave it out.
      Family::template add_graph_layer<T, Schedule>(c, k, width, out, last || !c.batch_norm,
                                                    layers);
      width = static_cast<Eigen::Index>(Family::output_width(c, last, static_cast<double>(out)));
      if (last) break;
      if (c.batch_norm) layers.emplace_back(batch_norm<T>(width));
      if constexpr (Family::relu_between)
        layers.emplace_back(relu_dropout<T>(width, c.dropout));
      else layers.emplace_back(elu<T>(width));
    }
  }

  /// estimate_model_memory for the stack: exact parameters, Family::kept_values per node and
  /// layer as activations; the hidden layers between the first and the last are alike, so
  /// the sum is in closed form.
  static model_memory memory(const model_config& c, double features, double classes,
                             double nodes, double value_bytes, bool layer_by_layer) {
    const auto layer = [&](int k, double width, double& out) {
      const bool last = k + 1 == c.layers;
      const double per_head = last ? classes : static_cast<double>(c.hidden);
      const double out_width = Family::output_width(c, last, per_head);
      const double weights = Family::weights(c, last, width, per_head);
      // The bias is as wide as the output (after the last GAT layer's mean); a hidden layer
      // followed by batch norm has none, and batch norm two of that width.
      out = last ? per_head : out_width;
      const double parameters = weights + (c.batch_norm && !last ? 2 * out : out);
      return model_memory{parameters, nodes * Family::kept_values(c, out_width)};
    };
    model_memory sum;
    const auto add = [&](const model_memory& m, double times) {
      sum.parameters += times * m.parameters;
      sum.activations = layer_by_layer ? std::max(sum.activations, m.activations)
                                       : sum.activations + times * m.activations;
    };
    double width = 0;
    add(layer(0, features, width), 1);
    if (c.layers >= 3) {
      double next = 0;
      add(layer(1, width, next), c.layers - 2);  // every hidden layer after the first
      width = next;
    }
    if (c.layers >= 2) add(layer(c.layers - 1, width, width), 1);
    return {4 * sum.parameters * value_bytes, sum.activations * value_bytes};
  }

  /// Graph layer k of the stack as sar-plan plans it; `sparse_input`: the first layer reads
  /// sparse rows and applies its weight first, so its output crosses.
  static planned_layer plan_layer(const model_config& c, int k, double input, double outputs,
                                  bool sparse_input) {
    const bool last = k + 1 == c.layers;
    const double per_head = last ? outputs : static_cast<double>(c.hidden);
    planned_layer l = Family::plan_shape(c, last, input, per_head);
    l.input = input;
    l.weights = Family::weights(c, last, input, per_head);
    // Batch norm after a hidden layer keeps its input (its output becomes relu_dropout's, and
    // its input gradient takes its input's buffer: measured 1, GCN and GraphSAGE, §28).
    if (c.batch_norm && !last) l.kept += 1;
    if (k == 0 && sparse_input) Family::plan_sparse_first_layer(l);
    return l;
  }

  /// Planned as a GCN layer of its widths.
  static planned_layer plan_shape(const model_config&, bool /*last*/, double width, double out) {
    return gcn_plan(width, out);
  }
  /// Its first layer reads sparse input rows (a weight applied to them).
  static bool reads_sparse_input(const model_config&) { return true; }
  /// One weight matrix.
  static double weights(const model_config&, bool /*last*/, double width, double out) {
    return width * out;
  }
  /// A first layer on sparse rows applies its weight first: its output crosses.
  static void plan_sparse_first_layer(planned_layer& l) { l.exchanged = l.output; }
  /// The output width of a layer of `out` per head.
  static double output_width(const model_config&, bool /*last*/, double out) { return out; }
  /// Values per node a layer of output width `out_width` keeps, for memory estimates: its
  /// output and gradient.
  static double kept_values(const model_config&, double out_width) { return 2 * out_width; }
  /// relu_dropout between layers (false: elu, and a dropout before every layer).
  static constexpr bool relu_between = true;
};

}  // namespace sar
