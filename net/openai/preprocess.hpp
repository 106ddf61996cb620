// The one path every generating request takes before the engine sees it (/v1/completions, /v1/chat/completions,
// /v1/chat/completions/batch, /invocations): content type, parse, size against the server's capacity, the token ids
// it names, structured output, the model or adapter it names, tokenizing (a chat rendered by its template first),
// truncation, a defaulted max_tokens clamped to the room the prompts leave, the response's shape, and admission.
// Its result is submitted as it is (exchange.hpp). The context-length limit is the engine's check, not this one's.
#pragma once

#include "net/admission.hpp"
#include "net/http_server.hpp"
#include "net/openai/api_error.hpp"
#include "net/openai/requests.hpp"
#include "net/openai/responses.hpp"
#include "text/structured/structured_limits.hpp"
#include "text/structured/token_constraint.hpp"

#include <actorllm/llm.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace actorllm::text {
class tokenizer;
class chat_template;
}  // namespace actorllm::text

namespace actorllm::net {
class lora_service;
}

namespace actorllm::net::openai {

/// The generating endpoints.
enum class endpoint {
  completions,  ///< /v1/completions: prompts (text or ids), a text_completion answer
  chat,         ///< /v1/chat/completions: one conversation
  chat_batch,   ///< /v1/chat/completions/batch (vLLM's): one choice per conversation, never streamed
};

/// What preprocessing reads of the server's settings (service_config).
struct preprocess_settings {
  parse_limits limits;         ///< the request-size flags, n bounded by max_num_seqs
  sampling_defaults defaults;  ///< --generation-config
  /// The tokenizer directory structured outputs compile their token masks against (absolute, as the engine's).
  std::string structured_tokenizer_dir;
  text::structured::structured_limits structured_limits;
  std::string reasoning_parser;  ///< --reasoning-parser (empty: none)
  std::string tool_call_parser;  ///< --tool-call-parser
  bool enable_auto_tool_choice = false;
  bool content_as_parts = false;              ///< --chat-template-content-format openai
  bool enable_force_include_usage = false;    ///< --enable-force-include-usage
  bool enable_prompt_tokens_details = false;  ///< --enable-prompt-tokens-details
  bool return_tokens_as_token_ids = false;    ///< --return-tokens-as-token-ids
  int64_t max_queued_requests = -1;           ///< --max-queued-requests (named in the capacity error)
};

/// A generating request ready to submit: what the engine runs and how its answer is shaped.
struct prepared_request {
  endpoint kind = endpoint::completions;
  /// One per prompt or conversation: token ids (with their text when the client gave text), salt and adapter set.
  std::vector<prompt> prompts;
  sampling_params params;
  int32_t priority = 0;
  bool stream = false;
  response_context ctx;
  std::vector<request_output> echo;     ///< completions: each prompt's text and ids (a streamed echo starts with them)
  std::vector<std::string> echo_texts;  ///< chat batch: each conversation's echo text
  /// max_tokens as the client set it (unset: not given, or given by --generation-config): how the engine's
  /// context-length refusal is worded (vLLM's two messages).
  std::optional<int32_t> requested_max_tokens;
  /// The structured-output constraint, compiled here and held while the request runs: the cache may drop it
  /// meanwhile, yet the sampler still finds this one instead of compiling it again.
  std::shared_ptr<const text::structured::token_constraint> constraint;
  admission_gate::slot slot;  ///< its sequences' place; given back when the last engine request ends
};

/// Checks a body declared JSON (vLLM answers any other Content-Type with a 400 before reading the body).
std::optional<api_error> check_json_content_type(const http_request& req);

/// What a handler answers once handler_pool::cancelled() says its request is cancelled: nobody reads it when the
/// client hung up; a client of a server that stops gets this 503.
api_error cancelled_request();

/// Prepares generating requests against one engine. Every member it holds must outlive it; prepare() may run on
/// several threads at once.
class preprocessor {
 public:
  /// `tok` and `chat_template` may be null (no tokenizer: token-id prompts only; no template: chat answers 400).
  preprocessor(const LLM& llm, const text::tokenizer* tok, const text::chat_template* chat_template,
               const lora_service& loras, admission_gate& admission, preprocess_settings settings);

  /// The request of `req` for endpoint `kind`, ready to submit and admitted, or the error to answer with (400 for a
  /// bad request, 404 for an unknown model, 429 when the queue is full, 503 when cancelled). Runs on a preprocessing
  /// thread: it polls handler_pool::cancelled() between prompts.
  result<prepared_request> prepare(endpoint kind, const http_request& req) const;

 private:
  /// From the parsed body on: every step but the parse.
  result<prepared_request> prepare_parsed(endpoint kind, common_request& r, completion_request* completion,
                                          chat_batch_request* chat) const;
  /// Completions' prompts: tokenized here (as the request says, else as the engine would), truncated.
  std::optional<api_error> tokenize_prompts(completion_request& r, prepared_request& out) const;
  /// Each conversation rendered by the chat template, tokenized, truncated; errors of a batch name the conversation.
  std::optional<api_error> render_conversations(chat_batch_request& r, prepared_request& out) const;
  /// The response's shape: ids, model, and what the request asked of the answer.
  void shape_response(const common_request& r, const completion_request* completion, const chat_batch_request* chat,
                      prepared_request& out) const;
  /// Token ids against the vocabulary, a chat's constraints after a reasoning parser's end token, and the structured
  /// output, compiled into `constraint`.
  std::optional<api_error> check_generation(
      common_request& r, bool chat, std::shared_ptr<const text::structured::token_constraint>& constraint) const;

  const LLM& llm_;
  const text::tokenizer* tok_;
  const text::chat_template* chat_template_;
  const lora_service& loras_;
  admission_gate& admission_;
  preprocess_settings s_;
};

}  // namespace actorllm::net::openai
