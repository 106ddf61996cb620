#include "net/cors.hpp"

#include <algorithm>

namespace actorllm::net {

header_list cors_headers(const std::vector<std::string>& allowed, const std::optional<std::string>& origin) {
  if (allowed.empty() || !origin || origin->empty())
    return {};
  const bool any = std::find(allowed.begin(), allowed.end(), "*") != allowed.end();
  if (!any && std::find(allowed.begin(), allowed.end(), *origin) == allowed.end())
    return {};
  return {{"Access-Control-Allow-Origin", any ? std::string{"*"} : *origin},
          {"Vary", "Origin"},
          {"Access-Control-Expose-Headers", "x-request-id, Retry-After"}};
}

std::optional<http_response> cors_preflight(const std::vector<std::string>& allowed, const http_request& request) {
  if (request.method != "OPTIONS")
    return std::nullopt;
  header_list headers = cors_headers(allowed, request.header("origin"));
  if (headers.empty())
    return std::nullopt;
  std::string allow_headers = "Authorization, Content-Type, x-request-id";
  // Whatever else the browser asks to send is fine too (vLLM allows every header).
  if (auto asked = request.header("access-control-request-headers"); asked && !asked->empty())
    allow_headers += ", " + *asked;
  headers.emplace_back("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
  headers.emplace_back("Access-Control-Allow-Headers", std::move(allow_headers));
  headers.emplace_back("Access-Control-Max-Age", "600");
  return http_response{204, "", "", std::move(headers)};
}

}  // namespace actorllm::net
