// `actorllm serve --config FILE` / `actorllm --config FILE`: reads a TOML file into serve_options. The sections
// and keys (flag names with underscores; dashes work too):
//
//   [model]     path, tokenizer, revision, tokenizer_revision, download_dir, served_model_name, dtype,
//               load_format, max_model_len, seed, chat_template, generation_config, enforce_eager
//   [parallel]  tensor_parallel_size, pipeline_parallel_size, pp_layer_partition, distributed_executor_backend,
//               num_threads, max_worker_restarts, device
//   [scheduler] max_num_seqs, max_num_batched_tokens, max_queued_requests, step_timeout
//   [cache]     block_size, gpu_memory_utilization, kv_cache_memory, kv_cache_dtype
//   [server]    host, port, api_key, allowed_origins, shutdown_timeout, max_connections, max_body_bytes, log_level,
//               max_stop_strings, max_stop_bytes, max_prompts_per_request, max_tools, max_chat_template_kwargs,
//               max_bad_words, max_structured_output_bytes, max_structured_output_depth,
//               max_structured_output_states, structured_output_compile_budget (and the other [server] flags of
//               `actorllm serve --help`)
//   [cluster]   head_address, token, host_ip, tls_cert, tls_key, tls_ca (the cluster executor; the TLS files
//               secure the control plane of mp as well)
//
// The engine's keys (and [lora]'s, the rest of [parallel]'s, skip_tokenizer_init) come from the table of
// apps/engine_flags.hpp, which also gives their flags: a key sets serve_options::engine's field as its flag does.
// Relative paths (model path, tokenizer, download_dir, a chat_template file, a generation_config directory) are
// resolved against the file's directory; a model path or tokenizer of the form "org/name" that is no directory
// there is kept as a Hugging Face repo id. Unknown sections or keys and values of the wrong type are errors that
// name the file and line; a misspelt name gets the nearest valid one as a suggestion. configs/*.toml are commented
// examples.
#pragma once

#include "apps/serve_options.hpp"

#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace actorllm::app {

/// A settings file that cannot be used: the message names the file, the line and the key.
struct config_file_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Reads `file` and returns `base` with every setting the file holds replaced. Throws config_file_error.
serve_options read_serve_config_file(const std::filesystem::path& file, serve_options base = {});

/// The same for TOML text; `source` names it in messages and its parent directory anchors relative paths.
serve_options parse_serve_config(std::string_view toml_text, const std::filesystem::path& source,
                                 serve_options base = {});

/// Every valid "section.key" (underscore spelling), in the order above.
std::vector<std::string> serve_config_keys();

/// Flattens --allowed-origins entries: each one is a JSON list of strings ('["*", "https://a.example"]'), a
/// comma-separated list, or one origin. Throws std::invalid_argument on a malformed JSON list.
std::vector<std::string> parse_allowed_origins(const std::vector<std::string>& entries);

}  // namespace actorllm::app
