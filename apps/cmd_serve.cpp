// `actorllm serve [MODEL]`: the OpenAI-compatible HTTP server (net/) over one in-process engine (actorllm::LLM),
// with vLLM's flag names. `--config FILE` (or `actorllm --config FILE`) reads the same settings from TOML
// (apps/serve_config_file.hpp); flags given on the command line override the file.
#include "apps/command_registry.hpp"
#include "apps/engine_flags.hpp"
#include "apps/model_flags.hpp"

#include "actors/executors/executor_choice.hpp"
#include "apps/cluster_tls_options.hpp"
#include "apps/model_location.hpp"
#include "apps/serve_config_file.hpp"
#include "apps/serve_options.hpp"
#include "apps/vllm_flags.hpp"

#include "actorllm/llm.hpp"
#include "kernels/device.hpp"
#include "net/http_server.hpp"
#include "net/openai/reasoning_parser.hpp"
#include "net/openai/tool_calls.hpp"
#include "net/openai_service.hpp"
#include "net/routes.hpp"
#include "text/structured/structured_limits.hpp"
#include "util/log.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

namespace actorllm::app {
namespace {

/// --log-level: vLLM's names (lower case; upper case works too).
log::level parse_log_level(std::string name) {
  for (auto& c : name)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (name == "debug")
    return log::level::debug;
  if (name == "info")
    return log::level::info;
  if (name == "warning" || name == "warn")
    return log::level::warning;
  if (name == "error")
    return log::level::error;
  throw std::invalid_argument(fmt::format("--log-level: '{}' is not one of debug, info, warning, error", name));
}

/// An early check of --distributed-executor-backend's spelling (before any loading); the engine itself decides
/// whether the layout can run on it (actors/executors/executor_choice.hpp) and logs why.
void check_executor_backend(const std::string& requested) {
  if (!requested.empty() && !actors::parse_executor_backend(requested))
    throw std::invalid_argument("--distributed-executor-backend: " + actors::executor_backend_error(requested));
}

/// Range checks of the settings whose flags CLI11 takes as plain numbers (a config file checks its own on reading).
void validate(const serve_options& o) {
  if (o.port < 0 || o.port > 65535)
    throw std::invalid_argument(fmt::format("--port: must be in [0, 65535], got {}", o.port));
  if (o.shutdown_timeout < 0)
    throw std::invalid_argument(fmt::format("--shutdown-timeout: must be >= 0, got {}", o.shutdown_timeout));
  if (o.max_connections < 1)
    throw std::invalid_argument(fmt::format("--max-connections: must be >= 1, got {}", o.max_connections));
  if (o.max_queued_requests < -1)
    throw std::invalid_argument(
        fmt::format("--max-queued-requests: must be >= -1 (-1: no limit), got {}", o.max_queued_requests));
  if (o.max_logprobs < 0)
    throw std::invalid_argument(fmt::format("--max-logprobs: must be >= 0, got {}", o.max_logprobs));
  for (const auto& [flag, value, min] :
       {std::tuple{"--max-stop-strings", o.max_stop_strings, 0}, std::tuple{"--max-stop-bytes", o.max_stop_bytes, 0},
        std::tuple{"--max-prompts-per-request", o.max_prompts_per_request, 1},
        std::tuple{"--max-tools", o.max_tools, 0},
        std::tuple{"--max-chat-template-kwargs", o.max_chat_template_kwargs, 0},
        std::tuple{"--max-bad-words", o.max_bad_words, 0}})
    if (value < min)
      throw std::invalid_argument(fmt::format("{}: must be >= {}, got {}", flag, min, value));
  if (o.max_structured_output_bytes < 1 || o.max_structured_output_bytes > (uint64_t{1} << 30))
    throw std::invalid_argument(fmt::format("--max-structured-output-bytes: must be in [1, {}], got {}",
                                            uint64_t{1} << 30, o.max_structured_output_bytes));
  if (o.max_structured_output_depth < 1 ||
      o.max_structured_output_depth > text::structured::max_structured_depth_setting)
    throw std::invalid_argument(fmt::format("--max-structured-output-depth: must be in [1, {}], got {}",
                                            text::structured::max_structured_depth_setting,
                                            o.max_structured_output_depth));
  if (o.max_structured_output_states < 1 || o.max_structured_output_states > (uint64_t{1} << 24))
    throw std::invalid_argument(fmt::format("--max-structured-output-states: must be in [1, {}], got {}",
                                            uint64_t{1} << 24, o.max_structured_output_states));
  if (o.structured_output_compile_budget < 1)
    throw std::invalid_argument("--structured-output-compile-budget: must be >= 1");
  if (o.chat_template_content_format != "auto" && o.chat_template_content_format != "string" &&
      o.chat_template_content_format != "openai")
    throw std::invalid_argument(fmt::format("--chat-template-content-format: '{}' is not one of auto, string, openai",
                                            o.chat_template_content_format));
  if (!o.tool_call_parser.empty() && !net::openai::parse_tool_parser_name(o.tool_call_parser))
    throw std::invalid_argument(fmt::format(
        "--tool-call-parser: '{}' is not one of hermes (also Qwen), llama3_json, mistral", o.tool_call_parser));
  if (!o.reasoning_parser.empty() && !net::openai::parse_reasoning_format(o.reasoning_parser))
    throw std::invalid_argument(
        fmt::format("--reasoning-parser: '{}' is not one of deepseek_r1, qwen3", o.reasoning_parser));
  if (o.enable_auto_tool_choice && o.tool_call_parser.empty())
    throw std::invalid_argument("--enable-auto-tool-choice needs --tool-call-parser (hermes, llama3_json, mistral)");
  if (!o.root_path.empty() && (o.root_path.front() != '/' || o.root_path.back() == '/'))
    throw std::invalid_argument(
        fmt::format("--root-path: '{}' must start with '/' and not end with one (like /api/v1)", o.root_path));
}

std::string layout_of(const serve_options& o, const model_info& info) {
  std::string stages;
  for (auto n : info.stage_layers)
    stages += fmt::format("{}{}", stages.empty() ? "" : "+", n);
  return fmt::format(
      "{}tp {} x pp {} (layers per stage {})",
      o.engine.data_parallel_size > 1 ? fmt::format("dp {} x ", o.engine.data_parallel_size) : std::string{},
      o.engine.tensor_parallel_size, o.engine.pipeline_parallel_size, stages.empty() ? "?" : stages);
}

int run_serve(serve_options o, const engine_flag_texts& engine_texts) {
  if (!o.log_level.empty())
    log::set_threshold(parse_log_level(o.log_level));
  validate(o);
  check_executor_backend(o.engine.distributed_executor_backend);
  check_engine_flags(o.engine, engine_texts, engine_command::serve);
  const std::vector<std::string> allowed_origins = parse_allowed_origins(o.allowed_origins);
  if (!o.config_file.empty())
    log::info("serve", "Settings from {} (flags on the command line override it)", o.config_file);
  if (o.model.empty()) {
    const char* fallback = std::getenv("ACTORLLM_DEFAULT_MODEL");
    if (fallback == nullptr || *fallback == '\0')
      throw std::invalid_argument("give the MODEL directory to serve (or set ACTORLLM_DEFAULT_MODEL)");
    o.model = fallback;
    log::info("serve", "No MODEL given: serving the built-in default {} (ACTORLLM_DEFAULT_MODEL)", o.model);
  }
  if (o.served_model_names.empty())
    o.served_model_names.push_back(o.model);  // a repo id serves under its name, as in vLLM
  const model_location where = resolve_model_location({.model = o.model,
                                                       .tokenizer = o.tokenizer,
                                                       .revision = o.revision,
                                                       .tokenizer_revision = o.tokenizer_revision,
                                                       .download_dir = o.download_dir,
                                                       .load_weights = o.engine.load_format != "dummy",
                                                       .tokenizer_needed = !o.engine.skip_tokenizer_init});
  // The CPU backend sizes its KV cache by --kv-cache-memory; GPU backends by --gpu-memory-utilization.
  if (o.gpu_memory_utilization_set && resolve_device(o.engine.device).kind == device_kind::cpu)
    log::info("serve",
              "--gpu-memory-utilization {} applies to GPU backends only; this engine runs on the CPU and "
              "sizes its KV cache with --kv-cache-memory ({} bytes)",
              o.engine.gpu_memory_utilization, o.engine.kv_cache_memory);

  engine_config cfg = o.engine;
  cfg.model = where.model_dir;
  cfg.tokenizer = where.tokenizer_dir;
  cfg.restart_workers = cfg.max_worker_restarts > 0;
  if (cfg.cluster_address.empty())
    if (const char* env = std::getenv("ACTORLLM_CLUSTER_ADDRESS"))
      cfg.cluster_address = env;
  if (!o.host_ip.empty())
    ::setenv("ACTORLLM_HOST_IP", o.host_ip.c_str(), 1);  // read by the executors (and forwarded to nothing: per node)
  // Read by enable_network for the engine's control plane, and passed on to its workers by their launchers.
  ::setenv("ACTORLLM_CONTROL_MAX_MESSAGE_BYTES", std::to_string(o.max_control_message_bytes).c_str(), 1);
  log::info("serve", "Loading model {} as '{}' (dp {}, tp {}, pp {}{})", o.model, o.served_model_names.front(),
            cfg.data_parallel_size, cfg.tensor_parallel_size, cfg.pipeline_parallel_size,
            cfg.data_parallel_rank >= 0
                ? fmt::format("; external load balancing: this server is replica {} only", cfg.data_parallel_rank)
                : std::string{});
  // --lora-modules are parsed before the engine starts, so that a typo costs no model load.
  std::vector<net::lora_module> lora_modules;
  for (const std::string& value : o.lora_modules) {
    auto m = net::parse_lora_module(value, o.served_model_names);
    if (!m)
      throw std::runtime_error(m.error().message);
    lora_modules.push_back(std::move(*m));
  }
  if (!lora_modules.empty() && !cfg.enable_lora)
    throw std::runtime_error("--lora-modules needs --enable-lora");
  LLM llm{cfg};
  const model_info& info = llm.info();
  const std::string& executor = info.executor;
  // Workers that died and could not be restarted: drain like a SIGTERM, then exit non-zero.
  static std::atomic<bool> unrecoverable{false};
  llm.on_unrecoverable_failure([](const std::string& why) {
    log::error("serve", "the engine cannot serve any more ({}); shutting down", why);
    unrecoverable = true;
    std::raise(SIGTERM);
  });

  net::openai_service service{
      llm,
      {.served_model_names = o.served_model_names,
       .model_path = where.model_dir,
       .tokenizer_path = where.tokenizer_dir,
       .max_body_bytes = o.max_body_bytes,
       .chat_template = o.chat_template,
       .generation_config = o.generation_config,
       .max_queued_requests = o.max_queued_requests,
       .enable_prompt_tokens_details = o.enable_prompt_tokens_details,
       .enable_force_include_usage = o.enable_force_include_usage,
       .skip_tokenizer_init = cfg.skip_tokenizer_init,
       .log_stats_interval = o.disable_log_stats ? std::chrono::milliseconds{0} : std::chrono::milliseconds{10000},
       .max_logprobs = o.max_logprobs,
       .chat_template_content_format = o.chat_template_content_format,
       .return_tokens_as_token_ids = o.return_tokens_as_token_ids,
       .enable_auto_tool_choice = o.enable_auto_tool_choice,
       .tool_call_parser = o.tool_call_parser,
       .reasoning_parser = o.reasoning_parser,
       .structured_limits = {.max_bytes = o.max_structured_output_bytes,
                             .max_depth = o.max_structured_output_depth,
                             .max_states = o.max_structured_output_states,
                             .compile_budget = o.structured_output_compile_budget},
       .max_stop_strings = static_cast<std::size_t>(o.max_stop_strings),
       .max_stop_bytes = static_cast<std::size_t>(o.max_stop_bytes),
       .max_prompts_per_request = static_cast<std::size_t>(o.max_prompts_per_request),
       .max_tools = static_cast<std::size_t>(o.max_tools),
       .max_chat_template_kwargs = static_cast<std::size_t>(o.max_chat_template_kwargs),
       .max_bad_words = static_cast<std::size_t>(o.max_bad_words),
       .enable_lora = cfg.enable_lora,
       .lora_modules = lora_modules}};
  net::router router;
  // --api-key, else $VLLM_API_KEY (vLLM reads both; the flag wins).
  if (o.api_key.empty())
    if (const char* env = std::getenv("VLLM_API_KEY"); env != nullptr && *env != '\0')
      o.api_key = env;
  router.set_api_key(o.api_key);
  service.install(router);

  net::server_options so;
  so.host = o.host;
  so.port = static_cast<uint16_t>(o.port);
  so.max_body_bytes = o.max_body_bytes;
  so.shutdown_timeout = std::chrono::milliseconds{static_cast<int64_t>(o.shutdown_timeout * 1000)};
  so.max_connections = static_cast<std::size_t>(o.max_connections);
  // The drain's end, which also bounds the preprocessing threads below; set on the I/O thread, which is this one
  // again once run_http_server returns.
  std::optional<std::chrono::steady_clock::time_point> drain_deadline;
  so.on_shutdown = [&service, &drain_deadline](std::chrono::steady_clock::time_point deadline) {
    drain_deadline = drain_deadline ? std::min(*drain_deadline, deadline) : deadline;
    service.begin_drain();
  };
  so.allowed_origins = allowed_origins;
  so.on_listening = [&](uint16_t port) {
    log::info("serve",
              "Ready: model '{}' ({}), {}, executor {}, {} KV blocks of {} tokens, max_model_len {}, at "
              "http://{}:{}",
              o.served_model_names.front(), o.model, layout_of(o, info), executor, info.n_blocks, info.block_size,
              info.max_model_len, o.host, port);
  };
  // --root-path: a proxy that forwards /prefix/v1/... without stripping the prefix still reaches the routes.
  const std::string root_path = o.root_path;
  const int status = net::run_http_server(so, [&router, root_path](net::http_request req) {
    if (!root_path.empty() && req.target.starts_with(root_path) &&
        (req.target.size() == root_path.size() || req.target[root_path.size()] == '/'))
      req.target = req.target.size() == root_path.size() ? "/" : req.target.substr(root_path.size());
    return router.dispatch(req);
  });
  const int exit_status = unrecoverable ? 1 : status;
  // A handler still running on a preprocessing thread (a huge prompt to tokenize, a heavy template) may take minutes
  // and polls its cancellation only between steps. The shutdown timeout bounds the whole exit, so such a thread is
  // not waited for past the drain's deadline; and since it still uses the service and the engine, neither may be
  // destroyed: the process ends here, without destructors (worker processes die with it: PR_SET_PDEATHSIG).
  if (!service.stop_preprocessing(drain_deadline.value_or(std::chrono::steady_clock::now()))) {
    log::warning("serve", "Exiting without waiting for the preprocessing threads still busy (shutdown timeout)");
    std::_Exit(exit_status);
  }
  return exit_status;
}

command_registration serve_command{
    "serve", "Serve a model over an OpenAI-compatible HTTP API", [](CLI::App& sub) {
      auto o = std::make_shared<serve_options>();
      sub.footer(
          "A TOML file given with --config (also `actorllm --config FILE` without `serve`) sets the same options in "
          "sections [model], [parallel], [scheduler], [cache], [server] and [cluster], keys named like the flags "
          "with underscores (see configs/*.toml); flags on the command line override the file.\n");
      auto* config = sub.add_option("--config", o->config_file,
                                    "TOML file with the settings below (see configs/); flags given here override it");
      sub.add_option("MODEL", o->model,
                     "Model directory, or a Hugging Face repo id (org/name) found in the local Hugging Face cache "
                     "and downloaded when missing (default: [model] path of --config, else "
                     "$ACTORLLM_DEFAULT_MODEL)");
      sub.add_option("--tokenizer", o->tokenizer, "Tokenizer directory or Hugging Face repo id (default: the model's)");
      add_hub_flags(sub, o->revision, o->tokenizer_revision, o->download_dir);
      sub.add_option("--host", o->host, "Address to listen on")->capture_default_str();
      sub.add_option("--port", o->port, "Port to listen on (0: any free port, logged)")->capture_default_str();
      sub.add_option("--api-key", o->api_key, "Require 'Authorization: Bearer KEY' on /v1 routes");
      sub.add_option("--served-model-name", o->served_model_names,
                     "Model name(s) clients use (default: the MODEL path)");
      sub.add_option("--allowed-origins", o->allowed_origins,
                     "CORS origins answered with Access-Control-Allow-Origin: a JSON list like '[\"*\"]', a "
                     "comma-separated list, or repeated (default: none, no CORS headers)")
          // One value per flag, taken as is: CLI11 would otherwise read '["*"]' as its own list syntax and hand
          // parse_allowed_origins '"*"' with the quotes still on.
          ->allow_extra_args(false);
      sub.add_option("--max-body-bytes", o->max_body_bytes, "Largest request body (bigger: 413)")
          ->capture_default_str();
      sub.add_option("--shutdown-timeout", o->shutdown_timeout,
                     "Seconds in-flight requests get to finish after SIGINT/SIGTERM")
          ->capture_default_str();
      sub.add_option("--max-connections", o->max_connections,
                     "Most HTTP connections open at once (also bounded by RLIMIT_NOFILE less the engine's own files; "
                     "the log says the cap in force). Over it, the oldest idle connection is closed to make room, "
                     "or the newcomer gets 503 when every open one is busy")
          ->capture_default_str();
      sub.add_option("--log-level", o->log_level,
                     "debug, info, warning or error (default: $ACTORLLM_LOG_LEVEL, else info)");
      sub.add_option("--host-ip", o->host_ip,
                     "The address worker processes reach this engine at, bound and advertised (default: "
                     "$ACTORLLM_HOST_IP, else 127.0.0.1)");
      add_cluster_tls_options(sub, o->engine.cluster_tls_certificate, o->engine.cluster_tls_key,
                              o->engine.cluster_tls_ca_file);
      add_control_message_limit_option(sub, o->max_control_message_bytes);
      sub.add_option("--max-queued-requests", o->max_queued_requests,
                     "Sequences (n x prompts of each request) that may wait beyond the running ones; more get 429, "
                     "a request for more than max_num_seqs + this at once 400 (-1: no limit)")
          ->capture_default_str();
      sub.add_option("--lora-modules", o->lora_modules,
                     "Adapters served under their own names: name=path, or a JSON object {\"name\", \"path\", "
                     "\"base_model_name\"} (repeatable)");
      sub.add_flag("--enable-prompt-tokens-details", o->enable_prompt_tokens_details,
                   "Report usage.prompt_tokens_details.cached_tokens (off by default: it tells a client whether "
                   "others sent the same prefix)");
      sub.add_flag("--enable-force-include-usage", o->enable_force_include_usage,
                   "Every streamed response ends with a usage chunk, as if stream_options.include_usage were set");
      sub.add_flag("--disable-log-stats", o->disable_log_stats,
                   "No periodic stats line (running, waiting, KV-cache usage, prefix cache hit rate)");
      sub.add_option("--chat-template", o->chat_template,
                     "Chat template: a Jinja file or the template itself (default: tokenizer_config.json's)");
      sub.add_option("--generation-config", o->generation_config,
                     "auto (default sampling from the model's generation_config.json), vllm (ignore it), or a "
                     "directory holding a generation_config.json")
          ->capture_default_str();
      sub.add_option("--max-logprobs", o->max_logprobs, "The most logprobs / top_logprobs a request may ask for")
          ->capture_default_str();
      sub.add_option("--max-stop-strings", o->max_stop_strings, "The most stop strings a request may give (more: 400)")
          ->capture_default_str();
      sub.add_option("--max-stop-bytes", o->max_stop_bytes,
                     "The most bytes all stop strings of a request may hold together (more: 400)")
          ->capture_default_str();
      sub.add_option("--max-prompts-per-request", o->max_prompts_per_request,
                     "The most prompts one /v1/completions prompt list may hold (more: 400)")
          ->capture_default_str();
      sub.add_option("--max-tools", o->max_tools, "The most tools a chat request may give (more: 400)")
          ->capture_default_str();
      sub.add_option("--max-chat-template-kwargs", o->max_chat_template_kwargs,
                     "The most keys a request's chat_template_kwargs may hold (more: 400)")
          ->capture_default_str();
      sub.add_option("--max-bad-words", o->max_bad_words, "The most bad_words a request may give (more: 400)")
          ->capture_default_str();
      sub.add_option("--max-structured-output-bytes", o->max_structured_output_bytes,
                     "The largest structured-output regex, JSON schema or choice list a request may give, in bytes "
                     "(a schema's generated pattern may be 16 times as long)")
          ->capture_default_str();
      sub.add_option("--max-structured-output-depth", o->max_structured_output_depth,
                     "How deep groups and quantifiers may nest in a structured-output regex, and subschemas in a "
                     "JSON schema (at most 1000)")
          ->capture_default_str();
      sub.add_option("--max-structured-output-states", o->max_structured_output_states,
                     "The most states of a structured output's automaton (also bounds its construction's memory: "
                     "8 NFA states and 256 set entries per state)")
          ->capture_default_str();
      sub.add_option("--structured-output-compile-budget", o->structured_output_compile_budget,
                     "The most work units compiling one structured-output pattern may take (deterministic; about "
                     "5-10 ns each on one core: the default stops within about 0.2 s)")
          ->capture_default_str();
      sub.add_option("--root-path", o->root_path,
                     "A path prefix a reverse proxy leaves on requests (/api routes /api/v1/... to /v1/...)");
      sub.add_option("--chat-template-content-format", o->chat_template_content_format,
                     "How message content reaches the chat template: string (text), openai (a list of "
                     "{type: text, text} parts), or auto (string)")
          ->capture_default_str();
      sub.add_flag("--return-tokens-as-token-ids", o->return_tokens_as_token_ids,
                   "Write logprob tokens as token_id:N (exact even when a token is not whole UTF-8)");
      sub.add_flag("--enable-auto-tool-choice", o->enable_auto_tool_choice,
                   "tool_choice \"auto\": parse the model's tool calls in --tool-call-parser's format");
      sub.add_option("--tool-call-parser", o->tool_call_parser,
                     "The format models write tool calls in: hermes (also Qwen), llama3_json, mistral");
      sub.add_option("--reasoning-parser", o->reasoning_parser,
                     "Thinking models: chat replies' reasoning (<think>...</think>) returned as reasoning_content, "
                     "apart from the content: deepseek_r1, qwen3");
      auto engine_texts = add_engine_flags(sub, o->engine, engine_command::serve);
      auto vllm = add_vllm_flags(sub);
      return [o, config, engine_texts, vllm, &sub]() {
        if (!config->empty()) {
          // The file replaces the defaults; then the flags given on the command line are applied again on top
          // (CLI11 re-runs an option's conversion into the bound field).
          *o = read_serve_config_file(o->config_file);
          for (CLI::Option* opt : sub.get_options())
            if (opt != config && opt->count() > 0)
              opt->run_callback();
        }
        if (sub.get_option("--gpu-memory-utilization")->count() > 0)
          o->gpu_memory_utilization_set = true;
        report_vllm_flags(*vllm);
        return run_serve(*o, *engine_texts);
      };
    }};

}  // namespace
}  // namespace actorllm::app
