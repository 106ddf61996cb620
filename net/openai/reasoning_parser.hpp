// vLLM's --reasoning-parser for thinking models: the part of a reply between <think> and </think> is the reasoning
// (message.reasoning_content / reasoning), the rest the content. Whole replies and streamed pieces (a tag split over
// two pieces is held back until it is whole).
#pragma once

#include "net/openai/api_error.hpp"
#include "net/openai/requests.hpp"
#include "text/tokenizer.hpp"

#include <optional>
#include <string>
#include <string_view>

namespace actorllm::net::openai {

/// deepseek_r1: the reply starts inside the reasoning (the template opened <think>; a leading <think> is dropped)
/// and </think> ends it; a reply without </think> is all reasoning (cut off while thinking). qwen3: a reply that
/// starts with <think> reasons until </think>; one that does not start with it is all content (thinking off).
enum class reasoning_format { deepseek_r1, qwen3 };

/// The format named `name` (deepseek_r1, qwen3); nothing for another name.
std::optional<reasoning_format> parse_reasoning_format(std::string_view name);

/// A reply split into its reasoning (nothing when it has none) and its content.
struct reasoning_split {
  std::optional<std::string> reasoning;
  std::string content;
};

/// Splits a whole reply.
reasoning_split split_reasoning(reasoning_format format, std::string_view text);

/// Splits a reply piece by piece: what each piece adds to the reasoning and to the content. Text that may be the
/// start of a tag is held back until the next piece or finish().
class reasoning_stream {
 public:
  explicit reasoning_stream(reasoning_format format) : format_(format) {}

  struct delta {
    std::string reasoning;
    std::string content;
  };
  delta push(std::string_view piece);
  /// The reply ended: whatever was held back, in the part it belongs to.
  delta finish();

 private:
  enum class state { start, reasoning, content };
  delta drain(bool final);

  reasoning_format format_;
  state state_ = state::start;
  std::string pending_;  // text not yet assigned (a possible tag start)
};

/// With a reasoning parser (`reasoning_parser` non-empty), a request's structured output (or required/named tool
/// choice) applies after the reasoning, as vLLM applies it: sets r.params' think-start and think-end token ids from
/// `tok` so that the sampler leaves each sequence free until it samples </think>. A 400 naming the constraint's field
/// when `tok` (null: none) has no </think> token: the constraint would then hold the reasoning too. Nothing to do
/// without a reasoning parser or a constraint.
std::optional<api_error> constrain_after_reasoning(common_request& r, const text::tokenizer* tok,
                                                   std::string_view reasoning_parser);

}  // namespace actorllm::net::openai
