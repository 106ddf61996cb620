// Chat templates: turning an OpenAI-style message list into the prompt text a model was trained on, by rendering
// the Jinja template from the model's tokenizer_config.json the way Hugging Face transformers'
// apply_chat_template does (same variables, same Jinja environment: trim_blocks, lstrip_blocks, loop controls,
// raise_exception, strftime_now, tojson as json.dumps).
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "text/jinja/template.hpp"
#include "text/jinja/value.hpp"

namespace actorllm::text {

/// The variables of one render.
struct chat_template_inputs {
  /// List of message dicts ({"role": ..., "content": ..., "tool_calls": ...}), typically from
  /// jinja::parse_json / jinja::from_json of a request body.
  jinja::value messages = jinja::value::list();
  /// Append the header that starts the assistant's turn.
  bool add_generation_prompt = false;
  /// Special tokens; absent ones are undefined in the template (as in transformers, which passes only the
  /// tokens a tokenizer has).
  std::optional<std::string> bos_token;
  std::optional<std::string> eos_token;
  /// Tool schemas (a list of dicts); absent means `tools` is None, as transformers passes it.
  std::optional<jinja::value> tools;
  /// Further keyword variables: enable_thinking, date_string, custom_tools, builtin_tools, documents, ...
  std::vector<std::pair<std::string, jinja::value>> extra;
  /// What strftime_now() formats (Llama 3.2 uses it for "Today Date"); the current time when absent.
  std::optional<std::chrono::system_clock::time_point> now;
};

/// A parsed chat template. Immutable and cheap to copy; render() may run on several threads at once.
class chat_template {
 public:
  /// Parses a template. Throws jinja::template_error (syntax) naming "chat template", the line and the column.
  static chat_template parse(std::string source);

  /// Renders the prompt. Throws jinja::template_error: kind() == error_kind::raised when the template rejects the
  /// conversation with raise_exception (reason() is the template's message), runtime or limit otherwise.
  std::string render(const chat_template_inputs& inputs, const jinja::render_limits& limits = {}) const;

  /// The template text.
  const std::string& source() const noexcept { return source_; }

 private:
  chat_template(std::string source, jinja::compiled_template compiled)
      : source_(std::move(source)), compiled_(std::move(compiled)) {}
  std::string source_;
  jinja::compiled_template compiled_;
};

}  // namespace actorllm::text
