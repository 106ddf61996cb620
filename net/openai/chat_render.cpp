// Chat templates for the OpenAI routes: see chat_render.hpp.
#include "net/openai/chat_render.hpp"

#include "text/jinja/json.hpp"
#include "text/tokenizer.hpp"

#include <fmt/format.h>
#include <simdjson.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string_view>
#include <utility>
#include <vector>

namespace actorllm::net::openai {

namespace {

/// An assistant message's tool_calls as templates read them: each call's `arguments` a dict when it is a JSON
/// object (chat templates write it with tojson, as transformers passes it), else as given.
text::jinja::value template_tool_calls(const std::string& json) {
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  const simdjson::padded_string padded{json};
  if (parser.parse(padded).get(root))
    return text::jinja::parse_json(json);
  std::vector<text::jinja::value> calls;
  for (simdjson::dom::element call : root.get_array()) {
    std::string_view name, args, id;
    if (call["function"]["name"].get(name) != simdjson::SUCCESS)
      name = {};
    text::jinja::value arguments = text::jinja::value::dict();
    simdjson::dom::element args_v;
    if (call["function"]["arguments"].get(args_v) == simdjson::SUCCESS) {
      if (args_v.get(args) == simdjson::SUCCESS) {
        try {
          arguments = text::jinja::parse_json(args);
        } catch (const std::exception&) {
          arguments = text::jinja::value(std::string{args});
        }
      } else {
        arguments = text::jinja::from_json(args_v);
      }
    }
    if (call["id"].get(id) != simdjson::SUCCESS)
      id = {};
    std::vector<std::pair<std::string, text::jinja::value>> fn;
    fn.reserve(2);
    fn.emplace_back("name", std::string{name});
    fn.emplace_back("arguments", std::move(arguments));
    std::vector<std::pair<std::string, text::jinja::value>> entry;
    entry.reserve(3);
    entry.emplace_back("id", std::string{id});
    entry.emplace_back("type", std::string{"function"});
    entry.emplace_back("function", text::jinja::value::dict(std::move(fn)));
    calls.push_back(text::jinja::value::dict(std::move(entry)));
  }
  return text::jinja::value::list(std::move(calls));
}

}  // namespace

text::chat_template load_chat_template(const std::string& value) {
  std::string source;
  std::string origin;
  std::error_code ec;
  if (std::filesystem::is_regular_file(value, ec)) {
    std::ifstream in{value, std::ios::binary};
    std::stringstream ss;
    ss << in.rdbuf();
    if (!in && !in.eof())
      throw std::runtime_error(fmt::format("--chat-template: cannot read {}", value));
    source = ss.str();
    origin = value;
  } else if (value.find("{{") != std::string::npos || value.find("{%") != std::string::npos) {
    source = value;
    origin = "the inline template";
  } else {
    throw std::runtime_error(
        fmt::format("--chat-template: '{}' is neither a file nor a Jinja template (no {{{{ or {{% in it)", value));
  }
  try {
    return text::chat_template::parse(std::move(source));
  } catch (const std::exception& e) {
    throw std::runtime_error(fmt::format("--chat-template: {} does not parse: {}", origin, e.what()));
  }
}

result<const text::chat_template*> chat_template_for(const chat_request& r, const text::chat_template* server_template,
                                                     std::optional<text::chat_template>& own) {
  if (r.chat_template) {
    try {
      own = text::chat_template::parse(*r.chat_template);
    } catch (const std::exception& e) {
      return api_error::bad_request(std::string{"chat_template does not parse: "} + e.what(), "chat_template");
    }
    return &*own;
  }
  if (server_template == nullptr)
    return api_error::bad_request("this model has no chat template", "messages");
  return server_template;
}

result<std::string> render_chat(const text::chat_template& tmpl, const text::tokenizer& tok, const chat_request& r,
                                bool content_as_parts, std::span<const chat_message> messages) {
  text::chat_template_inputs in;
  std::vector<text::jinja::value> list;
  for (const chat_message& m : messages) {
    std::vector<std::pair<std::string, text::jinja::value>> entries{{"role", m.role}, {"content", m.content}};
    if (content_as_parts && !m.parts.empty()) {  // --chat-template-content-format openai
      std::vector<text::jinja::value> parts;
      for (const std::string& p : m.parts)
        parts.push_back(text::jinja::value::dict({{"type", "text"}, {"text", p}}));
      entries[1].second = text::jinja::value::list(std::move(parts));
    }
    if (m.name)
      entries.emplace_back("name", *m.name);
    if (m.tool_call_id)
      entries.emplace_back("tool_call_id", *m.tool_call_id);
    if (!m.tool_calls_json.empty())
      entries.emplace_back("tool_calls", template_tool_calls(m.tool_calls_json));
    list.push_back(text::jinja::value::dict(std::move(entries)));
  }
  in.messages = text::jinja::value::list(std::move(list));
  in.add_generation_prompt = r.add_generation_prompt;
  in.bos_token = tok.bos_token();
  in.eos_token = tok.eos_token();
  for (const auto& [name, json] : r.template_vars)
    in.extra.emplace_back(name, text::jinja::parse_json(json));
  if (!r.tools.empty() && r.tool_choice != "none")
    in.tools = text::jinja::parse_json(r.tools_json);
  std::string out;
  try {
    out = tmpl.render(in);
  } catch (const std::exception& e) {
    return api_error::bad_request(std::string{"chat template failed: "} + e.what(), "messages");
  }
  if (r.continue_final_message) {
    // As vLLM: cut what the template wrote after the last message's content (its end-of-turn), so that the output
    // continues that message.
    const std::string& last = messages.back().content;
    const auto at = last.empty() ? std::string::npos : out.rfind(last);
    if (at == std::string::npos)
      return api_error::bad_request(
          "continue_final_message: the rendered template does not contain the final message's content",
          "continue_final_message");
    out.resize(at + last.size());
  }
  return out;
}

result<std::string> render_chat(const text::chat_template* server_template, const text::tokenizer& tok,
                                const chat_request& r, bool content_as_parts) {
  std::optional<text::chat_template> own;
  auto tmpl = chat_template_for(r, server_template, own);
  if (!tmpl)
    return tmpl.error();
  return render_chat(**tmpl, tok, r, content_as_parts, r.messages);
}

std::string chat_echo_text(const chat_request& r, std::span<const chat_message> messages) {
  if (r.echo && (!r.add_generation_prompt || messages.back().role == "assistant"))
    return messages.back().content;
  return {};
}

}  // namespace actorllm::net::openai
