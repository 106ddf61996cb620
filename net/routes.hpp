// Request dispatch for `actorllm serve`: method + path to a handler, the API-key check, and OpenAI-shaped 401, 404
// and 405 answers. No Beast here (see http_server.hpp).
#pragma once

#include "net/http_server.hpp"
#include "net/openai/api_error.hpp"

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace actorllm::net {

/// A JSON response with `status`.
http_response json_response(int status, std::string body);
/// The OpenAI error shape for `e`, with Retry-After for 429.
http_response error_response(const openai::api_error& e);
/// A channel already holding `r`.
std::shared_ptr<response_channel> reply(http_response r);

class router {
 public:
  using route_handler = std::function<std::shared_ptr<response_channel>(const http_request&)>;

  /// Adds `method path` (exact path match).
  void add(std::string method, std::string path, route_handler handler);
  /// Requires `Authorization: Bearer key` on /v1/* routes (empty: no key).
  void set_api_key(std::string key) { api_key_ = std::move(key); }
  /// The handler's answer, or 401/404/405 in OpenAI's error shape.
  std::shared_ptr<response_channel> dispatch(const http_request& request) const;

 private:
  struct route {
    std::string method;
    std::string path;
    route_handler handler;
  };
  std::vector<route> routes_;
  std::string api_key_;
};

}  // namespace actorllm::net
