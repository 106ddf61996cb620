// `actorllm serve [MODEL]`: the OpenAI-compatible HTTP server (net/) over one in-process engine (actorllm::LLM),
// with vLLM's flag names.
#include "apps/command_registry.hpp"

#include "actorllm/llm.hpp"
#include "net/http_server.hpp"
#include "net/openai_service.hpp"
#include "net/routes.hpp"
#include "util/log.hpp"

#include <fmt/format.h>

#include <cctype>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace actorllm::app {
namespace {

struct serve_options {
  std::string model;
  std::string tokenizer;
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string api_key;
  std::vector<std::string> served_model_names;
  uint64_t max_body_bytes = 16u << 20;
  double shutdown_timeout = 10.0;
  int tensor_parallel_size = 1;
  int pipeline_parallel_size = 1;
  std::string pp_layer_partition;
  int64_t max_model_len = 0;
  int64_t max_num_seqs = 256;
  int64_t max_num_batched_tokens = 2048;
  int64_t block_size = 16;
  std::string kv_cache_memory = "4GiB";
  std::string load_format = "auto";
  std::string dtype = "auto";
  uint64_t seed = 0;
  int threads = 0;
};

/// Bytes from "123", "4GiB", "512MiB", "1KiB" (also GB/MB/KB as powers of 1024, the way vLLM's flag reads them).
uint64_t parse_bytes(const std::string& s) {
  std::size_t end = 0;
  while (end < s.size() && std::isdigit(static_cast<unsigned char>(s[end])) != 0)
    ++end;
  if (end == 0)
    throw std::invalid_argument(fmt::format("--kv-cache-memory: '{}' is not a byte count like 4GiB", s));
  const uint64_t n = std::stoull(s.substr(0, end));
  const std::string unit = s.substr(end);
  uint64_t mult = 1;
  if (unit.empty() || unit == "B")
    mult = 1;
  else if (unit == "KiB" || unit == "KB" || unit == "K")
    mult = uint64_t{1} << 10;
  else if (unit == "MiB" || unit == "MB" || unit == "M")
    mult = uint64_t{1} << 20;
  else if (unit == "GiB" || unit == "GB" || unit == "G")
    mult = uint64_t{1} << 30;
  else
    throw std::invalid_argument(fmt::format("--kv-cache-memory: unknown unit '{}' (use B, KiB, MiB or GiB)", unit));
  return n * mult;
}

int run_serve(serve_options o) {
  if (o.model.empty()) {
    const char* fallback = std::getenv("ACTORLLM_DEFAULT_MODEL");
    if (fallback == nullptr || *fallback == '\0')
      throw std::invalid_argument("give the MODEL directory to serve (or set ACTORLLM_DEFAULT_MODEL)");
    o.model = fallback;
    log::info("serve", "No MODEL given: serving ACTORLLM_DEFAULT_MODEL={}", o.model);
  }
  if (o.port < 0 || o.port > 65535)
    throw std::invalid_argument(fmt::format("--port: must be in [0, 65535], got {}", o.port));
  if (o.block_size < 1 || o.block_size > 256)
    throw std::invalid_argument(fmt::format("--block-size: must be in [1, 256], got {}", o.block_size));
  if (o.shutdown_timeout < 0)
    throw std::invalid_argument(fmt::format("--shutdown-timeout: must be >= 0, got {}", o.shutdown_timeout));
  if (o.served_model_names.empty())
    o.served_model_names.push_back(o.model);

  engine_config cfg;
  cfg.model = o.model;
  cfg.tokenizer = o.tokenizer;
  cfg.tensor_parallel_size = o.tensor_parallel_size;
  cfg.pipeline_parallel_size = o.pipeline_parallel_size;
  cfg.pp_layer_partition = o.pp_layer_partition;
  cfg.max_num_seqs = static_cast<int32_t>(o.max_num_seqs);
  cfg.max_num_batched_tokens = static_cast<int32_t>(o.max_num_batched_tokens);
  cfg.block_size = static_cast<int32_t>(o.block_size);
  cfg.kv_cache_memory = parse_bytes(o.kv_cache_memory);
  cfg.max_model_len = static_cast<int32_t>(o.max_model_len);
  cfg.load_format = o.load_format;
  cfg.dtype = o.dtype;
  cfg.seed = o.seed;
  cfg.threads = o.threads;
  log::info("serve", "Serving model {} as '{}' (tp {}, pp {})", o.model, o.served_model_names.front(),
            o.tensor_parallel_size, o.pipeline_parallel_size);
  LLM llm{cfg};
  log::info("serve", "Engine ready: max_model_len {}, {} KV blocks of {} tokens", llm.info().max_model_len,
            llm.info().n_blocks, llm.info().block_size);

  net::openai_service service{llm,
                              {.served_model_names = o.served_model_names,
                               .model_path = o.model,
                               .tokenizer_path = o.tokenizer,
                               .max_body_bytes = o.max_body_bytes}};
  net::router router;
  router.set_api_key(o.api_key);
  service.install(router);

  net::server_options so;
  so.host = o.host;
  so.port = static_cast<uint16_t>(o.port);
  so.max_body_bytes = o.max_body_bytes;
  so.shutdown_timeout = std::chrono::milliseconds{static_cast<int64_t>(o.shutdown_timeout * 1000)};
  return net::run_http_server(so, [&router](net::http_request req) { return router.dispatch(req); });
}

command_registration serve_command{
    "serve", "Serve a model over an OpenAI-compatible HTTP API", [](CLI::App& sub) {
      auto o = std::make_shared<serve_options>();
      sub.add_option("MODEL", o->model, "Model directory (default: $ACTORLLM_DEFAULT_MODEL)");
      sub.add_option("--tokenizer", o->tokenizer, "Tokenizer directory (default: the model directory)");
      sub.add_option("--host", o->host, "Address to listen on")->capture_default_str();
      sub.add_option("--port", o->port, "Port to listen on (0: any free port, logged)")->capture_default_str();
      sub.add_option("--api-key", o->api_key, "Require 'Authorization: Bearer KEY' on /v1 routes");
      sub.add_option("--served-model-name", o->served_model_names,
                     "Model name(s) clients use (default: the MODEL path)");
      sub.add_option("--max-body-bytes", o->max_body_bytes, "Largest request body (bigger: 413)")
          ->capture_default_str();
      sub.add_option("--shutdown-timeout", o->shutdown_timeout,
                     "Seconds in-flight requests get to finish after SIGINT/SIGTERM")
          ->capture_default_str();
      sub.add_option("--tensor-parallel-size", o->tensor_parallel_size,
                     "Tensor-parallel ranks per pipeline stage (also -tp)")
          ->capture_default_str();
      sub.add_option("--pipeline-parallel-size", o->pipeline_parallel_size, "Pipeline stages (also -pp)")
          ->capture_default_str();
      sub.add_option("--pp-layer-partition", o->pp_layer_partition, "Layers per pipeline stage, e.g. 3,2");
      sub.add_option("--max-model-len", o->max_model_len, "Context length limit (default: the model's)");
      sub.add_option("--max-num-seqs", o->max_num_seqs, "Most sequences running at once")->capture_default_str();
      sub.add_option("--max-num-batched-tokens", o->max_num_batched_tokens, "Tokens per step (prefill chunk)")
          ->capture_default_str();
      sub.add_option("--block-size", o->block_size, "Tokens per KV-cache block")->capture_default_str();
      sub.add_option("--kv-cache-memory", o->kv_cache_memory, "KV-cache bytes per shard (e.g. 4GiB, 512MiB)")
          ->capture_default_str();
      sub.add_option("--load-format", o->load_format, "auto, safetensors, or dummy (random weights)")
          ->capture_default_str();
      sub.add_option("--dtype", o->dtype, "Weight dtype: auto, float32, float16, bfloat16")->capture_default_str();
      sub.add_option("--seed", o->seed, "Engine seed")->capture_default_str();
      sub.add_option("--num-threads", o->threads, "CPU threads for the kernels (default: all cores)");
      return [o]() { return run_serve(*o); };
    }};

}  // namespace
}  // namespace actorllm::app
