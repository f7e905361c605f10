// The settings of the models sar-train and the benchmarks build at run time (models.hpp
// builds them), with the papers' settings as defaults. Light: no layer headers.
#pragma once

#include <Eigen/Core>

namespace sar {

/// mlp: linear layers only, the graph unused (the baseline a GNN has to beat).
enum class model_kind { gcn, sage, gat, mlp };
enum class sage_aggregation { mean, gcn, pool };

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
  /// Epochs to train.
  int epochs = 200;
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

}  // namespace sar
