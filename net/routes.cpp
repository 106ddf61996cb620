#include "net/routes.hpp"

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

void router::add(std::string method, std::string path, route_handler handler) {
  routes_.push_back({std::move(method), std::move(path), std::move(handler)});
}

std::shared_ptr<response_channel> router::dispatch(const http_request& request) const {
  bool path_known = false;
  const route* match = nullptr;
  for (const route& r : routes_) {
    if (r.path != request.target)
      continue;
    path_known = true;
    if (r.method == request.method)
      match = &r;
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
  if (!api_key_.empty() && request.target.starts_with("/v1/")) {
    auto auth = request.header("authorization");
    if (!auth || *auth != "Bearer " + api_key_)
      return reply(error_response(openai::api_error::unauthorized()));
  }
  return match->handler(request);
}

}  // namespace actorllm::net
