// OpenAI-shaped API errors: the status, message, type, param and code every HTTP error response carries, and their
// JSON `{"error":{"message","type","param","code"}}`.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace actorllm {
class error;
}

namespace actorllm::net::openai {

/// One error response. `param` names the request field at fault (OpenAI's `param`), empty when none applies.
/// `code` is written as a JSON string (OpenAI's schema says string or null); it defaults to the status number.
struct api_error {
  int status = 500;
  std::string message;
  std::string type;
  std::string param;
  std::string code;
  int retry_after_seconds = 0;  ///< for 429: the Retry-After header value the server should send (0: none)

  /// 400: invalid input; `param` names the field.
  static api_error bad_request(std::string message, std::string param = {});
  /// 401: a missing or wrong API key.
  static api_error unauthorized(std::string message = "Invalid or missing API key");
  /// 404: an unknown model or route.
  static api_error not_found(std::string message, std::string param = {});
  /// 413: a request body over the size limit.
  static api_error payload_too_large(std::string message);
  /// 429: the queue is full; the client should retry after `retry_after_seconds`.
  static api_error too_many_requests(std::string message, int retry_after_seconds = 1);
  /// 500: a bug or an unexpected failure.
  static api_error internal(std::string message);
  /// 503: the engine cannot serve (unhealthy, shutting down).
  static api_error unavailable(std::string message);

  friend bool operator==(const api_error&, const api_error&) = default;
};

/// `{"error":{"message":…,"type":…,"param":…|null,"code":…|null}}` on one line.
std::string to_json(const api_error& e);

/// The HTTP error for an engine rejection or failure: invalid requests and context/cache limits are 400, a failed
/// or stopped engine is 503, anything else 500.
api_error from_engine_error(const actorllm::error& e);

/// A value or the api_error that explains why there is none (std::expected is C++23).
template <class T>
class result {
 public:
  result(T value) : v_(std::in_place_index<0>, std::move(value)) {}
  result(api_error e) : v_(std::in_place_index<1>, std::move(e)) {}

  /// Whether this holds a value.
  bool has_value() const { return v_.index() == 0; }
  explicit operator bool() const { return has_value(); }
  /// The value (only when has_value()).
  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  /// The error (only when !has_value()).
  const api_error& error() const { return std::get<1>(v_); }

 private:
  std::variant<T, api_error> v_;
};

}  // namespace actorllm::net::openai
