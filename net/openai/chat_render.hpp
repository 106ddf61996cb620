// Chat templates for the OpenAI routes: the server's template (--chat-template or the tokenizer's), a request's own,
// and the text a template renders for a conversation with the request's tools, template variables and messages
// (tool calls shaped as templates read them), plus vLLM's chat echo.
#pragma once

#include "net/openai/api_error.hpp"
#include "net/openai/requests.hpp"
#include "text/chat_template.hpp"

#include <optional>
#include <span>
#include <string>

namespace actorllm::text {
class tokenizer;
}

namespace actorllm::net::openai {

/// --chat-template's value: a file's path, or (when no such file exists) the template itself if it looks like Jinja.
/// Throws std::runtime_error naming the problem.
text::chat_template load_chat_template(const std::string& value);

/// The template that renders `r`: its own chat_template, parsed into `own`, or else `server_template`. A 400 when
/// the request's does not parse, or when there is neither.
result<const text::chat_template*> chat_template_for(const chat_request& r, const text::chat_template* server_template,
                                                     std::optional<text::chat_template>& own);

/// The text `tmpl` renders for `messages` (r.messages, or one conversation of a batch) with the request's other
/// template inputs, or the reason it cannot be rendered. `content_as_parts`: --chat-template-content-format openai.
result<std::string> render_chat(const text::chat_template& tmpl, const text::tokenizer& tok, const chat_request& r,
                                bool content_as_parts, std::span<const chat_message> messages);

/// r.messages rendered with chat_template_for's template.
result<std::string> render_chat(const text::chat_template* server_template, const text::tokenizer& tok,
                                const chat_request& r, bool content_as_parts);

/// vLLM's chat echo: the last message's content starts the reply when it is the reply's role (always when no
/// generation prompt is added: then the reply continues that message); else "".
std::string chat_echo_text(const chat_request& r, std::span<const chat_message> messages);

}  // namespace actorllm::net::openai
