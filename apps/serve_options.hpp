// The settings of `actorllm serve`, as its flags and the sections of a `--config` TOML file set them
// (apps/cmd_serve.cpp binds the flags, apps/serve_config_file.cpp reads the file). The engine's own settings are an
// engine_config, which both fill through the table of apps/engine_flags.hpp.
#pragma once

#include "actorllm/engine_config.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace actorllm::app {

/// Everything `actorllm serve` can be told, with vLLM's defaults. Strings are kept as given (origin lists, log
/// levels); cmd_serve.cpp checks and converts them when it builds the server.
struct serve_options {
  std::string config_file;  ///< --config: the TOML file these settings were read from (empty: none)

  /// The engine's settings (apps/engine_flags.hpp has each one's flag and key); model and tokenizer are the
  /// directories the [model] settings below resolve to, filled in when the engine is built.
  engine_config engine;
  bool gpu_memory_utilization_set = false;  ///< given explicitly (flag or file): CPU-only engines say it is unused

  // [model]
  std::string model;               ///< MODEL: model directory or Hugging Face repo id (empty: $ACTORLLM_DEFAULT_MODEL)
  std::string tokenizer;           ///< --tokenizer: a directory or repo id (empty: the model's)
  std::string revision;            ///< --revision: the model's branch, tag or commit on the Hub (empty: main)
  std::string tokenizer_revision;  ///< --tokenizer-revision (empty: --revision)
  std::string download_dir;        ///< --download-dir: the Hugging Face cache to use (empty: $HF_HUB_CACHE etc.)
  std::vector<std::string> served_model_names;
  std::string chat_template;  ///< a Jinja file or the template itself; empty: tokenizer_config.json's
  std::string generation_config = "auto";

  // [lora]
  std::vector<std::string> lora_modules;  ///< --lora-modules: name=path or {"name","path","base_model_name"}

  // [scheduler]
  int64_t max_queued_requests = -1;  ///< -1: no limit

  // [server]
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string api_key;
  /// --allowed-origins as given: each entry a JSON list ('["*"]'), a comma-separated list, or one origin;
  /// parse_allowed_origins() (serve_config_file.hpp) flattens them.
  std::vector<std::string> allowed_origins;
  double shutdown_timeout = 10.0;
  int64_t max_connections = 1024;  ///< --max-connections: HTTP connections open at once (see server_options)
  uint64_t max_body_bytes = 16u << 20;
  std::string log_level;                      ///< debug, info, warning or error; empty: $ACTORLLM_LOG_LEVEL, else info
  bool enable_prompt_tokens_details = false;  ///< usage.prompt_tokens_details.cached_tokens in responses
  bool enable_force_include_usage = false;    ///< every stream ends with a usage chunk, asked for or not
  bool disable_log_stats = false;             ///< no periodic stats line
  int32_t max_logprobs = 20;                  ///< --max-logprobs: the most logprobs a request may ask for
  // Request-size limits, each checked before the work it guards (a 400 naming the field and the flag).
  int64_t max_stop_strings = 128;          ///< --max-stop-strings: entries of `stop`
  int64_t max_stop_bytes = 16384;          ///< --max-stop-bytes: bytes of all stop strings of a request
  int64_t max_prompts_per_request = 1024;  ///< --max-prompts-per-request: entries of a completions prompt list
  int64_t max_tools = 128;                 ///< --max-tools: entries of a chat request's `tools`
  int64_t max_chat_template_kwargs = 64;   ///< --max-chat-template-kwargs: keys of chat_template_kwargs
  int64_t max_bad_words = 128;             ///< --max-bad-words: entries of `bad_words`
  /// --max-structured-output-bytes / -depth / -states, --structured-output-compile-budget: structured outputs'
  /// limits (text/structured/structured_limits.hpp has what each bounds and why its default).
  uint64_t max_structured_output_bytes = 65536;
  uint64_t max_structured_output_depth = 64;
  uint64_t max_structured_output_states = 50000;
  uint64_t structured_output_compile_budget = 20'000'000;
  std::string root_path;                              ///< --root-path: a prefix a proxy may leave on request paths
  std::string chat_template_content_format = "auto";  ///< auto, string or openai
  bool return_tokens_as_token_ids = false;            ///< logprob tokens as "token_id:N" by default
  bool enable_auto_tool_choice = false;               ///< tool_choice "auto" parses calls (needs tool_call_parser)
  std::string tool_call_parser;                       ///< hermes, llama3_json or mistral
  std::string reasoning_parser;                       ///< deepseek_r1 or qwen3: chat replies' <think> part apart

  // [cluster] (the head's address, the token and the TLS files are the engine's)
  std::string host_ip;  ///< the address this process binds and advertises to workers (sets ACTORLLM_HOST_IP)
  uint64_t max_control_message_bytes = 256u << 20;  ///< --max-control-message-bytes (actors/cluster/basp_screen.hpp)
};

}  // namespace actorllm::app
