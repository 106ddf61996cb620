// --generation-config: reading generation_config.json into sampling defaults, and how the request parsers apply
// them to the fields a body leaves out.
#include "net/openai/generation_config.hpp"

#include "support/test_paths.hpp"

#include <doctest/doctest.h>

#include <fstream>
#include <string>

using namespace actorllm;
using namespace actorllm::net::openai;

namespace {

std::filesystem::path dir_with(const std::string& json) {
  auto dir = test::make_temp_dir("gen_config");
  std::ofstream{dir / "generation_config.json"} << json;
  return dir;
}

template <class F>
std::string error_message(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  FAIL("no error");
  return {};
}

}  // namespace

TEST_CASE("generation_config.json's sampling fields become defaults and other keys are ignored") {
  auto dir = dir_with(R"({"bos_token_id":1,"do_sample":true,"temperature":0.6,"top_p":0.9,"top_k":20,)"
                      R"("min_p":0.05,"repetition_penalty":1.1,"max_new_tokens":7})");
  sampling_defaults d = resolve_generation_config(dir.string(), "/nonexistent");
  CHECK(d.temperature == doctest::Approx(0.6f));
  CHECK(d.top_p == doctest::Approx(0.9f));
  CHECK(d.top_k == 20);
  CHECK(d.min_p == doctest::Approx(0.05f));
  CHECK(d.repetition_penalty == doctest::Approx(1.1f));
  CHECK(d.max_tokens == 7);
  CHECK(describe(d).find("temperature=0.6") != std::string::npos);
  // "auto" reads the model directory's file; "vllm" ignores it.
  CHECK(resolve_generation_config("auto", dir).temperature == doctest::Approx(0.6f));
  CHECK(resolve_generation_config("vllm", dir).empty());
}

TEST_CASE("auto without a generation_config.json, or one without sampling fields, sets nothing") {
  CHECK(resolve_generation_config("auto", test::make_temp_dir("gen_config_none")).empty());
  // stories260K's file only names bos/eos ids: the golden (temperature 0) tests see no change.
  sampling_defaults d = resolve_generation_config("auto", test::model_dir("stories260K"));
  CHECK(d.empty());
  CHECK(describe(d).empty());
}

TEST_CASE("a --generation-config directory without a valid file is an error naming the file") {
  auto empty = test::make_temp_dir("gen_config_missing");
  auto msg = error_message([&] { resolve_generation_config(empty.string(), "/x"); });
  CHECK(msg.find((empty / "generation_config.json").string()) != std::string::npos);
  CHECK(error_message([&] {
          resolve_generation_config(dir_with("{nope").string(), "/x");
        }).find("generation_config.json") != std::string::npos);
  CHECK(error_message([&] {
          resolve_generation_config(dir_with(R"({"temperature":"hot"})").string(), "/x");
        }).find("temperature") != std::string::npos);
  CHECK(error_message([&] { resolve_generation_config(dir_with(R"({"top_p":7})").string(), "/x"); }).find("top_p") !=
        std::string::npos);
  CHECK(error_message([&] {
          resolve_generation_config(dir_with(R"({"max_new_tokens":2.5})").string(), "/x");
        }).find("max_new_tokens") != std::string::npos);
}

TEST_CASE("the parsers apply defaults only to the fields a body leaves out") {
  sampling_defaults d;
  d.temperature = 0.5f;
  d.top_k = 3;
  d.repetition_penalty = 1.2f;
  d.max_tokens = 9;
  auto c = parse_completion_request(R"({"prompt":"hi","temperature":0,"top_k":null})", {}, d);
  REQUIRE(c);
  CHECK(c->params.temperature == 0.0f);  // given: wins
  CHECK(c->params.top_k == 3);           // null is "not given"
  CHECK(c->params.repetition_penalty == doctest::Approx(1.2f));
  CHECK(c->params.top_p == 1.0f);  // no default: OpenAI's
  CHECK(c->params.max_tokens == 9);
  CHECK(c->max_tokens_defaulted);
  auto given = parse_completion_request(R"({"prompt":"hi","max_tokens":4})", {}, d);
  REQUIRE(given);
  CHECK(given->params.max_tokens == 4);
  CHECK_FALSE(given->max_tokens_defaulted);

  auto chat = parse_chat_request(R"({"messages":[{"role":"user","content":"hi"}]})", {}, d);
  REQUIRE(chat);
  CHECK(chat->params.temperature == doctest::Approx(0.5f));
  CHECK(chat->params.max_tokens == 9);
  CHECK(chat->max_tokens_defaulted);
  auto chat_given =
      parse_chat_request(R"({"messages":[{"role":"user","content":"hi"}],"max_completion_tokens":2})", {}, d);
  REQUIRE(chat_given);
  CHECK(chat_given->params.max_tokens == 2);

  // Without defaults nothing changes: 16 for completions, unset for chat.
  CHECK(parse_completion_request(R"({"prompt":"hi"})")->params.max_tokens == 16);
  CHECK_FALSE(parse_chat_request(R"({"messages":[{"role":"user","content":"hi"}]})")->params.max_tokens);
}
