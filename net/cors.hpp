// CORS for `actorllm serve --allowed-origins`: which response headers a request's Origin earns, and the answer to
// a browser's preflight (OPTIONS), which the server gives before routing and before the API-key check (a preflight
// never carries the key). No Beast here (see http_server.hpp).
#pragma once

#include "net/http_server.hpp"

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace actorllm::net {

using header_list = std::vector<std::pair<std::string, std::string>>;

/// Access-Control-Allow-Origin (the origin, or "*" when `allowed` holds "*") and Vary: Origin when `origin` is
/// allowed; empty when `allowed` is empty, the request has no Origin, or the origin is not allowed.
header_list cors_headers(const std::vector<std::string>& allowed, const std::optional<std::string>& origin);

/// The 204 answer to a preflight (OPTIONS from an allowed origin, any path), or nullopt when `request` is not one
/// (then it is routed as usual).
std::optional<http_response> cors_preflight(const std::vector<std::string>& allowed, const http_request& request);

}  // namespace actorllm::net
