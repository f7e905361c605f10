// Adam (L2 weight decay added to the gradient) and AdamW (decoupled weight decay), stepping the
// flat buffers of a parameter_store, per parameter group decay, and its row tables (undecayed,
// as DGL's SparseAdam). Settings live in adam_options, per-run state (first and second
// moments, step count) in adam<T>::state.
//   t += 1; g = grad (+ decay[group] * w for Adam);  w -= lr * decay[group] * w  (AdamW)
//   m = beta1 m + (1 - beta1) g;   v = beta2 v + (1 - beta2) g^2
//   w -= lr * (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + epsilon)
#pragma once

#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "sar/core/error.hpp"
#include "sar/nn/parameters.hpp"
#include "sar/optim/detail.hpp"

namespace sar {

/// Settings of adam and adamw (see the top of this file).
struct adam_options {
  /// Step size (>= 0); set_learning_rate() changes it between steps.
  double learning_rate = 1e-3;
  /// Decay rate of the first moment, in [0, 1).
  double beta1 = 0.9;
  /// Decay rate of the second moment, in [0, 1).
  double beta2 = 0.999;
  /// Added to the denominator (> 0).
  double epsilon = 1e-8;
  /// Decay per parameter group (parameter_shape::group); groups past the end decay by 0.
  std::vector<double> weight_decay{};
  /// false: Adam (decay enters the gradient); true: AdamW (decay shrinks w directly).
  bool decoupled_weight_decay = false;
};

/// Adam, or AdamW with options.decoupled_weight_decay, stepping a parameter_store<T>.
template <class T>
class adam {
 public:
  /// What the optimiser carries from step to step (what a checkpoint saves).
  struct state {
    /// \var m
    /// First moments, one per parameter value.
    std::vector<T> m, v;  ///< first and second moments, one per parameter value
    /// Steps taken (t of the bias corrections).
    std::uint64_t steps = 0;
  };

  /// Requires learning_rate >= 0, betas in [0, 1), epsilon > 0, decays >= 0; throws
  /// sar::invalid_argument otherwise.
  explicit adam(adam_options options = {}) : options_(std::move(options)) {
    SAR_CHECK(options_.learning_rate >= 0, invalid_argument, "sar::adam: learning rate ",
              options_.learning_rate);
    SAR_CHECK(options_.beta1 >= 0 && options_.beta1 < 1 && options_.beta2 >= 0 &&
                  options_.beta2 < 1,
              invalid_argument, "sar::adam: betas ", options_.beta1, ", ", options_.beta2,
              " outside [0, 1)");
    SAR_CHECK(options_.epsilon > 0, invalid_argument, "sar::adam: epsilon ", options_.epsilon);
    detail::check_decay("sar::adam", options_.weight_decay);
  }

  /// The settings (with the learning rate as last set).
  const adam_options& options() const { return options_; }
  /// The learning rate may change between steps (schedules).
  void set_learning_rate(double lr) { options_.learning_rate = lr; }
  /// The moments and the step count.
  const state& get_state() const { return state_; }
  /// The moments and the step count, writable (to restore a checkpoint).
  state& get_state() { return state_; }
  /// Forgets the moments and the step count: the next step starts afresh (needed after the
  /// store changes size).
  void reset() { state_ = {}; }

  /// One update of every value from store.grads(), and of the rows of its row tables (no
  /// decay; their moments kept in the tables, the step count shared). Requires an allocated
  /// store whose size does not change between steps; throws sar::invalid_argument otherwise.
  void step(parameter_store<T>& store) {
    const auto values = store.values();
    const auto grads = store.grads();
    detail::size_state("sar::adam::step", state_.m, values.size(), state_.steps);
    detail::size_state("sar::adam::step", state_.v, values.size(), state_.steps);
    const auto t = static_cast<double>(++state_.steps);
    const double b1 = options_.beta1, b2 = options_.beta2;
    const T step_size = static_cast<T>(options_.learning_rate / (1 - std::pow(b1, t)));
    const T inv_sqrt_bias2 = static_cast<T>(1 / std::sqrt(1 - std::pow(b2, t)));
    const T eps = static_cast<T>(options_.epsilon), lr = static_cast<T>(options_.learning_rate);
    const T tb1 = static_cast<T>(b1), tb2 = static_cast<T>(b2);
    const bool decoupled = options_.decoupled_weight_decay;
    const auto update = [&](T* w, const T* g, T* m, T* v, std::size_t b, std::size_t e,
                            T decay) {
      for (std::size_t k = b; k < e; ++k) {
        T gk = g[k];
        if (decoupled) w[k] -= lr * decay * w[k];
        else gk += decay * w[k];
        m[k] = tb1 * m[k] + (1 - tb1) * gk;
        v[k] = tb2 * v[k] + (1 - tb2) * gk * gk;
        w[k] -= step_size * m[k] / (std::sqrt(v[k]) * inv_sqrt_bias2 + eps);
      }
    };
    detail::for_each_parameter_range(
        store, options_.weight_decay, [&](std::size_t b, std::size_t e, T decay) {
          update(values.data(), grads.data(), state_.m.data(), state_.v.data(), b, e, decay);
        });
    detail::for_each_table_range(store, 2, [&](T* w, const T* g, T* const* s, std::size_t b,
                                               std::size_t e) {
      update(w, g, s[0], s[1], b, e, T(0));
    });
  }

 private:
  adam_options options_;
  state state_;
};

/// AdamW: adam with decoupled weight decay (Loshchilov & Hutter), whatever the options say.
template <class T>
class adamw : public adam<T> {
 public:
  /// As adam(options) with decoupled_weight_decay set; the same requirements and throws.
  explicit adamw(adam_options options = {})
      : adam<T>(with_decoupled(std::move(options))) {}

 private:
  static adam_options with_decoupled(adam_options o) {
    o.decoupled_weight_decay = true;
    return o;
  }
};

}  // namespace sar
