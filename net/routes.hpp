// Request dispatch for `actorllm serve`: method + path to a handler, the API-key check, and OpenAI-shaped 401, 404
// and 405 answers. No Beast here (see http_server.hpp).
#pragma once

#include "net/http_server.hpp"
#include "net/openai/api_error.hpp"

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace actorllm::net {

/// A JSON response with `status`.
http_response json_response(int status, std::string body);
/// The OpenAI error shape for `e`, with Retry-After for 429.
http_response error_response(const openai::api_error& e);
/// A channel already holding `r`.
std::shared_ptr<response_channel> reply(http_response r);
/// `segment` with its %XX escapes decoded (clients encode '/' in a path parameter as %2F); a '%' not followed by two
/// hex digits stays as it is.
std::string percent_decode(std::string_view segment);

class router {
 public:
  using route_handler = std::function<std::shared_ptr<response_channel>(const http_request&)>;

  /// Adds `method path` (exact path match).
  void add(std::string method, std::string path, route_handler handler);
  /// Adds `method prefix…`: every path that starts with `prefix` and goes on (e.g. "/v1/models/" for
  /// /v1/models/{model}); the handler reads the rest from the request's target. Exact routes are not affected.
  void add_prefix(std::string method, std::string prefix, route_handler handler);
  /// Requires `Authorization: Bearer key` on /v1/* routes and /reset_prefix_cache (empty: no key).
  void set_api_key(std::string key) { api_key_ = std::move(key); }
  /// The handler's answer, or 401/404/405 in OpenAI's error shape.
  std::shared_ptr<response_channel> dispatch(const http_request& request) const;

 private:
  struct route {
    std::string method;
    std::string path;
    route_handler handler;
    bool prefix = false;  // `path` is a prefix (add_prefix)

    bool matches(const std::string& target) const {
      return prefix ? target.size() > path.size() && target.starts_with(path) : target == path;
    }
  };
  std::vector<route> routes_;
  std::string api_key_;
};

}  // namespace actorllm::net
