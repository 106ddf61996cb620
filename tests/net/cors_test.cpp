// CORS (--allowed-origins): which requests earn Access-Control-* headers, and the preflight answer.
#include "net/cors.hpp"

#include <doctest/doctest.h>

#include <string>

using namespace actorllm::net;

namespace {

std::string value_of(const header_list& h, const std::string& name) {
  for (const auto& [k, v] : h)
    if (k == name)
      return v;
  return "<absent>";
}

http_request options_from(std::string origin) {
  http_request r;
  r.method = "OPTIONS";
  r.target = "/v1/chat/completions";
  r.headers = {{"origin", std::move(origin)},
               {"access-control-request-method", "POST"},
               {"access-control-request-headers", "x-stainless-os"}};
  return r;
}

}  // namespace

TEST_CASE("cors_headers: a listed origin is echoed with Vary: Origin and others get nothing") {
  const std::vector<std::string> allowed{"https://a.example", "http://localhost:3000"};
  auto h = cors_headers(allowed, std::string{"http://localhost:3000"});
  CHECK(value_of(h, "Access-Control-Allow-Origin") == "http://localhost:3000");
  CHECK(value_of(h, "Vary") == "Origin");
  CHECK(cors_headers(allowed, std::string{"https://evil.example"}).empty());
  CHECK(cors_headers(allowed, std::string{"https://a.example.evil"}).empty());
  CHECK(cors_headers(allowed, std::nullopt).empty());
  CHECK(cors_headers({}, std::string{"https://a.example"}).empty());  // CORS off
}

TEST_CASE("cors_headers: \"*\" allows any origin and answers *") {
  auto h = cors_headers({"*"}, std::string{"https://anything.example"});
  CHECK(value_of(h, "Access-Control-Allow-Origin") == "*");
  CHECK(value_of(h, "Vary") == "Origin");
}

TEST_CASE("cors_preflight: OPTIONS from an allowed origin gets 204 with methods, headers and max-age") {
  auto r = cors_preflight({"https://a.example"}, options_from("https://a.example"));
  REQUIRE(r.has_value());
  CHECK(r->status == 204);
  CHECK(r->body.empty());
  CHECK(value_of(r->headers, "Access-Control-Allow-Origin") == "https://a.example");
  CHECK(value_of(r->headers, "Access-Control-Allow-Methods").find("POST") != std::string::npos);
  const std::string allow = value_of(r->headers, "Access-Control-Allow-Headers");
  for (const char* name : {"Authorization", "Content-Type", "x-request-id", "x-stainless-os"})
    CHECK_MESSAGE(allow.find(name) != std::string::npos, name);
  CHECK(value_of(r->headers, "Access-Control-Max-Age") != "<absent>");
}

TEST_CASE("cors_preflight: not a preflight when CORS is off, the origin is not allowed, or the method is not OPTIONS") {
  CHECK_FALSE(cors_preflight({}, options_from("https://a.example")));
  CHECK_FALSE(cors_preflight({"https://a.example"}, options_from("https://b.example")));
  http_request post = options_from("https://a.example");
  post.method = "POST";
  CHECK_FALSE(cors_preflight({"https://a.example"}, post));
}
