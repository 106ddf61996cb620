// Replicas: planning, finishing and stopping one, whatever executor spawned its shards.
#include "actors/executors/replica.hpp"

#include "actorllm/proto/error.hpp"
#include "actors/executors/cache_plan.hpp"
#include "actors/executors/shard_group.hpp"
#include "actors/runtime/engine_actor.hpp"
#include "actors/runtime/scheduler_actor.hpp"
#include "actors/runtime/shard_actor.hpp"
#include "comm/shared_memory_collective.hpp"
#include "kernels/kv_cache_dtype.hpp"
#include "model/model_error.hpp"
#include "model/model_source.hpp"
#include "text/tokenizer_error.hpp"
#include "util/log.hpp"

#include <caf/actor_system.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <thread>

namespace actorllm::actors {

namespace {

[[noreturn]] void throw_config(std::string message) { throw actorllm::error{errc::invalid_config, message}; }

/// The shares every sequence's cache is split into: one per rank of a context-parallel group.
int32_t context_parallel_shares(const engine_config& config) {
  return config.decode_context_parallel_size * std::max(1, config.prefill_context_parallel_size);
}

engine::scheduler_config make_scheduler_config(const engine_config& config, int32_t max_model_len) {
  engine::scheduler_config sc;
  sc.max_num_seqs = config.max_num_seqs;
  sc.max_num_batched_tokens = config.max_num_batched_tokens;
  // A block of the scheduler's tables covers block_size positions on every rank of a DCP group (kv_shard_layout).
  sc.block_size = config.block_size * context_parallel_shares(config);
  sc.n_blocks = 1;  // checked again with the real count once the block manager has it
  sc.max_model_len = max_model_len;
  sc.pp_size = config.pipeline_parallel_size;
  sc.enable_prefix_caching = config.enable_prefix_caching;
  if (config.enable_lora) {
    if (config.max_loras < 1)
      throw_config(fmt::format("max_loras must be at least 1 with enable_lora, got {}", config.max_loras));
    if (config.max_lora_rank < 1)
      throw_config(fmt::format("max_lora_rank must be at least 1, got {}", config.max_lora_rank));
    if (config.max_cpu_loras != 0 && config.max_cpu_loras < config.max_loras)
      throw_config(
          fmt::format("max_cpu_loras ({}) must be at least max_loras ({})", config.max_cpu_loras, config.max_loras));
    sc.max_loras = config.max_loras;
  }
  auto policy = engine::parse_scheduling_policy(config.scheduling_policy);
  if (!policy)
    throw_config(fmt::format("scheduling_policy: '{}' is not one of fcfs, priority", config.scheduling_policy));
  sc.policy = *policy;
  if (auto err = sc.validate())
    throw_config(err->message);
  if (!(config.step_timeout >= 0.0) || config.step_timeout > 1e6)
    throw_config(fmt::format("step_timeout: {} s is not in [0, 1e6] (0: no limit)", config.step_timeout));
  return sc;
}

void stop_actors(replica& r) {
  auto stop = [](const auto& handle) {
    if (handle)
      caf::anon_send_exit(handle, caf::exit_reason::user_shutdown);
  };
  stop(r.engine);
  stop(r.scheduler);
  for (const auto& s : r.shards)
    stop(s);
  stop(r.registry);
}

}  // namespace

replica_share share_of(const engine_config& config, const replica_slot& slot, int32_t hardware_threads) {
  replica_share share;
  const int32_t dp = std::max(1, slot.dp_size);
  share.local_replicas = config.data_parallel_size_local > 0 ? std::min(config.data_parallel_size_local, dp) : dp;
  share.local_index = std::max(0, slot.dp_rank) % share.local_replicas;
  share.device_offset = share.local_index * config.tensor_parallel_size * config.pipeline_parallel_size *
                        std::max(1, config.prefill_context_parallel_size);
  const int32_t threads = config.threads > 0 ? config.threads : std::max(1, hardware_threads);
  share.threads = std::max(1, threads / share.local_replicas);
  return share;
}

std::string replica_prefix(int32_t dp_rank, int32_t dp_size) {
  return dp_size > 1 ? fmt::format("replica {}: ", dp_rank) : std::string{};
}

namespace {

/// Context parallelism: vLLM's size rule, a block size its interleaved runs fill, and where it runs.
void check_context_parallel(const engine_config& config, const model::model_config& model) {
  const int32_t dcp = config.decode_context_parallel_size;
  if (dcp < 1)
    throw_config(fmt::format("decode_context_parallel_size must be at least 1, got {}", dcp));
  if (std::string why = model::check_decode_context_parallel(model.n_head_kv, config.tensor_parallel_size, dcp);
      !why.empty())
    throw_config(why);
  const int32_t interleave = config.dcp_kv_cache_interleave_size;
  if (interleave < 1 || config.block_size % interleave != 0)
    throw_config(fmt::format("dcp_kv_cache_interleave_size must be at least 1 and divide block_size ({}), got {}",
                             config.block_size, interleave));
  const int32_t pcp = config.prefill_context_parallel_size;
  if (pcp < 1)
    throw_config(fmt::format("prefill_context_parallel_size must be at least 1, got {}", pcp));
  if (pcp == 1)
    return;
  auto refuse = [&](const std::string& what) {
    throw_config(
        fmt::format("prefill_context_parallel_size {} with {}: prefill context parallelism runs with dense "
                    "models, without LoRA, only so far",
                    pcp, what));
  };
  if (model.n_expert > 0)
    refuse("a mixture-of-experts model");
  if (config.enable_lora)
    refuse("enable_lora");
}

/// Expert-parallel load balancing: vLLM's rules (expert parallelism on an MoE model, physical slots that split
/// evenly over the EP group), the settings' ranges, and what it cannot move yet.
void check_eplb(const engine_config& config, const model::model_config& model) {
  if (!config.enable_eplb)
    return;
  const eplb_config& e = config.eplb;
  if (!config.enable_expert_parallel)
    throw_config(
        "enable_eplb (--enable-eplb) needs enable_expert_parallel (--enable-expert-parallel): it balances "
        "the experts over the ranks of the expert-parallel group");
  if (model.n_expert <= 0)
    throw_config(
        fmt::format("enable_eplb (--enable-eplb): {} is not a mixture-of-experts model (no experts to "
                    "balance)",
                    model.architecture));
  if (e.window_size < 1)
    throw_config(fmt::format("eplb_config.window_size must be at least 1, got {}", e.window_size));
  if (e.step_interval < 1)
    throw_config(fmt::format("eplb_config.step_interval must be at least 1, got {}", e.step_interval));
  if (e.num_redundant_experts < 0)
    throw_config(fmt::format("eplb_config.num_redundant_experts must be at least 0, got {}", e.num_redundant_experts));
  // The EP group: the TP ranks of one replica, or of every replica when data-parallel replicas step in lockstep.
  const int64_t ep = int64_t{config.tensor_parallel_size} * std::max(config.data_parallel_size, 1);
  if (ep < 2)
    throw_config(
        "enable_eplb (--enable-eplb) needs more than one expert-parallel rank (tensor_parallel_size x "
        "data_parallel_size is 1): there is nothing to balance between");
  const int64_t n_physical = model.n_expert + e.num_redundant_experts;
  if (n_physical % ep != 0)
    throw_config(
        fmt::format("enable_eplb: the model's {} experts plus eplb_config.num_redundant_experts {} make {} "
                    "physical experts, which do not divide over the {} expert-parallel ranks",
                    model.n_expert, e.num_redundant_experts, n_physical, ep));
  if (n_physical / ep > model.n_expert)
    throw_config(
        fmt::format("enable_eplb: eplb_config.num_redundant_experts {} gives each of the {} expert-parallel "
                    "ranks {} expert slots, more than the model's {} experts",
                    e.num_redundant_experts, ep, n_physical / ep, model.n_expert));
  if (model.quant.quantized() || !config.quantization.empty())
    throw_config(
        fmt::format("enable_eplb with quantized weights ({}): moving quantized expert weights between ranks "
                    "is not implemented; serve the float checkpoint",
                    model.quant.quantized() ? model.quant.describe() : config.quantization));
}

}  // namespace

replica_plan plan_replica(const engine_config& config, const replica_slot& slot) {
  namespace fs = std::filesystem;
  replica_plan plan;
  replica& r = plan.r;
  const int32_t tp = config.tensor_parallel_size;
  const int32_t pp = config.pipeline_parallel_size;

  // Everything that config.json and the flags alone can refute, before a byte of weights is read.
  const device_choice chosen = resolve_device(config.device);
  if (!chosen.error.empty())
    throw_config(chosen.error);
  plan.device = chosen.kind;
  // A cluster's workers have their own devices (each checks its own); this process runs the other executors' shards.
  if (config.distributed_executor_backend != "cluster")
    if (std::string why = device_unusable_reason(plan.device); !why.empty())
      throw_config(why);
  auto format = model::parse_load_format(config.load_format);
  if (!format)
    throw_config(fmt::format("load_format: '{}' is not one of auto, safetensors, dummy", config.load_format));
  std::optional<dtype> weight_dtype;
  if (config.dtype != "auto") {
    weight_dtype = parse_dtype(config.dtype);
    if (!weight_dtype)
      throw_config(fmt::format("dtype: '{}' is not one of auto, float32, float16, bfloat16", config.dtype));
  }
  if (config.block_size < 1 || config.block_size > 256)
    throw_config(fmt::format("block_size must be in [1, 256], got {}", config.block_size));
  std::string kv_error;
  const auto kv_dtype = parse_kv_cache_dtype(config.kv_cache_dtype, kv_error);
  if (!kv_dtype)
    throw_config(kv_error);
  // A cluster's workers check their own device (shard_args_of); the others run where plan.device says.
  if (config.distributed_executor_backend != "cluster" && !kv_dtype->follows_model)
    if (std::string why = kv_cache_dtype_unsupported(kv_dtype->type, plan.device); !why.empty())
      throw_config(why);
  try {
    r.model = model::load_model_config(config.model);
    r.model.quant = model::resolve_quantization(
        r.model.quant, config.quantization.empty() ? std::nullopt : std::optional<std::string>(config.quantization));
  } catch (const model::model_error& e) {
    throw actorllm::error{errc::load_failed, e.what()};
  }
  if (r.model.quant.quantized())
    log::info("executor", "Quantization: {}", r.model.quant.describe());
  check_eplb(config, r.model);
  auto layout = plan_layout(r.model, tp, pp, config.pp_layer_partition, config.enable_expert_parallel);
  if (auto* err = std::get_if<std::string>(&layout))
    throw_config(*err);
  check_context_parallel(config, r.model);
  r.stages = std::get<std::vector<stage_range>>(layout);
  r.max_model_len = static_cast<int32_t>(r.model.max_position_embeddings);
  if (config.max_model_len > 0) {
    if (config.max_model_len > r.model.max_position_embeddings)
      throw_config(fmt::format("max_model_len {} is larger than the model's max_position_embeddings {}",
                               config.max_model_len, r.model.max_position_embeddings));
    r.max_model_len = config.max_model_len;
  } else if (config.max_model_len < 0) {
    throw_config(fmt::format("max_model_len must be positive (or 0 for the model's), got {}", config.max_model_len));
  }
  plan.scheduler = make_scheduler_config(config, r.max_model_len);
  if (config.enable_prefix_caching &&
      std::any_of(r.model.layer_window.begin(), r.model.layer_window.end(), [](int64_t w) { return w > 0; }))
    // A window only masks attention: no block is freed when it slides out, so a cached block holds exactly the KV a
    // recompute of the same tokens would write, and reusing it is as safe as for full attention.
    log::info("executor",
              "Prefix caching stays on for this sliding-window model (blocks are kept for the whole "
              "sequence, so cached KV equals recomputed KV)");

  fs::path tok_dir = config.tokenizer.empty() ? fs::path{config.model} : fs::path{config.tokenizer};
  if (config.skip_tokenizer_init) {
    log::info("executor", "--skip-tokenizer-init: no tokenizer; prompts must be token ids, outputs carry no text");
  } else if (fs::exists(tok_dir / "tokenizer.json")) {
    try {
      r.tokenizer = text::tokenizer::from_directory(tok_dir);
    } catch (const text::tokenizer_error& e) {
      throw actorllm::error{errc::load_failed, e.what()};
    }
  } else if (!config.tokenizer.empty()) {
    throw actorllm::error{errc::load_failed, fmt::format("{} has no tokenizer.json", tok_dir.string())};
  }

  if (slot.dp_size < 1 || slot.dp_rank < 0 || slot.dp_rank >= slot.dp_size)
    throw_config(fmt::format("replica {} of data_parallel_size {} does not exist (ranks are 0..{})", slot.dp_rank,
                             slot.dp_size, slot.dp_size - 1));
  r.dp_rank = slot.dp_rank;
  r.dp_size = slot.dp_size;
  plan.lockstep = slot.in_lockstep();
  plan.expert_store = slot.expert_store;
  plan.expert_prefix = slot.expert_prefix;
  const int32_t world = tp * pp * std::max(1, config.prefill_context_parallel_size);
  plan.share = share_of(config, slot, static_cast<int32_t>(std::max(1u, std::thread::hardware_concurrency())));
  plan.threads_per_shard = std::max(1, plan.share.threads / world);
  plan.load.format = *format;
  plan.load.weight_dtype = weight_dtype;
  plan.load.seed = config.seed;
  if (!config.quantization.empty())
    plan.load.quantization = config.quantization;
  return plan;
}

proto::shard_assignment make_shard_assignment(const engine_config& config, const replica_plan& plan, int32_t stage,
                                              int32_t index) {
  const replica& r = plan.r;
  const int32_t tp = config.tensor_parallel_size;
  const int32_t pp = config.pipeline_parallel_size;
  proto::shard_assignment a;
  a.model_dir = config.model;
  if (const std::filesystem::path dir = config.tokenizer.empty() ? config.model : config.tokenizer; !dir.empty())
    a.tokenizer = std::filesystem::absolute(dir).string();
  a.tp_rank = index % tp;
  a.tp_size = tp;
  a.pcp_size = std::max(1, config.prefill_context_parallel_size);
  a.pcp_rank = index / tp;
  a.layer_begin = r.stages[static_cast<size_t>(stage)].layer_begin;
  a.layer_end = r.stages[static_cast<size_t>(stage)].layer_end;
  a.stage = stage;
  a.pp_size = pp;
  a.expert_parallel = config.enable_expert_parallel;
  a.eplb = config.enable_eplb;
  a.eplb_redundant = config.eplb.num_redundant_experts;
  a.eplb_window = config.eplb.window_size;
  a.eplb_interval = config.eplb.step_interval;
  a.eplb_log = config.eplb.log_balancedness;
  a.dcp_size = config.decode_context_parallel_size;
  a.dcp_interleave = config.dcp_kv_cache_interleave_size;
  a.load_format = config.load_format;
  a.dtype = config.dtype;
  a.quantization = config.quantization;
  a.device = config.device;
  a.seed = config.seed;
  a.n_threads = plan.threads_per_shard;
  a.device_offset = plan.share.device_offset;
  a.dp_rank = r.dp_rank;
  a.dp_size = r.dp_size;
  a.lockstep = plan.lockstep;
  a.expert_store = plan.expert_store;
  a.expert_prefix = plan.expert_prefix;
  a.samples = stage == pp - 1 && index == 0;
  a.enforce_eager = config.enforce_eager;
  a.kv_cache_dtype = config.kv_cache_dtype;
  a.max_num_seqs = config.max_num_seqs;
  a.max_model_len = r.max_model_len;
  if (config.enable_lora) {
    a.max_loras = config.max_loras;
    a.max_lora_rank = config.max_lora_rank;
    a.max_cpu_loras = config.max_cpu_loras;
  }
  return a;
}

std::string describe_stages(const std::vector<stage_range>& stages) {
  std::vector<int64_t> n;
  for (const auto& s : stages)
    n.push_back(s.n_layers());
  return fmt::format("{}", fmt::join(n, ","));
}

void finish_replica(caf::actor_system& sys, const engine_config& config, replica_plan& plan) {
  replica& r = plan.r;
  caf::scoped_actor self{sys};
  try {
    // Load every shard's slice in parallel, then size the KV cache from their profiles and allocate it.
    ask_all<caf::ok_atom>(self, r.shards, proto::load_atom::value);
    const int32_t block_size = config.block_size * context_parallel_shares(config);
    const auto profiles = ask_all<proto::shard_profile>(self, r.shards, proto::profile_atom::value, block_size,
                                                        config.kv_cache_memory, config.max_num_batched_tokens);
    const cache_plan cache =
        plan_cache(profiles, block_size, config.kv_cache_memory, r.max_model_len, config.gpu_memory_utilization);
    if (!cache.error.empty())
      throw_config(cache.error);
    log_cache_plan(cache.config,
                   {plan.device == device_kind::cuda ? "GPU" : "CPU", config.decode_context_parallel_size,
                    config.prefill_context_parallel_size, r.max_model_len, profiles.front().kv_cache_dtype});
    ask_all<caf::ok_atom>(self, r.shards, proto::init_cache_atom::value, cache.config);
    r.cache = cache.config;

    // Scheduler and engine, then wire the shards' reports to the scheduler.
    plan.scheduler.n_blocks = r.cache.n_blocks;
    scheduler_args sa;
    sa.config = plan.scheduler;
    sa.step_timeout = std::chrono::milliseconds{static_cast<int64_t>(config.step_timeout * 1000.0)};
    sa.lockstep = plan.lockstep;
    for (const auto& shard : r.shards)
      sa.shards.push_back(shard);
    r.scheduler = spawn_scheduler(sys, std::move(sa));
    auto sink = caf::actor_cast<proto::result_sink>(r.scheduler);
    ask_all<caf::ok_atom>(self, r.shards, proto::connect_atom::value, sink);
    engine_args ea;
    ea.scheduler = r.scheduler;
    ea.tokenizer = r.tokenizer;
    ea.limits.n_vocab = r.model.n_vocab;
    ea.limits.max_model_len = r.max_model_len;
    ea.limits.eos_token_ids = r.model.eos_token_ids;
    ea.limits.seed = config.seed;
    r.engine = spawn_engine(sys, std::move(ea));
  } catch (...) {
    stop_actors(r);
    throw;
  }
}

void stop_replica(caf::actor_system& sys, replica& r, replica_stop how) {
  if (r.engine && how == replica_stop::drain) {
    caf::scoped_actor self{sys};
    // Bounded: a replica whose worker died must not hold the caller forever.
    self->request(r.engine, std::chrono::seconds{30}, proto::shutdown_atom::value)
        .receive([](caf::ok_atom) {},
                 [](caf::error& err) {
                   log::warning("executor", "shutdown did not drain cleanly: {}", proto::message_of(err));
                 });
  }
  stop_actors(r);
  // Worker processes exit once the registry is gone; the launcher makes sure.
  if (r.release_workers)
    r.release_workers();
  r.release_workers = nullptr;
  r.processes.clear();
}

}  // namespace actorllm::actors
