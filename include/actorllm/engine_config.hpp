// How to build an engine: the model, its parallel layout, and the limits of continuous batching, named as vLLM's
// engine arguments name them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace actorllm {

/// vLLM's EPLBConfig (--eplb-config, a JSON object with these keys): how expert-parallel load balancing measures
/// the experts' load and how often it moves them.
struct eplb_config {
  int32_t window_size = 1000;         ///< steps whose expert load a rearrangement balances (at least 1)
  int32_t step_interval = 3000;       ///< steps between rearrangements (at least 1)
  int32_t num_redundant_experts = 0;  ///< physical expert slots beyond the model's experts, for copies of hot ones
  bool log_balancedness = false;      ///< log every rearrangement: its balancedness before and after, its duration

  friend bool operator==(const eplb_config&, const eplb_config&) = default;
};

/// The settings of one engine replica (actorllm::LLM, `actorllm generate`).
struct engine_config {
  std::string model;      ///< model directory (Hugging Face layout: config.json, *.safetensors, tokenizer.json)
  std::string tokenizer;  ///< tokenizer directory; empty: the model directory (a model without one takes token ids)
  int32_t tensor_parallel_size = 1;    ///< TP ranks per pipeline stage (threads sharing memory in this process)
  int32_t pipeline_parallel_size = 1;  ///< pipeline stages
  /// vLLM's --data-parallel-size: replicas of the tp × pp shards behind one endpoint (this engine's load balancer
  /// routes each request to one of them, and moves it to another when its replica dies).
  int32_t data_parallel_size = 1;
  /// vLLM's --data-parallel-size-local: how many of the replicas run on this node's devices; 0: as the executor
  /// decides (all of them for uni and mp; the cluster executor places replicas over the cluster's nodes).
  int32_t data_parallel_size_local = 0;
  /// vLLM's --data-parallel-rank (external load balancing): this process serves only replica `data_parallel_rank`
  /// of data_parallel_size, on that replica's devices, with an endpoint of its own; -1: every replica here.
  int32_t data_parallel_rank = -1;
  /// Layers per stage, e.g. "3,2"; empty: vLLM's even split with the remainder on the earlier stages.
  std::string pp_layer_partition;
  /// vLLM's --enable-expert-parallel: MoE layers place whole experts on the ranks of the expert-parallel group
  /// and dispatch tokens to them, instead of splitting every expert over the TP ranks. The EP group is
  /// data_parallel_size × tensor_parallel_size ranks, as in vLLM: with more than one replica they step in lockstep
  /// in one process (actors/executors/lockstep_replicas.hpp; uni executor, one pipeline stage, else refused). No effect
  /// on dense models.
  bool enable_expert_parallel = false;
  /// vLLM's --enable-eplb: expert-parallel load balancing. Needs enable_expert_parallel and an MoE model: every
  /// rank of the EP group holds (n_expert + eplb.num_redundant_experts) / ep_size physical expert slots (which must
  /// divide), the hottest experts get the redundant copies, each token goes to one replica of its expert, and every
  /// eplb.step_interval steps the placement is computed again from the last eplb.window_size steps' load and the
  /// expert weights move between the ranks (between two steps; docs/architecture.md gives the stall's bound).
  bool enable_eplb = false;
  eplb_config eplb;  ///< vLLM's --eplb-config; read only with enable_eplb
  /// vLLM's --decode-context-parallel-size (-dcp): where tensor_parallel_size exceeds the model's kv heads, the
  /// tp / num_key_value_heads ranks that would each hold a copy of one kv head's cache instead split it by positions
  /// in groups of this many (vLLM's rule: a divisor of tp / num_key_value_heads). A block then covers block_size
  /// positions on each rank of a group, block_size × dcp in all, so the KV capacity in tokens grows by this factor;
  /// each decode step reads 1/dcp of a sequence's keys per rank. Every executor and backend (CUDA: never yet run
  /// on a GPU).
  int32_t decode_context_parallel_size = 1;
  /// vLLM's --dcp-kv-cache-interleave-size: the positions a DCP rank keeps in a row before the next rank's run; it
  /// must divide block_size.
  int32_t dcp_kv_cache_interleave_size = 1;
  /// vLLM's --prefill-context-parallel-size (-pcp): this many copies of each stage's TP group (more ranks: tp × pp ×
  /// pcp per replica) split every step's rows between them, so a long prompt's prefill runs its dense layers on
  /// 1/pcp of the tokens per rank; attention runs over the copies together and their caches split every sequence's
  /// positions with the DCP ranks (the KV capacity in tokens grows by pcp × dcp). Every executor; dense models and no
  /// LoRA so far.
  int32_t prefill_context_parallel_size = 1;
  int32_t max_num_seqs = 256;             ///< most sequences running at once
  int32_t max_num_batched_tokens = 2048;  ///< most tokens per step; longer prompts are prefilled in chunks
  int32_t block_size = 16;                ///< token slots per KV-cache block
  /// vLLM's --kv-cache-dtype: the element type of the KV cache. auto: the model's dtype (a bf16 model's cache is
  /// bf16: half the bytes per token of f32); bfloat16, float16, float32; fp8 (fp8_e4m3: e4m3 codes with a scale per
  /// layer's k and v, GPU only).
  std::string kv_cache_dtype = "auto";
  /// Bytes of KV cache each shard may use (vLLM's VLLM_CPU_KVCACHE_SPACE); the block count is the minimum over the
  /// shards of what fits.
  size_t kv_cache_memory = size_t{4} << 30;
  int32_t max_model_len = 0;         ///< context limit; 0: the model's max_position_embeddings
  std::string load_format = "auto";  ///< auto, safetensors or dummy (seeded random weights)
  std::string dtype = "auto";        ///< weight dtype: auto, float32, float16, bfloat16
  /// --quantization: empty to follow the checkpoint's quantization_config; awq, gptq, compressed-tensors (their
  /// marlin aliases) to check it; fp8 to quantize a float checkpoint's Linear weights at load.
  std::string quantization;
  std::string device = "auto";             ///< --device: "cpu", "cuda" or "auto" (CUDA when a GPU is visible)
  uint64_t seed = 0;                       ///< seed of dummy weights and of requests that bring none
  int32_t threads = 0;                     ///< kernel threads over all shards; 0: every core
  std::string scheduling_policy = "fcfs";  ///< fcfs or priority
  /// Reuse the KV blocks of prompt prefixes computed before (vLLM's --enable-prefix-caching, on by default).
  bool enable_prefix_caching = true;
  /// vLLM's --skip-tokenizer-init: load no tokenizer even where the model has one; prompts are token ids and
  /// outputs carry ids without text.
  bool skip_tokenizer_init = false;
  /// vLLM's --enforce-eager: run every step eagerly. Off (the default), a CUDA shard that is the whole model (one
  /// stage, one TP rank, dense) captures CUDA graphs of its decode steps for batch sizes 1, 2, 4, 8, ... up to
  /// max_num_seqs (at most 512) and replays them, padding a batch up to the next size.
  bool enforce_eager = false;
  /// vLLM's --enable-lora: requests may name a PEFT LoRA adapter (prompt::with_lora); the shards keep max_loras
  /// adapter slots of rank max_lora_rank in every adaptable Linear, and a step mixes rows of different adapters and
  /// of the base model. Adapters are read from disk when a step first needs them and kept parsed in host memory for
  /// max_cpu_loras of them (0: max_loras).
  bool enable_lora = false;
  int32_t max_loras = 1;       ///< vLLM's --max-loras: adapters running at once
  int32_t max_lora_rank = 16;  ///< vLLM's --max-lora-rank: the largest rank an adapter may have
  int32_t max_cpu_loras = 0;   ///< vLLM's --max-cpu-loras
  /// Share of a GPU's memory the engine may use (weights, activations, KV cache), in (0, 1]. The CPU backend sizes
  /// its KV cache by kv_cache_memory instead, as vLLM's CPU backend does.
  double gpu_memory_utilization = 0.9;
  /// Where the shards run: "uni" (threads of this process), "mp" or "cluster"; empty: chosen by world size.
  std::string distributed_executor_backend;
  /// Executor `cluster`: the head's address (`actorllm node --head`), HOST:PORT; empty: no cluster configured.
  std::string cluster_address;
  /// The cluster's shared token (also $ACTORLLM_CLUSTER_TOKEN): at least 32 characters, 8 of them distinct.
  std::string cluster_token;
  /// Executors mp and cluster: TLS for every control-plane connection (terminated by actorllm's own threads, both
  /// ends authenticated by one CA). PEM files: this engine's certificate, its unencrypted key and the CA; all three or
  /// none. Empty: $ACTORLLM_TLS_CERT, $ACTORLLM_TLS_KEY, $ACTORLLM_TLS_CA. Tensors between workers (Gloo) are not
  /// encrypted.
  std::string cluster_tls_certificate;
  std::string cluster_tls_key;
  std::string cluster_tls_ca_file;
  /// Seconds a step may go without a result before the replica counts as failed, like a dead shard (its requests
  /// end with the reason, workers restart): a shard or link that stopped answering without going down. 0: no limit.
  double step_timeout = 300.0;
  /// Executors with worker processes: restart the workers after one dies (the replica is unhealthy meanwhile).
  bool restart_workers = true;
  /// Restarts before giving up (then the failure handler runs: `actorllm serve` exits non-zero).
  int32_t max_worker_restarts = 3;
};

}  // namespace actorllm
