// A minimal expected<T> for the engine core: C++20 has no std::expected and the core must not depend on CAF
// (whose caf::expected the actor wrappers use), so errors cross the core's public API as this value type.
#pragma once

#include "engine/engine_error.hpp"
#include "util/check.hpp"

#include <optional>
#include <utility>
#include <variant>

namespace actorllm::engine {

namespace detail {
[[noreturn]] inline void bad_expected_access(const engine_error& err, const char* file, int line) {
  ::actorllm::detail::check_failed("has_value()", err.message.c_str(), file, line);
}
}  // namespace detail

/// Either a T or an engine_error. Reading the value of an error (or the error of a value) is a bug and aborts with
/// the error's message rather than being undefined behaviour.
template <class T>
class [[nodiscard]] expected {
 public:
  /// A value.
  expected(T value) : state_(std::in_place_index<0>, std::move(value)) {}
  /// An error.
  expected(engine_error error) : state_(std::in_place_index<1>, std::move(error)) {}

  /// Whether this holds a value.
  bool has_value() const { return state_.index() == 0; }
  /// Whether this holds a value.
  explicit operator bool() const { return has_value(); }

  /// The value; aborts with the error's message when this holds an error.
  T& value() & {
    require_value();
    return std::get<0>(state_);
  }
  /// The value; aborts with the error's message when this holds an error.
  const T& value() const& {
    require_value();
    return std::get<0>(state_);
  }
  /// The value, moved out; aborts with the error's message when this holds an error.
  T&& value() && {
    require_value();
    return std::get<0>(std::move(state_));
  }
  /// The value (see value()).
  T& operator*() & { return value(); }
  /// The value (see value()).
  const T& operator*() const& { return value(); }
  /// The value (see value()).
  T* operator->() { return &value(); }
  /// The value (see value()).
  const T* operator->() const { return &value(); }

  /// The error; aborts when this holds a value.
  const engine_error& error() const {
    ACTORLLM_CHECK(!has_value(), "error() of an expected that holds a value");
    return std::get<1>(state_);
  }

 private:
  void require_value() const {
    if (!has_value()) [[unlikely]]
      detail::bad_expected_access(std::get<1>(state_), __FILE__, __LINE__);
  }

  std::variant<T, engine_error> state_;
};

/// Success (default) or an engine_error.
template <>
class [[nodiscard]] expected<void> {
 public:
  /// Success.
  expected() = default;
  /// An error.
  expected(engine_error error) : error_(std::move(error)) {}

  /// Whether this is a success.
  bool has_value() const { return !error_.has_value(); }
  /// Whether this is a success.
  explicit operator bool() const { return has_value(); }

  /// Aborts with the error's message when this holds an error; for call sites where failure is a bug.
  void value() const {
    if (error_) [[unlikely]]
      detail::bad_expected_access(*error_, __FILE__, __LINE__);
  }

  /// The error; aborts on success.
  const engine_error& error() const {
    ACTORLLM_CHECK(error_.has_value(), "error() of a successful expected<void>");
    return *error_;
  }

 private:
  std::optional<engine_error> error_;
};

}  // namespace actorllm::engine
