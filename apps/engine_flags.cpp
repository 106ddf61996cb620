// The engine settings' one table, and the command line's side of it: see engine_flags.hpp.
#include "apps/engine_flags.hpp"

#include "apps/command_registry.hpp"
#include "apps/eplb_config_text.hpp"
#include "kernels/device.hpp"
#include "kernels/kv_cache_dtype.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <limits>
#include <stdexcept>
#include <vector>

namespace actorllm::app {

namespace {

constexpr int64_t int32_max = std::numeric_limits<int32_t>::max();
constexpr int64_t int64_max = std::numeric_limits<int64_t>::max();

constexpr std::array<std::string_view, 3> load_formats{"auto", "safetensors", "dummy"};
constexpr std::array<std::string_view, 4> dtypes{"auto", "float32", "float16", "bfloat16"};
constexpr std::array<std::string_view, 2> scheduling_policies{"fcfs", "priority"};

using ec = engine_config;
using vk = value_kind;

/// The rows, grouped as the --config file's sections are.
const std::vector<engine_flag>& table() {
  static const std::vector<engine_flag> rows{
      // [model]
      {.names = "--dtype",
       .section = "model",
       .key = "dtype",
       .field = &ec::dtype,
       .kind = vk::choice,
       .help = "Weight dtype: auto, float32, float16, bfloat16",
       .show_default = true,
       .choices = dtypes},
      {.names = "--quantization,-q",
       .section = "model",
       .key = "quantization",
       .field = &ec::quantization,
       .help = "Quantized weights: empty follows the checkpoint's quantization_config (awq, gptq, fp8, "
               "compressed-tensors); naming one checks it (awq_marlin and gptq_marlin are aliases); fp8 on a float "
               "checkpoint quantizes its Linear weights at load"},
      {.names = "--load-format",
       .section = "model",
       .key = "load_format",
       .field = &ec::load_format,
       .kind = vk::choice,
       .help = "auto, safetensors, or dummy (random weights)",
       .show_default = true,
       .choices = load_formats},
      {.names = "--max-model-len",
       .section = "model",
       .key = "max_model_len",
       .field = &ec::max_model_len,
       .kind = vk::integer,
       .help = "Context length limit (default: the model's)",
       .min = 0,
       .max = int32_max},
      {.names = "--seed",
       .section = "model",
       .key = "seed",
       .field = &ec::seed,
       .kind = vk::integer,
       .help = "Seed of the sampler (a server's: of requests that bring none) and of dummy weights",
       .show_default = true,
       .min = 0,
       .max = int64_max},
      {.names = "--enforce-eager",
       .section = "model",
       .key = "enforce_eager",
       .field = &ec::enforce_eager,
       .kind = vk::flag,
       .help = "Run every step eagerly: no CUDA graphs of decode steps (by default a CUDA engine of one shard "
               "captures them for batch sizes 1, 2, 4, 8, ... up to max_num_seqs, at most 512)"},
      // [lora]
      {.names = "--enable-lora",
       .section = "lora",
       .key = "enable_lora",
       .field = &ec::enable_lora,
       .kind = vk::flag,
       .help = "Serve LoRA adapters (PEFT directories) beside the base model: --lora-modules, "
               "/v1/load_lora_adapter and /v1/unload_lora_adapter; a request's model picks one, and requests of "
               "different adapters share a batch",
       .serve_only = true},
      {.names = "--max-loras",
       .section = "lora",
       .key = "max_loras",
       .field = &ec::max_loras,
       .kind = vk::integer,
       .help = "Most LoRA adapters running at once (their device slots)",
       .serve_only = true,
       .show_default = true,
       .min = 1,
       .max = int32_max},
      {.names = "--max-lora-rank",
       .section = "lora",
       .key = "max_lora_rank",
       .field = &ec::max_lora_rank,
       .kind = vk::integer,
       .help = "Largest LoRA rank an adapter may have",
       .serve_only = true,
       .show_default = true,
       .min = 1,
       .max = int32_max},
      {.names = "--max-cpu-loras",
       .section = "lora",
       .key = "max_cpu_loras",
       .field = &ec::max_cpu_loras,
       .kind = vk::integer,
       .help = "Parsed adapters kept in host memory (0: --max-loras)",
       .serve_only = true,
       .show_default = true,
       .min = 0,
       .max = int32_max},
      // [parallel]
      {.names = "--tensor-parallel-size",
       .alias = "-tp",
       .section = "parallel",
       .key = "tensor_parallel_size",
       .field = &ec::tensor_parallel_size,
       .kind = vk::integer,
       .help = "Tensor-parallel ranks per pipeline stage (also -tp)",
       .show_default = true,
       .min = 1,
       .max = int32_max},
      {.names = "--pipeline-parallel-size",
       .alias = "-pp",
       .section = "parallel",
       .key = "pipeline_parallel_size",
       .field = &ec::pipeline_parallel_size,
       .kind = vk::integer,
       .help = "Pipeline stages (also -pp)",
       .show_default = true,
       .min = 1,
       .max = int32_max},
      {.names = "--data-parallel-size",
       .alias = "-dp",
       .section = "parallel",
       .key = "data_parallel_size",
       .field = &ec::data_parallel_size,
       .kind = vk::integer,
       .help = "Replicas of the tp x pp shards behind one engine, each on devices of its own (also -dp)",
       .show_default = true,
       .min = 1,
       .max = int32_max},
      {.names = "--data-parallel-size-local",
       .section = "parallel",
       .key = "data_parallel_size_local",
       .field = &ec::data_parallel_size_local,
       .kind = vk::integer,
       .help = "Replicas on this node's devices (default: all for uni/mp; the cluster executor places them "
               "over the nodes)",
       .serve_only = true,
       .min = 0,
       .max = int32_max},
      {.names = "--data-parallel-rank",
       .section = "parallel",
       .key = "data_parallel_rank",
       .field = &ec::data_parallel_rank,
       .kind = vk::integer,
       .help = "External load balancing: serve only replica R of --data-parallel-size, on R's devices, at "
               "this server's own --port",
       .serve_only = true,
       .min = -1,
       .max = int32_max},
      {.names = "--pp-layer-partition",
       .section = "parallel",
       .key = "pp_layer_partition",
       .field = &ec::pp_layer_partition,
       .kind = vk::partition,
       .help = "Layers per pipeline stage, e.g. 3,2 (default: even, remainder to the stages before the last)"},
      {.names = "--enable-expert-parallel",
       .section = "parallel",
       .key = "enable_expert_parallel",
       .field = &ec::enable_expert_parallel,
       .kind = vk::flag,
       .help = "MoE models: whole experts per rank of the expert-parallel group (dp x tp ranks: data-parallel "
               "replicas step in lockstep), tokens dispatched to them"},
      {.names = "--enable-eplb",
       .section = "parallel",
       .key = "enable_eplb",
       .field = &ec::enable_eplb,
       .kind = vk::flag,
       .help = "Expert-parallel load balancing (with --enable-expert-parallel): redundant copies of the hottest "
               "experts, rearranged between steps from the measured load (see --eplb-config)"},
      {.names = "--eplb-config",
       .section = "parallel",
       .key = "eplb_config",
       .field = &ec::eplb,
       .kind = vk::eplb,
       .help = "vLLM's EPLB settings as JSON: window_size (steps of load, default 1000), step_interval (steps "
               "between rearrangements, 3000), num_redundant_experts (0), log_balancedness (false)"},
      {.names = "--prefill-context-parallel-size",
       .alias = "-pcp",
       .section = "parallel",
       .key = "prefill_context_parallel_size",
       .field = &ec::prefill_context_parallel_size,
       .kind = vk::integer,
       .help = "Prefill context parallelism (also -pcp): copies of each stage's TP group (tp x pp x pcp ranks) "
               "split every step's rows and share the KV cache by positions",
       .show_default = true,
       .min = 1,
       .max = int32_max},
      {.names = "--decode-context-parallel-size",
       .alias = "-dcp",
       .section = "parallel",
       .key = "decode_context_parallel_size",
       .field = &ec::decode_context_parallel_size,
       .kind = vk::integer,
       .help = "Decode context parallelism (also -dcp): TP ranks that would each hold a copy of one kv head's "
               "cache split it by positions in groups of this size (a divisor of tp / num_key_value_heads); the "
               "KV capacity in tokens grows by it",
       .show_default = true,
       .min = 1,
       .max = int32_max},
      {.names = "--dcp-kv-cache-interleave-size,--cp-kv-cache-interleave-size",
       .section = "parallel",
       .key = "dcp_kv_cache_interleave_size",
       .field = &ec::dcp_kv_cache_interleave_size,
       .kind = vk::integer,
       .help = "Positions a decode-context-parallel rank keeps in a row before the next rank's run (divides "
               "--block-size)",
       .show_default = true,
       .min = 1,
       .max = 256},
      {.names = "--distributed-executor-backend",
       .section = "parallel",
       .key = "distributed_executor_backend",
       .field = &ec::distributed_executor_backend,
       .kind = vk::executor,
       .help = "Where the shards run: uni (threads of this process), mp (one worker process per shard) or "
               "cluster (nodes joined to a head). Default: uni for one shard, mp when this node has a device "
               "per shard ($ACTORLLM_CPU_DEVICES CPU devices, default 1), else uni threads"},
      {.names = "--num-threads",
       .section = "parallel",
       .key = "num_threads",
       .field = &ec::threads,
       .kind = vk::integer,
       .help = "CPU threads for the kernels, over all shards (default: all cores)",
       .min = 0,
       .max = int32_max},
      {.names = "--max-worker-restarts",
       .section = "parallel",
       .key = "max_worker_restarts",
       .field = &ec::max_worker_restarts,
       .kind = vk::integer,
       .help = "mp/cluster: times dead worker processes are restarted before the server exits non-zero "
               "(0: never)",
       .serve_only = true,
       .show_default = true,
       .min = 0,
       .max = int32_max},
      {.names = "--device",
       .section = "parallel",
       .key = "device",
       .field = &ec::device,
       .kind = vk::device,
       .help = "Device the shards run on: cpu, cuda, or auto (CUDA when this machine has a GPU)",
       .show_default = true},
      // [scheduler]
      {.names = "--max-num-seqs",
       .section = "scheduler",
       .key = "max_num_seqs",
       .field = &ec::max_num_seqs,
       .kind = vk::integer,
       .help = "Most sequences running at once",
       .serve_only = true,
       .show_default = true,
       .min = 1,
       .max = int32_max},
      {.names = "--max-num-batched-tokens",
       .section = "scheduler",
       .key = "max_num_batched_tokens",
       .field = &ec::max_num_batched_tokens,
       .kind = vk::integer,
       .help = "Tokens per step (prefill chunk)",
       .show_default = true,
       .min = 1,
       .max = int32_max},
      {.names = "--step-timeout",
       .section = "scheduler",
       .key = "step_timeout",
       .field = &ec::step_timeout,
       .kind = vk::number,
       .help = "Seconds a step may go without a result before the replica counts as failed (its requests "
               "end with the reason; worker processes restart), stretched for a step of many tokens by the pace "
               "of recent steps; 0: no limit",
       .serve_only = true,
       .show_default = true},
      {.names = "--scheduling-policy",
       .section = "scheduler",
       .key = "scheduling_policy",
       .field = &ec::scheduling_policy,
       .kind = vk::choice,
       .help = "fcfs (first come first served) or priority (lower `priority` first, then arrival)",
       .serve_only = true,
       .show_default = true,
       .choices = scheduling_policies},
      // [cache]
      {.names = "--block-size",
       .section = "cache",
       .key = "block_size",
       .field = &ec::block_size,
       .kind = vk::integer,
       .help = "Tokens per KV-cache block",
       .show_default = true,
       .min = 1,
       .max = 256},
      {.names = "--gpu-memory-utilization",
       .section = "cache",
       .key = "gpu_memory_utilization",
       .field = &ec::gpu_memory_utilization,
       .kind = vk::fraction,
       .help = "Share of each GPU's memory the engine may use, in (0, 1]; GPU backends only (the CPU backend "
               "sizes its KV cache with --kv-cache-memory)",
       .serve_only = true,
       .show_default = true},
      {.names = "--kv-cache-memory",
       .section = "cache",
       .key = "kv_cache_memory",
       .field = &ec::kv_cache_memory,
       .kind = vk::bytes,
       .help = "KV-cache bytes per shard (e.g. 4GiB, 512MiB)",
       .show_default = true},
      {.names = "--kv-cache-dtype",
       .section = "cache",
       .key = "kv_cache_dtype",
       .field = &ec::kv_cache_dtype,
       .kind = vk::kv_dtype,
       .help = "KV-cache element type: auto (the model's dtype: bf16 for a bf16 model), bfloat16, float16, "
               "float32, or fp8 / fp8_e4m3 (e4m3 with a scale per layer's k and v; GPU only)",
       .show_default = true},
      {.names = "--enable-prefix-caching,!--no-enable-prefix-caching",
       .section = "cache",
       .key = "enable_prefix_caching",
       .field = &ec::enable_prefix_caching,
       .kind = vk::flag,
       .help = "Reuse the KV blocks of prompt prefixes computed before (default: on)"},
      // [server]: the engine's part of it.
      {.names = "--skip-tokenizer-init",
       .section = "server",
       .key = "skip_tokenizer_init",
       .field = &ec::skip_tokenizer_init,
       .kind = vk::flag,
       .help = "Load no tokenizer: prompts must be token ids, outputs carry token ids and no text (chat and "
               "text prompts answer 400)",
       .serve_only = true},
      // [cluster]
      {.names = "--cluster-address",
       .section = "cluster",
       .key = "head_address",
       .field = &ec::cluster_address,
       .help = "The cluster head (`actorllm node --head`) for the cluster executor, HOST:PORT (default: "
               "$ACTORLLM_CLUSTER_ADDRESS)"},
      {.names = "--cluster-token",
       .section = "cluster",
       .key = "token",
       .field = &ec::cluster_token,
       .help = "The cluster's shared token (default: $ACTORLLM_CLUSTER_TOKEN)",
       .serve_only = true},
      // The TLS flags are add_cluster_tls_options' (node, status and check take them too).
      {.section = "cluster",
       .key = "tls_cert",
       .field = &ec::cluster_tls_certificate,
       .kind = vk::path,
       .serve_only = true},
      {.section = "cluster", .key = "tls_key", .field = &ec::cluster_tls_key, .kind = vk::path, .serve_only = true},
      {.section = "cluster", .key = "tls_ca", .field = &ec::cluster_tls_ca_file, .kind = vk::path, .serve_only = true},
  };
  return rows;
}

bool takes(const engine_flag& f, engine_command command) {
  return !f.names.empty() && (command == engine_command::serve || !f.serve_only);
}

/// The aliases, registered once for every command (main() rewrites "-tp 2" before parsing).
const bool aliases_registered = [] {
  for (const engine_flag& f : table())
    if (!f.alias.empty())
      option_aliases().insert_or_assign(std::string{f.alias}, std::string{f.flag_name()});
  return true;
}();

std::string joined(std::span<const std::string_view> values) {
  std::string out;
  for (std::string_view v : values)
    out += fmt::format("{}{}", out.empty() ? "" : ", ", v);
  return out;
}

int64_t integer_of(const engine_config& cfg, const engine_field& field) {
  if (const auto* m = std::get_if<int32_t engine_config::*>(&field))
    return cfg.**m;
  const uint64_t v = cfg.*std::get<uint64_t engine_config::*>(field);
  return v > static_cast<uint64_t>(int64_max) ? int64_max : static_cast<int64_t>(v);
}

}  // namespace

std::string_view engine_flag::flag_name() const {
  std::string_view first = names.substr(0, names.find(','));
  return first.starts_with('!') ? first.substr(1) : first;
}

std::span<const engine_flag> engine_flags() { return table(); }

std::shared_ptr<engine_flag_texts> add_engine_flags(CLI::App& sub, engine_config& cfg, engine_command command) {
  (void)aliases_registered;
  auto given = std::make_shared<engine_flag_texts>();
  for (const engine_flag& f : table()) {
    if (!takes(f, command))
      continue;
    const std::string names{f.names};
    const std::string help{f.help};
    if (f.kind == value_kind::bytes) {
      // Held as given ("4GiB") until check_engine_flags converts it, so that a bad value is refused like the others.
      auto* opt = sub.add_option_function<std::string>(
          names, [given, flag = f.flag_name()](const std::string& text) { given->bytes[flag] = text; }, help);
      if (f.show_default)
        opt->default_str(fmt::format("{}GiB", cfg.*std::get<uint64_t engine_config::*>(f.field) >> 30));
      continue;
    }
    if (f.kind == value_kind::eplb) {  // JSON, read by check_engine_flags
      sub.add_option_function<std::string>(
          names, [given, flag = f.flag_name()](const std::string& text) { given->json[flag] = text; }, help);
      continue;
    }
    std::visit(
        [&](auto member) {
          using T = std::remove_reference_t<decltype(cfg.*member)>;
          CLI::Option* opt = nullptr;
          if constexpr (std::is_same_v<T, eplb_config>)
            return;  // handled above
          else if constexpr (std::is_same_v<T, bool>)
            opt = sub.add_flag(names, cfg.*member, help);
          else
            opt = sub.add_option(names, cfg.*member, help);
          if (f.show_default)
            opt->capture_default_str();
        },
        f.field);
  }
  return given;
}

void check_engine_flags(engine_config& cfg, const engine_flag_texts& given, engine_command command) {
  validate_data_parallel(cfg.data_parallel_size, cfg.data_parallel_size_local, cfg.data_parallel_rank);
  for (const engine_flag& f : table()) {
    if (!takes(f, command))
      continue;
    const std::string_view flag = f.flag_name();
    switch (f.kind) {
      case value_kind::integer:
        if (const int64_t v = integer_of(cfg, f.field); v < f.min || v > f.max)
          throw std::invalid_argument(f.max == int32_max || f.max == int64_max
                                          ? fmt::format("{}: must be >= {}, got {}", flag, f.min, v)
                                          : fmt::format("{}: must be in [{}, {}], got {}", flag, f.min, f.max, v));
        break;
      case value_kind::fraction:
        if (const double v = cfg.*std::get<double engine_config::*>(f.field); !(v > 0 && v <= 1))
          throw std::invalid_argument(fmt::format("{}: must be in (0, 1], got {}", flag, v));
        break;
      case value_kind::choice: {
        const std::string& v = cfg.*std::get<std::string engine_config::*>(f.field);
        if (std::find(f.choices.begin(), f.choices.end(), v) == f.choices.end())
          throw std::invalid_argument(fmt::format("{}: '{}' is not one of {}", flag, v, joined(f.choices)));
        break;
      }
      case value_kind::device:
        if (const device_choice chosen = resolve_device(cfg.*std::get<std::string engine_config::*>(f.field));
            !chosen.error.empty())
          throw std::invalid_argument(chosen.error);  // names --device and the value
        break;
      case value_kind::kv_dtype: {
        std::string why;
        if (!parse_kv_cache_dtype(cfg.*std::get<std::string engine_config::*>(f.field), why))
          throw std::invalid_argument(why);  // names --kv-cache-dtype and the value
        break;
      }
      case value_kind::bytes:
        if (auto text = given.bytes.find(flag); text != given.bytes.end()) {
          uint64_t bytes = 0;
          if (std::string why = parse_bytes(text->second, bytes); !why.empty())
            throw std::invalid_argument(fmt::format("{}: {}", flag, why));
          cfg.*std::get<uint64_t engine_config::*>(f.field) = bytes;
        }
        break;
      case value_kind::eplb:
        if (auto text = given.json.find(flag); text != given.json.end())
          if (std::string why = parse_eplb_config(text->second, cfg.*std::get<eplb_config engine_config::*>(f.field));
              !why.empty())
            throw std::invalid_argument(fmt::format("{}: {}", flag, why));
        break;
      default:
        break;
    }
  }
}

void validate_data_parallel(int size, int size_local, int rank) {
  if (size < 1)
    throw std::invalid_argument(fmt::format("--data-parallel-size: must be at least 1, got {}", size));
  if (size_local < 0 || size_local > size)
    throw std::invalid_argument(fmt::format(
        "--data-parallel-size-local: must be in [0, --data-parallel-size {}] (0: as the executor decides), got {}",
        size, size_local));
  if (rank < -1 || rank >= size)
    throw std::invalid_argument(
        fmt::format("--data-parallel-rank: must be in [0, --data-parallel-size {}), got {}", size, rank));
}

std::string parse_bytes(std::string_view s, uint64_t& out) {
  std::size_t end = 0;
  while (end < s.size() && std::isdigit(static_cast<unsigned char>(s[end])) != 0)
    ++end;
  if (end == 0)
    return fmt::format("'{}' is not a byte count like 4GiB", s);
  const uint64_t n = std::stoull(std::string{s.substr(0, end)});
  const std::string_view unit = s.substr(end);
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
    return fmt::format("unknown unit '{}' (use B, KiB, MiB or GiB)", unit);
  out = n * mult;
  return {};
}

}  // namespace actorllm::app
