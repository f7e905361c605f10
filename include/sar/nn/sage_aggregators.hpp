// GraphSAGE's aggregators as policy types (DGL's reducer structs): each states its name and the
// structure sage_layer (sar/nn/sage.hpp) follows; sage_aggregators lists them for model files,
// sar-train --aggregator and sar-plan. A new aggregator of the same structure (linear, or a max
// with a self weight) is a struct here and a line in the list.
#pragma once

#include <concepts>
#include <string>
#include <string_view>
#include <type_traits>

#include "sar/core/error.hpp"
#include "sar/core/type_list.hpp"

namespace sar {

/// What an aggregator states (mean_aggregator is the model).
template <class A>
concept sage_aggregator = requires {
  { A::name } -> std::convertible_to<std::string_view>;
  { A::summary } -> std::convertible_to<std::string_view>;
  { A::linear } -> std::convertible_to<bool>;
  { A::self_weight } -> std::convertible_to<bool>;
} && (A::linear || A::self_weight);  // a max has a separate self term

/// Mean over the in-neighbours, separate self and neighbour weights.
struct mean_aggregator {
  static constexpr std::string_view name = "mean";  ///< --aggregator's value
  /// A line for --help.
  static constexpr std::string_view summary = "mean of the neighbours, own self weight";
  /// A sum scaled per node: the weight may be applied before aggregating.
  static constexpr bool linear = true;
  /// The node's own row has a weight of its own (else it joins its neighbourhood).
  static constexpr bool self_weight = true;
};
/// Mean over the in-neighbours and the node itself, one weight.
struct gcn_aggregator {
  static constexpr std::string_view name = "gcn";  ///< --aggregator's value
  /// A line for --help.
  static constexpr std::string_view summary = "mean of the neighbours and the node, one weight";
  static constexpr bool linear = true;        ///< as mean_aggregator's
  static constexpr bool self_weight = false;  ///< as mean_aggregator's
};
/// Elementwise max over the in-neighbours of relu(x W_pool + b_pool).
struct pool_aggregator {
  static constexpr std::string_view name = "pool";  ///< --aggregator's value
  /// A line for --help.
  static constexpr std::string_view summary = "max of an MLP of the neighbours";
  static constexpr bool linear = false;      ///< as mean_aggregator's
  static constexpr bool self_weight = true;  ///< as mean_aggregator's
};

/// The built-in aggregators, in the order --help lists them (the first is the default).
using sage_aggregators = type_list<mean_aggregator, gcn_aggregator, pool_aggregator>;
static_assert([]<class... A>(type_list<A...>) { return (sage_aggregator<A> && ...); }(
                  sage_aggregators{}),
              "every built-in aggregator must satisfy sar::sage_aggregator");

/// Calls f.template operator()<A>() for every built-in aggregator A, in order.
template <class Function>
void for_each_sage_aggregator(Function&& f) {
  for_each_type(sage_aggregators{}, f);
}

/// "mean | gcn | pool": the aggregators' names for --help and messages.
inline std::string sage_aggregator_choices() {
  std::string s;
  for_each_sage_aggregator(
      [&]<class A>() { s.append(s.empty() ? "" : " | ").append(A::name); });
  return s;
}

/// Whether `name` is a built-in aggregator's.
inline bool is_sage_aggregator(std::string_view name) {
  bool found = false;
  for_each_sage_aggregator([&]<class A>() { found = found || name == A::name; });
  return found;
}

/// f.template operator()<A>() for the aggregator A named `name`, and its result. Throws
/// Exception naming `where`, the name and the known ones for another name.
template <class Exception = invalid_argument, class Function>
auto with_sage_aggregator(std::string_view name, Function&& f, std::string_view where = "sar") {
  auto found = with_first(sage_aggregators{}, [&]<class A>() { return name == A::name; }, f);
  SAR_CHECK(found, Exception, where, ": unknown GraphSAGE aggregator '", name, "' (",
            sage_aggregator_choices(), ")");
  if constexpr (!std::is_same_v<decltype(found), bool>) return *std::move(found);
}

}  // namespace sar
