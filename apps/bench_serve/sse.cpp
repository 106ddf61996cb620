// Server-sent-events framing and completion-chunk parsing for `actorllm bench serve`.
#include "apps/bench_serve/sse.hpp"

#include <simdjson.h>

#include <stdexcept>

namespace actorllm::app::bench {

std::vector<std::string> sse_reader::feed(std::string_view bytes) {
  pending_.append(bytes);
  std::vector<std::string> out;
  std::size_t start = 0;
  for (;;) {
    const auto eol = pending_.find('\n', start);
    if (eol == std::string::npos)
      break;
    std::string_view line{pending_.data() + start, eol - start};
    if (!line.empty() && line.back() == '\r')
      line.remove_suffix(1);
    if (line.rfind("data:", 0) == 0) {
      line.remove_prefix(5);
      if (!line.empty() && line.front() == ' ')
        line.remove_prefix(1);
      out.emplace_back(line);
    }
    start = eol + 1;
  }
  pending_.erase(0, start);
  return out;
}

completion_chunk parse_completion_chunk(std::string_view payload) {
  completion_chunk c;
  if (payload == "[DONE]") {
    c.done = true;
    return c;
  }
  thread_local simdjson::dom::parser parser;
  simdjson::dom::element doc;
  if (parser.parse(payload.data(), payload.size()).get(doc) != simdjson::SUCCESS || !doc.is_object())
    throw std::runtime_error("malformed stream chunk: " + std::string{payload.substr(0, 200)});
  simdjson::dom::element error;
  if (doc["error"].get(error) == simdjson::SUCCESS && !error.is_null()) {
    std::string_view msg;
    if (error["message"].get_string().get(msg) == simdjson::SUCCESS)
      c.error = std::string{msg};
    else
      c.error = simdjson::to_string(error);
    return c;
  }
  simdjson::dom::array choices;
  if (doc["choices"].get_array().get(choices) == simdjson::SUCCESS && choices.size() > 0) {
    simdjson::dom::element first = choices.at(0);
    std::string_view text;
    if (first["text"].get_string().get(text) == simdjson::SUCCESS ||
        first.at_pointer("/delta/content").get_string().get(text) == simdjson::SUCCESS)
      c.text = std::string{text};
    simdjson::dom::array token_logprobs;
    if (first.at_pointer("/logprobs/token_logprobs").get_array().get(token_logprobs) == simdjson::SUCCESS)
      c.logprob_tokens = static_cast<int64_t>(token_logprobs.size());
  }
  simdjson::dom::object usage;
  if (doc["usage"].get_object().get(usage) == simdjson::SUCCESS) {
    int64_t v = 0;
    if (usage["prompt_tokens"].get_int64().get(v) == simdjson::SUCCESS)
      c.prompt_tokens = v;
    if (usage["completion_tokens"].get_int64().get(v) == simdjson::SUCCESS)
      c.completion_tokens = v;
  }
  return c;
}

std::string error_message_of(std::string_view body) {
  thread_local simdjson::dom::parser parser;
  simdjson::dom::element doc;
  std::string_view msg;
  if (parser.parse(body.data(), body.size()).get(doc) == simdjson::SUCCESS &&
      doc.at_pointer("/error/message").get_string().get(msg) == simdjson::SUCCESS)
    return std::string{msg};
  std::string out{body.substr(0, 300)};
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r'))
    out.pop_back();
  return out;
}

}  // namespace actorllm::app::bench
