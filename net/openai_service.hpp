// The OpenAI-compatible endpoints of `actorllm serve` on top of actorllm::LLM: the routes. A generating request is
// prepared (openai/preprocess.hpp: parse, render the chat template, tokenize, admit) on a preprocessing thread and
// then exchanged with the engine (openai/exchange.hpp), which answers whole or as Server-Sent Events through a
// response_channel. Nothing here waits on the engine: stats and the prefix-cache reset answer through callbacks.
#pragma once

#include "net/admission.hpp"
#include "net/handler_pool.hpp"
#include "net/lora_service.hpp"
#include "net/openai/metrics.hpp"
#include "net/openai/preprocess.hpp"
#include "net/openai/requests.hpp"
#include "net/routes.hpp"
#include "net/stats_logger.hpp"
#include "text/structured/structured_limits.hpp"

#include <actorllm/llm.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
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

struct service_config {
  std::vector<std::string> served_model_names;  ///< the first one names the model in responses; never empty
  std::string model_path;                       ///< shown as `root` in /v1/models
  std::string tokenizer_path;                   ///< tokenizer.json's directory (empty: the model's)
  std::size_t max_body_bytes = 16u << 20;
  /// --chat-template: a Jinja file's path or the template itself; empty: the tokenizer_config.json template.
  std::string chat_template;
  /// --generation-config: "auto" (the model's generation_config.json supplies default sampling fields),
  /// "vllm" (ignore it), or a directory holding a generation_config.json.
  std::string generation_config = "auto";
  /// --max-queued-requests: sequences (n × prompts of each request) beyond the running ones that may wait; more get
  /// 429 with Retry-After, and a request asking for more than max_num_seqs + this at once a 400. Negative: no limit.
  int64_t max_queued_requests = -1;
  /// --enable-prompt-tokens-details: usage carries prompt_tokens_details.cached_tokens. Off by default, as in vLLM:
  /// the count tells a client that some other client sent the same prefix before (unless salted apart).
  bool enable_prompt_tokens_details = false;
  /// --enable-force-include-usage: a stream reports its usage in a last chunk whether or not the request asked.
  bool enable_force_include_usage = false;
  /// --skip-tokenizer-init: the front end loads no tokenizer either (token-id prompts only, no text in outputs).
  bool skip_tokenizer_init = false;
  /// How often the stats line (running, waiting, KV-cache usage, prefix cache hit rate) is logged while the engine
  /// works; 0: never (--disable-log-stats). vLLM's interval.
  std::chrono::milliseconds log_stats_interval{10000};
  /// --max-logprobs: the most logprobs / top_logprobs a request may ask for (vLLM's default 20).
  int32_t max_logprobs = 20;
  /// --chat-template-content-format: "string" (content is the text, parts joined by "\n"), "openai" (content is a
  /// list of {"type": "text", "text": ...} parts) or "auto" (string).
  std::string chat_template_content_format = "auto";
  /// --return-tokens-as-token-ids: logprob tokens written as "token_id:N" unless a request says otherwise.
  bool return_tokens_as_token_ids = false;
  /// --enable-auto-tool-choice and --tool-call-parser (hermes, llama3_json, mistral): tool_choice "auto" parses the
  /// output's calls in that format. Without them, "auto" with tools is a 400 (as in vLLM); required and named
  /// functions work either way (the output is constrained to the calls' JSON).
  bool enable_auto_tool_choice = false;
  std::string tool_call_parser;
  /// --reasoning-parser (deepseek_r1, qwen3): chat replies split into reasoning_content and content; empty: none.
  std::string reasoning_parser;
  /// --max-structured-output-bytes / -depth / -states and --structured-output-compile-budget: what a
  /// structured-output constraint may cost to parse and compile (more: a 400 naming the limit).
  text::structured::structured_limits structured_limits{};
  /// Threads that parse, render chat templates, compile structured-output constraints, tokenize and submit the
  /// generation and tokenizer requests, so the HTTP I/O thread only moves bytes (see handler_pool.hpp).
  std::size_t preprocess_threads = 2;
  // Request-size limits (each a serve flag; see openai::parse_limits): checked before the work they guard.
  std::size_t max_stop_strings = 128;          ///< --max-stop-strings
  std::size_t max_stop_bytes = 16384;          ///< --max-stop-bytes
  std::size_t max_prompts_per_request = 1024;  ///< --max-prompts-per-request
  std::size_t max_tools = 128;                 ///< --max-tools
  std::size_t max_chat_template_kwargs = 64;   ///< --max-chat-template-kwargs
  std::size_t max_bad_words = 128;             ///< --max-bad-words
  /// --enable-lora: adapters may be named by requests and loaded at run time (the engine's enable_lora too).
  bool enable_lora = false;
  std::vector<lora_module> lora_modules;  ///< --lora-modules: served under their names from the start
};

class openai_service {
 public:
  /// Loads the tokenizer and its chat template (or --chat-template's) and the generation-config defaults. `llm`
  /// must outlive this. Throws std::runtime_error naming the problem for a --chat-template that is neither a file
  /// nor a template or does not parse, and for a --generation-config directory without a valid
  /// generation_config.json.
  openai_service(LLM& llm, service_config config);
  ~openai_service();
  openai_service(const openai_service&) = delete;
  openai_service& operator=(const openai_service&) = delete;

  /// Adds every endpoint to `r`.
  void install(router& r);

  /// The server drains for shutdown: /health answers 503 from now on (the engine may still finish what runs).
  void begin_drain();
  /// Stops the preprocessing threads (handler_pool::stop): queued requests get 503, running handlers see their
  /// request cancelled and have until `deadline`. False when one still runs then: its thread uses this service and
  /// the LLM, so neither may be destroyed (the caller ends the process instead).
  bool stop_preprocessing(std::chrono::steady_clock::time_point deadline);

 private:
  /// The parser's limits: the request-size flags, and n bounded by the engine's max_num_seqs.
  openai::parse_limits parse_limits() const;
  /// POST /v1/completions, /v1/chat/completions and /v1/chat/completions/batch: prepared, then exchanged.
  std::shared_ptr<response_channel> generate(openai::endpoint kind, const http_request& req);
  std::shared_ptr<response_channel> tokenize(const http_request& req);
  std::shared_ptr<response_channel> detokenize(const http_request& req);
  std::shared_ptr<response_channel> models() const;
  // GET /v1/models/{model}: `id` is the percent-decoded path segment (served names may hold '/').
  std::shared_ptr<response_channel> model(const std::string& id) const;
  std::shared_ptr<response_channel> health() const;
  // POST /invocations: chat completions or completions, by the body's fields.
  std::shared_ptr<response_channel> invocations(const http_request& req);
  std::shared_ptr<response_channel> metrics();
  std::shared_ptr<response_channel> reset_prefix_cache();

  LLM& llm_;
  service_config config_;
  std::unique_ptr<text::tokenizer> tokenizer_;
  std::unique_ptr<text::chat_template> chat_template_;
  std::shared_ptr<openai::engine_metrics> metrics_;
  std::unique_ptr<lora_service> loras_;  // the LoRA adapters served under their own names
  admission_gate admission_;             // max_num_seqs + --max-queued-requests generation requests at once
  int64_t created_ = 0;
  std::unique_ptr<stats_logger> stats_logger_;
  // begin_drain(): /health says 503. Shared with the stats callbacks, which may answer after this service is gone.
  std::shared_ptr<std::atomic<bool>> draining_ = std::make_shared<std::atomic<bool>>(false);
  std::unique_ptr<openai::preprocessor> preprocessor_;
  std::unique_ptr<handler_pool> preprocess_;  // last: its threads use everything above, so it stops first
};

}  // namespace actorllm::net
