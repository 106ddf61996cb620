// `actorllm generate`: offline generation for one prompt through the embedding API (actorllm::LLM), so the same
// actor graph as a server runs it: TP shards and pipeline stages in this process.
#include "apps/command_registry.hpp"
#include "apps/model_flags.hpp"
#include "apps/model_location.hpp"
#include "apps/parallel_flags.hpp"
#include "apps/serve_config_file.hpp"
#include "apps/token_id_list.hpp"

#include "actorllm/llm.hpp"
#include "kernels/device.hpp"
#include "util/json_writer.hpp"
#include "util/log.hpp"

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <stdexcept>

namespace actorllm::app {
namespace {

struct generate_options {
  std::string model_dir;  ///< a directory or a Hugging Face repo id
  std::string tokenizer_dir;
  std::string revision;
  std::string tokenizer_revision;
  std::string download_dir;
  std::string prompt;
  std::string prompt_ids;
  int64_t max_tokens = 16;
  float temperature = 1.0f;
  float top_p = 1.0f;
  int32_t top_k = 0;
  float min_p = 0.0f;
  float repetition_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  uint64_t seed = 0;
  bool ignore_eos = false;
  std::string output = "text";
  std::string load_format = "auto";
  std::string dtype_name = "auto";
  std::string quantization;
  std::string device = "auto";
  int64_t block_size = 16;
  bool enable_prefix_caching = true;
  bool enforce_eager = false;
  int64_t max_model_len = 0;
  int64_t max_num_batched_tokens = 2048;
  int threads = 0;
  int tensor_parallel_size = 1;
  int pipeline_parallel_size = 1;
  int data_parallel_size = 1;
  std::string pp_layer_partition;
  bool enable_expert_parallel = false;
  int decode_context_parallel_size = 1;
  int dcp_kv_cache_interleave_size = 1;
  int prefill_context_parallel_size = 1;
  bool enable_eplb = false;
  std::string distributed_executor_backend;
  std::string cluster_address;
  uint64_t kv_cache_memory = uint64_t{4} << 30;
};

int run_generate(const generate_options& o) {
  // Flag checks that need no model come first, with the flag's name in the message.
  if (o.load_format != "auto" && o.load_format != "safetensors" && o.load_format != "dummy")
    throw std::invalid_argument(
        fmt::format("--load-format: '{}' is not one of auto, safetensors, dummy", o.load_format));
  if (o.dtype_name != "auto" && o.dtype_name != "float32" && o.dtype_name != "float16" && o.dtype_name != "bfloat16")
    throw std::invalid_argument(
        fmt::format("--dtype: '{}' is not one of auto, float32, float16, bfloat16", o.dtype_name));
  if (const device_choice chosen = resolve_device(o.device); !chosen.error.empty())
    throw std::invalid_argument(chosen.error);  // names --device and the value
  if (o.max_tokens < 1)
    throw std::invalid_argument(fmt::format("--max-tokens: must be at least 1, got {}", o.max_tokens));
  if (o.temperature < 0)
    throw std::invalid_argument(fmt::format("--temperature: must be >= 0, got {}", o.temperature));
  if (!(o.top_p > 0 && o.top_p <= 1))
    throw std::invalid_argument(fmt::format("--top-p: must be in (0, 1], got {}", o.top_p));
  if (o.min_p < 0 || o.min_p > 1)
    throw std::invalid_argument(fmt::format("--min-p: must be in [0, 1], got {}", o.min_p));
  if (o.block_size < 1 || o.block_size > 256)
    throw std::invalid_argument(fmt::format("--block-size: must be in [1, 256], got {}", o.block_size));
  if (o.output != "text" && o.output != "json")
    throw std::invalid_argument(fmt::format("--output: '{}' is not one of text, json", o.output));
  if (o.max_model_len < 0)
    throw std::invalid_argument(fmt::format("--max-model-len: must be positive, got {}", o.max_model_len));
  validate_data_parallel(o.data_parallel_size, 0, -1);
  std::vector<int32_t> prompt_ids;
  if (!o.prompt_ids.empty())
    prompt_ids = parse_token_id_list(o.prompt_ids, "--prompt-ids");

  // The completion is this command's product: keep stderr to warnings unless ACTORLLM_LOG_LEVEL asks for more
  // (info shows the engine's start-up, e.g. "# CPU blocks: N").
  if (std::getenv("ACTORLLM_LOG_LEVEL") == nullptr)
    log::set_threshold(log::level::warning);

  const model_location where = resolve_model_location({.model = o.model_dir,
                                                       .tokenizer = o.tokenizer_dir,
                                                       .revision = o.revision,
                                                       .tokenizer_revision = o.tokenizer_revision,
                                                       .download_dir = o.download_dir,
                                                       .load_weights = o.load_format != "dummy",
                                                       .tokenizer_needed = true});

  engine_config cfg;
  cfg.model = where.model_dir;
  cfg.tokenizer = where.tokenizer_dir;
  cfg.tensor_parallel_size = o.tensor_parallel_size;
  cfg.pipeline_parallel_size = o.pipeline_parallel_size;
  cfg.data_parallel_size = o.data_parallel_size;
  cfg.pp_layer_partition = o.pp_layer_partition;
  cfg.enable_expert_parallel = o.enable_expert_parallel;
  cfg.decode_context_parallel_size = o.decode_context_parallel_size;
  cfg.dcp_kv_cache_interleave_size = o.dcp_kv_cache_interleave_size;
  cfg.prefill_context_parallel_size = o.prefill_context_parallel_size;
  cfg.enable_eplb = o.enable_eplb;
  cfg.max_num_seqs = 1;
  cfg.max_num_batched_tokens = static_cast<int32_t>(o.max_num_batched_tokens);
  cfg.block_size = static_cast<int32_t>(o.block_size);
  cfg.enable_prefix_caching = o.enable_prefix_caching;
  cfg.enforce_eager = o.enforce_eager;
  cfg.kv_cache_memory = o.kv_cache_memory;
  cfg.max_model_len = static_cast<int32_t>(o.max_model_len);
  cfg.load_format = o.load_format;
  cfg.dtype = o.dtype_name;
  cfg.quantization = o.quantization;
  cfg.device = o.device;
  cfg.seed = o.seed;
  cfg.threads = o.threads;
  cfg.distributed_executor_backend = o.distributed_executor_backend;
  cfg.cluster_address = o.cluster_address;
  LLM llm{cfg};

  if (o.prompt_ids.empty() && !llm.info().has_tokenizer)
    throw std::invalid_argument(
        fmt::format("--prompt needs a tokenizer, and {} has no tokenizer.json (give --tokenizer or --prompt-ids)",
                    where.tokenizer_dir.empty() ? where.model_dir : where.tokenizer_dir));

  sampling_params sp;
  sp.temperature = o.temperature;
  sp.top_p = o.top_p;
  sp.top_k = o.top_k;
  sp.min_p = o.min_p;
  sp.repetition_penalty = o.repetition_penalty;
  sp.presence_penalty = o.presence_penalty;
  sp.frequency_penalty = o.frequency_penalty;
  sp.seed = o.seed;
  sp.max_tokens = static_cast<int32_t>(o.max_tokens);
  sp.ignore_eos = o.ignore_eos;
  request_output out = o.prompt_ids.empty() ? llm.generate(prompt{o.prompt}, sp) : llm.generate(prompt{prompt_ids}, sp);
  const completion_output& c = out.outputs.front();
  const std::string finish = c.finish_reason ? std::string{to_string(*c.finish_reason)} : std::string{"length"};

  if (o.output == "json") {
    json_writer w;
    w.begin_object();
    w.key("prompt_ids").array(out.prompt_token_ids);
    w.key("output_ids").array(c.token_ids);
    w.key("text").value(c.text);
    w.key("finish_reason").value(finish);
    w.end_object();
    std::printf("%s\n", w.str().c_str());
  } else {
    std::printf("%s\n", c.text.c_str());
  }
  return 0;
}

option_alias tp_alias{"-tp", "--tensor-parallel-size"};
option_alias pp_alias{"-pp", "--pipeline-parallel-size"};
option_alias dp_alias{"-dp", "--data-parallel-size"};
option_alias dcp_alias{"-dcp", "--decode-context-parallel-size"};
option_alias pcp_alias{"-pcp", "--prefill-context-parallel-size"};

command_registration generate_command{
    "generate", "Generate a completion for one prompt (offline, in this process)", [](CLI::App& sub) {
      auto o = std::make_shared<generate_options>();
      sub.add_option("--model", o->model_dir,
                     "Model directory (Hugging Face layout: config.json, *.safetensors), or a Hugging Face repo id "
                     "(org/name) found in the local Hugging Face cache and downloaded when missing")
          ->required();
      sub.add_option("--tokenizer", o->tokenizer_dir,
                     "Tokenizer directory or Hugging Face repo id (default: the model's)");
      add_hub_flags(sub, o->revision, o->tokenizer_revision, o->download_dir);
      auto* p = sub.add_option("--prompt", o->prompt, "Prompt text (tokenized with the model's tokenizer)");
      auto* pi = sub.add_option("--prompt-ids", o->prompt_ids, "Prompt as comma-separated token ids");
      p->excludes(pi);
      sub.add_option("--max-tokens", o->max_tokens, "Maximum number of tokens to generate")->capture_default_str();
      sub.add_option("--temperature", o->temperature, "Sampling temperature (0 = greedy)")->capture_default_str();
      sub.add_option("--top-p", o->top_p, "Nucleus sampling probability mass")->capture_default_str();
      sub.add_option("--top-k", o->top_k, "Keep the k most likely tokens (0 = off)")->capture_default_str();
      sub.add_option("--min-p", o->min_p, "Drop tokens below min_p times the top probability")->capture_default_str();
      sub.add_option("--repetition-penalty", o->repetition_penalty, "Penalty for tokens in prompt and output")
          ->capture_default_str();
      sub.add_option("--presence-penalty", o->presence_penalty, "Penalty for tokens present in the output")
          ->capture_default_str();
      sub.add_option("--frequency-penalty", o->frequency_penalty, "Penalty per occurrence in the output")
          ->capture_default_str();
      sub.add_option("--seed", o->seed, "Seed of the sampler (and of dummy weights)")->capture_default_str();
      sub.add_flag("--ignore-eos", o->ignore_eos, "Keep generating past end-of-sequence tokens");
      sub.add_option("--output", o->output, "Output format: text or json")->capture_default_str();
      sub.add_option("--load-format", o->load_format, "auto, safetensors, or dummy (random weights)")
          ->capture_default_str();
      sub.add_option("--dtype", o->dtype_name, "Weight dtype: auto, float32, float16, bfloat16")->capture_default_str();
      add_quantization_flag(sub, o->quantization);
      sub.add_option("--device", o->device,
                     "Device the shards run on: cpu, cuda, or auto (CUDA when this machine has a GPU)")
          ->capture_default_str();
      sub.add_option("--block-size", o->block_size, "Tokens per KV-cache block")->capture_default_str();
      sub.add_flag("--enable-prefix-caching,!--no-enable-prefix-caching", o->enable_prefix_caching,
                   "Reuse the KV blocks of prompt prefixes computed before (default: on)");
      sub.add_flag("--enforce-eager", o->enforce_eager, "Run every step eagerly: no CUDA graphs of decode steps");
      sub.add_option("--max-model-len", o->max_model_len, "Context length limit (default: the model's)");
      sub.add_option("--max-num-batched-tokens", o->max_num_batched_tokens, "Prefill chunk size")
          ->capture_default_str();
      sub.add_option("--num-threads", o->threads, "CPU threads for the kernels, over all shards (default: all cores)");
      sub.add_option("--tensor-parallel-size", o->tensor_parallel_size,
                     "Tensor-parallel ranks per pipeline stage (also -tp)")
          ->capture_default_str();
      sub.add_option("--pipeline-parallel-size", o->pipeline_parallel_size, "Pipeline stages (also -pp)")
          ->capture_default_str();
      sub.add_option("--data-parallel-size", o->data_parallel_size,
                     "Replicas of the tp x pp shards, each on devices of its own (also -dp)")
          ->capture_default_str();
      sub.add_option("--distributed-executor-backend", o->distributed_executor_backend,
                     "Where shards run: uni (threads of this process), mp (one worker process per shard) or cluster");
      sub.add_option("--cluster-address", o->cluster_address,
                     "The cluster head for the cluster executor, HOST:PORT (default: $ACTORLLM_CLUSTER_ADDRESS)");
      sub.add_option("--pp-layer-partition", o->pp_layer_partition,
                     "Layers per pipeline stage, e.g. 3,2 (default: even, remainder to the stages before the last)");
      sub.add_flag("--enable-expert-parallel", o->enable_expert_parallel,
                   "MoE models: whole experts per rank of the expert-parallel group (dp x tp ranks: data-parallel "
                   "replicas step in lockstep), tokens dispatched to them");
      sub.add_flag("--enable-eplb", o->enable_eplb, "Expert-parallel load balancing (not implemented: refused)");
      add_context_parallel_flags(sub, o->decode_context_parallel_size, o->dcp_kv_cache_interleave_size,
                                 o->prefill_context_parallel_size);
      sub.add_option("--kv-cache-memory", o->kv_cache_memory, "KV-cache bytes per shard")->capture_default_str();
      return [o]() {
        if (o->prompt.empty() && o->prompt_ids.empty())
          throw std::invalid_argument("give --prompt TEXT or --prompt-ids 1,2,3");
        return run_generate(*o);
      };
    }};

}  // namespace
}  // namespace actorllm::app
