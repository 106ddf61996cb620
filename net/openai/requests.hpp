// Parsing and validation of OpenAI /v1/completions and /v1/chat/completions request bodies (simdjson) into plain
// structs that map onto actorllm::prompt and actorllm::sampling_params.
//
// Rules, as vLLM and OpenAI apply them:
// - Every field of OpenAI's request schemas and of vLLM's extras is read through the table in request_fields.hpp:
//   implemented, or refused with a 400 naming it. Fields in neither are ignored (as vLLM does) and listed in
//   `ignored_fields` for the server to log. A JSON `null` for an optional field means "not given".
// - Integers may be written as integral numbers (`2.0`); floats accept any JSON number.
// - Every rejected body gives a 400 (413 when larger than the limit) whose `param` names the field.
#pragma once

#include <actorllm/llm.hpp>
#include <actorllm/sampling_params.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "net/openai/api_error.hpp"
#include "net/openai/tool_calls.hpp"
#include "text/structured/structured_limits.hpp"

namespace actorllm::net::openai {

/// Limits the parser enforces before and while reading a body. Each count is checked before the field's entries
/// are read or copied; a request over one gets a 400 whose message names the field and the serve flag that sets it.
struct parse_limits {
  std::size_t max_body_bytes = 16u << 20;   ///< larger bodies are refused with 413
  std::size_t max_depth = 32;               ///< deeper JSON nesting is refused with 400
  int32_t max_logprobs = 20;                ///< the most logprobs / top_logprobs a request may ask for
  std::size_t max_logprob_token_ids = 128;  ///< entries of logprob_token_ids (vLLM's MAX_LOGPROB_TOKEN_IDS)
  /// The most sequences (n) one prompt may ask for: the engine's --max-num-seqs (more could never run at once).
  /// Checked before any other field is read.
  int32_t max_n = 256;
  std::size_t max_stop_strings = 128;  ///< --max-stop-strings: entries of `stop`
  std::size_t max_stop_bytes = 16384;  ///< --max-stop-bytes: the bytes of all of `stop` together
  /// --max-prompts-per-request: entries of a completions prompt list, conversations of a batch chat request
  std::size_t max_prompts = 1024;
  std::size_t max_tools = 128;           ///< --max-tools: entries of `tools`
  std::size_t max_template_kwargs = 64;  ///< --max-chat-template-kwargs: keys of chat_template_kwargs
  std::size_t max_bad_words = 128;       ///< --max-bad-words: entries of `bad_words`
  /// Structured outputs: a regex, schema or choice list larger, deeper or costlier than these is refused with 400.
  text::structured::structured_limits structured{};
};

/// Defaults for the sampling fields a request leaves out (from the model's generation_config.json, as vLLM's
/// --generation-config auto applies them); unset members keep the OpenAI/vLLM defaults.
struct sampling_defaults {
  std::optional<float> temperature;
  std::optional<float> top_p;
  std::optional<int32_t> top_k;
  std::optional<float> min_p;
  std::optional<float> repetition_penalty;
  std::optional<int32_t> max_tokens;  ///< generation_config's max_new_tokens

  /// Whether no member is set.
  bool empty() const { return !temperature && !top_p && !top_k && !min_p && !repetition_penalty && !max_tokens; }
};

/// Fields both endpoints share.
struct common_request {
  std::string model;                 ///< empty when the client sent none (the server picks its model)
  actorllm::sampling_params params;  ///< validated with actorllm::validate
  bool stream = false;
  bool include_usage = false;  ///< stream_options.include_usage (only with stream)
  std::optional<std::string> user;
  int32_t priority = 0;  ///< lower runs first under the "priority" scheduling policy
  /// vLLM's cache_salt: only requests with the same salt share prefix-cache blocks. A non-empty string when given.
  std::optional<std::string> cache_salt;
  bool echo = false;  ///< completions: prepend the prompt; chat: start with the last message's content (vLLM's rule)
  bool max_tokens_defaulted = false;  ///< params.max_tokens came from sampling_defaults (the server may clamp it)
  /// add_special_tokens: whether the tokenizer adds its special tokens (bos) to the prompt; unset: the endpoint's
  /// default (completions yes, chat no: the template writes them).
  std::optional<bool> add_special_tokens;
  std::optional<std::string> request_id;          ///< vLLM's request_id: the response id's suffix
  std::optional<int32_t> truncate_prompt_tokens;  ///< keep the last k prompt tokens; -1: max_model_len
  bool return_tokens_as_token_ids = false;        ///< logprob tokens as "token_id:N"
  bool return_token_ids = false;                  ///< choices carry token_ids, and prompt_token_ids
  bool continuous_usage_stats = false;            ///< stream_options.continuous_usage_stats (only with stream)
  /// The field that set params.structured_pattern (response_format, structured_outputs.json, guided_regex, ...),
  /// for the 400 when the pattern cannot be compiled; empty: no structured output.
  std::string structured_param;
  /// Fields in no schema the server knows, in body order (ignored, as vLLM ignores them; the server logs them).
  std::vector<std::string> ignored_fields;

  friend bool operator==(const common_request&, const common_request&) = default;
};

/// A parsed /v1/completions body.
struct completion_request : common_request {
  /// One entry per prompt (a list of strings or of id lists gives several); never empty, no entry empty.
  std::vector<actorllm::prompt> prompts;
  /// echo with max_tokens 0 (lm-evaluation-harness's loglikelihood request): score the prompt, return it alone. The
  /// engine runs one token, which the response leaves out (vLLM does the same).
  bool echo_only = false;

  friend bool operator==(const completion_request&, const completion_request&) = default;
};

/// One chat message with its text content (text parts joined by "\n", as vLLM flattens them).
struct chat_message {
  std::string role;  ///< system, developer, user, assistant, tool, or any other role the template knows
  std::string content;
  std::optional<std::string> name;
  std::optional<std::string> tool_call_id;  ///< a tool message's answer to this call
  std::vector<std::string> parts;           ///< the text parts as given (a string content is one part)
  std::string tool_calls_json;              ///< an assistant message's tool_calls, minified JSON; empty: none

  friend bool operator==(const chat_message&, const chat_message&) = default;
};

/// A parsed /v1/chat/completions body.
struct chat_request : common_request {
  std::vector<chat_message> messages;        ///< never empty
  bool logprobs = false;                     ///< return logprobs of the output tokens
  int32_t top_logprobs = 0;                  ///< alternatives per token (only with logprobs)
  bool add_generation_prompt = true;         ///< end the rendered template with the assistant's turn
  bool continue_final_message = false;       ///< the output continues the last message (no end-of-turn after it)
  std::optional<std::string> chat_template;  ///< a template for this request instead of the server's
  /// Further template variables, each (name, its JSON text): documents, reasoning_effort and the members of
  /// chat_template_kwargs, in that order (a later one of the same name wins).
  std::vector<std::pair<std::string, std::string>> template_vars;
  std::vector<tool_function> tools;  ///< the request's functions
  std::string tools_json;            ///< the request's `tools` array, minified (for the chat template)
  /// tool_choice: "none", "auto", "required" or "function" (tool_choice_name); empty: not given (auto with tools).
  std::string tool_choice;
  std::string tool_choice_name;
  bool parallel_tool_calls = true;  ///< false: at most one call
  bool include_reasoning = true;    ///< with --reasoning-parser: false leaves the reasoning out of the reply

  friend bool operator==(const chat_request&, const chat_request&) = default;
};

/// A parsed /v1/chat/completions/batch body (vLLM's BatchChatCompletionRequest): `messages` is a list of
/// conversations, each rendered and generated as a chat request of its own with every other field of the body.
/// As vLLM's: no streaming, n 1, no tools (tool_choice only "none"); prompt_logprobs are refused too (a chat
/// response has one prompt_logprobs, for one conversation). chat_request::messages stays empty.
struct chat_batch_request : chat_request {
  std::vector<std::vector<chat_message>> conversations;  ///< never empty, no conversation empty

  friend bool operator==(const chat_batch_request&, const chat_batch_request&) = default;
};

/// Parses and validates a /v1/completions body. max_tokens defaults to defaults.max_tokens, else 16 (OpenAI and
/// vLLM); the other sampling fields the body leaves out take `defaults` where set.
result<completion_request> parse_completion_request(std::string_view body, const parse_limits& limits = {},
                                                    const sampling_defaults& defaults = {});

/// Parses and validates a /v1/chat/completions body. max_completion_tokens wins over max_tokens; with neither,
/// defaults.max_tokens, else unset (the rest of the context). Other fields left out take `defaults` where set.
result<chat_request> parse_chat_request(std::string_view body, const parse_limits& limits = {},
                                        const sampling_defaults& defaults = {});

/// Parses and validates a /v1/chat/completions/batch body, as parse_chat_request does a chat body; errors in a
/// conversation name it ("messages[1][0].role is required").
result<chat_batch_request> parse_chat_batch_request(std::string_view body, const parse_limits& limits = {},
                                                    const sampling_defaults& defaults = {});

/// The 400 for a request the engine refused as longer than its context (errc::exceeds_max_model_len: prompt +
/// max_tokens over max_model_len, or a prompt that leaves no room when max_tokens is unset), in vLLM's words with the
/// numbers. `max_tokens` is what the client asked for (unset: not given); vLLM blames the input when the prompt alone
/// is too long or no max_tokens was given (param input_tokens), else the total (param max_tokens).
api_error context_length_error(int64_t prompt_tokens, std::optional<int32_t> max_tokens, int32_t max_model_len);

/// The model check: a request naming no model gets the first served one; a name that is not served is a 404 with
/// vLLM's wording. Returns the served name the request resolves to, or the error.
result<std::string> resolve_model(std::string_view requested, std::span<const std::string> served_names);

}  // namespace actorllm::net::openai
