// OpenAI response bodies built from engine outputs: text and chat completions, their streaming chunks with the
// Server-Sent Events framing, /v1/models and /version.
#pragma once

#include <actorllm/engine_stats.hpp>
#include <actorllm/request_output.hpp>

#include "net/openai/reasoning_parser.hpp"
#include "net/openai/tool_calls.hpp"
#include "util/json_writer.hpp"

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace actorllm::net::openai {

/// Turns token ids into text for logprobs (one token's string) and for echo of a token-id prompt (a whole prompt).
/// The server fills it from the model's tokenizer; unset members give "" (a model without a tokenizer).
struct token_decoder {
  std::function<std::string(int32_t)> token;                        ///< one token's text, as in its logprobs
  std::function<std::string(std::span<const int32_t>)> detokenize;  ///< a token sequence's text

  std::string token_text(int32_t id) const { return token ? token(id) : std::string{}; }
};

/// What every response of one request shares.
struct response_context {
  std::string id;         ///< "cmpl-…" or "chatcmpl-…" (make_response_id)
  int64_t created = 0;    ///< unix seconds
  std::string model;      ///< the served model name
  bool logprobs = false;  ///< the request asked for logprobs (else `logprobs` is null)
  bool echo = false;      ///< completions: prepend the prompt to the text
  /// completions: echo with max_tokens 0: the choice is the prompt alone (text, logprobs), no generated token
  bool echo_only = false;
  bool include_usage = false;  ///< streaming: a last chunk with usage and no choices
  /// usage carries prompt_tokens_details.cached_tokens (--enable-prompt-tokens-details, as in vLLM).
  bool prompt_tokens_details = false;
  int32_t n = 1;  ///< sequences per prompt (choice index = prompt index * n + sequence index)
  token_decoder decoder;
  /// vLLM's return_token_ids: choices carry `token_ids` and the prompt's `prompt_token_ids` (else both null).
  bool return_token_ids = false;
  /// The prompt ids of each prompt (for return_token_ids; chat: one).
  std::vector<std::vector<int32_t>> prompt_token_ids;
  /// stream_options.continuous_usage_stats: every streamed chunk carries the usage so far.
  bool continuous_usage = false;
  /// Chat echo: text that starts every choice's content (the last message's, vLLM's rule); empty: none.
  std::string echo_text;
  /// Chat tool calls: how the output becomes `tool_calls` (none: it is content).
  enum class tool_mode { none, parse, required, named } tools = tool_mode::none;
  tool_parser parser = tool_parser::hermes;  ///< tool_mode::parse: the output's format
  std::string named_tool;                    ///< tool_mode::named: the function's name
  /// --reasoning-parser: chat replies split into reasoning (message.reasoning_content and .reasoning, streamed as
  /// such) and content; tool calls are parsed from the content. Nothing: no split.
  std::optional<reasoning_format> reasoning;
  bool include_reasoning = true;  ///< the request's include_reasoning: false leaves the reasoning out
  /// vLLM's logprob_token_ids: each token's logprobs hold the request's listed tokens (sample_logprobs::top) instead
  /// of the top k; chat's top_logprobs then list the sampled token first, then the listed ones (vLLM's shape).
  bool logprob_token_ids = false;
};

/// A fresh id: `prefix` followed by 32 random hex digits ("cmpl-", "chatcmpl-").
std::string make_response_id(std::string_view prefix);

/// "stop", "length" or "abort" (vLLM's word for a sequence cut off by an abort).
std::string_view finish_reason_name(finish_reason reason);

/// A /v1/completions response (object "text_completion") for the outputs of every prompt, in prompt order.
std::string completion_response_json(std::span<const request_output> outputs, const response_context& ctx);

/// A /v1/chat/completions response (object "chat.completion").
std::string chat_response_json(const request_output& output, const response_context& ctx);

/// A /v1/chat/completions/batch response (object "chat.completion", vLLM's batch shape): choice i answers
/// conversation i (n is 1), `echo_texts[i]` starts its content (ctx.echo_text is not read), usage sums every
/// conversation's, and prompt_logprobs and prompt_token_ids are null (return_token_ids: each choice's token_ids).
std::string chat_batch_response_json(std::span<const request_output> outputs, const response_context& ctx,
                                     std::span<const std::string> echo_texts);

/// One Server-Sent Event: `data: <json>\n\n`. `json` must be a single line (json_writer's output is).
std::string sse_event(std::string_view json);
/// The stream terminator `data: [DONE]\n\n`.
std::string_view sse_done();

/// The SSE body of a streaming /v1/completions request, event by event. Not thread-safe (one per request).
/// Its chunks are CreateCompletionResponse objects without a `usage` key (that schema's usage is not nullable);
/// with include_usage the last chunk before [DONE] carries usage and `"choices": []`.
class completion_stream {
 public:
  explicit completion_stream(response_context ctx) : ctx_(std::move(ctx)) {}

  /// With echo: one chunk per choice holding the prompt text (call once, before any delta); else "".
  std::string begin(std::span<const request_output> prompts);
  /// The event for one delta of prompt `prompt_index`; "" when it carries nothing (no text, no end, no logprobs).
  std::string on_delta(uint32_t prompt_index, const stream_delta& delta);
  /// The usage chunk (with include_usage) and the terminator.
  std::string end(const usage_info& usage);

 private:
  response_context ctx_;
  std::vector<int64_t> text_offset_;   // per choice: characters sent so far (logprobs' text_offset)
  std::vector<bool> sent_prompt_ids_;  // per choice: prompt_token_ids went out (return_token_ids)
  int64_t completion_tokens_ = 0;      // streamed so far (continuous usage)
};

/// The SSE body of a streaming /v1/chat/completions request: a role chunk per choice, then content deltas, the
/// finish_reason on the last content chunk of each choice, optionally a usage chunk, then [DONE].
class chat_stream {
 public:
  explicit chat_stream(response_context ctx) : ctx_(std::move(ctx)) {}

  /// The first chunk of each choice: delta {"role":"assistant","content":""}.
  std::string begin();
  /// The event for one delta; "" when it carries nothing.
  std::string on_delta(const stream_delta& delta);
  /// The usage chunk (with include_usage) and the terminator.
  std::string end(const usage_info& usage);

 private:
  std::string named_call_delta(const stream_delta& delta);
  std::string content_delta(const stream_delta& delta);
  /// A chunk of choice `index` up to its choice's members (header, choices, index): the caller writes the rest of
  /// the choice and closes it and the choices array.
  void begin_chunk(json_writer& w, uint32_t index) const;
  /// The chunk's usage (running with continuous_usage_stats, null with include_usage) and its SSE event.
  std::string end_chunk(json_writer& w, int64_t completion_tokens) const;

  response_context ctx_;
  std::vector<reasoning_stream> reasoning_;  // per choice, with a reasoning parser
  int64_t completion_tokens_ = 0;            // streamed so far (continuous usage)
  std::vector<std::string> held_;            // per choice, with tool calls: the text held back until the choice ends
  std::vector<bool> call_started_;           // per choice, named function: its call's first delta (id, name) went out
  std::vector<std::size_t> streamed_;        // per choice, auto tool choice: bytes of held_ already sent as content
};

/// One entry of /v1/models.
struct model_card {
  std::string id;
  int64_t created = 0;
  std::string owned_by = "actorllm";
  std::string root;  ///< the model path or repository it was loaded from
  int32_t max_model_len = 0;
  std::string parent;  ///< a LoRA adapter's base model; empty: null
};

/// `{"object":"list","data":[{"id","object":"model","created","owned_by","root","max_model_len"}…]}`.
std::string models_json(std::span<const model_card> models);

/// One Model object, as GET /v1/models/{model} answers: `{"id","object":"model","created","owned_by",…}`.
std::string model_json(const model_card& model);

/// `{"version":"<actorllm version>"}`.
std::string version_json();

/// GET /health's body while the engine serves: `{}` with one replica (as vLLM); with data-parallel replicas
/// `{"replicas":[{"replica":0,"healthy":true},…],"degraded":[{"replica":1,"reason":"…","restarts":1}]}`, so a
/// load balancer sees which replicas are down while the endpoint still serves.
std::string health_json(const engine_stats& stats);

}  // namespace actorllm::net::openai
