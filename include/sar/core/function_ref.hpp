// A non-owning reference to a callable (C++26's std::function_ref, reduced to what sar needs):
// a function that takes one is compiled once per signature rather than once per lambda. sar
// uses it where calls are few next to the work around them (a halo exchange's visitor, once
// per block; a parallel loop's body, once per chunk), so the indirect call costs nothing.
#pragma once

#include <memory>
#include <type_traits>
#include <utility>

namespace sar {

template <class Signature>
class function_ref;

/// Refers to a callable f without copying it. Requires f to outlive every call through the
/// reference: bind it to a named callable, or pass a temporary straight to a parameter.
template <class R, class... Args>
class function_ref<R(Args...)> {
 public:
  /// Refers to f. Requires f(args...) convertible to R. Does not throw.
  template <class F>
    requires(!std::is_same_v<std::remove_cvref_t<F>, function_ref> &&
             std::is_invocable_r_v<R, F&, Args...>)
  function_ref(F&& f) noexcept  // implicit: passed where a callable is expected
      : object_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))),
        call_([](void* object, Args... args) -> R {
          return (*static_cast<std::remove_reference_t<F>*>(object))(std::forward<Args>(args)...);
        }) {}

  /// Calls the referenced callable with args; throws what it throws.
  R operator()(Args... args) const { return call_(object_, std::forward<Args>(args)...); }

 private:
  void* object_;
  R (*call_)(void*, Args...);
};

}  // namespace sar
