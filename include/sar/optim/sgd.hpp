// Stochastic gradient descent with momentum (heavy-ball or Nesterov) and per-group L2 weight
// decay, stepping the flat buffers of a parameter_store. Settings live in sgd_options, per-run
// state (velocity, step count) in sgd<T>::state.
//   g = grad + decay[group] * w
//   v = momentum * v + g                         (when momentum > 0)
//   w -= lr * (nesterov ? g + momentum * v : v)   (w -= lr * g without momentum)
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "sar/core/error.hpp"
#include "sar/nn/parameters.hpp"
#include "sar/optim/detail.hpp"

namespace sar {

/// Settings of sgd (see the top of this file).
struct sgd_options {
  /// Step size (>= 0); set_learning_rate() changes it between steps.
  double learning_rate = 0.01;
  /// Momentum in [0, 1); 0: plain gradient steps, no velocity.
  double momentum = 0.0;
  /// Nesterov momentum instead of heavy-ball (requires momentum > 0).
  bool nesterov = false;
  /// L2 decay per parameter group (parameter_shape::group); groups past the end decay by 0.
  std::vector<double> weight_decay{};
};

/// SGD with optional momentum (heavy-ball or Nesterov), stepping a parameter_store<T>.
template <class T>
class sgd {
 public:
  /// What the optimiser carries from step to step (what a checkpoint saves).
  struct state {
    std::vector<T> velocity;  ///< one per parameter value (empty without momentum)
    /// Steps taken.
    std::uint64_t steps = 0;
  };

  /// Requires learning_rate >= 0, momentum in [0, 1), nesterov only with momentum > 0, every
  /// decay >= 0; throws sar::invalid_argument otherwise.
  explicit sgd(sgd_options options = {}) : options_(std::move(options)) {
    SAR_CHECK(options_.learning_rate >= 0, invalid_argument, "sar::sgd: learning rate ",
              options_.learning_rate);
    SAR_CHECK(options_.momentum >= 0 && options_.momentum < 1, invalid_argument,
              "sar::sgd: momentum ", options_.momentum, " outside [0, 1)");
    SAR_CHECK(!options_.nesterov || options_.momentum > 0, invalid_argument,
              "sar::sgd: Nesterov needs momentum > 0");
    detail::check_decay("sar::sgd", options_.weight_decay);
  }

  /// The settings (with the learning rate as last set).
  const sgd_options& options() const { return options_; }
  /// The learning rate may change between steps (schedules).
  void set_learning_rate(double lr) { options_.learning_rate = lr; }
  /// The velocity and the step count.
  const state& get_state() const { return state_; }
  /// The velocity and the step count, writable (to restore a checkpoint).
  state& get_state() { return state_; }
  /// Forgets the velocity and the step count: the next step starts afresh (needed after the
  /// store changes size).
  void reset() { state_ = {}; }

  /// One update of every value from store.grads(), and of the rows of its row tables (no
  /// decay; their velocity kept in the tables). Requires an allocated store whose size
  /// does not change between steps; throws sar::invalid_argument otherwise.
  void step(parameter_store<T>& store) {
    const auto values = store.values();
    const auto grads = store.grads();
    const bool momentum = options_.momentum > 0;
    if (momentum) detail::size_state("sar::sgd::step", state_.velocity, values.size(), state_.steps);
    const T lr = static_cast<T>(options_.learning_rate);
    const T mu = static_cast<T>(options_.momentum);
    const bool nesterov = options_.nesterov;
    const auto update = [&](T* w, const T* g, T* v, std::size_t b, std::size_t e, T decay) {
      for (std::size_t k = b; k < e; ++k) {
        const T gk = g[k] + decay * w[k];
        if (!momentum) {
          w[k] -= lr * gk;
          continue;
        }
        v[k] = mu * v[k] + gk;
        w[k] -= lr * (nesterov ? gk + mu * v[k] : v[k]);
      }
    };
    detail::for_each_parameter_range(
        store, options_.weight_decay, [&](std::size_t b, std::size_t e, T decay) {
          update(values.data(), grads.data(), momentum ? state_.velocity.data() : nullptr, b, e,
                 decay);
        });
    detail::for_each_table_range(store, momentum ? 1 : 0,
                                 [&](T* w, const T* g, T* const* s, std::size_t b, std::size_t e) {
                                   update(w, g, momentum ? s[0] : nullptr, b, e, T(0));
                                 });
    ++state_.steps;
  }

 private:
  sgd_options options_;
  state state_;
};

}  // namespace sar
