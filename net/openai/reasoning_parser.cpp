// The reasoning part of thinking models' replies.
#include "net/openai/reasoning_parser.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace actorllm::net::openai {
namespace {

constexpr std::string_view open_tag = "<think>";
constexpr std::string_view close_tag = "</think>";

// The length of the longest suffix of `text` that is a proper prefix of `tag` (text that may become the tag).
std::size_t partial_tag(std::string_view text, std::string_view tag) {
  for (std::size_t n = std::min(text.size(), tag.size() - 1); n > 0; --n)
    if (tag.starts_with(text.substr(text.size() - n)))
      return n;
  return 0;
}

}  // namespace

std::optional<reasoning_format> parse_reasoning_format(std::string_view name) {
  if (name == "deepseek_r1")
    return reasoning_format::deepseek_r1;
  if (name == "qwen3")
    return reasoning_format::qwen3;
  return std::nullopt;
}

reasoning_split split_reasoning(reasoning_format format, std::string_view text) {
  reasoning_stream s{format};
  reasoning_stream::delta a = s.push(text);
  reasoning_stream::delta b = s.finish();
  reasoning_split out;
  out.content = a.content + b.content;
  std::string reasoning = a.reasoning + b.reasoning;
  // A reply that reasoned (even emptily: "<think></think>") has a reasoning part.
  const bool reasoned = format == reasoning_format::deepseek_r1 || text.starts_with(open_tag);
  if (reasoned)
    out.reasoning = std::move(reasoning);
  return out;
}

reasoning_stream::delta reasoning_stream::push(std::string_view piece) {
  pending_.append(piece);
  return drain(false);
}

reasoning_stream::delta reasoning_stream::finish() { return drain(true); }

reasoning_stream::delta reasoning_stream::drain(bool final) {
  delta out;
  for (;;) {
    if (state_ == state::start) {
      // Undecided until the reply's first bytes show whether it opens with <think>.
      if (pending_.size() < open_tag.size() && open_tag.starts_with(pending_) && !final)
        return out;
      if (pending_.starts_with(open_tag)) {
        pending_.erase(0, open_tag.size());
        state_ = state::reasoning;
      } else {
        state_ = format_ == reasoning_format::deepseek_r1 ? state::reasoning : state::content;
      }
      continue;
    }
    if (state_ == state::content) {
      out.content += pending_;
      pending_.clear();
      return out;
    }
    // Reasoning: up to </think>, holding back what may be its start.
    const std::size_t end = pending_.find(close_tag);
    if (end != std::string::npos) {
      out.reasoning += pending_.substr(0, end);
      pending_.erase(0, end + close_tag.size());
      state_ = state::content;
      continue;
    }
    const std::size_t keep = final ? 0 : partial_tag(pending_, close_tag);
    out.reasoning += pending_.substr(0, pending_.size() - keep);
    pending_.erase(0, pending_.size() - keep);
    return out;
  }
}

std::optional<api_error> constrain_after_reasoning(common_request& r, const text::tokenizer* tok,
                                                   std::string_view reasoning_parser) {
  if (reasoning_parser.empty() || r.structured_param.empty())
    return std::nullopt;
  const std::optional<int32_t> end = tok != nullptr ? tok->token_to_id(close_tag) : std::nullopt;
  if (!end)
    return api_error::bad_request(
        fmt::format("{} is not supported with --reasoning-parser {} here: the tokenizer has no </think> token, so the "
                    "constraint would apply to the reasoning too",
                    r.structured_param, reasoning_parser),
        r.structured_param);
  r.params.reasoning_end_token_id = *end;
  r.params.reasoning_start_token_id = tok->token_to_id(open_tag).value_or(-1);
  return std::nullopt;
}

}  // namespace actorllm::net::openai
