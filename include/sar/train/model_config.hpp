// The settings of the models sar-train and the benchmarks build at run time (models.hpp
// builds them; each family's paper settings: paper_defaults in families.hpp). Light: no layer
// headers.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include <Eigen/Core>

#include "sar/graph/schema.hpp"

namespace sar {

/// The settings of a model built at run time (make_model, make_optimiser in models.hpp).
struct model_config {
  /// The model family, by its name in the registry (sar/train/families.hpp: gcn, sage, gat,
  /// mlp, mpnn, rgcn); its paper's settings: paper_defaults(name).
  std::string family = "gcn";
  /// GraphSAGE only: the aggregator, by its name (sar/nn/sage_aggregators.hpp: mean, gcn,
  /// pool).
  std::string aggregation = "mean";
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
  /// mpnn: MeshGraphNets' layer norm and MLPs: the node encoder linear, relu, linear, layer
  /// norm; the edge encoder's output and every step's messages and node update normalised
  /// (edge_processor's layer norm; needs edge_state); the decoder linear, relu, linear.
  bool layer_norm = false;
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

  /// Early-stopping patience in evaluations (0: none; see train_options::patience).
  int patience = 0;
};

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

}  // namespace sar
