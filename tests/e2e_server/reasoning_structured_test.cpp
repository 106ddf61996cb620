// Structured outputs and forced tool choices behind a reasoning part, as vLLM applies them: the model reasons freely
// and the constraint holds only the tokens after </think> (or every token when the prompt already ended the
// reasoning). The model is a one-layer Qwen3 with dummy weights and the real Qwen3 tokenizer (where </think> is one
// added token); it knows nothing, so the assertions are on structure: the free part samples what an unconstrained
// request samples, </think> is forced with logit_bias, and what follows it parses and validates.
#include "server_harness.hpp"

#include <fstream>
#include <string>
#include <vector>

using namespace actorllm::e2e;

namespace {

constexpr int32_t think_end = 151668;  // </think> in Qwen3's vocabulary

/// A temporary model directory: a tiny Qwen3 config (weights from --load-format dummy) and ../shared's Qwen3
/// tokenizer with its chat template.
struct dummy_qwen3 {
  dummy_qwen3() : path{actorllm::test::make_temp_dir("e2e-dummy-qwen3")} {
    std::ofstream{path / "config.json"} << R"({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
        "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 151936, "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "tie_word_embeddings": true, "torch_dtype": "float32",
        "bos_token_id": 151643, "eos_token_id": 151645})";
    const auto tok = actorllm::test::shared_dir() / "models" / "tokenizers" / "qwen3";
    for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
      std::filesystem::copy_file(tok / f, path / f);
  }
  ~dummy_qwen3() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  dummy_qwen3(const dummy_qwen3&) = delete;
  dummy_qwen3& operator=(const dummy_qwen3&) = delete;
  std::filesystem::path path;
};

std::vector<std::string> flags(const std::string& reasoning_parser) {
  return {"--load-format",   "dummy", "--reasoning-parser", reasoning_parser,
          "--max-model-len", "1024",  "--kv-cache-memory",  "32MiB"};
}

const std::string schema = R"({"type":"object","properties":{"ok":{"type":"boolean"},)"
                           R"("color":{"enum":["red","green","blue"]}},"required":["ok","color"]})";
const std::string response_format =
    R"("response_format":{"type":"json_schema","json_schema":{"name":"c","schema":)" + schema + "}}";
const std::string tools = R"("tools":[{"type":"function","function":{"name":"weather","parameters":)"
                          R"({"type":"object","properties":{"city":{"enum":["Paris","Rome"]}},"required":["city"]}}}])";
const std::string messages = R"("messages":[{"role":"user","content":"Pick a color."}])";
const std::string force_end = R"("logit_bias":{")" + std::to_string(think_end) + R"(":100})";
const std::string forbid_end = R"("logit_bias":{")" + std::to_string(think_end) + R"(":-100})";

std::string body(const std::vector<std::string>& fields) {
  std::string b = "{" + messages;
  for (const std::string& f : fields)
    b += "," + f;
  return b + "}";
}

simdjson::dom::element parse(simdjson::dom::parser& p, const http_reply& r) {
  REQUIRE_MESSAGE(r.status == 200, r.body);
  simdjson::dom::element doc;
  REQUIRE_MESSAGE(p.parse(r.body).get(doc) == simdjson::SUCCESS, r.body);
  return doc;
}

// `json` is an object matching `schema` above.
void check_color(const std::string& json) {
  CAPTURE(json);
  simdjson::dom::parser p;
  simdjson::dom::element v;
  REQUIRE(p.parse(json).get(v) == simdjson::SUCCESS);
  CHECK(v["ok"].is_bool());
  std::string_view color;
  REQUIRE(v["color"].get(color) == simdjson::SUCCESS);
  CHECK((color == "red" || color == "green" || color == "blue"));
}

void check_city(const std::string& json) {
  CAPTURE(json);
  simdjson::dom::parser p;
  simdjson::dom::element v;
  REQUIRE(p.parse(json).get(v) == simdjson::SUCCESS);
  std::string_view city;
  REQUIRE(v["city"].get(city) == simdjson::SUCCESS);
  CHECK((city == "Paris" || city == "Rome"));
}

std::vector<int64_t> token_ids(simdjson::dom::element choice) {
  std::vector<int64_t> ids;
  for (simdjson::dom::element id : choice["token_ids"].get_array())
    ids.push_back(static_cast<int64_t>(id));
  return ids;
}

// A chat stream pieced together: reasoning, content, the first call's name and arguments, the last finish_reason.
struct streamed {
  std::string reasoning, content, name, arguments, finish;
};

streamed read_stream(const http_reply& r) {
  REQUIRE_MESSAGE(r.status == 200, r.body);
  streamed out;
  for (const std::string& payload : sse_payloads(r.body)) {
    if (payload == "[DONE]")
      continue;
    simdjson::dom::parser p;
    simdjson::dom::element choice;
    if (p.parse(payload)["choices"].at(0).get(choice) != simdjson::SUCCESS)
      continue;  // a usage chunk
    std::string_view v;
    if (choice["delta"]["reasoning_content"].get(v) == simdjson::SUCCESS)
      out.reasoning += v;
    if (choice["delta"]["content"].get(v) == simdjson::SUCCESS)
      out.content += v;
    simdjson::dom::array calls;
    if (choice["delta"]["tool_calls"].get(calls) == simdjson::SUCCESS && calls.size() > 0) {
      if (calls.at(0)["function"]["name"].get(v) == simdjson::SUCCESS)
        out.name += v;
      if (calls.at(0)["function"]["arguments"].get(v) == simdjson::SUCCESS)
        out.arguments += v;
    }
    if (choice["finish_reason"].get(v) == simdjson::SUCCESS)
      out.finish = v;
  }
  return out;
}

}  // namespace

TEST_CASE("--reasoning-parser deepseek_r1: the reasoning is free, the structure holds the tokens after </think>") {
  dummy_qwen3 model;
  server s{flags("deepseek_r1"), {}, model.path};
  simdjson::dom::parser p;
  const std::string post = "/v1/chat/completions";

  SUBCASE("before </think> a constrained request samples what an unconstrained one does") {
    const std::vector<std::string> common{R"("max_tokens":6)", R"("temperature":1)", R"("seed":11)",
                                          R"("return_token_ids":true)", forbid_end};
    std::vector<std::string> constrained = common;
    constrained.push_back(response_format);
    simdjson::dom::parser p2;
    simdjson::dom::element with = parse(p, http(s.port(), "POST", post, body(constrained)))["choices"].at(0);
    simdjson::dom::element without = parse(p2, http(s.port(), "POST", post, body(common)))["choices"].at(0);
    CHECK(token_ids(with).size() == 6);
    CHECK(token_ids(with) == token_ids(without));
    CHECK(with["message"]["content"].is_null());  // all reasoning: the model never ended it
    CHECK(with["message"]["reasoning_content"].is_string());
  }
  SUBCASE("structured outputs: the JSON after </think> is the content, whole and streamed") {
    const std::vector<std::string> fields{
        R"("max_tokens":60)", R"("temperature":1)", R"("seed":3)", R"("return_token_ids":true)", force_end,
        response_format};
    simdjson::dom::element choice = parse(p, http(s.port(), "POST", post, body(fields)))["choices"].at(0);
    CHECK(token_ids(choice).at(0) == think_end);
    CHECK(std::string_view(choice["message"]["reasoning_content"]).empty());  // it ended at once
    CHECK(std::string_view(choice["finish_reason"]) == "stop");
    check_color(std::string{std::string_view(choice["message"]["content"])});

    std::vector<std::string> streaming = fields;
    streaming.push_back(R"("stream":true)");
    const streamed st = read_stream(http(s.port(), "POST", post, body(streaming)));
    CHECK(st.reasoning.empty());
    CHECK(st.finish == "stop");
    check_color(st.content);
  }
  SUBCASE("tool_choice required: the calls after </think> become tool_calls, whole and streamed") {
    const std::vector<std::string> fields{
        R"("max_tokens":80)", R"("temperature":1)", R"("seed":5)", force_end, tools, R"("tool_choice":"required")"};
    simdjson::dom::element choice = parse(p, http(s.port(), "POST", post, body(fields)))["choices"].at(0);
    CHECK(std::string_view(choice["finish_reason"]) == "tool_calls");
    simdjson::dom::array calls = choice["message"]["tool_calls"].get_array();
    REQUIRE(calls.size() >= 1);
    for (simdjson::dom::element call : calls) {
      CHECK(std::string_view(call["function"]["name"]) == "weather");
      check_city(std::string{std::string_view(call["function"]["arguments"])});
    }
    std::vector<std::string> streaming = fields;
    streaming.push_back(R"("stream":true)");
    const streamed st = read_stream(http(s.port(), "POST", post, body(streaming)));
    CHECK(st.finish == "tool_calls");
    CHECK(st.name == "weather");
    check_city(st.arguments);
  }
  SUBCASE("a named function: its arguments after </think>, streamed as argument deltas") {
    const std::vector<std::string> fields{R"("max_tokens":40)",
                                          R"("temperature":1)",
                                          R"("seed":9)",
                                          force_end,
                                          tools,
                                          R"("tool_choice":{"type":"function","function":{"name":"weather"}})",
                                          R"("stream":true)"};
    const streamed st = read_stream(http(s.port(), "POST", post, body(fields)));
    CHECK(st.name == "weather");
    CHECK(st.finish == "tool_calls");
    check_city(st.arguments);
  }
}

TEST_CASE(
    "--reasoning-parser qwen3: a prompt that ended the reasoning (enable_thinking false) is constrained from "
    "its first token") {
  dummy_qwen3 model;
  server s{flags("qwen3"), {}, model.path};
  simdjson::dom::parser p;
  // No logit_bias: the template's "<think>\n\n</think>\n\n" ended the reasoning, so the JSON starts at once.
  const std::vector<std::string> fields{R"("max_tokens":60)", R"("temperature":1)", R"("seed":4)",
                                        R"("chat_template_kwargs":{"enable_thinking":false})", response_format};
  simdjson::dom::element choice =
      parse(p, http(s.port(), "POST", "/v1/chat/completions", body(fields)))["choices"].at(0);
  CHECK(std::string_view(choice["finish_reason"]) == "stop");
  CHECK(choice["message"]["reasoning_content"].is_null());
  check_color(std::string{std::string_view(choice["message"]["content"])});

  // With thinking on, the same request reasons freely (</think> kept out): nothing holds it to the schema.
  std::vector<std::string> thinking{R"("max_tokens":6)", R"("temperature":1)", R"("seed":4)",
                                    R"("return_token_ids":true)", forbid_end};
  simdjson::dom::parser p2;
  simdjson::dom::element free_choice =
      parse(p2, http(s.port(), "POST", "/v1/chat/completions", body(thinking)))["choices"].at(0);
  thinking.push_back(response_format);
  simdjson::dom::parser p3;
  simdjson::dom::element gated =
      parse(p3, http(s.port(), "POST", "/v1/chat/completions", body(thinking)))["choices"].at(0);
  CHECK(token_ids(gated) == token_ids(free_choice));
}
