// --lora-modules values as vLLM takes them: name=path, or a JSON object with name, path and base_model_name.
#include "net/lora_service.hpp"

#include <doctest/doctest.h>

#include <string>
#include <vector>

using namespace actorllm::net;

TEST_CASE("lora modules: name=path and the JSON form parse, and each malformed value is refused saying why") {
  const std::vector<std::string> served{"base", "alias"};
  auto ok = parse_lora_module("sql=/adapters/sql-lora", served);
  REQUIRE(ok);
  CHECK(ok->name == "sql");
  CHECK(ok->path == "/adapters/sql-lora");
  ok = parse_lora_module(R"({"name": "chat", "path": "/a/b=c", "base_model_name": "alias"})", served);
  REQUIRE(ok);
  CHECK(ok->name == "chat");
  CHECK(ok->path == "/a/b=c");
  ok = parse_lora_module("eq=/a/b=c", served);  // the first '=' splits
  REQUIRE(ok);
  CHECK(ok->path == "/a/b=c");

  const std::vector<std::pair<std::string, std::string>> bad{
      {"no-equals-sign", "neither name=path"},
      {"=/path", "needs a name and a path"},
      {"name=", "needs a name and a path"},
      {R"({"name": "x", "path": "/p", "base_model_name": "other"})", "base_model_name 'other'"},
      {R"({"name": "x", "path": "/p", "rank": "8"})", "unknown key 'rank'"},
      {R"({"name": "x", "path": 3})", "'path' must be a string"},
      {R"({"name": "x")", "not a JSON object"},
      {R"({"path": "/p"})", "needs a name and a path"},
  };
  for (const auto& [value, why] : bad) {
    CAPTURE(value);
    auto r = parse_lora_module(value, served);
    REQUIRE_FALSE(r);
    CHECK(r.error().message.find(why) != std::string::npos);
    CHECK(r.error().status == 400);
  }
}
