// OpenAI-shaped error values and their JSON.
#include "net/openai/api_error.hpp"

#include <actorllm/error.hpp>

#include "util/json_writer.hpp"

namespace actorllm::net::openai {

namespace {

api_error make(int status, std::string_view type, std::string message, std::string param) {
  api_error e;
  e.status = status;
  e.message = std::move(message);
  e.type = std::string{type};
  e.param = std::move(param);
  e.code = std::to_string(status);
  return e;
}

}  // namespace

api_error api_error::bad_request(std::string message, std::string param) {
  return make(400, "BadRequestError", std::move(message), std::move(param));
}

api_error api_error::unauthorized(std::string message) {
  return make(401, "AuthenticationError", std::move(message), {});
}

api_error api_error::not_found(std::string message, std::string param) {
  return make(404, "NotFoundError", std::move(message), std::move(param));
}

api_error api_error::payload_too_large(std::string message) {
  return make(413, "PayloadTooLargeError", std::move(message), {});
}

api_error api_error::too_many_requests(std::string message, int retry_after_seconds) {
  auto e = make(429, "RateLimitError", std::move(message), {});
  e.retry_after_seconds = retry_after_seconds;
  return e;
}

api_error api_error::internal(std::string message) { return make(500, "InternalServerError", std::move(message), {}); }

api_error api_error::unavailable(std::string message) {
  return make(503, "ServiceUnavailableError", std::move(message), {});
}

std::string to_json(const api_error& e) {
  json_writer w;
  w.begin_object().key("error").begin_object();
  w.key("message").value(e.message);
  w.key("type").value(e.type);
  w.key("param");
  if (e.param.empty())
    w.null();
  else
    w.value(e.param);
  w.key("code");
  if (e.code.empty())
    w.null();
  else
    w.value(e.code);
  w.end_object().end_object();
  return w.take();
}

api_error from_engine_error(const actorllm::error& e) {
  switch (e.code()) {
    case errc::invalid_argument:
    case errc::exceeds_max_model_len:
    case errc::exceeds_kv_cache:
    case errc::too_many_sequences:
    case errc::duplicate_request:
      return api_error::bad_request(e.what());
    case errc::engine_failure:
    case errc::shut_down:
      return api_error::unavailable(e.what());
    case errc::invalid_config:
    case errc::load_failed:
    case errc::unknown_request:
    case errc::internal:
      break;
  }
  return api_error::internal(e.what());
}

}  // namespace actorllm::net::openai
