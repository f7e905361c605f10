// GraphSAGE (Hamilton et al. 2017): sar/nn/sage.hpp under the stack of
// sar/train/model_family.hpp, with the GCN recipe and a wider hidden layer (Hamilton et al.
// use 256 on Reddit).
#pragma once

#include "sar/nn/sage.hpp"
#include "sar/nn/sage_aggregators.hpp"
#include "sar/train/model_family.hpp"

namespace sar {

/// The sage model family (the seam: sar/train/model_family.hpp; the registry:
/// sar/train/families.hpp).
struct sage_family : stacked_family<sage_family> {
  /// What --model and model files call it.
  static constexpr std::string_view name = "sage";
  /// A line for --help.
  static constexpr std::string_view summary =
      "GraphSAGE (Hamilton et al. 2017; see --aggregator)";

  /// Its paper's settings on top of model_config's.
  static void paper_defaults(model_config& c) {
    c.hidden = 64;
    c.decay_first_layer_only = false;
  }
  /// Throws sar::invalid_argument naming `where` for an unknown aggregator or edge options.
  static void check(const model_config& c, const char* where) {
    stacked_family::check(c, where);
    with_sage_aggregator(c.aggregation, []<class>() {}, where);
  }
  /// A node's own row is its self term: no self-loop added.
  static constexpr self_loop_policy self_loops = self_loop_policy::keep;
  /// Whether its first layer reads sparse input rows.
  static bool reads_sparse_input(const model_config& c) {
    return with_sage_aggregator(c.aggregation, []<class A>() { return A::linear; });
  }

  /// Its settings in a run's description (metrics, checkpoints).
  static void describe(const model_config& c, nlohmann::json& j) {
    j["aggregator"] = c.aggregation;
  }

  /// Appends graph layer k of the stack (stacked_family).
  template <class T, class Schedule>
  static void add_graph_layer(const model_config& c, int k, Eigen::Index width, Eigen::Index out,
                              bool bias, std::vector<any_layer<T, Schedule>>& layers) {
    const bool aggregate_first = k == 0 && c.aggregate_features_first;
    with_sage_aggregator(c.aggregation, [&]<class A>() {
      const sage_options o{.bias = bias,
                           .pool_dim = A::linear ? 0 : c.hidden,
                           .aggregate_first = A::linear && aggregate_first};
      layers.emplace_back(sage_layer<T, A>(width, out, o));
    });
  }
  /// A layer's parameters besides the bias.
  static double weights(const model_config& c, bool, double width, double out) {
    return with_sage_aggregator(c.aggregation, [&]<class A>() {
      const double pooled = A::linear ? 0 : static_cast<double>(c.hidden);  // W_pool, b_pool
      const double neighbour = A::linear ? width : pooled;                   // W_nbr's rows
      return width * pooled + pooled + (A::self_weight ? width * out : 0) + neighbour * out;
    });
  }
  /// A layer as sar-plan plans it (stacked_family::plan_layer adds the rest).
  static planned_layer plan_shape(const model_config&, bool, double width, double out) {
    // Output (overwritten by its gradient), the neighbour aggregate, the input it reads again
    // in backward (measured 2.6, bench/RESULTS.md §28).
    return {.output = out, .exchanged = std::min(width, out), .kept = 2.6};
  }
  /// Both weights applied first: the two projections, the aggregate and their gradients
  /// (measured 5.7 on 200k nodes, 5,000 features at 0.3%, P = 1 and 2: bench/RESULTS.md §30).
  static void plan_sparse_first_layer(planned_layer& l) {
    l.exchanged = l.output;
    l.kept = 5.7;
  }
};

}  // namespace sar
