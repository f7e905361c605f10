// Learnt simulators on meshes: MeshGraphNets (Pfaff et al., ICLR 2021) trained on trajectory
// datasets (sar/graph/trajectories.hpp), each trajectory on its own mesh.
//
// The recipe. A node's input is its current state (every dynamic field), its static inputs and
// its type one-hot (9 columns); an edge's input is the relative position of its source and the
// distance (mesh_edge_features). Inputs, edge inputs and the targets are normalised by running
// statistics (online_normaliser) taken over the first `normaliser_steps` steps, which only
// observe (MeshGraphNets' warm-up), and then frozen. The model is the mpnn family with layer
// norm (sar/train/families/mpnn.hpp: encode, `layers` message-passing steps with residual edge
// and node updates, decode; latent 128 and 15 steps by default) and predicts each node's
// normalised increment of the state. Training adds Gaussian noise of deviation `noise` to the
// inputs' state at normal nodes and asks for the increment from the noisy state to the next
// one, so the model learns to undo its own errors in a rollout (the paper's noise with the
// target corrected). The loss is MeshGraphNets': per predicted node (normal and outflow) the sum
// of squared errors over the columns, averaged over the predicted nodes of the step.
//
// Several meshes per step: a step draws `batch_meshes` (trajectory, time) samples, the same on
// every rank, and runs them as one block-diagonal graph. Data parallel on P ranks: each rank
// takes a contiguous share of the samples, the loss and the gradients are sums over all of
// them all-reduced, and so are the normalisers' sums; the noise is keyed by the step, the
// sample and the node. The same steps and losses on any rank count.
//
// Evaluation: the one-step RMSE (true state in, next state out) and full rollouts (the
// model's own outputs fed back; nodes that are not predicted held to the trajectory's values)
// with the RMSE over the first 1, 10, 50 and all steps (MeshGraphNets' horizons), each next to
// persistence (the state left as it was). RMSEs are over predicted nodes and every state
// column, in the fields' units.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "sar/comm/communicator.hpp"
#include "sar/core/error.hpp"
#include "sar/core/log.hpp"
#include "sar/core/rng.hpp"
#include "sar/core/types.hpp"
#include "sar/graph/trajectories.hpp"
#include "sar/nn/metrics.hpp"
#include "sar/schedule/local_schedule.hpp"
#include "sar/train/model_file.hpp"
#include "sar/train/models.hpp"

namespace sar {

/// Running mean and deviation of columns (MeshGraphNets' Normalizer): sums of what it is shown,
/// totalled over the ranks by whoever shows it. A column seen constant (or never) has the
/// deviation 1, so an unseen value is not blown up.
class online_normaliser {
 public:
  /// None: width 0.
  online_normaliser() = default;
  /// Of `width` columns, nothing seen: mean 0, deviation 1.
  explicit online_normaliser(Eigen::Index width)
      : sums_(static_cast<std::size_t>(2 * width + 1), 0.0),
        mean_(static_cast<std::size_t>(width), 0.0),
        deviation_(static_cast<std::size_t>(width), 1.0) {}

  /// Columns.
  Eigen::Index width() const { return static_cast<Eigen::Index>(mean_.size()); }
  /// Rows seen.
  double count() const { return sums_.empty() ? 0 : sums_.back(); }
  /// Per column.
  const std::vector<double>& mean() const { return mean_; }
  /// Per column (1 for a column seen constant).
  const std::vector<double>& deviation() const { return deviation_; }

  /// The sums add() takes for the rows of `rows` whose `mask` entry is non-zero (every row
  /// without a mask): column sums, then sums of squares, then the row count (2 width + 1).
  std::vector<double> sums_of(const matrixf& rows, std::span<const char> mask = {}) const {
    const Eigen::Index w = width();
    std::vector<double> s(static_cast<std::size_t>(2 * w + 1), 0.0);
    for (Eigen::Index i = 0; i < rows.rows(); ++i) {
      if (!mask.empty() && !mask[static_cast<std::size_t>(i)]) continue;
      for (Eigen::Index c = 0; c < w; ++c) {
        const double v = rows(i, c);
        s[static_cast<std::size_t>(c)] += v;
        s[static_cast<std::size_t>(w + c)] += v * v;
      }
      s.back() += 1;
    }
    return s;
  }

  /// Adds sums (sums_of's, perhaps totalled over ranks) and updates the mean and deviation.
  /// Throws sar::invalid_argument for another length.
  void add(std::span<const double> sums) {
    SAR_CHECK(sums.size() == sums_.size(), invalid_argument, "sar::online_normaliser::add: ",
              sums.size(), " sums for ", width(), " columns");
    for (std::size_t k = 0; k < sums.size(); ++k) sums_[k] += sums[k];
    const double n = count();
    if (n <= 0) return;
    const auto w = static_cast<std::size_t>(width());
    for (std::size_t c = 0; c < w; ++c) {
      mean_[c] = sums_[c] / n;
      const double var = sums_[w + c] / n - mean_[c] * mean_[c];
      const bool constant = var <= 1e-12 * std::max(1.0, mean_[c] * mean_[c]);
      deviation_[c] = constant ? 1.0 : std::sqrt(var);
    }
  }

  /// rows := (rows - mean) / deviation, column by column. Requires width() columns.
  template <class T>
  void normalise(matrix<T>& rows) const {
    for (Eigen::Index c = 0; c < width(); ++c)
      rows.col(c) = ((rows.col(c).array() - static_cast<T>(mean_[c])) /
                     static_cast<T>(deviation_[c])).matrix();
  }

  /// {"mean": [...], "deviation": [...], "count": n}: what a model file keeps.
  nlohmann::json to_json() const {
    return {{"mean", mean_}, {"deviation", deviation_}, {"count", count()}};
  }
  /// The normaliser `j` (to_json's) describes, `width` wide. Throws sar::io_error naming
  /// `where` for another width, a non-finite mean or a deviation that is not positive.
  static online_normaliser from_json(const nlohmann::json& j, Eigen::Index width,
                                     const std::string& where) {
    online_normaliser n(width);
    try {
      n.mean_ = j.at("mean").get<std::vector<double>>();
      n.deviation_ = j.at("deviation").get<std::vector<double>>();
      n.sums_.back() = j.at("count").get<double>();
    } catch (const nlohmann::json::exception& e) {
      throw io_error(message(where, ": a normaliser: ", e.what()));
    }
    bool ok = n.mean_.size() == static_cast<std::size_t>(width) &&
              n.deviation_.size() == n.mean_.size();
    for (std::size_t c = 0; ok && c < n.mean_.size(); ++c)
      ok = std::isfinite(n.mean_[c]) && std::isfinite(n.deviation_[c]) && n.deviation_[c] > 0;
    SAR_CHECK(ok, io_error, where, ": a normaliser of ", n.mean_.size(), " means and ",
              n.deviation_.size(), " deviations for ", width,
              " columns (finite, deviations positive)");
    return n;
  }

 private:
  std::vector<double> sums_;  // column sums, sums of squares, count
  std::vector<double> mean_, deviation_;
};

/// MeshGraphNets' model settings: the mpnn family with layer norm, latent 128, 15 steps,
/// summed messages, Adam at 1e-4, no dropout or weight decay.
inline model_config surrogate_model_config() {
  model_config c;
  c.family = "mpnn";
  c.layer_norm = true;
  c.hidden = 128;
  c.layers = 15;
  c.mean_messages = false;
  c.edge_state = true;
  c.dropout = 0;
  c.input_dropout = 0;
  c.learning_rate = 1e-4;
  c.weight_decay = 0;
  c.decay_first_layer_only = false;
  return c;
}

/// A node's input columns for fields f: the state, the static inputs, the type one-hot.
inline Eigen::Index surrogate_input_width(const trajectory_fields& f) {
  return f.state_width() + f.static_width() + mesh_node_types;
}

/// A learnt simulator: the model and what its inputs and outputs mean.
template <class T>
struct mesh_surrogate {
  trajectory_fields fields;  ///< the fields it reads and predicts
  model_config config;       ///< the model's settings (edge_dim: fields.dimensions + 1)
  dynamic_sequential<T, local_schedule> model;  ///< normalised inputs -> normalised increments
  online_normaliser inputs;      ///< of the node inputs
  online_normaliser edges;       ///< of the edge inputs
  online_normaliser increments;  ///< of the targets: the state's increments
};

/// A new surrogate for fields f with the model settings c (surrogate_model_config's, say;
/// edge_dim is set), parameters from `seed`. Throws sar::invalid_argument for settings
/// make_model refuses.
template <class T>
mesh_surrogate<T> make_surrogate(const trajectory_fields& f, model_config c, std::uint64_t seed) {
  c.edge_dim = f.dimensions + 1;
  const Eigen::Index in = surrogate_input_width(f), out = f.state_width();
  return {f, c, make_model<T, local_schedule>(c, in, out, seed), online_normaliser(in),
          online_normaliser(c.edge_dim), online_normaliser(out)};
}

/// One mesh of a step or a rollout: a trajectory's mesh with a state.
struct mesh_sample {
  const trajectory* mesh = nullptr;  ///< its mesh, node types and static inputs
  const matrixf* state = nullptr;    ///< the current state (N x state width)
  const matrixf* next = nullptr;     ///< the next state (training, evaluation), or none
  std::uint64_t noise_key = 0;       ///< keys the noise on its state (training)
};

/// Samples as one block-diagonal graph with their raw (not normalised) inputs.
struct mesh_batch {
  csr graph;                      ///< in-edges, block diagonal
  matrixf edge_features;          ///< one row per entry of graph
  matrixf inputs;                 ///< node inputs: state (+ noise), static inputs, type one-hot
  matrixf increments;             ///< with next states: next - (noisy) state
  std::vector<char> predicted;    ///< per node row: whether the model predicts it
  std::vector<node_t> offsets{0};  ///< sample k's rows are [offsets[k], offsets[k + 1])
};

/// The batch of `samples` (see mesh_batch). With noise > 0, N(0, noise^2) is added to every
/// state column of each normal node, drawn from (seed, sample.noise_key, node, column).
inline mesh_batch make_mesh_batch(std::span<const mesh_sample> samples,
                                  const trajectory_fields& f, double noise = 0,
                                  std::uint64_t seed = 0) {
  mesh_batch b;
  node_t nodes = 0;
  edge_t edges = 0;
  for (const mesh_sample& s : samples) {
    nodes += s.mesh->num_nodes();
    edges += s.mesh->graph.num_edges();
  }
  const Eigen::Index sw = f.state_width(), iw = f.static_width();
  const bool with_next = !samples.empty() && samples.front().next != nullptr;
  b.graph.num_rows = b.graph.num_cols = nodes;
  b.graph.offsets.reserve(static_cast<std::size_t>(nodes) + 1);
  b.graph.offsets.assign(1, 0);
  b.graph.columns.reserve(static_cast<std::size_t>(edges));
  b.edge_features.resize(edges, f.dimensions + 1);
  b.inputs = matrixf::Zero(nodes, surrogate_input_width(f));
  if (with_next) b.increments.resize(nodes, sw);
  b.predicted.reserve(static_cast<std::size_t>(nodes));
  const counter_rng rng(seed, rng_stream::mesh_noise);
  for (const mesh_sample& s : samples) {
    const trajectory& t = *s.mesh;
    const node_t first = b.offsets.back(), n = t.num_nodes();
    const auto e0 = static_cast<Eigen::Index>(b.graph.columns.size());
    for (node_t v = 0; v < n; ++v) {
      for (edge_t e = t.graph.offsets[v]; e < t.graph.offsets[v + 1]; ++e)
        b.graph.columns.push_back(first + t.graph.columns[e]);
      b.graph.offsets.push_back(static_cast<edge_t>(b.graph.columns.size()));
    }
    b.edge_features.middleRows(e0, t.graph.num_edges()) = t.edge_features;
    auto rows = b.inputs.middleRows(first, n);
    rows.leftCols(sw) = *s.state;
    if (iw > 0) rows.middleCols(sw, iw) = t.static_inputs;
    for (node_t v = 0; v < n; ++v) {
      const std::int32_t type = t.node_type[static_cast<std::size_t>(v)];
      rows(v, sw + iw + type) = 1;
      b.predicted.push_back(is_predicted_node(type));
      if (noise > 0 && type == static_cast<std::int32_t>(mesh_node::normal))
        for (Eigen::Index c = 0; c < sw; ++c)
          rows(v, c) += static_cast<float>(
              noise * rng.normal(s.noise_key, static_cast<std::uint64_t>(v),
                                 static_cast<std::uint64_t>(c)));
    }
    if (with_next) b.increments.middleRows(first, n) = *s.next - rows.leftCols(sw);
    b.offsets.push_back(first + n);
  }
  return b;
}

namespace detail::surrogates {

/// The model's normalised outputs for batch b on `graph` (schedule_of's) under ctx; the
/// model keeps its normalised input for a backward.
template <class T>
const matrix<T>& run(mesh_surrogate<T>& s, const mesh_batch& b, local_schedule& graph,
                     const layer_context& ctx) {
  matrix<T> x = b.inputs.template cast<T>();
  s.inputs.normalise(x);
  return s.model.forward(graph, ctx, std::move(x));
}

/// The schedule of batch b with normalised edge features.
template <class T>
local_schedule schedule_of(const mesh_surrogate<T>& s, const mesh_batch& b) {
  matrix<float> e = b.edge_features;
  s.edges.normalise(e);
  return local_schedule(b.graph, std::move(e));
}

/// Over t's predicted nodes: the sum of the squared differences of states a and b, and the
/// number of values summed.
inline std::pair<double, double> predicted_squares(const trajectory& t, const matrixf& a,
                                                   const matrixf& b) {
  double sum = 0, count = 0;
  for (node_t v = 0; v < t.num_nodes(); ++v) {
    if (!is_predicted_node(t.node_type[static_cast<std::size_t>(v)])) continue;
    sum += static_cast<double>((a.row(v) - b.row(v)).squaredNorm());
    count += static_cast<double>(a.cols());
  }
  return {sum, count};
}

/// The increments in the fields' units of normalised outputs y.
template <class T>
matrixf increments_of(const mesh_surrogate<T>& s, const matrix<T>& y) {
  matrixf d = y.template cast<float>();
  for (Eigen::Index c = 0; c < d.cols(); ++c)
    d.col(c) = (d.col(c).array() * static_cast<float>(s.increments.deviation()[c]) +
                static_cast<float>(s.increments.mean()[c])).matrix();
  return d;
}

}  // namespace detail::surrogates

/// Settings of train_surrogate.
struct surrogate_options {
  int steps = 1000;               ///< optimiser steps
  int normaliser_steps = 100;     ///< steps before them that only fill the normalisers
  std::int64_t batch_meshes = 2;  ///< samples (trajectory, time) per step over all ranks
  double noise = 0.02;            ///< deviation of the noise on normal nodes' input state
  /// The learning rate decays exponentially from the optimiser's to this fraction of it at
  /// the last step (MeshGraphNets decays it too); 1: constant.
  double final_learning_rate = 0.1;
  std::uint64_t seed = 0;         ///< keys the samples and the noise
  int log_every = 100;            ///< a progress line every this many steps (rank 0; 0: none)
  double max_loss = 1e6;          ///< a larger (or non-finite) loss stops: diverged
};

/// What train_surrogate returns.
struct surrogate_train_result {
  std::vector<double> losses;  ///< per optimiser step: the loss over all ranks' samples
  std::vector<double> step_seconds;  ///< per optimiser step: forward, backward, all-reduce, step
  /// The median of step_seconds.
  double median_step_seconds() const { return median(step_seconds); }
};

/// Trains s on `train` (see the top of this file) with `optimiser` (its learning rate decayed
/// to final_learning_rate of it; it is left at that): normaliser_steps steps that fill the
/// normalisers, then `steps` optimiser steps. Collective over comm (data parallel): every rank
/// passes the same trajectories and options. Throws sar::invalid_argument for no trajectory,
/// batch_meshes < 1, negative steps or noise, a final learning rate outside (0, 1], or a
/// trajectory of fewer than 2 steps; sar::numeric_error when the loss exceeds max_loss.
template <class T, communicator Comm, class Optimiser>
surrogate_train_result train_surrogate(mesh_surrogate<T>& s, const std::vector<trajectory>& train,
                                       Optimiser& optimiser, const surrogate_options& o,
                                       Comm& comm) {
  constexpr const char* where = "sar::train_surrogate";
  SAR_CHECK(!train.empty() && o.batch_meshes >= 1 && o.steps >= 0 && o.normaliser_steps >= 0 &&
                o.noise >= 0 && o.final_learning_rate > 0 && o.final_learning_rate <= 1,
            invalid_argument, where, ": ", train.size(), " trajectories, batches of ",
            o.batch_meshes, ", ", o.steps, " steps, ", o.normaliser_steps,
            " normaliser steps, noise ", o.noise, ", final learning rate ",
            o.final_learning_rate);
  for (const trajectory& t : train)
    SAR_CHECK(t.num_steps() >= 2, invalid_argument, where, ": trajectory ", t.name, " has ",
              t.num_steps(), " steps (a sample needs a state and the next)");
  const counter_rng rng(o.seed, rng_stream::mesh_samples);
  const auto batch = static_cast<std::size_t>(o.batch_meshes);
  const double learning_rate = optimiser.options().learning_rate;
  surrogate_train_result result;
  const int total = o.normaliser_steps + o.steps;
  for (int step = 0; step < total; ++step) {
    const auto started = std::chrono::steady_clock::now();
    // Every rank draws every sample of the step; it runs its share.
    std::vector<mesh_sample> samples(batch);
    double predicted = 0;  // over all samples: the loss's denominator
    for (std::size_t k = 0; k < batch; ++k) {
      const auto key = static_cast<std::uint64_t>(step) * batch + k;
      const trajectory& t = train[rng.below(train.size(), key, 0)];
      const auto time = rng.below(static_cast<std::uint64_t>(t.num_steps() - 1), key, 1);
      samples[k] = {&t, &t.states[time], &t.states[time + 1], key};
      for (const std::int32_t type : t.node_type) predicted += is_predicted_node(type);
    }
    const auto [first, last] = contiguous_share(batch, comm.rank(), comm.size());
    const mesh_batch b = make_mesh_batch(
        std::span<const mesh_sample>(samples).subspan(first, last - first), s.fields, o.noise,
        o.seed);
    if (step < o.normaliser_steps) {  // observe only: the normalisers' sums over all ranks
      std::vector<double> sums = s.inputs.sums_of(b.inputs);
      const std::vector<double> e = s.edges.sums_of(b.edge_features);
      const std::vector<double> d = s.increments.sums_of(b.increments, b.predicted);
      sums.insert(sums.end(), e.begin(), e.end());
      sums.insert(sums.end(), d.begin(), d.end());
      comm.all_reduce(std::span<double>(sums), reduce_op::sum);
      const std::span<const double> all(sums);
      const std::size_t a = 2 * s.inputs.width() + 1, c = 2 * s.edges.width() + 1;
      s.inputs.add(all.subspan(0, a));
      s.edges.add(all.subspan(a, c));
      s.increments.add(all.subspan(a + c));
      continue;
    }
    const double progress = static_cast<double>(step - o.normaliser_steps) /
                            static_cast<double>(std::max(1, o.steps - 1));
    optimiser.set_learning_rate(learning_rate * std::pow(o.final_learning_rate, progress));
    local_schedule graph = detail::surrogates::schedule_of(s, b);
    const layer_context ctx{.training = true, .seed = o.seed,
                            .epoch = static_cast<std::uint64_t>(step)};
    const matrix<T>& y = detail::surrogates::run(s, b, graph, ctx);
    matrix<T> target = b.increments.template cast<T>();
    s.increments.normalise(target);
    matrix<T> dy = matrix<T>::Zero(y.rows(), y.cols());
    double loss = 0;
    for (Eigen::Index i = 0; i < y.rows(); ++i) {
      if (!b.predicted[static_cast<std::size_t>(i)]) continue;
      for (Eigen::Index c = 0; c < y.cols(); ++c) {
        const double d = static_cast<double>(y(i, c)) - static_cast<double>(target(i, c));
        loss += d * d;
        dy(i, c) = static_cast<T>(2 * d / predicted);
      }
    }
    loss /= predicted;
    s.model.backward(graph, ctx, dy);
    if (comm.size() > 1) comm.all_reduce(s.model.parameters().grads(), reduce_op::sum);
    optimiser.step(s.model.parameters());
    comm.all_reduce(std::span<double>(&loss, 1), reduce_op::sum);
    SAR_CHECK(std::isfinite(loss) && loss <= o.max_loss, numeric_error, where, ": the loss ", loss,
              " at step ", step - o.normaliser_steps, " exceeds ", o.max_loss,
              ": training diverged (lower the learning rate)");
    result.losses.push_back(loss);
    result.step_seconds.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
    const int done = step - o.normaliser_steps + 1;
    if (o.log_every > 0 && comm.rank() == 0 && (done % o.log_every == 0 || done == o.steps))
      log_info(message("step ", done, " of ", o.steps, ": loss ", loss, " (",
                       result.step_seconds.back(), " s)"));
  }
  return result;
}

/// The rollouts of `trajectories` by s, one per trajectory: from each one's first state, the
/// model's state at every step (nodes it does not predict held to the trajectory's values),
/// the first state included. on_step(t, k, state), if given, sees trajectory k's predicted
/// state at step t >= 1. Not collective; all trajectories step together as one batch.
template <class T, class OnStep>
std::vector<std::vector<matrixf>> rollout_surrogate(mesh_surrogate<T>& s,
                                                    std::span<const trajectory* const> trajectories,
                                                    OnStep&& on_step, bool keep = true) {
  std::vector<matrixf> state;
  std::vector<std::vector<matrixf>> out(keep ? trajectories.size() : 0);
  int steps = std::numeric_limits<int>::max();
  for (std::size_t k = 0; k < trajectories.size(); ++k) {
    state.push_back(trajectories[k]->states.front());
    steps = std::min(steps, trajectories[k]->num_steps());
    if (keep) out[k].push_back(state.back());
  }
  if (trajectories.empty()) return out;
  // One batch and schedule for every step: only the state columns of the inputs change.
  std::vector<mesh_sample> samples;
  for (std::size_t k = 0; k < trajectories.size(); ++k)
    samples.push_back({trajectories[k], &state[k], nullptr, 0});
  mesh_batch b = make_mesh_batch(samples, s.fields);
  local_schedule graph = detail::surrogates::schedule_of(s, b);
  for (int t = 1; t < steps; ++t) {
    for (std::size_t k = 0; k < trajectories.size(); ++k)
      b.inputs.middleRows(b.offsets[k], state[k].rows()).leftCols(state[k].cols()) = state[k];
    const matrixf d =
        detail::surrogates::increments_of(s, detail::surrogates::run(s, b, graph, {}));
    for (std::size_t k = 0; k < trajectories.size(); ++k) {
      const trajectory& traj = *trajectories[k];
      const matrixf& truth = traj.states[static_cast<std::size_t>(t)];
      for (node_t v = 0; v < traj.num_nodes(); ++v) {
        if (is_predicted_node(traj.node_type[static_cast<std::size_t>(v)]))
          state[k].row(v) += d.row(b.offsets[k] + v);
        else
          state[k].row(v) = truth.row(v);
      }
      on_step(t, k, state[k]);
      if (keep) out[k].push_back(state[k]);
    }
  }
  return out;
}

/// What evaluate_surrogate measures (RMSEs in the fields' units over predicted nodes and
/// every state column).
struct surrogate_evaluation {
  double one_step_rmse = 0;              ///< true state in, next state out, every step
  double persistence_one_step_rmse = 0;  ///< the same for next = this state
  std::vector<int> horizons;             ///< 1, 10, 50 and the last step (those that exist)
  std::vector<double> rollout_rmse;      ///< per horizon: over the rollouts' first h steps
  std::vector<double> persistence_rollout_rmse;  ///< per horizon: the first state kept

  /// {"one_step_rmse": ..., "persistence_one_step_rmse": ..., "rollout_rmse_H": ...,
  /// "persistence_rollout_rmse_H": ...} for each horizon H, prefixed by `prefix`.
  nlohmann::json to_json(const std::string& prefix = "") const {
    nlohmann::json j = {{prefix + "one_step_rmse", one_step_rmse},
                        {prefix + "persistence_one_step_rmse", persistence_one_step_rmse}};
    for (std::size_t k = 0; k < horizons.size(); ++k) {
      const std::string h = std::to_string(horizons[k]);
      j[prefix + "rollout_rmse_" + h] = rollout_rmse[k];
      j[prefix + "persistence_rollout_rmse_" + h] = persistence_rollout_rmse[k];
    }
    return j;
  }
};

/// The one-step and rollout RMSEs of s on `trajectories` next to persistence's (see the top of
/// this file); one-step samples run in batches of batch_meshes. Collective over comm: each
/// rank evaluates a contiguous share of the trajectories, the sums are all-reduced. Throws
/// sar::invalid_argument for batch_meshes < 1 or trajectories of different lengths.
template <class T, communicator Comm>
surrogate_evaluation evaluate_surrogate(mesh_surrogate<T>& s,
                                        const std::vector<trajectory>& trajectories,
                                        std::int64_t batch_meshes, Comm& comm) {
  constexpr const char* where = "sar::evaluate_surrogate";
  SAR_CHECK(batch_meshes >= 1, invalid_argument, where, ": batches of ", batch_meshes);
  const int steps = trajectories.empty() ? 0 : trajectories.front().num_steps();
  for (const trajectory& t : trajectories)
    SAR_CHECK(t.num_steps() == steps, invalid_argument, where, ": trajectory ", t.name, " has ",
              t.num_steps(), " steps, ", trajectories.front().name, " ", steps);
  const auto [first, last] = contiguous_share(trajectories.size(), comm.rank(), comm.size());
  // Sums: one-step model, persistence, count; then per rollout step model, persistence, count.
  const std::size_t rollout_steps = steps > 1 ? static_cast<std::size_t>(steps - 1) : 0;
  std::vector<double> sums(3 + 3 * rollout_steps, 0.0);
  // at[0] += the model's squares (a against the truth), at[1] += persistence's, at[2] += count.
  const auto squares = [](const trajectory& t, const matrixf& a, const matrixf& kept,
                          const matrixf& truth, double* at) {
    const auto [model, count] = detail::surrogates::predicted_squares(t, a, truth);
    at[0] += model;
    at[1] += detail::surrogates::predicted_squares(t, kept, truth).first;
    at[2] += count;
  };
  // One step: every (trajectory, time) of this rank's share, in batches.
  std::vector<mesh_sample> pending;
  const auto flush = [&] {
    if (pending.empty()) return;
    const mesh_batch b = make_mesh_batch(pending, s.fields);
    local_schedule graph = detail::surrogates::schedule_of(s, b);
    const matrixf d =
        detail::surrogates::increments_of(s, detail::surrogates::run(s, b, graph, {}));
    for (std::size_t k = 0; k < pending.size(); ++k) {
      const mesh_sample& m = pending[k];
      const matrixf predicted = *m.state + d.middleRows(b.offsets[k], m.mesh->num_nodes());
      squares(*m.mesh, predicted, *m.state, *m.next, sums.data());
    }
    pending.clear();
  };
  for (std::size_t k = first; k < last; ++k)
    for (int t = 0; t + 1 < steps; ++t) {
      const trajectory& traj = trajectories[k];
      pending.push_back({&traj, &traj.states[static_cast<std::size_t>(t)],
                         &traj.states[static_cast<std::size_t>(t) + 1], 0});
      if (static_cast<std::int64_t>(pending.size()) == batch_meshes) flush();
    }
  flush();
  // Rollouts of the share, together.
  std::vector<const trajectory*> share;
  for (std::size_t k = first; k < last; ++k) share.push_back(&trajectories[k]);
  rollout_surrogate(s, share, [&](int t, std::size_t k, const matrixf& state) {
    const trajectory& traj = *share[k];
    squares(traj, state, traj.states.front(), traj.states[static_cast<std::size_t>(t)],
            sums.data() + 3 + 3 * static_cast<std::size_t>(t - 1));
  }, false);
  comm.all_reduce(std::span<double>(sums), reduce_op::sum);

  surrogate_evaluation e;
  const auto rmse = [](double sum, double count) {
    return count > 0 ? std::sqrt(sum / count) : std::numeric_limits<double>::quiet_NaN();
  };
  e.one_step_rmse = rmse(sums[0], sums[2]);
  e.persistence_one_step_rmse = rmse(sums[1], sums[2]);
  for (const int h : {1, 10, 50, static_cast<int>(rollout_steps)})
    if (h >= 1 && h <= static_cast<int>(rollout_steps) &&
        (e.horizons.empty() || e.horizons.back() < h))
      e.horizons.push_back(h);
  for (const int h : e.horizons) {
    double model = 0, persistence = 0, count = 0;
    for (int t = 0; t < h; ++t) {
      const double* at = sums.data() + 3 + 3 * static_cast<std::size_t>(t);
      model += at[0];
      persistence += at[1];
      count += at[2];
    }
    e.rollout_rmse.push_back(rmse(model, count));
    e.persistence_rollout_rmse.push_back(rmse(persistence, count));
  }
  return e;
}

/// The RMSE at every step of `rollout` (rollout_surrogate's of t, step 0 included: at most
/// t's steps) against t's states, over t's predicted nodes and every state column (0 where t
/// predicts no node).
struct rollout_errors {
  std::vector<double> model;        ///< per step: the rollout's
  std::vector<double> persistence;  ///< per step: t's first state kept
};

/// See rollout_errors. Throws sar::invalid_argument for a rollout longer than t or of
/// another shape.
inline rollout_errors rollout_errors_of(const trajectory& t, std::span<const matrixf> rollout) {
  SAR_CHECK(rollout.size() <= t.states.size(), invalid_argument, "sar::rollout_errors_of: ",
            rollout.size(), " states for trajectory ", t.name, " of ", t.states.size());
  rollout_errors e;
  for (std::size_t k = 0; k < rollout.size(); ++k) {
    SAR_CHECK(rollout[k].rows() == t.states[k].rows() && rollout[k].cols() == t.states[k].cols(),
              invalid_argument, "sar::rollout_errors_of: state ", k, " is ", rollout[k].rows(),
              " x ", rollout[k].cols(), ", trajectory ", t.name, "'s ", t.states[k].rows(),
              " x ", t.states[k].cols());
    const auto rmse = [](std::pair<double, double> squares) {
      return squares.second > 0 ? std::sqrt(squares.first / squares.second) : 0.0;
    };
    e.model.push_back(rmse(detail::surrogates::predicted_squares(t, rollout[k], t.states[k])));
    e.persistence.push_back(
        rmse(detail::surrogates::predicted_squares(t, t.states.front(), t.states[k])));
  }
  return e;
}

namespace detail::surrogates {
inline nlohmann::json fields_json(const trajectory_fields& f) {
  return {{"dynamic", f.dynamic},       {"dynamic_widths", f.dynamic_widths},
          {"static_inputs", f.static_inputs}, {"static_widths", f.static_widths},
          {"dimensions", f.dimensions}, {"corners", f.corners},
          {"length", f.length},         {"dt", f.dt}};
}
inline trajectory_fields fields_from(const nlohmann::json& j, const std::string& where) {
  trajectory_fields f;
  try {
    f.dynamic = j.at("dynamic").get<std::vector<std::string>>();
    f.dynamic_widths = j.at("dynamic_widths").get<std::vector<Eigen::Index>>();
    f.static_inputs = j.at("static_inputs").get<std::vector<std::string>>();
    f.static_widths = j.at("static_widths").get<std::vector<Eigen::Index>>();
    f.dimensions = j.at("dimensions").get<Eigen::Index>();
    f.corners = j.at("corners").get<int>();
    f.length = j.at("length").get<int>();
    f.dt = j.at("dt").get<double>();
  } catch (const nlohmann::json::exception& e) {
    throw io_error(message(where, ": the surrogate's fields: ", e.what()));
  }
  bool ok = f.dynamic.size() == f.dynamic_widths.size() && !f.dynamic.empty() &&
            f.static_inputs.size() == f.static_widths.size() &&
            (f.dimensions == 2 || f.dimensions == 3) && (f.corners == 3 || f.corners == 4);
  for (const Eigen::Index w : f.dynamic_widths) ok = ok && w >= 1 && w < (1 << 20);
  for (const Eigen::Index w : f.static_widths) ok = ok && w >= 1 && w < (1 << 20);
  SAR_CHECK(ok, io_error, where, ": the surrogate's fields are malformed: ", j.dump());
  return f;
}
}  // namespace detail::surrogates

/// Writes s to the model file `file` (sar/train/model_file.hpp: its model, the increments'
/// normaliser as the regression targets' standardisation, and under about["surrogate"] its
/// fields and the input normalisers), with `about` added. Collective (rank `root` writes).
/// Throws sar::io_error naming the file.
template <class T, communicator Comm>
void save_surrogate(Comm& comm, const std::filesystem::path& file, mesh_surrogate<T>& s,
                    nlohmann::json about = nlohmann::json::object(), int root = 0) {
  about["surrogate"] = {{"fields", detail::surrogates::fields_json(s.fields)},
                        {"inputs", s.inputs.to_json()},
                        {"edges", s.edges.to_json()},
                        {"increments_count", s.increments.count()}};
  model_description d{.config = s.config,
                      .input_dim = surrogate_input_width(s.fields),
                      .output_dim = s.fields.state_width(),
                      .task = task_kind::regress,
                      .targets = {s.increments.mean(), s.increments.deviation()},
                      .about = std::move(about)};
  save_model(comm, file, s.model, d, root);
}

/// The surrogate in the model file `file` (save_surrogate's). Not collective. Throws
/// sar::io_error naming the file for a model file that is not a surrogate's or is malformed.
template <class T>
mesh_surrogate<T> load_surrogate(const std::filesystem::path& file) {
  const std::string where = message("sar::load_surrogate: ", file.string());
  const saved_model saved = read_model(file);
  const nlohmann::json& about = saved.description.about;
  SAR_CHECK(about.is_object() && about.contains("surrogate") && about["surrogate"].is_object(),
            io_error, where, ": not a mesh surrogate's model file (no about.surrogate)");
  const nlohmann::json& j = about["surrogate"];
  SAR_CHECK(j.contains("fields") && j.contains("inputs") && j.contains("edges"), io_error, where,
            ": about.surrogate lacks its fields or normalisers");
  const trajectory_fields f = detail::surrogates::fields_from(j["fields"], where);
  const model_description& d = saved.description;
  SAR_CHECK(d.input_dim == surrogate_input_width(f) && d.output_dim == f.state_width() &&
                d.config.edge_dim == f.dimensions + 1 &&
                d.targets.mean.size() == static_cast<std::size_t>(f.state_width()),
            io_error, where, ": the model's widths (", d.input_dim, " in, ", d.output_dim,
            " out, edges ", d.config.edge_dim, ") are not those of its fields");
  online_normaliser increments =
      online_normaliser::from_json({{"mean", d.targets.mean},
                                    {"deviation", d.targets.scale},
                                    {"count", j.value("increments_count", 0.0)}},
                                   f.state_width(), where);
  return {f, d.config, load_model<T, local_schedule>(saved),
          online_normaliser::from_json(j["inputs"], surrogate_input_width(f), where),
          online_normaliser::from_json(j["edges"], f.dimensions + 1, where),
          std::move(increments)};
}

}  // namespace sar
