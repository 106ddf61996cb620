// Serialization of std::optional members: CAF 0.17 inspects caf::optional but not std::optional, so an inspect()
// wraps each such member in optional_field (a presence flag, then the value).
#pragma once

#include <utility>  // caf/meta/load_callback.hpp uses std::move without including it

#include <caf/error.hpp>
#include <caf/meta/load_callback.hpp>
#include <caf/meta/type_name.hpp>

#include <optional>

namespace actorllm::proto {

/// A reference to an optional member, for use as an lvalue argument of an inspector.
template <class T>
struct optional_field {
  explicit optional_field(std::optional<T>& target) : ref(&target) {}
  std::optional<T>* ref;
};

/// Saves a flag and the value (a default T when empty); loads them back.
template <class Inspector, class T>
typename Inspector::result_type inspect(Inspector& f, optional_field<T>& x) {
  bool engaged = x.ref->has_value();
  T value = engaged ? **x.ref : T{};
  return f(caf::meta::type_name("optional"), engaged, value, caf::meta::load_callback([&]() -> caf::error {
             if (engaged)
               *x.ref = std::move(value);
             else
               x.ref->reset();
             return caf::none;
           }));
}

}  // namespace actorllm::proto
