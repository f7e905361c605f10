// The models sar-train and the benchmarks build at run time: 2+ layer GCN, GraphSAGE and GAT
// with the papers' settings as defaults, an MLP with GCN's settings as their baseline (see
// ../shared/data/README.md for the sources), and an encode-process-decode message-passing
// network over edge features (mpnn).
#pragma once

#include <string>
#include <vector>

#include "sar/core/error.hpp"
#include "sar/core/memory.hpp"
#include "sar/train/model_config.hpp"
#include "sar/nn/activations.hpp"
#include "sar/nn/any_layer.hpp"
#include "sar/nn/batch_norm.hpp"
#include "sar/nn/dropout.hpp"
#include "sar/nn/edge_conv.hpp"
#include "sar/nn/gat.hpp"
#include "sar/nn/gcn.hpp"
#include "sar/nn/linear.hpp"
#include "sar/nn/rgcn.hpp"
#include "sar/nn/sage.hpp"
#include "sar/nn/type_projection.hpp"
#include "sar/optim/adam.hpp"

namespace sar {

/// Builds the model for input width `features` and `classes` outputs (initialised from
/// `seed`). Throws sar::invalid_argument for fewer than one layer, non-positive widths or an
/// edge weight column outside edge_dim (or on a model other than gcn), or,
/// before allocating anything, for parameters (with their gradients and Adam's moments:
/// estimate_model_memory) that need more memory than is available, naming layers, hidden,
/// heads, features and classes.
template <class T, class Schedule>
dynamic_sequential<T, Schedule> make_model(const model_config& c, Eigen::Index features,
                                           Eigen::Index classes, std::uint64_t seed) {
  constexpr const char* where = "sar::make_model";
  SAR_CHECK(c.layers >= 1 && c.hidden >= 1 && features >= 1 && classes >= 1 && c.heads >= 1 &&
                c.output_heads >= 1,
            invalid_argument, where, ": layers ", c.layers, ", hidden ", c.hidden, ", heads ",
            c.heads, ", output heads ", c.output_heads, ", features ", features, ", classes ",
            classes);
  SAR_CHECK(c.edge_weight < 0 || (c.kind == model_kind::gcn && c.edge_weight < c.edge_dim),
            invalid_argument, where, ": edges weighted by edge feature ", c.edge_weight, " of ",
            c.edge_dim, " (a gcn's option)");
  SAR_CHECK(c.kind != model_kind::mpnn || c.edge_dim >= 1, invalid_argument, where,
            ": mpnn passes messages over edge features, but edge_dim is ", c.edge_dim);
  SAR_CHECK(!c.edge_attention || (c.kind == model_kind::gat && c.edge_dim >= 1),
            invalid_argument, where, ": attention over ", c.edge_dim, " edge features (a gat's "
            "option, edge_dim >= 1)");
  check_memory<invalid_argument>(
      where, message("the parameters, gradients and Adam moments of ", c.layers,
                     " layers (hidden ", c.hidden, c.kind == model_kind::gat ? message(
                     ", heads ", c.heads) : std::string(), ") for ", features, " features and ",
                     classes, " classes"),
      estimate_model_memory(c, static_cast<double>(features), static_cast<double>(classes), 0,
                            sizeof(T)).parameters);
  std::vector<any_layer<T, Schedule>> layers;
  if (c.kind == model_kind::mpnn) {
    SAR_CHECK(!c.batch_norm, invalid_argument, where, ": mpnn has no batch norm");
    if (c.first_dropout() > 0) layers.emplace_back(dropout<T>(features, c.first_dropout()));
    layers.emplace_back(linear<T>(features, c.hidden, {.name = "encoder"}));
    layers.emplace_back(relu<T>(c.hidden));
    const auto aggregation = c.mean_messages ? message_aggregation::mean : message_aggregation::sum;
    if (c.edge_state)
      layers.emplace_back(edge_processor<T>(c.hidden, c.edge_dim, c.hidden, c.layers, aggregation));
    else
      for (int k = 0; k < c.layers; ++k)
        layers.emplace_back(edge_conv<T>(c.hidden, c.edge_dim, c.hidden, aggregation));
    layers.emplace_back(linear<T>(c.hidden, classes, {.name = "decoder"}));
    dynamic_sequential<T, Schedule> model(std::move(layers));
    model.initialise(seed);
    return model;
  }
  if (c.kind == model_kind::rgcn) {
    SAR_CHECK(c.schema.heterogeneous() && !c.batch_norm && (c.rgcn_bases == 0 || c.rgcn_blocks == 0),
              invalid_argument, where, ": rgcn needs a heterogeneous graph's schema (",
              c.schema.num_node_types(), " node types), no batch norm, and bases or blocks, not "
              "both (", c.rgcn_bases, ", ", c.rgcn_blocks, ")");
    layers.emplace_back(type_projection<T>(c.schema, features, c.hidden, c.node_embeddings));
    const rgcn_options o{.regulariser = c.rgcn_bases > 0    ? rgcn_regulariser::basis
                                        : c.rgcn_blocks > 0 ? rgcn_regulariser::blocks
                                                            : rgcn_regulariser::none,
                         .count = c.rgcn_bases > 0 ? c.rgcn_bases : c.rgcn_blocks};
    for (int k = 0; k < c.layers; ++k) {
      const bool last = k + 1 == c.layers;
      const double drop = k == 0 ? c.first_dropout() : c.dropout;
      if (drop > 0 && k == 0) layers.emplace_back(dropout<T>(c.hidden, drop));
      layers.emplace_back(
          rgcn_layer<T>(c.hidden, last ? classes : c.hidden, c.schema.num_relations(), o));
      if (last) break;
      layers.emplace_back(relu_dropout<T>(c.hidden, c.dropout));
    }
    dynamic_sequential<T, Schedule> model(std::move(layers));
    model.initialise(seed);
    return model;
  }
  Eigen::Index width = features;
  // Between graph layers relu and dropout are one layer, relu_dropout (also without dropout:
  // it keeps y > 0 as bits, so the next layer's input gradient may overwrite y): one in-place
  // pass each way over one buffer, which the next layer reads (elu, dropout are two).
  const bool relu_model = c.kind != model_kind::gat;
  for (int k = 0; k < c.layers; ++k) {
    const bool last = k + 1 == c.layers;
    const double drop = k == 0 ? c.first_dropout() : c.dropout;
    if (drop > 0 && (k == 0 || !relu_model)) layers.emplace_back(dropout<T>(width, drop));
    Eigen::Index out = last ? classes : c.hidden;
    // Before batch norm a bias is redundant (beta replaces it) and its gradient is exactly
    // zero up to rounding, which Adam would amplify into steps of size lr: leave it out.
    const bool bias = last || !c.batch_norm;
    switch (c.kind) {
      case model_kind::gcn:
        layers.emplace_back(gcn_layer<T>(width, out, bias, k == 0 && c.aggregate_features_first,
                                         c.edge_weight));
        break;
      case model_kind::sage:
        if (c.aggregation == sage_aggregation::mean)
          layers.emplace_back(sage_layer<T, mean_aggregator>(
              width, out, {.bias = bias, .aggregate_first = k == 0 && c.aggregate_features_first}));
        else if (c.aggregation == sage_aggregation::gcn)
          layers.emplace_back(sage_layer<T, gcn_aggregator>(
              width, out, {.bias = bias, .aggregate_first = k == 0 && c.aggregate_features_first}));
        else
          layers.emplace_back(
              sage_layer<T, pool_aggregator>(width, out, {.bias = bias, .pool_dim = c.hidden}));
        break;
      case model_kind::mlp:
      case model_kind::mpnn:  // built above
      case model_kind::rgcn:
        layers.emplace_back(linear<T>(width, out, {.bias = bias}));
        break;
      case model_kind::gat: {
        gat_options o;
        o.heads = last ? c.output_heads : c.heads;
        o.merge = last ? gat_merge::mean : gat_merge::concat;
        o.attention_dropout = c.attention_dropout;
        o.bias = bias;
        o.edge_dim = c.edge_attention ? c.edge_dim : 0;
        layers.emplace_back(gat_layer<T>(width, out, o));
        if (!last) out *= c.heads;
        break;
      }
    }
    width = out;
    if (last) break;
    if (c.batch_norm) layers.emplace_back(batch_norm<T>(width));
    if (relu_model) layers.emplace_back(relu_dropout<T>(width, c.dropout));
    else layers.emplace_back(elu<T>(width));
  }
  dynamic_sequential<T, Schedule> model(std::move(layers));
  model.initialise(seed);
  return model;
}

/// Adam with the config's learning rate and weight decay (L2 added to the gradient, as the
/// papers' TensorFlow/PyTorch code does). With decay_first_layer_only, every parameter after
/// the first graph layer moves to group 1, which gets no decay.
template <class Model>
adam<typename Model::scalar> make_optimiser(const model_config& c, Model& model) {
  adam_options o;
  o.learning_rate = c.learning_rate;
  if (c.decay_first_layer_only) {
    const std::size_t first_graph_layer = c.first_dropout() > 0 ? 1 : 0;
    auto& store = model.parameters();
    for (std::size_t p = 0; p < store.size(); ++p) store.set_group(p, 1);
    const auto [begin, end] = model.layer_parameters(first_graph_layer);
    for (std::size_t p = begin; p < end; ++p)
      if (store.shape(p).name.ends_with("weight")) store.set_group(p, 0);
    o.weight_decay = {c.weight_decay, 0.0};
  } else {
    o.weight_decay = {c.weight_decay, c.weight_decay};
  }
  return adam<typename Model::scalar>(o);
}

}  // namespace sar
