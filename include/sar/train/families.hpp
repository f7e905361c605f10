// The registry of built-in model families (sar/train/model_family.hpp): one line per family
// in builtin_families. Everything that depends on the family (sar-train --model, model files,
// make_model, memory estimates, sar-plan) looks it up here by name.
#pragma once

#include <algorithm>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "sar/core/error.hpp"
#include "sar/core/type_list.hpp"
#include "sar/train/families/appnp.hpp"
#include "sar/train/families/gat.hpp"
#include "sar/train/families/gcn.hpp"
#include "sar/train/families/gin.hpp"
#include "sar/train/families/mlp.hpp"
#include "sar/train/families/mpnn.hpp"
#include "sar/train/families/rgcn.hpp"
#include "sar/train/families/sage.hpp"
#include "sar/train/model_config.hpp"
#include "sar/train/model_family.hpp"

namespace sar {

/// The built-in families, in the order --help and errors list them.
using builtin_families =
    type_list<gcn_family, sage_family, gat_family, mlp_family, mpnn_family, rgcn_family,
              gin_family, appnp_family>;
static_assert([]<class... F>(type_list<F...>) { return (model_family<F> && ...); }(
                  builtin_families{}),
              "every built-in family must satisfy sar::model_family");

/// Calls f.template operator()<F>() for every built-in family F, in order.
template <class Function>
void for_each_family(Function&& f) {
  for_each_type(builtin_families{}, f);
}

/// The built-in families' names, in order.
inline std::vector<std::string> family_names() {
  std::vector<std::string> names;
  for_each_family([&]<class F>() { names.emplace_back(F::name); });
  return names;
}

/// "gcn: summary | sage: summary | ...": the families for a program's --help.
inline std::string family_choices() {
  std::string choices;
  for_each_family([&]<class F>() {
    choices += message(choices.empty() ? "" : " | ", F::name, ": ", F::summary);
  });
  return choices;
}

/// f.template operator()<F>() for the family F named `name`, and its result. Throws Exception
/// naming `where`, `name` and the known families for an unknown name.
template <class Exception = invalid_argument, class Function>
auto with_family(std::string_view name, Function&& f, std::string_view where = "sar") {
  auto found = with_first(builtin_families{}, [&]<class F>() { return name == F::name; }, f);
  if (!found) {
    std::string known;
    for (const auto& n : family_names()) known += (known.empty() ? "" : ", ") + n;
    throw Exception(message(where, ": unknown model family '", name, "' (", known, ")"));
  }
  if constexpr (!std::is_same_v<decltype(found), bool>) return *std::move(found);
}

/// The published settings of the family named `family` (its paper's; model_config's for the
/// rest). Throws sar::invalid_argument for an unknown name.
inline model_config paper_defaults(std::string_view family) {
  model_config c;
  c.family = std::string(family);
  with_family(family, [&]<class F>() { F::paper_defaults(c); }, "sar::paper_defaults");
  return c;
}

/// Whether a model of `c` reads the graph's edge features (mpnn; gcn with edge_weight; gat
/// with edge_attention). Throws sar::invalid_argument for an unknown family.
inline bool reads_edge_features(const model_config& c) {
  return with_family(c.family, [&]<class F>() { return F::reads_edge_features(c); });
}

/// Whether the first layer of a model of `c` can read sparse input rows.
inline bool reads_sparse_input(const model_config& c) {
  return with_family(c.family, [&]<class F>() { return F::reads_sparse_input(c); });
}

/// Whether a model of `c` reads a heterogeneous graph's types (rgcn); the others see the graph
/// with its types erased.
inline bool reads_graph_types(const model_config& c) {
  return with_family(c.family, []<class F>() { return F::reads_graph_types; });
}

/// The relations a link decoder over a model of `c` tells apart (decoder_shape::relations):
/// the schema's for a model that reads the graph's types (rgcn), else 1 (types erased).
inline int link_relations(const model_config& c) {
  return reads_graph_types(c) ? std::max(1, static_cast<int>(c.schema.num_relations())) : 1;
}

/// The family's own settings of `c` added to a run's description `j` (sar-train's metrics and
/// checkpoints).
inline void describe_family_settings(const model_config& c, nlohmann::json& j) {
  with_family(c.family, [&]<class F>() { F::describe(c, j); });
}

/// The settings that make a model of `c` wide, as sar-train names them ("--hidden 16").
inline std::string model_widths(const model_config& c) {
  return with_family(c.family, [&]<class F>() { return F::widths(c); });
}

/// Why sar-train refuses to train a model of `c` on minibatches (empty: it does not).
inline std::string minibatch_refusal(const model_config& c) {
  return with_family(c.family, [&]<class F>() { return F::minibatch_refusal(c); });
}

/// The self-loop policy a model of `c` is trained and used with (sar-train, sar-predict).
inline self_loop_policy model_self_loops(const model_config& c) {
  return with_family(c.family, [&]<class F>() { return F::self_loops; });
}

/// The memory a model of config `c` for `features` inputs and `classes` outputs needs to train
/// on `nodes` nodes, in values of `value_bytes` bytes (4 for float). Exact for the parameters
/// of the layers make_model builds, a lower bound for the activations (layer_by_layer: only
/// the largest layer's, as minibatch training evaluates one layer at a time). Computed in
/// double and in closed form: no overflow and no delay for any setting (1e12 hidden units or
/// 1e9 layers give a large number at once). Throws only for an unknown family.
inline model_memory estimate_model_memory(const model_config& c, double features, double classes,
                                          double nodes, double value_bytes,
                                          bool layer_by_layer = false) {
  return with_family(c.family, [&]<class F>() {
    return F::memory(c, features, classes, nodes, value_bytes, layer_by_layer);
  });
}

}  // namespace sar
