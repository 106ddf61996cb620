#include "net/routes.hpp"
#include "util/hex.hpp"

#include <fmt/format.h>

#include <utility>

namespace actorllm::net {

http_response json_response(int status, std::string body) {
  return http_response{status, "application/json", std::move(body), {}};
}

http_response error_response(const openai::api_error& e) {
  http_response r = json_response(e.status, openai::to_json(e));
  if (e.retry_after_seconds > 0)
    r.headers.emplace_back("Retry-After", std::to_string(e.retry_after_seconds));
  return r;
}

std::shared_ptr<response_channel> reply(http_response r) {
  auto ch = std::make_shared<response_channel>();
  ch->respond(std::move(r));
  return ch;
}

namespace {

constexpr int hex_digit(char c) { return hex_digit_value(c); }

}  // namespace

std::string percent_decode(std::string_view segment) {
  std::string out;
  out.reserve(segment.size());
  for (size_t i = 0; i < segment.size(); ++i) {
    if (segment[i] == '%' && i + 2 < segment.size()) {
      const int hi = hex_digit(segment[i + 1]);
      const int lo = hex_digit(segment[i + 2]);
      if (hi >= 0 && lo >= 0) {
        out += static_cast<char>(hi * 16 + lo);
        i += 2;
        continue;
      }
    }
    out += segment[i];
  }
  return out;
}

void router::add(std::string method, std::string path, route_handler handler) {
  routes_.push_back({std::move(method), std::move(path), std::move(handler), false});
}

void router::add_prefix(std::string method, std::string prefix, route_handler handler) {
  routes_.push_back({std::move(method), std::move(prefix), std::move(handler), true});
}

std::shared_ptr<response_channel> router::dispatch(const http_request& request) const {
  bool path_known = false;
  const route* match = nullptr;
  // Exact routes first, so that a prefix route never shadows one.
  for (const bool prefix : {false, true}) {
    for (const route& r : routes_) {
      if (r.prefix != prefix || !r.matches(request.target))
        continue;
      path_known = true;
      if (r.method == request.method && match == nullptr)
        match = &r;
    }
  }
  if (!path_known) {
    openai::api_error e =
        openai::api_error::not_found(fmt::format("Route {} {} not found", request.method, request.target));
    return reply(error_response(e));
  }
  if (match == nullptr) {
    openai::api_error e{
        405, fmt::format("Method {} not allowed for {}", request.method, request.target), "MethodNotAllowed", "", "",
        0};
    return reply(error_response(e));
  }
  // The /v1 API, /invocations (the same generation under SageMaker's path), and /reset_prefix_cache, which changes
  // the server's state for every client.
  if (!api_key_.empty() && (request.target.starts_with("/v1/") || request.target.starts_with("/invocations") ||
                            request.target.starts_with("/reset_prefix_cache"))) {
    auto auth = request.header("authorization");
    if (!auth || *auth != "Bearer " + api_key_)
      return reply(error_response(openai::api_error::unauthorized()));
  }
  return match->handler(request);
}

}  // namespace actorllm::net
