// A shard's step pipeline as a plain class (no actor, no CAF: it takes the engine's step plan and returns plain
// results): the backend, the TP group, the model, the KV cache, the block tables and the sampler state of one shard,
// and the one call that runs a step's plan: bookkeeping (the plan's block-table diff applied), the per-step inputs
// prepared once, the forward pass, and on the sampler shard the whole batch sampled in one call. shard_actor is the
// thin actor around it (as vLLM's GPUModelRunner is inside its worker).
#pragma once

#include "comm/collective.hpp"
#include "engine/step_plan.hpp"
#include "kernels/backend.hpp"
#include "model/decode_graphs.hpp"
#include "model/kv_cache.hpp"
#include "model/kv_cache_scales.hpp"
#include "model/llama_model.hpp"
#include "model/step_inputs.hpp"
#include "runner/persistent_batch.hpp"
#include "runner/sequence_samplers.hpp"
#include "runner/step_result.hpp"

#include <memory>
#include <string>

namespace actorllm::runner {

/// What a step produced on this shard: the hidden states for the next stage, or (sampler shard) the sampled tokens;
/// or what went wrong (`result.error`, or `error` before sampling).
struct step_output {
  tensor hidden;       ///< [n_tokens, n_embd] for the next stage; empty on the last stage
  step_result result;  ///< the sampler shard's tokens and timings
  std::string error;   ///< a plan this shard cannot run (the replica is then unusable)
};

/// Whether and how a runner replays decode steps as graphs (model/decode_graphs). Default: never (tools and tests
/// that build a runner directly run eagerly); the shard sets it from the engine config.
struct graph_options {
  bool enabled = false;       ///< engine_config::enforce_eager off (and a shard that asked for graphs)
  int32_t max_num_seqs = 0;   ///< the capture sizes go up to the first that holds it (model::decode_graph_sizes)
  int32_t max_model_len = 0;  ///< the graphs' block-table width; 0: the model's max_position_embeddings
};

/// One shard's model, cache and sampler state on one backend.
class model_runner {
 public:
  /// Builds the model from already-sliced weights. `samples`: this shard (tp rank 0 of the last stage) samples.
  /// `tokenizer`: the engine's tokenizer directory, whose vocabulary the sampler builds structured outputs' token masks
  /// over (sequence_samplers; empty: none). `expert_comm`: the expert-parallel group when it spans lockstep replicas
  /// (null: the TP group is the EP group).
  model_runner(std::unique_ptr<backend> be, std::unique_ptr<tp_collective> comm, const model::model_config& cfg,
               model::model_weights weights, const model::shard_spec& shard, bool samples, std::string tokenizer = {},
               std::unique_ptr<tp_collective> expert_comm = nullptr);

  const model::llama_model& model() const { return *model_; }
  backend& device_backend() { return *be_; }
  bool has_cache() const { return cache_ != nullptr; }
  /// Turns LoRA on (before the memory profile, so that the KV cache leaves room for the adapter slots).
  void enable_lora(const model::lora_limits& limits) { model_->enable_lora(limits); }
  /// Sets the KV cache's element type (resolved --kv-cache-dtype); takes effect at the next allocate_cache and in
  /// the model's cache_shape.
  void set_kv_cache_dtype(dtype type) { model_->set_kv_cache_dtype(type); }
  /// The scales of an fp8 KV cache, one per local layer (read_kv_cache_scales); applied at the next allocate_cache.
  void set_kv_cache_scales(std::vector<model::kv_scales> scales) { kv_scales_ = std::move(scales); }
  /// Sets how decode graphs are used; takes effect at the next allocate_cache.
  void set_graph_options(const graph_options& o) { graph_options_ = o; }
  /// Empty when allocate_cache captures decode graphs on this shard; else why its steps all run eagerly.
  std::string graphs_disabled_reason() const;
  /// Allocates the KV cache through the backend (std::bad_alloc when it does not fit), then captures the decode
  /// graphs over it when graphs_disabled_reason() is empty. A capture that fails is logged and the shard runs
  /// eagerly (what --enforce-eager does).
  void allocate_cache(int64_t block_size, int64_t n_blocks);
  /// The captured decode graphs (null when none).
  const model::decode_graphs* graphs() const { return graphs_.get(); }
  /// Steps run by replaying a graph so far.
  uint64_t graph_replays() const { return graph_replays_; }
  /// Device memory the decode graphs will keep beside the eager path (0 when none are captured): added to the
  /// profile's non-KV peak so that the KV cache leaves room for them (model::decode_graph_memory_for).
  size_t graph_memory_estimate(int64_t block_size) const;

  /// The memory profile of a step (vLLM's profile run): a forward of `n_tokens` prompt tokens of one sequence over
  /// a temporary cache, after which the backend's peak_in_use counts the weights and the largest activations but
  /// not that cache. Returns that peak less the temporary cache: the shard's non-KV peak. Every TP rank of a stage
  /// runs it at once (the forward's collectives pair them up).
  size_t profile_forward(int64_t n_tokens, int64_t block_size);
  /// A host tensor for `n_tokens` rows of hidden states arriving from the previous stage over a data-plane link
  /// (links move host memory; run() brings it to the backend's device).
  tensor hidden_input(int64_t n_tokens);
  /// As hidden_input, on this backend's device: for a link that moves device memory (NCCL).
  tensor device_hidden_input(int64_t n_tokens);
  /// `t` in host memory (itself when it is there already): a device backend's hidden states before a link sends
  /// them.
  tensor to_host(const tensor& t);

  /// Runs `plan` on this shard. `hidden_in`: the previous stage's hidden states (empty on the first stage), on this
  /// backend's device, in host memory or on another GPU (copied in first). Everything the step queued on the
  /// device has finished when it returns, so its outputs may be read from another stream or thread.
  /// Exceptions from the collectives (a lost peer, a timeout, a device communicator aborted meanwhile) propagate.
  step_output run(const engine::step_plan& plan, const tensor& hidden_in);

  /// Runs an idle plan (engine::step_plan::idle, lockstep expert parallelism): only the MoE layers' exchanges, in
  /// which this shard's experts serve the other replicas' tokens (model::llama_model::idle_step). Returns an error
  /// message for a shard that serves no experts (empty: done). Collective failures propagate as in run().
  std::string run_idle();

  /// Sampler state, for tests.
  const sequence_samplers& samplers() const { return samplers_; }

 private:
  step_output run_queued(const engine::step_plan& plan, const tensor& hidden_in);

  std::unique_ptr<backend> be_;
  std::unique_ptr<tp_collective> comm_;
  std::unique_ptr<tp_collective> expert_comm_;  // null unless the EP group spans replicas
  std::unique_ptr<model::llama_model> model_;
  std::unique_ptr<model::kv_cache> cache_;
  std::vector<model::kv_scales> kv_scales_;  // per local layer; empty: all 1
  graph_options graph_options_;
  std::unique_ptr<model::decode_graphs> graphs_;  // after cache_: destroyed first, it reads the cache
  uint64_t graph_replays_ = 0;
  model::step_input_builder inputs_;
  sequence_samplers samplers_;
  persistent_batch tables_;  // the block tables the plans built up, and the plan's batch in the model's terms
  std::vector<model::lora_source> lora_sources_;  // the step's adapters, reused from step to step
  bool samples_ = false;
};

}  // namespace actorllm::runner
