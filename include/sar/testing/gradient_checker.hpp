// The public gradient checker: users test their own layers with it, the way sar tests its own.
//
//   sar::parameter_store<double> store;
//   my_layer<double> layer(...);
//   layer.declare(store);
//   store.allocate();
//   store.initialise(seed);
//   const auto result = sar::check_gradients(layer, store, graph, ctx, x);
//   CHECK_MESSAGE(result.passed, result.summary());
//
// It enforces the layer contract of sar/nn/layer.hpp, not only the maths:
//  (a) forward runs with y pre-filled with +infinity at the right shape: every entry the layer
//      does not assign stays infinite and fails the check (as does a wrong output shape);
//  (b) backward runs with dx pre-filled with a sentinel and the parameter gradients with
//      garbage; a second backward runs with both zeroed. dx must come out as sentinel + the
//      zero-filled result (the layer ADDS into dx), or as the zero-filled result for a layer
//      that declares L::assigns_input_gradient, and the parameter gradients must not
//      depend on what they held before (the layer ASSIGNS them). A third backward with an
//      empty dx must leave dx empty and produce the same parameter gradients;
//  (c) the analytic gradients of L = sum(y .* r), r a fixed random matrix, are compared with
//      central differences (L(v + h) - L(v - h)) / 2h for every entry of x and of every
//      parameter (or a random sample of max_entries entries of each);
//  (d) the result reports the largest relative error |a - n| / max(|a|, |n|, floor) for the
//      input and for each parameter, and passes when all are below the tolerance and (a), (b)
//      hold.
// Every forward uses the same ctx, so layers with randomness (dropout) draw the same numbers
// in every evaluation. Layers with state updated by forward (batch-norm running statistics)
// see many forwards; the state changes, the checked outputs do not depend on it.
// The layer's scalar must be double: central differences in float cannot resolve 1e-6.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "sar/core/error.hpp"
#include "sar/core/types.hpp"
#include "sar/nn/layer.hpp"
#include "sar/nn/parameters.hpp"

namespace sar {

/// Settings of check_gradients.
struct gradient_check_options {
  double step = 1e-5;          ///< central-difference step h (absolute)
  double tolerance = 1e-6;     ///< pass when every relative error is below this
  double floor = 1e-3;         ///< relative errors divide by max(|analytic|, |numeric|, floor)
  double sentinel = 0.5;       ///< dx is pre-filled with this before backward
  double garbage = 1234.5;     ///< parameter gradients are pre-filled with this before backward
  Eigen::Index max_entries = 4096;  ///< per tensor; larger tensors are checked on a sample
  std::uint64_t seed = 20240601;    ///< for r and for the sample
};

/// The outcome for one tensor (the input x or one parameter).
struct gradient_check_entry {
  /// "input", or the parameter's name ("parameter p" if it has none).
  std::string name;
  double max_relative_error = 0;  ///< over the checked entries
  Eigen::Index worst_index = -1;  ///< flat row-major index of the worst entry
  double analytic = 0;            ///< the two gradients at the worst entry
  /// The central-difference gradient at the worst entry.
  double numeric = 0;
  Eigen::Index checked = 0;  ///< number of entries compared
  /// Whether max_relative_error is within the tolerance.
  bool passed = true;
};

/// What check_gradients found (see the top of this file).
struct gradient_check_result {
  /// Every check passed: (a), (b) and every tensor's gradients.
  bool passed = false;
  bool output_assigned = false;      ///< (a): right shape, every entry finite
  bool input_gradient_added = true;  ///< (b): dx = sentinel + gradient (assigning layers: gradient)
  bool parameter_gradients_assigned = true;  ///< (b): garbage in the gradient buffer ignored
  bool empty_input_gradient_skipped = true;  ///< (b): empty dx stays empty, same parameter grads
  /// The input x's gradient.
  gradient_check_entry input;
  /// Each parameter's gradient, in store order.
  std::vector<gradient_check_entry> parameters;
  std::vector<std::string> problems;  ///< one sentence per failed check

  /// The same as passed.
  explicit operator bool() const { return passed; }
  /// A multi-line human-readable report (for CHECK_MESSAGE or a log line).
  std::string summary() const {
    std::ostringstream out;
    out << (passed ? "gradient check passed" : "gradient check FAILED") << '\n';
    const auto line = [&](const gradient_check_entry& e) {
      out << "  " << e.name << ": max relative error " << e.max_relative_error << " over "
          << e.checked << " entries";
      if (e.worst_index >= 0)
        out << " (worst at " << e.worst_index << ": analytic " << e.analytic << ", numeric "
            << e.numeric << ")";
      out << (e.passed ? "" : "  <-- FAILED") << '\n';
    };
    line(input);
    for (const auto& p : parameters) line(p);
    for (const auto& p : problems) out << "  problem: " << p << '\n';
    return out.str();
  }
};

namespace detail {

inline double relative_error(double analytic, double numeric, double floor) {
  const double scale = std::max({std::abs(analytic), std::abs(numeric), floor});
  const double diff = std::abs(analytic - numeric);
  return std::isfinite(diff) ? diff / scale : std::numeric_limits<double>::infinity();
}

/// The entries of a tensor of `size` entries to check: all, or a sorted random sample.
inline std::vector<Eigen::Index> entries_to_check(Eigen::Index size, Eigen::Index max_entries,
                                                  std::mt19937_64& gen) {
  std::vector<Eigen::Index> all(static_cast<std::size_t>(size));
  for (Eigen::Index k = 0; k < size; ++k) all[static_cast<std::size_t>(k)] = k;
  if (max_entries >= 0 && size > max_entries) {
    std::shuffle(all.begin(), all.end(), gen);
    all.resize(static_cast<std::size_t>(max_entries));
    std::sort(all.begin(), all.end());
  }
  return all;
}

}  // namespace detail

/// Checks layer's forward and backward against the contract and against central differences.
/// Requires: Layer::scalar is double; layer.declare(store) was called, then store.allocate()
/// (and usually store.initialise(seed)); x has graph.num_sources() rows and layer.input_dim()
/// columns. The store's values are restored afterwards; its gradients hold the last analytic
/// gradient. Collective if the layer's calls reach a distributed schedule (every rank must
/// call it with the same options). Throws sar::invalid_argument when x does not fit the
/// layer or the graph; whatever the layer throws propagates.
template <class Layer, class Schedule>
gradient_check_result check_gradients(Layer& layer, parameter_store<double>& store,
                                      Schedule& graph, const layer_context& ctx,
                                      const matrix<double>& x,
                                      const gradient_check_options& options = {}) {
  static_assert(std::is_same_v<typename Layer::scalar, double>,
                "sar::check_gradients needs a layer whose scalar type is double, because "
                "central differences in float cannot resolve the tolerances it checks; "
                "instantiate your layer template with double.");
  static_assert(::sar::layer<Layer, Schedule>,
                "sar::check_gradients needs a type that satisfies the sar::layer concept for "
                "this schedule (see sar/nn/layer.hpp: scalar, input_dim, output_dim, declare, "
                "forward, backward).");
  SAR_CHECK(x.rows() == static_cast<Eigen::Index>(graph.num_sources()), invalid_argument,
            "sar::check_gradients: x has ", x.rows(), " rows but the graph has ",
            graph.num_sources(), " source rows");
  SAR_CHECK(x.cols() == static_cast<Eigen::Index>(layer.input_dim()), invalid_argument,
            "sar::check_gradients: x has ", x.cols(), " columns but the layer's input_dim() is ",
            layer.input_dim());

  gradient_check_result result;
  std::mt19937_64 gen(options.seed);
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  const Eigen::Index n = graph.num_destinations(), m = x.rows();
  const Eigen::Index out_dim = static_cast<Eigen::Index>(layer.output_dim());
  const double inf = std::numeric_limits<double>::infinity();

  // (a) forward into +inf.
  matrix<double> y = matrix<double>::Constant(n, out_dim, inf);
  layer.forward(graph, ctx, x, y);
  result.output_assigned = y.rows() == n && y.cols() == out_dim && y.allFinite();
  if (!result.output_assigned) {
    std::ostringstream why;
    if (y.rows() != n || y.cols() != out_dim)
      why << "forward produced a " << y.rows() << " x " << y.cols() << " output, expected " << n
          << " x " << out_dim << ".";
    else
      why << "forward left " << (y.size() - y.array().isFinite().count()) << " of " << y.size()
          << " output entries unassigned or non-finite (y was pre-filled with +inf).";
    result.problems.push_back(why.str());
  }

  matrix<double> r(y.rows(), y.cols());
  for (Eigen::Index k = 0; k < r.size(); ++k) r.data()[k] = uniform(gen);

  const auto loss = [&](const matrix<double>& input) {
    matrix<double> out = matrix<double>::Constant(n, out_dim, inf);
    layer.forward(graph, ctx, input, out);
    if (out.rows() != r.rows() || out.cols() != r.cols()) return inf;
    return (out.array() * r.array()).sum();
  };

  // (b) backward three times: sentinel/garbage, zeros, empty dx.
  const auto grads = store.grads();
  std::vector<bool> in_parameter(grads.size(), false);
  for (std::size_t p = 0; p < store.size(); ++p)
    std::fill_n(in_parameter.begin() + store.offset(p), store.shape(p).rows * store.shape(p).cols,
                true);
  const auto backward = [&](matrix<double>& dx, double grad_fill) {
    std::fill(grads.begin(), grads.end(), grad_fill);
    matrix<double> y_again;
    layer.forward(graph, ctx, x, y_again);
    layer.backward(graph, ctx, x, static_cast<const matrix<double>&>(y_again),
                   static_cast<const matrix<double>&>(r), dx);
    std::vector<double> copy(grads.begin(), grads.end());
    for (std::size_t k = 0; k < copy.size(); ++k)  // the store's padding belongs to no layer
      if (!in_parameter[k]) copy[k] = 0.0;
    return copy;
  };
  matrix<double> dx_sentinel = matrix<double>::Constant(m, x.cols(), options.sentinel);
  const std::vector<double> grads_garbage = backward(dx_sentinel, options.garbage);
  // What dx_sentinel keeps of the sentinel: all of it, or nothing for an assigning layer.
  constexpr bool assigns = assigns_input_gradient_v<Layer>;
  const double kept = assigns ? 0.0 : options.sentinel;
  matrix<double> dx_zero = matrix<double>::Zero(m, x.cols());
  const std::vector<double> grads_zero = backward(dx_zero, 0.0);
  matrix<double> dx_empty;
  const std::vector<double> grads_empty = backward(dx_empty, options.garbage);

  const auto close = [&](double a, double b) {
    return detail::relative_error(a, b, options.floor) <= options.tolerance;
  };
  if (dx_sentinel.rows() != m || dx_sentinel.cols() != x.cols() || dx_zero.rows() != m ||
      dx_zero.cols() != x.cols()) {
    result.input_gradient_added = false;
    result.problems.push_back("backward resized dx; it must add into dx as given.");
  } else {
    Eigen::Index bad = 0;
    for (Eigen::Index k = 0; k < dx_zero.size(); ++k)
      bad += !close(dx_sentinel.data()[k] - kept, dx_zero.data()[k]);
    if (bad > 0) {
      result.input_gradient_added = false;
      result.problems.push_back(
          assigns ? message("backward declares assigns_input_gradient but its dx depends on what "
                            "dx held (", bad, " of ", dx_zero.size(), " entries).")
                  : message("backward assigned dx instead of adding into it (", bad, " of ",
                            dx_zero.size(), " entries did not keep the pre-filled ",
                            options.sentinel, ")."));
    }
  }
  {
    std::size_t bad = 0;
    for (std::size_t k = 0; k < grads_zero.size(); ++k)
      bad += !close(grads_garbage[k], grads_zero[k]);
    if (bad > 0) {
      result.parameter_gradients_assigned = false;
      result.problems.push_back(message(
          "backward added into the parameter gradients instead of assigning them (", bad,
          " of ", grads_zero.size(), " entries depend on what the buffer held before)."));
    }
  }
  {
    std::size_t bad = 0;
    for (std::size_t k = 0; k < grads_zero.size(); ++k)
      bad += !close(grads_empty[k], grads_zero[k]);
    if (dx_empty.size() != 0 || bad > 0) {
      result.empty_input_gradient_skipped = false;
      result.problems.push_back(message(
          "backward with an empty dx must leave it empty and compute the same parameter "
          "gradients (dx became ", dx_empty.rows(), " x ", dx_empty.cols(), ", ", bad,
          " parameter-gradient entries differ)."));
    }
  }

  // (c) central differences, (d) relative errors.
  const double h = options.step;
  const auto compare = [&](gradient_check_entry& entry, Eigen::Index size, auto&& analytic_at,
                           auto&& loss_with) {
    for (Eigen::Index k : detail::entries_to_check(size, options.max_entries, gen)) {
      const double numeric = (loss_with(k, +h) - loss_with(k, -h)) / (2 * h);
      const double analytic = analytic_at(k);
      const double err = detail::relative_error(analytic, numeric, options.floor);
      ++entry.checked;
      if (err > entry.max_relative_error || entry.worst_index < 0) {
        entry.max_relative_error = err;
        entry.worst_index = k;
        entry.analytic = analytic;
        entry.numeric = numeric;
      }
    }
    entry.passed = entry.max_relative_error <= options.tolerance;
  };

  result.input.name = "input";
  {
    matrix<double> xp = x;
    compare(
        result.input, x.size(),
        [&](Eigen::Index k) { return dx_sentinel.data()[k] - kept; },
        [&](Eigen::Index k, double delta) {
          const double saved = xp.data()[k];
          xp.data()[k] = saved + delta;
          const double l = loss(xp);
          xp.data()[k] = saved;
          return l;
        });
  }
  const auto values = store.values();
  for (std::size_t p = 0; p < store.size(); ++p) {
    gradient_check_entry entry;
    entry.name = store.shape(p).name.empty() ? message("parameter ", p) : store.shape(p).name;
    const Eigen::Index offset = store.offset(p);
    const Eigen::Index size = store.shape(p).rows * store.shape(p).cols;
    compare(
        entry, size,
        [&](Eigen::Index k) { return grads_garbage[static_cast<std::size_t>(offset + k)]; },
        [&](Eigen::Index k, double delta) {
          double& v = values[static_cast<std::size_t>(offset + k)];
          const double saved = v;
          v = saved + delta;
          const double l = loss(x);
          v = saved;
          return l;
        });
    result.parameters.push_back(std::move(entry));
  }

  bool all = result.output_assigned && result.input_gradient_added &&
             result.parameter_gradients_assigned && result.empty_input_gradient_skipped &&
             result.input.passed;
  if (!result.input.passed)
    result.problems.push_back(message("the input gradient differs from central differences (max "
                                      "relative error ",
                                      result.input.max_relative_error, ")."));
  for (const auto& p : result.parameters) {
    all = all && p.passed;
    if (!p.passed)
      result.problems.push_back(message("the gradient of ", p.name,
                                        " differs from central differences (max relative error ",
                                        p.max_relative_error, ")."));
  }
  result.passed = all;
  return result;
}

/// Convenience for a layer not yet declared anywhere: declares it into a fresh store,
/// allocates, initialises from options.seed, jitters every value by U(-0.1, 0.1) (so biases
/// and batch-norm scales are checked away from their special starting values 0 and 1) and
/// runs the check. The layer is left declared into a store that no longer exists: declare it
/// again before any other use.
template <class Layer, class Schedule>
gradient_check_result check_gradients(Layer& layer, Schedule& graph, const layer_context& ctx,
                                      const matrix<double>& x,
                                      const gradient_check_options& options = {}) {
  static_assert(std::is_same_v<typename Layer::scalar, double>,
                "sar::check_gradients needs a layer whose scalar type is double, because "
                "central differences in float cannot resolve the tolerances it checks; "
                "instantiate your layer template with double.");
  parameter_store<double> store;
  layer.declare(store);
  store.allocate();
  store.initialise(options.seed);
  std::mt19937_64 gen(options.seed ^ 0x9e3779b97f4a7c15ULL);
  std::uniform_real_distribution<double> jitter(-0.1, 0.1);
  for (double& v : store.values()) v += jitter(gen);
  return check_gradients(layer, store, graph, ctx, x, options);
}

}  // namespace sar
