// The models sar-train and the benchmarks build at run time, by family (the registry,
// sar/train/families.hpp: GCN, GraphSAGE, GAT, an MLP baseline, an encode-process-decode
// message-passing network over edge features, R-GCN), with their papers' settings as defaults
// (see ../shared/data/README.md for the sources), and their optimiser.
#pragma once

#include <string>
#include <vector>

#include "sar/core/error.hpp"
#include "sar/core/memory.hpp"
#include "sar/nn/any_layer.hpp"
#include "sar/optim/adam.hpp"
#include "sar/train/families.hpp"
#include "sar/train/model_config.hpp"

namespace sar {

/// Builds the model for input width `features` and `classes` outputs (initialised from
/// `seed`). Throws sar::invalid_argument for an unknown family, fewer than one layer,
/// non-positive widths, settings the family cannot build (its check: an edge weight column
/// outside edge_dim or on a model other than gcn, say), or,
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
  std::vector<any_layer<T, Schedule>> layers;
  with_family(c.family, [&]<class F>() {
    F::check(c, where);
    check_memory<invalid_argument>(
        where, message("the parameters, gradients and Adam moments of ", c.layers,
                       " layers (", F::widths(c), ") for ", features, " features and ", classes,
                       " classes"),
        F::memory(c, static_cast<double>(features), static_cast<double>(classes), 0, sizeof(T),
                  false).parameters);
    F::template add_layers<T, Schedule>(c, features, classes, layers);
  }, where);
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

// Linked with the library sar-models: its instances are declared extern here, compiled there.
#include "sar/train/compiled_models.hpp"
/// make_model's instance for (T, Schedule): declared with `extern` as prefix, else defined.
#define SAR_MAKE_MODEL_INSTANCE(prefix, T, Schedule)                                     \
  prefix template dynamic_sequential<T, Schedule> make_model<T, Schedule>(              \
      const model_config&, Eigen::Index, Eigen::Index, std::uint64_t);
namespace sar {
SAR_EXTERN_COMPILED_MODELS(SAR_MAKE_MODEL_INSTANCE)
}  // namespace sar
