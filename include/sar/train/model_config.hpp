// The settings of the models sar-train and the benchmarks build at run time (models.hpp
// builds them), with the papers' settings as defaults. Light: no layer headers.
#pragma once

#include <algorithm>

#include <Eigen/Core>

#include "sar/graph/schema.hpp"

namespace sar {

/// mlp: linear layers only, the graph unused (the baseline a GNN has to beat). mpnn: encode,
/// process, decode (MeshGraphNets): a linear encoder, `layers` edge-conditioned message-passing
/// steps reading the edge features (sar/nn/edge_conv.hpp), a linear decoder. rgcn: for a
/// heterogeneous graph, a per-type input projection (sar/nn/type_projection.hpp) and `layers`
/// relational graph convolutions (sar/nn/rgcn.hpp).
enum class model_kind { gcn, sage, gat, mlp, mpnn, rgcn };
enum class sage_aggregation { mean, gcn, pool };

/// The model's name as sar-train's --model and model files spell it ("gcn", "rgcn", ...).
inline const char* model_name(model_kind k) {
  switch (k) {
    case model_kind::gcn: return "gcn";
    case model_kind::sage: return "sage";
    case model_kind::gat: return "gat";
    case model_kind::mlp: return "mlp";
    case model_kind::mpnn: return "mpnn";
    case model_kind::rgcn: return "rgcn";
  }
  return "?";
}

/// The settings of a model built at run time (make_model, make_optimiser in models.hpp).
struct model_config {
  /// The model family.
  model_kind kind = model_kind::gcn;
  /// GraphSAGE only: the aggregator.
  sage_aggregation aggregation = sage_aggregation::mean;
  /// Number of graph layers (linear layers for mlp); >= 1.
  int layers = 2;
  Eigen::Index hidden = 16;          ///< per head for GAT
  Eigen::Index heads = 8;            ///< GAT hidden layers (concatenated)
  Eigen::Index output_heads = 1;     ///< GAT last layer (averaged)
  double dropout = 0.5;              ///< on the input of every layer
  /// On the features (the first layer's input) instead of `dropout`, if >= 0. 0 keeps the
  /// first graph layer's input unchanged across epochs, so a low-bit exchange sends its halo
  /// once (exact_first_layer).
  double input_dropout = -1;
  /// The dropout on the first layer's input: input_dropout if >= 0, else dropout.
  double first_dropout() const { return input_dropout >= 0 ? input_dropout : dropout; }
  /// The first GCN / GraphSAGE (mean, gcn) layer aggregates the features before its weight
  /// (same model, other order of products): with input_dropout 0 its halo is the raw
  /// features, which an exact_first_layer exchange sends once (Sylvie's pre-propagation).
  bool aggregate_features_first = false;
  double attention_dropout = 0.0;    ///< GAT
  bool batch_norm = false;           ///< after every hidden layer, before the activation
                                     ///< (hidden graph layers then have no bias)
  /// Adam's learning rate.
  double learning_rate = 0.01;
  /// Weight decay (L2 in the gradient); on the first graph layer's weights only with
  /// decay_first_layer_only.
  double weight_decay = 5e-4;
  bool decay_first_layer_only = true;  ///< the GCN paper's choice
  /// mpnn, gcn with edge_weight, gat with edge_attention: the width of the edge features it
  /// reads (the data's; set by whoever builds it).
  Eigen::Index edge_dim = 0;
  /// gcn: the edge-feature column that weighs each edge (-1: unweighted; sar/nn/gcn.hpp).
  Eigen::Index edge_weight = -1;
  /// gat: the attention logits read the edge features (gat_options::edge_dim = edge_dim).
  bool edge_attention = false;
  /// mpnn: the steps carry an edge state (one edge_processor; full-graph training only), or
  /// each step reads the edge features again (edge_conv layers; also on sampled blocks).
  bool edge_state = true;
  /// mpnn: a node averages its messages (false: sums them, as MeshGraphNets does; the sum's
  /// scale grows with the degree, step after step).
  bool mean_messages = true;
  /// rgcn: the node types and relations of the graph (sar/graph/schema.hpp; set by whoever
  /// builds it from the data).
  graph_schema schema{};
  /// rgcn: the number of bases of each layer's relation weights (0: none; exclusive with
  /// rgcn_blocks).
  Eigen::Index rgcn_bases = 0;
  /// rgcn: the number of diagonal blocks of each layer's relation weights (0: none; must
  /// divide the layers' widths).
  Eigen::Index rgcn_blocks = 0;
  /// rgcn: each node of a featureless type learns its own input row (type_projection's
  /// embeddings: a row table each rank holds for its own nodes), not one vector per type.
  bool node_embeddings = false;
  /// Epochs to train.
  int epochs = 200;

  /// Whether the model reads the graph's edge features (mpnn; gcn with edge_weight; gat with
  /// edge_attention).
  bool reads_edge_features() const {
    return kind == model_kind::mpnn || (kind == model_kind::gcn && edge_weight >= 0) ||
           (kind == model_kind::gat && edge_attention);
  }
  /// Early-stopping patience in evaluations (0: none; see train_options::patience).
  int patience = 0;
};

/// The published settings: GCN (Kipf & Welling 2017), GAT (Velickovic et al. 2018), and for
/// GraphSAGE the GCN recipe with a wider hidden layer (Hamilton et al. use 256 on Reddit).
inline model_config paper_defaults(model_kind kind) {
  model_config c;
  c.kind = kind;
  switch (kind) {
    case model_kind::gcn:
    case model_kind::mlp:
      break;
    case model_kind::sage:
      c.hidden = 64;
      c.decay_first_layer_only = false;
      break;
    case model_kind::rgcn:  // DGL's R-GCN example on ogbn-mag: 2 layers, hidden 64
      c.hidden = 64;
      c.learning_rate = 0.01;
      c.weight_decay = 0;
      c.decay_first_layer_only = false;
      c.epochs = 50;
      break;
    case model_kind::mpnn:  // MeshGraphNets' recipe, narrower and with fewer steps
      c.hidden = 64;
      c.layers = 4;
      c.dropout = 0;
      c.learning_rate = 1e-3;
      c.weight_decay = 0;
      c.decay_first_layer_only = false;
      break;
    case model_kind::gat:
      c.hidden = 8;
      c.heads = 8;
      c.dropout = 0.6;
      c.attention_dropout = 0.6;
      c.learning_rate = 0.005;
      c.decay_first_layer_only = false;
      c.epochs = 1000;
      c.patience = 100;
      break;
  }
  return c;
}

/// What training a model needs in memory at least, in bytes, estimated from its shapes
/// before anything is allocated (estimate_model_memory): settings or data that need more than
/// the machine has are refused at once, naming the settings, instead of failing much later.
struct model_memory {
  /// Parameter values, gradients and Adam's two moments: 4 values per parameter (and per
  /// value of the embedding rows of the nodes, rgcn with node_embeddings).
  double parameters = 0;
  /// Each graph layer's output and its gradient for every node; for GAT also its projected
  /// features, the fused kernel's two accumulators and their gradient (layer_by_layer: only
  /// the largest layer's, as minibatch training evaluates one layer at a time).
  double activations = 0;
  /// parameters + activations.
  double total() const { return parameters + activations; }
};

/// The memory a model of config `c` for `features` inputs and `classes` outputs needs to train
/// on `nodes` nodes, in values of `value_bytes` bytes (4 for float). Exact
/// for the parameters of the layers make_model builds, a lower bound for the activations.
/// Computed in double and in closed form (the hidden layers between the first and the last
/// are alike): no overflow and no delay for any setting (1e12 hidden units or 1e9 layers give
/// a large number at once). Requires nothing; never throws.
inline model_memory estimate_model_memory(const model_config& c, double features, double classes,
                                          double nodes, double value_bytes,
                                          bool layer_by_layer = false) {
  const double hidden = static_cast<double>(c.hidden), heads = static_cast<double>(c.heads);
  const bool gat = c.kind == model_kind::gat;
  // Layer k's parameters and activations, given its input width; `out` is its output width.
  const auto layer = [&](int k, double width, double& out) {
    const bool last = k + 1 == c.layers;
    const double per_head = last ? classes : hidden;
    const double layer_heads = gat ? (last ? static_cast<double>(c.output_heads) : heads) : 1;
    const double out_width = layer_heads * per_head;  // GAT: the heads' outputs before the mean
    double weights = width * per_head;
    if (c.kind == model_kind::sage && c.aggregation == sage_aggregation::mean)
      weights = 2 * width * per_head;
    if (c.kind == model_kind::sage && c.aggregation == sage_aggregation::pool)
      weights = width * hidden + hidden + width * per_head + hidden * per_head;
    if (gat) weights = width * out_width + 2 * out_width;
    if (gat && c.edge_attention) weights += static_cast<double>(c.edge_dim) * layer_heads;
    out = gat && !last ? out_width : per_head;
    // The bias is as wide as the output (after the last GAT layer's mean); a hidden layer
    // followed by batch norm has none, and batch norm two of that width.
    const double parameters = weights + (c.batch_norm && !last ? 2 * out : out);
    // Output and its gradient; GAT (fused: nothing per edge) also keeps its projected
    // features and two accumulators, and its backward a gradient of each and a merge buffer
    // (measured: 7 to 9 times its output at the peak).
    const double activations = (gat ? 8 : 2) * nodes * out_width;
    return model_memory{parameters, activations};
  };
  if (c.kind == model_kind::mpnn) {  // F -> H, `layers` steps (edge_step), H -> classes
    const double edge = static_cast<double>(c.edge_dim), steps = c.layers;
    const double step_in = c.edge_state ? hidden : edge;  // the width a step's edges read
    const double parameters = features * hidden + hidden + (c.edge_state ? edge * hidden + hidden : 0) +
                              steps * (6 * hidden * hidden + step_in * hidden + 4 * hidden) +
                              hidden * classes + classes;
    // Per step: its output and gradient, and the 5 rows of H it keeps (edge_conv.hpp).
    const double activations = nodes * (2 * features + 2 * classes + steps * 7 * hidden);
    return {4 * parameters * value_bytes, activations * value_bytes};
  }
  if (c.kind == model_kind::rgcn) {  // per-type projection F_t -> H, then `layers` R-GCNs
    const double relations = static_cast<double>(c.schema.relations.size());
    double parameters = 0;
    double featureless = 0, all = 0;  // nodes
    for (const node_type& t : c.schema.node_types) {
      parameters += static_cast<double>(t.feature_dim) * hidden + hidden;
      all += static_cast<double>(t.count);
      if (t.feature_dim == 0) featureless += static_cast<double>(t.count);
    }
    // Embeddings: a row of H per featureless node among `nodes` (in the schema's proportion).
    if (c.node_embeddings && all > 0) parameters += nodes * featureless / all * hidden;
    double activations = 2 * nodes * (features + hidden);  // the projection's input and output
    for (int k = 0; k < c.layers; ++k) {
      const double out = k + 1 == c.layers ? classes : hidden;
      const double relation_weights =
          c.rgcn_bases > 0 ? static_cast<double>(c.rgcn_bases) * (hidden * out + relations)
          : c.rgcn_blocks > 0 ? relations * hidden * out / static_cast<double>(c.rgcn_blocks)
                              : relations * hidden * out;
      parameters += relation_weights + hidden * out + out;
      // Output and its gradient, and the inverse relation counts (R per node, rgcn.hpp).
      const double layer = nodes * (2 * out + relations);
      activations = layer_by_layer ? std::max(activations, layer) : activations + layer;
    }
    return {4 * parameters * value_bytes, activations * value_bytes};
  }
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

}  // namespace sar
