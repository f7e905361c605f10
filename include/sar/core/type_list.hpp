// Lists of types and a call for the first that matches: the registries (model families,
// node-level tasks, GraphSAGE aggregators) are each a type_list, looked up by with_first.
#pragma once

#include <optional>
#include <type_traits>

namespace sar {

/// A list of types.
template <class... Types>
struct type_list {};

/// Calls f.template operator()<X>() for every X of the list, in order.
template <class... Types, class Function>
void for_each_type(type_list<Types...>, Function&& f) {
  (f.template operator()<Types>(), ...);
}

/// Calls f.template operator()<X>() for the first X of the list for which
/// match.template operator()<X>() is true. Returns whether there was one if f returns void,
/// else f's result (std::nullopt without one).
template <class First, class... Rest, class Match, class Function>
auto with_first(type_list<First, Rest...>, Match&& match, Function&& f) {
  using result = decltype(f.template operator()<First>());
  if constexpr (std::is_void_v<result>) {
    return (
        (match.template operator()<First>() && (f.template operator()<First>(), true)) || ... ||
        (match.template operator()<Rest>() && (f.template operator()<Rest>(), true)));
  } else {
    std::optional<result> r;
    (void)((match.template operator()<First>() &&
            (r.emplace(f.template operator()<First>()), true)) ||
           ... ||
           (match.template operator()<Rest>() && (r.emplace(f.template operator()<Rest>()), true)));
    return r;
  }
}

}  // namespace sar
