// Chat templates of real models rendered against golden outputs: the 46 renderings in
// shared/models/chat-templates/expected_renderings.json (made with Hugging Face's Jinja engine), the stories260K
// reference example, and the templates embedded in the Llama 3 and Qwen3 tokenizer configs.
#include <doctest/doctest.h>
#include <simdjson.h>

#include <atomic>
#include <chrono>
#include <ctime>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "support/test_paths.hpp"
#include "text/chat_template.hpp"
#include "text/jinja/json.hpp"

namespace {

using actorllm::text::chat_template;
using actorllm::text::chat_template_inputs;
namespace jinja = actorllm::text::jinja;

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE_MESSAGE(in.good(), "cannot open " << path.string());
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

std::string string_field(simdjson::dom::element object, const char* key) {
  std::string_view text;
  REQUIRE_MESSAGE(!object[key].get_string().get(text), "missing string field " << key);
  return std::string(text);
}

jinja::value conversation(const std::string& json) { return jinja::parse_json(json); }

// The chat fields of a tokenizer_config.json. On-Demand, because these files hold integers past 64 bits
// (model_max_length) that simdjson's DOM parser rejects.
struct chat_config {
  std::optional<std::string> chat_template;
  std::optional<std::string> bos_token;
  std::optional<std::string> eos_token;
};

std::optional<std::string> token_text(simdjson::ondemand::value v) {
  std::string_view text;
  if (v.type() == simdjson::ondemand::json_type::string && !v.get_string().get(text))
    return std::string(text);
  simdjson::ondemand::object object;
  if (v.type() == simdjson::ondemand::json_type::object && !v.get_object().get(object) &&
      !object["content"].get_string().get(text))
    return std::string(text);
  return std::nullopt;
}

chat_config read_chat_config(const std::filesystem::path& path) {
  simdjson::padded_string json = simdjson::padded_string::load(path.string());
  simdjson::ondemand::parser parser;
  simdjson::ondemand::document doc = parser.iterate(json);
  chat_config config;
  for (auto field : doc.get_object()) {
    std::string_view key = field.unescaped_key();
    simdjson::ondemand::value v = field.value();
    std::string_view text;
    if (key == "chat_template" && !v.get_string().get(text))
      config.chat_template = std::string(text);
    else if (key == "bos_token")
      config.bos_token = token_text(v);
    else if (key == "eos_token")
      config.eos_token = token_text(v);
  }
  return config;
}

}  // namespace

TEST_CASE("chat_template: all 46 golden renderings of expected_renderings.json match byte for byte") {
  auto dir = actorllm::test::model_dir("chat-templates");
  simdjson::dom::parser parser;
  simdjson::padded_string json = simdjson::padded_string::load((dir / "expected_renderings.json").string());
  simdjson::dom::element root;
  REQUIRE(!parser.parse(json).get(root));
  simdjson::dom::array cases;
  REQUIRE(!root["cases"].get_array().get(cases));
  REQUIRE(cases.size() == 46);

  size_t matched = 0;
  for (simdjson::dom::element c : cases) {
    std::string template_file = string_field(c, "template");
    std::string conversation_name = string_field(c, "conversation");
    bool add_generation_prompt = false;
    REQUIRE(!c["add_generation_prompt"].get_bool().get(add_generation_prompt));
    INFO(template_file << " / " << conversation_name << " / add_generation_prompt=" << add_generation_prompt);

    simdjson::dom::element messages;
    REQUIRE(!root["messages"][conversation_name].get(messages));
    chat_template_inputs inputs;
    inputs.messages = jinja::from_json(messages);
    inputs.add_generation_prompt = add_generation_prompt;
    inputs.bos_token = string_field(c, "bos_token");
    inputs.eos_token = string_field(c, "eos_token");
    inputs.extra.emplace_back("date_string", jinja::value(string_field(c, "date_string")));

    chat_template tmpl = chat_template::parse(read_file(dir / template_file));
    std::string rendered = tmpl.render(inputs);
    std::string expected = string_field(c, "rendered");
    CHECK(rendered == expected);
    matched += rendered == expected ? 1 : 0;
  }
  CHECK(matched == 46);
}

TEST_CASE("chat_template: Gemma 2 rejects a system message through raise_exception") {
  auto dir = actorllm::test::model_dir("chat-templates");
  chat_template tmpl = chat_template::parse(read_file(dir / "google-gemma-2-2b-it.jinja"));
  chat_template_inputs inputs;
  inputs.messages = conversation(R"([{"role":"system","content":"Be terse."},{"role":"user","content":"Hi"}])");
  inputs.bos_token = "<bos>";
  try {
    tmpl.render(inputs);
    FAIL("expected raise_exception to stop the render");
  } catch (const jinja::template_error& e) {
    CHECK(e.kind() == jinja::error_kind::raised);
    CHECK(e.reason() == "System role not supported");
    CHECK(std::string(e.what()).find("chat template:1:") == 0);
  }
  // Roles must alternate: two user turns in a row are rejected as well.
  inputs.messages = conversation(R"([{"role":"user","content":"a"},{"role":"user","content":"b"}])");
  try {
    tmpl.render(inputs);
    FAIL("expected raise_exception to stop the render");
  } catch (const jinja::template_error& e) {
    CHECK(e.reason() == "Conversation roles must alternate user/assistant/user/assistant/...");
  }
}

TEST_CASE("chat_template: stories260K reference chat example") {
  auto model = actorllm::test::model_dir("stories260K");
  auto config = read_chat_config(model / "tokenizer_config.json");
  REQUIRE(config.chat_template.has_value());
  REQUIRE(config.bos_token == std::optional<std::string>("<s>"));
  CHECK(config.eos_token == std::optional<std::string>("</s>"));

  simdjson::dom::parser parser;
  simdjson::padded_string json =
      simdjson::padded_string::load((model / "reference" / "expected_outputs.json").string());
  simdjson::dom::element example;
  REQUIRE(!parser.parse(json)["chat_template_example"].get(example));
  simdjson::dom::element messages;
  REQUIRE(!example["messages"].get(messages));
  bool add_generation_prompt = false;
  REQUIRE(!example["add_generation_prompt"].get_bool().get(add_generation_prompt));

  chat_template_inputs inputs;
  inputs.messages = jinja::from_json(messages);
  inputs.add_generation_prompt = add_generation_prompt;
  inputs.bos_token = config.bos_token;
  inputs.eos_token = config.eos_token;
  CHECK(chat_template::parse(*config.chat_template).render(inputs) == string_field(example, "rendered"));
}

TEST_CASE("chat_template: Llama 3 tokenizer_config template renders a conversation") {
  auto config = read_chat_config(actorllm::test::model_dir("tokenizers/llama3") / "tokenizer_config.json");
  REQUIRE(config.chat_template.has_value());
  CHECK(config.bos_token == std::optional<std::string>("<|begin_of_text|>"));
  chat_template_inputs inputs;
  inputs.messages = conversation(R"([{"role":"system","content":"  Be brief.  "},{"role":"user","content":"Hi\n"},)"
                                 R"({"role":"assistant","content":"Hello!"},{"role":"user","content":"2+2?"}])");
  inputs.bos_token = config.bos_token;
  inputs.eos_token = config.eos_token;
  // This template always ends with the assistant header, whatever add_generation_prompt says; contents are trimmed.
  CHECK(chat_template::parse(*config.chat_template).render(inputs) ==
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\n2+2?<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST_CASE("chat_template: Qwen3 tokenizer_config template renders thinking, tools and enable_thinking") {
  auto dir = actorllm::test::model_dir("tokenizers/qwen3");
  auto config = read_chat_config(dir / "tokenizer_config.json");
  REQUIRE(config.chat_template.has_value());
  CHECK(!config.bos_token.has_value());  // null in the file: undefined in the template
  CHECK(config.eos_token == std::optional<std::string>("<|im_end|>"));
  // The file's template is the one staged in chat-templates/ (SOURCE.md says byte-identical).
  CHECK(*config.chat_template == read_file(actorllm::test::model_dir("chat-templates") / "Qwen-Qwen3-0.6B.jinja"));
  chat_template tmpl = chat_template::parse(*config.chat_template);

  chat_template_inputs inputs;
  inputs.messages = conversation(R"([{"role":"user","content":"What is 2+2?"},)"
                                 R"({"role":"assistant","content":"<think>\nadd them\n</think>\n\n4"},)"
                                 R"({"role":"user","content":"Thanks"}])");
  inputs.add_generation_prompt = true;
  inputs.eos_token = config.eos_token;
  // A past assistant turn before the last user query loses its reasoning.
  CHECK(tmpl.render(inputs) ==
        "<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
        "<|im_start|>assistant\n4<|im_end|>\n"
        "<|im_start|>user\nThanks<|im_end|>\n"
        "<|im_start|>assistant\n");

  inputs.extra.emplace_back("enable_thinking", jinja::value(false));
  CHECK(tmpl.render(inputs).ends_with("<|im_start|>assistant\n<think>\n\n</think>\n\n"));

  // Tools are listed as json.dumps output, one per line; a tool call's arguments too.
  inputs.extra.clear();
  inputs.tools =
      conversation(R"([{"type":"function","function":{"name":"add","description":"Add two numbers",)"
                   R"("parameters":{"type":"object","properties":{"a":{"type":"number"},"b":{"type":"number"}}}}}])");
  inputs.messages = conversation(
      R"([{"role":"system","content":"You add."},{"role":"user","content":"1+2"},)"
      R"({"role":"assistant","content":"","tool_calls":[{"type":"function","function":{"name":"add","arguments":{"a":1,"b":2}}}]},)"
      R"({"role":"tool","content":"3"}])");
  CHECK(tmpl.render(inputs) ==
        "<|im_start|>system\nYou add.\n\n# Tools\n\nYou may call one or more functions to assist with the user "
        "query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
        R"({"type": "function", "function": {"name": "add", "description": "Add two numbers", "parameters": )"
        R"({"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}}}})"
        "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
        "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
        "<args-json-object>}\n</tool_call><|im_end|>\n"
        "<|im_start|>user\n1+2<|im_end|>\n"
        "<|im_start|>assistant\n<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": "
        "2}}\n</tool_call><|im_end|>\n"
        "<|im_start|>user\n<tool_response>\n3\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n");
}

TEST_CASE("chat_template: Llama 3.2 takes today's date from strftime_now when no date_string is given") {
  auto dir = actorllm::test::model_dir("chat-templates");
  chat_template tmpl = chat_template::parse(read_file(dir / "meta-llama-Llama-3.2-3B-Instruct.jinja"));
  chat_template_inputs inputs;
  inputs.messages = conversation(R"([{"role":"user","content":"Hi"}])");
  inputs.bos_token = "<|begin_of_text|>";
  // 2024-03-05 12:00 UTC; any time zone puts it on 05 Mar 2024 or a neighbouring day, so pin to local noon.
  std::tm noon{};
  noon.tm_year = 2024 - 1900;
  noon.tm_mon = 2;
  noon.tm_mday = 5;
  noon.tm_hour = 12;
  noon.tm_isdst = -1;
  inputs.now = std::chrono::system_clock::from_time_t(std::mktime(&noon));
  CHECK(tmpl.render(inputs).find("Today Date: 05 Mar 2024\n\n") != std::string::npos);
}

TEST_CASE("chat_template: Llama 3.1 with tools puts them in the first user message as indented JSON") {
  auto dir = actorllm::test::model_dir("chat-templates");
  chat_template tmpl = chat_template::parse(read_file(dir / "meta-llama-Llama-3.1-8B-Instruct.jinja"));
  chat_template_inputs inputs;
  inputs.messages = conversation(R"([{"role":"user","content":"Weather in Paris?"}])");
  inputs.bos_token = "<|begin_of_text|>";
  inputs.tools = conversation(R"([{"name":"get_weather","parameters":{"city":{"type":"string"}}}])");
  inputs.extra.emplace_back("date_string", jinja::value("01 Jan 2025"));
  CHECK(tmpl.render(inputs) ==
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython\n"
        "Cutting Knowledge Date: December 2023\nToday Date: 01 Jan 2025\n\n<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nGiven the following functions, please respond with a JSON for a "
        "function call with its proper arguments that best answers the given prompt.\n\n"
        "Respond in the format {\"name\": function name, \"parameters\": dictionary of argument name and its value}."
        "Do not use variables.\n\n"
        "{\n    \"name\": \"get_weather\",\n    \"parameters\": {\n        \"city\": {\n            \"type\": "
        "\"string\"\n        }\n    }\n}\n\nWeather in Paris?<|eot_id|>");
}

TEST_CASE("chat_template: a syntax error names the chat template, line and column") {
  try {
    chat_template::parse("{% for m in messages %}\n  {{ m.content }}\n{% endif %}");
    FAIL("expected a syntax error");
  } catch (const jinja::template_error& e) {
    CHECK(e.kind() == jinja::error_kind::syntax);
    CHECK(e.line() == 3);
    CHECK(e.column() == 4);
    CHECK(std::string(e.what()).rfind("chat template:3:4: unexpected token 'endif'", 0) == 0);
  }
}

TEST_CASE("chat_template: one parsed template renders on several threads at once") {
  chat_template tmpl =
      chat_template::parse(read_file(actorllm::test::model_dir("chat-templates") / "Qwen-Qwen3-0.6B.jinja"));
  chat_template_inputs inputs;
  inputs.messages =
      conversation(R"([{"role":"system","content":"s"},{"role":"user","content":"q"},)"
                   R"({"role":"assistant","content":"<think>r</think>a"},{"role":"user","content":"q2"}])");
  inputs.add_generation_prompt = true;
  const std::string expected = tmpl.render(inputs);
  std::atomic<int> mismatches{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 50; ++i)
        if (tmpl.render(inputs) != expected)
          ++mismatches;
    });
  for (auto& thread : threads)
    thread.join();
  CHECK(mismatches == 0);
}
